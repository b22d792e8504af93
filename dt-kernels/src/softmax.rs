//! Softmax over the last dimension, numerically stable (spec `specs/softmax.dt`, kernel
//! `softmax` and its size classes, chosen by row length): both row statistics computed in the
//! program, a row split over a thread-block cluster where it is long.

use crate::backend::{self, Backend};
use crate::plan::{InputDesc, OpDesc};
use crate::{Element, Result};

pub(crate) static OP: OpDesc = OpDesc {
    op: "softmax",
    spec: "softmax",
    kernel: "softmax",
    inputs: &[InputDesc { param: "A", arg: "x", axes: &["rows", "cols"] }],
    scalars: &[],
    nonempty: &[],
    nonnegative: &[],
};

/// Softmax of each row of `x` (`[rows, cols]`, strided views accepted) on the GPU:
/// `exp(x - max) / sum(exp(x - max))`. Result `[rows, cols]`, contiguous. In f32, rows of up to
/// 1024 and of more than 16384 columns use the GPU's approximate `exp` and reciprocal (errors of
/// a few units in the last place, as Triton's and torch.compile's kernels); f16 and bf16 always do.
pub fn softmax<B: Backend, T: Element>(gpu: &B, x: &B::Tensor<T>) -> Result<B::Tensor<T>> {
    backend::run(gpu, &OP, &[x], &[])
}

/// As [`softmax`], writing the result into `out` (`[rows, cols]`, any strides that reach each element
/// once, a buffer no other view shares) instead of allocating it.
pub fn softmax_into<B: Backend, T: Element>(gpu: &B, x: &B::Tensor<T>, out: &mut B::Tensor<T>) -> Result<()> {
    backend::run_into(gpu, &OP, &[x], &[], out)
}
