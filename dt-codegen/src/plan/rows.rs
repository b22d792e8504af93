//! Row statistics in the accumulator's rows: vectors along the rows of a tensor-core tile whose
//! warps each hold whole rows ([`RegLayout::MmaRows`]).
//!
//! A reduction of such a tile over its columns (attention's row maximum and sum of the scores)
//! ends, after its shuffles, with the result of each row in the registers of the lanes that hold
//! that row. This pass keeps it there: the result, the accumulators it updates, their reads and
//! what is computed element-wise from such vectors alone (the rescale `exp(old - new)`) are held
//! per row slot, and an accumulator-layout tile that reads one of them along its columns (the
//! scores minus the maximum, the output rescaled or divided by the sum) reads the register of
//! its own row. Without it each statistic went to shared memory in the blocked layout and came
//! back as a broadcast: two barriers and a shared-memory round trip per statistic per step.
//! A reader that wants another layout (a store, a blocked tile) gets the vector through shared
//! memory, as any tile read under another layout does. It also lists the rescales of
//! accumulators in tensor-core fragments by such row factors ([`Plan::unit_rescales`]), which
//! the printer skips where the factors are 1.

use super::layouts::{collect, computed_from, elementwise_operands, row_reduced_tile, Plan, RegLayout, RowTile};
use dt_core::algo::BinOp;
use dt_core::kir::*;

/// Turns the layout of every value and accumulator that can be held in accumulator rows (see
/// the module docs) to [`RegLayout::MmaRows`]. Runs after the tensor-core plan; touches only
/// blocked ones, and none in a clustered kernel (whose meetings read blocked tiles).
pub(crate) fn rows(k: &Kernel, p: &mut Plan) {
    if k.grid.cluster.is_some() {
        return;
    }
    let mut lets = Vec::new();
    let mut updates = Vec::new();
    collect(&k.body, &mut lets, &mut updates);
    let def = |v: ValueId| lets.iter().find(|(x, _)| *x == v).map(|(_, op)| *op);
    // The row vector a shape is, for row tile `r`: the rows and nothing else wider than one.
    let is_rows = |shape: &Shape, r: RowTile| {
        let wide: Vec<(dt_core::algo::DimId, u32)> = shape.0.iter().filter(|(_, n)| *n > 1).copied().collect();
        wide == [(r.m, r.rows)]
    };
    // Layouts only turn from blocked to accumulator rows, and each rule holds again once its
    // inputs have turned, so iterating until nothing changes ends with every rule satisfied.
    loop {
        let mut changed = false;
        for (id, op) in &lets {
            let i = id.0 as usize;
            if p.values[i] != RegLayout::Blocked {
                continue;
            }
            let shape = &k.value(*id).shape;
            let want = match op {
                Op::Reduce { value, dim, .. } => row_reduced_tile(k, p, *value, *dim, *id).and_then(|t| t.row_tile()),
                Op::Var(var) => match p.vars[var.0 as usize] {
                    RegLayout::MmaRows(r) => Some(r),
                    _ => None,
                },
                _ => elementwise_operands(k, *id, op)
                    .and_then(|same| common_rows(&same.iter().map(|o| p.values[o.0 as usize]).collect::<Vec<_>>())),
            };
            if let Some(r) = want.filter(|r| is_rows(shape, *r)) {
                p.values[i] = RegLayout::MmaRows(r);
                changed = true;
            }
        }
        for (var, shape) in k.vars.iter().enumerate() {
            if p.vars[var] != RegLayout::Blocked {
                continue;
            }
            // Updates by values in one row tile, and any others computed element-wise from the
            // accumulator and such values alone (the online form's `$l = $l * scale`).
            let ups: Vec<ValueId> = updates.iter().filter(|(x, _)| x.0 as usize == var).map(|(_, v)| *v).collect();
            let Some(r) = ups.iter().find_map(|v| rows_under(k, p, *v, &def)) else {
                continue;
            };
            let held = |v: ValueId| p.values[v.0 as usize] == RegLayout::MmaRows(r);
            let fits = |v: &ValueId| k.value(*v).shape == *shape && computed_from(k, *v, VarId(var as u32), &held, &def);
            if is_rows(shape, r) && ups.iter().all(fits) {
                p.vars[var] = RegLayout::MmaRows(r);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    p.unit_rescales = unit_rescales(k, p, &updates, &def);
}

/// The rescales of accumulators in tensor-core fragments by factors held in their rows (see
/// [`Plan::unit_rescales`]): each update `$acc = %v` where `%v = mul (read $acc), %f`.
fn unit_rescales<'a>(k: &Kernel, p: &Plan, updates: &[(VarId, ValueId)], def: &impl Fn(ValueId) -> Option<&'a Op>) -> Vec<ValueId> {
    let fragments = |var: VarId| matches!(p.vars[var.0 as usize], RegLayout::Mma(_));
    updates
        .iter()
        .filter(|(var, v)| {
            let Some(Op::Binary(BinOp::Mul, x, f)) = def(*v) else { return false };
            fragments(*var)
                && matches!(def(*x), Some(Op::Var(read)) if read == var)
                && matches!(p.values[f.0 as usize], RegLayout::MmaRows(_))
                && k.value(*v).shape == *k.var(*var)
        })
        .map(|(_, v)| *v)
        .collect()
}

/// The row tile of `v` or of a value of its shape it is computed from element-wise (a lazy
/// maximum's `select(r > old + margin, r, old)` reads the step's row maximum `r`), if any.
fn rows_under<'a>(k: &Kernel, p: &Plan, v: ValueId, def: &impl Fn(ValueId) -> Option<&'a Op>) -> Option<RowTile> {
    if let RegLayout::MmaRows(r) = p.values[v.0 as usize] {
        return Some(r);
    }
    elementwise_operands(k, v, def(v)?)?.into_iter().find_map(|o| rows_under(k, p, o, def))
}

/// The one row tile all of `ls` are held in, if any (none for an empty list).
fn common_rows(ls: &[RegLayout]) -> Option<RowTile> {
    match ls.first() {
        Some(RegLayout::MmaRows(r)) if ls.iter().all(|x| *x == RegLayout::MmaRows(*r)) => Some(*r),
        _ => None,
    }
}
