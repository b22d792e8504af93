// Toolchain smoke test for hipcc: __half arithmetic and a __shfl_xor warp reduction.
// Compiled (never run) by .ci/toolchain-smoke.sh for gfx90a.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

extern "C" __global__ void smoke_reduce(const __half* __restrict__ x,
                                        __half* __restrict__ y,
                                        float* __restrict__ sum,
                                        int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    __half v = i < n ? x[i] : __float2half(0.0f);
    v = __hmul(v, __float2half(2.0f));
    if (i < n) y[i] = __hadd(v, __float2half(1.0f));

    float acc = __half2float(v);
    for (int off = warpSize / 2; off > 0; off >>= 1) {
        acc += __shfl_xor(acc, off);
    }
    if ((threadIdx.x % warpSize) == 0) atomicAdd(sum, acc);
}
