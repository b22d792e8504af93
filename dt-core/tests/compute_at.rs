//! `fuse_at` as compute-at: a producer read inside the consumer's reduction over `l` is computed
//! at its level for all of `l` (one whole tile), kept in an accumulator, and read by every step
//! of the consumer's loops after it: the talk's two-matmul listing, as the talk gives it.

mod common;

use common::all_loops;
use dt_core::kir::{Kernel, LoopKind, Op, Stmt};
use dt_core::tensor::{Args, Tensor};

const TALK_2MM: &str = include_str!("../../dt-codegen/tests/specs/talk_2mm.dt");

fn dim(k: &Kernel, name: &str) -> dt_core::algo::DimId {
    k.dims.iter().find(|(_, n)| n == name).map(|(d, _)| *d).expect("dimension")
}

#[test]
fn the_talks_two_matmuls_compute_mm_once_per_block_of_m() {
    let p = dt_core::compile_spec(TALK_2MM).expect("the talk's listing checks");
    let k = dt_core::lower::lower(&p, p.kernel_by_name("_2mm").expect("the listing's kernel")).expect("lowers");
    let text = dt_core::kir::print(&k);
    let (l, n) = (dim(&k, "l"), dim(&k, "n"));
    // `l:0` on a dimension neither blocked nor bounded: the default bound.
    assert_eq!(k.bounds, vec![(l, dt_core::check::DEFAULT_WHOLE_BOUND)], "{text}");
    // mm's accumulator holds all of l, set before the loop over n, which only reads it.
    let Some(Stmt::Loop(m_loop)) = k.body.first() else { panic!("a loop over m:\n{text}") };
    let n_at = m_loop.body.iter().position(|s| matches!(s, Stmt::Loop(x) if x.dim == n)).expect("the loop over n");
    let mm_read = m_loop.body[..n_at].iter().find_map(|s| match s {
        Stmt::Let { value, op: Op::Var(_) } if k.value(*value).shape.extent(l) == Some(dt_core::check::DEFAULT_WHOLE_BOUND as u32) => {
            Some(*value)
        }
        _ => None,
    });
    assert!(mm_read.is_some(), "mm computed for all of l before the loop over n:\n{text}");
    let Stmt::Loop(n_loop) = &m_loop.body[n_at] else { unreachable!() };
    assert!(all_loops(&n_loop.body).iter().all(|x| x.dim != dim(&k, "k")), "mm is not computed again inside n:\n{text}");
    assert!(all_loops(&k.body).iter().all(|x| !(x.dim == l && x.kind == LoopKind::Reduction)), "l is one tile:\n{text}");
}

/// `l:0` on a dimension neither blocked nor bounded: the listing's kernel takes the default
/// bound, after classes bounded to 32 and 64 (`dt_core::whole_classes`), in the order a launch
/// tries them, so that a launch with `l` = 32 computes no masked quarter.
#[test]
fn whole_tiles_of_unbounded_dimensions_get_smaller_classes_first() {
    let p = dt_core::compile_spec(TALK_2MM).expect("the talk's listing checks");
    let classes: Vec<(String, Vec<u64>)> = p
        .kernels
        .iter()
        .map(|k| {
            let kernel = dt_core::lower::lower(&p, *k).expect("lowers");
            (kernel.name.clone(), kernel.bounds.iter().map(|(_, n)| *n).collect())
        })
        .collect();
    let want = [("_2mm_32l", 32), ("_2mm_64l", 64), ("_2mm", dt_core::check::DEFAULT_WHOLE_BOUND)];
    assert_eq!(classes, want.map(|(n, b)| (n.to_string(), vec![b])).to_vec());
    assert!(dt_core::select::is_variant_of("_2mm_32l", "_2mm"));
    // A bound written in the spec, or a blocked dimension, takes no classes.
    let bounded = TALK_2MM.replace("_2mm.num_warps(4);", "_2mm.num_warps(4);\n_2mm.bound(l:256);");
    assert_eq!(dt_core::compile_spec(&bounded).expect("checks").kernels.len(), 1);
    // The spec written out holds the classes, and checks to the same kernels.
    let flat = dt_core::blocks::flat_text(TALK_2MM).expect("writes out");
    assert!(flat.contains("_2mm_32l.bound(l:32);\n_2mm_32l.compile_to_kernel();"), "{flat}");
    assert_eq!(dt_core::compile_spec(&flat).expect("checks").kernels.len(), 3, "{flat}");
}

#[test]
fn a_tiled_reduction_cannot_hold_its_producer() {
    let spec = TALK_2MM.replace("_2mm.tensorize(l:0);", "_2mm.tensorize(l:32);");
    let errs = dt_core::compile_spec(&spec).expect_err("l in steps of 32");
    let e = errs.iter().find(|d| d.message.contains("for all of `l`")).unwrap_or_else(|| panic!("{errs:?}"));
    assert!(e.label.contains("_2mm.tensorize(l:0)"), "{}", e.label);
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    common::centered(n, seed, 2.0)
}

/// The interpreter, running lowered kernel `k` of `p` on `args`, agrees with the evaluator
/// within 1e-4, relative.
fn interpreter_matches_evaluator(p: &dt_core::algo::Program, k: &Kernel, args: &Args, case: &str) {
    let (got, want) = common::interpreted_and_evaluated(p, k, args);
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{case}, element {i}: got {g}, want {w}");
    }
}

/// Sizes that are multiples of no tile, l from 1 to the default bound: the interpreter, running
/// each class of the lowered kernel that admits `l`, agrees with the evaluator.
#[test]
fn compute_at_preserves_semantics() {
    let p = dt_core::compile_spec(TALK_2MM).expect("checks");
    for k in p.kernels.iter().map(|k| dt_core::lower::lower(&p, *k).expect("lowers")) {
        for (m, n, kk, l) in [(1, 1, 1, 1), (17, 65, 45, 33), (16, 64, 32, 32), (40, 130, 33, 128), (33, 7, 70, 100), (9, 20, 5, 64)] {
            if k.bounds.iter().any(|(_, b)| (l as u64) > *b) {
                continue;
            }
            let args = Args::default()
                .input("A", Tensor::new(vec![m, kk], values(m * kk, 1)))
                .input("B", Tensor::new(vec![kk, l], values(kk * l, 2)))
                .input("C", Tensor::new(vec![l, n], values(l * n, 3)));
            interpreter_matches_evaluator(&p, &k, &args, &format!("{} at {m}x{n}x{kk}x{l}", k.name));
        }
    }
}

const TALK_ATTENTION: &str = include_str!("../../dt-codegen/tests/specs/talk_attention.dt");

/// The talk's attention listing chains its placements (`mm` in `e`, `dvsr` in `sm`, both of
/// those in `attention`): everything but the last dot is computed once per block of `m`, for
/// all of `l`, before the loop over `n`.
#[test]
fn the_talks_attention_chains_its_placements() {
    let p = dt_core::compile_spec(TALK_ATTENTION).expect("the talk's listing checks");
    let k = dt_core::lower::lower(&p, p.kernel_by_name("attention").expect("the listing's kernel")).expect("lowers");
    let text = dt_core::kir::print(&k);
    let (l, n, kd) = (dim(&k, "l"), dim(&k, "n"), dim(&k, "k"));
    let loops = all_loops(&k.body);
    assert!(loops.iter().all(|x| x.dim != l), "l is one whole tile:\n{text}");
    let Some(n_loop) = loops.iter().find(|x| x.dim == n) else { panic!("a loop over n:\n{text}") };
    assert!(all_loops(&n_loop.body).iter().all(|x| x.dim != kd), "the scores are not computed again inside n:\n{text}");
    for (m, nn, kk, ll) in [(1, 1, 1, 1), (17, 65, 20, 33), (16, 64, 16, 128), (5, 3, 7, 100)] {
        let args = Args::default()
            .input("A", Tensor::new(vec![m, kk], values(m * kk, 4)))
            .input("B", Tensor::new(vec![kk, ll], values(kk * ll, 5)))
            .input("C", Tensor::new(vec![ll, nn], values(ll * nn, 6)));
        interpreter_matches_evaluator(&p, &k, &args, &format!("{m}x{nn}x{kk}x{ll}"));
    }
}
