//! The HIP C that dtc generates, executed on the CPU by the wave64 emulator (`dt_codegen::hip_cpu`,
//! `src/runtime/hip_cpu/hip/hip_runtime.h`), computes what the reference evaluator computes: for
//! every library spec and test spec, under its own schedule and a few random valid ones, every
//! kernel and element type, at small random sizes (1, primes, non-multiples of every tile, and
//! sizes that take two or more programs along each blocked dimension). Every kernel runs compiled
//! with `__gfx90a__`, as for an MI200; those that call the runtime's matrix-core path (emulated
//! `__builtin_amdgcn_mfma_*`) also without it (its shuffle fallback, for GPUs without matrix
//! cores).
//!
//! Beside it, the emulator itself: the MFMA builtins against a matrix product with the lane
//! layout of AMD's documentation, HIP's shuffles, shared memory, and the report of collectives
//! that not every thread reaches.
//!
//! Needs clang++ (`DT_HIP_CPU_CXX`, `clang++-15`, `clang++`); without it the tests say so and
//! pass, unless `DT_REQUIRE_TOOLCHAINS` is set (CI), where they fail.

mod common;

use common::*;
use dt_codegen::abi::DtArgs;
use dt_codegen::emit::gpu::{self, Dialect};
use dt_codegen::hip_cpu::{self, HipCpuLibrary, Target};
use dt_core::algo::Program;
use dt_core::explore::{self, Rng};
use dt_core::kir::Kernel;
use dt_core::DType;
use std::path::PathBuf;

/// Random schedules per spec, besides its own.
const RANDOM_SCHEDULES: usize = 3;
/// Most work (product of every dimension's size) of one case.
const MAX_WORK: usize = 1 << 17;
/// Most steps (thread resumes: starts, and returns from barriers, shuffles and MFMAs) of one
/// launch, about a second; a case that needs more is drawn again smaller (some random schedules
/// recompute a reduction per element: quadratic in a row's length).
const MAX_STEPS: u64 = 1 << 25;
/// Most programs (blocks) of one case.
const MAX_PROGRAMS: usize = 48;

/// Whether the emulator can be built here; without clang++ a skip (a failure under
/// `DT_REQUIRE_TOOLCHAINS`).
fn toolchain(test: &str) -> bool {
    match hip_cpu::find_compiler() {
        Ok(_) => true,
        Err(e) if std::env::var_os("DT_REQUIRE_TOOLCHAINS").is_some() => {
            panic!("{test}: {e}; DT_REQUIRE_TOOLCHAINS is set (source .venv/toolchains.env after .ci/install-toolchains.sh)")
        }
        Err(e) => {
            eprintln!("{test} skipped: {e}");
            false
        }
    }
}

fn build_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hip_cpu")
}

/// Sizes for every dimension: `multi` draws sizes that take two or more programs along every
/// blocked dimension of `k` (a block extent plus a little), the others interesting small values.
/// All within `k`'s bounds, [`MAX_PROGRAMS`] and `max_work`.
fn draw_sizes(p: &Program, k: &Kernel, rng: &mut Rng, multi: bool, max_work: usize) -> Vec<usize> {
    const SPECIAL: &[usize] = &[1, 1, 2, 3, 5, 7, 13, 17, 31, 33, 63, 65, 97, 129, 200, 257];
    let extent = |i: usize| k.grid.block_extent(dt_core::algo::DimId(i as u32)).map(|b| b as usize);
    let mut sizes: Vec<usize> = (0..p.dims.len())
        .map(|i| match extent(i) {
            Some(b) if multi => b + 1 + rng.below(b.min(40) as u64) as usize,
            _ if rng.chance(70) => rng.pick(SPECIAL),
            _ => 1 + rng.below(160) as usize,
        })
        .collect();
    for (d, b) in &k.bounds {
        sizes[d.index()] = sizes[d.index()].min(*b as usize);
    }
    // Halve the dimension with the most blocks while there are too many programs, then the
    // largest while there is too much work; in a `multi` draw a blocked dimension keeps two
    // blocks where another dimension can give.
    let keeps = |i: usize, n: usize| !multi || extent(i).is_none_or(|b| n / 2 > b);
    let blocks = |i: usize, n: usize| extent(i).map_or(0, |b| n.div_ceil(b));
    while k.grid.programs(&sizes) > MAX_PROGRAMS {
        let pick = |strict: bool| {
            (0..sizes.len()).filter(|&i| blocks(i, sizes[i]) > 1 && (!strict || keeps(i, sizes[i]))).max_by_key(|&i| blocks(i, sizes[i]))
        };
        let Some(i) = pick(true).or_else(|| pick(false)) else { break };
        sizes[i] /= 2;
    }
    while sizes.iter().product::<usize>() > max_work {
        let pick = |strict: bool| (0..sizes.len()).filter(|&i| sizes[i] > 1 && (!strict || keeps(i, sizes[i]))).max_by_key(|&i| sizes[i]);
        let Some(i) = pick(true).or_else(|| pick(false)) else { break };
        sizes[i] /= 2;
    }
    sizes
}

fn names(p: &Program, sizes: &[usize]) -> String {
    p.dims.iter().zip(sizes).map(|(d, n)| format!("{}={n}", d.name)).collect::<Vec<_>>().join(" ")
}

struct Schedule {
    spec: String,
    program: Program,
    kernels: Vec<Kernel>,
}

/// Checks one spec: its schedule and [`RANDOM_SCHEDULES`] random ones, all in one source, run on
/// the emulator against the reference evaluator. Returns the number of cases.
fn check_spec(rel: &str) -> usize {
    let t0 = std::time::Instant::now();
    let src = read_spec(rel);
    let base = dt_core::compile_spec(&src).unwrap_or_else(|d| panic!("{rel}: {d:?}"));
    let algorithm = explore::algorithm_text(&src).expect("spec parses");
    let mut rng = Rng::new(0x41D ^ (rel.len() as u64 * 7919));
    let opts = explore::Options { max_size: 512, max_tile_elements: 1 << 13, max_cluster: 0 };
    let mut texts = vec![src.clone()];
    // 32 wavefronts of 64 lanes are more threads than an AMD GPU runs in a block: drawn
    // schedules get 16 instead.
    texts.extend((0..RANDOM_SCHEDULES).map(|_| explore::random_spec(&algorithm, &base, &mut rng, &opts)));
    let schedules: Vec<Schedule> = texts
        .into_iter()
        .enumerate()
        .map(|(si, spec)| {
            let program = dt_core::compile_spec(&spec).unwrap_or_else(|d| panic!("{rel} schedule {si} does not check: {d:?}\n{spec}"));
            let kernels = dt_core::lower::lower_all(&program).unwrap_or_else(|e| panic!("{rel} schedule {si} does not lower: {e}\n{spec}"));
            Schedule { spec, program, kernels }
        })
        .collect();
    // (schedule, kernel, dtype, symbol, text) of every schedule the emitter accepts (tiles may
    // exceed shared memory).
    let mut items: Vec<(usize, &Kernel, DType, String, String)> = Vec::new();
    for (si, s) in schedules.iter().enumerate() {
        let mut mine = Vec::new();
        // Clustered and warp-specialized kernels need CUDA's sm_90: HIP goes without them, as
        // the library's generated HIP does.
        let portable = s.kernels.iter().filter(|k| !k.cuda_only());
        let emitted = portable.flat_map(|k| k.dtypes.iter().map(move |d| (k, *d))).try_for_each(|(k, dtype)| {
            let symbol = format!("{}_s{si}", dt_codegen::emit::symbol(k, dtype));
            let (text, _) = gpu::emit_kernel(k, dtype, &symbol, Dialect::Hip, gpu::Layouts::Any)?;
            mine.push((si, k, dtype, symbol, text));
            Ok::<(), dt_codegen::emit::EmitError>(())
        });
        match emitted {
            Ok(()) => items.extend(mine),
            Err(e) if si > 0 => eprintln!("{rel} schedule {si}: not emitted: {e}"),
            Err(e) => panic!("{rel}: its own schedule is not emitted: {e}"),
        }
    }
    // The MI200's device pass defines __gfx90a__: every kernel runs so. Those that call the
    // matrix-core path of the runtime also run without it (a GPU without matrix cores: the
    // shuffle fallback), from a second library of just them.
    let all: Vec<(&Kernel, DType, String)> = items.iter().map(|(_, k, d, s, _)| (*k, *d, s.clone())).collect();
    let (hip, infos) = gpu::emit_file(rel, Dialect::Hip, &all).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let symbols: Vec<&str> = infos.iter().map(|i| i.symbol.as_str()).collect();
    let stem = rel.rsplit('/').next().unwrap_or(rel).trim_end_matches(".dt");
    let gfx90a = hip_cpu::compile(&hip, &symbols, &build_dir(), &format!("{stem}_gfx90a"), Target { gfx90a: true })
        .unwrap_or_else(|e| panic!("{rel}: {e}"));
    let dual: Vec<(&Kernel, DType, String)> = if hip.contains("__gfx90a__") {
        items.iter().filter(|i| i.4.contains("dt_mfma_")).map(|(_, k, d, s, _)| (*k, *d, s.clone())).collect()
    } else {
        Vec::new()
    };
    let plain = (!dual.is_empty()).then(|| {
        let (hip, infos) = gpu::emit_file(rel, Dialect::Hip, &dual).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let symbols: Vec<&str> = infos.iter().map(|i| i.symbol.as_str()).collect();
        hip_cpu::compile(&hip, &symbols, &build_dir(), stem, Target { gfx90a: false }).unwrap_or_else(|e| panic!("{rel}: {e}"))
    });
    let compiled = t0.elapsed();
    let mut failures = Vec::new();
    let mut cases = 0;
    for info in &infos {
        // Each kernel, and after it its kernel for whole runs and its specialized twin where it
        // has them.
        let (si, k, dtype, _, text) = item_of(&items, |(_, _, _, s, _)| s.as_str(), info);
        let s = &schedules[*si];
        let mut libs = vec![(true, &gfx90a)];
        if let Some(plain) = plain.as_ref().filter(|_| text.contains("dt_mfma_")) {
            libs.push((false, plain));
        }
        let p = &s.program;
        let fid = p.kernel_by_name(&k.name).expect("kernel");
        // Draws: small sizes, two programs or more along every blocked dimension, random sizes.
        // A launch that takes more than MAX_STEPS is drawn again with an eighth of the work.
        let mut max_work = MAX_WORK;
        for draw in 0..3 {
            let mut tries = 0;
            'sizes: loop {
                let mut sizes = draw_sizes(p, k, &mut rng, draw == 1, if draw == 0 { max_work >> 6 } else { max_work });
                sizes_for(&mut sizes, k, info);
                let args = random_args(p, fid, &sizes, *dtype, &mut rng);
                let want = dt_core::eval::evaluate(p, fid, &args, *dtype).expect("evaluates");
                let bound = dt_core::tensor::bind(p, fid, &args).expect("binds");
                let reduction_len = sizes.iter().copied().max().unwrap_or(1);
                for (on_gfx90a, lib) in &libs {
                    let what = || {
                        format!(
                            "{rel} schedule {si} kernel `{}` {dtype} ({}{}), {} programs of {} threads, sizes {}",
                            k.name,
                            info.symbol,
                            if *on_gfx90a { ", __gfx90a__" } else { ", no __gfx90a__" },
                            k.grid.programs(&bound.sizes),
                            info.threads,
                            names(p, &sizes)
                        )
                    };
                    match lib.run_limited(info, k, &bound, *dtype, MAX_STEPS) {
                        Ok(Some(got)) => {
                            cases += 1;
                            let slack = rounding_slack(p, fid, k, &args, *dtype);
                            if let Err(e) = compare_within(&got, &want, *dtype, reduction_len, approximate(k, *dtype), slack.as_ref()) {
                                failures.push(format!("{}: {e}\n{}", what(), s.spec));
                            }
                        }
                        Ok(None) if tries < 3 => {
                            tries += 1;
                            max_work /= 8;
                            continue 'sizes;
                        }
                        Ok(None) => {
                            eprintln!("{}: more than {MAX_STEPS} steps, not checked", what());
                            break 'sizes;
                        }
                        Err(e) => {
                            cases += 1;
                            failures.push(format!("{}: {e}", what()));
                        }
                    }
                }
                break;
            }
        }
    }
    eprintln!("{rel}: {cases} cases, compiled in {:.1?}, all in {:.1?}", compiled, t0.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {cases} cases of {rel} differ from the reference evaluator:\n{}",
        failures.len(),
        failures.join("\n---\n")
    );
    cases
}

macro_rules! spec_test {
    ($name:ident, $path:expr) => {
        #[test]
        fn $name() {
            if toolchain(concat!("hip_c_on_cpu_matches_reference_evaluator::", stringify!($name))) {
                check_spec($path);
            }
        }
    };
}

/// One test per spec, so that the test harness runs them on every core.
mod hip_c_on_cpu_matches_reference_evaluator {
    use super::*;
    spec_test!(matmul, "dt-kernels/specs/matmul.dt");
    spec_test!(mm_leaky_relu, "dt-kernels/specs/mm_leaky_relu.dt");
    spec_test!(softmax, "dt-kernels/specs/softmax.dt");
    spec_test!(layernorm, "dt-kernels/specs/layernorm.dt");
    spec_test!(dyt, "dt-kernels/specs/dyt.dt");
    spec_test!(attention, "dt-kernels/specs/attention.dt");
    spec_test!(vadd, "dt-codegen/tests/specs/vadd.dt");
    spec_test!(softmax_fused, "dt-codegen/tests/specs/softmax_fused.dt");
    spec_test!(matmul_grouped, "dt-codegen/tests/specs/matmul_grouped.dt");
    spec_test!(swish, "dt-codegen/tests/specs/swish.dt");
    spec_test!(matmul_mma, "dt-codegen/tests/specs/matmul_mma.dt");
    spec_test!(row_stats, "dt-codegen/tests/specs/row_stats.dt");
    spec_test!(aligned_rows, "dt-codegen/tests/specs/aligned_rows.dt");
    spec_test!(talk_2mm, "dt-codegen/tests/specs/talk_2mm.dt");
    spec_test!(talk_2mm_f16, "dt-codegen/tests/specs/talk_2mm_f16.dt");
    spec_test!(talk_attention, "dt-codegen/tests/specs/talk_attention.dt");
    spec_test!(rows_in_steps_of_one, "dt-codegen/tests/specs/rows_in_steps_of_one.dt");
    spec_test!(exps_on_fma, "dt-codegen/tests/specs/exps_on_fma.dt");

    /// Every spec under tests/specs and dt-kernels/specs is in [`SPECS`] and has a test above.
    #[test]
    fn every_spec_is_covered() {
        for dir in ["dt-kernels/specs", "dt-codegen/tests/specs"] {
            for e in std::fs::read_dir(workspace().join(dir)).expect("spec directory") {
                let path = e.expect("entry").path();
                if path.extension().is_some_and(|x| x == "dt") {
                    let rel = format!("{dir}/{}", path.file_name().expect("name").to_string_lossy());
                    assert!(SPECS.contains(&rel.as_str()), "{rel} is not in SPECS of tests/common/mod.rs");
                }
            }
        }
        let source = include_str!("hip_cpu_matches_reference.rs");
        for rel in SPECS {
            assert!(source.contains(&format!("\"{rel}\");")), "{rel} has no spec_test! line");
        }
    }
}

/// Every kernel that the library specs and the test specs compile to, under their own schedules,
/// launches at most 1024 threads per block on HIP, the most an AMD GPU runs (a larger launch
/// fails with an invalid-configuration error, and the emulator refuses it too): `num_warps(32)`
/// runs as 16 wavefronts of 64 lanes there (`softmax_fused.dt` asks for 32).
#[test]
fn hip_blocks_have_at_most_1024_threads() {
    let mut over = Vec::new();
    for rel in SPECS {
        let p = dt_core::compile_spec(&read_spec(rel)).unwrap_or_else(|d| panic!("{rel}: {d:?}"));
        let kernels = dt_core::lower::lower_all(&p).unwrap_or_else(|e| panic!("{rel}: {e}"));
        for k in &kernels {
            for dtype in &k.dtypes {
                let emitted = gpu::emit_kernel(k, *dtype, &dt_codegen::emit::symbol(k, *dtype), Dialect::Hip, gpu::Layouts::Any);
                if let Some((_, info)) = emitted.ok().filter(|(_, info)| info.threads > gpu::MAX_THREADS) {
                    over.push(format!("{rel}: kernel `{}` {dtype} (num_warps({})): {} threads", k.name, k.num_warps, info.threads));
                }
            }
        }
    }
    assert!(over.is_empty(), "HIP kernels with more than {} threads per block:\n{}", gpu::MAX_THREADS, over.join("\n"));
}

/// Compiles a hand-written HIP snippet (after the runtime of the generated files' argument
/// block) through the emulator's path.
fn snippet(name: &str, body: &str, symbols: &[&str], gfx90a: bool) -> HipCpuLibrary {
    let source = format!("#include <hip/hip_runtime.h>\n{}\n{body}", dt_codegen::abi::C_DECL);
    hip_cpu::compile(&source, symbols, &build_dir(), name, Target { gfx90a }).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Small integers (exact in f16, bf16 and f32, and so are their products and sums).
fn small_ints(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.below(9) as f32 - 4.0).collect()
}

/// The emulated `__builtin_amdgcn_mfma_f32_16x16x16f16` and `..._16x16x16bf16_1k` compute
/// D = C + A * B with the lane layout of AMD's matrix instruction calculator: lane l holds
/// a[q] = A[l % 16][4 (l / 16) + q], b[q] = B[4 (l / 16) + q][l % 16],
/// c[q] = D[q] = C/D[4 (l / 16) + q][l % 16]; each of the two wavefronts of a block its own.
#[test]
fn emulated_mfma_is_a_16x16x16_matrix_product_in_amd_lane_layout() {
    if !toolchain("emulated_mfma_is_a_16x16x16_matrix_product_in_amd_lane_layout") {
        return;
    }
    const BODY: &str = r#"
typedef _Float16 my_half4 __attribute__((ext_vector_type(4)));
typedef short my_short4 __attribute__((ext_vector_type(4)));
typedef float my_float4 __attribute__((ext_vector_type(4)));
/* inputs: A, B, C (f32, one 16x16 row-major tile per wavefront); output D; sizes[0]: 1 for bf16. */
extern "C" __global__ void __launch_bounds__(128) mfma_tile(const dt_args args) {
    const int w = threadIdx.x / 64, l = threadIdx.x % 64;
    const float* A = (const float*)args.inputs[0] + w * 256;
    const float* B = (const float*)args.inputs[1] + w * 256;
    const float* C = (const float*)args.inputs[2] + w * 256;
    float* D = (float*)args.output + w * 256;
    my_half4 a, b;
    my_short4 a16, b16;
    my_float4 c;
    for (int q = 0; q < 4; q++) {
        a[q] = (_Float16)A[(l % 16) * 16 + 4 * (l / 16) + q];
        b[q] = (_Float16)B[(4 * (l / 16) + q) * 16 + l % 16];
        a16[q] = (short)(__float_as_uint(A[(l % 16) * 16 + 4 * (l / 16) + q]) >> 16);
        b16[q] = (short)(__float_as_uint(B[(4 * (l / 16) + q) * 16 + l % 16]) >> 16);
        c[q] = C[(4 * (l / 16) + q) * 16 + l % 16];
    }
    my_float4 d = args.sizes[0] ? __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a16, b16, c, 0, 0, 0)
                                : __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0);
    for (int q = 0; q < 4; q++) D[(4 * (l / 16) + q) * 16 + l % 16] = d[q];
}
"#;
    let lib = snippet("mfma_tile", BODY, &["mfma_tile"], true);
    let mut rng = Rng::new(17);
    for bf16 in [false, true] {
        let (a, b, c) = (small_ints(&mut rng, 512), small_ints(&mut rng, 512), small_ints(&mut rng, 512));
        let mut d = vec![f32::NAN; 512];
        let mut args = DtArgs::default();
        args.inputs[0] = a.as_ptr() as u64;
        args.inputs[1] = b.as_ptr() as u64;
        args.inputs[2] = c.as_ptr() as u64;
        args.output = d.as_mut_ptr() as u64;
        args.sizes[0] = bf16 as i64;
        // SAFETY: the kernel takes a dt_args and reads 512 floats of each input, writes 512.
        unsafe { lib.launch("mfma_tile", &args, 1, 128, 0) }.unwrap_or_else(|e| panic!("{e}"));
        for w in 0..2 {
            for i in 0..16 {
                for j in 0..16 {
                    let want = c[w * 256 + i * 16 + j] + (0..16).map(|k| a[w * 256 + i * 16 + k] * b[w * 256 + k * 16 + j]).sum::<f32>();
                    assert_eq!(d[w * 256 + i * 16 + j], want, "bf16 {bf16}, wavefront {w}, D[{i}][{j}]");
                }
            }
        }
    }
}

/// HIP's shuffles over 64-lane wavefronts (source lane by HIP's formulas, `width` clamping),
/// shared memory shared by a block and refilled with garbage between blocks, and the block and
/// thread indices.
#[test]
fn emulated_wavefronts_shuffle_as_hip_defines_and_share_memory_per_block() {
    if !toolchain("emulated_wavefronts_shuffle_as_hip_defines_and_share_memory_per_block") {
        return;
    }
    const BODY: &str = r#"
extern "C" __global__ void lanes(const dt_args args) {
    extern __shared__ float dt_smem[];
    float* out = (float*)args.output + blockIdx.x * 8 * 128;
    const int t = threadIdx.x;
    const float v = (float)(t + 1000 * blockIdx.x);
    out[0 * 128 + t] = __shfl_xor(v, 1, 64);
    out[1 * 128 + t] = __shfl_xor(v, 32, 64);
    out[2 * 128 + t] = __shfl_xor(v, 16, 16); /* a mask past the width */
    out[3 * 128 + t] = __shfl(v, 5, 16);
    out[4 * 128 + t] = (float)__shfl((unsigned)t, 70, 64); /* lane 70 % 64 */
    out[5 * 128 + t] = __shfl_down(v, 3, 32);
    if (t == 0) out[6 * 128] = dt_smem[0]; /* garbage of this block */
    __syncthreads();
    dt_smem[t] = v;
    __syncthreads();
    if (t < 127) out[6 * 128 + 1 + t] = dt_smem[127 - t];
    out[7 * 128 + t] = (float)(blockDim.x * 10000 + gridDim.x * 100 + threadIdx.x % 64);
}
"#;
    let lib = snippet("lanes", BODY, &["lanes"], false);
    let mut out = vec![0f32; 2 * 8 * 128];
    let args = DtArgs { output: out.as_mut_ptr() as u64, ..DtArgs::default() };
    // SAFETY: the kernel takes a dt_args and writes 8 * 128 floats per block.
    unsafe { lib.launch("lanes", &args, 2, 128, 512) }.unwrap_or_else(|e| panic!("{e}"));
    for block in 0..2usize {
        let o = &out[block * 1024..];
        for t in 0..128usize {
            let lane = t % 64;
            let wave = t - lane;
            let v = |l: usize| (wave + l + 1000 * block) as f32;
            let group = |w: usize| lane & !(w - 1);
            let down = if (lane & 31) + 3 >= 32 { lane } else { lane + 3 };
            // HIP clamps a source past the end of the lane's group only: lane 16 ^ 16 is lane 0.
            let xor16 = if lane ^ 16 >= (lane + 16) & !15 { lane } else { lane ^ 16 };
            let want = [v(lane ^ 1), v(lane ^ 32), v(xor16), v(group(16) + 5), (wave + 70 % 64) as f32, v(down)];
            for (row, w) in want.iter().enumerate() {
                assert_eq!(o[row * 128 + t], *w, "block {block}, shuffle {row}, thread {t}");
            }
            assert_eq!(o[7 * 128 + t], (128 * 10000 + 200 + lane) as f32, "indices, block {block}, thread {t}");
        }
        let garbage = o[6 * 128];
        assert!(if block == 0 { garbage.is_nan() } else { garbage > 1e38 }, "block {block} read {garbage} from unwritten shared memory");
        for t in 0..127usize {
            assert_eq!(o[6 * 128 + 1 + t], (127 - t + 1000 * block) as f32, "shared memory, block {block}, thread {t}");
        }
    }
}

/// A `__syncthreads` that some threads returned before, and a wavefront whose lanes meet at
/// different collectives, are errors naming the kernel and the threads, not hangs.
#[test]
fn emulator_reports_collectives_that_not_every_thread_reaches() {
    if !toolchain("emulator_reports_collectives_that_not_every_thread_reaches") {
        return;
    }
    const BODY: &str = r#"
extern "C" __global__ void early_return(const dt_args args) {
    if (threadIdx.x >= 64 && threadIdx.x < 70) return;
    __syncthreads();
}
extern "C" __global__ void split_wave(const dt_args args) {
    float v = (float)threadIdx.x;
    if (threadIdx.x % 64 < 32) v = __shfl_xor(v, 1, 32);
    else __syncthreads();
    ((float*)args.output)[threadIdx.x] = v;
}
extern "C" __global__ void fine(const dt_args args) {
    __syncthreads();
    ((float*)args.output)[threadIdx.x] = __shfl_xor((float)threadIdx.x, 2, 64);
}
"#;
    let lib = snippet("collectives", BODY, &["early_return", "split_wave", "fine"], false);
    let mut out = vec![0f32; 128];
    let args = DtArgs { output: out.as_mut_ptr() as u64, ..DtArgs::default() };
    // SAFETY: the kernels take a dt_args and write at most 128 floats.
    let e = unsafe { lib.launch("early_return", &args, 1, 128, 0) }.expect_err("a barrier that threads 64-69 returned before");
    assert!(e.0.contains("early_return") && e.0.contains("64-69"), "{e}");
    // SAFETY: as above.
    let e = unsafe { lib.launch("split_wave", &args, 1, 128, 0) }.expect_err("lanes at different collectives");
    assert!(e.0.contains("split_wave") && e.0.contains("0-31") && e.0.contains("32-63"), "{e}");
    // A launch that needs more steps than allowed gives up (3 blocks of 128 threads, each
    // started and resumed twice: 1152 steps).
    // SAFETY: as above.
    assert!(!unsafe { lib.launch_limited("fine", &args, 3, 128, 0, 1000) }.unwrap_or_else(|e| panic!("{e}")));
    // The library still runs kernels after an error.
    // SAFETY: as above.
    unsafe { lib.launch("fine", &args, 3, 128, 0) }.unwrap_or_else(|e| panic!("{e}"));
    assert!(out.iter().enumerate().all(|(t, v)| *v == (t ^ 2) as f32));
}

/// `fma_exp(1)` computes every `exp2` of a kernel with the runtime's `dt_fma_exp2` (the HIP build
/// of an approximating kernel otherwise calls `exp2f`): over [-140, 130] its relative error stays
/// below the 7.8e-5 that docs/language.md states, results are finite, arguments below -125 give
/// 2^-125 and above 127 give 2^127 (the clamps), and the error is not that of `exp2f` (the
/// polynomial ran).
#[test]
fn fma_exp2_is_within_its_stated_error() {
    if !toolchain("fma_exp2_is_within_its_stated_error") {
        return;
    }
    let src = "Func out; In A; Var x;
        out[x] = exp2(A[x]);
        out.block(x:256); out.tensorize(x:0); out.num_warps(2); out.fast_math(); out.fma_exp(1); out.compile();";
    let p = dt_core::compile_spec(src).expect("spec checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let k = &kernels[0];
    let (hip, infos) = gpu::emit_file("fma_exp2", Dialect::Hip, &[(k, DType::F32, "dt_fma_exp2_test".to_string())]).expect("emits");
    assert!(hip.contains("= dt_fma_exp2("), "{hip}");
    let symbols: Vec<&str> = infos.iter().map(|i| i.symbol.as_str()).collect();
    let lib = hip_cpu::compile(&hip, &symbols, &build_dir(), "fma_exp2", Target { gfx90a: true }).expect("compiles");
    let n = 27001;
    let a: Vec<f32> = (0..n).map(|i| -140.0 + 0.01 * i as f32).collect();
    let args = dt_core::tensor::Args::default().input("A", dt_core::tensor::Tensor { shape: vec![n], data: a.clone() });
    let bound = dt_core::tensor::bind(&p, p.kernel_by_name("out").expect("kernel"), &args).expect("binds");
    let info = infos.iter().find(|i| i.layouts == gpu::Layouts::Any).expect("kernel for any layout");
    let got = lib.run(info, k, &bound, DType::F32).expect("runs");
    let mut worst = 0.0f64;
    for (x, g) in a.iter().zip(&got.data) {
        let want = (*x as f64).clamp(-125.0, 127.0).exp2();
        let rel = (*g as f64 / want - 1.0).abs();
        assert!(g.is_finite() && rel < 7.8e-5, "dt_fma_exp2({x}) = {g}, 2^{x} = {want}: relative error {rel}");
        worst = worst.max(rel);
    }
    assert!(worst > 1e-6, "a worst relative error of {worst} is exp2f's, not the polynomial's");
}
