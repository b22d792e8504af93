//! The GPU backends behind one trait: CUDA ([`crate::Gpu`], [`crate::DeviceTensor`]) and, with
//! the `hip` feature, HIP (`hip::Hip`, `hip::HipTensor`). Every op is written once over
//! [`Backend`] (`softmax::softmax(&gpu, &x)` on either): the argument checks and the output
//! come from here, and a backend adds only what differs, allocating a tensor and launching.

use crate::element::Element;
use crate::error::{Error, Result};
use crate::layout;
use crate::plan::{plan, plan_into, Device, OpDesc, Plan};

/// A GPU the ops run on, with its tensors: [`crate::Gpu`] with [`crate::DeviceTensor`], and
/// `hip::Hip` with `hip::HipTensor`. Sealed: the crate implements it for those two only. Its
/// methods are what the ops call; they take types of the crate's own and are not for use
/// outside it.
pub trait Backend: sealed::Sealed {
    /// The backend's tensors of element type `T`.
    type Tensor<T: Element>;

    /// The shape and strides of `t`, in elements.
    #[doc(hidden)]
    fn view<T: Element>(t: &Self::Tensor<T>) -> (&[usize], &[usize]);

    /// What the device offers the kernels.
    #[doc(hidden)]
    fn device(&self) -> Device;

    /// A new contiguous tensor of `shape` for `op`'s output, whose every element the kernel
    /// writes.
    #[doc(hidden)]
    fn new_output<T: Element>(&self, op: &OpDesc, shape: &[usize]) -> Result<Self::Tensor<T>>;

    /// Whether `t`'s buffer is its own, shared with no other view.
    #[doc(hidden)]
    fn owns_buffer<T: Element>(t: &mut Self::Tensor<T>) -> bool;

    /// Checks that every tensor is on this device and launches `plan` of `op` on `inputs` into
    /// `out` (nothing when the plan has no programs).
    #[doc(hidden)]
    fn launch<T: Element>(&self, op: &OpDesc, inputs: &[&Self::Tensor<T>], plan: Plan, out: &mut Self::Tensor<T>) -> Result<()>;
}

/// Implemented by the backends of this crate only.
pub(crate) mod sealed {
    pub trait Sealed {}
}

/// The shapes and strides of `inputs`, as [`plan`] takes them.
fn views<'a, B: Backend, T: Element>(inputs: &[&'a B::Tensor<T>]) -> Vec<(&'a [usize], &'a [usize])> {
    inputs.iter().map(|t| B::view(*t)).collect()
}

/// Runs `op` on `backend`: checks the arguments, allocates the contiguous output, launches
/// (nothing when the output is empty).
pub(crate) fn run<B: Backend, T: Element>(backend: &B, op: &OpDesc, inputs: &[&B::Tensor<T>], scalars: &[f32]) -> Result<B::Tensor<T>> {
    let plan = plan(op, T::DTYPE, &views::<B, T>(inputs), scalars, backend.device())?;
    let mut out = backend.new_output::<T>(op, &plan.out_shape)?;
    backend.launch(op, inputs, plan, &mut out)?;
    Ok(out)
}

/// Runs `op` on `backend`, writing the result into `out`, which must have the result's shape,
/// strides that never reach one element twice, and a buffer no other view shares.
pub(crate) fn run_into<B: Backend, T: Element>(
    backend: &B,
    op: &OpDesc,
    inputs: &[&B::Tensor<T>],
    scalars: &[f32],
    out: &mut B::Tensor<T>,
) -> Result<()> {
    // Planned for `out`'s strides, so that a class that takes only some outputs (one stored
    // through a tensor map) is chosen only where it takes this one.
    let (shape, strides) = B::view(out);
    let plan = plan_into(op, T::DTYPE, &views::<B, T>(inputs), scalars, backend.device(), Some(strides))?;
    if shape != plan.out_shape {
        return Err(Error::OutputShape { op: op.op, expected: plan.out_shape, got: shape.to_vec() });
    }
    layout::check_no_overlap(&|| format!("{}: the output", op.op), shape, strides)?;
    if !B::owns_buffer(out) {
        return Err(Error::SharedOutput { op: op.op });
    }
    backend.launch(op, inputs, plan, out)
}
