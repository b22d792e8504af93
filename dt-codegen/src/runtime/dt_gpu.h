/* Device runtime of the CUDA and HIP C that dtc generates. One header for both; the few
 * differences sit in the #if sections below. Needs no other header on CUDA, so the same source
 * compiles with nvcc and with NVRTC. */
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define DT_WARP 64
#else
#define DT_WARP 32
#endif

#define DT_FN __device__ __forceinline__

/* A kernel's argument block (dt_args_t) is a __grid_constant__ parameter on CUDA: nvcc then reads
 * each field from the constant bank where the kernel uses it. Without it, nvcc loads every field
 * of a block this small into registers at the kernel's start and keeps them live, and the kernels
 * for any layout spilled 364 to 484 bytes. */
#if defined(__HIPCC__)
#define DT_GRID_CONSTANT
#else
#define DT_GRID_CONSTANT __grid_constant__
#endif

typedef unsigned short dt_f16;
typedef unsigned short dt_bf16;

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

#if defined(__HIPCC__)
DT_FN float dt_f16_to_f32(dt_f16 h) {
    _Float16 x;
    __builtin_memcpy(&x, &h, 2);
    return (float)x;
}
DT_FN dt_f16 dt_f32_to_f16(float f) {
    _Float16 x = (_Float16)f; /* round to nearest even */
    dt_f16 h;
    __builtin_memcpy(&h, &x, 2);
    return h;
}
#else
DT_FN float dt_f16_to_f32(dt_f16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
DT_FN dt_f16 dt_f32_to_f16(float f) {
    dt_f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif

DT_FN float dt_bf16_to_f32(dt_bf16 h) { return __int_as_float((int)((unsigned)h << 16)); }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* One instruction from sm_80 on (a NaN becomes the canonical NaN). */
DT_FN dt_bf16 dt_f32_to_bf16(float f) {
    dt_bf16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
/* Two values rounded and packed by one instruction, `lo` in the low half (the first in memory). */
DT_FN unsigned dt_pack2_f16(float lo, float hi) {
    unsigned d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
DT_FN unsigned dt_pack2_bf16(float lo, float hi) {
    unsigned d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
#else
DT_FN dt_bf16 dt_f32_to_bf16(float f) {
    unsigned x = (unsigned)__float_as_int(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (dt_bf16)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);                                          /* ties to even */
    return (dt_bf16)(x >> 16);
}
DT_FN unsigned dt_pack2_f16(float lo, float hi) { return (unsigned)dt_f32_to_f16(lo) | ((unsigned)dt_f32_to_f16(hi) << 16); }
DT_FN unsigned dt_pack2_bf16(float lo, float hi) { return (unsigned)dt_f32_to_bf16(lo) | ((unsigned)dt_f32_to_bf16(hi) << 16); }
#endif

/* A thread's elements of a 16-bit tile kept as loaded, 8 to a 16-byte word in memory order
 * (element r in half r % 8 of w[r / 8]); reading one widens it to f32. Indices are constants
 * once the element loops are unrolled, so this stays in registers. */
DT_FN unsigned short dt_half_at(const uint4& q, int j) {
    const unsigned x = (j >> 1) == 0 ? q.x : (j >> 1) == 1 ? q.y : (j >> 1) == 2 ? q.z : q.w;
    return (unsigned short)((j & 1) ? x >> 16 : x & 0xffffu);
}
/* Shifts 16-bit element h into the top of the 8 in q, the others moving down one: after 8 calls
 * q holds them in memory order (a 16-byte run read element by element, in an unrolled loop). */
DT_FN void dt_shift_in8(uint4& q, unsigned h) {
    q.x = (q.x >> 16) | (q.y << 16);
    q.y = (q.y >> 16) | (q.z << 16);
    q.z = (q.z >> 16) | (q.w << 16);
    q.w = (q.w >> 16) | (h << 16);
}
template <int R>
struct dt_f16s {
    uint4 w[R / 8];
    DT_FN float operator[](int r) const { return dt_f16_to_f32(dt_half_at(w[r >> 3], r & 7)); }
};
template <int R>
struct dt_bf16s {
    uint4 w[R / 8];
    DT_FN float operator[](int r) const { return dt_bf16_to_f32(dt_half_at(w[r >> 3], r & 7)); }
};

DT_FN float dt_load_f32(float v) { return v; }
DT_FN float dt_load_f16(dt_f16 v) { return dt_f16_to_f32(v); }
DT_FN float dt_load_bf16(dt_bf16 v) { return dt_bf16_to_f32(v); }
DT_FN float dt_store_f32(float v) { return v; }
DT_FN dt_f16 dt_store_f16(float v) { return dt_f32_to_f16(v); }
DT_FN dt_bf16 dt_store_bf16(float v) { return dt_f32_to_bf16(v); }

/* 16-byte accesses to lines this kernel does not touch again (a looped row's second read, and
 * the output written with it): marked evict-first (.cs), so that they do not push out of the L2
 * cache the lines still to be read again. */
#if defined(__HIPCC__)
DT_FN uint4 dt_load_once(const uint4* p) { return *p; }
DT_FN void dt_store_once(uint4* p, uint4 v) { *p = v; }
#else
DT_FN uint4 dt_load_once(const uint4* p) {
    uint4 v;
    asm("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
DT_FN void dt_store_once(uint4* p, uint4 v) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
#endif

/* Exchange within groups of `width` lanes (a power of two up to 32). */
#if defined(__HIPCC__)
DT_FN float dt_shfl_xor(float v, int mask, int width) { return __shfl_xor(v, mask, width); }
#else
DT_FN float dt_shfl_xor(float v, int mask, int width) { return __shfl_xor_sync(0xffffffffu, v, mask, width); }
#endif

#if !defined(__HIPCC__)
/* Tensor cores, for dots of f16 and bf16 tiles staged in shared memory (sm_80 and newer; on an
 * older GPU, and in nvcc's host pass, the bodies trap instead: dtc uses them only in kernels it
 * means for sm_80 and newer).
 * dt_smem_u32: the shared-state-space address of a pointer into shared memory.
 * dt_ldmatrix_x4 / _x2: four / two 8x8 matrices of 16-bit values; lanes 8i..8i+7 each give the
 * 16-byte-aligned address of one row of matrix i, and every lane l receives, in register i, the
 * elements (l / 4, 2 * (l % 4)) and (l / 4, 2 * (l % 4) + 1) of matrix i; the _trans forms give
 * (2 * (l % 4), l / 4) and (2 * (l % 4) + 1, l / 4), that is, columns instead of rows.
 * dt_mma_m16n8k16_T: d += a * b for a 16x16 A fragment (row-major), a 16x8 B fragment
 * (column-major) of element type T and a 16x8 f32 accumulator, m16n8k16 fragment layouts. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DT_SM80 1
#else
#define DT_SM80 0
#endif
DT_FN unsigned dt_smem_u32(const void* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
/* dt_copy16_to_shared: 16 bytes from global memory (16-byte aligned, read-only while the kernel
 * runs) to shared memory (16-byte aligned). */
DT_FN void dt_copy16_to_shared(void* smem, const void* gmem) {
    unsigned a, b, c, d;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(gmem));
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dt_smem_u32(smem)), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
/* The same copy without the trip through registers: cp.async starts it and returns; the copies a
 * thread issued since its last dt_cp_async_commit form one group, and dt_cp_async_wait<N> waits
 * until at most N of the thread's groups are still in flight. The data is visible to the other
 * threads of the block after the wait and a __syncthreads. */
DT_FN void dt_cp_async16(void* smem, const void* gmem) {
#if DT_SM80
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dt_smem_u32(smem)), "l"(gmem) : "memory");
#else
    dt_copy16_to_shared(smem, gmem);
#endif
}
/* One 4-byte element (4-byte aligned) the same way: an f32 operand whose 16-byte runs are not
 * aligned in global memory is still copied without a wait for each load. */
DT_FN void dt_cp_async4(void* smem, const void* gmem) {
#if DT_SM80
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dt_smem_u32(smem)), "l"(gmem) : "memory");
#else
    *(float*)smem = *(const float*)gmem;
#endif
}
DT_FN void dt_cp_async_commit() {
#if DT_SM80
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
DT_FN void dt_cp_async_wait() {
#if DT_SM80
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
DT_FN void dt_ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
#if DT_SM80
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
#else
    r0 = r1 = r2 = r3 = addr;
    asm volatile("trap;");
#endif
}
DT_FN void dt_ldmatrix_x2(unsigned& r0, unsigned& r1, unsigned addr) {
#if DT_SM80
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
#else
    r0 = r1 = addr;
    asm volatile("trap;");
#endif
}
DT_FN void dt_ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
#if DT_SM80
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
#else
    r0 = r1 = r2 = r3 = addr;
    asm volatile("trap;");
#endif
}
DT_FN void dt_ldmatrix_x2_trans(unsigned& r0, unsigned& r1, unsigned addr) {
#if DT_SM80
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
#else
    r0 = r1 = addr;
    asm volatile("trap;");
#endif
}
DT_FN void dt_mma_m16n8k16_f16(float* d, const unsigned* a, const unsigned* b) {
#if DT_SM80
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    asm volatile("trap;");
#endif
}
DT_FN void dt_mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b) {
#if DT_SM80
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    asm volatile("trap;");
#endif
}
#endif

#if defined(__HIPCC__)
/* Matrix cores, for dots of f16 and bf16 tiles staged in shared memory.
 * dt_copy16_to_shared: 16 bytes from global memory to shared memory, both 16-byte aligned.
 * dt_mfma_16x16x16_T: d += a * b for one 16x16x16 step of a wavefront (all 64 lanes call it):
 * lane l gives A[l % 16][(l / 16) * 4 + q] and B[(l / 16) * 4 + q][l % 16] for q = 0..3, in
 * pairs (q = 0, 1 in a[0], the first in the low half; q = 2, 3 in a[1]), and holds
 * d[q] = D[(l / 16) * 4 + q][l % 16]. One v_mfma_f32_16x16x16 instruction where the GPU has it
 * (f16 from gfx908 on, bf16 from gfx90a on); elsewhere each lane gathers the operands it needs
 * with shuffles and computes its four results itself (the same sums, in another order). */
DT_FN void dt_copy16_to_shared(void* smem, const void* gmem) { *(uint4*)smem = *(const uint4*)gmem; }
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)
#define DT_MFMA_F16 1
#define DT_MFMA_BF16 1
#elif defined(__gfx908__)
#define DT_MFMA_F16 1
#define DT_MFMA_BF16 0
#else
#define DT_MFMA_F16 0
#define DT_MFMA_BF16 0
#endif
typedef float dt_float4 __attribute__((ext_vector_type(4)));
typedef _Float16 dt_half4 __attribute__((ext_vector_type(4)));
typedef short dt_short4 __attribute__((ext_vector_type(4)));
/* Element q (0..3) of a lane's packed operand words, as f32. */
DT_FN float dt_mfma_operand(const unsigned* w, int q, int bf16) {
    const dt_f16 h = (dt_f16)((q & 1) ? w[q >> 1] >> 16 : w[q >> 1] & 0xffffu);
    return bf16 ? dt_bf16_to_f32(h) : dt_f16_to_f32(h);
}
DT_FN void dt_mfma_by_shuffles(float* d, const unsigned* a, const unsigned* b, int bf16) {
    const int lane = (int)(threadIdx.x & 63u);
    const int col = lane & 15, row = (lane >> 4) * 4;
#pragma unroll
    for (int g = 0; g < 4; g++) { /* k = 4g .. 4g + 3 sit in lanes 16g .. 16g + 15 */
        unsigned bw[2], aw[4][2];
#pragma unroll
        for (int w = 0; w < 2; w++) {
            bw[w] = __shfl(b[w], 16 * g + col, 64);
#pragma unroll
            for (int q = 0; q < 4; q++) aw[q][w] = __shfl(a[w], 16 * g + row + q, 64);
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
#pragma unroll
            for (int kq = 0; kq < 4; kq++) d[q] += dt_mfma_operand(aw[q], kq, bf16) * dt_mfma_operand(bw, kq, bf16);
        }
    }
}
DT_FN void dt_mfma_16x16x16_f16(float* d, const unsigned* a, const unsigned* b) {
#if DT_MFMA_F16
    dt_half4 va, vb;
    __builtin_memcpy(&va, a, 8);
    __builtin_memcpy(&vb, b, 8);
    dt_float4 c = {d[0], d[1], d[2], d[3]};
    c = __builtin_amdgcn_mfma_f32_16x16x16f16(va, vb, c, 0, 0, 0);
    d[0] = c[0], d[1] = c[1], d[2] = c[2], d[3] = c[3];
#else
    dt_mfma_by_shuffles(d, a, b, 0);
#endif
}
DT_FN void dt_mfma_16x16x16_bf16(float* d, const unsigned* a, const unsigned* b) {
#if DT_MFMA_BF16
    dt_short4 va, vb;
    __builtin_memcpy(&va, a, 8);
    __builtin_memcpy(&vb, b, 8);
    dt_float4 c = {d[0], d[1], d[2], d[3]};
    c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(va, vb, c, 0, 0, 0);
    d[0] = c[0], d[1] = c[1], d[2] = c[2], d[3] = c[3];
#else
    dt_mfma_by_shuffles(d, a, b, 1);
#endif
}
#endif

DT_FN float dt_rsqrt(float a) { return 1.0f / sqrtf(a); }
DT_FN float dt_sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

/* Approximations for kernels that store 16-bit results (emit/expr.rs, Math::Fast): errors of a
 * few units of f32 (2 + 1.2 |x| for exp(x); division needs |b| below 2^126; 2 for rsqrt) and
 * 2^-10.9 relative (tanh), under the rounding of an f16 or bf16 result. */
DT_FN float dt_fast_log(float a) { return __logf(a); }
/* One instruction, where 1/sqrtf takes a correctly rounded square root and division, each with
 * a slow path that ptxas calls: under 40 registers the held layernorm spilled 80 bytes with the
 * calls, 28 without (ptxas -v). */
DT_FN float dt_fast_rsqrt(float a) { return rsqrtf(a); }
#if defined(__HIPCC__)
DT_FN float dt_fast_exp(float a) { return __expf(a); }
DT_FN float dt_fast_exp2(float a) { return exp2f(a); }
DT_FN float dt_fast_rcp(float b) { return __fdividef(1.0f, b); }
#else
/* exp(a) as 2^(a log2 e), and 1/b, with results below 2^-126 flushed to zero (`.ftz`): without
 * it the hardware approximations take a range check and two rescalings each, half of the
 * instructions of a 16-bit softmax step. Such a value rounds to zero in f16, and in bf16 is
 * below 2^-126 of the row's largest term. */
DT_FN float dt_fast_exp2(float a) {
    float t;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(a));
    return t;
}
DT_FN float dt_fast_exp(float a) { return dt_fast_exp2(a * 1.4426950408889634f); }
DT_FN float dt_fast_rcp(float b) {
    float t;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(b));
    return t;
}
#endif
/* 2^a on the FMA units (`fma_exp(n)`), beside the special-function unit's `ex2`: 2^j, j = a
 * rounded to an integer and added to the exponent bits, times a cubic in a - j (in [-0.5, 0.5]).
 * Relative error below 7.8e-5 (2^-13.6), under the rounding of an f16 or bf16 result; a is
 * clamped to [-125, 127], so that 2^-inf gives 2^-125 (a term that a bf16 sum of terms up to 1
 * loses) and results stay finite up to 2^127. */
DT_FN float dt_fma_exp2(float a) {
    a = fminf(fmaxf(a, -125.0f), 127.0f);
    const float shift = 12582912.0f; /* 1.5 * 2^23: the sum holds a rounded in its low bits */
    const float t = a + shift;
    const float f = a - (t - shift);
    const float p = fmaf(fmaf(fmaf(0.0550886838f, f, 0.242604051f), f, 0.693276242f), f, 0.99992894f);
    return __int_as_float((int)((unsigned)__float_as_int(p) + ((unsigned)__float_as_int(t) << 23)));
}
/* a * (1/b), as the approximate division computes it anyway: the reciprocal of a value every
 * element divides by (a row's sum) is then computed once, not per element. */
DT_FN float dt_fast_div(float a, float b) { return a * dt_fast_rcp(b); }
DT_FN float dt_fast_sigmoid(float a) { return dt_fast_rcp(1.0f + dt_fast_exp(-a)); }
#if defined(__HIPCC__)
DT_FN float dt_fast_tanh(float a) { return tanhf(a); }
#else
DT_FN float dt_fast_tanh(float a) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(a));
    return t;
}
#endif
DT_FN long long dt_min_ll(long long a, long long b) { return a < b ? a : b; }
DT_FN long long dt_max_ll(long long a, long long b) { return a > b ? a : b; }
DT_FN long long dt_cdiv(long long a, long long b) { return (a + b - 1) / b; }

#if !defined(__HIPCC__)
/* Thread-block clusters (sm_90 and newer; dtc emits them for CUDA only, and on an older GPU,
 * and in nvcc's host pass, the bodies trap instead: the library runs clustered kernels on sm_90
 * and newer only).
 * DT_CLUSTER(n): the attribute grouping runs of n consecutive programs into one cluster.
 * dt_cluster_sync: a barrier of every thread of the cluster, which also makes the shared-memory
 * writes before it visible to the cluster's reads after it.
 * dt_cluster_arrive / dt_cluster_wait: the same barrier in two halves, for a program to say it
 * is done reading the others' shared memory (arrive) and to wait, later, until all are (wait).
 * The arrive is a release: the reads before it are done when another program's wait returns,
 * so a program may exit then (a relaxed arrive let a program leave while a read of its shared
 * memory was still in flight, and the GPU failed the launch).
 * dt_cluster_arrive_relaxed: an arrival that releases nothing, where a fence before it already
 * released what the others need (fence.mbarrier_init for barriers initialized at the start).
 * dt_cluster_load: the float at `p` (in this program's shared memory) in program `rank` of the
 * cluster's shared memory; dt_cluster_load2: the 2 floats from `p` (8-byte aligned), in one
 * access. */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define DT_CLUSTER(n) __cluster_dims__(n, 1, 1)
#else
#define DT_CLUSTER(n)
#endif
DT_FN void dt_cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __trap();
#endif
}
DT_FN void dt_cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#else
    __trap();
#endif
}
DT_FN void dt_cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#else
    __trap();
#endif
}
DT_FN void dt_cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#else
    __trap();
#endif
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* The address in the cluster's shared memory of `p` (in this program's) in program `rank`. */
DT_FN unsigned dt_cluster_addr(const float* p, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(dt_smem_u32(p)), "r"(rank));
    return remote;
}
#endif
DT_FN float dt_cluster_load(const float* p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(dt_cluster_addr(p, rank)) : "memory");
    return v;
#else
    (void)p;
    (void)rank;
    __trap();
    return 0.0f;
#endif
}
DT_FN float2 dt_cluster_load2(const float* p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(dt_cluster_addr(p, rank)) : "memory");
    return v;
#else
    (void)p;
    (void)rank;
    __trap();
    return make_float2(0.0f, 0.0f);
#endif
}
#endif

#if !defined(__HIPCC__)
/* Hopper (sm_90a), for warp-specialized kernels (dtc's plan, `gpu_hopper.rs`): bulk tensor copies
 * (TMA) into shared memory that complete on mbarriers, the warpgroup matrix product wgmma, and
 * setmaxnreg. Elsewhere (sm_80, a PTX build for another architecture, nvcc's host pass) the
 * bodies trap: the library runs such kernels on sm_90 only.
 * dt_tensor_map: a CUtensorMap the host encoded; dt_tma_args_t: a kernel's M maps ahead of its
 * argument block A and the bits of the maps encoded, passed as one __grid_constant__ parameter,
 * so a map's address is that of the parameter, as the copies need.
 * Barriers are 8-byte words of shared memory, named by their shared-state-space address:
 * dt_mbar_init sets the arrivals a phase needs; dt_mbar_expect_tx arrives and announces bytes
 * that copies will complete; dt_mbar_wait(bar, parity) returns once the phase of that parity
 * has completed (the phase before the first counts as completed for parity 1). A wait that
 * lasts 10 seconds traps, so a barrier mistake fails its launch instead of hanging it.
 * dt_tma_load_Nd: the box at coordinates (innermost first) of map `map` into shared memory at
 * `dst`, completing on barrier `bar`; what lies outside the tensor is read as zeros.
 * dt_wgmma_desc: a wgmma shared-memory matrix descriptor of 128-byte swizzled rows at `addr`.
 * dt_wgmma_m64nNk16_T (printed by dtc for the N a kernel uses): d += A B for a warpgroup, A and
 * B from descriptors, d in the mma.sync fragment layout of a warp per 16 rows; ..._T_rs: A from
 * four registers per thread, in the mma.sync A fragment layout of a warp per 16 rows. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DT_SM90A 1
#else
#define DT_SM90A 0
#endif
struct alignas(64) dt_tensor_map {
    unsigned long long words[16];
};
template <int M, typename A>
struct dt_tma_args_t {
    dt_tensor_map maps[M];
    A args;
    unsigned long long mapped; /* bit i: map i was encoded (else the kernel copies that input by threads) */
};
DT_FN void dt_mbar_init(unsigned bar, unsigned arrivals) {
#if DT_SM90A
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
#else
    (void)bar, (void)arrivals;
    __trap();
#endif
}
/* Makes initialized barriers visible to the copy engine (and the cluster) before their use. */
DT_FN void dt_mbar_fence_init() {
#if DT_SM90A
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
    __trap();
#endif
}
DT_FN void dt_mbar_expect_tx(unsigned bar, unsigned bytes) {
#if DT_SM90A
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#else
    (void)bar, (void)bytes;
    __trap();
#endif
}
/* Announces bytes that copies will complete on barrier `bar`, without arriving: the thread
 * arrives later (dt_mbar_arrive), once its other writes to the stage are done. */
DT_FN void dt_mbar_expect_tx_only(unsigned bar, unsigned bytes) {
#if DT_SM90A
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#else
    (void)bar, (void)bytes;
    __trap();
#endif
}
DT_FN void dt_mbar_arrive(unsigned bar) {
#if DT_SM90A
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#else
    (void)bar;
    __trap();
#endif
}
DT_FN bool dt_mbar_try_wait(unsigned bar, unsigned parity) {
#if DT_SM90A
    unsigned done;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return done != 0;
#else
    (void)bar, (void)parity;
    __trap();
    return true;
#endif
}
DT_FN unsigned long long dt_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
DT_FN void dt_mbar_wait(unsigned bar, unsigned parity) {
    if (dt_mbar_try_wait(bar, parity)) return;
    const unsigned long long start = dt_globaltimer();
    while (!dt_mbar_try_wait(bar, parity)) {
        if (dt_globaltimer() - start > 10000000000ull) __trap();
    }
}
DT_FN void dt_tma_load_2d(unsigned dst, const dt_tensor_map* map, unsigned bar, int c0, int c1) {
#if DT_SM90A
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
                 "l"(map), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)c0, (void)c1;
    __trap();
#endif
}
DT_FN void dt_tma_load_3d(unsigned dst, const dt_tensor_map* map, unsigned bar, int c0, int c1, int c2) {
#if DT_SM90A
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
                 "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)c0, (void)c1, (void)c2;
    __trap();
#endif
}
DT_FN void dt_tma_load_4d(unsigned dst, const dt_tensor_map* map, unsigned bar, int c0, int c1, int c2, int c3) {
#if DT_SM90A
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
                 "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)c0, (void)c1, (void)c2, (void)c3;
    __trap();
#endif
}
DT_FN void dt_tma_load_5d(unsigned dst, const dt_tensor_map* map, unsigned bar, int c0, int c1, int c2, int c3, int c4) {
#if DT_SM90A
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)c0, (void)c1, (void)c2, (void)c3, (void)c4;
    __trap();
#endif
}
/* Multicast bulk tensor copies (multicast(d:N)): the box lands at `dst` in each program of the
 * cluster whose bit is set in `mask`, completing its bytes on the barrier at `bar` there (the
 * same offsets in every program's shared memory). */
DT_FN void dt_tma_load_2d_multicast(unsigned dst, const dt_tensor_map* map, unsigned bar, unsigned short mask, int c0, int c1) {
#if DT_SM90A
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%4, %5}], [%2], %3;" ::"r"(dst),
        "l"(map), "r"(bar), "h"(mask), "r"(c0), "r"(c1)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)mask, (void)c0, (void)c1;
    __trap();
#endif
}
DT_FN void dt_tma_load_3d_multicast(unsigned dst, const dt_tensor_map* map, unsigned bar, unsigned short mask, int c0, int c1, int c2) {
#if DT_SM90A
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%4, %5, %6}], [%2], %3;" ::"r"(dst),
        "l"(map), "r"(bar), "h"(mask), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)mask, (void)c0, (void)c1, (void)c2;
    __trap();
#endif
}
DT_FN void dt_tma_load_4d_multicast(unsigned dst, const dt_tensor_map* map, unsigned bar, unsigned short mask, int c0, int c1, int c2, int c3) {
#if DT_SM90A
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%4, %5, %6, %7}], [%2], %3;" ::"r"(dst),
        "l"(map), "r"(bar), "h"(mask), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)mask, (void)c0, (void)c1, (void)c2, (void)c3;
    __trap();
#endif
}
DT_FN void dt_tma_load_5d_multicast(unsigned dst, const dt_tensor_map* map, unsigned bar, unsigned short mask, int c0, int c1, int c2, int c3, int c4) {
#if DT_SM90A
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%4, %5, %6, %7, %8}], [%2], %3;" ::"r"(dst),
        "l"(map), "r"(bar), "h"(mask), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
        : "memory");
#else
    (void)dst, (void)map, (void)bar, (void)mask, (void)c0, (void)c1, (void)c2, (void)c3, (void)c4;
    __trap();
#endif
}
/* This program's rank in its cluster. */
DT_FN unsigned dt_cluster_rank() {
#if DT_SM90A
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
#else
    __trap();
    return 0;
#endif
}
/* Arrives on the barrier at `bar` (an offset in shared memory) in each of the first `programs`
 * programs of the cluster: a multicast's consumers free a stage in every program whose producer
 * copies into theirs, once their wgmma reads of it are done (waited for). A release at cluster
 * scope would put a fence of the whole GPU (MEMBAR.ALL.GPU) before each arrival and made the
 * multicast matmuls 2-3x slower; the stage's reads need no such fence. */
DT_FN void dt_mbar_arrive_cluster(unsigned bar, unsigned programs) {
#if DT_SM90A
    for (unsigned r = 0; r < programs; r++) {
        unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(r));
        asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
    }
#else
    (void)bar, (void)programs;
    __trap();
#endif
}
/* A bulk tensor store (TMA): the box at `src` in shared memory (laid out as the map's swizzle
 * says) to the tensor of `map` at coordinates (c0 innermost, c1), leaving out what lies outside
 * the tensor. It joins this thread's open bulk group, which dt_bulk_commit closes;
 * dt_bulk_wait_read<N> waits until at most N of the thread's groups still read shared memory,
 * dt_bulk_wait<N> until at most N are not yet complete. */
DT_FN void dt_tma_store_2d(const dt_tensor_map* map, unsigned src, int c0, int c1) {
#if DT_SM90A
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map), "r"(src), "r"(c0), "r"(c1)
                 : "memory");
#else
    (void)map, (void)src, (void)c0, (void)c1;
    __trap();
#endif
}
DT_FN void dt_bulk_commit() {
#if DT_SM90A
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#else
    __trap();
#endif
}
template <int N>
DT_FN void dt_bulk_wait_read() {
#if DT_SM90A
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
#else
    __trap();
#endif
}
template <int N>
DT_FN void dt_bulk_wait() {
#if DT_SM90A
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
#else
    __trap();
#endif
}
/* Makes this thread's writes to shared memory visible to the bulk copies issued after the
 * barrier that follows. */
DT_FN void dt_fence_proxy_async() {
#if DT_SM90A
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
    __trap();
#endif
}
/* Two warpgroups taking turns (`RingBuffers::turns`): warpgroup w (0 or 1) waits for its turn
 * on named barrier 2 + w and passes it to the other by arriving on the other's (256 threads in
 * all: the one waiting and the one passing). */
DT_FN void dt_turn_wait(unsigned w) { asm volatile("bar.sync %0, 256;" ::"r"(2 + w) : "memory"); }
DT_FN void dt_turn_pass(unsigned w) { asm volatile("bar.arrive %0, 256;" ::"r"(3 - w) : "memory"); }
/* The barrier of one warpgroup (named barrier `id`, 128 threads). */
DT_FN void dt_warpgroup_sync(unsigned id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }
DT_FN void dt_st_shared_u32(unsigned addr, unsigned v) { asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory"); }
/* The threads' copy of a box that no tensor map describes, into the layout a bulk tensor copy
 * with the 128-byte swizzle gives it: LINES lines of 64 16-bit elements at `dst` (1024-aligned),
 * the 16-byte unit u of line l at unit u ^ (l % 8). Element j of line l comes from
 * src[l * line_stride + j * elem_stride], and is zero where l >= lines_in or j >= elems_in (what
 * lies outside the tensor). The 128 threads of a warpgroup (t: this one's index) take pairs of
 * elements, all of a box of up to 128 lines loaded before they are stored (32 pairs in flight:
 * the producer's registers allow them, see warp_specialize.rs). The caller orders the writes before the
 * reads of the async proxy (dt_fence_proxy_async, then a barrier). */
template <int LINES>
DT_FN void dt_copy_box_by_threads(unsigned dst, const unsigned short* src, long long line_stride, long long elem_stride,
                                  long long lines_in, long long elems_in, int t) {
    constexpr int PAIRS = LINES * 32, BATCH = LINES / 4 < 32 ? LINES / 4 : 32;
#pragma unroll 1
    for (int p0 = t; p0 < PAIRS; p0 += 128 * BATCH) {
        unsigned w[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; u++) {
            const int p = p0 + 128 * u, l = p >> 5, j = (p & 31) * 2;
            const unsigned short* q = src + (long long)l * line_stride + (long long)j * elem_stride;
            const bool line = p < PAIRS && l < lines_in;
            const unsigned lo = line && j < elems_in ? (unsigned)q[0] : 0u;
            const unsigned hi = line && j + 1 < elems_in ? (unsigned)q[elem_stride] : 0u;
            w[u] = lo | hi << 16;
        }
#pragma unroll
        for (int u = 0; u < BATCH; u++) {
            const int p = p0 + 128 * u, l = p >> 5, j = (p & 31) * 2;
            if (p < PAIRS) dt_st_shared_u32(dst + l * 128 + ((((j >> 3) ^ (l & 7)) << 4) | ((j & 7) << 1)), w[u]);
        }
    }
}
DT_FN unsigned long long dt_wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3ffffu) >> 4) | ((unsigned long long)((lbo & 0x3ffffu) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3ffffu) >> 4) << 32) | (1ull << 62);
}
/* Orders this thread's register accesses before the wgmma that follow (wgmma.fence), closes
 * the wgmma issued since the last commit into a group, and waits until at most N groups are in
 * flight. */
DT_FN void dt_wgmma_fence() {
#if DT_SM90A
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#else
    __trap();
#endif
}
DT_FN void dt_wgmma_commit() {
#if DT_SM90A
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#else
    __trap();
#endif
}
template <int N>
DT_FN void dt_wgmma_wait() {
#if DT_SM90A
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#else
    __trap();
#endif
}
/* Keeps the compiler from moving reads of an accumulator register above the wait that
 * completes the wgmma writing it. */
DT_FN void dt_reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }
/* The same for the registers of a wgmma's A operand: computed before the wgmma.fence. */
DT_FN void dt_reg_fence_u32(unsigned& r) { asm volatile("" : "+r"(r)::"memory"); }
/* The same for a descriptor: computed before the wait that follows (not after it, on the path
 * from a stage's arrival to its products). */
DT_FN void dt_reg_fence_u64(unsigned long long& r) { asm volatile("" : "+l"(r)::"memory"); }
template <int R>
DT_FN void dt_setmaxnreg_inc() {
#if DT_SM90A
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
#endif
}
template <int R>
DT_FN void dt_setmaxnreg_dec() {
#if DT_SM90A
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
#endif
}
/* A barrier of the first `threads` threads of the program (named barrier 1), for the consumer
 * warpgroups of a warp-specialized kernel, whose producer never reaches it. */
template <int THREADS>
DT_FN void dt_consumer_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory");
}
#endif
