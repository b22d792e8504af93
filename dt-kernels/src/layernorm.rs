//! Layer normalization over the last dimension (spec `specs/layernorm.dt`, kernel `layernorm`).

use crate::backend::{self, Backend};
use crate::plan::{InputDesc, OpDesc};
use crate::{Element, Result};

pub(crate) static OP: OpDesc = OpDesc {
    op: "layernorm",
    spec: "layernorm",
    kernel: "layernorm",
    inputs: &[
        InputDesc { param: "X", arg: "x", axes: &["rows", "cols"] },
        InputDesc { param: "W", arg: "w", axes: &["cols"] },
        InputDesc { param: "B", arg: "b", axes: &["cols"] },
    ],
    scalars: &["eps"],
    nonempty: &[],
    nonnegative: &["eps"],
};

/// `(x - mean) / sqrt(var + eps) * w + b` for each row of `x` (`[rows, cols]`), with the biased
/// variance and per-column `w` and `b` (`[cols]`), on the GPU. Result `[rows, cols]`. In f32,
/// rows of up to 4096 columns use the GPU's approximate division and `rsqrt` (errors of a few units
/// in the last place); f16 and bf16 always do. `eps` is finite and at least 0 (else an error);
/// with `eps` 0 a constant row has no variance to divide by and gives NaN, as in PyTorch.
pub fn layernorm<B: Backend, T: Element>(gpu: &B, x: &B::Tensor<T>, w: &B::Tensor<T>, b: &B::Tensor<T>, eps: f32) -> Result<B::Tensor<T>> {
    backend::run(gpu, &OP, &[x, w, b], &[eps])
}

/// As [`layernorm`], writing the result into `out` (`[rows, cols]`, any strides that reach each element
/// once, a buffer no other view shares) instead of allocating it.
pub fn layernorm_into<B: Backend, T: Element>(
    gpu: &B,
    x: &B::Tensor<T>,
    w: &B::Tensor<T>,
    b: &B::Tensor<T>,
    eps: f32,
    out: &mut B::Tensor<T>,
) -> Result<()> {
    backend::run_into(gpu, &OP, &[x, w, b], &[eps], out)
}
