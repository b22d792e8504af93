//! Softmax over the last dimension, numerically stable (spec `specs/softmax.dt`, kernel
//! `softmax`): four rows per program, both row statistics computed in the program.

use crate::gpu::{self, DeviceTensor, Gpu};
use crate::plan::{InputDesc, OpDesc};
use crate::{Element, Result};

pub(crate) static OP: OpDesc = OpDesc {
    op: "softmax",
    spec: "softmax",
    kernel: "softmax",
    inputs: &[InputDesc { param: "A", arg: "x", axes: &["rows", "cols"] }],
    scalars: &[],
    nonempty: &[],
};

/// Softmax of each row of `x` (`[rows, cols]`, strided views accepted) on the GPU:
/// `exp(x - max) / sum(exp(x - max))`. Result `[rows, cols]`, contiguous.
pub fn softmax<T: Element>(gpu: &Gpu, x: &DeviceTensor<T>) -> Result<DeviceTensor<T>> {
    gpu::run(gpu, &OP, &[x], &[])
}

/// As [`softmax`], writing the result into `out` (`[rows, cols]`, any strides that reach each element
/// once, a buffer no other view shares) instead of allocating it.
pub fn softmax_into<T: Element>(gpu: &Gpu, x: &DeviceTensor<T>, out: &mut DeviceTensor<T>) -> Result<()> {
    gpu::run_into(gpu, &OP, &[x], &[], out)
}
