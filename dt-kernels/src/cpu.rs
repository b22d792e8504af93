//! The CPU fallback: the same lowered kernels as the GPU, compiled from the generated CPU C by
//! the build script, run on host tensors. Needs no GPU and no CUDA.
//!
//! Each function checks its arguments as the GPU entry points do (ranks, shared sizes, limits)
//! and returns a new contiguous tensor. Inputs may be strided views (e.g. transposed): the
//! kernels index every input by its strides.

use crate::element::Element;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::plan::{plan, Device, OpDesc};
use crate::{attention as att, dyt as dy, layernorm as ln, matmul as mm, mm_leaky_relu as mml, softmax as sm};

/// Runs `op` on host tensors.
pub(crate) fn run<T: Element>(op: &OpDesc, inputs: &[&HostTensor<T>], scalars: &[f32]) -> Result<HostTensor<T>> {
    let shapes: Vec<(&[usize], &[usize])> = inputs.iter().map(|t| (t.shape(), t.strides())).collect();
    let plan = plan(op, T::DTYPE, &shapes, scalars, Device::PLAIN)?;
    // NaN, so that an element the kernel fails to write shows.
    let mut out = vec![T::from_f32(f32::NAN); plan.out_elements];
    if plan.programs > 0 {
        let f = plan.spec.cpu_fn(&plan.symbol).ok_or_else(|| Error::Internal(format!("{}: no CPU kernel `{}`", op.op, plan.symbol)))?;
        let mut args = plan.args;
        for (slot, &j) in plan.slots.iter().enumerate() {
            args.inputs[slot] = inputs[j].data().as_ptr() as usize as u64;
        }
        args.output = out.as_mut_ptr() as usize as u64;
        // The programs in contiguous ranges, one per thread: each program writes its own block of
        // the output (as on the GPU), so the ranges never write the same element.
        let programs = plan.programs;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(programs);
        let per_thread = programs.div_ceil(threads);
        let run_range = |first: usize| -> i32 {
            let last = (first + per_thread).min(programs);
            // SAFETY: `f` was generated with the signature
            // `int(const dt_args*, long long first, long long last)`. Each input pointer refers
            // to the data of a live `HostTensor`, whose shape and strides reach only elements
            // inside that data (checked when it was made), and the kernel reads each input only at
            // the strides and sizes of `args`, which `plan` took from those tensors. The output
            // buffer holds the `out_elements` elements of the contiguous output, which outlives
            // every thread (they are joined below), and the programs of disjoint ranges write
            // disjoint elements of it. The kernel keeps no pointer after it returns.
            unsafe { f(&args, first as i64, last as i64) }
        };
        let status = if threads <= 1 {
            run_range(0)
        } else {
            std::thread::scope(|scope| {
                // A range whose thread the system does not start runs here, after the first.
                let mut not_started = Vec::new();
                let others: Vec<_> = (1..threads)
                    .filter_map(|t| {
                        let spawned = std::thread::Builder::new().spawn_scoped(scope, move || run_range(t * per_thread));
                        spawned.map_err(|_| not_started.push(t)).ok()
                    })
                    .collect();
                let mut all = vec![run_range(0)];
                all.extend(not_started.into_iter().map(|t| run_range(t * per_thread)));
                all.extend(others.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))));
                all.into_iter().find(|&s| s != 0).unwrap_or(0)
            })
        };
        if status != 0 {
            return Err(Error::CpuKernel { op: op.op, kernel: plan.symbol.clone(), msg: dt_core::abi::cpu_failure(status) });
        }
    }
    Ok(HostTensor::from_parts(out, plan.out_shape))
}

/// `a @ b`: `a` of `[m, k]`, `b` of `[k, n]`, result `[m, n]` (accumulated in f32).
pub fn matmul<T: Element>(a: &HostTensor<T>, b: &HostTensor<T>) -> Result<HostTensor<T>> {
    run(&mm::OP, &[a, b], &[])
}

/// `leaky_relu(a @ b)` with slope 0.01: `a` of `[m, k]`, `b` of `[k, n]`, result `[m, n]`.
pub fn mm_leaky_relu<T: Element>(a: &HostTensor<T>, b: &HostTensor<T>) -> Result<HostTensor<T>> {
    run(&mml::OP, &[a, b], &[])
}

/// Softmax of each row of `x` (`[rows, cols]`).
pub fn softmax<T: Element>(x: &HostTensor<T>) -> Result<HostTensor<T>> {
    run(&sm::OP, &[x], &[])
}

/// Layer normalization of each row of `x` (`[rows, cols]`) with weight `w` and bias `b`
/// (`[cols]`): `(x - mean) / sqrt(var + eps) * w + b`; `eps` as for [`crate::layernorm`] (with
/// 0, a constant row gives NaN).
pub fn layernorm<T: Element>(x: &HostTensor<T>, w: &HostTensor<T>, b: &HostTensor<T>, eps: f32) -> Result<HostTensor<T>> {
    run(&ln::OP, &[x, w, b], &[eps])
}

/// Dynamic tanh of `x` (`[rows, cols]`) with weight `w` and bias `b` (`[cols]`):
/// `tanh(alpha * x) * w + b`.
pub fn dyt<T: Element>(x: &HostTensor<T>, w: &HostTensor<T>, b: &HostTensor<T>, alpha: f32) -> Result<HostTensor<T>> {
    run(&dy::OP, &[x, w, b], &[alpha])
}

/// Scaled dot-product attention `softmax(q k^T / sqrt(d)) v` per (batch, head): `q` of
/// `[batch, heads, seq_q, d]`, `k` of `[batch, heads, seq_k, d]`, `v` of
/// `[batch, heads, seq_k, e]`, result `[batch, heads, seq_q, e]`. With `causal`, query `i`
/// attends to keys `j <= i` only.
pub fn attention<T: Element>(q: &HostTensor<T>, k: &HostTensor<T>, v: &HostTensor<T>, causal: bool) -> Result<HostTensor<T>> {
    run(att::op(causal), &[q, k, v], &[])
}
