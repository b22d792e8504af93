//! Pass `flash`: attention's three loops over the keys (the row maximum, the sum of
//! `exp(s - max)`, the dot of it with `V`) become one, the sum and the dot rescaled as the
//! maximum grows, the scores computed once. The interpreter, running the lowered kernel, agrees
//! with the evaluator, causal rows and rows shorter than a key step included.

mod common;

use common::{agrees, all_loops, attention_scheduled, lowered, SOFTMAX};
use dt_core::kir::{Kernel, LoopKind, Op, Stmt};
use proptest::prelude::*;

/// Attention over 2-D Q (i x d), K (j x d), V (j x e), keys in steps of 8, the causal mask
/// written as in the library spec.
fn attention(causal: bool) -> String {
    attention_with(causal, "rdot(exp(s[i, j] - m[i]), V[j, e], j) / l[i]")
}

/// Attention with the output written as `out`.
fn attention_with(causal: bool, out: &str) -> String {
    attention_scheduled(causal, out, "out.block(i:16, e:16); out.tensorize(i:0, e:0, j:8, d:4);")
}

fn dim(k: &Kernel, name: &str) -> dt_core::algo::DimId {
    k.dims.iter().find(|(_, n)| n == name).map(|(d, _)| *d).expect("dimension")
}

fn dots(stmts: &[Stmt]) -> usize {
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Let { op: Op::Dot { .. }, .. } => 1,
            Stmt::Loop(l) => dots(&l.body),
            _ => 0,
        })
        .sum()
}

#[test]
fn attention_reduces_over_the_keys_once() {
    for causal in [false, true] {
        let (_, k) = lowered(&attention(causal));
        let text = dt_core::kir::print(&k);
        let j = dim(&k, "j");
        let key_loops: Vec<_> = all_loops(&k.body).into_iter().filter(|l| l.dim == j && l.kind == LoopKind::Reduction).collect();
        assert_eq!(key_loops.len(), 1, "one loop over the keys:\n{text}");
        assert!(key_loops[0].origin.ends_with(", online"), "{text}");
        // Q K^T once, P V once.
        assert_eq!(dots(&k.body), 2, "{text}");
        // The sum and the dot are rescaled in the loop (set), then summed into.
        assert_eq!(text.matches("= set(").count(), 2, "{text}");
        assert_eq!(text.matches("= sum(").count(), 3, "the scores, the sum and the dot:\n{text}");
    }
}

#[test]
fn softmax_without_a_dot_is_left_to_the_online_pass() {
    let (_, k) = lowered(SOFTMAX);
    assert!(!dt_core::kir::print(&k).contains(", online"), "{}", dt_core::kir::print(&k));
}

/// A dot that reads the sum as well as the maximum (`exp(s - m) / l` inside it) cannot run in
/// the maximum's loop, where the sum is not known yet: the loops keep their form, and the
/// result its value.
#[test]
fn a_dot_that_reads_the_sum_keeps_its_own_loop() {
    let src = attention_with(false, "rdot(exp(s[i, j] - m[i]) / l[i], V[j, e], j)");
    let (_, k) = lowered(&src);
    let text = dt_core::kir::print(&k);
    assert!(!text.contains(", online"), "{text}");
    agrees(&src, (17, 9, 3, 5), 8.0).unwrap();
}

/// Query and key counts below, at and past the key step (8) and the query block (16), head
/// dimensions below and past the contraction step (4); scores spread enough that the running
/// maximum moves.
#[test]
fn online_attention_preserves_semantics() {
    for causal in [false, true] {
        let src = attention(causal);
        for (i, j, d, e) in [(1, 1, 1, 1), (3, 7, 5, 2), (16, 8, 4, 16), (17, 9, 3, 17), (20, 33, 6, 5), (5, 64, 9, 3)] {
            // Causal rows see keys j <= i: square scores, so that each row has one.
            let j = if causal { i } else { j };
            agrees(&src, (i, j, d, e), 8.0).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(common::proptest_config(64))]

    /// Under random blocks and tiles of the queries, keys, head dimensions and outputs, the
    /// online form computes what the algorithm says, causal or not.
    #[test]
    fn online_form_preserves_semantics(
        causal in any::<bool>(),
        (bi, bj, bd, be) in (prop::sample::select(vec![1u32, 4, 16]), prop::sample::select(vec![1u32, 2, 4, 8, 16]), prop::sample::select(vec![1u32, 2, 4, 8]), prop::sample::select(vec![1u32, 4, 16])),
        (i, j, d, e) in (1usize..40, 1usize..40, 1usize..12, 1usize..12),
        scale in prop::sample::select(vec![1.0f32, 8.0, 30.0]),
    ) {
        let schedule = format!("out.block(i:{bi}, e:{be}); out.tensorize(i:0, e:0, j:{bj}, d:{bd});");
        let src = attention_scheduled(causal, "rdot(exp(s[i, j] - m[i]), V[j, e], j) / l[i]", &schedule);
        let j = if causal { i } else { j };
        agrees(&src, (i, j, d, e), scale)?;
    }
}

/// The update of the running maximum's accumulator in the merged loop.
fn maximum_update(k: &Kernel) -> (dt_core::kir::Combine, Op) {
    fn find(stmts: &[Stmt], k: &Kernel) -> Option<(dt_core::kir::Combine, Op)> {
        stmts.iter().find_map(|s| match s {
            Stmt::Loop(l) if l.origin.ends_with(", online") => l.body.iter().find_map(|s| match s {
                // The first update in the step is the maximum's (the sum's and the dot's follow).
                Stmt::Update { combine, value, .. } => Some((*combine, k.def_of(*value).cloned().expect("a defined value"))),
                _ => None,
            }),
            Stmt::Loop(l) => find(&l.body, k),
            _ => None,
        })
    }
    find(&k.body, k).expect("an online loop")
}

/// Where every build approximates `exp` (16-bit types, or `fast_math()`), the running maximum
/// moves only when a step's maximum passes it by the margin (`select(r > old + margin, r, old)`);
/// exact builds keep the maximum itself.
#[test]
fn the_running_maximum_moves_only_past_its_margin() {
    use dt_core::algo::{BinOp, RedOp};
    use dt_core::kir::Combine;
    for (schedule, lazy) in [("out.dtypes(f16, bf16);", true), ("out.fast_math();", true), ("", false)] {
        let src = attention_scheduled(
            false,
            "rdot(exp(s[i, j] - m[i]), V[j, e], j) / l[i]",
            &format!("out.block(i:16, e:16); out.tensorize(i:0, e:0, j:8, d:4); {schedule}"),
        );
        let (_, k) = lowered(&src);
        let text = dt_core::kir::print(&k);
        let (combine, op) = maximum_update(&k);
        if !lazy {
            assert_eq!(combine, Combine::Reduce(RedOp::Max), "{schedule}:\n{text}");
            continue;
        }
        assert_eq!(combine, Combine::Set, "{schedule}:\n{text}");
        let Op::Select(moves, step_max, old) = op else { panic!("{schedule}: the maximum is set to a select:\n{text}") };
        assert!(matches!(k.def_of(old), Some(Op::Var(_))), "{schedule}: it keeps the old maximum:\n{text}");
        let Some(Op::Binary(BinOp::Gt, r, raised)) = k.def_of(moves) else {
            panic!("{schedule}: where the step's maximum is greater:\n{text}")
        };
        assert_eq!(*r, step_max, "{text}");
        let Some(Op::Binary(BinOp::Add, o, margin)) = k.def_of(*raised) else {
            panic!("{schedule}: than the old one plus the margin:\n{text}")
        };
        assert_eq!(*o, old, "{text}");
        assert_eq!(k.def_of(*margin), Some(&Op::Const(dt_core::lower::MOVE_MARGIN)), "{text}");
    }
}

/// Scores that grow along the keys, by less than the margin in some steps and by more in
/// others (the maximum stays, then moves, the accumulators rescaled by factors far from 1):
/// the lazily moved maximum still computes the algorithm's softmax, causal or not.
#[test]
fn a_lazily_moved_maximum_preserves_semantics() {
    use common::interpreted_and_evaluated;
    use dt_core::tensor::{Args, Tensor};
    for causal in [false, true] {
        let src = attention_scheduled(
            causal,
            "rdot(exp(s[i, j] - m[i]), V[j, e], j) / l[i]",
            "out.block(i:16, e:16); out.tensorize(i:0, e:0, j:8, d:4); out.fast_math();",
        );
        let (p, k) = lowered(&src);
        let (i, j, d, e) = (24, 24, 4, 5);
        // Query rows of ones; key j's entries grow with j, so that a step of keys (8) raises
        // the scores (2 x its entries: d = 4, scale 1/2) to at most 0.8, then 21 (the maximum
        // moves), then 22.3 (it stays, and the terms exceed 1).
        let growth = |j: usize| match j / 8 {
            0 => j as f32 * 0.06,
            1 => 6.0 + j as f32 * 0.3,
            _ => 10.0 + j as f32 * 0.05,
        };
        let keys: Vec<f32> = (0..j * d).map(|n| growth(n / d) + 0.01 * (n % d) as f32).collect();
        let values: Vec<f32> = (0..j * e).map(|n| ((n * 7) % 11) as f32 / 11.0 - 0.5).collect();
        let args = Args::default()
            .input("Q", Tensor::new(vec![i, d], vec![1.0; i * d]))
            .input("K", Tensor::new(vec![j, d], keys))
            .input("V", Tensor::new(vec![j, e], values));
        let (got, want) = interpreted_and_evaluated(&p, &k, &args);
        for (n, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "causal {causal}, element {n}: got {g}, want {w}");
        }
    }
}
