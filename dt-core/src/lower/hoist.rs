//! Pass 14: what does not change from one step of a loop to the next is computed before it.
//!
//! The output loop of a looped or held row reads the row's statistics, computed after the loop
//! before it, through element-wise operations that do not depend on the step: layernorm's
//! `rsqrt(variance + eps)` is one per row, but the nest builds it where the output reads it,
//! inside the loop, and a target computes it again at every step (on the GPU, a `rsqrt` with its
//! range checks per 8 elements). Here each such value moves to just before the loop:
//!
//! ```text
//! for y step 4096 (whole):                %22 = scalar eps
//!   %18 = load X[x, y] masked else 0      %23 = add %17, %22
//!   %20 = sub %18, %5                     %24 = rsqrt %23
//!   %22 = scalar eps              =>      for y step 4096 (whole):
//!   %23 = add %17, %22                      %18 = load X[x, y] masked else 0
//!   %24 = rsqrt %23                         %20 = sub %18, %5
//!   %25 = mul %20, %24                      %25 = mul %20, %24
//! ```
//!
//! A value moves when it is a constant, a scalar argument, a dimension's size (or its lanes in
//! this program's block), or an element-wise operation whose operands are all computed outside
//! the loop (or moved before it).
//! So does a mask along another dimension than the loop's (the talk's 2mm masks the product A B
//! along `l`, computed once, where the loop over `n` reads it). Loads, indices, masks along the
//! loop's dimension, reductions and reads of accumulators stay: they depend on the step or on
//! what the loop updates. Inner loops are treated first, so a value can move out of several.

use crate::algo::DimId;
use crate::kir::{Kernel, Op, Stmt, ValueId};
use std::collections::HashSet;

pub fn hoist_loop_invariants(k: &mut Kernel) {
    k.body = rewrite(std::mem::take(&mut k.body));
}

fn rewrite(stmts: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        let Stmt::Loop(mut l) = s else {
            out.push(s);
            continue;
        };
        let body = rewrite(std::mem::take(&mut l.body));
        let mut inside = HashSet::new();
        defined(&body, &mut inside);
        let mut kept = Vec::with_capacity(body.len());
        for s in body {
            match s {
                Stmt::Let { value, op } if same_every_step(&op, l.dim) && op.operands().iter().all(|o| !inside.contains(o)) => {
                    inside.remove(&value);
                    out.push(Stmt::Let { value, op });
                }
                s => kept.push(s),
            }
        }
        l.body = kept;
        out.push(Stmt::Loop(l));
    }
    out
}

/// Whether the operation gives the same result at every step of a loop over `dim` wherever its
/// operands are the same: a mask along another dimension is one (its lanes are those of that
/// dimension's enclosing offset, which the loop does not move).
fn same_every_step(op: &Op, dim: DimId) -> bool {
    match op {
        Op::MaskFill { dim: masked, .. } => *masked != dim,
        _ => matches!(op, Op::Const(_) | Op::Scalar(_) | Op::Len(_) | Op::BlockLanes(_) | Op::Unary(..) | Op::Binary(..) | Op::Select(..)),
    }
}

/// The values that `stmts` define, nested loops included.
fn defined(stmts: &[Stmt], out: &mut HashSet<ValueId>) {
    for s in stmts {
        match s {
            Stmt::Let { value, .. } => {
                out.insert(*value);
            }
            Stmt::Loop(l) => defined(&l.body, out),
            Stmt::Init { .. } | Stmt::Update { .. } | Stmt::Store { .. } => {}
        }
    }
}
