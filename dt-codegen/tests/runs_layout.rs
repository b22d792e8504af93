//! Tiles in runs (`RegLayout::Runs`, `gpu_runs.rs`): the looped softmax's running statistics are
//! held one register per run of the lanes a thread holds together, 8 in f16 and 4 in f32; a
//! kernel whose reductions of those statistics cannot read them in registers keeps every tile
//! lane by lane (runs split into single lanes), since a reduction through shared memory reads
//! every lane of the tile. That both compute what the reference does is checked on the GPU by
//! `gpu_matches_reference` and, for HIP C, by `hip_cpu_matches_reference`.

use dt_codegen::emit::gpu::{self, Dialect};
use dt_core::kir::Kernel;
use dt_core::DType;

fn softmax(schedule: &str, dtype: &str) -> String {
    format!(
        "Func m, s, out; In A; Var x; RVar y;
        m[x] = rmax(A[x, y], y);
        s[x] = rsum(exp(A[x, y] - m[x]), y);
        out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
        {schedule} m.fuse_at(out, x); s.fuse_at(out, x);
        out.dtypes({dtype}); out.compile();"
    )
}

fn cuda(src: &str, dtype: DType) -> String {
    let p = dt_core::compile_spec(src).expect("spec checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let items: Vec<(&Kernel, DType, String)> = kernels.iter().map(|k| (k, dtype, dt_codegen::emit::symbol(k, dtype))).collect();
    gpu::emit_file("test", Dialect::Cuda, &items).expect("emits").0
}

#[test]
fn looped_statistics_take_one_register_per_run() {
    let looped = "out.block(x:1); out.tensorize(x:0, y:8192); out.num_warps(32);";
    let f16 = cuda(&softmax(looped, "f16"), DType::F16);
    assert!(f16.contains("[r * 8 + 7]"), "{f16}");
    let f32 = cuda(&softmax(looped, "f32"), DType::F32);
    assert!(f32.contains("[r * 4 + 3]") && !f32.contains("[r * 8 + 7]"), "{f32}");
}

#[test]
fn statistics_reduced_through_shared_memory_stay_lane_by_lane() {
    // Four rows of 128 lanes over 128 threads: a row is not dealt evenly over every thread.
    let rows = "out.block(x:4); out.tensorize(x:0, y:128); out.num_warps(4);";
    let f32 = cuda(&softmax(rows, "f32"), DType::F32);
    let p = dt_core::compile_spec(&softmax(rows, "f32")).expect("spec checks");
    let kir = dt_core::kir::print(&dt_core::lower::lower_all(&p).expect("lowers")[0]);
    assert!(kir.contains("over runs of 8"), "the kernel IR keeps statistics per run:\n{kir}");
    assert!(!f32.contains("[r * 4 + 0]") && !f32.contains("[r * 2 + 0]"), "{f32}");
}
