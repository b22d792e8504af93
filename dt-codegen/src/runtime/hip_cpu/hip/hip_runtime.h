/* A CPU stand-in for <hip/hip_runtime.h>: runs the HIP C that dtc generates on the host, as
 * AMD's wave64 GPUs would, so that it can be executed (and tested) where there is no AMD GPU.
 *
 * Compile a generated .hip file unchanged as host C++ with this directory first on the include
 * path (dt-codegen/src/hip_cpu.rs does it):
 *
 *     clang++ -x c++ -std=c++20 -O1 -fPIC -shared -fvisibility=hidden -D__HIPCC__ [-D__gfx90a__]
 *             -I dt-codegen/src/runtime/hip_cpu k.hip -o libk.so
 *
 * after appending one `DT_HIP_CPU_KERNEL(symbol)` line per kernel, which exports
 *
 *     extern "C" int dt_hip_cpu_launch_<symbol>(const void* args, unsigned grid, unsigned threads,
 *                                               unsigned shared_bytes, unsigned long long max_steps,
 *                                               char* err, unsigned long err_len);
 *
 * (`args` points at the kernel's one argument, its argument block; `max_steps`, unless 0, bounds the
 * times a thread is resumed, summed over the launch). It returns 0 on success, 1 on an error and
 * 2 when it gave up after `max_steps`, with a message in `err`. Execution model:
 *  - Every thread of a block is a fiber with its own stack (a small context switch of our own on
 *    x86-64, ucontext elsewhere). One OS thread runs them: each runnable fiber runs until it
 *    reaches a collective operation (__syncthreads, a shuffle, an MFMA) or returns; then the
 *    scheduler completes every collective that all its participants have reached and runs the
 *    fibers again. Deterministic, and a collective that not every participant reaches (threads
 *    that returned, lanes of one wavefront at different collectives) is an error naming the
 *    kernel, the block and the threads, instead of a hang.
 *  - A wavefront is 64 consecutive threads (lane = threadIdx.x % 64); shuffles follow HIP's
 *    definitions over ds_bpermute (source lane index modulo 64, HIP's clamping for `width`).
 *  - Blocks run one after another. Dynamic shared memory (`extern __shared__ float dt_smem[];`,
 *    the one name the generated code uses, up to 64 KiB) is one buffer, refilled before every
 *    block with garbage (all-ones bytes, NaN in every float format, in even blocks; 0x7f bytes,
 *    3.4e38 in f32 and bf16, in odd ones) so that a read of shared memory nobody wrote shows.
 *  - Launches of one library are serialized by a lock.
 *  - The matrix-core builtins of gfx90a/gfx94x, __builtin_amdgcn_mfma_f32_16x16x16f16 and
 *    __builtin_amdgcn_mfma_f32_16x16x16bf16_1k, are emulated as wavefront collectives (see
 *    dt_hip_cpu::mfma below for the layout), products and sums in f32.
 * Not modelled: static (non-extern) __shared__ arrays (they would be per thread), memory
 * accesses out of bounds (they crash or read the host's memory), and timing. A thread that
 * overflows its 256 KiB stack hits a guard page (SIGSEGV). */
#pragma once

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmath>
#include <mutex>
#include <type_traits>

#include <sys/mman.h>
/* Our own context switch on x86-64; ucontext elsewhere, or with -DDT_HIP_CPU_UCONTEXT. */
#if defined(__x86_64__) && !defined(DT_HIP_CPU_UCONTEXT)
#define DT_HIP_CPU_ASM_SWITCH 1
#else
#define DT_HIP_CPU_ASM_SWITCH 0
#endif
#if !DT_HIP_CPU_ASM_SWITCH
#include <ucontext.h>
typedef ucontext_t ucontext_or_none;
#else
typedef void ucontext_or_none;
#endif

/* What the device pass of hipcc would define. */
#ifndef __HIP_DEVICE_COMPILE__
#define __HIP_DEVICE_COMPILE__ 1
#endif
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#ifndef __AMDGCN_WAVEFRONT_SIZE
#define __AMDGCN_WAVEFRONT_SIZE 64
#endif
#define DT_HIP_CPU 1

#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)

struct dt_hip_cpu_dim3 {
    unsigned x, y, z;
};

/* Set by the scheduler before it resumes a thread. */
static dt_hip_cpu_dim3 threadIdx, blockIdx, blockDim, gridDim;
static const int warpSize = 64;

/* Dynamic shared memory: the kernels' block-scope `extern __shared__ float dt_smem[];` names
 * this array. */
static float dt_smem[16384] __attribute__((aligned(128)));

/* Vector types of HIP that plain C++ lacks. */
struct __attribute__((aligned(16))) uint4 {
    unsigned x, y, z, w;
};
struct __attribute__((aligned(8))) uint2 {
    unsigned x, y;
};
struct __attribute__((aligned(16))) int4 {
    int x, y, z, w;
};
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};
struct __attribute__((aligned(8))) float2 {
    float x, y;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

/* Bit casts and fast math (the host's exact functions stand in for the approximate ones). */
static inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
static inline int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
static inline float __uint_as_float(unsigned x) { return __builtin_bit_cast(float, x); }
static inline unsigned __float_as_uint(float x) { return __builtin_bit_cast(unsigned, x); }
/* glibc declares __expf and its kind itself: macros, so that its declarations stay untouched. */
static inline float dt_hip_cpu_expf(float x) { return expf(x); }
static inline float dt_hip_cpu_logf(float x) { return logf(x); }
static inline float dt_hip_cpu_sinf(float x) { return sinf(x); }
static inline float dt_hip_cpu_cosf(float x) { return cosf(x); }
static inline float dt_hip_cpu_powf(float x, float y) { return powf(x, y); }
#define __expf dt_hip_cpu_expf
#define __logf dt_hip_cpu_logf
#define __sinf dt_hip_cpu_sinf
#define __cosf dt_hip_cpu_cosf
#define __powf dt_hip_cpu_powf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

namespace dt_hip_cpu {

constexpr int kWave = 64;
constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = 256 * 1024; /* per thread, plus a guard page below it */
constexpr size_t kGuardBytes = 4096;

enum class Op : uint8_t { Run, Done, Barrier, Gather, MfmaF16, MfmaBf16 };

static const char* op_name(Op op) {
    switch (op) {
    case Op::Run: return "running";
    case Op::Done: return "returned";
    case Op::Barrier: return "__syncthreads";
    case Op::Gather: return "a cross-lane operation (shuffle, ds_bpermute, readfirstlane)";
    case Op::MfmaF16: return "__builtin_amdgcn_mfma_f32_16x16x16f16";
    case Op::MfmaBf16: return "__builtin_amdgcn_mfma_f32_16x16x16bf16_1k";
    }
    return "?";
}

struct Lane {
    void* sp = nullptr; /* saved stack pointer (x86-64) */
#if !DT_HIP_CPU_ASM_SWITCH
    ucontext_t ctx;
#endif
    uint32_t in = 0;   /* this lane's value of a gather */
    float a[4], b[4], c[4], d[4]; /* MFMA operands and result (A, B converted to f32) */
    int modifiers = 0; /* cbsz | abid | blgp of an MFMA */
};

struct State {
    std::mutex lock;
    Lane lanes[kMaxThreads];
    Op ops[kMaxThreads];             /* what each thread is doing or waiting at */
    int arrived[kMaxThreads / kWave]; /* lanes of each wave waiting at a wave collective */
    int at_barrier = 0, done = 0;
    uint32_t gathered[kMaxThreads / kWave][kWave]; /* the last completed gather of each wave */
    char* stacks = nullptr;
    void* sched_sp = nullptr;
#if !DT_HIP_CPU_ASM_SWITCH
    ucontext_t sched_ctx;
#endif
    int current = 0;
    unsigned threads = 0;
    unsigned long long steps = 0, max_steps = 0; /* thread resumes so far, and the limit (0: none) */
    bool gave_up = false;
    void (*entry)(const void*) = nullptr;
    const void* args = nullptr;
    const char* kernel = "";
    ~State() {
        if (stacks) munmap(stacks, (kStackBytes + kGuardBytes) * kMaxThreads);
    }
};

static State& state() {
    static State s;
    return s;
}

} // namespace dt_hip_cpu

#if DT_HIP_CPU_ASM_SWITCH
/* dt_hip_cpu_switch(save, to): saves the callee-saved registers on the current stack, stores its
 * pointer in *save, and resumes the context whose stack pointer is `to`. (MXCSR and the x87
 * control word are not switched: nothing here changes them.) dt_hip_cpu_start: where a new
 * fiber begins (r12 = its argument, r13 = its function). */
__asm__(R"(
    .text
    .p2align 4
    .weak dt_hip_cpu_switch
    .hidden dt_hip_cpu_switch
    .type dt_hip_cpu_switch, @function
dt_hip_cpu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size dt_hip_cpu_switch, .-dt_hip_cpu_switch

    .p2align 4
    .weak dt_hip_cpu_start
    .hidden dt_hip_cpu_start
    .type dt_hip_cpu_start, @function
dt_hip_cpu_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size dt_hip_cpu_start, .-dt_hip_cpu_start
)");
extern "C" __attribute__((visibility("hidden"))) void dt_hip_cpu_switch(void** save, void* to);
extern "C" __attribute__((visibility("hidden"))) void dt_hip_cpu_start();
#endif

namespace dt_hip_cpu {

/* Makes thread `i` the running one and switches to it from the context that `save` belongs to. */
__attribute__((noinline)) static void switch_to(int i, void** save, [[maybe_unused]] ucontext_or_none* from) {
    State& s = state();
    s.current = i;
    s.steps++;
    threadIdx = dt_hip_cpu_dim3{(unsigned)i, 0, 0};
#if DT_HIP_CPU_ASM_SWITCH
    dt_hip_cpu_switch(save, s.lanes[i].sp);
#else
    swapcontext(from, &s.lanes[i].ctx);
#endif
}

/* Starts a round from the scheduler at the first runnable thread `i`; returns when every thread
 * that was runnable waits somewhere or has returned. */
static void run_round(int i) {
    State& s = state();
#if DT_HIP_CPU_ASM_SWITCH
    switch_to(i, &s.sched_sp, nullptr);
#else
    switch_to(i, nullptr, &s.sched_ctx);
#endif
}

/* The running thread waits at `op` (or has returned: Op::Done) until the scheduler completes it.
 * Control passes straight to the next runnable thread of the round, or back to the scheduler
 * after the last (or when the launch has taken its steps: the scheduler then gives up). */
static void block_on(Op op) {
    State& s = state();
    const int self = s.current;
    s.ops[self] = op;
    if (op == Op::Barrier) {
        s.at_barrier++;
    } else if (op == Op::Done) {
        s.done++;
    } else {
        s.arrived[self / kWave]++;
    }
    Lane& me = s.lanes[self];
    if (s.max_steps && s.steps >= s.max_steps) s.gave_up = true;
    for (int j = self + 1; j < (int)s.threads && !s.gave_up; j++) {
        if (s.ops[j] == Op::Run) {
#if DT_HIP_CPU_ASM_SWITCH
            switch_to(j, &me.sp, nullptr);
#else
            switch_to(j, nullptr, &me.ctx);
#endif
            return;
        }
    }
#if DT_HIP_CPU_ASM_SWITCH
    dt_hip_cpu_switch(&me.sp, s.sched_sp);
#else
    swapcontext(&me.ctx, &s.sched_ctx);
#endif
}

static void fiber_main(Lane*) {
    State& s = state();
    s.entry(s.args);
    block_on(Op::Done);
    abort(); /* a returned thread is never resumed */
}

#if !DT_HIP_CPU_ASM_SWITCH
static void fiber_main_ucontext() { fiber_main(&state().lanes[state().current]); }
#endif

static bool init_fiber(int i) {
    State& s = state();
    if (!s.stacks) {
        void* p = mmap(nullptr, (kStackBytes + kGuardBytes) * kMaxThreads, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return false;
        s.stacks = (char*)p;
        for (int t = 0; t < kMaxThreads; t++) mprotect(s.stacks + (kStackBytes + kGuardBytes) * t, kGuardBytes, PROT_NONE);
    }
    char* bottom = s.stacks + (kStackBytes + kGuardBytes) * i + kGuardBytes;
    Lane& l = s.lanes[i];
    s.ops[i] = Op::Run;
#if DT_HIP_CPU_ASM_SWITCH
    /* The first switch to it pops these and returns into dt_hip_cpu_start with the stack
     * pointer at `top`, 16-byte aligned, as a call needs. */
    uint64_t* top = (uint64_t*)(bottom + kStackBytes);
    uint64_t* sp = top - 7;
    sp[0] = 0;                                  /* r15 */
    sp[1] = 0;                                  /* r14 */
    sp[2] = (uint64_t)(void*)&fiber_main;       /* r13 */
    sp[3] = (uint64_t)(void*)&l;                /* r12 */
    sp[4] = 0;                                  /* rbx */
    sp[5] = 0;                                  /* rbp */
    sp[6] = (uint64_t)(void*)&dt_hip_cpu_start; /* return address */
    l.sp = sp;
#else
    getcontext(&l.ctx);
    l.ctx.uc_stack.ss_sp = bottom;
    l.ctx.uc_stack.ss_size = kStackBytes;
    l.ctx.uc_link = nullptr;
    makecontext(&l.ctx, fiber_main_ucontext, 0);
#endif
    return true;
}

static Lane& me() { return state().lanes[state().current]; }

/* Waits until the other lanes of the wavefront arrive and returns the value of lane
 * `src & 63` (ds_bpermute). */
static uint32_t gather(uint32_t v, int src) {
    Lane& l = me();
    const int lane = state().current;
    l.in = v;
    block_on(Op::Gather);
    return state().gathered[lane / kWave][src & (kWave - 1)];
}

/* The values of all 64 lanes of the wavefront after a gather. */
static const uint32_t* gathered_wave() { return state().gathered[state().current / kWave]; }

template <class T>
static T shuffle_to(T v, int src) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "32- or 64-bit values");
    if constexpr (sizeof(T) == 4) {
        return __builtin_bit_cast(T, gather(__builtin_bit_cast(uint32_t, v), src));
    } else {
        uint64_t b = __builtin_bit_cast(uint64_t, v);
        uint64_t lo = gather((uint32_t)b, src);
        uint64_t hi = gather((uint32_t)(b >> 32), src);
        return __builtin_bit_cast(T, lo | (hi << 32));
    }
}

static void report(char* err, unsigned long len, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(char* err, unsigned long len, const char* fmt, ...) {
    if (!err || len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* "0-3, 7" for the threads of `lanes[first..first+n)` whose op is `op`. */
static void describe(char* out, size_t len, int first, int n, Op op) {
    State& s = state();
    size_t used = 0;
    out[0] = 0;
    for (int i = first; i < first + n;) {
        if (s.ops[i] != op) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < first + n && s.ops[j + 1] == op) j++;
        if (used + 32 >= len) {
            snprintf(out + used, len - used, ", ...");
            return;
        }
        used += (size_t)snprintf(out + used, len - used, used ? (i == j ? ", %d" : ", %d-%d") : (i == j ? "%d" : "%d-%d"), i, j);
        i = j + 1;
    }
}

/* D = C + A * B for the 16x16x16 tiles of one wavefront (lanes[base..base+64)): lane l holds
 * a[q] = A[l % 16][4 * (l / 16) + q], b[q] = B[4 * (l / 16) + q][l % 16] and
 * c[q] = C[4 * (l / 16) + q][l % 16], and receives d[q] = D[4 * (l / 16) + q][l % 16]. */
static void mfma_16x16x16(int base) {
    State& s = state();
    float A[16][16], B[16][16];
    for (int l = 0; l < kWave; l++) {
        const Lane& x = s.lanes[base + l];
        for (int q = 0; q < 4; q++) {
            A[l % 16][4 * (l / 16) + q] = x.a[q];
            B[4 * (l / 16) + q][l % 16] = x.b[q];
        }
    }
    for (int l = 0; l < kWave; l++) {
        Lane& x = s.lanes[base + l];
        for (int q = 0; q < 4; q++) {
            const int row = 4 * (l / 16) + q, col = l % 16;
            float acc = x.c[q];
            for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
            x.d[q] = acc;
        }
    }
}

/* Completes the collectives that every participant has reached. Returns 1 if some thread can
 * run again, 0 if the block is finished, -1 on an error (described in `err`). */
static int settle(unsigned block, char* err, unsigned long len) {
    State& s = state();
    const int n = (int)s.threads;
    bool progressed = false;
    char who[256], other[256];
    /* After a round every thread waits somewhere or has returned: a wavefront with lanes at a
     * wave collective completes it if all its lanes are at that one. */
    for (int base = 0; base < n; base += kWave) {
        const int w = base / kWave;
        if (s.arrived[w] == 0) continue;
        const int width = n - base < kWave ? n - base : kWave;
        Op wave_op = Op::Run;
        for (int l = 0; l < width && wave_op == Op::Run; l++) {
            Op op = s.ops[base + l];
            if (op == Op::Gather || op == Op::MfmaF16 || op == Op::MfmaBf16) wave_op = op;
        }
        for (int l = 0; l < width; l++) {
            Op op = s.ops[base + l];
            if (op != wave_op) {
                describe(who, sizeof who, base, width, wave_op);
                describe(other, sizeof other, base, width, op);
                report(err, len,
                       "kernel `%s`, block %u: wavefront %d does not reach %s together: threads %s are there, "
                       "threads %s are at %s",
                       s.kernel, block, w, op_name(wave_op), who, other, op_name(op));
                return -1;
            }
        }
        if (wave_op == Op::Gather) {
            for (int l = 0; l < kWave; l++) s.gathered[w][l] = l < width ? s.lanes[base + l].in : 0u;
        } else {
            if (width != kWave) {
                report(err, len, "kernel `%s`: %s needs a whole wavefront of 64 lanes; the last wavefront of the block has %d",
                       s.kernel, op_name(wave_op), width);
                return -1;
            }
            for (int l = 0; l < kWave; l++) {
                if (s.lanes[base + l].modifiers != 0) {
                    report(err, len, "kernel `%s`: %s with cbsz, abid or blgp other than 0 (lane %d); not emulated", s.kernel,
                           op_name(wave_op), l);
                    return -1;
                }
            }
            mfma_16x16x16(base);
        }
        memset(&s.ops[base], (int)Op::Run, (size_t)width);
        s.arrived[w] = 0;
        progressed = true;
    }
    if (progressed) return 1;
    if (s.done == n) return 0;
    if (s.at_barrier == n) {
        memset(s.ops, (int)Op::Run, (size_t)n);
        s.at_barrier = 0;
        return 1;
    }
    describe(who, sizeof who, 0, n, Op::Barrier);
    describe(other, sizeof other, 0, n, Op::Done);
    report(err, len, "kernel `%s`, block %u: __syncthreads() is reached by threads %s of %d, but threads %s have returned",
           s.kernel, block, who, n, other);
    return -1;
}

static int launch(const char* kernel, void (*entry)(const void*), const void* args, unsigned grid, unsigned threads,
                  unsigned shared_bytes, unsigned long long max_steps, char* err, unsigned long len) {
    State& s = state();
    std::lock_guard<std::mutex> guard(s.lock);
    if (threads == 0 || threads > (unsigned)kMaxThreads) {
        report(err, len, "kernel `%s`: %u threads per block (1 to %d)", kernel, threads, kMaxThreads);
        return 1;
    }
    if (shared_bytes > sizeof(dt_smem)) {
        report(err, len, "kernel `%s`: %u bytes of shared memory (at most %zu)", kernel, shared_bytes, sizeof(dt_smem));
        return 1;
    }
    s.kernel = kernel;
    s.entry = entry;
    s.args = args;
    s.threads = threads;
    s.steps = 0;
    s.max_steps = max_steps;
    s.gave_up = false;
    blockDim = dt_hip_cpu_dim3{threads, 1, 1};
    gridDim = dt_hip_cpu_dim3{grid, 1, 1};
    for (unsigned block = 0; block < grid; block++) {
        blockIdx = dt_hip_cpu_dim3{block, 0, 0};
        memset(dt_smem, block % 2 ? 0x7f : 0xff, sizeof(dt_smem));
        memset(s.arrived, 0, sizeof(s.arrived));
        s.at_barrier = s.done = 0;
        for (unsigned i = 0; i < threads; i++) {
            if (!init_fiber((int)i)) {
                report(err, len, "kernel `%s`: could not map the thread stacks", kernel);
                return 1;
            }
        }
        for (;;) {
            for (unsigned i = 0; i < threads; i++) {
                if (s.ops[i] == Op::Run) {
                    run_round((int)i);
                    break;
                }
            }
            if (s.gave_up) {
                report(err, len, "kernel `%s`: gave up in block %u of %u after %llu steps (thread resumes)", kernel, block, grid,
                       s.steps);
                return 2;
            }
            int r = settle(block, err, len);
            if (r < 0) return 1;
            if (r == 0) break;
        }
    }
    return 0;
}

/* Calls a kernel `void k(T arg)` with the argument that `args` points at. */
template <class T>
static void invoke(void (*k)(T), const void* args) {
    k(*static_cast<const std::remove_cvref_t<T>*>(args));
}

} // namespace dt_hip_cpu

/* Exports the launch entry `dt_hip_cpu_launch_<sym>` of kernel `sym` (see the top). */
#define DT_HIP_CPU_KERNEL(sym)                                                                                          \
    extern "C" __attribute__((visibility("default"))) int dt_hip_cpu_launch_##sym(                                      \
        const void* args, unsigned grid, unsigned threads, unsigned shared_bytes, unsigned long long max_steps,       \
        char* err, unsigned long err_len) {                                                                             \
        return dt_hip_cpu::launch(#sym, [](const void* a) { dt_hip_cpu::invoke(sym, a); }, args, grid, threads,        \
                                  shared_bytes, max_steps, err, err_len);                                                \
    }

/* Barrier of the block. */
static inline void __syncthreads() { dt_hip_cpu::block_on(dt_hip_cpu::Op::Barrier); }
static inline void __threadfence_block() {}
static inline void __threadfence() {}

static inline unsigned __lane_id() { return threadIdx.x % 64u; }

/* Cross-lane operations, as HIP defines them over ds_bpermute: one overload per type HIP has, so
 * that other arguments convert as they would there. */
#define DT_HIP_CPU_SHUFFLES(T)                                                      \
    static inline T __shfl(T var, int src_lane, int width = 64) {                   \
        const int self = (int)__lane_id();                                          \
        const int index = src_lane + (self & ~(width - 1));                         \
        return dt_hip_cpu::shuffle_to(var, index);                                  \
    }                                                                               \
    static inline T __shfl_xor(T var, int lane_mask, int width = 64) {              \
        const int self = (int)__lane_id();                                          \
        int index = self ^ lane_mask;                                               \
        index = index >= ((self + width) & ~(width - 1)) ? self : index;            \
        return dt_hip_cpu::shuffle_to(var, index);                                  \
    }                                                                               \
    static inline T __shfl_up(T var, unsigned delta, int width = 64) {              \
        const int self = (int)__lane_id();                                          \
        int index = self - (int)delta;                                              \
        index = index < (self & ~(width - 1)) ? self : index;                       \
        return dt_hip_cpu::shuffle_to(var, index);                                  \
    }                                                                               \
    static inline T __shfl_down(T var, unsigned delta, int width = 64) {            \
        const int self = (int)__lane_id();                                          \
        int index = self + (int)delta;                                              \
        index = (int)((self & (width - 1)) + (int)delta) >= width ? self : index;   \
        return dt_hip_cpu::shuffle_to(var, index);                                  \
    }
DT_HIP_CPU_SHUFFLES(int)
DT_HIP_CPU_SHUFFLES(unsigned)
DT_HIP_CPU_SHUFFLES(float)
DT_HIP_CPU_SHUFFLES(double)
DT_HIP_CPU_SHUFFLES(long)
DT_HIP_CPU_SHUFFLES(unsigned long)
DT_HIP_CPU_SHUFFLES(long long)
DT_HIP_CPU_SHUFFLES(unsigned long long)
#undef DT_HIP_CPU_SHUFFLES
static inline int dt_hip_cpu_ds_bpermute(int addr, int v) {
    return (int)dt_hip_cpu::gather((uint32_t)v, addr >> 2);
}
template <class T>
static inline T dt_hip_cpu_readfirstlane(T v) {
    return dt_hip_cpu::shuffle_to(v, 0);
}
static inline unsigned long long __ballot(int predicate) {
    dt_hip_cpu::gather(predicate != 0, 0);
    const uint32_t* w = dt_hip_cpu::gathered_wave();
    unsigned long long m = 0;
    for (int l = 0; l < 64; l++) m |= (unsigned long long)(w[l] != 0) << l;
    return m;
}
static inline int __any(int predicate) { return __ballot(predicate) != 0; }
static inline int __all(int predicate) { return __ballot(predicate) == ~0ull; }
#define __builtin_amdgcn_ds_bpermute(addr, v) dt_hip_cpu_ds_bpermute((addr), (v))
#define __builtin_amdgcn_readfirstlane(v) dt_hip_cpu_readfirstlane(v)
#define __builtin_amdgcn_s_barrier() __syncthreads()
#define __builtin_amdgcn_wave_barrier() ((void)0)
#define __builtin_amdgcn_sched_barrier(mask) ((void)0)
#define __builtin_amdgcn_s_waitcnt(n) ((void)0)
#define __builtin_amdgcn_workitem_id_x() threadIdx.x
#define __builtin_amdgcn_workgroup_id_x() blockIdx.x

/* The matrix-core builtins: D = C + A * B for 16x16 tiles and K = 16, by all 64 lanes of a
 * wavefront together, with cbsz = abid = blgp = 0. Lane l holds a[q] = A[l % 16][4 * (l / 16) + q],
 * b[q] = B[4 * (l / 16) + q][l % 16], c[q] = C[4 * (l / 16) + q][l % 16] and receives
 * D[4 * (l / 16) + q][l % 16] in element q of the result (q = 0..3). `a` and `b` are any vectors
 * of 4 _Float16 (f16 form) or 4 16-bit integers holding bf16 bit patterns (bf16 form); `c` and
 * the result are `float __attribute__((ext_vector_type(4)))`. */
typedef float dt_hip_cpu_float4v __attribute__((ext_vector_type(4)));

namespace dt_hip_cpu {
template <Op op, class VA, class VB, class VC>
static dt_hip_cpu_float4v mfma(VA a, VB b, VC c, int cbsz, int abid, int blgp) {
    static_assert(sizeof(VA) == 8 && sizeof(VB) == 8, "A and B fragments are 4 16-bit values per lane");
    static_assert(sizeof(VC) == 16, "the C fragment is 4 floats per lane");
    Lane& l = me();
    for (int q = 0; q < 4; q++) {
        if constexpr (op == Op::MfmaF16) {
            static_assert(std::is_same_v<std::remove_cvref_t<decltype(a[0])>, _Float16> &&
                              std::is_same_v<std::remove_cvref_t<decltype(b[0])>, _Float16>,
                          "__builtin_amdgcn_mfma_f32_16x16x16f16 takes vectors of 4 _Float16");
            l.a[q] = (float)a[q];
            l.b[q] = (float)b[q];
        } else {
            static_assert(std::is_integral_v<std::remove_cvref_t<decltype(a[0])>> && sizeof(a[0]) == 2,
                          "__builtin_amdgcn_mfma_f32_16x16x16bf16_1k takes vectors of 4 16-bit integers (bf16 bits)");
            l.a[q] = __builtin_bit_cast(float, (uint32_t)(uint16_t)a[q] << 16);
            l.b[q] = __builtin_bit_cast(float, (uint32_t)(uint16_t)b[q] << 16);
        }
        l.c[q] = (float)c[q];
    }
    l.modifiers = cbsz | abid | blgp;
    block_on(op);
    dt_hip_cpu_float4v d;
    for (int q = 0; q < 4; q++) d[q] = l.d[q];
    return d;
}
} // namespace dt_hip_cpu

#define __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, cbsz, abid, blgp) \
    dt_hip_cpu::mfma<dt_hip_cpu::Op::MfmaF16>((a), (b), (c), (cbsz), (abid), (blgp))
#define __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, cbsz, abid, blgp) \
    dt_hip_cpu::mfma<dt_hip_cpu::Op::MfmaBf16>((a), (b), (c), (cbsz), (abid), (blgp))
