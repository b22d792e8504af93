//! Pass 10: the maximum of a tile scaled by a positive factor is the maximum of the tile, scaled.
//!
//! Attention's scores are `rdot(Q, K) * rsqrt(len(d))`, and the row maximum reads them; a target
//! multiplies every score before comparing it. Multiplying by a positive finite number is
//! monotone in every rounding, so `max(a * c) = max(a) * c` exactly, `-inf` (a masked or causal
//! lane) staying `-inf`. The maximum then reads the products' unscaled operand and one multiply
//! per row remains; when nothing else reads the products (pass [`super::exp2`] folds the scale
//! into the exponential's multiply-add), they go:
//!
//! ```text
//! %6 = mul %3, %5                           %6 = mul %3, %5
//! %7 = mask %6 along j else -inf            %7 = mask %6 along j else -inf
//! %8 = rmax %7 over j              =>       %51 = mask %3 along j else -inf
//!                                           %52 = rmax %51 over j
//!                                           %8 = mul %52, %5
//! ```
//!
//! The factor (`%5`) must be known positive and finite ([`positive`]) and the same for every
//! lane the maximum combines (it lacks the reduced dimension). Between the product and the
//! maximum may lie masks and selects whose other value is `-inf`, which scaling keeps.

use super::edit;
use crate::algo::{BinOp, DimId, RedOp, UnOp};
use crate::kir::{Kernel, Op, Shape, Stmt, ValueId};
use std::collections::HashMap;

pub fn take_max_before_scale(k: &mut Kernel) {
    edit::rewrite_lets(k, &|k, defs, value, op, out| {
        let Op::Reduce { op: RedOp::Max, value: tile, dim, run } = op else { return out.push(Stmt::Let { value, op }) };
        let scaled = scale_of(k, defs, tile, Some(dim)).filter(|(_, c)| {
            let (cs, rs) = (&k.value(*c).shape, &k.value(value).shape);
            cs.0.iter().all(|(d, n)| *n == 1 || rs.extent(*d).is_some())
        });
        let Some((chain, factor)) = scaled else { return out.push(Stmt::Let { value, op }) };
        let unscaled = rebuild(k, out, chain);
        let shape = k.value(value).shape.clone();
        let max = edit::push(k, out, shape, Op::Reduce { op: RedOp::Max, value: unscaled, dim, run });
        out.push(Stmt::Let { value, op: Op::Binary(BinOp::Mul, max, factor) });
    });
}

/// One link between a product and the maximum (or the exponential): a mask or a select whose other value is `-inf`.
pub(super) enum Link {
    Mask { dim: DimId, shape: Shape },
    Select { cond: ValueId, other: ValueId, first: bool, shape: Shape },
}

/// A product's other operand and the links from it outward.
pub(super) type Chain = (ValueId, Vec<Link>);

/// Where `tile` is a product `a * c` (through masks and selects with `-inf`) with `c` positive,
/// finite, of fewer elements than the product and without dimension `dim` (when given): the
/// chain (`a`, then the links outward) and `c`.
pub(super) fn scale_of(k: &Kernel, defs: &HashMap<ValueId, Op>, tile: ValueId, dim: Option<DimId>) -> Option<(Chain, ValueId)> {
    let mut links = Vec::new();
    let mut v = tile;
    loop {
        let shape = k.value(v).shape.clone();
        match defs.get(&v)? {
            Op::MaskFill { value, dim: d, fill } if *fill == f32::NEG_INFINITY => {
                links.push(Link::Mask { dim: *d, shape });
                v = *value;
            }
            Op::Select(cond, x, y) if edit::is_neg_inf(defs, *y) => {
                links.push(Link::Select { cond: *cond, other: *y, first: true, shape });
                v = *x;
            }
            Op::Select(cond, x, y) if edit::is_neg_inf(defs, *x) => {
                links.push(Link::Select { cond: *cond, other: *x, first: false, shape });
                v = *y;
            }
            Op::Binary(BinOp::Mul, a, b) => {
                let fits = |c: ValueId, t: ValueId| {
                    positive(defs, c)
                        && dim.is_none_or(|d| k.value(c).shape.extent(d).is_none_or(|n| n == 1))
                        && k.value(c).shape.elements() < k.value(t).shape.elements()
                };
                let (a, c) = if fits(*b, *a) {
                    (*a, *b)
                } else if fits(*a, *b) {
                    (*b, *a)
                } else {
                    return None;
                };
                links.reverse();
                return Some(((a, links), c));
            }
            _ => return None,
        }
    }
}

/// The chain's links applied again to its unscaled operand, as new values in `out`.
pub(super) fn rebuild(k: &mut Kernel, out: &mut Vec<Stmt>, (mut v, links): Chain) -> ValueId {
    for l in links {
        v = match l {
            Link::Mask { dim, shape } => edit::push(k, out, shape, Op::MaskFill { value: v, dim, fill: f32::NEG_INFINITY }),
            Link::Select { cond, other, first: true, shape } => edit::push(k, out, shape, Op::Select(cond, v, other)),
            Link::Select { cond, other, first: false, shape } => edit::push(k, out, shape, Op::Select(cond, other, v)),
        };
    }
    v
}

/// Whether `v` is known positive and finite: a positive constant, a dimension's size (a size of
/// 0 makes a reduction over it empty, and its scaled scores NaN in either order), or the square
/// root or reciprocal square root of one.
pub(super) fn positive(defs: &HashMap<ValueId, Op>, v: ValueId) -> bool {
    match defs.get(&v) {
        Some(Op::Const(c)) => *c > 0.0 && c.is_finite(),
        Some(Op::Len(_)) => true,
        Some(Op::Unary(UnOp::Sqrt | UnOp::Rsqrt, x)) => positive(defs, *x),
        _ => false,
    }
}
