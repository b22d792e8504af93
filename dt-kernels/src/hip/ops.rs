//! The ops on HIP tensors. Each takes the arguments of its CUDA twin (`crate::matmul::matmul`
//! and so on, whose docs describe shapes and semantics) with [`Hip`] and [`HipTensor`], and runs
//! the same spec's kernel through the same argument checks.

use super::launch::{run, run_into};
use super::{Hip, HipTensor};
use crate::{Element, Result};

/// `a @ b`: `a` of `[m, k]`, `b` of `[k, n]`, result `[m, n]` (see [`crate::matmul::matmul`]).
pub fn matmul<T: Element>(hip: &Hip, a: &HipTensor<T>, b: &HipTensor<T>) -> Result<HipTensor<T>> {
    run(hip, &crate::matmul::OP, &[a, b], &[])
}

/// As [`matmul`], writing into `out`.
pub fn matmul_into<T: Element>(hip: &Hip, a: &HipTensor<T>, b: &HipTensor<T>, out: &mut HipTensor<T>) -> Result<()> {
    run_into(hip, &crate::matmul::OP, &[a, b], &[], out)
}

/// `leaky_relu(a @ b)` (see [`crate::mm_leaky_relu::mm_leaky_relu`]).
pub fn mm_leaky_relu<T: Element>(hip: &Hip, a: &HipTensor<T>, b: &HipTensor<T>) -> Result<HipTensor<T>> {
    run(hip, &crate::mm_leaky_relu::OP, &[a, b], &[])
}

/// As [`mm_leaky_relu`], writing into `out`.
pub fn mm_leaky_relu_into<T: Element>(hip: &Hip, a: &HipTensor<T>, b: &HipTensor<T>, out: &mut HipTensor<T>) -> Result<()> {
    run_into(hip, &crate::mm_leaky_relu::OP, &[a, b], &[], out)
}

/// Softmax of each row of `x` (`[rows, cols]`) (see [`crate::softmax::softmax`]).
pub fn softmax<T: Element>(hip: &Hip, x: &HipTensor<T>) -> Result<HipTensor<T>> {
    run(hip, &crate::softmax::OP, &[x], &[])
}

/// As [`softmax`], writing into `out`.
pub fn softmax_into<T: Element>(hip: &Hip, x: &HipTensor<T>, out: &mut HipTensor<T>) -> Result<()> {
    run_into(hip, &crate::softmax::OP, &[x], &[], out)
}

/// Layer norm of each row of `x` (`[rows, cols]`) with per-column `w`, `b` (see
/// [`crate::layernorm::layernorm`]).
pub fn layernorm<T: Element>(hip: &Hip, x: &HipTensor<T>, w: &HipTensor<T>, b: &HipTensor<T>, eps: f32) -> Result<HipTensor<T>> {
    run(hip, &crate::layernorm::OP, &[x, w, b], &[eps])
}

/// As [`layernorm`], writing into `out`.
pub fn layernorm_into<T: Element>(
    hip: &Hip,
    x: &HipTensor<T>,
    w: &HipTensor<T>,
    b: &HipTensor<T>,
    eps: f32,
    out: &mut HipTensor<T>,
) -> Result<()> {
    run_into(hip, &crate::layernorm::OP, &[x, w, b], &[eps], out)
}

/// `tanh(alpha * x) * w + b` (see [`crate::dyt::dyt`]).
pub fn dyt<T: Element>(hip: &Hip, x: &HipTensor<T>, w: &HipTensor<T>, b: &HipTensor<T>, alpha: f32) -> Result<HipTensor<T>> {
    run(hip, &crate::dyt::OP, &[x, w, b], &[alpha])
}

/// As [`dyt`], writing into `out`.
pub fn dyt_into<T: Element>(
    hip: &Hip,
    x: &HipTensor<T>,
    w: &HipTensor<T>,
    b: &HipTensor<T>,
    alpha: f32,
    out: &mut HipTensor<T>,
) -> Result<()> {
    run_into(hip, &crate::dyt::OP, &[x, w, b], &[alpha], out)
}

/// `softmax(q k^T / sqrt(d)) v` per (batch, head), optionally causal (see
/// [`crate::attention::attention`]).
pub fn attention<T: Element>(hip: &Hip, q: &HipTensor<T>, k: &HipTensor<T>, v: &HipTensor<T>, causal: bool) -> Result<HipTensor<T>> {
    run(hip, crate::attention::op(causal), &[q, k, v], &[])
}

/// As [`attention`], writing into `out`.
pub fn attention_into<T: Element>(
    hip: &Hip,
    q: &HipTensor<T>,
    k: &HipTensor<T>,
    v: &HipTensor<T>,
    causal: bool,
    out: &mut HipTensor<T>,
) -> Result<()> {
    run_into(hip, crate::attention::op(causal), &[q, k, v], &[], out)
}
