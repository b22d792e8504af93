//! Running an op on HIP tensors: the HIP [`crate::backend::Backend`]. `plan::plan` checks the
//! arguments and fills the argument block (as for CUDA and the CPU), this file adds the pointers
//! and launches with `hipModuleLaunchKernel`, the block passed by value as the kernel's one
//! parameter.

use super::{Hip, HipTensor};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::plan::{Device, OpDesc, Plan};
use std::ffi::c_void;
use std::sync::Arc;

impl crate::backend::sealed::Sealed for Hip {}

impl crate::backend::Backend for Hip {
    type Tensor<T: Element> = HipTensor<T>;

    fn view<T: Element>(t: &HipTensor<T>) -> (&[usize], &[usize]) {
        (t.shape(), t.strides())
    }

    fn device(&self) -> Device {
        Device::PLAIN
    }

    fn new_output<T: Element>(&self, op: &OpDesc, shape: &[usize]) -> Result<HipTensor<T>> {
        HipTensor::new_uninit(self, shape.to_vec(), || format!("{}: the output {shape:?}", op.op))
    }

    fn owns_buffer<T: Element>(t: &mut HipTensor<T>) -> bool {
        Arc::get_mut(&mut t.buf).is_some()
    }

    fn launch<T: Element>(&self, op: &OpDesc, inputs: &[&HipTensor<T>], plan: Plan, out: &mut HipTensor<T>) -> Result<()> {
        launch(self, op, inputs, plan, out)
    }
}

/// Checks that every tensor lives on `hip`'s device and launches the planned kernel into `out`.
fn launch<T: Element>(hip: &Hip, op: &OpDesc, inputs: &[&HipTensor<T>], plan: Plan, out: &mut HipTensor<T>) -> Result<()> {
    let args = inputs.iter().zip(op.inputs).map(|(t, desc)| (*t, desc.arg)).chain([(&*out, "out")]);
    for (t, arg) in args {
        if !t.buf.hip.same_device(hip) {
            return Err(Error::WrongDevice { op: op.op, arg, tensor_device: t.buf.hip.device(), gpu_device: hip.device() });
        }
    }
    if plan.programs == 0 {
        return Ok(());
    }
    // Tensors made by a handle on another stream (`Hip::fork`, `Hip::with_stream`): the work
    // enqueued there on them finishes before this kernel reads or overwrites them.
    for t in inputs.iter().copied().chain([&*out]) {
        if !t.buf.hip.same_stream(hip) {
            t.buf.hip.synchronize()?;
        }
    }
    hip.make_current()?;
    let align = std::mem::align_of::<T::Storage>() as u64;
    let mut args = plan.args;
    for (slot, &j) in plan.slots.iter().enumerate() {
        let ptr = inputs[j].device_ptr();
        if !ptr.is_multiple_of(align) {
            return Err(Error::Misaligned { op: op.op, arg: op.inputs[j].arg, addr: ptr, align: align as usize });
        }
        args.inputs[slot] = ptr;
    }
    args.output = out.device_ptr();
    let symbol = plan.launch_symbol(&args, T::DTYPE, |s| plan.spec.hip_launch_row(s).is_some());
    let (f, row) = hip.function(plan.spec_index, &symbol)?;
    check_grid(op, &symbol, plan.programs as u64, row.threads)?;
    let mut packed = dt_core::abi::GpuArgs::of(plan.kernel).pack(&args);
    let mut params: [*mut c_void; 1] = [&mut packed as *mut _ as *mut c_void];
    let lib = hip.shared.lib;
    // SAFETY: the kernel takes one `dt_args_t` by value, and `params` points to one, packed in its
    // layout (`GpuArgs::of` the kernel it was built from) and live until the call returns (the
    // runtime copies the parameters at launch). Every input pointer is the live
    // buffer of a `HipTensor` whose shape and strides reach only elements inside it (checked when
    // it was made), and the kernel reads inputs only at the sizes and strides in `args`, which
    // `plan` took from those tensors. The output pointer is the buffer of `out`, whose shape is
    // the result's and whose strides reach only elements inside it, each once. Grid, block and
    // shared memory are what the emitter computed for this kernel; the buffers are freed only
    // after the device is done with them (`hipFree` waits).
    let code = unsafe {
        lib.hipModuleLaunchKernel(
            f,
            plan.programs as u32,
            1,
            1,
            row.threads,
            1,
            1,
            row.shared_bytes,
            hip.stream.raw.0,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    super::sys::check(lib, code, || format!("{}: launching `{symbol}` on {} programs", op.op, plan.programs))?;
    // The output's own handle waits on its stream only: the result is complete before it returns.
    if !out.buf.hip.same_stream(hip) {
        hip.synchronize()?;
    }
    Ok(())
}

/// `hipModuleLaunchKernel` takes fewer than 2^32 work-items (programs times threads) along a grid
/// dimension, and the kernels number their programs along one: a launch of more is refused here
/// with what it would run (where CUDA, which counts blocks, runs it).
fn check_grid(op: &OpDesc, symbol: &str, programs: u64, threads: u32) -> Result<()> {
    if programs * threads as u64 > u32::MAX as u64 {
        return Err(Error::GridTooLarge {
            op: op.op,
            kernel: symbol.to_string(),
            programs,
            threads,
            limit: "HIP launches fewer than 2^32 along a grid dimension (fewer rows, or the CUDA or CPU ops, run it)",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20 million rows of DyT's class of one program of 256 threads per row: 5.12e9 work-items,
    /// refused with that count; 16 million rows fit.
    #[test]
    fn grids_past_hips_work_item_limit_are_refused() {
        let op = &crate::dyt::OP;
        assert!(check_grid(op, "dt_dyt_1k_f16", 16_000_000, 256).is_ok());
        let err = check_grid(op, "dt_dyt_1k_f16", 20_000_000, 256).unwrap_err().to_string();
        assert!(
            err.contains("would run 20000000 programs of 256 threads, 5120000000 work-items in all; HIP launches fewer than 2^32"),
            "{err}"
        );
    }
}
