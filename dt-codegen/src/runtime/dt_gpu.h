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
DT_FN dt_bf16 dt_f32_to_bf16(float f) {
    unsigned x = (unsigned)__float_as_int(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (dt_bf16)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);                                          /* ties to even */
    return (dt_bf16)(x >> 16);
}

DT_FN float dt_load_f32(float v) { return v; }
DT_FN float dt_load_f16(dt_f16 v) { return dt_f16_to_f32(v); }
DT_FN float dt_load_bf16(dt_bf16 v) { return dt_bf16_to_f32(v); }
DT_FN float dt_store_f32(float v) { return v; }
DT_FN dt_f16 dt_store_f16(float v) { return dt_f32_to_f16(v); }
DT_FN dt_bf16 dt_store_bf16(float v) { return dt_f32_to_bf16(v); }

/* Exchange within groups of `width` lanes (a power of two up to 32). */
#if defined(__HIPCC__)
DT_FN float dt_shfl_xor(float v, int mask, int width) { return __shfl_xor(v, mask, width); }
#else
DT_FN float dt_shfl_xor(float v, int mask, int width) { return __shfl_xor_sync(0xffffffffu, v, mask, width); }
#endif

DT_FN float dt_rsqrt(float a) { return 1.0f / sqrtf(a); }
DT_FN float dt_sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }
DT_FN long long dt_min_ll(long long a, long long b) { return a < b ? a : b; }
DT_FN long long dt_cdiv(long long a, long long b) { return (a + b - 1) / b; }
