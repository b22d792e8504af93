//! Causal attention's key loop stops at the end of the program's block of queries (pass
//! `flash`, `Loop::until`): the steps after it hold only `-inf` scores. Only a causal mask to
//! `-inf` stops it, and the interpreter, which stops there too, agrees with the evaluator. The
//! grid then takes the blocks of queries last first.

mod common;

use common::{all_loops, centered, interpreted_and_evaluated, lowered};
use dt_core::tensor::{Args, Tensor};

/// Attention of one head with the scores masked by `cond` to `fill`; queries in blocks of 16,
/// keys in steps of 16, the head dimension in one tile.
fn spec(cond: &str, fill: &str) -> String {
    format!(
        "Func s, m, l, out; In Q, K, V; Var i, j, e; RVar d;
        s[i, j] = where({cond}, rdot(Q[i, d], K[j, d], d), {fill});
        m[i] = rmax(s[i, j], j);
        l[i] = rsum(exp(s[i, j] - m[i]), j);
        out[i, e] = rdot(exp(s[i, j] - m[i]), V[j, e], j) / l[i];
        out.block(i:16, e:16); out.tensorize(i:0, e:0, j:16, d:0); out.bound(d:16);
        m.fuse_at(out, i); l.fuse_at(out, i);
        out.compile();"
    )
}

/// The dimension the merged key loop stops at the end of the block of, if any.
fn stop(src: &str) -> Option<String> {
    let (_, k) = lowered(src);
    let keys = all_loops(&k.body).into_iter().find(|l| l.origin.contains("online")).expect("one merged loop over the keys");
    keys.until.map(|d| k.dim_name(d).to_string())
}

#[test]
fn a_causal_mask_stops_the_key_loop_at_the_blocks_last_query() {
    assert_eq!(stop(&spec("j <= i", "-inf")).as_deref(), Some("i"));
    assert_eq!(stop(&spec("j < i", "-inf")).as_deref(), Some("i"));
    assert_eq!(stop(&spec("i >= j", "-inf")).as_deref(), Some("i"));
}

/// The loop that stops carries its mask's condition (`Loop::diagonal`), a comparison of the
/// key index with the query index defined in its body, strict where the mask is.
#[test]
fn a_causal_loop_knows_the_condition_that_holds_below_the_diagonal() {
    use dt_core::algo::BinOp;
    use dt_core::kir::{Op, Stmt};
    for (cond, strict) in [("j <= i", false), ("j < i", true), ("i >= j", false)] {
        let (_, k) = lowered(&spec(cond, "-inf"));
        let keys = all_loops(&k.body).into_iter().find(|l| l.origin.contains("online")).expect("the merged loop");
        let g = keys.diagonal.expect("a diagonal");
        assert_eq!(g.strict, strict, "{cond}");
        let def = keys.body.iter().find_map(|s| match s {
            Stmt::Let { value, op } if *value == g.cond => Some(op.clone()),
            _ => None,
        });
        assert!(matches!(def, Some(Op::Binary(BinOp::Le | BinOp::Lt | BinOp::Ge | BinOp::Gt, ..))), "{cond}: {def:?}");
    }
}

/// The grid takes the blocks of queries last first where the key loop stops at the block's last
/// query (pass `heaviest_first`): the programs with the most key steps start first.
#[test]
fn the_longest_programs_start_first() {
    let descending = |src: &str| {
        let (_, k) = lowered(src);
        k.grid.descending.iter().map(|d| k.dim_name(*d).to_string()).collect::<Vec<_>>()
    };
    assert_eq!(descending(&spec("j <= i", "-inf")), ["i"]);
    assert!(descending(&spec("j >= i", "-inf")).is_empty());
    assert!(descending(&spec("j <= i", "0")).is_empty());
}

#[test]
fn other_masks_run_every_key_step() {
    // Keys after the query are the ones kept: the loop cannot stop early.
    assert_eq!(stop(&spec("j >= i", "-inf")), None);
    // A finite fill still weighs the masked keys.
    assert_eq!(stop(&spec("j <= i", "0")), None);
}

/// Sizes that are multiples of no block, more keys than queries and fewer: the interpreter,
/// stopping each block's key loop at its last query, agrees with the evaluator.
#[test]
fn stopping_at_the_last_query_preserves_semantics() {
    let (p, k) = lowered(&spec("j <= i", "-inf"));
    for (i, j, d, e) in [(1, 1, 1, 1), (17, 40, 5, 3), (40, 17, 16, 20), (33, 33, 9, 16), (64, 100, 7, 5)] {
        let args = Args::default()
            .input("Q", Tensor::new(vec![i, d], centered(i * d, 1, 2.0)))
            .input("K", Tensor::new(vec![j, d], centered(j * d, 2, 2.0)))
            .input("V", Tensor::new(vec![j, e], centered(j * e, 3, 2.0)));
        let (got, want) = interpreted_and_evaluated(&p, &k, &args);
        for (n, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
            let same = (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-4 * (1.0 + w.abs());
            assert!(same, "{i}x{j}x{d}x{e}, element {n}: got {g}, want {w}");
        }
    }
}
