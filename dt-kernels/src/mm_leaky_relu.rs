//! Matrix product fused with a leaky ReLU of slope 0.01 (spec `specs/mm_leaky_relu.dt`, kernel
//! `out`): the product tile never leaves the program.

use crate::backend::{self, Backend};
use crate::gpu::{self, DeviceTensor, Gpu};
use crate::plan::{InputDesc, OpDesc};
use crate::{Element, Result};

/// The slope of the negative part, fixed by the spec.
pub const SLOPE: f32 = 0.01;

pub(crate) static OP: OpDesc = OpDesc {
    op: "mm_leaky_relu",
    spec: "mm_leaky_relu",
    kernel: "out",
    inputs: &[InputDesc { param: "A", arg: "a", axes: &["m", "k"] }, InputDesc { param: "B", arg: "b", axes: &["k", "n"] }],
    scalars: &[],
    nonempty: &[],
    nonnegative: &[],
};

/// `leaky_relu(a @ b)` on the GPU: each product `v` becomes `v` if `v > 0`, else `0.01 * v`.
/// `a` of `[m, k]`, `b` of `[k, n]` (strided views accepted), result `[m, n]`.
pub fn mm_leaky_relu<B: Backend, T: Element>(gpu: &B, a: &B::Tensor<T>, b: &B::Tensor<T>) -> Result<B::Tensor<T>> {
    backend::run(gpu, &OP, &[a, b], &[])
}

/// As [`mm_leaky_relu`], writing the result into `out` (`[m, n]`, any strides that reach each element
/// once, a buffer no other view shares) instead of allocating it.
pub fn mm_leaky_relu_into<B: Backend, T: Element>(gpu: &B, a: &B::Tensor<T>, b: &B::Tensor<T>, out: &mut B::Tensor<T>) -> Result<()> {
    backend::run_into(gpu, &OP, &[a, b], &[], out)
}

/// The symbol of the kernel [`mm_leaky_relu`] launches for these arguments on `gpu`, its size class and
/// twin (e.g. `dt_mm_90a_f16`, the warp-specialized class, on an H100 for tensors a tensor map
/// describes), for diagnostics; nothing is launched.
pub fn mm_leaky_relu_kernel<T: Element>(gpu: &Gpu, a: &DeviceTensor<T>, b: &DeviceTensor<T>) -> Result<String> {
    gpu::launch_symbol(gpu, &OP, &[a, b], &[])
}
