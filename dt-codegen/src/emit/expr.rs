//! C expressions for the scalar operations of the kernel IR, shared by every C-family emitter.

use dt_core::algo::{BinOp, RedOp, UnOp};
use dt_core::kir::Kernel;

/// An f32 literal that C reads back exactly.
pub fn float_lit(v: f32) -> String {
    if v.is_nan() {
        "NAN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "INFINITY".into()
        } else {
            "(-INFINITY)".into()
        }
    } else {
        format!("{v:e}f")
    }
}

/// How transcendental functions and division are evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Math {
    /// The C library's functions and IEEE division (a few units in the last place of f32).
    Exact,
    /// The GPU's approximations (`dt_fast_*` in the device runtime): errors of a few units of
    /// f32 (exp, log, division, rsqrt) or 2^-10.9 relative (tanh), below the rounding of a 16-bit
    /// result, for a fraction of the instructions. Used where the kernel stores f16 or bf16, and
    /// in f32 kernels scheduled with `fast_math()`.
    Fast,
}

impl Math {
    /// How a GPU build of `k` for `dtype` evaluates them: with the approximations where it stores
    /// 16-bit results or is scheduled with `fast_math()`.
    pub fn of_gpu_build(k: &dt_core::kir::Kernel, dtype: dt_core::DType) -> Math {
        if dtype.size_bytes() == 2 || k.fast_math {
            Math::Fast
        } else {
            Math::Exact
        }
    }
}

/// [`unary`] under `math`.
pub fn unary_in(math: Math, op: UnOp, a: &str) -> String {
    match (math, op) {
        (Math::Fast, UnOp::Exp) => format!("dt_fast_exp({a})"),
        (Math::Fast, UnOp::Exp2) => format!("dt_fast_exp2({a})"),
        (Math::Fast, UnOp::Log) => format!("dt_fast_log({a})"),
        (Math::Fast, UnOp::Tanh) => format!("dt_fast_tanh({a})"),
        (Math::Fast, UnOp::Sigmoid) => format!("dt_fast_sigmoid({a})"),
        (Math::Fast, UnOp::Rsqrt) => format!("dt_fast_rsqrt({a})"),
        _ => unary(op, a),
    }
}

/// [`unary_in`] for the value a thread holds in register `r` of a tile of kernel `k`: under
/// `fma_exp(n)`, where the build approximates, the `exp2`s (the spec's own and the row
/// differences' exponentials that pass `exp_as_exp2` rewrote) of the registers with
/// `r % n == n - 1` are `dt_fma_exp2`, a polynomial on the FMA units.
pub fn unary_in_register(k: &Kernel, math: Math, op: UnOp, a: &str) -> String {
    match (math, op, k.fma_exp) {
        (Math::Fast, UnOp::Exp2, Some(1)) => format!("dt_fma_exp2({a})"),
        (Math::Fast, UnOp::Exp2, Some(n)) => format!("(r % {n} == {}) ? dt_fma_exp2({a}) : {}", n - 1, unary_in(math, op, a)),
        _ => unary_in(math, op, a),
    }
}

/// [`binary`] under `math`.
pub fn binary_in(math: Math, op: BinOp, a: &str, b: &str) -> String {
    match (math, op) {
        (Math::Fast, BinOp::Div) => format!("dt_fast_div({a}, {b})"),
        _ => binary(op, a, b),
    }
}

pub fn unary(op: UnOp, a: &str) -> String {
    match op {
        UnOp::Neg => format!("(-{a})"),
        UnOp::Exp => format!("expf({a})"),
        UnOp::Exp2 => format!("exp2f({a})"),
        UnOp::Log => format!("logf({a})"),
        UnOp::Sqrt => format!("sqrtf({a})"),
        UnOp::Rsqrt => format!("dt_rsqrt({a})"),
        UnOp::Tanh => format!("tanhf({a})"),
        UnOp::Sigmoid => format!("dt_sigmoid({a})"),
        UnOp::Abs => format!("fabsf({a})"),
    }
}

pub fn binary(op: BinOp, a: &str, b: &str) -> String {
    let cmp = |c: &str| format!("(({a}) {c} ({b}) ? 1.0f : 0.0f)");
    match op {
        BinOp::Add => format!("({a} + {b})"),
        BinOp::Sub => format!("({a} - {b})"),
        BinOp::Mul => format!("({a} * {b})"),
        BinOp::Div => format!("({a} / {b})"),
        BinOp::Max => format!("fmaxf({a}, {b})"),
        BinOp::Min => format!("fminf({a}, {b})"),
        BinOp::Lt => cmp("<"),
        BinOp::Le => cmp("<="),
        BinOp::Gt => cmp(">"),
        BinOp::Ge => cmp(">="),
        BinOp::Eq => cmp("=="),
        BinOp::Ne => cmp("!="),
    }
}

/// `acc` combined with `v` by a reduction.
pub fn combine(op: RedOp, acc: &str, v: &str) -> String {
    match op {
        RedOp::Sum => format!("{acc} + {v}"),
        RedOp::Max => format!("fmaxf({acc}, {v})"),
        RedOp::Min => format!("fminf({acc}, {v})"),
    }
}
