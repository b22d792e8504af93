"""Runs torch's matmul (cuBLAS) at one shape, for a profiler to read its kernels.

Usage: python3 scripts/device/torch_matmul.py MxNxK [f16|bf16|f32] [REPEATS]
(M x K times K x N, the order of the bench's matmul shapes; TF32 off for f32, as in the bench.)
"""
import sys

import torch

m, n, k = (int(s) for s in sys.argv[1].split("x"))
dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[
    sys.argv[2] if len(sys.argv) > 2 else "f16"
]
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(m, k, device="cuda", dtype=dtype)
b = torch.randn(k, n, device="cuda", dtype=dtype)
for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 10):
    c = a @ b
torch.cuda.synchronize()
print(f"{m}x{n}x{k} {sys.argv[2] if len(sys.argv) > 2 else 'f16'}: {c.shape[0]}x{c.shape[1]}")
