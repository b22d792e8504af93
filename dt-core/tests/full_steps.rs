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

/// Layernorm's rows split over a cluster of 4, each program's block of 16 columns in steps of
/// 4: with `num_stages(4)` every step of the block is staged (a block held in shared memory),
/// without it the output loop reads memory again.
const CLUSTERED: &str = "Func mean, var, out; In X, W; Var x; RVar y;
    mean[x] = rsum(X[x, y], y) / len(y);
    var[x] = rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y) / len(y);
    out[x, y] = (X[x, y] - mean[x]) * rsqrt(var[x] + 0.00001) * W[y];
    out.block(x:1, y:16); out.tensorize(x:0, y:4); out.cluster(y:4); STAGES
    mean.fuse_at(out, x); var.fuse_at(out, x);
    out.compile();";

/// The steps of each loop that stores, in order.
fn output_steps(src: &str) -> Vec<Steps> {
    let (_, k) = lowered(src);
    all_loops(&k.body).iter().filter(|l| l.body.iter().any(|s| matches!(s, Stmt::Store { .. }))).map(|l| l.steps).collect()
}

/// An output loop whose only checks are its loads' and stores' bounds splits where it loops
/// over a held block (its loads read shared memory) and stays whole where it reads memory.
#[test]
fn output_loops_split_over_held_blocks_only() {
    assert_eq!(output_steps(&CLUSTERED.replace("STAGES", "out.num_stages(4);")), [Steps::Partial, Steps::Full]);
    assert_eq!(output_steps(&CLUSTERED.replace("STAGES", "")), [Steps::All]);
}

/// Rows that fill the cluster, end inside a program's block or inside a step, or leave programs
/// idle: the split output loop over the held block computes what the algorithm says.
#[test]
fn held_blocks_split_preserve_semantics() {
    for cols in [5, 17, 33, 49, 52, 55, 60, 63, 64] {
        interpreter_matches_evaluator(&CLUSTERED.replace("STAGES", "out.num_stages(4);"), 2, cols);
    }
}
