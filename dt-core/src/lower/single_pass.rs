//! Pass 3: loops that run once become straight-line code.
//!
//! A loop over a whole dimension or a reduction whose tile covers the dimension's bound (`d:0`
//! with `bound(d:N)`, or a tile at least the bound) runs exactly once, at offset 0. Dropping the
//! loop puts its body in the enclosing statement list, next to the other loops over the same
//! dimension that ran once, so that [`super::cse`] can merge their identical loads: a row that
//! fits in one tile is then read from memory once, not once per reduction over it.
//!
//! So does a loop over the clustered dimension's block (`cluster(y:N)`) whose tile covers the
//! block: the reductions and the output of a program's block of a row then share its loads. Its
//! tiles sit at the block's start, as every tile over a blocked dimension without a loop does.

use crate::kir::{Kernel, Loop, LoopKind, Stmt};

pub fn inline_single_iteration_loops(k: &mut Kernel) {
    let body = std::mem::take(&mut k.body);
    k.body = inline(k, body);
}

fn inline(k: &Kernel, stmts: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::Loop(mut l) => {
                l.body = inline(k, l.body);
                if runs_once(k, &l) {
                    out.extend(l.body);
                } else {
                    out.push(Stmt::Loop(l));
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether loop `l` of kernel `k` runs exactly once, at offset 0, and this pass drops it: a loop
/// over a whole dimension or a reduction whose tile covers the dimension's bound, or a loop over
/// the clustered dimension's block whose tile covers the block.
pub(super) fn runs_once(k: &Kernel, l: &Loop) -> bool {
    let whole = matches!(l.kind, LoopKind::Whole | LoopKind::Reduction) && k.bound(l.dim).is_some_and(|n| l.step as u64 >= n);
    let clustered = k.grid.cluster_size(l.dim).is_some();
    let block = l.kind == LoopKind::Block && clustered && k.grid.block_extent(l.dim).is_some_and(|b| l.step >= b);
    whole || block
}
