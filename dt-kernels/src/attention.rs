//! Scaled dot-product attention (spec `specs/attention.dt`, kernels `attention` and
//! `attention_causal`, each in size classes by head dimension: `_64` and `_128` for f16 and
//! bf16 up to those, the plain kernel for any): one program per 64 or 128 queries of one (batch, head),
//! keys in steps of 64 (128 in the Hopper class for head dimensions above 64), in the online form the compiler derives from the spec's algorithm (pass
//! `flash`: the row maximum, sum and output in one loop over the keys, which a causal program
//! stops at its last query). In f16 and bf16 both dots run on tensor cores, the weights rounded
//! to the element type first (docs/language.md, "Precision of dots"), K and V copied steps ahead
//! (docs/decisions/0018-attention-rings.md).

use crate::backend::{self, Backend};
use crate::gpu::{self, DeviceTensor, Gpu};
use crate::plan::{InputDesc, OpDesc};
use crate::{Element, Result};

const INPUTS: &[InputDesc] = &[
    InputDesc { param: "Q", arg: "q", axes: &["batch", "heads", "seq_q", "d"] },
    InputDesc { param: "K", arg: "k", axes: &["batch", "heads", "seq_k", "d"] },
    InputDesc { param: "V", arg: "v", axes: &["batch", "heads", "seq_k", "e"] },
];

const NONEMPTY: &[(&str, &str)] = &[("seq_k", "a softmax over no keys is undefined"), ("d", "the scores are scaled by 1/sqrt(d)")];

static FULL: OpDesc =
    OpDesc { op: "attention", spec: "attention", kernel: "attention", inputs: INPUTS, scalars: &[], nonempty: NONEMPTY, nonnegative: &[] };

static CAUSAL: OpDesc = OpDesc {
    op: "attention (causal)",
    spec: "attention",
    kernel: "attention_causal",
    inputs: INPUTS,
    scalars: &[],
    nonempty: NONEMPTY,
    nonnegative: &[],
};

pub(crate) fn op(causal: bool) -> &'static OpDesc {
    if causal {
        &CAUSAL
    } else {
        &FULL
    }
}

/// `softmax(q k^T / sqrt(d)) v` for each (batch, head), on the GPU: `q` of
/// `[batch, heads, seq_q, d]`, `k` of `[batch, heads, seq_k, d]`, `v` of
/// `[batch, heads, seq_k, e]` (strided views accepted), result `[batch, heads, seq_q, e]`. With
/// `causal`, query `i` attends only to keys `j <= i`. `seq_k` and `d` must not be 0 unless the
/// result is empty.
pub fn attention<B: Backend, T: Element>(
    gpu: &B,
    q: &B::Tensor<T>,
    k: &B::Tensor<T>,
    v: &B::Tensor<T>,
    causal: bool,
) -> Result<B::Tensor<T>> {
    backend::run(gpu, op(causal), &[q, k, v], &[])
}

/// As [`attention`], writing the result into `out` (`[batch, heads, seq_q, e]`, any strides that reach each element
/// once, a buffer no other view shares) instead of allocating it.
pub fn attention_into<B: Backend, T: Element>(
    gpu: &B,
    q: &B::Tensor<T>,
    k: &B::Tensor<T>,
    v: &B::Tensor<T>,
    causal: bool,
    out: &mut B::Tensor<T>,
) -> Result<()> {
    backend::run_into(gpu, op(causal), &[q, k, v], &[], out)
}

/// The symbol of the kernel [`attention`] launches for these arguments on `gpu`, its size class
/// and twin (e.g. `dt_attention_90a_128_f16`, the wgmma class, on an H100 for tensors a tensor
/// map describes), for diagnostics; nothing is launched.
pub fn attention_kernel<T: Element>(
    gpu: &Gpu,
    q: &DeviceTensor<T>,
    k: &DeviceTensor<T>,
    v: &DeviceTensor<T>,
    causal: bool,
) -> Result<String> {
    gpu::launch_symbol(gpu, op(causal), &[q, k, v], &[])
}
