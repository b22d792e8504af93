//! Passes `max_before_scale` and `exp2`: attention's row maximum compares the unscaled scores and
//! scales once per row; where every build approximates `exp`, `exp(s - m)` becomes one
//! multiply-add and `exp2` per score, `log2 e` joining the scale. The interpreter, running the
//! lowered kernel, agrees with the evaluator.

mod common;

use common::{agrees, attention_scheduled, lowered};
use dt_core::algo::{BinOp, RedOp, UnOp};
use dt_core::kir::{Kernel, Op, Stmt, ValueId};
use proptest::prelude::*;

const OUT: &str = "rdot(exp(s[i, j] - m[i]), V[j, e], j) / l[i]";
const TILES: &str = "out.block(i:16, e:16); out.tensorize(i:0, e:0, j:8, d:4);";

fn attention(causal: bool, extra: &str) -> String {
    attention_scheduled(causal, OUT, &format!("{TILES} {extra}"))
}

fn defs(stmts: &[Stmt], out: &mut Vec<(ValueId, Op)>) {
    for s in stmts {
        match s {
            Stmt::Let { value, op } => out.push((*value, op.clone())),
            Stmt::Loop(l) => defs(&l.body, out),
            _ => {}
        }
    }
}

fn def(all: &[(ValueId, Op)], v: ValueId) -> &Op {
    &all.iter().find(|(x, _)| *x == v).expect("a defined value").1
}

/// The operations over (i, j) tiles: the scores and what is computed from them.
fn score_ops(k: &Kernel) -> Vec<Op> {
    let mut all = Vec::new();
    defs(&k.body, &mut all);
    let dim = |name: &str| k.dims.iter().find(|(_, n)| n == name).map(|(d, _)| *d).expect("a dimension");
    let (i, j) = (dim("i"), dim("j"));
    let tile = |v: &ValueId| k.value(*v).shape.dims().collect::<Vec<_>>() == [i, j];
    all.into_iter().filter(|(v, _)| tile(v)).map(|(_, op)| op).collect()
}

/// The row maximum reads the scores before their scaling (through the causal select and the
/// mask), and is scaled once per row afterwards.
#[test]
fn the_maximum_compares_unscaled_scores() {
    for causal in [false, true] {
        let (_, k) = lowered(&attention(causal, ""));
        let text = dt_core::kir::print(&k);
        let mut all = Vec::new();
        defs(&k.body, &mut all);
        let (max, operand) = all
            .iter()
            .find_map(|(v, op)| match op {
                Op::Reduce { op: RedOp::Max, value, .. } => Some((*v, *value)),
                _ => None,
            })
            .expect("a row maximum");
        let mut v = operand;
        loop {
            match def(&all, v) {
                Op::MaskFill { value, .. } | Op::Select(_, value, _) => v = *value,
                Op::Var(_) => break,
                other => panic!("the maximum reads {other:?}, not the scores:\n{text}"),
            }
        }
        let scaled = all
            .iter()
            .any(|(_, op)| matches!(op, Op::Binary(BinOp::Mul, a, c) if *a == max && matches!(def(&all, *c), Op::Unary(UnOp::Rsqrt, _))));
        assert!(scaled, "the maximum is scaled by rsqrt(len(d)):\n{text}");
    }
}

/// Under `fast_math()` (as in a 16-bit build), the scores' exponential is `exp2` of a product
/// less a per-row value: no `exp` and no product by `rsqrt(len(d))` over a score tile remain.
#[test]
fn approximated_scores_take_one_multiply_add_and_exp2() {
    for (causal, extra) in [(false, "out.fast_math();"), (true, "out.fast_math();"), (false, "out.dtypes(f16, bf16);")] {
        let (_, k) = lowered(&attention(causal, extra));
        let text = dt_core::kir::print(&k);
        let ops = score_ops(&k);
        assert!(ops.iter().any(|op| matches!(op, Op::Unary(UnOp::Exp2, _))), "{text}");
        assert!(!ops.iter().any(|op| matches!(op, Op::Unary(UnOp::Exp, _))), "{text}");
        let muls = ops.iter().filter(|op| matches!(op, Op::Binary(BinOp::Mul, ..))).count();
        assert_eq!(muls, 1, "one product per score (by rsqrt(len(d)) log2 e):\n{text}");
    }
}

/// Where some build evaluates `exp` exactly (f32 without `fast_math()`), `exp` stays.
#[test]
fn exact_builds_keep_exp() {
    let (_, k) = lowered(&attention(false, ""));
    let text = dt_core::kir::print(&k);
    assert!(!text.contains("exp2"), "{text}");
}

proptest! {
    #![proptest_config(common::proptest_config(48))]

    /// Under random tiles and sizes, causal or not, the rewritten kernel computes what the
    /// algorithm says (the interpreter evaluates `exp2` in f32, within the tests' 1e-4).
    #[test]
    fn scaled_scores_rewrite_preserves_semantics(
        causal in any::<bool>(),
        fast in any::<bool>(),
        (bi, bj, bd) in (prop::sample::select(vec![1u32, 4, 16]), prop::sample::select(vec![1u32, 2, 8, 16]), prop::sample::select(vec![1u32, 4, 8])),
        (i, j, d, e) in (1usize..40, 1usize..40, 1usize..12, 1usize..12),
        scale in prop::sample::select(vec![1.0f32, 8.0, 30.0]),
    ) {
        let fast = if fast { "out.fast_math();" } else { "" };
        let schedule = format!("out.block(i:{bi}, e:16); out.tensorize(i:0, e:0, j:{bj}, d:{bd}); {fast}");
        let src = attention_scheduled(causal, OUT, &schedule);
        let j = if causal { i } else { j };
        agrees(&src, (i, j, d, e), scale)?;
    }
}
