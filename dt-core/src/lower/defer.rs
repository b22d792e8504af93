//! Pass 8: reductions across lanes move out of the loops that feed them.
//!
//! A reduction loop that runs more than once (a row longer than its tile) reduces each chunk
//! across the lanes of the tile and combines that into its accumulator. On a GPU that is a round
//! of shuffles and barriers per chunk, during which the program has no load in flight. Instead,
//! each chunk is combined lane by lane into a partial tile of the chunk's shape, set to the
//! reduction's identity before the loop, and the partial tile is reduced across its lanes once,
//! after the loop:
//!
//! ```text
//! $acc = -inf                           $acc = -inf
//! for y step 8192 (reduce):             $part = -inf                  (f32[x:1, y:8192])
//!   %0 = load A[x, y] masked else -inf  for y step 8192 (reduce):
//!   %2 = rmax %0 over y        =>         %0 = load A[x, y] masked else -inf
//!   $acc = max($acc, %2)                  $part = max($part, %0)
//!                                       %p = read $part
//!                                       %2 = rmax %p over y
//!                                       $acc = max($acc, %2)
//! ```
//!
//! The result is the same reduction with the f32 additions in another order. Invalid lanes were
//! already replaced by the identity before the reduction (or read as it), so they stay neutral
//! in the partial tile. It applies to a reduction whose result only feeds that accumulator,
//! where nothing else in the loop reads or writes the accumulator, and where the partial tile
//! costs at most [`MAX_PARTIAL_PER_THREAD`] registers per thread of a 32-lane warp. The loop is a
//! `reduce` loop over the row or, where the row is split over a cluster, the loop over this
//! program's block of it (whose result is combined over the cluster after it).

use crate::kir::{reads_var, written_vars, Combine, Kernel, LoopKind, Op, Shape, Stmt, Value, ValueId, VarId};

/// Most elements of a partial tile per thread (counting 32 threads per warp), so that the tile
/// stays in registers next to the chunk it accumulates.
pub const MAX_PARTIAL_PER_THREAD: usize = 32;

pub fn defer_lane_reductions(k: &mut Kernel) {
    let uses = k.use_counts();
    let body = std::mem::take(&mut k.body);
    k.body = rewrite(k, body, &uses);
}

fn rewrite(k: &mut Kernel, stmts: Vec<Stmt>, uses: &[usize]) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        let Stmt::Loop(mut l) = s else {
            out.push(s);
            continue;
        };
        l.body = rewrite(k, std::mem::take(&mut l.body), uses);
        let mut after = Vec::new();
        // A loop over a clustered row's chunks is a `Block` loop (over this program's block).
        if matches!(l.kind, LoopKind::Reduction | LoopKind::Block) {
            for (reduced, var) in deferrable(k, &l.body, l.dim, uses) {
                let Some(Stmt::Let { op: Op::Reduce { op, value: chunk, dim, .. }, .. }) =
                    l.body.iter().find(|s| matches!(s, Stmt::Let { value, .. } if *value == reduced)).cloned()
                else {
                    continue;
                };
                let shape = k.value(chunk).shape.clone();
                let part = VarId(k.vars.len() as u32);
                k.vars.push(shape.clone());
                out.push(Stmt::Init {
                    var: part,
                    value: op.identity(),
                    origin: format!("partial {} over {}, lane by lane", op.name(), k.dim_name(dim)),
                });
                l.body.retain(|s| !matches!(s, Stmt::Let { value, .. } if *value == reduced));
                for s in &mut l.body {
                    if matches!(s, Stmt::Update { value, .. } if *value == reduced) {
                        *s = Stmt::Update { var: part, combine: Combine::Reduce(op), value: chunk };
                    }
                }
                let read = new_value(k, shape);
                after.push(Stmt::Let { value: read, op: Op::Var(part) });
                after.push(Stmt::Let { value: reduced, op: Op::Reduce { op, value: read, dim, run: 1 } });
                after.push(Stmt::Update { var, combine: Combine::Reduce(op), value: reduced });
            }
        }
        out.push(Stmt::Loop(l));
        out.extend(after);
    }
    out
}

/// The (reduction value, accumulator) pairs of loop body `body` over `dim` that can be deferred
/// (see the module docs).
fn deferrable(k: &Kernel, body: &[Stmt], dim: crate::algo::DimId, uses: &[usize]) -> Vec<(ValueId, VarId)> {
    let threads = 32 * k.num_warps as usize;
    let mut found = Vec::new();
    for s in body {
        let Stmt::Let { value: reduced, op: Op::Reduce { op, value: chunk, dim: d, run: 1 } } = s else { continue };
        if *d != dim || uses[reduced.0 as usize] != 1 || k.value(*chunk).shape.elements() > MAX_PARTIAL_PER_THREAD * threads {
            continue;
        }
        let updates: Vec<(VarId, Combine)> = body
            .iter()
            .filter_map(|s| match s {
                Stmt::Update { var, combine, value } if value == reduced => Some((*var, *combine)),
                _ => None,
            })
            .collect();
        let [(var, Combine::Reduce(how))] = updates[..] else { continue };
        let touched = |v: VarId| written_vars(body).iter().filter(|x| **x == v).count() != 1 || reads_var(body, v);
        if how == *op && !touched(var) {
            found.push((*reduced, var));
        }
    }
    found
}

fn new_value(k: &mut Kernel, shape: Shape) -> ValueId {
    k.push_value(Value { shape, layout: crate::kir::Layout::Blocked })
}
