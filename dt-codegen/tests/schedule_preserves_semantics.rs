//! `schedule_preserves_semantics`: for every library spec and the specs under `tests/specs/`,
//! random valid schedules at random sizes compute what the reference evaluator computes, both
//! through the kernel-IR interpreter and through the generated CPU C. (The kernel IR has no
//! notion of lanes; `hip_cpu_matches_reference` runs random schedules through the HIP C with
//! 64-lane wavefronts, `gpu_matches_reference` through the CUDA C on a GPU.)
//!
//! Per spec, the file's own schedule and 63 drawn from fixed seeds are compiled into one C
//! library; each of the 200 proptest cases (`PROPTEST_CASES` sets another count) picks one of them and random sizes (1 to 300, primes,
//! sizes next to tile extents), so a failure names the schedule (printed as a complete spec) and
//! the sizes.

mod common;

use common::*;
use dt_codegen::host::CpuLibrary;
use dt_core::algo::Program;
use dt_core::explore::{self, Rng};
use dt_core::kir::Kernel;
use dt_core::DType;
use proptest::prelude::*;
use std::sync::OnceLock;

const SCHEDULES: usize = 64;
const CASES: u32 = 200;

/// Most work (product of every dimension's size) per case, so that big sizes stay quick.
const MAX_WORK: usize = 1 << 19;
/// The interpreter runs tile by tile with no compilation, so it is checked on cases up to this
/// much work (the generated C on all of them).
const MAX_INTERPRETED_WORK: usize = 1 << 14;

struct Drawn {
    spec: String,
    program: Program,
    kernels: Vec<Kernel>,
    dtype: DType,
}

struct Suite {
    drawn: Vec<Drawn>,
    lib: CpuLibrary,
}

fn symbol(k: &Kernel, dtype: DType, i: usize) -> String {
    format!("{}_s{i}", dt_codegen::emit::symbol(k, dtype))
}

fn build_suite(name: &str, rel: &str) -> Suite {
    let t0 = std::time::Instant::now();
    let src = read_spec(rel);
    let program = dt_core::compile_spec(&src).unwrap_or_else(|d| panic!("{rel}: {d:?}"));
    let algorithm = explore::algorithm_text(&src).expect("spec parses");
    let mut rng = Rng::new(0xD7 ^ name.len() as u64);
    let mut drawn = Vec::new();
    for i in 0..SCHEDULES {
        // Schedule 0 is the file's own; the others are drawn.
        let spec = if i == 0 { src.clone() } else { explore::random_spec(&algorithm, &program, &mut rng, &explore::Options::default()) };
        let p = dt_core::compile_spec(&spec).unwrap_or_else(|d| panic!("schedule {i} of {rel} does not check: {d:?}\n{spec}"));
        let kernels = dt_core::lower::lower_all(&p).unwrap_or_else(|e| panic!("schedule {i} of {rel} does not lower: {e}\n{spec}"));
        let types = &p.func(p.kernels[0]).schedule.dtypes;
        let dtype = types[i % types.len()];
        drawn.push(Drawn { spec, program: p, kernels, dtype });
    }
    // Clustered and warp-specialized kernels need CUDA's sm_90: the C goes without them (the
    // interpreter runs them).
    let items: Vec<(&Kernel, DType, String)> = drawn
        .iter()
        .enumerate()
        .flat_map(|(i, d)| d.kernels.iter().filter(|k| !k.cuda_only()).map(move |k| (k, d.dtype, symbol(k, d.dtype, i))))
        .collect();
    let c = dt_codegen::emit::c::emit_file(&format!("schedules of {rel}"), &items).expect("emits");
    let dir =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("schedule_preserves_semantics").join(std::process::id().to_string());
    let lib = dt_codegen::host::compile_with(&c, &dir, name, "-O1").unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{rel}: {SCHEDULES} schedules lowered and compiled in {:.1?}", t0.elapsed());
    Suite { drawn, lib }
}

/// Sizes for every dimension of the program: interesting values, capped to [`MAX_WORK`].
fn draw_sizes(p: &Program, rng: &mut Rng) -> Vec<usize> {
    const SPECIAL: &[usize] = &[1, 2, 3, 5, 7, 13, 31, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300];
    let mut sizes: Vec<usize> =
        (0..p.dims.len()).map(|_| if rng.chance(50) { rng.pick(SPECIAL) } else { 1 + rng.below(300) as usize }).collect();
    while sizes.iter().product::<usize>() > MAX_WORK {
        let (i, _) = sizes.iter().enumerate().max_by_key(|(_, s)| **s).expect("dimensions");
        sizes[i] = (sizes[i] / 2).max(1);
    }
    sizes
}

fn check_case(suite: &Suite, index: usize, size_seed: u64) -> Result<(), TestCaseError> {
    let d = &suite.drawn[index];
    let p = &d.program;
    let mut rng = Rng::new(size_seed);
    let drawn = draw_sizes(p, &mut rng);
    for (ki, &k) in p.kernels.iter().enumerate() {
        let kir = &d.kernels[ki];
        // Within the bounds the kernel was compiled for (a file's own schedule may have some).
        let mut sizes = drawn.clone();
        for (dim, bound) in &kir.bounds {
            sizes[dim.index()] = sizes[dim.index()].min(*bound as usize);
        }
        let args = random_args(p, k, &sizes, d.dtype, &mut rng);
        let want = dt_core::eval::evaluate(p, k, &args, d.dtype).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let bound = dt_core::tensor::bind(p, k, &args).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let reduction_len = sizes.iter().copied().max().unwrap_or(1);
        let context = || format!("schedule {index} ({}), sizes {:?}, kernel `{}`:\n{}", d.dtype, names(p, &sizes), kir.name, d.spec);
        if sizes.iter().product::<usize>() <= MAX_INTERPRETED_WORK {
            let got = dt_core::interp::run(kir, &bound, d.dtype);
            compare(&got, &want, d.dtype, reduction_len, d.dtype != DType::F32)
                .map_err(|e| TestCaseError::fail(format!("interpreter: {e}\n{}", context())))?;
        }
        if kir.cuda_only() {
            continue;
        }
        let got = suite.lib.run(&symbol(kir, d.dtype, index), kir, &bound, d.dtype).map_err(|e| TestCaseError::fail(e.to_string()))?;
        compare(&got, &want, d.dtype, reduction_len, d.dtype != DType::F32)
            .map_err(|e| TestCaseError::fail(format!("CPU C: {e}\n{}", context())))?;
    }
    Ok(())
}

fn names(p: &Program, sizes: &[usize]) -> Vec<String> {
    p.dims.iter().zip(sizes).map(|(d, n)| format!("{}={n}", d.name)).collect()
}

macro_rules! spec_test {
    ($name:ident, $path:expr) => {
        #[test]
        fn $name() {
            static SUITE: OnceLock<Suite> = OnceLock::new();
            let suite = SUITE.get_or_init(|| build_suite(stringify!($name), $path));
            let config = ProptestConfig { cases: cases(CASES), failure_persistence: None, ..ProptestConfig::default() };
            let t0 = std::time::Instant::now();
            proptest!(config, |(index in 0..SCHEDULES, seed in any::<u64>())| {
                check_case(suite, index, seed)?;
            });
            eprintln!("{}: {} cases in {:.1?}", $path, config.cases, t0.elapsed());
        }
    };
}

mod schedule_preserves_semantics {
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
    spec_test!(row_stats, "dt-codegen/tests/specs/row_stats.dt");
    spec_test!(talk_2mm, "dt-codegen/tests/specs/talk_2mm.dt");
    spec_test!(talk_2mm_f16, "dt-codegen/tests/specs/talk_2mm_f16.dt");
    spec_test!(talk_attention, "dt-codegen/tests/specs/talk_attention.dt");
    spec_test!(rows_in_steps_of_one, "dt-codegen/tests/specs/rows_in_steps_of_one.dt");
}
