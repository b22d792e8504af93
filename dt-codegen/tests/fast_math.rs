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

/// `fma_exp(n)`: in a build that approximates, one in every `n` of a thread's exponentials runs
/// on the FMA units (`dt_fma_exp2`), the others stay on the special-function unit; a build that
/// evaluates `exp` exactly (f32 without `fast_math()`) ignores it. Its accuracy is checked by
/// `hip_cpu_matches_reference` (`fma_exp2_is_within_its_stated_error`, and the spec
/// `tests/specs/exps_on_fma.dt` against the reference evaluator).
#[test]
fn fma_exp_puts_one_in_n_exponentials_on_the_fma_units() {
    let quarter = softmax_f32("out.fast_math(); out.fma_exp(4);");
    assert!(quarter.contains("= (r % 4 == 3) ? dt_fma_exp2(") && quarter.contains(": dt_fast_exp2("), "{quarter}");
    let all = softmax_f32("out.fast_math(); out.fma_exp(1);");
    assert!(all.contains("= dt_fma_exp2(") && !all.contains("dt_fast_exp2("), "{all}");
    let exact = softmax_f32("out.fma_exp(4);");
    assert!(!exact.contains("dt_fma_exp2(") && exact.contains("= expf("), "{exact}");
}

#[test]
fn fma_exp_takes_a_power_of_two_up_to_64() {
    for bad in ["out.fma_exp(3);", "out.fma_exp(128);", "out.fma_exp(0);"] {
        let src = format!("Func out; In A; Var x; out[x] = exp(A[x]); out.block(x:256); out.tensorize(x:0); {bad} out.compile();");
        let diags = dt_core::compile_spec(&src).expect_err(bad);
        let text = format!("{diags:?}");
        assert!(text.contains("is not supported") && text.contains("1, 2, 4, ... or 64"), "{bad}: {text}");
    }
}
