//! Under `max_registers`, the GPU emitter writes a held row's output run by run where that output
//! loads per-column inputs (layernorm's weight and bias), and prints a loop that runs once as a
//! block (`emit/gpu_output_runs.rs`, `emit::single_step_header`). Without a cap it prints both as
//! before: uncapped f32 classes ran slower with them (docs/decisions/0008-register-caps.md). That
//! the printed code computes what the reference does is checked on the GPU by
//! `gpu_matches_reference`; that it fits its registers, by `dt-kernels/tests/generated_sources.rs`.

use dt_codegen::emit::gpu::{self, Dialect};
use dt_core::DType;

/// A layernorm holding a row of up to 16384 per program of 16 warps, with `cap` as its schedule's
/// register line (empty for none).
fn layernorm(cap: &str) -> String {
    format!(
        "Func mean, var, out; In X, W, B; SIn eps; Var x; RVar y;
        mean[x] = rsum(X[x, y], y) / len(y);
        var[x] = rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y) / len(y);
        out[x, y] = (X[x, y] - mean[x]) * rsqrt(var[x] + eps) * W[y] + B[y];
        out.block(x:1); out.tensorize(x:0, y:0); out.bound(y:16384); out.num_warps(16); {cap}
        mean.fuse_at(out, x); var.fuse_at(out, x); out.dtypes(f16, f32); out.compile();"
    )
}

/// The CUDA C of the `dtype` kernel of spec `src` (its last kernel), for any layout.
fn cuda(src: &str, dtype: DType) -> String {
    let p = dt_core::compile_spec(src).expect("spec checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let k = kernels.last().expect("a kernel");
    gpu::emit_kernel(k, dtype, &dt_codegen::emit::symbol(k, dtype), Dialect::Cuda, gpu::Layouts::Any).expect("emits").0
}

const BY_RUNS: &str = "the output run by run";
const ONE_STEP: &str = "the block's one step";

#[test]
fn capped_held_rows_write_their_output_run_by_run() {
    for dtype in [DType::F16, DType::F32] {
        let capped = cuda(&layernorm("out.max_registers(64);"), dtype);
        assert!(capped.contains(BY_RUNS) && capped.contains(ONE_STEP), "{capped}");
        // Each run's weight load sits inside the loop over the runs, after its opening.
        let runs = capped.find("for (int cr = 0;").expect("a loop over the runs");
        assert!(capped[runs..].contains("(in1 + a)"), "{capped}");
        let uncapped = cuda(&layernorm(""), dtype);
        assert!(!uncapped.contains(BY_RUNS) && !uncapped.contains(ONE_STEP), "{uncapped}");
    }
}

#[test]
fn outputs_without_per_column_loads_stay_statement_by_statement() {
    // A softmax's output reads nothing but the held row and its statistics.
    let softmax = "Func m, s, out; In A; Var x; RVar y;
        m[x] = rmax(A[x, y], y);
        s[x] = rsum(exp(A[x, y] - m[x]), y);
        out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
        out.block(x:1); out.tensorize(x:0, y:0); out.bound(y:16384); out.num_warps(16); out.max_registers(64);
        m.fuse_at(out, x); s.fuse_at(out, x); out.dtypes(f16); out.compile();";
    let c = cuda(softmax, DType::F16);
    assert!(!c.contains(BY_RUNS) && c.contains(ONE_STEP), "{c}");
}
