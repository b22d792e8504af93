//! Dynamic tanh, an element-wise replacement for normalization layers (spec `specs/dyt.dt`,
//! kernel `dyt`).

use crate::backend::{self, Backend};
use crate::plan::{InputDesc, OpDesc};
use crate::{Element, Result};

pub(crate) static OP: OpDesc = OpDesc {
    op: "dyt",
    spec: "dyt",
    kernel: "dyt",
    inputs: &[
        InputDesc { param: "X", arg: "x", axes: &["rows", "cols"] },
        InputDesc { param: "W", arg: "w", axes: &["cols"] },
        InputDesc { param: "B", arg: "b", axes: &["cols"] },
    ],
    scalars: &["alpha"],
    nonempty: &[],
    nonnegative: &[],
};

/// `tanh(alpha * x) * w + b` with `x` of `[rows, cols]` and per-column `w`, `b` (`[cols]`), on
/// the GPU. Result `[rows, cols]`.
pub fn dyt<B: Backend, T: Element>(gpu: &B, x: &B::Tensor<T>, w: &B::Tensor<T>, b: &B::Tensor<T>, alpha: f32) -> Result<B::Tensor<T>> {
    backend::run(gpu, &OP, &[x, w, b], &[alpha])
}

/// As [`dyt`], writing the result into `out` (`[rows, cols]`, any strides that reach each element
/// once, a buffer no other view shares) instead of allocating it.
pub fn dyt_into<B: Backend, T: Element>(
    gpu: &B,
    x: &B::Tensor<T>,
    w: &B::Tensor<T>,
    b: &B::Tensor<T>,
    alpha: f32,
    out: &mut B::Tensor<T>,
) -> Result<()> {
    backend::run_into(gpu, &OP, &[x, w, b], &[alpha], out)
}
