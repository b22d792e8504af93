//! Twins for specialized sizes (`specialize(y:N)`, `Layouts::Specialized`): beside a kernel
//! whose schedule specializes a size, the emitted file holds one (`_exact`) that takes that size
//! and every stride (its tensors are contiguous) as constants, so that the C compiler folds the
//! addresses and bounds. That it computes what the reference does is checked by
//! `hip_cpu_matches_reference` (on the CPU) and `gpu_matches_reference`, at its sizes.

mod common;

use common::{emitted, kernel_text};
use dt_codegen::emit::gpu::{self, Layouts};
use dt_core::DType;

/// Layernorm of rows held in registers, specialized for rows of `cols`.
fn layernorm(cols: u32) -> String {
    format!(
        "Func mean, var, out; In X, W, B; SIn eps; Var x; RVar y;
        mean[x] = rsum(X[x, y], y) / len(y);
        var[x] = rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y) / len(y);
        out[x, y] = (X[x, y] - mean[x]) * rsqrt(var[x] + eps) * W[y] + B[y];
        out.block(x:1); out.tensorize(x:0, y:0); out.bound(y:1024); out.num_warps(2);
        out.specialize(y:{cols});
        mean.fuse_at(out, x); var.fuse_at(out, x);
        out.dtypes(f16, f32); out.compile();"
    )
}

#[test]
fn specialized_twins_take_sizes_and_strides_as_constants() {
    for dtype in [DType::F16, DType::F32] {
        let (file, kernels) = emitted(&layernorm(1024), dtype);
        let any = format!("dt_out_{}", dtype.name());
        let (whole, exact) = (gpu::whole_runs_symbol(&any), gpu::specialized_symbol(&any));
        assert_eq!(kernels, vec![(any.clone(), Layouts::Any), (whole.clone(), Layouts::WholeRuns), (exact.clone(), Layouts::Specialized)]);
        let (whole, exact) = (kernel_text(&file, &whole), kernel_text(&file, &exact));
        // The twin for whole runs reads the row length and the strides from the argument block.
        assert!(whole.contains("= args.sizes[1];") && whole.contains("args.input_strides[0][0]"), "{whole}");
        // The specialized twin has the row length as a constant and no stride from the block:
        // the row stride is that length, every other stride 1.
        assert!(exact.contains("const long long s1 = 1024;"), "{exact}");
        assert!(!exact.contains("args.input_strides") && !exact.contains("args.output_strides"), "{exact}");
        assert!(exact.contains("(unsigned)(s1)"), "{exact}");
    }
}

#[test]
fn specialized_sizes_that_leave_runs_partial_have_no_twin() {
    // Rows of 1020 are a multiple of the f32 run (4) but not of the 16-bit one (8): the 16-bit
    // twin could never run, since it needs whole runs, and is not emitted.
    let symbols = |dtype: DType| emitted(&layernorm(1020), dtype).1.into_iter().map(|(s, _)| s).collect::<Vec<_>>();
    assert_eq!(symbols(DType::F32), vec!["dt_out_f32", "dt_out_f32_whole", "dt_out_f32_exact"]);
    assert_eq!(symbols(DType::F16), vec!["dt_out_f16", "dt_out_f16_whole"]);
}
