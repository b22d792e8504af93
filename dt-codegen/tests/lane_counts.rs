//! Pass `online` keeps a looped row's variance as running statistics per run of lanes, each with
//! a count of the lanes it has seen; the partial step at the row's end counts only the lanes
//! inside the row. That count must be exact at any column: a lane index compared with the row
//! length as f32 rounds past 2^24 columns. A row of 2^24 + 1 columns whose last element alone is
//! not 0 then loses that element's count, and with it nearly all of the row's variance.

use dt_core::tensor::{Args, Tensor};
use dt_core::DType;

const LAYERNORM: &str = "Func mean, var, out; In X; Var x; RVar y;
    mean[x] = rsum(X[x, y], y) / len(y);
    var[x] = rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y) / len(y);
    out[x, y] = (X[x, y] - mean[x]) * rsqrt(var[x] + 0.00001);
    out.block(x:1); out.tensorize(x:0, y:1024); mean.fuse_at(out, x); var.fuse_at(out, x);
    out.compile();";

#[test]
fn looped_statistics_count_lanes_past_2_pow_24() {
    let p = dt_core::compile_spec(LAYERNORM).expect("spec checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let k = &kernels[0];
    let symbol = dt_codegen::emit::symbol(k, DType::F32);
    let c = dt_codegen::emit::c::emit_file("lane counts", &[(k, DType::F32, symbol.clone())]).expect("emits");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lane_counts").join(std::process::id().to_string());
    let lib = dt_codegen::host::compile_with(&c, &dir, "lane_counts", "-O1").unwrap_or_else(|e| panic!("{e}"));

    let cols = (1usize << 24) + 1;
    let big = 4096.0f32;
    let mut x = vec![0.0f32; cols];
    x[cols - 1] = big;
    let args = Args::default().input("X", Tensor::new(vec![1, cols], x));
    let bound = dt_core::tensor::bind(&p, p.kernels[0], &args).expect("binds");
    let got = lib.run(&symbol, k, &bound, DType::F32).unwrap_or_else(|e| panic!("{e}"));

    // What the spec means, in f64 (len(y) is the row length as f32, 2^24).
    let len = cols as f32 as f64;
    let mean = big as f64 / len;
    let var = ((cols - 1) as f64 * mean * mean + (big as f64 - mean).powi(2)) / len;
    let rstd = 1.0 / (var + 1e-5).sqrt();
    for (i, want) in [(0, -mean * rstd), (cols / 2, -mean * rstd), (cols - 1, (big as f64 - mean) * rstd)] {
        let g = got.data[i] as f64;
        assert!((g - want).abs() <= 1e-3 * want.abs(), "element {i}: got {g}, want {want}");
    }
}
