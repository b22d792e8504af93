//! `fast_math()`: an f32 build evaluates exp and division with the GPU's approximations, as
//! 16-bit builds always do; without it, an f32 build uses the C library and IEEE division. That
//! the approximations compute what the reference does, within the tests' bound for them, is
//! checked on the GPU by `gpu_matches_reference`, whose random schedules include `fast_math()`.

use dt_codegen::emit::gpu::{self, Dialect};
use dt_core::kir::Kernel;
use dt_core::DType;

fn softmax_f32(extra: &str) -> String {
    let src = format!(
        "Func m, s, out; In A; Var x; RVar y;
        m[x] = rmax(A[x, y], y);
        s[x] = rsum(exp(A[x, y] - m[x]), y);
        out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
        out.block(x:1); out.tensorize(x:0, y:0); out.bound(y:1024); out.num_warps(2); {extra}
        m.fuse_at(out, x); s.fuse_at(out, x); out.compile();"
    );
    let p = dt_core::compile_spec(&src).expect("spec checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let items: Vec<(&Kernel, DType, String)> = kernels.iter().map(|k| (k, DType::F32, dt_codegen::emit::symbol(k, DType::F32))).collect();
    let file = gpu::emit_file("test", Dialect::Cuda, &items).expect("emits").0;
    // The kernels only, after the device runtime's definitions.
    let start = file.find("__global__").expect("a kernel");
    file[start..].to_string()
}

#[test]
fn fast_math_gives_f32_the_approximations() {
    let exact = softmax_f32("");
    assert!(exact.contains("= expf(") && !exact.contains("dt_fast_"), "{exact}");
    let fast = softmax_f32("out.fast_math();");
    // exp(x - max) as exp2(x log2 e - max log2 e) (pass exp2), approximated.
    assert!(fast.contains("= dt_fast_exp2(") && !fast.contains("expf(") && !fast.contains("exp2f("), "{fast}");
    assert!(fast.contains("dt_fast_rcp(") || fast.contains("dt_fast_div("), "{fast}");
}
