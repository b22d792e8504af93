//! `cargo xtask bench`: times each library kernel on the GPU at a fixed set of shapes, next to
//! what a user would otherwise pick (cuBLAS for matmul, a device-to-device copy of the same bytes
//! for memory-bound ops, and the torch / torch.compile / Triton / Liger baselines of
//! `bench/baselines.py` where `python3` has torch and triton), all in one process tree. Beside
//! its own copy it sets the copy that `bench/baselines.py` times in its process, and compares
//! DT with the best baseline both as timed and as multiples of each process's copy.
//!
//! Each time is the median of CUDA-event-timed runs after warm-up, queued back to back behind a
//! GPU spin as `bench/baselines.py` times its baselines ([`Timer`]); memory-bound ops flush L2
//! before every run, outside the timed region ([`flush_l2`], as `bench/baselines.py` does). A run
//! count below the asked-for repetitions means a single run was so slow that the per-row time
//! budget cut it short; the table says so.

use crate::results::{self, Progress, Row, DT_COPY};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use dt_codegen::cuda_run::{CudaRunner, Staged};
use dt_codegen::emit::gpu::{self, Dialect, LaunchInfo};
use dt_core::explore::Rng;
use dt_core::kir::Kernel;
use dt_core::tensor::{Args, Tensor};
use dt_core::DType;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct Options {
    pub ops: Vec<String>,
    pub dtypes: Vec<String>,
    pub json: Option<PathBuf>,
    pub reps: usize,
    /// Seconds of GPU time one row may spend on its DT runs.
    pub budget_s: f64,
    /// Baselines of bench/baselines.py to run (empty: all of them).
    pub baselines: Vec<String>,
    /// Shapes to run, as [`Job::shape_text`] writes them without " causal" (empty: all).
    pub shapes: Vec<String>,
    /// A previous run's JSON: its finished rows and baselines are taken from it, the rest
    /// measured, and the result written back to it (unless `json` names another file).
    pub resume: Option<PathBuf>,
    /// Seconds the whole run may take: rows not started by then are listed as not run.
    pub total_budget_s: Option<f64>,
    /// Also write a results page (Markdown: machine, command, table, every baseline) here.
    pub markdown: Option<PathBuf>,
    /// Also draw the rows here (`<op>.svg` per op).
    pub plot: Option<PathBuf>,
}

impl Options {
    /// Where the rows are kept as they finish.
    fn json_path(&self) -> Option<&Path> {
        self.json.as_deref().or(self.resume.as_deref())
    }
}

#[derive(Clone, Debug)]
struct Job {
    op: &'static str,
    dtype: DType,
    shape: Vec<usize>,
    causal: bool,
}

impl Job {
    fn memory_bound(&self) -> bool {
        matches!(self.op, "softmax" | "layernorm" | "dyt")
    }
    fn spec(&self) -> &'static str {
        self.op
    }
    fn kernel(&self) -> &'static str {
        match (self.op, self.causal) {
            ("mm_leaky_relu", _) => "out",
            ("matmul", _) => "mm",
            ("attention", true) => "attention_causal",
            (op, _) => op,
        }
    }
    fn shape_text(&self) -> String {
        let s: Vec<String> = self.shape.iter().map(|n| n.to_string()).collect();
        format!("{}{}", s.join("x"), if self.causal { " causal" } else { "" })
    }
    /// Floating-point operations (compute-bound ops) of one run.
    fn flops(&self) -> f64 {
        let s: Vec<f64> = self.shape.iter().map(|&n| n as f64).collect();
        match self.op {
            "matmul" | "mm_leaky_relu" => 2.0 * s[0] * s[1] * s[2],
            "attention" => 4.0 * s[0] * s[1] * s[2] * s[2] * s[3] / if self.causal { 2.0 } else { 1.0 },
            _ => 0.0,
        }
    }
    /// Bytes read once plus bytes written once.
    fn bytes(&self) -> f64 {
        let e = self.dtype.size_bytes() as f64;
        let s: Vec<f64> = self.shape.iter().map(|&n| n as f64).collect();
        match self.op {
            "softmax" => 2.0 * s[0] * s[1] * e,
            "layernorm" | "dyt" => (2.0 * s[0] * s[1] + 2.0 * s[1]) * e,
            "matmul" | "mm_leaky_relu" => (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]) * e,
            _ => 4.0 * s[0] * s[1] * s[2] * s[3] * e,
        }
    }
}

/// Each op the bench runs, the element types it runs it in, and how many sizes its shape has.
const OPS: &[(&str, &[DType], usize)] = &[
    ("matmul", &[DType::F16, DType::BF16, DType::F32], 3),
    ("mm_leaky_relu", &[DType::F16, DType::BF16, DType::F32], 3),
    ("softmax", &[DType::F16, DType::BF16, DType::F32], 2),
    ("layernorm", &[DType::F16, DType::BF16, DType::F32], 2),
    ("dyt", &[DType::F16, DType::BF16, DType::F32], 2),
    ("attention", &[DType::F16, DType::BF16], 4),
];

/// The fixed list: every op at its shapes, in each of its element types.
fn jobs() -> Vec<Job> {
    let mm: &[&[usize]] = &[
        &[512, 512, 512],
        &[1024, 1024, 1024],
        &[4096, 4096, 4096],
        &[8192, 8192, 8192],
        &[4096, 11008, 4096],
        &[1000, 3000, 77],
        &[16, 4096, 4096],
        // Few rows and many columns (a batch of tokens through a projection): the large class's
        // 128 x 256 tiles would make 16 programs of it (decision 0044's classes serve it).
        &[128, 4096, 4096],
    ];
    // 256x262144: rows up to 2^18 columns, in bytes a large copy (128 MiB in 16-bit types).
    let rows: &[&[usize]] = &[&[4096, 1024], &[4096, 4096], &[4096, 16384], &[8192, 1000], &[128, 65536], &[65536, 4096], &[256, 262144]];
    let att: &[(&[usize], bool)] = &[
        (&[4, 32, 1024, 64], false),
        (&[4, 32, 4096, 64], false),
        (&[4, 32, 4096, 64], true),
        (&[4, 32, 4096, 128], false),
        (&[4, 32, 4096, 128], true),
        (&[2, 16, 16384, 128], true),
        (&[8, 16, 1000, 80], false),
    ];
    let mut out = Vec::new();
    for &(op, dtypes, arity) in OPS {
        let shapes: Vec<(&[usize], bool)> = match arity {
            3 => mm.iter().map(|s| (*s, false)).collect(),
            2 => rows.iter().map(|s| (*s, false)).collect(),
            _ => att.to_vec(),
        };
        for &dtype in dtypes {
            for &(shape, causal) in &shapes {
                out.push(Job { op, dtype, shape: shape.to_vec(), causal });
            }
        }
    }
    out
}

/// The jobs `opts` selects: those of the fixed list of the selected ops, element types and
/// shapes; and for a `--shape` that no job of a selected op has, that shape for each selected op
/// whose shape has as many sizes (`RxC` the row ops, `MxNxK` the matmuls, `BxHxSxD` attention,
/// causal and not), in the op's element types.
fn selected_jobs(opts: &Options) -> Result<Vec<Job>, String> {
    let op_selected = |op: &str| opts.ops.is_empty() || opts.ops.iter().any(|o| o == op);
    let dtype_selected = |d: DType| opts.dtypes.is_empty() || opts.dtypes.iter().any(|x| x == d.name());
    let listed = jobs();
    let shape_of = |j: &Job| j.shape_text().trim_end_matches(" causal").to_string();
    let mut out: Vec<Job> = listed
        .iter()
        .filter(|j| op_selected(j.op) && dtype_selected(j.dtype))
        .filter(|j| opts.shapes.is_empty() || opts.shapes.contains(&shape_of(j)))
        .cloned()
        .collect();
    // Each shape once, in the order given.
    let off_list = opts.shapes.iter().enumerate().filter(|&(i, t)| !opts.shapes[..i].contains(t)).map(|(_, t)| t);
    let off_list = off_list.filter(|t| !listed.iter().any(|j| op_selected(j.op) && &shape_of(j) == *t));
    for text in off_list {
        let shape: Vec<usize> = text
            .split('x')
            .map(|n| n.parse::<usize>().ok().filter(|&n| n > 0))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("--shape {text}: expected sizes above 0 joined by `x`, such as 128x65536"))?;
        let fits: Vec<&(&str, &[DType], usize)> = OPS.iter().filter(|(op, _, arity)| *arity == shape.len() && op_selected(op)).collect();
        if fits.is_empty() {
            return Err(format!("--shape {text}: no selected op takes a shape of {} sizes", shape.len()));
        }
        for &&(op, dtypes, arity) in &fits {
            for &dtype in dtypes.iter().filter(|&&d| dtype_selected(d)) {
                for causal in if arity == 4 { &[false, true][..] } else { &[false][..] } {
                    out.push(Job { op, dtype, shape: shape.clone(), causal: *causal });
                }
            }
        }
    }
    Ok(out)
}

fn random(rng: &mut Rng, n: usize, dtype: DType) -> Vec<f32> {
    (0..n).map(|_| dtype.round(((rng.below(1 << 20) as f32) / (1 << 20) as f32 - 0.5) * 2.0)).collect()
}

fn args(job: &Job, rng: &mut Rng) -> Args {
    let s = &job.shape;
    let t = |shape: Vec<usize>, rng: &mut Rng| {
        let n = shape.iter().product();
        Tensor { shape, data: random(rng, n, job.dtype) }
    };
    match job.op {
        "matmul" | "mm_leaky_relu" => Args::default().input("A", t(vec![s[0], s[2]], rng)).input("B", t(vec![s[2], s[1]], rng)),
        "softmax" => Args::default().input("A", t(vec![s[0], s[1]], rng)),
        "layernorm" => Args::default()
            .input("X", t(vec![s[0], s[1]], rng))
            .input("W", t(vec![s[1]], rng))
            .input("B", t(vec![s[1]], rng))
            .scalar("eps", 1e-5),
        "dyt" => Args::default()
            .input("X", t(vec![s[0], s[1]], rng))
            .input("W", t(vec![s[1]], rng))
            .input("B", t(vec![s[1]], rng))
            .scalar("alpha", 0.5),
        _ => {
            let shape = vec![s[0], s[1], s[2], s[3]];
            Args::default().input("Q", t(shape.clone(), rng)).input("K", t(shape.clone(), rng)).input("V", t(shape, rng))
        }
    }
}

/// A spec lowered for the bench: its program and kernels.
struct Lowered {
    program: dt_core::algo::Program,
    kernels: Vec<Kernel>,
}

fn lower(spec: &str) -> Result<Lowered, String> {
    let path = crate::regen::workspace().join(format!("dt-kernels/specs/{spec}.dt"));
    let src = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let program = dt_core::compile_spec(&src).map_err(|d| format!("{spec}: {d:?}"))?;
    let kernels = dt_core::lower::lower_all(&program).map_err(|e| e.to_string())?;
    Ok(Lowered { program, kernels })
}

/// One kernel of a spec, for one element type, compiled for the GPU with its twins: a module of
/// its own, built the first time a row runs it. A spec's whole file (every class and type) takes
/// NVRTC and the driver most of a minute for attention; the printed code of each kernel is the
/// same either way.
struct Built {
    infos: Vec<LaunchInfo>,
    module: Arc<cudarc::driver::CudaModule>,
}

fn build(gpu: &CudaRunner, spec: &str, kernel: &Kernel, dtype: DType, symbol: &str) -> Result<Built, String> {
    let (cuda, infos) = gpu::emit_file(spec, Dialect::Cuda, &[(kernel, dtype, symbol.to_string())]).map_err(|e| e.to_string())?;
    let module = gpu.compile(&cuda).map_err(|e| e.to_string())?;
    Ok(Built { infos, module })
}

/// Times launches as `bench/baselines.py` times the baselines, so that the two compare: after
/// warm-up, every run is queued back to back (`before`, untimed, then `run` between its own pair
/// of events) behind a kernel that keeps the GPU busy while the host queues them, so no host time
/// shows inside a timed region. That is checked: where the GPU reached the first run before the
/// host had queued the last, the runs are queued again behind a longer spin. (Waiting for each
/// run instead measures short rows faster than queueing does, docs/decisions/0002-bench-timing.md.)
pub(crate) struct Timer {
    stream: Arc<CudaStream>,
    spin: CudaFunction,
}

/// The longest spin [`Timer`] queues runs behind.
const MAX_SPIN_NS: u64 = 1_000_000_000;

/// A kernel of one thread that returns `ns` nanoseconds after it starts.
const SPIN_SOURCE: &str = r#"
extern "C" __global__ void dt_bench_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
"#;

impl Timer {
    pub(crate) fn new(gpu: &CudaRunner) -> Result<Timer, String> {
        let module = gpu.compile(SPIN_SOURCE).map_err(|e| e.to_string())?;
        let spin = module.load_function("dt_bench_spin").map_err(|e| e.to_string())?;
        Ok(Timer { stream: gpu.stream.clone(), spin })
    }

    /// Median of event-timed runs of `run`, with `before` (untimed) ahead of each: `reps` of
    /// them, fewer (at least 3) where one run (timed once, alone) times `reps` would spend more
    /// than `budget_s` of GPU time.
    pub(crate) fn time(
        &self,
        reps: usize,
        budget_s: f64,
        mut before: impl FnMut() -> Result<(), String>,
        mut run: impl FnMut() -> Result<(), String>,
    ) -> Result<(f64, usize), String> {
        let stream = &self.stream;
        let ctx = stream.context();
        let e = |x: cudarc::driver::DriverError| x.to_string();
        let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        for _ in 0..2 {
            run()?;
        }
        before()?;
        let (start, end) = (ctx.new_event(timing).map_err(e)?, ctx.new_event(timing).map_err(e)?);
        start.record(stream).map_err(e)?;
        run()?;
        end.record(stream).map_err(e)?;
        end.synchronize().map_err(e)?;
        let once = start.elapsed_ms(&end).map_err(e)? as f64;
        let n = reps.min(((budget_s * 1000.0 / once.max(1e-6)) as usize).max(3)).max(1);
        let events: Vec<_> = (0..2 * n).map(|_| ctx.new_event(timing)).collect::<Result<_, _>>().map_err(e)?;
        // Long enough for the host to queue every run: a spin per run plus a base, capped at MAX_SPIN_NS.
        let mut ns: u64 = ((n as u64) * 100_000 + 1_000_000).min(MAX_SPIN_NS);
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        loop {
            let mut spin = stream.launch_builder(&self.spin);
            spin.arg(&ns);
            // SAFETY: the spin kernel takes one u64 by value and touches no memory.
            unsafe { spin.launch(cfg) }.map_err(e)?;
            for pair in events.chunks(2) {
                before()?;
                pair[0].record(stream).map_err(e)?;
                run()?;
                pair[1].record(stream).map_err(e)?;
            }
            // Where the first run had started before the host had queued the last, the GPU may
            // have waited for the host inside a timed region: queue them all again behind a
            // longer spin.
            let caught_up = events[0].try_is_complete().map_err(e)?;
            stream.synchronize().map_err(e)?;
            if !caught_up {
                break;
            }
            if ns >= MAX_SPIN_NS {
                eprint!("(the GPU reached the first run before the host had queued the last, even behind the longest spin: times may hold host gaps) ");
                break;
            }
            ns = (ns * 4).min(MAX_SPIN_NS);
        }
        let mut times: Vec<f64> =
            events.chunks(2).map(|p| p[0].elapsed_ms(&p[1]).map(|ms| ms as f64)).collect::<Result<_, _>>().map_err(e)?;
        times.sort_by(|a, b| a.total_cmp(b));
        Ok((times[times.len() / 2], times.len()))
    }
}

/// Median wall-clock time (ms) of runs of `run` on the CPU, and their count: at least
/// `min_runs`, more up to `reps` while within `budget_s` seconds.
pub(crate) fn wall_clock_median(
    min_runs: usize,
    reps: usize,
    budget_s: f64,
    mut run: impl FnMut() -> Result<(), String>,
) -> Result<(f64, usize), String> {
    let (mut times, start) = (Vec::new(), std::time::Instant::now());
    while times.len() < min_runs.max(1) || (times.len() < reps && start.elapsed().as_secs_f64() < budget_s) {
        let t = std::time::Instant::now();
        run()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], times.len()))
}

/// The size of the reference copy for `half` bytes each way: the nearest multiple of 4 KiB (at
/// least 4 KiB). The driver's device-to-device copy is markedly slower for a size off such a
/// multiple (docs/decisions/0002-bench-timing.md), and the bytes of layernorm and DyT (their
/// weights included) are off one by a few KiB; a few KiB of megabytes change the copy's work by
/// under 0.1%.
fn copy_bytes(half: f64) -> usize {
    const PAGE: usize = 4096;
    (((half / PAGE as f64).round() as usize).max(1)) * PAGE
}

/// Queues what empties the L2 cache before a timed run: every line kept at evict-last priority
/// back to normal (`cuCtxResetPersistingL2Cache`, ordered with the stream's work), then a write of
/// `buf` (256 MiB). Without the reset, a kernel that loads with evict-last hints (torch.compile's
/// reductions do) keeps its input in L2 through the writes, and the next kernel to read that
/// tensor starts warm: on the H100 a copy of a tensor that torch.compile's softmax had just read
/// ran markedly faster than cold (docs/decisions/0002-bench-timing.md).
fn flush_l2(stream: &Arc<CudaStream>, buf: &mut CudaSlice<u8>) -> Result<(), String> {
    stream.context().bind_to_thread().map_err(|e| e.to_string())?;
    // SAFETY: a driver call without arguments, on the context just bound to this thread.
    let rc = unsafe { cudarc::driver::sys::cuCtxResetPersistingL2Cache() };
    // A GPU without L2 eviction priorities (before sm_80) has nothing to reset.
    if rc != cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_SUPPORTED {
        rc.result().map_err(|e| format!("resetting L2 priorities: {e}"))?;
    }
    stream.memset_zeros(buf).map_err(|e| e.to_string())
}

pub fn run(opts: &Options) -> Result<(), String> {
    let selected = selected_jobs(opts)?;
    let gpu = match CudaRunner::new(0) {
        Ok(g) => g,
        Err(e) => {
            println!("no GPU ({e}): benchmarking the CPU fallback (the generated C) instead, at the shapes it can run in seconds");
            return cpu_bench(&selected, opts);
        }
    };
    let previous = match &opts.resume {
        Some(path) if path.exists() => results::from_json(path)?,
        _ => Vec::new(),
    };
    let stream = gpu.stream.clone();
    let mut flush: CudaSlice<u8> = stream.alloc_zeros(256 << 20).map_err(|e| e.to_string())?;
    let mut lowered: HashMap<&str, Lowered> = HashMap::new();
    let mut built: HashMap<(&str, String), Built> = HashMap::new();
    let mut rows = Vec::new();
    let mut rng = Rng::new(11);
    let blas = CudaBlas::new(stream.clone()).map_err(|e| e.to_string())?;
    let timer = Timer::new(&gpu)?;
    let mut progress = Progress::new(selected.len());
    let machine = machine(&gpu);
    for (i, job) in selected.iter().enumerate() {
        eprint!("[{}/{}] {} {} {} ... ", i + 1, selected.len(), job.op, job.shape_text(), job.dtype);
        let _ = std::io::stderr().flush();
        // The same inputs whether the row is measured or not, so a resumed run draws what a
        // whole one does.
        let args = args(job, &mut rng);
        let mut row = Row { op: job.op.into(), shape: job.shape_text(), dtype: job.dtype.name().into(), ..Default::default() };
        if let Some(done) = previous.iter().find(|r| r.is(job.op, &job.shape_text(), job.dtype.name()) && r.measured()) {
            rows.push(done.clone());
            eprintln!("taken from {} ({})", opts.resume.as_deref().unwrap_or(Path::new("?")).display(), progress.line(i + 1));
            continue;
        }
        if opts.total_budget_s.is_some_and(|b| progress.elapsed() > b) {
            row.status = "not run: the run's time budget is spent".into();
            rows.push(row);
            eprintln!("not run (the run's time budget is spent)");
            continue;
        }
        let result = (|| -> Result<(), String> {
            if !lowered.contains_key(job.spec()) {
                lowered.insert(job.spec(), lower(job.spec())?);
            }
            let c = &lowered[job.spec()];
            let (kernel, bound) = choose_variant(&c.program, &c.kernels, job, &args, gpu.features())?;
            row.kernel = kernel.name.clone();
            let symbol = dt_codegen::emit::symbol(kernel, job.dtype);
            let key = (job.spec(), symbol.clone());
            if !built.contains_key(&key) {
                built.insert(key.clone(), build(&gpu, job.spec(), kernel, job.dtype, &symbol)?);
            }
            let b = &built[&key];
            let staged: Staged = gpu.stage(kernel, &bound, job.dtype).map_err(|e| e.to_string())?;
            // As the library does: the twin built for the sizes the class specializes where the
            // launch has them, else the kernel built for whole 16-byte runs where the tensors have
            // them (here, wherever the last axis is a multiple of the run).
            let info = staged.launch_info(&symbol, &b.infos).ok_or("symbol")?;
            let f = gpu.function(&b.module, info).map_err(|e| e.to_string())?;
            let mb = job.memory_bound();
            let (ms, runs) = timer.time(
                opts.reps,
                opts.budget_s,
                || if mb { flush_l2(&stream, &mut flush) } else { Ok(()) },
                || gpu.launch(&f, info, &staged).map_err(|e| e.to_string()),
            )?;
            row.dt_ms = Some(ms);
            row.runs = runs;
            row.rate = if mb { format!("{:.0} GB/s", job.bytes() / ms / 1e6) } else { format!("{:.1} TFLOP/s", job.flops() / ms / 1e9) };
            if mb {
                // A device-to-device copy moving the same bytes (half read, half written).
                let n = copy_bytes(job.bytes() / 2.0);
                let src: CudaSlice<u8> = stream.alloc_zeros(n).map_err(|e| e.to_string())?;
                let mut dst: CudaSlice<u8> = stream.alloc_zeros(n).map_err(|e| e.to_string())?;
                let (copy_ms, _) = timer.time(
                    opts.reps,
                    opts.budget_s,
                    || flush_l2(&stream, &mut flush),
                    || stream.memcpy_dtod(&src, &mut dst).map_err(|e| e.to_string()),
                )?;
                row.copy_fraction = Some(copy_ms / ms);
                row.baselines.push((DT_COPY.into(), Some(copy_ms), "ok (bandwidth limit)".into()));
            }
            if matches!(job.op, "matmul" | "mm_leaky_relu") {
                let cublas = cublas_time(&blas, &timer, job, &args, opts)?;
                let name = if job.op == "matmul" { "cublas" } else { "cublas (matmul only)" };
                row.baselines.push((name.into(), Some(cublas), "ok".into()));
            }
            Ok(())
        })();
        rows.push(row.finished(result));
        progress.measured_one();
        eprintln!(" ({})", progress.line(i + 1));
        keep(&rows, opts, &machine)?;
    }
    python_baselines(&selected, &mut rows, opts, &machine)?;
    rows.iter_mut().for_each(Row::pick_best);
    results::report(&rows, opts.json_path())?;
    write_markdown(&rows, opts, &machine)?;
    plot(&rows, opts)
}

/// The rows so far on disk: the JSON, and the results page where one is asked for, so that a run
/// stopped at any point leaves both.
fn keep(rows: &[Row], opts: &Options, machine: &str) -> Result<(), String> {
    results::save(rows, opts.json_path())?;
    let mut with_best = rows.to_vec();
    with_best.iter_mut().for_each(Row::pick_best);
    write_markdown(&with_best, opts, machine)
}

/// The GPU, its driver and the baselines' versions, for the results page.
fn machine(gpu: &CudaRunner) -> String {
    let versions = std::process::Command::new("python3")
        .args(["-c", "import torch, triton; print(f'torch {torch.__version__}, triton {triton.__version__}')"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("no torch".into(), |o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    format!("{}; {versions}", gpu_name(gpu))
}

/// The GPU, its compute capability and the driver's CUDA version.
pub(crate) fn gpu_name(gpu: &CudaRunner) -> String {
    let name = gpu.ctx.name().unwrap_or_else(|e| e.to_string());
    let cc = gpu.ctx.compute_capability().map_or("?".into(), |(a, b)| format!("{a}.{b}"));
    let mut v = 0;
    // SAFETY: writes one int; the driver is loaded (the runner holds a context).
    let driver = match unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) } {
        cudarc::driver::sys::CUresult::CUDA_SUCCESS => format!("{}.{}", v / 1000, v % 1000 / 10),
        _ => "?".into(),
    };
    format!("{name} (compute capability {cc}), CUDA driver {driver}")
}

/// The results page of `--markdown`, where asked for.
fn write_markdown(rows: &[Row], opts: &Options, machine: &str) -> Result<(), String> {
    let Some(path) = &opts.markdown else { return Ok(()) };
    let command = std::iter::once("cargo xtask bench".to_string()).chain(std::env::args().skip(2)).collect::<Vec<_>>().join(" ");
    dt_codegen::host::write_atomically(path, results::markdown(rows, machine, &command).as_bytes())
}

/// The plots of `--plot`, where asked for.
fn plot(rows: &[Row], opts: &Options) -> Result<(), String> {
    let Some(dir) = &opts.plot else { return Ok(()) };
    for f in crate::plot::plot(rows, dir)? {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// cuBLAS's time for the job's product on `args`' inputs (random data: on zeros the tensor
/// cores run faster, and cuBLAS would look faster than it is).
fn cublas_time(blas: &CudaBlas, timer: &Timer, job: &Job, args: &Args, opts: &Options) -> Result<f64, String> {
    let stream = &timer.stream;
    let (m, n, k) = (job.shape[0], job.shape[1], job.shape[2]);
    let e = |x: cudarc::driver::DriverError| x.to_string();
    let input = |name: &str| args.inputs.iter().find(|(n, _)| n == name).map(|(_, t)| &t.data).ok_or(format!("no input {name}"));
    let (a_host, b_host) = (input("A")?, input("B")?);
    macro_rules! go {
        ($t:ty, $from:expr) => {{
            let a: CudaSlice<$t> = stream.clone_htod(&a_host.iter().map(|v| $from(*v)).collect::<Vec<_>>()).map_err(e)?;
            let b: CudaSlice<$t> = stream.clone_htod(&b_host.iter().map(|v| $from(*v)).collect::<Vec<_>>()).map_err(e)?;
            let mut c: CudaSlice<$t> = stream.alloc_zeros(m * n).map_err(e)?;
            let (one, zero): ($t, $t) = ($from(1.0), $from(0.0));
            // Row-major C = A B is column-major C^T = B^T A^T.
            let cfg = GemmConfig {
                transa: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                transb: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                m: n as i32,
                n: m as i32,
                k: k as i32,
                alpha: one,
                lda: n as i32,
                ldb: k as i32,
                beta: zero,
                ldc: n as i32,
            };
            timer
                .time(
                    opts.reps,
                    opts.budget_s,
                    || Ok(()),
                    || {
                        // SAFETY: the buffers hold m*k, k*n and m*n elements, as the configuration says.
                        unsafe { blas.gemm(cfg, &b, &a, &mut c) }.map_err(|x| x.to_string())
                    },
                )
                .map(|(ms, _)| ms)
        }};
    }
    match job.dtype {
        DType::BF16 => go!(half::bf16, half::bf16::from_f32),
        DType::F16 => go!(half::f16, half::f16::from_f32),
        DType::F32 => go!(f32, |v: f32| v),
    }
}

/// Runs bench/baselines.py (when python3 has torch and triton) on every job whose row lacks
/// a baseline asked for (any, when none is named), reading its timings as it prints them and
/// keeping the rows on disk after each.
fn python_baselines(jobs: &[Job], rows: &mut [Row], opts: &Options, machine: &str) -> Result<(), String> {
    let script = crate::regen::workspace().join("bench/baselines.py");
    let has_torch = std::process::Command::new("python3").args(["-c", "import torch, triton"]).output().is_ok_and(|o| o.status.success());
    if !has_torch || !script.exists() {
        eprintln!("python3 with torch and triton not found: torch, Triton and Liger baselines skipped");
        return Ok(());
    }
    let missing = |row: &Row| -> Vec<String> {
        match opts.baselines.is_empty() {
            true if row.has_python_baseline(None) => vec![],
            true => vec![String::new()],
            false => opts.baselines.iter().filter(|b| !row.has_python_baseline(Some(b))).cloned().collect(),
        }
    };
    let list: Vec<serde_json::Value> = jobs
        .iter()
        .zip(rows.iter())
        .filter_map(|(j, row)| {
            let want = missing(row);
            (!want.is_empty()).then(|| {
                let mut job = serde_json::json!({"op": j.op, "dtype": j.dtype.name(), "shape": j.shape, "causal": j.causal, "flush_l2": j.memory_bound(), "reps": opts.reps});
                if !opts.baselines.is_empty() {
                    job["baselines"] = serde_json::json!(want);
                }
                job
            })
        })
        .collect();
    if list.is_empty() {
        return Ok(());
    }
    let file = std::env::temp_dir().join(format!("dt-bench-jobs-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_string(&list).unwrap_or_default()).map_err(|e| format!("{}: {e}", file.display()))?;
    eprintln!("running bench/baselines.py on {} jobs ...", list.len());
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(&script).arg("--jobs").arg(&file);
    if !opts.baselines.is_empty() {
        cmd.arg("--baselines").arg(opts.baselines.join(","));
    }
    let mut child = match cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::inherit()).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bench/baselines.py did not run: {e}");
            return Ok(());
        }
    };
    let stdout = child.stdout.take().ok_or("bench/baselines.py: no output")?;
    // One JSON line per (job, baseline) as the script finishes it.
    for line in std::io::BufReader::new(stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line.map_err(|e| e.to_string())?) else { continue };
        let shape: Vec<usize> =
            v["shape"].as_array().map(|a| a.iter().filter_map(|x| x.as_u64()).map(|x| x as usize).collect()).unwrap_or_default();
        let Some(i) = jobs.iter().position(|j| {
            j.op == v["op"] && j.dtype.name() == v["dtype"] && j.shape == shape && j.causal == v["causal"].as_bool().unwrap_or(false)
        }) else {
            continue;
        };
        let name = v["baseline"].as_str().unwrap_or("?").to_string();
        rows[i].baselines.retain(|(n, _, _)| *n != name);
        rows[i].baselines.push((name, v["ms"].as_f64(), v["status"].as_str().unwrap_or("").to_string()));
        keep(rows, opts, machine)?;
    }
    let _ = child.wait();
    let _ = std::fs::remove_file(&file);
    Ok(())
}

/// The size-class variant of the job's kernel that the library runs for `args` on a GPU offering
/// `features` ([`dt_codegen::host::choose_size_class`]).
fn choose_variant<'a, 'b>(
    program: &dt_core::algo::Program,
    kernels: &'a [Kernel],
    job: &Job,
    args: &'b Args,
    features: dt_core::signature::GpuFeatures,
) -> Result<(&'a Kernel, dt_core::tensor::Bound<'b>), String> {
    dt_codegen::host::choose_size_class(program, kernels, job.kernel(), args, job.dtype, features)
        .ok_or_else(|| format!("no variant of kernel `{}` admits these sizes", job.kernel()))
}

/// Most work a CPU row may take: 2^31 floating-point operations or 2^27 bytes moved.
const CPU_FLOPS_LIMIT: f64 = (1u64 << 31) as f64;
const CPU_BYTES_LIMIT: f64 = (1u64 << 27) as f64;

/// Without a GPU: times the CPU fallback (each spec's generated C, compiled with the system C
/// compiler as the library's build script does) on the selected shapes small enough to run in
/// seconds; wall-clock median of up to `reps` runs within `budget_s`, the host-side conversion of
/// inputs and output included. Larger shapes are listed as not run.
fn cpu_bench(selected: &[Job], opts: &Options) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("dt-bench-cpu-{}", std::process::id()));
    let mut libs: HashMap<&str, (dt_core::algo::Program, Vec<Kernel>, dt_codegen::host::CpuLibrary)> = HashMap::new();
    let mut rows = Vec::new();
    let mut rng = Rng::new(11);
    for (i, job) in selected.iter().enumerate() {
        eprint!("[{}/{}] cpu {} {} {} ... ", i + 1, selected.len(), job.op, job.shape_text(), job.dtype);
        let mut row = Row { op: job.op.into(), shape: job.shape_text(), dtype: job.dtype.name().into(), ..Default::default() };
        let (flops, bytes) = (job.flops(), job.bytes());
        if flops > CPU_FLOPS_LIMIT || bytes > CPU_BYTES_LIMIT {
            row.status = format!("not run on the CPU ({:.1} GFLOP, {:.2} GB)", flops / 1e9, bytes / 1e9);
            eprintln!("{}", row.status);
            rows.push(row);
            continue;
        }
        let result = (|| -> Result<(), String> {
            if !libs.contains_key(job.spec()) {
                let path = crate::regen::workspace().join(format!("dt-kernels/specs/{}.dt", job.spec()));
                let src = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let out = dt_codegen::generate::generate(job.spec(), job.spec(), &src).map_err(|e| e.to_string())?;
                let program = dt_core::compile_spec(&src).map_err(|d| format!("{}: {d:?}", job.spec()))?;
                let lib = dt_codegen::host::compile(&out.c, &dir, job.spec()).map_err(|e| e.to_string())?;
                libs.insert(job.spec(), (program, out.kernels, lib));
            }
            let (program, kernels, lib) = &libs[job.spec()];
            let args = args(job, &mut rng);
            let (kernel, bound) = choose_variant(program, kernels, job, &args, dt_core::signature::GpuFeatures::NONE)?;
            row.kernel = kernel.name.clone();
            let symbol = dt_codegen::emit::symbol(kernel, job.dtype);
            let (ms, runs) = wall_clock_median(3.min(opts.reps), opts.reps, opts.budget_s, || {
                lib.run(&symbol, kernel, &bound, job.dtype).map(|_| ()).map_err(|e| e.to_string())
            })?;
            row.dt_ms = Some(ms);
            row.runs = runs;
            row.rate =
                if job.memory_bound() { format!("{:.2} GB/s", bytes / ms / 1e6) } else { format!("{:.2} GFLOP/s", flops / ms / 1e6) };
            Ok(())
        })();
        rows.push(row.finished(result));
        eprintln!();
    }
    let _ = std::fs::remove_dir_all(&dir);
    results::report(&rows, opts.json_path())?;
    write_markdown(&rows, opts, "the CPU fallback (no GPU)")?;
    plot(&rows, opts)
}

#[cfg(test)]
mod tests {
    use super::{copy_bytes, selected_jobs, Options};

    #[test]
    fn reference_copy_is_a_whole_number_of_4_kib_pages_nearest_the_bytes() {
        // layernorm 4096x1024 f16: 8 MiB of x, and w and b of 2 KiB each, read; 8 MiB written:
        // 8 MiB + 2 KiB each way, halfway between two pages, rounds up.
        let half = (2.0 * 4096.0 * 1024.0 * 2.0 + 2.0 * 2048.0) / 2.0;
        assert_eq!(copy_bytes(half), (8 << 20) + 4096);
        assert_eq!(copy_bytes(16_384_000.0), 16_384_000);
        assert_eq!(copy_bytes(16_386_049.0), 16_384_000 + 4096);
        assert_eq!(copy_bytes(10.0), 4096);
        for half in [1.0e6, 3.3e7, 123_456_789.0] {
            let n = copy_bytes(half);
            assert_eq!(n % 4096, 0);
            assert!((n as f64 - half).abs() <= 2048.0);
        }
    }

    fn options(ops: &[&str], dtypes: &[&str], shapes: &[&str]) -> Options {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Options {
            ops: strings(ops),
            dtypes: strings(dtypes),
            json: None,
            reps: 1,
            budget_s: 0.1,
            baselines: vec![],
            shapes: strings(shapes),
            resume: None,
            total_budget_s: None,
            markdown: None,
            plot: None,
        }
    }

    fn listed(opts: &Options) -> Vec<String> {
        selected_jobs(opts).unwrap().iter().map(|j| format!("{} {} {}", j.op, j.dtype.name(), j.shape_text())).collect()
    }

    #[test]
    fn a_shape_off_the_list_is_benched_for_each_selected_op_it_fits() {
        assert_eq!(
            listed(&options(&["layernorm"], &["f32"], &["65536x4096", "16384x4096"])),
            ["layernorm f32 65536x4096", "layernorm f32 16384x4096"]
        );
        assert_eq!(
            listed(&options(&["softmax", "matmul"], &[], &["3x5", "3x5"])),
            ["softmax f16 3x5", "softmax bf16 3x5", "softmax f32 3x5"]
        );
        assert_eq!(
            listed(&options(&["attention"], &["f16"], &["1x2x64x32"])),
            ["attention f16 1x2x64x32", "attention f16 1x2x64x32 causal"]
        );
        // The fixed list alone, filtered, where every shape is on it.
        assert_eq!(listed(&options(&["matmul"], &["bf16"], &["512x512x512"])), ["matmul bf16 512x512x512"]);
        assert_eq!(selected_jobs(&options(&[], &[], &[])).unwrap().len(), 2 * 3 * 8 + 3 * 3 * 7 + 2 * 7);
    }

    #[test]
    fn a_shape_that_fits_no_selected_op_is_an_error() {
        assert!(selected_jobs(&options(&["softmax"], &[], &["4x4x4"])).unwrap_err().contains("no selected op takes a shape of 3 sizes"));
        // On the list, but for another op.
        assert!(selected_jobs(&options(&["softmax"], &[], &["512x512x512"])).unwrap_err().contains("shape of 3 sizes"));
        assert!(selected_jobs(&options(&[], &[], &["4x0"])).unwrap_err().contains("sizes above 0"));
        assert!(selected_jobs(&options(&[], &[], &["wide"])).unwrap_err().contains("--shape wide"));
    }
}
