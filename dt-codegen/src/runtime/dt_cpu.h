/* Runtime of the CPU C that dtc generates: element conversions and math. Inlined into every
 * generated file, so the file compiles on its own. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Helpers may go unused in a given file; clang warns about unused static functions outside headers. */
#define DT_FN static inline __attribute__((unused))

typedef uint16_t dt_f16;
typedef uint16_t dt_bf16;

DT_FN float dt_f16_to_f32(dt_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    float f;
    if (e == 0) {
        /* zero or subnormal: m * 2^-24, exact in f32 */
        f = (float)m * 5.9604644775390625e-8f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13);
    } else {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest, ties to even, as the hardware conversions do. */
DT_FN dt_f16 dt_f32_to_f16(float f) {
    uint32_t x, ax, sign, base, rem;
    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (dt_f16)(sign | 0x7e00u);           /* NaN */
    if (ax >= 0x477ff000u) return (dt_f16)(sign | 0x7c00u);          /* rounds to infinity */
    if (ax < 0x38800000u) {                                          /* f16 subnormal or zero */
        float a;
        memcpy(&a, &ax, 4);
        return (dt_f16)(sign | (uint32_t)rintf(a * 16777216.0f));    /* exact scaling by 2^24 */
    }
    base = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
    rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (base & 1u))) base++;
    return (dt_f16)(sign | base);
}

DT_FN float dt_bf16_to_f32(dt_bf16 h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

DT_FN dt_bf16 dt_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (dt_bf16)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (dt_bf16)(x >> 16);
}

DT_FN float dt_load_f32(float v) { return v; }
DT_FN float dt_load_f16(dt_f16 v) { return dt_f16_to_f32(v); }
DT_FN float dt_load_bf16(dt_bf16 v) { return dt_bf16_to_f32(v); }
DT_FN float dt_store_f32(float v) { return v; }
DT_FN dt_f16 dt_store_f16(float v) { return dt_f32_to_f16(v); }
DT_FN dt_bf16 dt_store_bf16(float v) { return dt_f32_to_bf16(v); }

DT_FN float dt_rsqrt(float a) { return 1.0f / sqrtf(a); }
DT_FN float dt_sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }
DT_FN long long dt_min_ll(long long a, long long b) { return a < b ? a : b; }
DT_FN long long dt_max_ll(long long a, long long b) { return a > b ? a : b; }
DT_FN long long dt_cdiv(long long a, long long b) { return (a + b - 1) / b; }
