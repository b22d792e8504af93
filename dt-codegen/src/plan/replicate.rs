//! Replicated scalars: one-element tiles that every thread of a program holds.
//!
//! A reduction whose threads combine their own registers first ([`super::Mapping::register_reduce`])
//! ends with the partials of the warps in shared memory. When its result is a single element (a
//! row statistic of a program that owns one row: a row maximum, sum, mean), every thread combines
//! those partials itself instead of one thread doing it, so every thread holds the result in a
//! register. What is computed from such values alone (the mean from the sum, `rsqrt(var + eps)`,
//! an accumulator they update, its reads) is computed by every thread too, and element-wise work
//! over the row reads them from its own registers: no shared-memory broadcast, and so two
//! barriers fewer per statistic. The partials are read by every thread at the same addresses
//! (one broadcast transaction per warp).

use super::layouts::{collect, Mapping, Plan, RegLayout};

use dt_core::kir::*;

/// Turns the layout of every value and accumulator that can be replicated (see the module docs)
/// to [`RegLayout::Replicated`]. Runs after the tensor-core plan; touches only blocked ones.
pub(crate) fn replicate(k: &Kernel, mapping: Mapping, p: &mut Plan) {
    let mut lets = Vec::new();
    let mut updates = Vec::new();
    collect(&k.body, &mut lets, &mut updates);
    // Layouts only turn from blocked to replicated, and each rule holds again once its inputs
    // have turned, so iterating until nothing changes ends with every rule satisfied.
    loop {
        let mut changed = false;
        for (id, op) in &lets {
            let i = id.0 as usize;
            if p.values[i] != RegLayout::Blocked || k.value(*id).shape.elements() != 1 {
                continue;
            }
            let rep = |v: ValueId| p.values[v.0 as usize] == RegLayout::Replicated;
            let want = match op {
                Op::Const(_) | Op::Scalar(_) | Op::Len(_) | Op::BlockLanes(_) | Op::Index(_) => true,
                Op::Reduce { value, dim, .. } => {
                    p.values[value.0 as usize] == RegLayout::Blocked && mapping.register_reduce(&k.value(*value).shape, *dim).is_some()
                }
                Op::Unary(..)
                | Op::Binary(..)
                | Op::Select(..)
                | Op::MaskFill { .. }
                | Op::RunReduce { .. }
                | Op::ClusterReduce { .. }
                | Op::ClusterPaired { .. } => op.operands().into_iter().all(rep),
                Op::Var(var) => p.vars[var.0 as usize] == RegLayout::Replicated,
                Op::Load { .. } | Op::Dot { .. } => false,
            };
            if want {
                p.values[i] = RegLayout::Replicated;
                changed = true;
            }
        }
        for (var, shape) in k.vars.iter().enumerate() {
            if p.vars[var] != RegLayout::Blocked || shape.elements() != 1 {
                continue;
            }
            let mut from = updates.iter().filter(|(x, _)| x.0 as usize == var).map(|(_, v)| p.values[v.0 as usize]).peekable();
            if from.peek().is_some() && from.all(|l| l == RegLayout::Replicated) {
                p.vars[var] = RegLayout::Replicated;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}
