//! Pass 15: a looped dimension's full steps run without masks.
//!
//! A `whole` or `reduce` loop over a dimension longer than its step masks, at every step, the
//! lanes past the end of the dimension: softmax's exponentials, filled with the sum's 0, cost an
//! index, a comparison and a select per element. Only the last step can reach past the end. The
//! loop is split in two: its full steps, where every lane is valid, and the one partial step,
//! if any, which keeps the masks:
//!
//! ```text
//! for y step 8192 (reduce):              for y step 8192 (reduce, full steps):
//!   %0 = load A[x, y] masked else -inf     %9 = load A[x, y] masked else -inf
//!   %4 = mask %0 along y else 0            %10 = sub %9, %3
//!   %6 = sub %4, %3               =>       ...
//!   ...                                  for y step 8192 (reduce, partial step):
//!                                          %0 = load A[x, y] masked else -inf
//!                                          %4 = mask %0 along y else 0
//!                                          ...
//! ```
//!
//! In the full copy a mask along the loop's dimension is its operand, and the emitters leave out
//! the bounds of that dimension in its loads and stores. A backward loop runs its partial step
//! first, then its full steps backward, so that the order of the steps does not change. Each copy
//! takes fresh values.
//!
//! Layernorm's statistics loop counts its valid lanes (pass `online`) as a mask of the constant
//! 1: in the full copy the count is that constant, and the C compiler folds what follows (a
//! run's count of 8, multiplications by 1).
//!
//! A loop over this program's block of a dimension (`in block`, a row split over a cluster) is
//! split the same way where its step divides the block: its full steps are those of its block
//! that lie inside the dimension.
//!
//! It applies to innermost loops with a mask along their dimension, without a tensor-core dot
//! (those pipeline their own steps), whose values are read only inside them. A loop whose only
//! checks are the bounds of its loads and stores (one comparison per 16-byte access, and a
//! select of the fill per 4-byte word) stays whole, unless it loops over a block held in shared
//! memory (a block of no more steps than the loop's stages, as the GPU emitter holds it): there
//! the loads are reads of shared memory, and the checks cost about as much as the arithmetic.
//! On the H100 at 256x262144 the held 16-bit classes ran faster split, while the looped f32
//! layernorm, which reads global memory, ran slower: with unpredicated loads ptxas takes more
//! registers (a looped 16-bit layernorm at 4096x16384, split, took 55 instead of 40;
//! docs/decisions/0013-per-element-code.md).
//!
//! Splitting layernorm's loop while its statistics were kept lane by lane made ptxas spill 218
//! bytes per thread at 64 registers and slowed the looped f16 class on the H100; kept per run (pass
//! `online`) it fits in 64 registers without spilling (docs/decisions/0006-row-statistics.md).

use crate::algo::DimId;
use crate::kir::{count_uses, Kernel, Loop, LoopKind, Op, Steps, Stmt, ValueId};
use std::collections::HashMap;

pub fn split_full_steps(k: &mut Kernel) {
    let uses = k.use_counts();
    let body = std::mem::take(&mut k.body);
    k.body = rewrite(k, &uses, body);
}

/// `stmts` with their splittable loops split; `uses` counts the reads of each value in the
/// whole kernel.
fn rewrite(k: &mut Kernel, uses: &[usize], stmts: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        let Stmt::Loop(mut l) = s else {
            out.push(s);
            continue;
        };
        if !splittable(k, uses, &l) {
            l.body = rewrite(k, uses, std::mem::take(&mut l.body));
            out.push(Stmt::Loop(l));
            continue;
        }
        let full = Loop { steps: Steps::Full, body: full_body(k, &l.body, l.dim), ..l.clone() };
        let partial = Loop { steps: Steps::Partial, ..l };
        if partial.backward {
            out.push(Stmt::Loop(partial));
            out.push(Stmt::Loop(full));
        } else {
            out.push(Stmt::Loop(full));
            out.push(Stmt::Loop(partial));
        }
    }
    out
}

fn splittable(k: &Kernel, uses: &[usize], l: &Loop) -> bool {
    let masks = l.body.iter().any(|s| matches!(s, Stmt::Let { op: Op::MaskFill { dim, .. }, .. } if *dim == l.dim));
    // Loads or stores checked against the dimension's end.
    let bounded = l.body.iter().any(|s| match s {
        Stmt::Let { op: Op::Load { axes, .. }, .. } => axes.contains(&l.dim),
        Stmt::Store { tile, .. } => tile.extent(l.dim).is_some(),
        _ => false,
    });
    // Bounds alone are worth splitting off only over a block held in shared memory.
    let checks = masks || (bounded && k.grid.block_fits_stages(l));
    let plain = l.until.is_none() && l.body.iter().all(|s| !matches!(s, Stmt::Loop(_) | Stmt::Let { op: Op::Dot { .. }, .. }));
    // A loop over this program's block (a row split over a cluster) splits where its steps
    // tile the block, more than one of them (a loop of one step runs once: the GPU emitter
    // prints it as straight-line code, which two copies would not be).
    let kind_ok = match l.kind {
        LoopKind::Whole | LoopKind::Reduction => true,
        LoopKind::Block => k.grid.block_extent(l.dim).is_some_and(|b| b % l.step == 0 && b > l.step),
    };
    if !kind_ok || l.steps != Steps::All || !checks || !plain {
        return false;
    }
    // The copies take fresh values: nothing after the loop may read one of its own.
    let mut inside = vec![0; k.values.len()];
    count_uses(&l.body, &mut inside);
    l.body.iter().all(|s| !matches!(s, Stmt::Let { value, .. } if inside[value.0 as usize] != uses[value.0 as usize]))
}

/// `body` with fresh values, for steps where every lane along `dim` is valid.
fn full_body(k: &mut Kernel, body: &[Stmt], dim: DimId) -> Vec<Stmt> {
    let mut renamed: HashMap<ValueId, ValueId> = HashMap::new();
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        let name = |v: ValueId, renamed: &HashMap<ValueId, ValueId>| renamed.get(&v).copied().unwrap_or(v);
        match s {
            Stmt::Let { value, op } => {
                let op = op.clone().renamed(|v| name(v, &renamed));
                if let Op::MaskFill { value: inner, dim: d, .. } = op {
                    if d == dim {
                        renamed.insert(*value, inner);
                        continue;
                    }
                }
                let fresh = k.push_value(k.value(*value).clone());
                renamed.insert(*value, fresh);
                out.push(Stmt::Let { value: fresh, op });
            }
            Stmt::Update { var, combine, value } => {
                out.push(Stmt::Update { var: *var, combine: *combine, value: name(*value, &renamed) });
            }
            Stmt::Store { value, tile } => out.push(Stmt::Store { value: name(*value, &renamed), tile: tile.clone() }),
            Stmt::Init { .. } | Stmt::Loop(_) => out.push(s.clone()),
        }
    }
    out
}
