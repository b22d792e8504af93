//! Pass `full_steps`: a loop over a dimension longer than its step runs the steps that lie
//! wholly inside the dimension without masks, and the one that reaches past its end with them.

use dt_core::kir::{Kernel, Loop, Op, Steps, Stmt};
use dt_core::tensor::{bind, Args, Tensor};
use dt_core::DType;

const SOFTMAX: &str = "Func m, s, out; In A; Var x; RVar y;
    m[x] = rmax(A[x, y], y);
    s[x] = rsum(exp(A[x, y] - m[x]), y);
    out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
    out.block(x:1); out.tensorize(x:0, y:16);
    m.fuse_at(out, x); s.fuse_at(out, x);
    out.compile();";

const LAYERNORM: &str = "Func mean, var, out; In X, W; Var x; RVar y;
    mean[x] = rsum(X[x, y], y) / len(y);
    var[x] = rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y) / len(y);
    out[x, y] = (X[x, y] - mean[x]) * rsqrt(var[x] + 0.00001) * W[y];
    out.block(x:2); out.tensorize(x:1, y:16);
    mean.fuse_at(out, x); var.fuse_at(out, x);
    out.compile();";

/// A sum alone (no statistic carried along), the mean of a row.
const MEAN: &str = "Func out; In A; Var x; RVar y;
    out[x] = rsum(A[x, y], y) / len(y);
    out.block(x:4); out.tensorize(x:0, y:8);
    out.compile();";

fn lowered(src: &str) -> (dt_core::algo::Program, Kernel) {
    let p = dt_core::compile_spec(src).expect("spec checks");
    let k = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
    (p, k)
}

fn all_loops(stmts: &[Stmt]) -> Vec<Loop> {
    stmts
        .iter()
        .flat_map(|s| match s {
            Stmt::Loop(l) => std::iter::once(l.clone()).chain(all_loops(&l.body)).collect(),
            _ => vec![],
        })
        .collect()
}

/// Whether `l`'s body masks along its dimension.
fn masks(l: &Loop) -> bool {
    l.body.iter().any(|s| matches!(s, Stmt::Let { op: Op::MaskFill { dim, .. }, .. } if *dim == l.dim))
}

/// Softmax's statistics loop masks its exponentials: its full steps do not, its partial step
/// does. Layernorm's loops and a mean's mask nothing (their loads fill with 0), and stay whole.
#[test]
fn only_loops_with_masks_split_and_full_steps_mask_nothing() {
    let (_, k) = lowered(SOFTMAX);
    let text = dt_core::kir::print(&k);
    let loops = all_loops(&k.body);
    let full: Vec<&Loop> = loops.iter().filter(|l| l.steps == Steps::Full).collect();
    let partial: Vec<&Loop> = loops.iter().filter(|l| l.steps == Steps::Partial).collect();
    assert_eq!((full.len(), partial.len()), (1, 1), "{text}");
    assert!(!masks(full[0]) && masks(partial[0]), "{text}");
    for src in [LAYERNORM, MEAN] {
        let (_, k) = lowered(src);
        assert!(all_loops(&k.body).iter().all(|l| l.steps == Steps::All), "{}", dt_core::kir::print(&k));
    }
}

/// Deterministic values with a spread of about `scale` and an offset, rows x cols.
fn values(rows: usize, cols: usize, scale: f32, seed: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| ((i * 7919 + seed * 104_729) % 1009) as f32 / 1009.0 * scale - scale / 3.0 + 1.5).collect()
}

/// Every row length from 1 to 70: no full step, only full steps, and both. The interpreter,
/// running the split loops, agrees with the evaluator.
#[test]
fn full_steps_preserve_semantics() {
    for src in [SOFTMAX, LAYERNORM, MEAN] {
        let (p, k) = lowered(src);
        let first = if src.contains("In X") { "X" } else { "A" };
        for cols in 1..=70 {
            let rows = 1 + cols % 5;
            let mut args = Args::default().input(first, Tensor::new(vec![rows, cols], values(rows, cols, 6.0, cols)));
            if first == "X" {
                args = args.input("W", Tensor::new(vec![cols], values(1, cols, 1.0, 3)));
            }
            let want = dt_core::eval::evaluate(&p, p.kernels[0], &args, DType::F32).expect("evaluates");
            let got = dt_core::interp::run(&k, &bind(&p, p.kernels[0], &args).expect("binds"), DType::F32);
            assert_eq!(got.data.len(), want.data.len());
            for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
                assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{rows}x{cols}, element {i}: got {g}, want {w}");
            }
        }
    }
}
