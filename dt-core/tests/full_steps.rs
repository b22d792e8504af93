//! Pass `full_steps`: a loop over a dimension longer than its step runs the steps that lie
//! wholly inside the dimension without masks, and the one that reaches past its end with them.

mod common;

use common::{all_loops, interpreter_matches_evaluator, lowered, LAYERNORM, SOFTMAX};
use dt_core::kir::{Loop, Op, Steps, Stmt};

/// A sum alone (no statistic carried along), the mean of a row.
const MEAN: &str = "Func out; In A; Var x; RVar y;
    out[x] = rsum(A[x, y], y) / len(y);
    out.block(x:4); out.tensorize(x:0, y:8);
    out.compile();";

/// Whether `l`'s body masks along its dimension, or tests whether its lanes are valid.
fn masks(l: &Loop) -> bool {
    l.body.iter().any(|s| {
        matches!(s, Stmt::Let { op: Op::MaskFill { dim, .. }, .. } if *dim == l.dim)
            || matches!(s, Stmt::Let { op: Op::Index(d), .. } if *d == l.dim)
    })
}

/// Softmax's statistics loop masks its exponentials and layernorm's counts the valid lanes of
/// each run: their full steps do neither, their partial steps do. A mean's loop masks nothing
/// (its loads fill with 0) and stays whole.
#[test]
fn only_loops_with_masks_split_and_full_steps_mask_nothing() {
    for src in [SOFTMAX, LAYERNORM] {
        let (_, k) = lowered(src);
        let text = dt_core::kir::print(&k);
        let loops = all_loops(&k.body);
        let full: Vec<&Loop> = loops.iter().filter(|l| l.steps == Steps::Full).collect();
        let partial: Vec<&Loop> = loops.iter().filter(|l| l.steps == Steps::Partial).collect();
        assert_eq!((full.len(), partial.len()), (1, 1), "{text}");
        assert!(!masks(full[0]) && masks(partial[0]), "{text}");
    }
    let (_, k) = lowered(MEAN);
    assert!(all_loops(&k.body).iter().all(|l| l.steps == Steps::All), "{}", dt_core::kir::print(&k));
}

/// Every row length from 1 to 70: no full step, only full steps, and both. The interpreter,
/// running the split loops, agrees with the evaluator.
#[test]
fn full_steps_preserve_semantics() {
    for src in [SOFTMAX, LAYERNORM, MEAN] {
        for cols in 1..=70 {
            interpreter_matches_evaluator(src, 1 + cols % 5, cols);
        }
    }
}
