//! `cluster(y:N)`: a row split over the programs of a cluster. The lowering reduces each
//! program's block and combines the partials over the cluster; the interpreter runs a cluster's
//! programs at once and meets them there. Clustered kernels compute what their algorithm says,
//! for rows that fill the cluster, leave its last programs nothing, or end inside a program.

use dt_core::kir::{Kernel, Op, Stmt};
use dt_core::tensor::{bind, Args, Tensor};
use dt_core::DType;

const SOFTMAX: &str = "Func m, s, out; In A; Var x; RVar y;
    m[x] = rmax(A[x, y], y);
    s[x] = rsum(exp(A[x, y] - m[x]), y);
    out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
    out.block(x:2, y:16); out.tensorize(x:1, y:TILE); out.cluster(y:4);
    m.fuse_at(out, x); s.fuse_at(out, x);
    out.compile();";

const LAYERNORM: &str = "Func mean, var, out; In X, W; Var x; RVar y;
    mean[x] = rsum(X[x, y], y) / len(y);
    var[x] = rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y) / len(y);
    out[x, y] = (X[x, y] - mean[x]) * rsqrt(var[x] + 0.00001) * W[y];
    out.block(x:2, y:16); out.tensorize(x:1, y:TILE); out.cluster(y:4);
    mean.fuse_at(out, x); var.fuse_at(out, x);
    out.compile();";

fn lowered(src: &str) -> (dt_core::algo::Program, Kernel) {
    let p = dt_core::compile_spec(src).expect("spec checks");
    let k = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
    (p, k)
}

/// Every operation of the program, loops included.
fn ops(stmts: &[Stmt]) -> Vec<Op> {
    stmts
        .iter()
        .flat_map(|s| match s {
            Stmt::Let { op, .. } => vec![op.clone()],
            Stmt::Loop(l) => ops(&l.body),
            _ => vec![],
        })
        .collect()
}

fn loops(stmts: &[Stmt]) -> usize {
    stmts.iter().map(|s| if let Stmt::Loop(l) = s { 1 + loops(&l.body) } else { 0 }).sum()
}

/// Deterministic values with a spread of about `scale` and an offset, rows x cols.
fn values(rows: usize, cols: usize, scale: f32, seed: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| ((i * 7919 + seed * 104_729) % 1009) as f32 / 1009.0 * scale - scale / 3.0 + 1.5).collect()
}

/// Runs the kernel in the interpreter and the algorithm in the evaluator; they agree.
fn check(src: &str, rows: usize, cols: usize, scale: f32) {
    let (p, k) = lowered(src);
    let first = if src.contains("In A;") { "A" } else { "X" };
    let mut args = Args::default().input(first, Tensor::new(vec![rows, cols], values(rows, cols, scale, cols)));
    if first == "X" {
        args = args.input("W", Tensor::new(vec![cols], values(1, cols, 1.0, 3)));
    }
    let want = dt_core::eval::evaluate(&p, p.kernels[0], &args, DType::F32).expect("evaluates");
    let got = dt_core::interp::run(&k, &bind(&p, p.kernels[0], &args).expect("binds"), DType::F32);
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{rows}x{cols}, element {i}: got {g}, want {w}\n{}", dt_core::kir::print(&k));
    }
}

/// With a tile as wide as the block, a program's block of a row is loaded once: the
/// reductions and the output share it, and no loop over `y` is left; each statistic is
/// combined over the cluster once.
#[test]
fn clustered_rows_are_read_once_and_combined_once_per_statistic() {
    for src in [SOFTMAX, LAYERNORM] {
        let (_, k) = lowered(&src.replace("TILE", "0"));
        let all = ops(&k.body);
        let combined = all.iter().filter(|o| matches!(o, Op::ClusterReduce { .. })).count();
        let row_loads = all.iter().filter(|o| matches!(o, Op::Load { axes, .. } if axes.len() == 2)).count();
        assert_eq!((combined, row_loads), (2, 1), "{}", dt_core::kir::print(&k));
        assert_eq!(loops(&k.body), 1, "only the loop over the rows of the block:\n{}", dt_core::kir::print(&k));
        assert_eq!(k.grid.cluster.map(|(_, n)| n), Some(4));
        assert_eq!(k.bounds.iter().map(|(_, n)| *n).min(), Some(64), "a cluster of 4 blocks of 16 holds rows of up to 64");
    }
}

/// Loops over `y` (a program's block in steps of the tile) that accumulate (statistics) and
/// that store (the output), the partial steps of loops split by `full_steps` not counted; and
/// whether every storing loop runs backward.
fn row_loops(stmts: &[Stmt]) -> (usize, usize, bool) {
    let (mut stats, mut outputs, mut backward) = (0, 0, true);
    for s in stmts {
        let Stmt::Loop(l) = s else { continue };
        if l.dim.index() == 0 || l.body.iter().any(|s| matches!(s, Stmt::Loop(_))) {
            let inner = row_loops(&l.body);
            (stats, outputs, backward) = (stats + inner.0, outputs + inner.1, backward && inner.2);
            continue;
        }
        if l.steps == dt_core::kir::Steps::Partial {
            continue;
        }
        if l.body.iter().any(|s| matches!(s, Stmt::Store { .. })) {
            outputs += 1;
            backward &= l.backward;
        } else {
            stats += 1;
        }
    }
    (stats, outputs, backward)
}

/// With a tile narrower than the block, a program loops over its block: both statistics in
/// one loop (pass `online`), kept per run of 8 lanes, the second taken about the program's own
/// first statistic and combined over the cluster at the first one's meeting (layernorm's count of
/// lanes from the block's bounds), and the output loop backward.
#[test]
fn clustered_looped_rows_carry_both_statistics_in_one_loop_and_meet_once() {
    for src in [SOFTMAX, LAYERNORM] {
        for tile in ["4", "8"] {
            let (_, k) = lowered(&src.replace("TILE", tile));
            let text = dt_core::kir::print(&k);
            assert_eq!(row_loops(&k.body), (1, 1, true), "{text}");
            let all = ops(&k.body);
            assert_eq!(all.iter().filter(|o| matches!(o, Op::ClusterReduce { .. })).count(), 1, "{text}");
            assert_eq!(all.iter().filter(|o| matches!(o, Op::ClusterPaired { .. })).count(), 1, "{text}");
            // Layernorm's programs count their lanes from their blocks' bounds.
            let counted = all.iter().filter(|o| matches!(o, Op::BlockLanes(_))).count();
            assert_eq!(counted, usize::from(src == LAYERNORM), "{text}");
            assert!(text.contains("over runs of 8"), "{text}");
            assert!(text.contains("full steps"), "{text}");
        }
    }
}

/// A cluster of 4 blocks of 16 leaves its last program without columns for rows of up to 48
/// (the library then prefers a later size class), and none from 49 on.
#[test]
fn idle_programs_are_told_by_the_row_length() {
    let (_, k) = lowered(&SOFTMAX.replace("TILE", "8"));
    for (n, idle) in [(1, true), (16, true), (48, true), (49, false), (64, false)] {
        assert_eq!(k.grid.cluster_leaves_programs_idle(|_| n), idle, "rows of {n}");
    }
}

#[test]
fn clustered_softmax_matches_reference() {
    for tile in ["0", "4", "8"] {
        let src = SOFTMAX.replace("TILE", tile);
        for (rows, cols) in [(1, 1), (3, 5), (2, 16), (3, 17), (5, 47), (2, 64), (4, 63)] {
            check(&src, rows, cols, 12.0);
        }
    }
}

#[test]
fn clustered_layernorm_matches_reference() {
    for tile in ["0", "4", "8"] {
        let src = LAYERNORM.replace("TILE", tile);
        for (rows, cols) in [(1, 1), (3, 5), (2, 16), (3, 33), (5, 50), (2, 64)] {
            check(&src, rows, cols, 4.0);
        }
    }
}

/// Clusters of 16, the largest (`signature::MAX_CLUSTER`): the interpreter meets all 16 programs, for
/// rows that fill the cluster, leave most of it idle, or end inside a program. Such a grid runs
/// only where a GPU allows clusters of 16 (`signature::cuda_max_cluster`).
#[test]
fn clusters_of_16_match_reference() {
    for src in [SOFTMAX, LAYERNORM] {
        let src = src.replace("TILE", "8").replace("cluster(y:4)", "cluster(y:16)");
        let (_, k) = lowered(&src);
        assert_eq!(k.grid.cluster.map(|(_, n)| n), Some(16));
        assert!(k.grid.runs_with_clusters_of(dt_core::signature::cuda_max_cluster(9)), "sm_90 runs clusters of 16");
        assert!(!k.grid.runs_with_clusters_of(dt_core::signature::cuda_max_cluster(12)) && !k.grid.runs_with_clusters_of(0));
        for (rows, cols) in [(1, 1), (3, 17), (2, 200), (2, 256), (3, 241)] {
            check(&src, rows, cols, 4.0);
        }
    }
}

/// `cluster(k:N)` on a contraction blocked by `block(k:B)`: each program of a cluster sums its
/// block of `k` into its accumulator tile, the cluster adds the tiles, and every program holds
/// the sum (the kernel IR says `rsum ... over the cluster along k`). The product is the matmul's
/// for contractions that fill the cluster, leave its last programs nothing or end inside a block,
/// and the implied bound is N blocks.
#[test]
fn a_contraction_split_over_a_cluster_matches_reference() {
    let src = "Func mm; In A, B; Var x, y; RVar k;
        mm[x, y] = rdot(A[x, k], B[k, y], k);
        mm.block(x:4, y:8, k:16); mm.tensorize(x:4, y:8, k:8); mm.cluster(k:4); mm.compile();";
    let (p, k) = lowered(src);
    let text = dt_core::kir::print(&k);
    assert!(text.contains("rsum %3 over the cluster along k") && text.contains("(in block)"), "{text}");
    assert_eq!(k.bound(k.grid.cluster.expect("clustered").0), Some(64), "{text}");
    for (m, n, kk) in [(1, 1, 1), (5, 9, 7), (4, 8, 16), (3, 17, 33), (6, 5, 64), (2, 3, 50)] {
        let a = Tensor::new(vec![m, kk], values(m, kk, 3.0, 1));
        let b = Tensor::new(vec![kk, n], values(kk, n, 2.0, 2));
        let args = Args::default().input("A", a).input("B", b);
        let want = dt_core::eval::evaluate(&p, p.kernels[0], &args, DType::F32).expect("evaluates");
        let got = dt_core::interp::run(&k, &bind(&p, p.kernels[0], &args).expect("binds"), DType::F32);
        for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{m}x{n}x{kk}, element {i}: got {g}, want {w}\n{text}");
        }
    }
}

/// Attention with its keys split over a cluster (`block(j:8)` with `cluster(j:2)`): the row
/// statistics and the dot over the keys are each combined over the cluster, and the kernel
/// computes what the algorithm says.
#[test]
fn attention_with_its_keys_split_over_a_cluster_matches_reference() {
    let src = "Func s, m, l, out; In Q, K, V; Var i, j, e; RVar d;
        s[i, j] = rdot(Q[i, d], K[j, d], d) * rsqrt(len(d));
        m[i] = rmax(s[i, j], j);
        l[i] = rsum(exp(s[i, j] - m[i]), j);
        out[i, e] = rdot(exp(s[i, j] - m[i]), V[j, e], j) / l[i];
        out.block(i:4, j:8); out.tensorize(i:4, j:TILE, d:0, e:0); out.bound(d:16, e:16); out.cluster(j:2);
        m.fuse_at(out, i); l.fuse_at(out, i);
        out.compile();";
    for tile in ["8", "4"] {
        let src = src.replace("TILE", tile);
        let (p, k) = lowered(&src);
        let text = dt_core::kir::print(&k);
        for (i, j, d, e) in [(1, 1, 1, 1), (5, 9, 3, 4), (4, 16, 16, 16), (7, 13, 5, 2)] {
            let q = Tensor::new(vec![i, d], values(i, d, 2.0, 1));
            let kk = Tensor::new(vec![j, d], values(j, d, 2.0, 2));
            let v = Tensor::new(vec![j, e], values(j, e, 1.0, 3));
            let args = Args::default().input("Q", q).input("K", kk).input("V", v);
            let want = dt_core::eval::evaluate(&p, p.kernels[0], &args, DType::F32).expect("evaluates");
            let got = dt_core::interp::run(&k, &bind(&p, p.kernels[0], &args).expect("binds"), DType::F32);
            for (n, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
                assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "tile {tile}, {i}x{j}x{d}x{e}, element {n}: got {g}, want {w}\n{text}");
            }
        }
    }
}

/// A statistic over the clustered dimension placed inside the loop over it would meet the
/// cluster once per step of each program's block, and the programs' blocks hold different
/// numbers of steps (none past the row's end): a hang on the GPU and in the interpreter. The
/// lowering refuses it, naming the Func and where to place it.
#[test]
fn a_cluster_meeting_inside_the_loop_over_its_dimension_is_refused() {
    let inside = SOFTMAX.replace("m.fuse_at(out, x); s.fuse_at(out, x);", "m.fuse_at(out, y); s.fuse_at(out, y);").replace("TILE", "8");
    let p = dt_core::compile_spec(&inside).expect("spec checks");
    let e = dt_core::lower::lower(&p, p.kernels[0]).expect_err("a meeting per step").to_string();
    assert!(e.contains("`m` reduces over `y`, which `out` splits over a cluster, inside the loop over `y`"), "{e}");
    assert!(e.contains("before `y`"), "{e}");
    lowered(&SOFTMAX.replace("TILE", "8"));
    // A step that covers the block: one step in every program, one meeting each.
    check(
        &SOFTMAX.replace("m.fuse_at(out, x); s.fuse_at(out, x);", "m.fuse_at(out, y); s.fuse_at(out, y);").replace("TILE", "0"),
        9,
        7,
        1.0,
    );
}

/// Should a lowering ever place a meeting where a cluster's programs reach it unevenly (here by
/// hand: inside the loop over the clustered `y`, two steps in the first program and none in the
/// others), the interpreter stops with an internal error instead of waiting forever.
#[test]
fn the_interpreter_stops_on_uneven_cluster_meetings() {
    let src = "Func s, out; In A; Var x; RVar y;
        s[x] = rsum(A[x, y], y);
        out[x, y] = A[x, y] - s[x];
        out.block(x:1, y:8); out.tensorize(x:1, y:8); out.cluster(y:4);
        s.fuse_at(out, x); out.compile();";
    let uneven = "kernel out(A[x, y]) -> out[x, y]
  dtypes f32
  sizes  x, y
  bound  y <= 32
  grid   [x/1, y/8]
  cluster 4 programs along y
  block  128 threads
  program:
    for x step 1 (in block):
      for y step 4 (in block):
        %0 : f32[x:1, y:4] @blocked = load A[x, y] masked else 0
        %2 : f32[x:1] @blocked = rsum %0 over y
        %4 : f32[x:1] @blocked = rsum %2 over the cluster along y
        %7 : f32[x:1, y:4] @blocked = sub %0, %4
        store out[x:1, y:4] = %7 masked
";
    let k = dt_core::kir_text::parse(uneven).expect("kernel IR parses");
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let p = dt_core::compile_spec(src).expect("spec checks");
        let args = Args::default().input("A", Tensor::new(vec![2, 5], values(2, 5, 1.0, 5)));
        let bound = bind(&p, p.kernels[0], &args).expect("binds");
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dt_core::interp::run(&k, &bound, DType::F32)));
        let _ = done.send(ran.is_err());
    });
    let panicked = finished.recv_timeout(std::time::Duration::from_secs(20)).expect("the interpreter returns or panics, and does not hang");
    assert!(panicked, "uneven meetings must stop the run");
}
