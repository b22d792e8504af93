//! Pass 16: a grid whose programs' work grows with their block of a dimension takes that
//! dimension's blocks last first.
//!
//! A causal attention program stops its loop over the keys at the end of its block of queries
//! (`Loop::until`, pass `flash`): the program of the last block of `i` runs as many steps as
//! there are blocks, the first one step. Taken in order, the longest programs of the last
//! (batch, head) start last, and the multiprocessors that finish early wait for them. Taken last
//! first, the longest start first and the short ones fill the end, as a scheduler of jobs of
//! known lengths would order them:
//!
//! ```text
//! grid [b/1, h/1, i/128, e/128]    =>    grid [b/1, h/1, i/128 last first, e/128]
//! for j step 128 (reduce, until the end of the block of i): ...
//! ```
//!
//! Programs of one (batch, head) still run side by side, sharing its keys and values in the L2
//! cache. No result changes: every program computes its own block. It applies to a dimension
//! whose blocks have a grid entry of their own (not split by `map`, not clustered).

use crate::kir::{Kernel, Stmt};

pub fn take_heaviest_first(k: &mut Kernel) {
    let mut dims = Vec::new();
    collect_until(&k.body, &mut dims);
    for d in dims {
        if k.grid.has_own_entry(d) && !k.grid.descending.contains(&d) {
            k.grid.descending.push(d);
        }
    }
}

fn collect_until(stmts: &[Stmt], out: &mut Vec<crate::algo::DimId>) {
    for s in stmts {
        if let Stmt::Loop(l) = s {
            out.extend(l.until);
            collect_until(&l.body, out);
        }
    }
}
