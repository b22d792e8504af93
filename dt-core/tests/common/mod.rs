//! What the tests of the lowering passes share: row kernels looped in chunks of 16, and a check
//! of the interpreter (running the lowered kernel) against the evaluator.
#![allow(dead_code)]

use dt_core::kir::{Kernel, Loop, Stmt};
use dt_core::tensor::{bind, Args, Tensor};
use dt_core::DType;
use proptest::prelude::*;

pub const SOFTMAX: &str = "Func m, s, out; In A; Var x; RVar y;
    m[x] = rmax(A[x, y], y);
    s[x] = rsum(exp(A[x, y] - m[x]), y);
    out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
    out.block(x:1); out.tensorize(x:0, y:16);
    m.fuse_at(out, x); s.fuse_at(out, x);
    out.compile();";

pub const LAYERNORM: &str = "Func mean, var, out; In X, W; Var x; RVar y;
    mean[x] = rsum(X[x, y], y) / len(y);
    var[x] = rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y) / len(y);
    out[x, y] = (X[x, y] - mean[x]) * rsqrt(var[x] + 0.00001) * W[y];
    out.block(x:2); out.tensorize(x:1, y:16);
    mean.fuse_at(out, x); var.fuse_at(out, x);
    out.compile();";

pub fn lowered(src: &str) -> (dt_core::algo::Program, Kernel) {
    let p = dt_core::compile_spec(src).expect("spec checks");
    let k = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
    (p, k)
}

/// Every loop of `stmts`, outer loops before the loops in them.
pub fn all_loops(stmts: &[Stmt]) -> Vec<Loop> {
    stmts
        .iter()
        .flat_map(|s| match s {
            Stmt::Loop(l) => std::iter::once(l.clone()).chain(all_loops(&l.body)).collect(),
            _ => vec![],
        })
        .collect()
}

/// Deterministic values with a spread of about `scale` and an offset, rows x cols.
pub fn values(rows: usize, cols: usize, scale: f32, seed: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| ((i * 7919 + seed * 104_729) % 1009) as f32 / 1009.0 * scale - scale / 3.0 + 1.5).collect()
}

/// `n` values spread over [-scale / 2, scale / 2), a different sequence per `seed`.
pub fn centered(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed * 104_729) % 1009) as f32 / 1009.0 * scale - scale / 2.0).collect()
}

/// The interpreter's result of lowered kernel `k` of `p` on `args`, and the evaluator's.
pub fn interpreted_and_evaluated(p: &dt_core::algo::Program, k: &Kernel, args: &Args) -> (Tensor, Tensor) {
    let want = dt_core::eval::evaluate(p, p.kernels[0], args, DType::F32).expect("evaluates");
    let got = dt_core::interp::run(k, &bind(p, p.kernels[0], args).expect("binds"), DType::F32);
    (got, want)
}

/// The lowered kernel of `src`, run by the interpreter on `rows` x `cols` values (input `X`
/// with weights `W`, or input `A`), agrees with the evaluator within 1e-4, relative.
pub fn interpreter_matches_evaluator(src: &str, rows: usize, cols: usize) {
    let (p, k) = lowered(src);
    let first = if src.contains("In X") { "X" } else { "A" };
    let mut args = Args::default().input(first, Tensor::new(vec![rows, cols], values(rows, cols, 6.0, cols)));
    if first == "X" {
        args = args.input("W", Tensor::new(vec![cols], values(1, cols, 1.0, 3)));
    }
    let (got, want) = interpreted_and_evaluated(&p, &k, &args);
    assert_eq!(got.data.len(), want.data.len());
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{rows}x{cols}, element {i}: got {g}, want {w}");
    }
}

/// Attention with the output written as `out`, under `schedule`.
pub fn attention_scheduled(causal: bool, out: &str, schedule: &str) -> String {
    let s = if causal {
        "s[i, j] = where(j <= i, rdot(Q[i, d], K[j, d], d) * rsqrt(len(d)), -inf);"
    } else {
        "s[i, j] = rdot(Q[i, d], K[j, d], d) * rsqrt(len(d));"
    };
    format!(
        "Func s, m, l, out; In Q, K, V; Var i, j, e; RVar d;
        {s}
        m[i] = rmax(s[i, j], j);
        l[i] = rsum(exp(s[i, j] - m[i]), j);
        out[i, e] = {out};
        {schedule}
        m.fuse_at(out, i); l.fuse_at(out, i);
        out.compile();"
    )
}

/// Interpreter and evaluator agree on `src` at sizes (i, j, d, e), values spread by `scale`.
pub fn agrees(src: &str, (i, j, d, e): (usize, usize, usize, usize), scale: f32) -> Result<(), TestCaseError> {
    let (p, k) = lowered(src);
    let args = Args::default()
        .input("Q", Tensor::new(vec![i, d], centered(i * d, 1, scale)))
        .input("K", Tensor::new(vec![j, d], centered(j * d, 2, scale)))
        .input("V", Tensor::new(vec![j, e], centered(j * e, 3, 2.0)));
    let (got, want) = interpreted_and_evaluated(&p, &k, &args);
    for (n, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        prop_assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "element {}: got {}, want {}\n{}", n, g, w, src);
    }
    Ok(())
}

/// Proptest's configuration: `cases` cases (or `PROPTEST_CASES`), no failure files.
pub fn proptest_config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(cases);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}
