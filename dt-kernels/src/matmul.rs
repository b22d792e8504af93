//! Matrix product `a @ b` (spec `specs/matmul.dt`, kernel `mm` and its classes), accumulated in
//! f32: on sm_90, for f16 and bf16 tensors whose rows are 16-byte aligned, warp-specialized
//! classes (TMA and wgmma, tiles of 64 x 64 to 128 x 256 by size); elsewhere tensor-core tiles of
//! 128 x 128 (`mma.sync`).

use crate::backend::{self, Backend};
use crate::gpu::{self, DeviceTensor, Gpu};
use crate::plan::{InputDesc, OpDesc};
use crate::{Element, Result};

pub(crate) static OP: OpDesc = OpDesc {
    op: "matmul",
    spec: "matmul",
    kernel: "mm",
    inputs: &[InputDesc { param: "A", arg: "a", axes: &["m", "k"] }, InputDesc { param: "B", arg: "b", axes: &["k", "n"] }],
    scalars: &[],
    nonempty: &[],
    nonnegative: &[],
};

/// `a @ b` on the GPU: `a` of `[m, k]`, `b` of `[k, n]`, result `[m, n]` (contiguous). Either
/// input may be a strided view, e.g. [`DeviceTensor::transpose`] of a stored matrix. With
/// `k = 0` the result is zeros; with `m = 0` or `n = 0` it is empty and nothing is launched.
pub fn matmul<B: Backend, T: Element>(gpu: &B, a: &B::Tensor<T>, b: &B::Tensor<T>) -> Result<B::Tensor<T>> {
    backend::run(gpu, &OP, &[a, b], &[])
}

/// As [`matmul`], writing the result into `out` (`[m, n]`, any strides that reach each element
/// once, a buffer no other view shares) instead of allocating it.
pub fn matmul_into<B: Backend, T: Element>(gpu: &B, a: &B::Tensor<T>, b: &B::Tensor<T>, out: &mut B::Tensor<T>) -> Result<()> {
    backend::run_into(gpu, &OP, &[a, b], &[], out)
}

/// The symbol of the kernel [`matmul`] launches for these arguments on `gpu`, its size class and
/// twin (e.g. `dt_mm_90a_f16`, the warp-specialized class, on an H100 for tensors a tensor map
/// describes), for diagnostics; nothing is launched.
pub fn matmul_kernel<T: Element>(gpu: &Gpu, a: &DeviceTensor<T>, b: &DeviceTensor<T>) -> Result<String> {
    gpu::launch_symbol(gpu, &OP, &[a, b], &[])
}
