#!/usr/bin/env python3
"""Baseline timings for the kernel-library benchmark.

For each job (op, dtype, shape, causal) this times a set of reference
implementations (PyTorch eager, torch.compile, tutorial-style Triton kernels,
PyTorch SDPA backends and Liger-Kernel where they apply) on the GPU and prints
one JSON line per (job, baseline) to stdout:

  {"op": ..., "dtype": ..., "shape": [...], "causal": ..., "baseline": NAME,
   "ms": MEDIAN_MS_OR_NULL, "status": "ok" | "failed: <short reason>"}

Nothing else is written to stdout (all library chatter goes to stderr).

Single job:  python3 bench/baselines.py --op matmul --dtype bf16 --shape 4096x4096x4096
Batch:       python3 bench/baselines.py --jobs jobs.json
"""

import argparse
import ctypes
import json
import math
import os
import re
import statistics
import sys
import time
import warnings

try:
    import torch
    import torch.nn.functional as F
except Exception as _e:  # pragma: no cover - depends on the machine
    torch = None
    F = None

try:
    import triton
    import triton.language as tl

    _TRITON_ERR = None
except Exception as _e:  # pragma: no cover - depends on the machine
    triton = None
    tl = None
    _TRITON_ERR = "triton not importable: " + (str(_e).splitlines() or [type(_e).__name__])[0]


OPS = ("matmul", "mm_leaky_relu", "softmax", "layernorm", "dyt", "attention")
SHAPE_RANK = {
    "matmul": 3,  # M, N, K
    "mm_leaky_relu": 3,
    "softmax": 2,  # rows, cols
    "layernorm": 2,
    "dyt": 2,
    "attention": 4,  # batch, heads, seq, head_dim
}
BASELINES = {
    "matmul": ["torch_eager", "torch_compile", "triton"],
    "mm_leaky_relu": ["torch_eager", "torch_compile", "triton", "triton_fused"],
    "softmax": ["torch_eager", "torch_compile", "triton", "liger"],
    "layernorm": ["torch_eager", "torch_compile", "triton", "liger"],
    "dyt": ["torch_eager", "torch_compile", "liger"],
    "attention": ["torch_eager", "torch_compile", "sdpa_flash", "sdpa_cudnn"],
}
# Not a baseline: torch's copy of the input x into a new tensor (the bytes a
# memory-bound op reads and writes), timed as the baselines are. It is the
# bandwidth this process sees, which can differ from what another process sees
# for the same bytes; xtask puts it beside its own copy. Always timed for these ops.
COPY_REFERENCE = "torch_copy"
MEMORY_BOUND = ("softmax", "layernorm", "dyt")
DTYPE_ALIASES = {
    "f16": "f16", "fp16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "f32": "f32", "fp32": "f32", "float32": "f32", "float": "f32",
}
LEAKY_SLOPE = 0.01
LN_EPS = 1e-5
REL_TOL = 2e-2
FLUSH_BYTES = 256 * 1024 * 1024
SOFTMAX_MAX_COLS = 65536  # the one-block Triton softmax keeps a whole row in registers


# --------------------------------------------------------------------------
# Triton kernels (tutorial style)
# --------------------------------------------------------------------------
if triton is not None:

    def _mm_configs():
        cfgs = []
        for bm, bn, bk, stages, warps in (
            (128, 256, 64, 3, 8),
            (128, 128, 64, 4, 4),
            (128, 128, 32, 4, 4),
            (128, 64, 32, 4, 4),
            (64, 128, 32, 4, 4),
        ):
            cfgs.append(
                triton.Config(
                    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                    num_stages=stages,
                    num_warps=warps,
                )
            )
        return cfgs

    @triton.autotune(configs=_mm_configs(), key=["M", "N", "K", "LEAKY", "PRECISION"])
    @triton.jit
    def _matmul_kernel(
        a_ptr, b_ptr, c_ptr,
        M, N, K,
        stride_am, stride_ak,
        stride_bk, stride_bn,
        stride_cm, stride_cn,
        LEAKY: tl.constexpr,
        SLOPE: tl.constexpr,
        PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr,
    ):
        # Grouped ("super-grouping") program ordering for L2 reuse.
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m

        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + (offs_am[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :].to(tl.int64) * stride_bn)

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk

        if LEAKY:
            acc = tl.where(acc >= 0, acc, acc * SLOPE)
        c = acc.to(c_ptr.dtype.element_ty)

        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + offs_cm[:, None].to(tl.int64) * stride_cm + offs_cn[None, :] * stride_cn
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, c, mask=c_mask)

    @triton.jit
    def _softmax_kernel(y_ptr, x_ptr, x_row_stride, y_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
        # One program per row; the whole row lives in one block.
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        den = tl.sum(num, axis=0)
        y = num / den
        tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _layernorm_fwd_kernel(
        x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
        row_stride, N, eps,
        BLOCK_SIZE: tl.constexpr,
    ):
        # One program per row: a pass for the mean, one for the variance,
        # one to normalize and apply the affine transform.
        row = tl.program_id(0).to(tl.int64)
        x_ptr += row * row_stride
        y_ptr += row * row_stride

        acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for off in range(0, N, BLOCK_SIZE):
            cols = off + tl.arange(0, BLOCK_SIZE)
            x = tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            acc += x
        mean = tl.sum(acc, axis=0) / N

        acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for off in range(0, N, BLOCK_SIZE):
            cols = off + tl.arange(0, BLOCK_SIZE)
            x = tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            d = tl.where(cols < N, x - mean, 0.0)
            acc += d * d
        var = tl.sum(acc, axis=0) / N
        rstd = 1.0 / tl.sqrt(var + eps)
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)

        for off in range(0, N, BLOCK_SIZE):
            cols = off + tl.arange(0, BLOCK_SIZE)
            mask = cols < N
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean) * rstd * w + b
            tl.store(y_ptr + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _need_triton():
    if triton is None:
        raise RuntimeError(_TRITON_ERR)


def triton_matmul(a, b, leaky=False):
    _need_triton()
    M, K = a.shape
    K2, N = b.shape
    assert K == K2, "inner dimensions differ"
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    _matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        LEAKY=1 if leaky else 0, SLOPE=LEAKY_SLOPE,
        # f32 products in f32, as DT and cuBLAS (TF32 off) compute them: tl.dot's default rounds
        # f32 inputs to TF32 (10-bit mantissa).
        PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
    )
    return c


def triton_softmax(x):
    _need_triton()
    n_rows, n_cols = x.shape
    if n_cols > SOFTMAX_MAX_COLS:
        raise ValueError(f"cols={n_cols} > {SOFTMAX_MAX_COLS}: row does not fit one block")
    block = triton.next_power_of_2(n_cols)
    num_warps = 4
    if block >= 2048:
        num_warps = 8
    if block >= 4096:
        num_warps = 16
    y = torch.empty_like(x)
    _softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=block, num_warps=num_warps)
    return y


def triton_layernorm(x, w, b, eps=LN_EPS):
    _need_triton()
    n_rows, n_cols = x.shape
    max_block = 65536 // x.element_size()
    block = min(max_block, triton.next_power_of_2(n_cols))
    num_warps = min(max(block // 256, 1), 8)
    y = torch.empty_like(x)
    mean = torch.empty((n_rows,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((n_rows,), dtype=torch.float32, device=x.device)
    _layernorm_fwd_kernel[(n_rows,)](
        x, y, w, b, mean, rstd, x.stride(0), n_cols, eps, BLOCK_SIZE=block, num_warps=num_warps
    )
    return y


# --------------------------------------------------------------------------
# Liger-Kernel (optional)
# --------------------------------------------------------------------------
_LIGER = None


def _liger():
    """Returns (functions dict, error string or None)."""
    global _LIGER
    if _LIGER is not None:
        return _LIGER
    try:
        import liger_kernel  # noqa: F401
    except ImportError:
        _LIGER = ({}, "not installed")
        return _LIGER
    except Exception as e:
        _LIGER = ({}, "not installed (import raised " + _short(e) + ")")
        return _LIGER
    fns = {}
    errs = []
    for key, cls_name, mod_names in (
        ("softmax", "LigerSoftmaxFunction", ("liger_kernel.ops", "liger_kernel.ops.softmax")),
        ("layernorm", "LigerLayerNormFunction", ("liger_kernel.ops", "liger_kernel.ops.layer_norm")),
        ("dyt", "LigerDyTFunction", ("liger_kernel.ops", "liger_kernel.ops.dyt")),
    ):
        for mod_name in mod_names:
            try:
                mod = __import__(mod_name, fromlist=[cls_name])
                fns[key] = getattr(mod, cls_name).apply
                break
            except Exception as e:
                errs.append(f"{mod_name}.{cls_name}: {_short(e)}")
    _LIGER = (fns, None if fns else "; ".join(errs))
    return _LIGER


def liger_fn(op):
    fns, err = _liger()
    if err is not None:
        raise _Reported(err)
    if op not in fns:
        raise _Reported(f"liger has no {op} function in this version")
    return fns[op]


class _Reported(Exception):
    """An error whose message is the whole status reason."""


# --------------------------------------------------------------------------
# Ops: inputs, eager implementations, float32 references
# --------------------------------------------------------------------------
def make_inputs(op, shape, dtype, gen):
    dev = "cuda"

    def rn(*s):
        return torch.randn(*s, generator=gen, device=dev, dtype=torch.float32).to(dtype)

    if op in ("matmul", "mm_leaky_relu"):
        M, N, K = shape
        return {"a": rn(M, K), "b": rn(K, N)}
    if op == "softmax":
        return {"x": rn(*shape)}
    if op == "layernorm":
        _, n = shape
        return {"x": rn(*shape), "w": rn(n), "b": rn(n)}
    if op == "dyt":
        _, n = shape
        alpha = (0.5 + 0.25 * torch.rand(1, generator=gen, device=dev)).to(dtype)
        return {"x": rn(*shape), "alpha": alpha, "w": rn(n), "b": rn(n)}
    if op == "attention":
        return {"q": rn(*shape), "k": rn(*shape), "v": rn(*shape)}
    raise ValueError(op)


def _attention_eager(q, k, v, causal):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        n_q, n_k = s.shape[-2], s.shape[-1]
        mask = torch.ones((n_q, n_k), dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v)


def eager_fn(op, causal):
    """Returns f(**inputs) computing the op with plain PyTorch."""
    if op == "matmul":
        return lambda a, b: torch.matmul(a, b)
    if op == "mm_leaky_relu":
        return lambda a, b: F.leaky_relu(torch.matmul(a, b), LEAKY_SLOPE)
    if op == "softmax":
        return lambda x: torch.softmax(x, dim=-1)
    if op == "layernorm":
        return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS)
    if op == "dyt":
        return lambda x, alpha, w, b: torch.tanh(alpha * x) * w + b
    if op == "attention":
        return lambda q, k, v: _attention_eager(q, k, v, causal)
    raise ValueError(op)


class _HighestPrecision:
    """Disables TF32 while the float32 reference is computed."""

    def __enter__(self):
        self.mm = torch.backends.cuda.matmul.allow_tf32
        self.cudnn = torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return self

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.mm
        torch.backends.cudnn.allow_tf32 = self.cudnn
        return False


def reference(op, causal, inputs):
    """The op computed by PyTorch eager on float32 copies of the inputs."""
    f32 = {k: v.float() for k, v in inputs.items()}
    with _HighestPrecision():
        if op != "attention":
            return eager_fn(op, causal)(**f32)
        q, k, v = f32["q"], f32["k"], f32["v"]
        B, H, S, D = q.shape
        qf, kf, vf = (t.reshape(B * H, S, D) for t in (q, k, v))
        out = torch.empty_like(qf)
        # Bound the score matrix of one chunk to about 512 MiB.
        chunk = max(1, (512 * 1024 * 1024) // max(1, S * S * 4))
        for i in range(0, B * H, chunk):
            out[i:i + chunk] = _attention_eager(qf[i:i + chunk], kf[i:i + chunk], vf[i:i + chunk], causal)
        return out.reshape(B, H, S, D)


def rel_err(out, ref):
    out = out.float()
    num = torch.linalg.vector_norm(out - ref).item()
    den = torch.linalg.vector_norm(ref).item()
    return num / den if den > 0 else num


# --------------------------------------------------------------------------
# Baselines: each builder returns a zero-argument callable
# --------------------------------------------------------------------------
def _sdpa_fn(inputs, causal, backend_name):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def build(op, baseline, causal, inputs):
    if baseline == "torch_eager":
        f = eager_fn(op, causal)
        return lambda: f(**inputs)
    if baseline == "torch_compile":
        torch._dynamo.reset()  # a fresh compile per job: no recompile limit, no dynamic shapes
        f = torch.compile(eager_fn(op, causal), dynamic=False)
        return lambda: f(**inputs)
    if baseline == "triton":
        if op == "matmul":
            return lambda: triton_matmul(inputs["a"], inputs["b"])
        if op == "mm_leaky_relu":
            return lambda: F.leaky_relu(triton_matmul(inputs["a"], inputs["b"]), LEAKY_SLOPE)
        if op == "softmax":
            return lambda: triton_softmax(inputs["x"])
        if op == "layernorm":
            return lambda: triton_layernorm(inputs["x"], inputs["w"], inputs["b"])
    if baseline == "triton_fused" and op == "mm_leaky_relu":
        return lambda: triton_matmul(inputs["a"], inputs["b"], leaky=True)
    if baseline == "liger":
        f = liger_fn(op)
        if op == "softmax":
            return lambda: f(inputs["x"])
        if op == "layernorm":
            return lambda: f(inputs["x"], inputs["w"], inputs["b"], LN_EPS)
        if op == "dyt":
            return lambda: f(inputs["x"], inputs["alpha"], inputs["w"], inputs["b"])
    if baseline == "sdpa_flash" and op == "attention":
        return _sdpa_fn(inputs, causal, "FLASH_ATTENTION")
    if baseline == "sdpa_cudnn" and op == "attention":
        return _sdpa_fn(inputs, causal, "CUDNN_ATTENTION")
    raise _Reported(f"no baseline {baseline} for {op}")


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------
_FLUSH_BUF = None
_RESET_L2 = None
CUDA_ERROR_NOT_SUPPORTED = 801


def _flush_buf():
    global _FLUSH_BUF
    if _FLUSH_BUF is None:
        _FLUSH_BUF = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    return _FLUSH_BUF


def _reset_l2_priorities():
    """The driver's cuCtxResetPersistingL2Cache: returns every L2 line kept at
    evict-last priority to normal, queued in order with the stream's work.

    Kernels that load with evict_last (torch.compile's reductions do) leave
    their input in L2 through a 256 MiB flush of normal writes, so the next
    kernel reading the same tensor (the next baseline, or the same kernel's next
    run) would start warm: on the H100, a 4096x1024 f16 copy took 8.3 us after
    torch.compile's softmax had read its input, against 10.7 us cold. xtask
    resets before its flushes too."""
    global _RESET_L2
    if _RESET_L2 is None:
        lib = ctypes.CDLL("libcuda.so.1")
        _RESET_L2 = lib.cuCtxResetPersistingL2Cache
        _RESET_L2.restype = ctypes.c_int
    rc = _RESET_L2()
    # CUDA_ERROR_NOT_SUPPORTED: a GPU without L2 eviction priorities (before
    # sm_80) has nothing to reset.
    if rc not in (0, CUDA_ERROR_NOT_SUPPORTED):
        raise RuntimeError(f"cuCtxResetPersistingL2Cache failed with CUresult {rc}")


MAX_SPIN_S = 1.0


def time_fn(fn, reps, warmup, flush):
    """Median GPU time (ms) of fn over reps runs, each with its own event pair."""
    fn()
    torch.cuda.synchronize()
    buf = _flush_buf() if flush else None
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]

    def queue(n):
        for i in range(n):
            if buf is not None:
                # Outside the timed region: lines kept at evict-last priority back to
                # normal, then 256 MiB of writes evict the L2.
                _reset_l2_priorities()
                buf.zero_()
            starts[i].record()
            fn()
            ends[i].record()

    # Remaining warm-up runs, queued as the timed runs are, also measuring how
    # long the host takes to queue one.
    t0 = time.perf_counter()
    queue(min(warmup, reps))
    host_s = (time.perf_counter() - t0) / max(1, min(warmup, reps))
    torch.cuda.synchronize()
    # Keep the GPU busy while the host queues all runs, so that host-side
    # launch overhead does not show up as gaps inside the timed regions. That
    # is checked: where the GPU reached the first run before the host had
    # queued the last, the runs are queued again behind a longer spin.
    can_spin = hasattr(torch.cuda, "_sleep")
    spin_s = min(1.5 * reps * host_s + 1e-3, MAX_SPIN_S)
    while True:
        if can_spin:
            torch.cuda._sleep(int(spin_s * 2.0e9))
        queue(reps)
        caught_up = starts[0].query()
        torch.cuda.synchronize()
        if not caught_up or not can_spin:
            break
        if spin_s >= MAX_SPIN_S:
            print(
                "[baselines] the GPU reached the first run before the host had queued the last, "
                "even behind the longest spin: times may hold host gaps",
                file=sys.stderr,
            )
            break
        spin_s = min(4 * spin_s, MAX_SPIN_S)
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------
def _short(e, limit=200):
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = lines[0] if lines else ""
    name = type(e).__name__
    if isinstance(e, _Reported):
        text = msg or name
    else:
        text = f"{name}: {msg}" if msg else name
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _sdpa_reasons(caught):
    """SDPA explains why a backend was refused in warnings only: pick the reasons."""
    out = []
    for w in caught:
        text = re.sub(r"\(Triggered internally at[^)]*\)", "", str(w.message))
        for line in text.splitlines():
            line = line.strip()
            if (
                line
                and not line.endswith("because:")
                and not line.endswith("runtime disabled.")
                and line not in out
            ):
                out.append(line)
    for line in out:
        print("[baselines] sdpa: " + line, file=sys.stderr)
    return out


def run_baseline(op, baseline, causal, inputs, ref, reps, warmup, flush):
    """Returns (ms or None, status)."""
    try:
        if baseline == COPY_REFERENCE:
            x = inputs["x"]
            y = torch.empty_like(x)
            return time_fn(lambda: y.copy_(x), reps, warmup, flush), "ok (bandwidth reference)"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                fn = build(op, baseline, causal, inputs)
                out = fn()
                torch.cuda.synchronize()
            except Exception as e:
                reason = _short(e)
                if baseline.startswith("sdpa_"):
                    hints = _sdpa_reasons(caught)
                    if hints:
                        reason = (reason + " (" + "; ".join(hints[:2]) + ")")[:300]
                return None, "failed: " + reason
        if tuple(out.shape) != tuple(ref.shape):
            return None, f"failed: wrong shape {list(out.shape)} != {list(ref.shape)}"
        err = rel_err(out, ref)
        del out
        if not (err <= REL_TOL):
            return None, f"failed: wrong result (relerr={err:.3g})"
        ms = time_fn(fn, reps, warmup, flush)
        return ms, "ok"
    except Exception as e:
        return None, "failed: " + _short(e)
    finally:
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        torch.cuda.empty_cache()


def normalize_job(raw, defaults):
    """Returns (job dict, error string or None). The job dict is what gets echoed."""
    op = raw.get("op")
    dtype = raw.get("dtype")
    shape = raw.get("shape")
    causal = bool(raw.get("causal", False))
    if isinstance(shape, str):
        try:
            shape = [int(s) for s in shape.lower().replace(",", "x").split("x") if s.strip()]
        except ValueError:
            pass
    job = {"op": op, "dtype": dtype, "shape": shape, "causal": causal}
    if op not in OPS:
        return job, f"unknown op {op!r}"
    if dtype not in DTYPE_ALIASES:
        return job, f"unknown dtype {dtype!r}"
    job["dtype"] = DTYPE_ALIASES[dtype]
    if (
        not isinstance(shape, list)
        or len(shape) != SHAPE_RANK[op]
        or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)
    ):
        return job, f"shape for {op} must be {SHAPE_RANK[op]} positive ints, got {shape!r}"
    job["_reps"] = int(raw.get("reps", defaults["reps"]))
    job["_flush"] = bool(raw.get("flush_l2", defaults["flush"]))
    wanted = raw.get("baselines", defaults["baselines"])
    if isinstance(wanted, str):
        wanted = [w for w in wanted.split(",") if w]
    job["_baselines"] = [b for b in BASELINES[op] if not wanted or b in wanted]
    if op in MEMORY_BOUND:
        job["_baselines"].append(COPY_REFERENCE)
    return job, None


def _public(job):
    return {k: job[k] for k in ("op", "dtype", "shape", "causal")}


def run_job(job, index, emit, warmup):
    op, causal = job["op"], job["causal"]
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[job["dtype"]]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0x5EED + index)
    try:
        inputs = make_inputs(op, job["shape"], dtype, gen)
        ref = reference(op, causal, inputs)
    except Exception as e:
        status = "failed: inputs/reference: " + _short(e)
        for b in job["_baselines"]:
            emit(dict(_public(job), baseline=b, ms=None, status=status))
        torch.cuda.empty_cache()
        return
    for b in job["_baselines"]:
        ms, status = run_baseline(op, b, causal, inputs, ref, job["_reps"], warmup, job["_flush"])
        emit(dict(_public(job), baseline=b, ms=None if ms is None else round(ms, 6), status=status))
    del inputs, ref
    torch.cuda.empty_cache()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", help="JSON file: list of {op, dtype, shape, causal} (optional per job: reps, flush_l2, baselines)")
    p.add_argument("--op", choices=OPS)
    p.add_argument("--dtype", default="f16")
    p.add_argument("--shape", help="e.g. 4096x4096 (softmax/layernorm/dyt), MxNxK (matmul), BxHxSxD (attention)")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--flush-l2", action="store_true", help="write a 256 MiB buffer between timed runs")
    p.add_argument("--baselines", default="", help="comma-separated subset of baseline names (default: all)")
    p.add_argument("--tf32", action="store_true", help="let PyTorch use TF32 for float32 matmul/conv")
    args = p.parse_args(argv)

    # Only JSON lines go to the real stdout; anything printed by libraries
    # (Python or native) is sent to stderr.
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    out = os.fdopen(out_fd, "w", buffering=1)

    def emit(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    if args.jobs:
        with open(args.jobs) as fh:
            raw_jobs = json.load(fh)
        if isinstance(raw_jobs, dict):
            raw_jobs = raw_jobs.get("jobs", [raw_jobs])
    elif args.op:
        if not args.shape:
            p.error("--shape is required with --op")
        raw_jobs = [{"op": args.op, "dtype": args.dtype, "shape": args.shape, "causal": args.causal}]
    else:
        p.error("give --jobs FILE or --op/--dtype/--shape")

    defaults = {
        "reps": max(1, args.reps),
        "flush": args.flush_l2,
        "baselines": [b for b in args.baselines.split(",") if b],
    }
    jobs = [normalize_job(r if isinstance(r, dict) else {}, defaults) for r in raw_jobs]

    have_cuda = False
    if torch is not None:
        try:
            have_cuda = torch.cuda.is_available()
        except Exception:
            have_cuda = False
    if not have_cuda:
        for job, _ in jobs:
            emit(dict(_public(job), baseline=None, ms=None, status="failed: no CUDA"))
        return 0

    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    with torch.no_grad():
        for i, (job, err) in enumerate(jobs):
            if err is not None:
                emit(dict(_public(job), baseline=None, ms=None, status="failed: bad job: " + err))
                continue
            print(f"[baselines] job {i + 1}/{len(jobs)}: {_public(job)}", file=sys.stderr, flush=True)
            run_job(job, i, emit, max(1, args.warmup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
