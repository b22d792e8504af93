//! What the tests of dt-kernels share: reproducible random inputs, the hand-written reference
//! result of each library op with the error bound it allows, and tensors laid out in memory in
//! other ways than row-major.
//!
//! How close is close enough. For f16 and bf16 the inputs are rounded to the type first and the
//! reference gets the same rounded values, so the two sides differ only by
//! 1. the f32 arithmetic of the side under test (the reference computes in f64), and
//! 2. that side's final rounding of its output to the element type.
//!
//! Each element must satisfy `|got - want| <= ulp(T) * |want| + c * scale + atol(T)`, where
//! - `ulp(T) * |want|` bounds the final rounding with a factor 2 to spare (rounding to nearest
//!   errs by at most half a unit in the last place): 2^-10 for f16, 2^-7 for bf16, 2^-23 for f32;
//! - `scale` is what the f32 error of the computation is proportional to, per op (for a dot
//!   product the sum of `|a_i * b_i|`, not the possibly cancelling sum itself), and `c` is the
//!   usual worst-case bound of naive f32 evaluation, `(terms + 16) * f32::EPSILON`, `terms`
//!   counting the length of the reductions involved;
//! - `atol(T)` covers the absolute spacing of subnormals: 2^-24 for f16, 0 otherwise.
//!
//! Kernels that store f16 or bf16 evaluate exp, tanh and division with the GPU's approximations.
//! Those of exp and division err by a few units of f32 (2 + 1.2 |x| for exp), which `c` and the
//! ops' scales already cover; that of tanh, 2^-10.9 relative, does not, so DyT's `c` gets
//! `approx(T) = 2^-10` for 16-bit types.

#![allow(dead_code)]

use dt_core::DType;
use dt_kernels::reference::{self, error_stats, round_to};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const EPS32: f64 = f32::EPSILON as f64;

/// A small deterministic generator (SplitMix64), so that a case is fixed by its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
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
pub fn normal(rng: &mut Rng, n: usize, mean: f32, std: f32, dtype: DType) -> Vec<f32> {
    let raw: Vec<f32> = (0..n).map(|_| mean + std * rng.normal() as f32).collect();
    let mut v = round_to(&raw, dtype);
    if !v.is_empty() && v.iter().all(|&x| x == 0.0) {
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

/// The relative error of attention's weights: in f16 and bf16 kernels they are rounded to the
/// element type before the dot with V (docs/language.md, "Precision of dots"), half an ulp.
fn weights(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 0.0,
        DType::F16 | DType::BF16 => ulp(dtype) / 2.0,
    }
}

fn atol(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::F32 | DType::BF16 => 0.0,
    }
}

/// The relative error of the approximate tanh of 16-bit kernels (see the module comment).
fn approx(dtype: DType) -> f64 {
    match dtype {
        DType::F16 | DType::BF16 => 2f64.powi(-10),
        DType::F32 => 0.0,
    }
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

/// One input of a case: the spec's name, the shape and the row-major values.
pub struct Input {
    pub name: &'static str,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// A call of a library op with its expected result and error bound.
pub struct Case {
    pub op: &'static str,
    pub dtype: DType,
    pub inputs: Vec<Input>,
    /// `(spec name, value)`.
    pub scalars: Vec<(&'static str, f32)>,
    pub out_shape: Vec<usize>,
    pub want: Vec<f32>,
    pub scale: Vec<f64>,
    pub c: f64,
    /// An absolute error the kernel may add besides (attention's weights as f16 subnormals).
    pub abs: f64,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shapes: Vec<_> = self.inputs.iter().map(|i| (i.name, &i.shape)).collect();
        write!(f, "{} ({}) of {shapes:?}, scalars {:?}", self.op, self.dtype, self.scalars)
    }
}

impl Case {
    pub fn input(&self, i: usize) -> &Input {
        &self.inputs[i]
    }

    /// Checks every element of `got` against the bound in the module comment; on failure,
    /// reports the first element out of bounds and the error over the whole output.
    pub fn check(&self, who: &str, got: &[f32]) -> Result<(), TestCaseError> {
        let (op, dtype, want) = (self.op, self.dtype, &self.want);
        prop_assert_eq!(got.len(), want.len(), "{}: output sizes differ", op);
        let tol_at = |i: usize| ulp(dtype) * (want[i] as f64).abs() + self.c * self.scale[i] + atol(dtype) + self.abs;
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
                "{op} ({dtype}, output {:?}): element {i}: {who} {} vs reference {} (|diff| {:e} > tolerance {tol:e}); \
                 over the output: relative L2 error {:e}, max abs error {:e}",
                self.out_shape,
                got[i],
                want[i],
                (got[i] as f64 - want[i] as f64).abs(),
                st.rel_l2,
                st.max_abs
            );
        }
        Ok(())
    }
}

/// Sizes tiles like, sizes they do not, and anything in between.
pub fn size() -> impl Strategy<Value = usize> {
    prop_oneof![prop::sample::select(vec![1usize, 2, 3, 5, 7, 13, 17, 31, 64, 65, 127]), 1usize..=70]
}

pub fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

/// Standard deviation of generated inputs: small, unit and large.
pub fn spread() -> impl Strategy<Value = f32> {
    prop::sample::select(vec![0.25f32, 1.0, 3.0])
}

fn mm_inputs(m: usize, n: usize, k: usize, dtype: DType, std: f32, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Rng(seed);
    let a = normal(&mut rng, m * k, 0.0, std, dtype);
    let b = normal(&mut rng, k * n, 0.0, std, dtype);
    (a, b)
}

fn mm_inputs_of(a: Vec<f32>, b: Vec<f32>, m: usize, n: usize, k: usize) -> Vec<Input> {
    vec![Input { name: "A", shape: vec![m, k], values: a }, Input { name: "B", shape: vec![k, n], values: b }]
}

pub fn matmul(m: usize, n: usize, k: usize, dtype: DType, std: f32, seed: u64) -> Case {
    mm_case("matmul", (m, n, k), dtype, std, seed, reference::matmul)
}

pub fn mm_leaky_relu(m: usize, n: usize, k: usize, dtype: DType, std: f32, seed: u64) -> Case {
    // Near 0 the two sides may pick different branches; both values are then within the
    // product's own error of 0, which the product's scale covers.
    mm_case("mm_leaky_relu", (m, n, k), dtype, std, seed, |a, b, m, n, k| reference::mm_leaky_relu(a, b, m, n, k, 0.01))
}

/// A case of op `op` over a matrix product of random A (m x k) and B (k x n), its reference
/// `want`, with the tolerance of the product.
fn mm_case(
    op: &'static str,
    (m, n, k): (usize, usize, usize),
    dtype: DType,
    std: f32,
    seed: u64,
    want: impl Fn(&[f32], &[f32], usize, usize, usize) -> Vec<f32>,
) -> Case {
    let (a, b) = mm_inputs(m, n, k, dtype, std, seed);
    let want = want(&a, &b, m, n, k);
    let scale = widen(&reference::matmul(&abs(&a), &abs(&b), m, n, k));
    Case { op, dtype, inputs: mm_inputs_of(a, b, m, n, k), scalars: vec![], out_shape: vec![m, n], want, scale, c: c_f32(k), abs: 0.0 }
}

pub fn softmax(rows: usize, cols: usize, dtype: DType, std: f32, seed: u64) -> Case {
    let x = normal(&mut Rng(seed), rows * cols, 0.0, std, dtype);
    let want = reference::softmax(&x, rows, cols);
    // exp(x - max) errs relatively by about EPS * |x - max|; the row sum by EPS * cols.
    let maxes: Vec<f32> = x.chunks(cols.max(1)).map(|row| row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))).collect();
    let scale: Vec<f64> = (0..rows * cols).map(|i| want[i] as f64 * (1.0 + (maxes[i / cols] - x[i]) as f64)).collect();
    let inputs = vec![Input { name: "A", shape: vec![rows, cols], values: x }];
    Case { op: "softmax", dtype, inputs, scalars: vec![], out_shape: vec![rows, cols], want, scale, c: c_f32(cols), abs: 0.0 }
}

fn row_inputs(x: Vec<f32>, w: Vec<f32>, b: Vec<f32>, rows: usize, cols: usize) -> Vec<Input> {
    vec![
        Input { name: "X", shape: vec![rows, cols], values: x },
        Input { name: "W", shape: vec![cols], values: w },
        Input { name: "B", shape: vec![cols], values: b },
    ]
}

pub fn layernorm(rows: usize, cols: usize, dtype: DType, std: f32, offset: f32, seed: u64) -> Case {
    let eps = 1e-5f32;
    let mut rng = Rng(seed);
    let x = normal(&mut rng, rows * cols, offset, std, dtype);
    let w = normal(&mut rng, cols, 1.0, 0.5, dtype);
    let b = normal(&mut rng, cols, 0.0, 0.5, dtype);
    let want = reference::layernorm(&x, &w, &b, rows, cols, eps);
    // x - mean errs by about EPS * (|x| + mean |x|), which 1 / std magnifies; the rest of the
    // error is relative to the normalized value.
    let norm = reference::layernorm(&x, &abs(&w), &vec![0.0; cols], rows, cols, eps);
    // Per row: 1 / std and the mean of |x|.
    let stats: Vec<(f64, f64)> = x
        .chunks(cols.max(1))
        .map(|row| {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / cols as f64;
            let mean_abs = row.iter().map(|&v| (v as f64).abs()).sum::<f64>() / cols as f64;
            (1.0 / (var + eps as f64).sqrt(), mean_abs)
        })
        .collect();
    let scale: Vec<f64> = (0..rows * cols)
        .map(|i| {
            let (c, (inv_std, mean_abs)) = (i % cols, stats[i / cols]);
            (norm[i] as f64).abs() + (w[c] as f64).abs() * inv_std * ((x[i] as f64).abs() + mean_abs) + (b[c] as f64).abs()
        })
        .collect();
    Case {
        op: "layernorm",
        dtype,
        inputs: row_inputs(x, w, b, rows, cols),
        scalars: vec![("eps", eps)],
        out_shape: vec![rows, cols],
        want,
        scale,
        c: c_f32(2 * cols),
        abs: 0.0,
    }
}

pub fn dyt(rows: usize, cols: usize, dtype: DType, std: f32, alpha: f32, seed: u64) -> Case {
    let mut rng = Rng(seed);
    let x = normal(&mut rng, rows * cols, 0.0, std, dtype);
    let w = normal(&mut rng, cols, 1.0, 0.5, dtype);
    let b = normal(&mut rng, cols, 0.0, 0.5, dtype);
    let want = reference::dyt(&x, &w, &b, alpha, rows, cols);
    // |tanh| <= 1, so |w| + |b| bounds every term.
    let scale: Vec<f64> = (0..rows * cols).map(|i| (w[i % cols].abs() + b[i % cols].abs()) as f64).collect();
    Case {
        op: "dyt",
        dtype,
        inputs: row_inputs(x, w, b, rows, cols),
        scalars: vec![("alpha", alpha)],
        out_shape: vec![rows, cols],
        want,
        scale,
        c: c_f32(0) + approx(dtype),
        abs: 0.0,
    }
}

/// `(batch, heads, seq_q, seq_k, d, e)`.
pub type AttentionShape = (usize, usize, usize, usize, usize, usize);

pub fn attention(shape: AttentionShape, causal: bool, dtype: DType, std: f32, seed: u64) -> Case {
    let (batch, heads, sq, sk, d, e) = shape;
    let mut rng = Rng(seed);
    let q = normal(&mut rng, batch * heads * sq * d, 0.0, std, dtype);
    let k = normal(&mut rng, batch * heads * sk * d, 0.0, std, dtype);
    let v = normal(&mut rng, batch * heads * sk * e, 0.0, std, dtype);
    let want = reference::attention(&q, &k, &v, batch, heads, sq, sk, d, e, causal);
    // The output is a weighted mean of V, so its error is relative to the same mean of |V|. The
    // weights err relatively by the absolute error of the scores, which is EPS * d times
    // S = max sum |q||k| / sqrt(d) (and the spread of the scores, at most 2 S), plus EPS * seq_k
    // from the normalizing sum; in f16 and bf16, plus half an ulp of the type for the weights,
    // rounded to it before the dot with V.
    let scale = widen(&reference::attention(&q, &k, &abs(&v), batch, heads, sq, sk, d, e, causal));
    let mut s_max = 0.0f64;
    for bh in 0..batch * heads {
        for i in 0..sq {
            for j in 0..sk {
                let s: f64 = (0..d).map(|t| (q[(bh * sq + i) * d + t] as f64 * k[(bh * sk + j) * d + t] as f64).abs()).sum();
                s_max = s_max.max(s / (d as f64).sqrt());
            }
        }
    }
    let c = c_f32(sk + d) + 2.0 * s_max * (d as f64 + 4.0) * EPS32 + weights(dtype);
    // An f16 weight below 2^-14 is subnormal there: absolute error 2^-25, each times |v|,
    // over at most sk of them, divided by the sum of weights (at least 1).
    let v_max = v.iter().fold(0.0f64, |m, x| m.max((*x as f64).abs()));
    let abs = if dtype == DType::F16 { sk as f64 * 2f64.powi(-25) * v_max } else { 0.0 };
    let inputs = vec![
        Input { name: "Q", shape: vec![batch, heads, sq, d], values: q },
        Input { name: "K", shape: vec![batch, heads, sk, d], values: k },
        Input { name: "V", shape: vec![batch, heads, sk, e], values: v },
    ];
    let op = if causal { "attention_causal" } else { "attention" };
    Case { op, dtype, inputs, scalars: vec![], out_shape: vec![batch, heads, sq, e], want, scale, c, abs }
}

/// How a tensor lies in memory: its axes stored in the order `order` (storage axis `i` is
/// logical axis `order[i]`), the innermost storage axis padded by `pad` elements.
#[derive(Clone, Debug)]
pub struct Placement {
    pub order: Vec<usize>,
    pub pad: usize,
}

impl Placement {
    pub fn row_major(rank: usize) -> Placement {
        Placement { order: (0..rank).collect(), pad: 0 }
    }

    /// Any order of the last two axes, any padding of 0 to 3 elements.
    pub fn strategy(rank: usize) -> impl Strategy<Value = Placement> {
        (any::<bool>(), 0usize..4).prop_map(move |(swap, pad)| {
            let mut order: Vec<usize> = (0..rank).collect();
            if swap && rank >= 2 {
                order.swap(rank - 2, rank - 1);
            }
            Placement { order, pad }
        })
    }

    /// The data and strides that hold `values` (row-major over `shape`) in this placement;
    /// elements no index reaches are NaN, so a kernel that reads one shows it.
    pub fn place(&self, shape: &[usize], values: &[f32]) -> (Vec<f32>, Vec<usize>) {
        let rank = shape.len();
        let mut stored: Vec<usize> = self.order.iter().map(|&a| shape[a]).collect();
        if let Some(last) = stored.last_mut() {
            *last += self.pad;
        }
        let stored_strides = dt_kernels::contiguous_strides(&stored);
        let mut strides = vec![0; rank];
        for (i, &a) in self.order.iter().enumerate() {
            strides[a] = stored_strides[i];
        }
        let mut data = vec![f32::NAN; stored.iter().product::<usize>().max(1)];
        let logical = dt_kernels::contiguous_strides(shape);
        for (flat, &v) in values.iter().enumerate() {
            let at: usize = (0..rank).map(|a| (flat / logical[a]) % shape[a] * strides[a]).sum();
            data[at] = v;
        }
        (data, strides)
    }
}

/// The case count of a property test: `PROPTEST_CASES` where set (proptest's own variable, for
/// a longer or a quicker run), else the test's `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}
