// Toolchain smoke test for nvcc: fp16/bf16 types, cp.async and mma.sync inline PTX.
// Compiled (never run) by .ci/toolchain-smoke.sh for sm_80 and sm_90a.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Each warp: cp.async a 16x16 f16 A tile and a 16x8 B tile into shared memory,
// then one m16n8k16 f16*f16+f32 mma.sync; also exercises bf16 conversion.
extern "C" __global__ void smoke_mma(const __half* __restrict__ a,
                                     const __half* __restrict__ b,
                                     float* __restrict__ c,
                                     __nv_bfloat16* __restrict__ cb) {
    __shared__ __align__(16) __half sa[16 * 16];
    __shared__ __align__(16) __half sb[16 * 8];
    const int lane = threadIdx.x & 31;

    // 16*16 halves = 512 bytes = 32 x 16-byte chunks: one per lane.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                 :: "r"(smem_addr(sa + lane * 8)), "l"(a + lane * 8));
    if (lane < 16) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n"
                     :: "r"(smem_addr(sb + lane * 8)), "l"(b + lane * 8));
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();

    const int g = lane >> 2, t = lane & 3;
    uint32_t ra[4], rb[2];
    ra[0] = *reinterpret_cast<const uint32_t*>(sa + (g)     * 16 + t * 2);
    ra[1] = *reinterpret_cast<const uint32_t*>(sa + (g + 8) * 16 + t * 2);
    ra[2] = *reinterpret_cast<const uint32_t*>(sa + (g)     * 16 + t * 2 + 8);
    ra[3] = *reinterpret_cast<const uint32_t*>(sa + (g + 8) * 16 + t * 2 + 8);
    rb[0] = *reinterpret_cast<const uint32_t*>(sb + g * 16 + t * 2);
    rb[1] = *reinterpret_cast<const uint32_t*>(sb + g * 16 + t * 2 + 8);

    float d[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));

    __half h = __hadd(__float2half(d[0]), sa[lane]);
    __nv_bfloat16 bf = __float2bfloat16(d[1]);
    bf = __hmul(bf, __float2bfloat16(2.0f));
    for (int i = 0; i < 4; ++i) c[lane * 4 + i] = d[i] + __half2float(h);
    cb[lane] = bf;
}
