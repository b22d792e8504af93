//! Pass `hoist`: what does not change from one step of a loop to the next is computed before it.

mod common;

use common::{interpreter_matches_evaluator, lowered};
use dt_core::algo::UnOp;
use dt_core::kir::{Op, Stmt};

/// Layernorm over rows longer than its tile: a statistics loop, then an output loop that scales
/// each element by `rsqrt(var + 0.00001)`, one value per row.
const LOOPED_LAYERNORM: &str = "Func mean, var, out; In X, W; Var x; RVar y;
    mean[x] = rsum(X[x, y], y) / len(y);
    var[x] = rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y) / len(y);
    out[x, y] = (X[x, y] - mean[x]) * rsqrt(var[x] + 0.00001) * W[y];
    out.block(x:2); out.tensorize(x:1, y:8);
    mean.fuse_at(out, x); var.fuse_at(out, x);
    out.compile();";

/// Whether `stmts` take an `rsqrt` inside a loop that stores, and whether anywhere.
fn rsqrt_in(stmts: &[Stmt], in_storing_loop: bool) -> (bool, bool) {
    let (mut inside, mut anywhere) = (false, false);
    for s in stmts {
        match s {
            Stmt::Let { op: Op::Unary(UnOp::Rsqrt, _), .. } => {
                anywhere = true;
                inside |= in_storing_loop;
            }
            Stmt::Loop(l) => {
                let stores = l.body.iter().any(|s| matches!(s, Stmt::Store { .. }));
                let (i, a) = rsqrt_in(&l.body, in_storing_loop || stores);
                inside |= i;
                anywhere |= a;
            }
            _ => {}
        }
    }
    (inside, anywhere)
}

/// The row's `rsqrt(var + eps)` and the constant it adds are computed once per row, before the
/// output loop; the element-wise work on the loaded tiles stays in it.
#[test]
fn loop_invariant_values_are_computed_before_the_loop() {
    let (_, k) = lowered(LOOPED_LAYERNORM);
    let text = dt_core::kir::print(&k);
    assert_eq!(rsqrt_in(&k.body, false), (false, true), "{text}");
    let output =
        common::all_loops(&k.body).into_iter().find(|l| l.body.iter().any(|s| matches!(s, Stmt::Store { .. }))).expect("an output loop");
    assert!(!output.body.iter().any(|s| matches!(s, Stmt::Let { op: Op::Const(_) | Op::Scalar(_), .. })), "{text}");
    assert!(output.body.iter().any(|s| matches!(s, Stmt::Let { op: Op::Binary(..), .. })), "{text}");
}

/// Rows shorter than a step, as long as a step, and longer: the hoisted kernel computes what
/// the algorithm says.
#[test]
fn hoisting_preserves_semantics() {
    for cols in [1, 7, 8, 9, 24, 37] {
        interpreter_matches_evaluator(LOOPED_LAYERNORM, 3, cols);
    }
}
