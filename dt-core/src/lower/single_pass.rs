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

use crate::kir::{Kernel, LoopKind, Stmt};

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
                let bound = k.bounds.iter().find(|(d, _)| *d == l.dim).map(|(_, n)| *n);
                let once = matches!(l.kind, LoopKind::Whole | LoopKind::Reduction) && bound.is_some_and(|n| l.step as u64 >= n);
                let clustered = k.grid.cluster_size(l.dim).is_some();
                let block_once = l.kind == LoopKind::Block && clustered && k.grid.block_extent(l.dim).is_some_and(|b| l.step >= b);
                let once = once || block_once;
                if once {
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
