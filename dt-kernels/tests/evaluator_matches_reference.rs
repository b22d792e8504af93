//! The reference evaluator of dt-core, run on each library spec, agrees with the hand-written
//! naive references of `dt_kernels::reference`.
//!
//! Shapes are drawn from sizes that tiles like (powers of two), sizes that they do not (1, primes,
//! one past a power of two) and plain random sizes; inputs are normal with a random spread (and,
//! for the normalizations, a random offset); each case picks f32, f16 or bf16.
//!
//! How close is close enough. For f16 and bf16 the inputs are rounded to the type first and the
//! reference gets the same rounded values, so the two sides differ only by
//! 1. the f32 arithmetic of the evaluator (the reference computes in f64), and
//! 2. the evaluator's final rounding of its output to the element type.
//!
//! Each element must satisfy `|got - want| <= ulp(T) * |want| + c * scale + atol(T)`, where
//! - `ulp(T) * |want|` bounds the final rounding with a factor 2 to spare (rounding to nearest
//!   errs by at most half a unit in the last place): 2^-10 for f16, 2^-7 for bf16, 2^-23 for f32;
//! - `scale` is what the f32 error of the computation is proportional to, per op (for a dot
//!   product the sum of `|a_i * b_i|`, not the possibly cancelling sum itself), and `c` is the
//!   usual worst-case bound of naive f32 evaluation, `(terms + 16) * f32::EPSILON`, `terms`
//!   counting the length of the reductions involved (about 1e-5 at the sizes drawn here);
//! - `atol(T)` covers the absolute spacing of subnormals: 2^-24 for f16, 0 otherwise.

use dt_core::algo::Program;
use dt_core::eval::evaluate;
use dt_core::tensor::{Args, Tensor};
use dt_core::DType;
use dt_kernels::reference::{self, error_stats, round_to};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const EPS32: f64 = f32::EPSILON as f64;

fn spec(src: &str) -> Program {
    match dt_core::compile_spec(src) {
        Ok(p) => p,
        Err(diags) => panic!("library spec does not compile: {diags:?}"),
    }
}

/// Runs kernel `name` of `program` on `args` with the reference evaluator.
fn eval(program: &Program, name: &str, args: &Args, dtype: DType) -> Vec<f32> {
    let k = program
        .kernel_by_name(name)
        .unwrap_or_else(|| panic!("no kernel `{name}`"));
    evaluate(program, k, args, dtype)
        .unwrap_or_else(|e| panic!("evaluating `{name}`: {e}"))
        .data
}

/// Sizes tiles like, sizes they do not, and anything in between.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        prop::sample::select(vec![1usize, 2, 3, 5, 7, 13, 17, 31, 64, 65, 127]),
        1usize..=70
    ]
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

/// Standard deviation of generated inputs: small, unit and large.
fn spread() -> impl Strategy<Value = f32> {
    prop::sample::select(vec![0.25f32, 1.0, 3.0])
}

/// A small deterministic generator (SplitMix64), so that a case is fixed by its seed.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// `n` values `mean + std * N(0, 1)`, rounded to `dtype`, never all zero.
fn normal(rng: &mut Rng, n: usize, mean: f32, std: f32, dtype: DType) -> Vec<f32> {
    let raw: Vec<f32> = (0..n).map(|_| mean + std * rng.normal() as f32).collect();
    let mut v = round_to(&raw, dtype);
    if v.iter().all(|&x| x == 0.0) {
        v[0] = 1.0;
    }
    v
}

fn ulp(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => EPS32,
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
    }
}

fn atol(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::F32 | DType::BF16 => 0.0,
    }
}

/// Checks every element against the bound in the module comment; on failure, reports the first
/// element out of bounds and the error over the whole output.
fn check_close(
    op: &str,
    dtype: DType,
    got: &[f32],
    want: &[f32],
    scale: &[f64],
    c: f64,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len(), "{}: output sizes differ", op);
    assert_eq!(scale.len(), want.len());
    let tol_at = |i: usize| ulp(dtype) * (want[i] as f64).abs() + c * scale[i] + atol(dtype);
    // NaN on either side fails.
    let bad = (0..want.len()).find(|&i| {
        let diff = (got[i] as f64 - want[i] as f64).abs();
        diff.is_nan() || diff > tol_at(i)
    });
    if let Some(i) = bad {
        let st = error_stats(got, want);
        let tol = tol_at(i);
        prop_assert!(
            false,
            "{op} ({dtype}): element {i}: evaluator {} vs reference {} (|diff| {:e} > tolerance {tol:e}); \
             over the output: relative L2 error {:e}, max abs error {:e}",
            got[i],
            want[i],
            (got[i] as f64 - want[i] as f64).abs(),
            st.rel_l2,
            st.max_abs
        );
    }
    Ok(())
}

fn abs(x: &[f32]) -> Vec<f32> {
    x.iter().map(|v| v.abs()).collect()
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// `c` for a computation whose reductions add up `terms` values in f32.
fn c_f32(terms: usize) -> f64 {
    (terms + 16) as f64 * EPS32
}

/// Shared by both matrix products: `(m, n, k, dtype, spread, seed)`.
fn mm_case() -> impl Strategy<Value = (usize, usize, usize, DType, f32, u64)> {
    (size(), size(), size(), dtype(), spread(), any::<u64>())
}

fn mm_inputs(
    m: usize,
    n: usize,
    k: usize,
    dtype: DType,
    std: f32,
    seed: u64,
) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Rng(seed);
    let a = normal(&mut rng, m * k, 0.0, std, dtype);
    let b = normal(&mut rng, k * n, 0.0, std, dtype);
    (a, b)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn evaluator_matches_naive_matmul((m, n, k, dt, std, seed) in mm_case()) {
        let p = spec(include_str!("../specs/matmul.dt"));
        let (a, b) = mm_inputs(m, n, k, dt, std, seed);
        let args = Args::default().input("A", Tensor::new(vec![m, k], a.clone())).input("B", Tensor::new(vec![k, n], b.clone()));
        let got = eval(&p, "mm", &args, dt);
        let want = reference::matmul(&a, &b, m, n, k);
        let scale = widen(&reference::matmul(&abs(&a), &abs(&b), m, n, k));
        check_close("matmul", dt, &got, &want, &scale, c_f32(k))?;
    }

    #[test]
    fn evaluator_matches_naive_mm_leaky_relu((m, n, k, dt, std, seed) in mm_case()) {
        let p = spec(include_str!("../specs/mm_leaky_relu.dt"));
        let (a, b) = mm_inputs(m, n, k, dt, std, seed);
        let args = Args::default().input("A", Tensor::new(vec![m, k], a.clone())).input("B", Tensor::new(vec![k, n], b.clone()));
        let got = eval(&p, "out", &args, dt);
        let want = reference::mm_leaky_relu(&a, &b, m, n, k, 0.01);
        // Near 0 the two sides may pick different branches; both values are then within the
        // product's own error of 0, which the same scale covers.
        let scale = widen(&reference::matmul(&abs(&a), &abs(&b), m, n, k));
        check_close("mm_leaky_relu", dt, &got, &want, &scale, c_f32(k))?;
    }

    #[test]
    fn evaluator_matches_naive_softmax(rows in size(), cols in size(), dt in dtype(), std in spread(), seed in any::<u64>()) {
        let p = spec(include_str!("../specs/softmax.dt"));
        let x = normal(&mut Rng(seed), rows * cols, 0.0, std, dt);
        let args = Args::default().input("A", Tensor::new(vec![rows, cols], x.clone()));
        let got = eval(&p, "softmax", &args, dt);
        let want = reference::softmax(&x, rows, cols);
        // exp(x - max) errs relatively by about EPS * |x - max|; the row sum by EPS * cols.
        let scale: Vec<f64> = (0..rows * cols)
            .map(|i| {
                let row = &x[i / cols * cols..(i / cols + 1) * cols];
                let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                want[i] as f64 * (1.0 + (max - x[i]) as f64)
            })
            .collect();
        check_close("softmax", dt, &got, &want, &scale, c_f32(cols))?;
    }

    #[test]
    fn evaluator_matches_naive_layernorm(
        rows in size(), cols in size(), dt in dtype(), std in spread(),
        offset in prop::sample::select(vec![0.0f32, 2.0]), seed in any::<u64>(),
    ) {
        let p = spec(include_str!("../specs/layernorm.dt"));
        let eps = 1e-5f32;
        let mut rng = Rng(seed);
        let x = normal(&mut rng, rows * cols, offset, std, dt);
        let w = normal(&mut rng, cols, 1.0, 0.5, dt);
        let b = normal(&mut rng, cols, 0.0, 0.5, dt);
        let args = Args::default()
            .input("X", Tensor::new(vec![rows, cols], x.clone()))
            .input("W", Tensor::new(vec![cols], w.clone()))
            .input("B", Tensor::new(vec![cols], b.clone()))
            .scalar("eps", eps);
        let got = eval(&p, "layernorm", &args, dt);
        let want = reference::layernorm(&x, &w, &b, rows, cols, eps);
        // x - mean errs by about EPS * (|x| + mean |x|), which 1 / std magnifies; the rest of the
        // error is relative to the normalized value.
        let norm = reference::layernorm(&x, &abs(&w), &vec![0.0; cols], rows, cols, eps);
        let scale: Vec<f64> = (0..rows * cols)
            .map(|i| {
                let (r, c) = (i / cols, i % cols);
                let row = &x[r * cols..(r + 1) * cols];
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / cols as f64;
                let mean_abs = row.iter().map(|&v| (v as f64).abs()).sum::<f64>() / cols as f64;
                let inv_std = 1.0 / (var + eps as f64).sqrt();
                (norm[i] as f64).abs() + (w[c] as f64).abs() * inv_std * ((x[i] as f64).abs() + mean_abs) + (b[c] as f64).abs()
            })
            .collect();
        check_close("layernorm", dt, &got, &want, &scale, c_f32(2 * cols))?;
    }

    #[test]
    fn evaluator_matches_naive_dyt(
        rows in size(), cols in size(), dt in dtype(), std in spread(),
        alpha in prop::sample::select(vec![0.1f32, 0.5, 1.0, 2.5]), seed in any::<u64>(),
    ) {
        let p = spec(include_str!("../specs/dyt.dt"));
        let mut rng = Rng(seed);
        let x = normal(&mut rng, rows * cols, 0.0, std, dt);
        let w = normal(&mut rng, cols, 1.0, 0.5, dt);
        let b = normal(&mut rng, cols, 0.0, 0.5, dt);
        let args = Args::default()
            .input("X", Tensor::new(vec![rows, cols], x.clone()))
            .input("W", Tensor::new(vec![cols], w.clone()))
            .input("B", Tensor::new(vec![cols], b.clone()))
            .scalar("alpha", alpha);
        let got = eval(&p, "dyt", &args, dt);
        let want = reference::dyt(&x, &w, &b, alpha, rows, cols);
        // |tanh| <= 1, so |w| + |b| bounds every term.
        let scale: Vec<f64> = (0..rows * cols).map(|i| (w[i % cols].abs() + b[i % cols].abs()) as f64).collect();
        check_close("dyt", dt, &got, &want, &scale, c_f32(0))?;
    }
}

/// `(batch, heads, seq_q, seq_k, d, e, dtype, spread, seed)`.
type AttentionCase = (usize, usize, usize, usize, usize, usize, DType, f32, u64);

fn attention_case() -> impl Strategy<Value = AttentionCase> {
    let seq = || {
        prop_oneof![
            prop::sample::select(vec![1usize, 2, 3, 17, 31, 32, 33]),
            1usize..=33
        ]
    };
    let head = || prop_oneof![prop::sample::select(vec![1usize, 2, 3, 7, 16]), 1usize..=20];
    (
        1usize..=2,
        1usize..=2,
        seq(),
        seq(),
        head(),
        head(),
        dtype(),
        prop::sample::select(vec![0.5f32, 1.0, 2.0]),
        any::<u64>(),
    )
}

fn check_attention(causal: bool, case: AttentionCase) -> Result<(), TestCaseError> {
    let (batch, heads, sq, sk, d, e, dt, std, seed) = case;
    let p = spec(include_str!("../specs/attention.dt"));
    let mut rng = Rng(seed);
    let q = normal(&mut rng, batch * heads * sq * d, 0.0, std, dt);
    let k = normal(&mut rng, batch * heads * sk * d, 0.0, std, dt);
    let v = normal(&mut rng, batch * heads * sk * e, 0.0, std, dt);
    let args = Args::default()
        .input("Q", Tensor::new(vec![batch, heads, sq, d], q.clone()))
        .input("K", Tensor::new(vec![batch, heads, sk, d], k.clone()))
        .input("V", Tensor::new(vec![batch, heads, sk, e], v.clone()));
    let name = if causal {
        "attention_causal"
    } else {
        "attention"
    };
    let got = eval(&p, name, &args, dt);
    let want = reference::attention(&q, &k, &v, batch, heads, sq, sk, d, e, causal);
    // The output is a weighted mean of V, so its error is relative to the same mean of |V|. The
    // weights err relatively by the absolute error of the scores, which is EPS * d times
    // S = max sum |q||k| / sqrt(d) (and the spread of the scores, at most 2 S), plus EPS * seq_k
    // from the normalizing sum.
    let scale = widen(&reference::attention(
        &q,
        &k,
        &abs(&v),
        batch,
        heads,
        sq,
        sk,
        d,
        e,
        causal,
    ));
    let mut s_max = 0.0f64;
    for bh in 0..batch * heads {
        for i in 0..sq {
            for j in 0..sk {
                let s: f64 = (0..d)
                    .map(|t| {
                        (q[(bh * sq + i) * d + t] as f64 * k[(bh * sk + j) * d + t] as f64).abs()
                    })
                    .sum();
                s_max = s_max.max(s / (d as f64).sqrt());
            }
        }
    }
    let c = c_f32(sk + d) + 2.0 * s_max * (d as f64 + 4.0) * EPS32;
    check_close(name, dt, &got, &want, &scale, c)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn evaluator_matches_naive_attention(case in attention_case()) {
        check_attention(false, case)?;
    }

    #[test]
    fn evaluator_matches_naive_attention_causal(case in attention_case()) {
        check_attention(true, case)?;
    }
}
