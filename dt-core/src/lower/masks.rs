//! Pass 5: masks a load makes unnecessary. A `mask v along d else f` replaces the lanes of `v`
//! past the end of `d` by `f`; where `v` is a load, its own fill can be `f` instead:
//!
//! - a load that already fills with `f` needs no mask (layernorm's `mask X along y else 0`);
//! - a load whose filled lanes nothing else can observe takes the mask's fill: every other
//!   path from it passes element-wise work, or a reduction over another dimension, and ends at
//!   a mask along `d` or at a store (stores skip invalid lanes). Softmax's row maximum needs
//!   its row filled with -inf, the exponentials filled with 0 and its store nothing: the load
//!   fills with -inf and the first mask goes.
//!
//! Only loads whose other dimensions have extent 1 take a new fill: their lanes are invalid
//! along `d` alone (a loop's offset is always inside its dimension, so lane 0 is always
//! valid). Uses of a dropped mask read the load; the dead-code pass then drops the mask.

use crate::algo::DimId;
use crate::kir::{Kernel, Op, Stmt, ValueId};

pub fn drop_redundant_masks(k: &mut Kernel) {
    let mut uses: Vec<Vec<Use>> = vec![Vec::new(); k.values.len()];
    let mut loads = Vec::new();
    collect(&k.body, &mut uses, &mut loads);
    let mut replace: Vec<ValueId> = (0..k.values.len() as u32).map(ValueId).collect();
    let mut fills: Vec<(ValueId, f32)> = Vec::new();
    for (load, fill) in loads {
        let shape = &k.value(load).shape;
        let masks: Vec<(ValueId, DimId, f32)> = uses[load.0 as usize]
            .iter()
            .filter_map(|u| match u {
                Use::Let(m, Op::MaskFill { dim, fill, .. }) => Some((*m, *dim, *fill)),
                _ => None,
            })
            .collect();
        // First the fill, then the masks it makes redundant: a mask dropped for the old fill
        // would otherwise see the new one.
        let movable = |d: DimId| shape.0.iter().all(|(x, n)| *x == d || *n == 1);
        let mut fill = fill;
        if let Some((_, _, f)) = masks.iter().find(|(_, d, f)| !same(*f, fill) && movable(*d) && hidden(&uses, load, *d)) {
            fill = *f;
            fills.push((load, fill));
        }
        for (m, _, f) in masks {
            if same(f, fill) {
                replace[m.0 as usize] = load;
            }
        }
    }
    if replace.iter().enumerate().all(|(i, v)| v.0 as usize == i) {
        return;
    }
    let body = std::mem::take(&mut k.body);
    k.body = rewrite(body, &replace, &fills);
}

/// A statement that reads a value.
#[derive(Clone, Debug)]
enum Use {
    Let(ValueId, Op),
    Store,
    Update,
}

fn collect(stmts: &[Stmt], uses: &mut [Vec<Use>], loads: &mut Vec<(ValueId, f32)>) {
    for s in stmts {
        match s {
            Stmt::Let { value, op } => {
                if let Op::Load { fill, .. } = op {
                    loads.push((*value, *fill));
                }
                for o in op.operands() {
                    uses[o.0 as usize].push(Use::Let(*value, op.clone()));
                }
            }
            Stmt::Store { value, .. } => uses[value.0 as usize].push(Use::Store),
            Stmt::Update { value, .. } => uses[value.0 as usize].push(Use::Update),
            Stmt::Loop(l) => collect(&l.body, uses, loads),
            Stmt::Init { .. } => {}
        }
    }
}

/// Whether no result depends on the lanes of `v` past the end of `d` (see the module docs).
fn hidden(uses: &[Vec<Use>], v: ValueId, d: DimId) -> bool {
    uses[v.0 as usize].iter().all(|u| match u {
        Use::Store => true,
        Use::Update => false,
        Use::Let(_, Op::MaskFill { dim, .. }) if *dim == d => true,
        Use::Let(w, Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::MaskFill { .. }) => hidden(uses, *w, d),
        Use::Let(w, Op::Reduce { dim, .. } | Op::RunReduce { dim, .. }) => *dim != d && hidden(uses, *w, d),
        Use::Let(..) => false,
    })
}

/// Equal fills, NaN included (a fill is a constant of the spec's identities).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
}

fn rewrite(stmts: Vec<Stmt>, replace: &[ValueId], fills: &[(ValueId, f32)]) -> Vec<Stmt> {
    let r = |v: ValueId| replace[v.0 as usize];
    stmts
        .into_iter()
        .map(|s| match s {
            Stmt::Let { value, op: Op::Load { input, axes, fill } } => {
                let fill = fills.iter().find(|(l, _)| *l == value).map_or(fill, |(_, f)| *f);
                Stmt::Let { value, op: Op::Load { input, axes, fill } }
            }
            Stmt::Let { value, op } => Stmt::Let { value, op: op.renamed(r) },
            Stmt::Update { var, combine, value } => Stmt::Update { var, combine, value: r(value) },
            Stmt::Store { value, tile } => Stmt::Store { value: r(value), tile },
            Stmt::Loop(mut l) => {
                l.body = rewrite(l.body, replace, fills);
                Stmt::Loop(l)
            }
            s @ Stmt::Init { .. } => s,
        })
        .collect()
}
