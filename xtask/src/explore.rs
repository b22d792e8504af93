//! `cargo xtask explore`: schedule search over one kernel of a spec. It draws schedules of the
//! kernel, the spec's own first: near it (its numbers halved or doubled,
//! `dt_core::explore::nearby_spec`), or with `--anywhere` random valid ones
//! (`dt_core::explore::random_spec`: block, tensorize, map, clusters where the GPU has them,
//! warps, stages, register caps, fast math, placements); compiles them several at once; checks
//! each against the
//! reference evaluator on a small case of odd sizes; times the correct ones at the asked shape,
//! on the GPU with the bench's timer (`bench::Timer`), else the generated C on the CPU (a twin
//! that the shape launches, for whole runs or specialized sizes, is checked there against the
//! general kernel); and
//! reports how many run, how their times spread against a reference (a baseline's time given
//! with `--baseline-ms`, else the spec's own schedule), the best schedule as text to paste into
//! the spec (its schedule block, where the spec has one), and a plot.
//!
//! Every outcome is cached under `--cache`, keyed by the generated code of the schedule, the
//! shape, the element type and the device: a rerun with the same arguments takes what an earlier
//! (or interrupted) one measured and goes on from there; a compiler that prints other code for a
//! schedule measures it again.

use crate::bench::Timer;
use dt_codegen::cuda_run::CudaRunner;
use dt_codegen::emit::gpu::{self, Dialect, LaunchInfo};
use dt_core::algo::{FuncId, Program};
use dt_core::explore::{self, Rng};
use dt_core::kir::Kernel;
use dt_core::tensor::Args;
use dt_core::DType;
use std::path::{Path, PathBuf};

pub struct Options {
    pub spec: PathBuf,
    pub kernel: String,
    /// Sizes of the kernel's dimensions, in the order `dims` of the report names them.
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub samples: usize,
    pub seed: u64,
    /// GPU (or CPU) seconds of timed runs per schedule.
    pub budget_s: f64,
    pub cache: PathBuf,
    pub baseline_ms: Option<f64>,
    pub plot: Option<PathBuf>,
    /// Draw schedules near the spec's own (numbers halved or doubled), else anywhere in the
    /// space the property tests draw from.
    pub near: bool,
    /// Seconds after which no more schedules are run: the report covers those that were, and
    /// a rerun (the cache) goes on from there.
    pub time_limit_s: Option<f64>,
}

/// Largest size of a dimension in the correctness check: small, odd, no multiple of a tile; for a
/// kernel that reads through tensor maps, whose rows must be whole 16-byte units, a multiple of
/// 8 that is none of a tile.
const CHECK_SIZE: usize = 77;
const CHECK_SIZE_TENSOR_MAPS: usize = 72;
/// Most multiply-adds (output elements times the reduction) the CPU fallback times.
const CPU_WORK_LIMIT: f64 = 4e9;
/// Draws in a row without a new valid schedule after which a search stops drawing.
const NO_NEW_SCHEDULE_DRAWS: usize = 200;

/// What became of one drawn schedule.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    /// Refused by the checker, the lowering or the printer, or the shape is above its bounds.
    Invalid(String),
    /// Compiled and ran, and its result differs from the reference.
    Wrong(String),
    /// Did not compile or launch.
    Failed(String),
    /// Correct; its median time (ms) at the shape.
    Timed(f64),
}

/// A drawn schedule, before it runs.
struct Drawn {
    schedule: String,
    prepared: Result<Prepared, String>,
}

/// A drawn schedule that checks and lowers: its program, kernel, code, where its outcome is
/// cached, and the outcome if it is.
struct Prepared {
    p: Program,
    fid: FuncId,
    k: Kernel,
    code: String,
    infos: Vec<LaunchInfo>,
    path: PathBuf,
    cached: Option<Outcome>,
}

/// What a backend compiled, ready to load and run.
enum Built {
    Ptx(cudarc::nvrtc::Ptx),
    Cpu(dt_codegen::host::CpuLibrary),
}

struct Sample {
    /// The kernel's schedule statements.
    schedule: String,
    outcome: Outcome,
}

/// Where the schedules run.
enum Backend {
    Gpu { gpu: CudaRunner, timer: Timer },
    Cpu { dir: tempfile::TempDir },
}

/// What a search did: schedules tried, how many ran correctly, how many outcomes came from the
/// cache, how many drawn schedules the compiler refused (read by the tests).
#[derive(Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Summary {
    pub tried: usize,
    pub correct: usize,
    pub cached: usize,
    /// Samples the compiler refused (the spec's own alone can be one).
    pub invalid: usize,
    pub refused: usize,
}

pub fn run(opts: &Options) -> Result<Summary, String> {
    let text = std::fs::read_to_string(&opts.spec).map_err(|e| format!("{}: {e}", opts.spec.display()))?;
    let src = dt_core::diag::SourceFile::new(opts.spec.display().to_string(), text);
    // The whole spec checks first, so that a diagnostic points into the file as written.
    let whole = dt_core::compile_spec(src.text()).map_err(|d| src.render_all(&d))?;
    if whole.kernel_by_name(&opts.kernel).is_none() {
        let names: Vec<&str> = whole.kernels.iter().map(|k| whole.func(*k).name.as_str()).collect();
        return Err(format!("{}: no kernel `{}` (its kernels: {})", opts.spec.display(), opts.kernel, names.join(", ")));
    }
    let own = explore::kernel_spec(src.text(), &opts.kernel).map_err(|d| src.render_all(&d))?;
    let base = dt_core::compile_spec(&own).map_err(|d| {
        format!("{}: the spec reduced to kernel `{}`: {}", opts.spec.display(), opts.kernel, d.first().map_or("", |d| d.message.as_str()))
    })?;
    let kid = base.kernel_by_name(&opts.kernel).ok_or_else(|| format!("{}: no kernel `{}`", opts.spec.display(), opts.kernel))?;
    let dims = base.kernel_dims(kid);
    let names: Vec<&str> = dims.iter().map(|d| base.dim_name(*d)).collect();
    if opts.shape.len() != dims.len() || opts.shape.contains(&0) {
        return Err(format!(
            "--shape gives the sizes of {}, in that order (`N{}`), none of them 0",
            names.join(", "),
            "xN".repeat(names.len().saturating_sub(1))
        ));
    }
    let sizes = |clip: usize| {
        let mut s = vec![1; base.dims.len()];
        for (d, n) in dims.iter().zip(&opts.shape) {
            s[d.index()] = (*n).min(clip);
        }
        s
    };
    let backend = match CudaRunner::new(0) {
        Ok(gpu) => {
            let timer = Timer::new(&gpu)?;
            Backend::Gpu { gpu, timer }
        }
        Err(e) => {
            let work: f64 = opts.shape.iter().map(|n| *n as f64).product();
            if work > CPU_WORK_LIMIT {
                return Err(format!("no GPU ({e}), and {} is too large for the CPU fallback", names.join("x")));
            }
            eprintln!("no GPU ({e}): timing the generated C on the CPU");
            Backend::Cpu { dir: dt_codegen::host::private_dir("dt-explore-").map_err(|e| e.to_string())? }
        }
    };
    let device = backend.device();
    std::fs::create_dir_all(&opts.cache).map_err(|e| format!("{}: {e}", opts.cache.display()))?;
    let mut rng = Rng::new(opts.seed);
    let algorithm = explore::algorithm_text(&own).map_err(|d| format!("{d:?}"))?;
    let max_cluster = match &backend {
        Backend::Gpu { gpu, .. } => gpu.features().max_cluster,
        Backend::Cpu { .. } => 0,
    };
    let draw = explore::Options { max_size: *opts.shape.iter().max().unwrap_or(&1) as u64, max_tile_elements: 1 << 15, max_cluster };
    let mut data = Rng::new(opts.seed ^ 0x5eed);
    let maps = dt_core::lower::lower(&base, kid).is_ok_and(|k| k.takes_tensor_maps());
    let small = explore::random_args(&base, kid, &sizes(if maps { CHECK_SIZE_TENSOR_MAPS } else { CHECK_SIZE }), opts.dtype, &mut data);
    let full = explore::random_args(&base, kid, &sizes(usize::MAX), opts.dtype, &mut data);
    let want = dt_core::eval::evaluate(&base, kid, &small, opts.dtype).map_err(|e| format!("the reference: {e}"))?;
    // Draw every schedule first (cheap), then build the new ones in parallel, then run them in
    // order on the one device.
    // Schedules are told apart by their text and, where they print, by their code (the C
    // backend prints the same code for schedules that differ only in warps, say): none is
    // drawn twice. A drawn schedule that the checker, the lowering or the printer refuses costs
    // no build and no run: it is counted with its reason and another is drawn in its place, so
    // that the samples are valid schedules (the spec's own aside, which is always the first).
    // After a run of draws with no new valid schedule the search stops short.
    let (mut seen_text, mut seen_code) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    let mut drawn: Vec<Drawn> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    'draw: for i in 0..opts.samples.max(1) {
        let mut tries = 0;
        let (text, prepared) = loop {
            let text = match (i, opts.near) {
                (0, _) => own.clone(),
                (_, true) => explore::nearby_spec(&own, &opts.kernel, &mut rng).map_err(|d| format!("{d:?}"))?,
                (_, false) => explore::random_spec(&algorithm, &base, &mut rng, &draw),
            };
            let prepared = prepare(&text, &opts.kernel, opts.dtype, &backend, &full).map(|(p, fid, k, (code, infos))| {
                let key = cache_key(&[&code, &format!("{:?}", opts.shape), opts.dtype.name(), &device]);
                let path = opts.cache.join(format!("{key:016x}.json"));
                Prepared { cached: read_cached(&path), p, fid, k, code, infos, path }
            });
            let new_code = prepared.as_ref().map_or(true, |p| !seen_code.contains(&p.path));
            if seen_text.insert(text.clone()) && new_code {
                match &prepared {
                    Ok(p) => {
                        seen_code.insert(p.path.clone());
                        break (text, prepared);
                    }
                    Err(_) if i == 0 => break (text, prepared),
                    Err(why) => refused.push(first_line(why).to_string()),
                }
            }
            tries += 1;
            if tries == NO_NEW_SCHEDULE_DRAWS {
                eprintln!(
                    "no new valid schedule in {NO_NEW_SCHEDULE_DRAWS} draws: {} drawn, {} refused by the compiler",
                    drawn.len(),
                    refused.len()
                );
                break 'draw;
            }
        };
        drawn.push(Drawn { schedule: schedule_lines(&text, &algorithm), prepared });
    }
    let started = std::time::Instant::now();
    let to_build: Vec<&str> =
        drawn.iter().filter_map(|d| d.prepared.as_ref().ok().filter(|p| p.cached.is_none()).map(|p| p.code.as_str())).collect();
    let mut built = backend.build_all(&to_build).into_iter();
    eprintln!("built {} schedules in {:.0} s", to_build.len(), started.elapsed().as_secs_f64());
    let mut samples: Vec<Sample> = Vec::new();
    let (mut cached, total) = (0, drawn.len());
    for (i, d) in drawn.into_iter().enumerate() {
        let out_of_time = opts.time_limit_s.is_some_and(|t| started.elapsed().as_secs_f64() > t);
        if out_of_time && matches!(&d.prepared, Ok(Prepared { cached: None, .. })) && !samples.is_empty() {
            eprintln!("the time limit ran out: {} of {total} schedules run; a rerun goes on from here", samples.len());
            break;
        }
        let outcome = match d.prepared {
            Err(why) => Outcome::Invalid(why),
            Ok(Prepared { cached: Some(o), .. }) => {
                cached += 1;
                o
            }
            Ok(p) => {
                let o = match built.next().expect("one build per schedule not cached") {
                    Ok(b) => backend.measure(b, (&p.p, p.fid, &p.k, &p.infos), opts.dtype, (&small, &want), &full, opts.budget_s),
                    Err(e) => Outcome::Failed(e),
                };
                // A failure may be the machine's rather than the schedule's: measured again next time.
                if !matches!(o, Outcome::Failed(_)) {
                    write_cached(&p.path, &o)?;
                }
                if let (Outcome::Failed(why), Err(broken)) = (&o, backend.healthy()) {
                    return Err(format!(
                        "schedule {} failed ({}) and left the GPU unusable ({broken}); what was measured is cached, so running again goes on after it:\n{}",
                        i + 1,
                        first_line(why),
                        d.schedule
                    ));
                }
                o
            }
        };
        let schedule = d.schedule;
        let best = samples
            .iter()
            .chain([&Sample { schedule: String::new(), outcome: outcome.clone() }])
            .filter_map(|s| s.ms())
            .fold(f64::INFINITY, f64::min);
        eprintln!(
            "[{}/{}] {} (best {}, {:.0} s)",
            i + 1,
            opts.samples.max(1),
            describe(&outcome),
            if best.is_finite() { format!("{best:.4} ms") } else { "none yet".into() },
            started.elapsed().as_secs_f64()
        );
        samples.push(Sample { schedule, outcome });
    }
    let mut report = report(opts, src.text(), &names, &device, &samples, cached, &refused);
    if samples.len() < total {
        report += &format!("stopped at the time limit after {} of {total} drawn schedules; a rerun goes on from there\n", samples.len());
    }
    println!("{report}");
    if let Some(path) = &opts.plot {
        plot(&samples, reference(opts, &samples), path).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("plot: {}", path.display());
    }
    Ok(Summary {
        tried: samples.len(),
        correct: samples.iter().filter(|s| s.ms().is_some()).count(),
        cached,
        invalid: samples.iter().filter(|s| matches!(s.outcome, Outcome::Invalid(_))).count(),
        refused: refused.len(),
    })
}

impl Sample {
    fn ms(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Timed(ms) => Some(ms),
            _ => None,
        }
    }
}

impl Backend {
    fn device(&self) -> String {
        match self {
            Backend::Gpu { gpu, .. } => crate::bench::gpu_name(gpu),
            Backend::Cpu { .. } => format!("the CPU ({})", std::env::consts::ARCH),
        }
    }

    /// The code this backend compiles for kernel `k` in `dtype`, with the launch parameters of
    /// its kernels (none on the CPU).
    fn code(&self, k: &Kernel, dtype: DType) -> Result<(String, Vec<LaunchInfo>), String> {
        let symbol = dt_codegen::emit::symbol(k, dtype);
        match self {
            Backend::Gpu { gpu, .. } => {
                if !k.runs_on(gpu.features()) {
                    return Err("needs what this GPU lacks (clusters of its size, or sm_90's TMA and wgmma)".into());
                }
                gpu::emit_file("explore", Dialect::Cuda, &[(k, dtype, symbol)]).map_err(|e| e.to_string())
            }
            Backend::Cpu { .. } => {
                dt_codegen::emit::c::emit_file("explore", &[(k, dtype, symbol)]).map(|c| (c, Vec::new())).map_err(|e| e.to_string())
            }
        }
    }

    /// Whether the device still runs work after a failure: a kernel that trapped or read out
    /// of bounds leaves a CUDA context that fails every later call.
    fn healthy(&self) -> Result<(), String> {
        match self {
            Backend::Gpu { gpu, .. } => gpu.stream.synchronize().map_err(|e| e.to_string()),
            Backend::Cpu { .. } => Ok(()),
        }
    }

    /// Compiles `codes`, several at once (NVRTC, or the C compiler), each result in order.
    fn build_all(&self, codes: &[&str]) -> Vec<Result<Built, String>> {
        let arch = match self {
            Backend::Gpu { gpu, .. } => match gpu.arch() {
                Ok(a) => Some(a),
                Err(e) => return codes.iter().map(|_| Err(e.to_string())).collect(),
            },
            Backend::Cpu { .. } => None,
        };
        let dir = match self {
            Backend::Cpu { dir } => Some(dir.path()),
            Backend::Gpu { .. } => None,
        };
        let build = |code: &str| -> Result<Built, String> {
            match (arch, dir) {
                (Some(arch), _) => dt_codegen::cuda_run::compile_ptx(arch, code).map(Built::Ptx).map_err(|e| e.to_string()),
                (None, Some(dir)) => dt_codegen::host::compile(code, dir, &format!("explore_{:016x}", cache_key(&[code])))
                    .map(Built::Cpu)
                    .map_err(|e| e.to_string()),
                (None, None) => Err("no backend".into()),
            }
        };
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<std::sync::Mutex<Option<Result<Built, String>>>> = codes.iter().map(|_| std::sync::Mutex::new(None)).collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(codes.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(code) = codes.get(i) else { break };
                    *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(build(code));
                });
            }
        });
        results.into_iter().map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or_else(|| Err("not built".into()))).collect()
    }

    /// Runs kernel `k`, as built, on the small case (checked against `want`), then times it on
    /// `full` for up to `budget_s` seconds.
    fn measure(
        &self,
        built: Built,
        (p, fid, k, infos): (&Program, FuncId, &Kernel, &[LaunchInfo]),
        dtype: DType,
        (small, want): (&Args, &dt_core::tensor::Tensor),
        full: &Args,
        budget_s: f64,
    ) -> Outcome {
        let bind = |a| dt_core::tensor::bind(p, fid, a).map_err(|e| e.to_string());
        // The rounding the documented precision of dots allows, from the arguments before binding.
        let slack = dt_codegen::reference::rounding_slack(p, fid, k, small, dtype);
        let (small, full) = match (bind(small), bind(full)) {
            (Ok(s), Ok(f)) => (s, f),
            (Err(e), _) | (_, Err(e)) => return Outcome::Invalid(e),
        };
        let approx = dt_codegen::reference::approximate(k, dtype);
        let reduction: usize = k.dims.iter().map(|(d, _)| small.size(*d)).max().unwrap_or(1);
        let check =
            |got: dt_core::tensor::Tensor| dt_codegen::reference::compare_within(&got, want, dtype, reduction, approx, slack.as_ref());
        let symbol = dt_codegen::emit::symbol(k, dtype);
        match self {
            Backend::Gpu { gpu, timer } => {
                let module = match built {
                    Built::Ptx(ptx) => match gpu.load(ptx) {
                        Ok(m) => m,
                        Err(e) => return Outcome::Failed(e.to_string()),
                    },
                    Built::Cpu(_) => return Outcome::Failed("built for the CPU".into()),
                };
                let Some(general) = infos.iter().find(|i| i.symbol == symbol) else { return Outcome::Failed("no kernel".into()) };
                match gpu.run(&module, general, k, &small, dtype) {
                    Ok(got) => {
                        if let Err(e) = check(got) {
                            return Outcome::Wrong(e);
                        }
                    }
                    Err(e) => return Outcome::Failed(e.to_string()),
                }
                let timed = (|| -> Result<Outcome, String> {
                    let staged = gpu.stage(k, &full, dtype).map_err(|e| e.to_string())?;
                    // As the library does: the twin for whole runs or specialized sizes where the launch has them.
                    let info = staged.launch_info(&symbol, infos).ok_or("no kernel")?;
                    let launched = &info.symbol;
                    let f = gpu.function(&module, info).map_err(|e| e.to_string())?;
                    let (ms, _) = timer.time(50, budget_s, || Ok(()), || gpu.launch(&f, info, &staged).map_err(|e| e.to_string()))?;
                    // A twin the small case does not reach is checked against the general kernel at the shape.
                    if *launched != symbol {
                        let twin = gpu.download(&staged).map_err(|e| e.to_string())?;
                        let general = gpu.run(&module, general, k, &full, dtype).map_err(|e| e.to_string())?;
                        let reduction = k.dims.iter().map(|(d, _)| full.size(*d)).max().unwrap_or(1);
                        if let Err(e) = dt_codegen::reference::compare(&twin, &general, dtype, reduction, approx) {
                            return Ok(Outcome::Wrong(format!("`{launched}` against `{symbol}` at the shape: {e}")));
                        }
                    }
                    Ok(Outcome::Timed(ms))
                })();
                timed.unwrap_or_else(Outcome::Failed)
            }
            Backend::Cpu { .. } => {
                let Built::Cpu(lib) = built else { return Outcome::Failed("built for the GPU".into()) };
                match lib.run(&symbol, k, &small, dtype) {
                    Ok(got) => {
                        if let Err(e) = check(got) {
                            return Outcome::Wrong(e);
                        }
                    }
                    Err(e) => return Outcome::Failed(e.to_string()),
                }
                // At least one run; more while within the budget (a slow schedule gets one).
                crate::bench::wall_clock_median(1, 50, budget_s, || {
                    lib.run(&symbol, k, &full, dtype).map(|_| ()).map_err(|e| e.to_string())
                })
                .map_or_else(Outcome::Failed, |(ms, _)| Outcome::Timed(ms))
            }
        }
    }
}

/// Checks, lowers and prints a drawn spec for `backend`: the program, the kernel, its IR and
/// its code, or why the schedule is not valid for the shape of `full`.
#[allow(clippy::type_complexity)]
fn prepare(
    text: &str,
    kernel: &str,
    dtype: DType,
    backend: &Backend,
    full: &Args,
) -> Result<(Program, FuncId, Kernel, (String, Vec<LaunchInfo>)), String> {
    let p = dt_core::compile_spec(text).map_err(|d| d.first().map_or_else(|| "does not check".into(), |d| d.message.clone()))?;
    let fid = p.kernel_by_name(kernel).ok_or("the kernel is gone")?;
    let k = dt_core::lower::lower(&p, fid).map_err(|e| e.to_string())?;
    if !k.dtypes.contains(&dtype) {
        return Err(format!("not built for {dtype}"));
    }
    let bound = dt_core::tensor::bind(&p, fid, full).map_err(|e| e.to_string())?;
    dt_codegen::host::check_bounds(&k, &bound).map_err(|e| e.to_string())?;
    let code = backend.code(&k, dtype)?;
    Ok((p, fid, k, code))
}

/// The schedule statements of a drawn spec: what follows its algorithm.
fn schedule_lines(spec: &str, algorithm: &str) -> String {
    let algo: std::collections::HashSet<&str> = algorithm.lines().map(str::trim).collect();
    spec.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#') && !algo.contains(l)).collect::<Vec<_>>().join("\n")
}

fn describe(o: &Outcome) -> String {
    match o {
        Outcome::Invalid(why) => format!("invalid: {}", first_line(why)),
        Outcome::Wrong(why) => format!("WRONG: {}", first_line(why)),
        Outcome::Failed(why) => format!("failed: {}", first_line(why)),
        Outcome::Timed(ms) => format!("{ms:.4} ms"),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// FNV-1a over the parts, each ended by a zero byte: stable across Rust versions and runs.
fn cache_key(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0]) {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn read_cached(path: &Path) -> Option<Outcome> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let why = || v["why"].as_str().unwrap_or_default().to_string();
    Some(match v["outcome"].as_str()? {
        "timed" => Outcome::Timed(v["ms"].as_f64()?),
        "wrong" => Outcome::Wrong(why()),
        "failed" => Outcome::Failed(why()),
        _ => Outcome::Invalid(why()),
    })
}

fn write_cached(path: &Path, o: &Outcome) -> Result<(), String> {
    let v = match o {
        Outcome::Timed(ms) => serde_json::json!({ "outcome": "timed", "ms": ms }),
        Outcome::Wrong(why) => serde_json::json!({ "outcome": "wrong", "why": why }),
        Outcome::Failed(why) => serde_json::json!({ "outcome": "failed", "why": why }),
        Outcome::Invalid(why) => serde_json::json!({ "outcome": "invalid", "why": why }),
    };
    dt_codegen::host::write_atomically(path, v.to_string().as_bytes())
}

/// The time the others are compared with: the baseline's, else the spec's own schedule's.
fn reference(opts: &Options, samples: &[Sample]) -> Option<(f64, &'static str)> {
    match opts.baseline_ms {
        Some(ms) => Some((ms, "the baseline")),
        None => samples.first().and_then(Sample::ms).map(|ms| (ms, "the spec's own schedule")),
    }
}

fn report(opts: &Options, spec: &str, names: &[&str], device: &str, samples: &[Sample], cached: usize, refused: &[String]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let count = |f: &dyn Fn(&Outcome) -> bool| samples.iter().filter(|s| f(&s.outcome)).count();
    let timed: Vec<(f64, &Sample)> = samples.iter().filter_map(|s| s.ms().map(|ms| (ms, s))).collect();
    let shape: Vec<String> = opts.shape.iter().map(|n| n.to_string()).collect();
    let _ = writeln!(
        out,
        "explore {} `{}`, {} of {}, {} on {device}",
        opts.spec.display(),
        opts.kernel,
        names.join(", "),
        shape.join(" x "),
        opts.dtype
    );
    let _ = writeln!(
        out,
        "schedules tried {}: {} run correctly, {} wrong, {} failed to compile or run, {} invalid (refused by the checker, the lowering or the printer, or bounded below the shape; {} taken from the cache)",
        samples.len(),
        timed.len(),
        count(&|o| matches!(o, Outcome::Wrong(_))),
        count(&|o| matches!(o, Outcome::Failed(_))),
        count(&|o| matches!(o, Outcome::Invalid(_))),
        cached
    );
    if !refused.is_empty() {
        // The reasons, most frequent first.
        let mut reasons: Vec<(usize, &str)> = Vec::new();
        for why in refused {
            match reasons.iter_mut().find(|(_, w)| *w == why.as_str()) {
                Some((n, _)) => *n += 1,
                None => reasons.push((1, why)),
            }
        }
        reasons.sort_by_key(|r| std::cmp::Reverse(r.0));
        let _ = writeln!(out, "drawn and refused by the compiler before any build, in place of a sample: {}, most often:", refused.len());
        for (n, why) in reasons.iter().take(3) {
            let _ = writeln!(out, "  {n} x {why}");
        }
    }
    match &samples[0].outcome {
        Outcome::Timed(ms) => _ = writeln!(out, "the spec's own schedule: {ms:.4} ms"),
        other => _ = writeln!(out, "the spec's own schedule: {}", describe(other)),
    }
    // Against the baseline where one is given, and against the spec's own schedule.
    let own = samples.first().and_then(Sample::ms).map(|ms| (ms, "the spec's own schedule"));
    for (r, what) in opts.baseline_ms.map(|ms| (ms, "the baseline")).into_iter().chain(own) {
        let within = |f: f64| timed.iter().filter(|(ms, _)| *ms <= r * f).count();
        let _ = writeln!(
            out,
            "against {what} ({r:.4} ms): {} within 5%, {} within 10%, {} within 2x, of {} correct",
            within(1.05),
            within(1.10),
            within(2.0),
            timed.len()
        );
    }
    if let Some((ms, best)) = timed.iter().min_by(|a, b| a.0.total_cmp(&b.0)) {
        // As the block that gives it, where the spec schedules the kernel in one.
        let text = dt_core::blocks::as_block(spec, &opts.kernel, &best.schedule);
        let _ = writeln!(out, "the best schedule, {ms:.4} ms:\n{}", text.as_deref().unwrap_or(&best.schedule));
    }
    for (what, kind) in [("wrong", "WRONG"), ("failed", "failed")] {
        if let Some(s) = samples.iter().find(|s| describe(&s.outcome).starts_with(kind)) {
            let _ = writeln!(out, "a schedule that {what} ({}):\n{}", describe(&s.outcome), s.schedule);
        }
    }
    out
}

/// Draws every correct schedule's time over the reference's (log scale), fastest first, with
/// lines at 5%, 10% and 2x, into the SVG at `path`.
fn plot(samples: &[Sample], reference: Option<(f64, &str)>, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let mut times: Vec<f64> = samples.iter().filter_map(Sample::ms).collect();
    times.sort_by(f64::total_cmp);
    let r = reference.map_or_else(|| times.first().copied().unwrap_or(1.0), |(ms, _)| ms);
    let ratios: Vec<f64> = times.iter().map(|t| t / r).collect();
    let (lo, hi) = ratios.iter().fold((0.9f64, 2.2f64), |(a, b), x| (a.min(x * 0.9), b.max(x * 1.1)));
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let what = reference.map_or("the fastest schedule", |(_, what)| what);
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("each correct schedule's time over {what}, fastest first"), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..ratios.len().max(1) as f64, (lo..hi).log_scale())?;
    chart.configure_mesh().disable_x_mesh().x_desc("schedules").y_desc("time / reference").draw()?;
    for (level, colour) in [(1.05, GREEN), (1.10, BLUE), (2.0, RED)] {
        chart
            .draw_series(LineSeries::new([(0.0, level), (ratios.len().max(1) as f64, level)], colour.stroke_width(1)))?
            .label(format!("{level}x"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour));
    }
    chart.draw_series(ratios.iter().enumerate().map(|(i, x)| Circle::new((i as f64 + 0.5, *x), 3, BLACK.filled())))?;
    chart.configure_series_labels().position(SeriesLabelPosition::UpperLeft).background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the CPU fallback (the test machine has no GPU, or the GPU runs it all the same): a
    /// search out of time runs the spec's own schedule and stops; a search without a limit goes
    /// on from there; the spec's own schedule and drawn ones run, the correct ones are timed, and
    /// a rerun takes every outcome from the cache.
    #[test]
    fn a_search_out_of_time_stops_and_a_rerun_goes_on_from_the_cache() {
        let cache = std::env::temp_dir().join(format!("dt-explore-test-{}", std::process::id()));
        let spec = crate::regen::workspace().join("dt-codegen/tests/specs/vadd.dt");
        let src = std::fs::read_to_string(&spec).unwrap();
        let kernel = dt_core::compile_spec(&src).map(|p| p.func(p.kernels[0]).name.clone()).unwrap();
        let opts = Options {
            spec,
            kernel,
            shape: vec![100, 1000],
            dtype: DType::F32,
            samples: 4,
            seed: 3,
            budget_s: 0.01,
            cache: cache.clone(),
            baseline_ms: None,
            plot: Some(cache.join("plot.svg")),
            near: false,
            time_limit_s: Some(0.0),
        };
        let limited = run(&opts).unwrap();
        assert_eq!((limited.tried, limited.cached), (1, 0), "out of time, the spec's own schedule alone runs: {limited:?}");
        let opts = Options { time_limit_s: None, ..opts };
        let first = run(&opts).unwrap();
        assert_eq!(first.tried, 4);
        assert_eq!(first.cached, 1, "the search goes on after the one that ran");
        assert!(first.correct >= 1, "the spec's own schedule runs: {first:?}");
        assert!(cache.join("plot.svg").exists());
        let again = run(&opts).unwrap();
        let measured = std::fs::read_dir(&cache).unwrap().count() - 1;
        assert_eq!((again.correct, again.cached), (first.correct, measured), "a rerun measures nothing again");
        let _ = std::fs::remove_dir_all(&cache);
    }

    /// Near draws that the compiler refuses cost no build: each is counted and another drawn in
    /// its place, so that every sample of a search is a valid schedule (near softmax_4k's own,
    /// where about half the draws do not check), and none is counted as tried.
    #[test]
    fn refused_draws_are_counted_and_replaced_by_valid_ones() {
        let cache = std::env::temp_dir().join(format!("dt-explore-refused-{}", std::process::id()));
        let opts = Options {
            spec: crate::regen::workspace().join("dt-kernels/specs/softmax.dt"),
            kernel: "softmax_4k".into(),
            shape: vec![8, 4096],
            dtype: DType::F32,
            samples: 6,
            seed: 5,
            budget_s: 0.01,
            cache: cache.clone(),
            baseline_ms: None,
            plot: None,
            near: true,
            time_limit_s: None,
        };
        let s = run(&opts).unwrap();
        let _ = std::fs::remove_dir_all(&cache);
        // (The C backend prints one code for many of these schedules: fewer than 6 are new.)
        assert!(s.tried >= 2 && s.invalid == 0, "{s:?}");
        assert!(s.refused > 0, "some near draws are refused: {s:?}");
    }

    /// Schedules near softmax's own differ from it in a number or two and mostly check.
    #[test]
    fn nearby_schedules_change_numbers_and_mostly_check() {
        let src = std::fs::read_to_string(crate::regen::workspace().join("dt-kernels/specs/softmax.dt")).unwrap();
        let own = explore::kernel_spec(&src, "softmax_4k").unwrap();
        let mut rng = Rng::new(5);
        let drawn: Vec<String> = (0..20).map(|_| explore::nearby_spec(&own, "softmax_4k", &mut rng).unwrap()).collect();
        assert!(drawn.iter().all(|d| d != &own && d.lines().count() == own.lines().count()));
        let checking = drawn.iter().filter(|d| dt_core::compile_spec(d).is_ok()).count();
        assert!(checking >= 10, "{checking} of 20 check");
    }

    /// Schedules near a warp-specialized matmul class keep its coupled numbers together (tile
    /// and block, warps and rows, columns in multiples of 64): most of them build for CUDA, the
    /// others asking for more stages than fit. `mm_90a_m16_split`'s 16 stages and its cluster's
    /// partial sums already fill the shared memory, so that most moves there overflow it.
    #[test]
    fn schedules_near_a_warp_specialized_class_mostly_build() {
        let src = std::fs::read_to_string(crate::regen::workspace().join("dt-kernels/specs/matmul.dt")).unwrap();
        for (class, least) in [("mm_90a", 24), ("mm_90a_1k", 24), ("mm_90a_m16_split", 10)] {
            let own = explore::kernel_spec(&src, class).unwrap();
            let mut rng = Rng::new(7);
            let drawn: Vec<String> = (0..40).map(|_| explore::nearby_spec(&own, class, &mut rng).unwrap()).collect();
            let builds = |text: &String| {
                let Ok(p) = dt_core::compile_spec(text) else { return false };
                let Ok(k) = dt_core::lower::lower(&p, p.kernel_by_name(class).expect("the class")) else { return false };
                gpu::emit_kernel(&k, DType::F16, &dt_codegen::emit::symbol(&k, DType::F16), Dialect::Cuda, gpu::Layouts::Any).is_ok()
            };
            let built = drawn.iter().filter(|d| builds(d)).count();
            assert!(built >= least, "{class}: {built} of 40 near draws build");
        }
    }

    #[test]
    fn outcomes_survive_the_cache() {
        let path = std::env::temp_dir().join(format!("dt-explore-outcome-{}.json", std::process::id()));
        for o in [Outcome::Timed(0.25), Outcome::Wrong("element 3".into()), Outcome::Failed("x".into()), Outcome::Invalid("y".into())] {
            write_cached(&path, &o).unwrap();
            assert_eq!(read_cached(&path), Some(o));
        }
        let _ = std::fs::remove_file(&path);
    }
}
