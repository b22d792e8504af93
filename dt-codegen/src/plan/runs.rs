//! Run layouts: tiles whose lanes are equal in runs along the last dimension, one register per
//! run.
//!
//! Pass `online` keeps a looped row's running statistics per run of lanes ([`Op::RunReduce`]):
//! every lane of a run holds the same maximum and the same sum. Held lane by lane, each thread
//! would compute the same rescaling `exp(old - new)` once per lane; held as
//! [`RegLayout::Runs`]`(n)`, it computes it once per run of `n` lanes. A thread holds its lanes
//! in runs of the blocked mapping's width (16 bytes: 8 lanes of a 16-bit type, 4 of f32), so a
//! run of the kernel IR's `run` lanes is split into runs of the largest `n` dividing both (the
//! kernel IR allows any such split; see [`Op::RunReduce`]).
//!
//! A kernel takes run layouts all or nothing: where some `RunReduce` cannot be split to at
//! least 2 lanes per register, or where a value in runs would be read in another way than the
//! ones below, every tile stays blocked, `RunReduce` is a copy, and reductions read every lane
//! (the split into single lanes). Values in runs are read only by element-wise work of their
//! own layout (a blocked reader reads register `r / n`), by updates of an accumulator of their
//! shape, by stores and by reductions that read one lane per run.

use super::layouts::same_layout;
use super::layouts::{collect, Mapping, Plan, RegLayout};
use dt_core::algo::DimId;
use dt_core::kir::*;
use std::collections::HashSet;

/// Gives the values and accumulators that are uniform in runs [`RegLayout::Runs`] (see the
/// module docs). Runs after the tensor-core and replication plans; touches only blocked ones.
pub(crate) fn runs(k: &Kernel, mapping: Mapping, p: &mut Plan) {
    let mut lets = Vec::new();
    let mut updates = Vec::new();
    collect(&k.body, &mut lets, &mut updates);
    let Some(n) = split(k, mapping, &lets, p) else { return };
    let layout = RegLayout::Runs(n);
    let blocked = |p: &Plan, v: ValueId| p.values[v.0 as usize] == RegLayout::Blocked;
    // Assume every blocked accumulator is in runs and drop the ones an update contradicts until
    // none does: the values follow from the accumulators in one sweep each time.
    let mut vars: HashSet<usize> = (0..k.vars.len()).filter(|v| p.vars[*v] == RegLayout::Blocked).collect();
    let mut values: HashSet<ValueId>;
    loop {
        values = HashSet::new();
        for (id, op) in &lets {
            if !blocked(p, *id) {
                continue;
            }
            let shape = &k.value(*id).shape;
            let runs = match op {
                Op::RunReduce { .. } => true,
                Op::Var(v) => vars.contains(&(v.0 as usize)),
                Op::Unary(..) | Op::Binary(..) | Op::Select(..) => {
                    let last = shape.0.last().map(|(d, _)| *d);
                    let operands = op.operands();
                    let uniform = |o: &ValueId| {
                        values.contains(o)
                            || p.values[o.0 as usize] == RegLayout::Replicated
                            || last.is_some_and(|d| k.value(*o).shape.extent(d).is_none())
                    };
                    operands.iter().any(|o| values.contains(o))
                        && operands.iter().all(uniform)
                        && operands.iter().filter(|o| values.contains(o)).all(|o| same_layout(&k.value(*o).shape, shape))
                }
                _ => false,
            };
            if runs {
                values.insert(*id);
            }
        }
        let before = vars.len();
        vars.retain(|v| {
            updates
                .iter()
                .filter(|(x, _)| x.0 as usize == *v)
                .all(|(_, val)| values.contains(val) && same_layout(&k.value(*val).shape, &k.vars[*v]))
        });
        if vars.len() == before {
            break;
        }
    }
    if !reads_allowed(k, mapping, &lets, &values) {
        return;
    }
    for v in &values {
        p.values[v.0 as usize] = layout;
    }
    for v in vars {
        p.vars[v] = layout;
    }
}

/// The lanes per register of every [`Op::RunReduce`] of the kernel (one for all), if at least 2:
/// the runs lie along the last dimension of a blocked tile whose threads hold runs of lanes
/// that many of which fit in each run, and no row of the tile ends inside a run.
fn split(k: &Kernel, mapping: Mapping, lets: &[(ValueId, &Op)], p: &Plan) -> Option<u32> {
    let mut n = None;
    for (id, op) in lets {
        let Op::RunReduce { value, dim, run, .. } = op else { continue };
        let shape = &k.value(*id).shape;
        let width = mapping.width(shape.elements()) as u32;
        let here = gcd(*run, width);
        let last: Option<(DimId, u32)> = shape.0.last().copied();
        let fits = last.is_some_and(|(d, ext)| d == *dim && ext % here == 0)
            && p.values[id.0 as usize] == RegLayout::Blocked
            && p.values[value.0 as usize] == RegLayout::Blocked
            && same_layout(&k.value(*value).shape, shape);
        if !fits || here < 2 || n.is_some_and(|m| m != here) {
            return None;
        }
        n = Some(here);
    }
    n
}

/// Whether every read of a value in `runs` is one the emitter serves (see the module docs), and
/// every reduction that reads one lane per run reads a value in runs, in registers (a reduction
/// through shared memory reads every lane of the tile it publishes).
fn reads_allowed(k: &Kernel, mapping: Mapping, lets: &[(ValueId, &Op)], runs: &HashSet<ValueId>) -> bool {
    let ok_let = |(id, op): &(ValueId, &Op)| match op {
        Op::Reduce { value, run, dim, .. } if runs.contains(value) => {
            *run > 1 && mapping.register_reduce(&k.value(*value).shape, *dim).is_some()
        }
        Op::Reduce { run, .. } => *run == 1,
        Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::MaskFill { .. } => {
            op.operands().iter().filter(|o| runs.contains(o)).all(|o| same_layout(&k.value(*o).shape, &k.value(*id).shape))
        }
        _ => op.operands().iter().all(|o| !runs.contains(o)),
    };
    lets.iter().all(ok_let) && updates_and_stores_allowed(k, &k.body, runs)
}

fn updates_and_stores_allowed(k: &Kernel, stmts: &[Stmt], runs: &HashSet<ValueId>) -> bool {
    stmts.iter().all(|s| match s {
        Stmt::Update { var, value, .. } => !runs.contains(value) || same_layout(&k.value(*value).shape, k.var(*var)),
        Stmt::Store { value, tile } => !runs.contains(value) || same_layout(&k.value(*value).shape, tile),
        Stmt::Loop(l) => updates_and_stores_allowed(k, &l.body, runs),
        Stmt::Let { .. } | Stmt::Init { .. } => true,
    })
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
