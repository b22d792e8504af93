//! Pass `reverse`: a looped row kernel writes its output from the row's last chunk to its
//! first, right after its statistics read the row from first to last, so that the second read
//! starts where the L2 cache is warm. The order changes no result.

mod common;

use common::{all_loops, interpreter_matches_evaluator, lowered, LAYERNORM, SOFTMAX};
use dt_core::kir::{Kernel, LoopKind, Steps};

/// Element-wise over rows looped in chunks: nothing read the row before, so the loop keeps
/// its order.
const SCALE: &str = "Func out; In A; Var x, y;
    out[x, y] = A[x, y] * 2;
    out.block(x:1); out.tensorize(x:0, y:16);
    out.compile();";

/// (kind, backward) of every loop over the row's columns (the full steps of each, where pass
/// `full_steps` split it).
fn column_loops(k: &Kernel) -> Vec<(LoopKind, bool)> {
    let y = k.dims.iter().find(|(_, n)| n == "y").map(|(d, _)| *d).expect("a dimension y");
    all_loops(&k.body).into_iter().filter(|l| l.dim == y && l.steps != Steps::Partial).map(|l| (l.kind, l.backward)).collect()
}

#[test]
fn looped_rows_write_backward_after_reading_forward() {
    for src in [SOFTMAX, LAYERNORM] {
        let (_, k) = lowered(src);
        assert_eq!(column_loops(&k), vec![(LoopKind::Reduction, false), (LoopKind::Whole, true)], "{}", dt_core::kir::print(&k));
        assert!(dt_core::kir::print(&k).contains("(whole, backward)"));
    }
    let (_, k) = lowered(SCALE);
    assert_eq!(column_loops(&k), vec![(LoopKind::Whole, false)], "{}", dt_core::kir::print(&k));
}

/// Rows of one element, shorter than a chunk, of whole chunks, and ending inside a chunk: the
/// interpreter, running the lowered kernel with its backward loop, agrees with the evaluator.
#[test]
fn backward_second_pass_preserves_semantics() {
    for src in [SOFTMAX, LAYERNORM, SCALE] {
        for (rows, cols) in [(3, 1), (2, 15), (3, 16), (3, 17), (2, 50), (1, 64)] {
            interpreter_matches_evaluator(src, rows, cols);
        }
    }
}
