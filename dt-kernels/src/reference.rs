//! Naive CPU references for the library kernels, written by hand from the textbook definitions.
//!
//! Every function takes row-major f32 slices, computes in f64 (so its own rounding error is
//! negligible next to any f32 kernel) and returns a row-major `Vec<f32>`. They are slow on
//! purpose: plain loops, no blocking, no reordering. Tests compare every backend against them.
//!
//! As test oracles they check nothing for the caller: each panics where a slice's length is not
//! its shape's (or that product overflows), unlike the library's ops, which return errors.
//!
//! Shapes follow the specs in `specs/*.dt`:
//!
//! | function | inputs | output |
//! | --- | --- | --- |
//! | [`matmul`], [`mm_leaky_relu`] | `a: [m, k]`, `b: [k, n]` | `[m, n]` |
//! | [`softmax`] | `x: [rows, cols]` | `[rows, cols]` |
//! | [`layernorm`], [`dyt`] | `x: [rows, cols]`, `w: [cols]`, `b: [cols]` | `[rows, cols]` |
//! | [`attention`] | `q: [batch, heads, seq_q, d]`, `k: [batch, heads, seq_k, d]`, `v: [batch, heads, seq_k, e]` | `[batch, heads, seq_q, e]` |

use dt_core::DType;

/// `a @ b`, with `a` of `m` by `k` and `b` of `k` by `n`.
pub fn matmul(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    product(a, b, m, n, k, |v| v as f32)
}

/// `leaky_relu(a @ b)`: each element `v` of the product becomes `v` if `v > 0`, else `slope * v`.
/// The library kernel uses `slope = 0.01`.
pub fn mm_leaky_relu(a: &[f32], b: &[f32], m: usize, n: usize, k: usize, slope: f32) -> Vec<f32> {
    product(a, b, m, n, k, |v| (if v > 0.0 { v } else { slope as f64 * v }) as f32)
}

/// `finish` of each element of `a @ b`, summed in f64 over the contraction in ascending order:
/// row by row, B's rows in order (its elements in memory order).
fn product(a: &[f32], b: &[f32], m: usize, n: usize, k: usize, finish: impl Fn(f64) -> f32) -> Vec<f32> {
    assert_eq!(a.len(), m * k, "a must be m x k");
    assert_eq!(b.len(), k * n, "b must be k x n");
    let mut out = vec![0.0f32; m * n];
    let mut acc = vec![0.0f64; n];
    for i in 0..m {
        acc.fill(0.0);
        for p in 0..k {
            let x = a[i * k + p] as f64;
            for (s, &y) in acc.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *s += x * y as f64;
            }
        }
        for (o, &s) in out[i * n..(i + 1) * n].iter_mut().zip(&acc) {
            *o = finish(s);
        }
    }
    out
}

/// Softmax of each row: `exp(x - max) / sum(exp(x - max))`, the row maximum subtracted first.
pub fn softmax(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    assert_eq!(x.len(), rows * cols, "x must be rows x cols");
    let mut out = vec![0.0f32; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        for c in 0..cols {
            out[r * cols + c] = ((row[c] as f64 - max).exp() / sum) as f32;
        }
    }
    out
}

/// Layer normalization of each row: `(x - mean) / sqrt(var + eps) * w + b`, with the biased
/// variance (divided by `cols`) and per-column `w` and `b`.
pub fn layernorm(x: &[f32], w: &[f32], b: &[f32], rows: usize, cols: usize, eps: f32) -> Vec<f32> {
    assert_eq!(x.len(), rows * cols, "x must be rows x cols");
    assert_eq!(w.len(), cols, "w must have cols elements");
    assert_eq!(b.len(), cols, "b must have cols elements");
    let mut out = vec![0.0f32; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
        let var = row.iter().map(|&v| (v as f64 - mean) * (v as f64 - mean)).sum::<f64>() / cols as f64;
        let inv_std = 1.0 / (var + eps as f64).sqrt();
        for c in 0..cols {
            out[r * cols + c] = ((row[c] as f64 - mean) * inv_std * w[c] as f64 + b[c] as f64) as f32;
        }
    }
    out
}

/// Dynamic tanh: `tanh(alpha * x) * w + b`, with per-column `w` and `b`.
pub fn dyt(x: &[f32], w: &[f32], b: &[f32], alpha: f32, rows: usize, cols: usize) -> Vec<f32> {
    assert_eq!(x.len(), rows * cols, "x must be rows x cols");
    assert_eq!(w.len(), cols, "w must have cols elements");
    assert_eq!(b.len(), cols, "b must have cols elements");
    let mut out = vec![0.0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let v = (alpha as f64 * x[r * cols + c] as f64).tanh() * w[c] as f64 + b[c] as f64;
            out[r * cols + c] = v as f32;
        }
    }
    out
}

/// Scaled dot-product attention for each (batch, head): `softmax(q k^T / sqrt(d)) v`.
/// With `causal`, query `i` attends only to keys `j <= i`.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    batch: usize,
    heads: usize,
    seq_q: usize,
    seq_k: usize,
    d: usize,
    e: usize,
    causal: bool,
) -> Vec<f32> {
    assert_eq!(q.len(), batch * heads * seq_q * d, "q must be batch x heads x seq_q x d");
    assert_eq!(k.len(), batch * heads * seq_k * d, "k must be batch x heads x seq_k x d");
    assert_eq!(v.len(), batch * heads * seq_k * e, "v must be batch x heads x seq_k x e");
    let mut out = vec![0.0f32; batch * heads * seq_q * e];
    let scale = 1.0 / (d as f64).sqrt();
    let mut scores = vec![0.0f64; seq_k];
    for bh in 0..batch * heads {
        let q = &q[bh * seq_q * d..(bh + 1) * seq_q * d];
        let k = &k[bh * seq_k * d..(bh + 1) * seq_k * d];
        let v = &v[bh * seq_k * e..(bh + 1) * seq_k * e];
        let out = &mut out[bh * seq_q * e..(bh + 1) * seq_q * e];
        for i in 0..seq_q {
            let keys = if causal { seq_k.min(i + 1) } else { seq_k };
            for (j, s) in scores.iter_mut().enumerate().take(keys) {
                let mut acc = 0.0f64;
                for p in 0..d {
                    acc += q[i * d + p] as f64 * k[j * d + p] as f64;
                }
                *s = acc * scale;
            }
            let max = scores[..keys].iter().fold(f64::NEG_INFINITY, |m, &s| m.max(s));
            let sum: f64 = scores[..keys].iter().map(|&s| (s - max).exp()).sum();
            for c in 0..e {
                let mut acc = 0.0f64;
                for (j, &s) in scores[..keys].iter().enumerate() {
                    acc += (s - max).exp() * v[j * e + c] as f64;
                }
                out[i * e + c] = (acc / sum) as f32;
            }
        }
    }
    out
}

/// `x` with every element rounded to `dtype` (what storing it as that type keeps), as f32.
pub fn round_to(x: &[f32], dtype: DType) -> Vec<f32> {
    x.iter().map(|&v| dtype.round(v)).collect()
}

/// How far a result is from the expected one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ErrorStats {
    /// `‖got − want‖₂ / ‖want‖₂` (the absolute L2 error when `want` is all zeros).
    pub rel_l2: f64,
    /// `max |got − want|` over all elements.
    pub max_abs: f64,
}

/// Compares `got` with `want` elementwise, in f64. NaN in either propagates into both fields.
pub fn error_stats(got: &[f32], want: &[f32]) -> ErrorStats {
    assert_eq!(got.len(), want.len(), "compared slices differ in length");
    let mut diff2 = 0.0f64;
    let mut want2 = 0.0f64;
    let mut max_abs = 0.0f64;
    for (&g, &w) in got.iter().zip(want) {
        let d = (g as f64 - w as f64).abs();
        diff2 += d * d;
        want2 += w as f64 * w as f64;
        // `f64::max` drops NaN; keep it visible instead.
        max_abs = if d.is_nan() || max_abs.is_nan() { f64::NAN } else { max_abs.max(d) };
    }
    let norm = diff2.sqrt();
    let rel_l2 = if want2 > 0.0 { norm / want2.sqrt() } else { norm };
    ErrorStats { rel_l2, max_abs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_cases_by_hand() {
        // [1 2; 3 4] @ [5 6; 7 8] = [19 22; 43 50]
        assert_eq!(matmul(&[1., 2., 3., 4.], &[5., 6., 7., 8.], 2, 2, 2), vec![19., 22., 43., 50.]);
        // [1 -1] @ [[2], [3]] = -1, leaky: -0.01
        assert_eq!(mm_leaky_relu(&[1., -1.], &[2., 3.], 1, 1, 2, 0.01), vec![-0.01]);
        let s = softmax(&[0.0, 0.0, 1000.0, 1000.0], 2, 2);
        assert_eq!(s, vec![0.5; 4]);
        let l = layernorm(&[1., 3.], &[2., 2.], &[1., 1.], 1, 2, 0.0);
        assert_eq!(l, vec![-1., 3.]);
        assert_eq!(dyt(&[0.0], &[3.0], &[0.5], 2.0, 1, 1), vec![0.5]);
        // One query, two equal keys: the output is the mean of the values; causal keeps key 0 only.
        let q = [1.0, 0.0];
        let k = [1.0, 0.0, 1.0, 0.0];
        let v = [2.0, 4.0];
        assert_eq!(attention(&q, &k, &v, 1, 1, 1, 2, 2, 1, false), vec![3.0]);
        assert_eq!(attention(&q, &k, &v, 1, 1, 1, 2, 2, 1, true), vec![2.0]);
        let st = error_stats(&[1.0, 2.0], &[1.0, 1.0]);
        assert_eq!(st.max_abs, 1.0);
        assert!((st.rel_l2 - 1.0 / 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(round_to(&[1.0 + 1.0 / 4096.0], DType::F16), vec![1.0]);
    }
}
