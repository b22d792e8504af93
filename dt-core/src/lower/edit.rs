//! What the passes that merge loops share: rewriting every statement list inside out, the
//! definitions of a list, and new values.

use crate::algo::{BinOp, DimId, RedOp, UnOp};
use crate::kir::{Kernel, Layout, Op, Shape, Stmt, Value, ValueId};
use std::collections::HashMap;

/// Rewrites every statement list of kernel `k`'s body, inner lists first: `find(k, list, from)`
/// locates a match at or after index `from`, `merge` rewrites the list with it, and the search
/// goes on from the match's first statement (`first`; a merged loop may take another along).
pub(super) fn merge_loops<M>(
    k: &mut Kernel,
    find: &impl Fn(&Kernel, &[Stmt], usize) -> Option<M>,
    first: &impl Fn(&M) -> usize,
    merge: &impl Fn(&mut Kernel, Vec<Stmt>, M) -> Vec<Stmt>,
) {
    let body = std::mem::take(&mut k.body);
    k.body = merge_in(k, body, find, first, merge);
}

fn merge_in<M>(
    k: &mut Kernel,
    stmts: Vec<Stmt>,
    find: &impl Fn(&Kernel, &[Stmt], usize) -> Option<M>,
    first: &impl Fn(&M) -> usize,
    merge: &impl Fn(&mut Kernel, Vec<Stmt>, M) -> Vec<Stmt>,
) -> Vec<Stmt> {
    let mut stmts: Vec<Stmt> = stmts
        .into_iter()
        .map(|s| match s {
            Stmt::Loop(mut l) => {
                l.body = merge_in(k, std::mem::take(&mut l.body), find, first, merge);
                Stmt::Loop(l)
            }
            s => s,
        })
        .collect();
    let mut from = 0;
    while let Some(m) = find(k, &stmts, from) {
        from = first(&m);
        stmts = merge(k, stmts, m);
    }
    stmts
}

/// The definitions of the values of `stmts` (top level).
pub(super) fn defs(stmts: &[Stmt]) -> HashMap<ValueId, &Op> {
    stmts
        .iter()
        .filter_map(|s| match s {
            Stmt::Let { value, op } => Some((*value, op)),
            _ => None,
        })
        .collect()
}

/// The definition of every value of `stmts`, nested loops included.
pub(super) fn all_defs(stmts: &[Stmt]) -> HashMap<ValueId, Op> {
    let mut out = HashMap::new();
    fn walk(stmts: &[Stmt], out: &mut HashMap<ValueId, Op>) {
        for s in stmts {
            match s {
                Stmt::Let { value, op } => {
                    out.insert(*value, op.clone());
                }
                Stmt::Loop(l) => walk(&l.body, out),
                _ => {}
            }
        }
    }
    walk(stmts, &mut out);
    out
}

/// Rewrites every `Let` of kernel `k`'s body, nested loops included: `rewrite(k, defs, value, op,
/// out)` appends what replaces `let value = op` to `out` (new statements, then the `Let` itself,
/// changed or not), `defs` being the definitions before any rewrite ([`all_defs`]).
pub(super) fn rewrite_lets(k: &mut Kernel, rewrite: &impl Fn(&mut Kernel, &HashMap<ValueId, Op>, ValueId, Op, &mut Vec<Stmt>)) {
    fn walk(
        k: &mut Kernel,
        defs: &HashMap<ValueId, Op>,
        stmts: Vec<Stmt>,
        rewrite: &impl Fn(&mut Kernel, &HashMap<ValueId, Op>, ValueId, Op, &mut Vec<Stmt>),
    ) -> Vec<Stmt> {
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            match s {
                Stmt::Loop(mut l) => {
                    l.body = walk(k, defs, std::mem::take(&mut l.body), rewrite);
                    out.push(Stmt::Loop(l));
                }
                Stmt::Let { value, op } => rewrite(k, defs, value, op, &mut out),
                s => out.push(s),
            }
        }
        out
    }
    let defs = all_defs(&k.body);
    let body = std::mem::take(&mut k.body);
    k.body = walk(k, &defs, body, rewrite);
}

/// The value of `v` when it is a constant (or its negation), with `def` the definitions.
pub(super) fn constant<'a>(def: &impl Fn(ValueId) -> Option<&'a Op>, v: ValueId) -> Option<f32> {
    match def(v)? {
        Op::Const(c) => Some(*c),
        Op::Unary(UnOp::Neg, x) => constant(def, *x).map(|c| -c),
        _ => None,
    }
}

/// Whether `v` is `-inf` (a constant, or `-` applied to `inf` as a spec writes it).
pub(super) fn is_neg_inf(defs: &HashMap<ValueId, Op>, v: ValueId) -> bool {
    constant(&|x| defs.get(&x), v) == Some(f32::NEG_INFINITY)
}

/// Appends `let v = op` to `out` and returns `v`.
pub(super) fn push(k: &mut Kernel, out: &mut Vec<Stmt>, shape: Shape, op: Op) -> ValueId {
    let value = k.push_value(Value { shape, layout: Layout::Blocked });
    out.push(Stmt::Let { value, op });
    value
}

/// `v`, with -inf read as 0 (a running maximum that has seen nothing finite yet).
pub(super) fn finite_or_zero(k: &mut Kernel, out: &mut Vec<Stmt>, v: ValueId) -> ValueId {
    let shape = k.value(v).shape.clone();
    let ninf = push(k, out, Shape::default(), Op::Const(f32::NEG_INFINITY));
    let zero = push(k, out, Shape::default(), Op::Const(0.0));
    let is_ninf = push(k, out, shape.clone(), Op::Binary(BinOp::Eq, v, ninf));
    push(k, out, shape, Op::Select(is_ninf, zero, v))
}

/// Statement `s` (and its nested loops) with operands renamed by `rename`.
pub(super) fn renamed(s: Stmt, rename: &HashMap<ValueId, ValueId>) -> Stmt {
    let r = |v: ValueId| rename.get(&v).copied().unwrap_or(v);
    match s {
        Stmt::Let { value, op } => Stmt::Let { value, op: op.renamed(r) },
        Stmt::Update { var, combine, value } => Stmt::Update { var, combine, value: r(value) },
        Stmt::Store { value, tile } => Stmt::Store { value: r(value), tile },
        Stmt::Loop(mut l) => {
            l.body = l.body.into_iter().map(|s| renamed(s, rename)).collect();
            Stmt::Loop(l)
        }
        s @ Stmt::Init { .. } => s,
    }
}

/// What else a value scaled by a running maximum may be, in [`exp_scaled`].
pub(super) enum Scaled<'a> {
    /// Every value reading the maximum has this shape (the lane-by-lane partials of `online`).
    Shaped(&'a Shape),
    /// Sums and dots of scaled values over this dimension, which the maximum does not have, stay
    /// scaled (the row statistics of `flash`).
    SumsOver(DimId),
}

/// Whether `t`, computed in loop body `body`, reads the maximum `m` only through factors
/// `exp(z - m)` (times, divided by, or masked to 0 as anything that does not read `m`, or as
/// `rule` allows): then `t(m') = t(m) exp(m - m')`. Every value of `body` that reads `m` must lie
/// on such a path, and a difference `z - m` must feed its `exp` alone. Returns whether a dot is
/// on the way.
pub(super) fn exp_scaled(k: &Kernel, body: &[Stmt], t: ValueId, m: ValueId, rule: Scaled<'_>) -> Option<bool> {
    let defs = defs(body);
    // Values reading m, in order: whether each is scaled (else a difference z - m).
    let mut reading: HashMap<ValueId, bool> = HashMap::new();
    let mut uses: HashMap<ValueId, usize> = HashMap::new();
    let mut dot = false;
    for s in body {
        let Stmt::Let { value, op } = s else { continue };
        for o in op.operands() {
            *uses.entry(o).or_default() += 1;
        }
        let reads = |v: &ValueId| *v == m || reading.contains_key(v);
        if !op.operands().iter().any(reads) {
            continue;
        }
        let scaled = |v: &ValueId| reading.get(v) == Some(&true);
        let sums_over = |d: &DimId| matches!(rule, Scaled::SumsOver(x) if x == *d && k.value(m).shape.extent(x).is_none());
        let ok = match op {
            Op::Binary(BinOp::Sub, z, b) if *b == m && !reads(z) => Some(false),
            Op::Unary(UnOp::Exp, a) => matches!(defs.get(a), Some(Op::Binary(BinOp::Sub, z, b)) if *b == m && !reads(z)).then_some(true),
            Op::Binary(BinOp::Mul, a, b) if (scaled(a) && !reads(b)) || (scaled(b) && !reads(a)) => Some(true),
            Op::Binary(BinOp::Div, a, b) if scaled(a) && !reads(b) => Some(true),
            Op::MaskFill { value, fill, .. } if scaled(value) && *fill == 0.0 => Some(true),
            Op::Reduce { op: RedOp::Sum, value, dim, run: 1 } if scaled(value) && sums_over(dim) => Some(true),
            Op::Dot { a, b, dim } if scaled(a) && !reads(b) && sums_over(dim) => {
                dot = true;
                Some(true)
            }
            _ => None,
        };
        if matches!(rule, Scaled::Shaped(shape) if k.value(*value).shape != *shape) {
            return None;
        }
        reading.insert(*value, ok?);
    }
    let shifts_ok = reading.iter().filter(|(_, s)| !**s).all(|(v, _)| uses.get(v) == Some(&1));
    (reading.get(&t) == Some(&true) && shifts_ok).then_some(dot)
}
