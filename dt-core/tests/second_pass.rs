//! Pass `reverse`: a looped row kernel writes its output from the row's last chunk to its
//! first, right after its statistics read the row from first to last, so that the second read
//! starts where the L2 cache is warm. The order changes no result.

use dt_core::kir::{Kernel, Loop, LoopKind, Steps, Stmt};
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

/// Element-wise over rows looped in chunks: nothing read the row before, so the loop keeps
/// its order.
const SCALE: &str = "Func out; In A; Var x, y;
    out[x, y] = A[x, y] * 2;
    out.block(x:1); out.tensorize(x:0, y:16);
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
        assert_eq!(
            column_loops(&k),
            vec![(LoopKind::Reduction, false), (LoopKind::Whole, true)],
            "{}",
            dt_core::kir::print(&k)
        );
        assert!(dt_core::kir::print(&k).contains("(whole, backward)"));
    }
    let (_, k) = lowered(SCALE);
    assert_eq!(column_loops(&k), vec![(LoopKind::Whole, false)], "{}", dt_core::kir::print(&k));
}

/// Deterministic values with a spread of about `scale` and an offset, rows x cols.
fn values(rows: usize, cols: usize, scale: f32, seed: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| ((i * 7919 + seed * 104_729) % 1009) as f32 / 1009.0 * scale - scale / 3.0 + 1.5).collect()
}

/// Rows of one element, shorter than a chunk, of whole chunks, and ending inside a chunk: the
/// interpreter, running the lowered kernel with its backward loop, agrees with the evaluator.
#[test]
fn backward_second_pass_preserves_semantics() {
    for src in [SOFTMAX, LAYERNORM, SCALE] {
        let (p, k) = lowered(src);
        let first = if src.contains("In X") { "X" } else { "A" };
        for (rows, cols) in [(3, 1), (2, 15), (3, 16), (3, 17), (2, 50), (1, 64)] {
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
