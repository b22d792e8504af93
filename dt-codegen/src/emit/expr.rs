//! C expressions for the scalar operations of the kernel IR, shared by every C-family emitter.

use dt_core::algo::{BinOp, RedOp, UnOp};

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
