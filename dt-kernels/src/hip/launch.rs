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
    plan.check_admits(op, &args, T::DTYPE, &symbol)?;
    let (f, row) = hip.function(plan.spec_index, &symbol)?;
    let (columns, rows) = grid(plan.programs as u64, row.threads);
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
            columns,
            rows,
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

/// The grid of a launch of `programs` programs of `threads` threads, as (blocks along x, rows
/// along y): `hipModuleLaunchKernel` takes fewer than 2^32 work-items (blocks times threads)
/// along a dimension, so a grid of more has rows of as many blocks as fit; the kernels number
/// their programs `blockIdx.y * gridDim.x + blockIdx.x` and skip those past the last.
fn grid(programs: u64, threads: u32) -> (u32, u32) {
    let columns = (u32::MAX as u64 / threads.max(1) as u64).min(programs).max(1);
    (columns as u32, programs.div_ceil(columns) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 16 million programs of 256 threads fit one row (4.1e9 work-items); 20 million (DyT's
    /// class at 20 million rows) take two rows of 16,777,215 blocks, the second running past
    /// the last program; the largest grid (2^31 - 1 programs of 1024 threads) takes 513 rows.
    #[test]
    fn grids_past_hips_work_item_limit_take_rows_of_blocks() {
        assert_eq!(grid(16_000_000, 256), (16_000_000, 1));
        assert_eq!(grid(20_000_000, 256), (16_777_215, 2));
        let (columns, rows) = grid(i32::MAX as u64, 1024);
        assert!(columns as u64 * 1024 <= u32::MAX as u64 && columns as u64 * rows as u64 >= i32::MAX as u64);
        assert_eq!(rows, 513);
        assert_eq!(grid(1, 64), (1, 1));
    }
}
