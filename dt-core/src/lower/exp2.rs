//! Pass 11: `exp(x - m)`, with `m` one value per row of `x`, becomes `exp2(x·log2 e - m·log2 e)`
//! where every build of the kernel evaluates `exp` with the GPU's approximation.
//!
//! The approximation computes `exp(t)` as `2^(t·log2 e)`: per element a subtraction, a multiply
//! and the `ex2` instruction. Multiplied out, the row's `m·log2 e` is computed once per row, and
//! per element a fused multiply-add and `ex2` remain. Where `x` is itself a product by a
//! per-row or per-kernel factor (attention's `s * rsqrt(len(d))`), `log2 e` joins the factor,
//! and the product (which pass [`super::max_before_scale`] keeps the maximum from reading) goes:
//!
//! ```text
//! %6 = mul %3, %5                     %53 = const 1.442695
//! %18 = sub %6, %44                   %54 = mul %44, %53
//! %19 = exp %18              =>       %55 = mul %5, %53
//!                                     %56 = mul %3, %55
//!                                     %57 = sub %56, %54
//!                                     %19 = exp2 %57
//! ```
//!
//! Where the product lies under a select with `-inf` (causal attention's mask), the select moves
//! onto the unscaled scores, as the maximum reads them: `-inf` times a positive factor stays
//! `-inf`.
//!
//! The rounding differs from `exp(x - m)` by a few units of f32 in the exponent, well under the
//! approximation's own error; so the pass runs only where every build approximates: kernels
//! whose element types are all 16-bit, or that ask for `fast_math()` (`emit::expr::Math`).

use super::{edit, max_before_scale};
use crate::algo::{BinOp, UnOp};
use crate::kir::{Kernel, Op, Shape, Stmt, ValueId};
use std::collections::HashMap;

pub fn exp_as_exp2(k: &mut Kernel) {
    if !k.approximates() {
        return;
    }
    edit::rewrite_lets(k, &|k, defs, value, op, out| {
        let Op::Unary(UnOp::Exp, t) = op else { return out.push(Stmt::Let { value, op }) };
        let Some((x, m)) = row_difference(k, defs, t) else { return out.push(Stmt::Let { value, op }) };
        let log2e = edit::push(k, out, Shape::default(), Op::Const(std::f32::consts::LOG2_E));
        let m_shape = k.value(m).shape.clone();
        let ml = edit::push(k, out, m_shape, Op::Binary(BinOp::Mul, m, log2e));
        let d = shifted(k, defs, out, x, log2e, ml);
        out.push(Stmt::Let { value, op: Op::Unary(UnOp::Exp2, d) });
    });
}

/// Where `t` is `x - m` with `m` of fewer elements than `x`: `x` and `m`.
fn row_difference(k: &Kernel, defs: &HashMap<ValueId, Op>, t: ValueId) -> Option<(ValueId, ValueId)> {
    match defs.get(&t)? {
        Op::Binary(BinOp::Sub, x, m) if fewer(k, *m, *x) => Some((*x, *m)),
        _ => None,
    }
}

/// `x·log2 e - ml` as new values in `out`, with `log2 e` joining a factor of fewer elements than
/// `x` where `x` is a product by one: `a·(c·log2 e)`; the product may lie under selects and masks
/// with `-inf` (a causal mask) where the factor is positive, which keeps them `-inf`. The selects
/// and masks rebuilt on `a` are those pass `max_before_scale` built for the maximum (merged by
/// `cse`), so that the scores are selected once.
fn shifted(k: &mut Kernel, defs: &HashMap<ValueId, Op>, out: &mut Vec<Stmt>, x: ValueId, log2e: ValueId, ml: ValueId) -> ValueId {
    let shape = k.value(x).shape.clone();
    let factored = match max_before_scale::scale_of(k, defs, x, None) {
        Some((chain, c)) => Some((max_before_scale::rebuild(k, out, chain), c)),
        None => row_factor(k, defs, x),
    };
    let xl = match factored {
        Some((a, c)) => {
            let c_shape = k.value(c).shape.clone();
            let cl = edit::push(k, out, c_shape, Op::Binary(BinOp::Mul, c, log2e));
            edit::push(k, out, shape.clone(), Op::Binary(BinOp::Mul, a, cl))
        }
        None => edit::push(k, out, shape.clone(), Op::Binary(BinOp::Mul, x, log2e)),
    };
    edit::push(k, out, shape, Op::Binary(BinOp::Sub, xl, ml))
}

/// Where `x` is `a * c` with `c` of fewer elements than `x`: `a` and `c`.
fn row_factor(k: &Kernel, defs: &HashMap<ValueId, Op>, x: ValueId) -> Option<(ValueId, ValueId)> {
    match defs.get(&x)? {
        Op::Binary(BinOp::Mul, a, c) if fewer(k, *c, x) => Some((*a, *c)),
        Op::Binary(BinOp::Mul, c, a) if fewer(k, *c, x) => Some((*a, *c)),
        _ => None,
    }
}

fn fewer(k: &Kernel, small: ValueId, large: ValueId) -> bool {
    k.value(small).shape.elements() < k.value(large).shape.elements()
}
