//! On an NVIDIA GPU: the generated CUDA C of every library spec and test spec, under its own
//! schedule and under random valid schedules, for every kernel and element type, computes what
//! the reference evaluator computes, at random sizes (1, primes, non-multiples of every tile).
//! Without a GPU it says so and passes (CI has none; run it on the GPU machine).
//!
//! `DT_GPU_RANDOM_SCHEDULES`, `DT_GPU_SIZE_DRAWS` and `DT_GPU_MAX_ELEMENTS` override the counts
//! below (the sanitizer sweep, `scripts/sanitize.sh`, runs each spec's own schedule only, at
//! small sizes, so that every kernel the compiler builds runs under each tool in minutes).

mod common;

use common::*;
use dt_codegen::cuda_run::CudaRunner;
use dt_codegen::emit::gpu::{self, Dialect};
use dt_core::explore::{self, Rng};

/// Random schedules per spec, besides its own.
const RANDOM_SCHEDULES: usize = 6;
/// Size draws per (schedule, kernel, dtype).
const SIZE_DRAWS: usize = 3;
/// Most elements of all sizes multiplied (the iteration space of a draw).
const MAX_ELEMENTS: usize = 1 << 22;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn draw_sizes(p: &dt_core::algo::Program, rng: &mut Rng, max_elements: usize) -> Vec<usize> {
    // Multiples of 8 that no tile divides, too, so that 16-byte copies meet partial tiles.
    const SPECIAL: &[usize] = &[1, 2, 3, 7, 8, 13, 24, 31, 63, 65, 127, 129, 136, 257, 264, 300, 520, 1000, 1025];
    let mut sizes: Vec<usize> =
        (0..p.dims.len()).map(|_| if rng.chance(60) { rng.pick(SPECIAL) } else { 1 + rng.below(600) as usize }).collect();
    while sizes.iter().product::<usize>() > max_elements {
        let (i, _) = sizes.iter().enumerate().max_by_key(|(_, s)| **s).expect("dims");
        sizes[i] = (sizes[i] / 2).max(1);
    }
    sizes
}

/// The clustered test specs (`dt-codegen/tests/cluster/*.dt`), as paths from the workspace root.
fn cluster_specs() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(workspace().join("dt-codegen/tests/cluster"))
        .expect("dt-codegen/tests/cluster")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".dt"))
        .collect();
    names.sort();
    names.into_iter().map(|n| format!("dt-codegen/tests/cluster/{n}")).collect()
}

#[test]
fn cuda_matches_reference_evaluator() {
    let gpu = match CudaRunner::new(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("skipped: {e} (run this test on a machine with an NVIDIA GPU)");
            return;
        }
    };
    let mut failures = Vec::new();
    let mut cases = 0;
    let (random_schedules, size_draws) = (env_or("DT_GPU_RANDOM_SCHEDULES", RANDOM_SCHEDULES), env_or("DT_GPU_SIZE_DRAWS", SIZE_DRAWS));
    let max_elements = env_or("DT_GPU_MAX_ELEMENTS", MAX_ELEMENTS);
    // Every kernel instance (symbol, twins included) that ran at least once.
    let mut ran = std::collections::BTreeSet::new();
    // DT_GPU_SPECS=a,b runs only the specs whose path contains one of the names.
    let only: Vec<String> = std::env::var("DT_GPU_SPECS").map(|s| s.split(',').map(str::to_string).collect()).unwrap_or_default();
    // The clustered test specs, which only CUDA runs, besides those every backend runs.
    let specs = SPECS.iter().map(|s| s.to_string()).chain(cluster_specs());
    for rel in specs.filter(|r| only.is_empty() || only.iter().any(|o| r.contains(o.as_str()))) {
        let rel = rel.as_str();
        let src = read_spec(rel);
        let base = dt_core::compile_spec(&src).expect("spec checks");
        let algorithm = explore::algorithm_text(&src).expect("spec parses");
        let mut rng = Rng::new(0x6A5 + rel.len() as u64);
        let mut specs = vec![src.clone()];
        let opts = explore::Options { max_size: 2048, max_tile_elements: 1 << 13, max_cluster: 0 };
        specs.extend((0..random_schedules).map(|_| explore::random_spec(&algorithm, &base, &mut rng, &opts)));
        for (si, spec) in specs.iter().enumerate() {
            let p = dt_core::compile_spec(spec).expect("schedule checks");
            let kernels = dt_core::lower::lower_all(&p).expect("lowers");
            let items = dt_codegen::emit::items(&kernels);
            let (cuda, infos) = match gpu::emit_file(rel, Dialect::Cuda, &items) {
                Ok(x) => x,
                Err(e) => {
                    // Schedules whose tiles exceed shared memory are refused by the emitter.
                    eprintln!("{rel} schedule {si}: not emitted: {e}");
                    continue;
                }
            };
            let module = gpu.compile(&cuda).unwrap_or_else(|e| panic!("{rel} schedule {si}: {e}\n{spec}"));
            for info in &infos {
                let (k, dtype, _) = item_of(&items, |(_, _, s)| s.as_str(), info);
                if !k.runs_on(gpu.features()) {
                    eprintln!("{rel} schedule {si}: kernel {} skipped: this GPU has no clusters of its size, or no sm_90 for a warp-specialized kernel", k.name);
                    continue;
                }
                let fid = p.kernel_by_name(&k.name).expect("kernel");
                for _ in 0..size_draws {
                    let mut sizes = draw_sizes(&p, &mut rng, max_elements);
                    // A kernel compiled for a bound runs only within it.
                    for (d, b) in &k.bounds {
                        sizes[d.index()] = sizes[d.index()].min(*b as usize);
                    }
                    sizes_for(&mut sizes, k, info);
                    let args = random_args(&p, fid, &sizes, *dtype, &mut rng);
                    let want = dt_core::eval::evaluate(&p, fid, &args, *dtype).expect("evaluates");
                    let bound = dt_core::tensor::bind(&p, fid, &args).expect("binds");
                    cases += 1;
                    ran.insert(format!("{rel} {}", info.symbol));
                    let reduction_len = sizes.iter().copied().max().unwrap_or(1);
                    match gpu.run(&module, info, k, &bound, *dtype) {
                        Ok(got) => {
                            let slack = rounding_slack(&p, fid, k, &args, *dtype);
                            if let Err(e) = compare_within(&got, &want, *dtype, reduction_len, approximate(k, *dtype), slack.as_ref()) {
                                failures.push(format!("{rel} schedule {si} kernel {} {dtype} sizes {:?}: {e}\n{spec}", k.name, sizes));
                            }
                        }
                        Err(e) => {
                            // Printed now too: a launch that fails takes the context with it, so the
                            // next compile or launch panics before the summary.
                            let failure = format!("{rel} schedule {si} kernel {} {dtype} sizes {:?}: {e}", k.name, sizes);
                            eprintln!("{failure}");
                            failures.push(failure);
                        }
                    }
                }
            }
        }
        eprintln!("{rel}: done ({cases} cases so far, {} failures)", failures.len());
    }
    assert!(failures.is_empty(), "{} of {cases} GPU cases failed:\n{}", failures.len(), failures.join("\n---\n"));
    eprintln!("{cases} GPU cases over {} kernel instances match the reference evaluator", ran.len());
}

/// On an NVIDIA GPU, with `--ignored`: the library matmul at 4096 x 4096 x 4096 in every element
/// type, wall time per launch (median of 10 after a warm-up) and TFLOP/s. A rough figure for the
/// GPU machine; `cargo xtask bench` is the measurement.
#[test]
#[ignore]
fn cuda_matmul_timing() {
    let Ok(gpu) = CudaRunner::new(0) else {
        eprintln!("skipped: no GPU");
        return;
    };
    let rel = "dt-kernels/specs/matmul.dt";
    let p = dt_core::compile_spec(&read_spec(rel)).expect("spec checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let n = 4096usize;
    for k in &kernels {
        let fid = p.kernel_by_name(&k.name).expect("kernel");
        for dtype in &k.dtypes {
            let items = vec![(k, *dtype, dt_codegen::emit::symbol(k, *dtype))];
            let (cuda, infos) = gpu::emit_file(rel, Dialect::Cuda, &items).expect("emits");
            let module = gpu.compile(&cuda).expect("compiles");
            let mut rng = Rng::new(7);
            // First a check at sizes that are multiples of 8 but of no tile.
            let sizes = [264, 200, 328];
            let args = random_args(&p, fid, &sizes, *dtype, &mut rng);
            let want = dt_core::eval::evaluate(&p, fid, &args, *dtype).expect("evaluates");
            let bound = dt_core::tensor::bind(&p, fid, &args).expect("binds");
            let got = gpu.run(&module, &infos[0], k, &bound, *dtype).expect("runs");
            compare(&got, &want, *dtype, 328, approximate(k, *dtype)).unwrap_or_else(|e| panic!("{} {dtype} sizes {sizes:?}: {e}", k.name));
            let args = random_args(&p, fid, &[n; 3], *dtype, &mut rng);
            let bound = dt_core::tensor::bind(&p, fid, &args).expect("binds");
            let staged = gpu.stage(k, &bound, *dtype).expect("stages");
            let f = gpu.function(&module, &infos[0]).expect("function");
            gpu.launch(&f, &infos[0], &staged).expect("launch");
            gpu.download(&staged).expect("runs");
            let mut times = Vec::new();
            for _ in 0..10 {
                let t = std::time::Instant::now();
                gpu.launch(&f, &infos[0], &staged).expect("launch");
                gpu.stream.synchronize().expect("sync");
                times.push(t.elapsed().as_secs_f64());
            }
            times.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
            let t = times[times.len() / 2];
            eprintln!("{} {dtype} {n}^3: {:.3} ms, {:.1} TFLOP/s", k.name, t * 1e3, 2.0 * (n as f64).powi(3) / t / 1e12);
        }
    }
}
