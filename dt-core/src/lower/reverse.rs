//! Pass 13: a row's second pass reads the chunks its first pass read last, first.
//!
//! A looped row kernel (softmax or layernorm over rows longer than a tile) reads each row twice:
//! a `reduce` loop for its statistics, then a `whole` loop for the output. Run in the same
//! direction, the second pass starts with the chunks the first read longest ago, the ones the L2
//! cache is likeliest to have evicted since (a long row, times the rows in flight, can exceed
//! the cache), and each miss evicts a chunk it will want next. Run backward, it starts with the
//! chunks just read, which are still cached:
//!
//! ```text
//! for y step 8192 (reduce):             for y step 8192 (reduce):
//!   %0 = load A[x, y] ...                 %0 = load A[x, y] ...
//! for y step 8192 (whole):       =>     for y step 8192 (whole, backward):
//!   %1 = load A[x, y] ...                 %1 = load A[x, y] ...
//!   store ...                             store ...
//! ```
//!
//! A `whole` loop's iterations are independent (each computes and stores its own tile), so the
//! order changes no result. It applies to a `whole` loop with no loop inside it that loads an
//! input which a `reduce` loop earlier in the same statement list, over the same dimension and
//! step and with no loop inside it, also loads. A row split over a cluster (`cluster`) loops
//! over this program's block of it: there the loops are `in block`, and the first must only
//! accumulate, the second only store.

use crate::kir::{Kernel, Loop, LoopKind, Op, Stmt};

pub fn reverse_second_passes(k: &mut Kernel) {
    rewrite(&mut k.body);
}

fn rewrite(stmts: &mut [Stmt]) {
    for i in 0..stmts.len() {
        let Stmt::Loop(l) = &stmts[i] else { continue };
        let follows_a_reduction = pass_of(l) == Some(Pass::Output)
            && innermost(l)
            && stmts[..i].iter().any(|s| {
                matches!(s, Stmt::Loop(r) if pass_of(r) == Some(Pass::Statistics) && innermost(r) && r.dim == l.dim && r.step == l.step
                    && over_the_same_range(r, l) && shares_an_input(r, l))
            });
        let Stmt::Loop(l) = &mut stmts[i] else { continue };
        if follows_a_reduction {
            l.backward = true;
        }
        rewrite(&mut l.body);
    }
}

/// What a loop's iterations do: accumulate a row's statistics, or compute and store its output
/// (each iteration on its own).
#[derive(PartialEq, Eq)]
enum Pass {
    Statistics,
    Output,
}

/// The pass loop `l` makes: a `reduce` loop accumulates and a `whole` loop stores; a loop over
/// the chunks of this program's block of a row split over a cluster does what its body does,
/// if only one of the two.
fn pass_of(l: &Loop) -> Option<Pass> {
    let updates = l.body.iter().any(|s| matches!(s, Stmt::Update { .. } | Stmt::Init { .. }));
    let stores = l.body.iter().any(|s| matches!(s, Stmt::Store { .. }));
    match (l.kind, updates, stores) {
        (LoopKind::Reduction, ..) | (LoopKind::Block, true, false) => Some(Pass::Statistics),
        (LoopKind::Whole, ..) | (LoopKind::Block, false, true) => Some(Pass::Output),
        _ => None,
    }
}

/// Whether both loops run over the whole row, or both over this program's block of it (an
/// output loop over a block that follows statistics over the whole row shares its lines with the
/// other programs of the row, which still read them).
fn over_the_same_range(a: &Loop, b: &Loop) -> bool {
    (a.kind == LoopKind::Block) == (b.kind == LoopKind::Block)
}

fn innermost(l: &Loop) -> bool {
    !l.body.iter().any(|s| matches!(s, Stmt::Loop(_)))
}

fn inputs(l: &Loop) -> Vec<usize> {
    l.body
        .iter()
        .filter_map(|s| match s {
            Stmt::Let { op: Op::Load { input, .. }, .. } => Some(*input),
            _ => None,
        })
        .collect()
}

fn shares_an_input(a: &Loop, b: &Loop) -> bool {
    let (a, b) = (inputs(a), inputs(b));
    a.iter().any(|i| b.contains(i))
}
