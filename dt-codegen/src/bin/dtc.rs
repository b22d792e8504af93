//! `dtc`, the DT command-line compiler.

use clap::{Parser, Subcommand};
use dt_codegen::emit::gpu::Dialect;
use dt_codegen::npy;
use dt_core::algo::{FuncId, Program};
use dt_core::diag::Severity;
use dt_core::signature::GpuFeatures;
use dt_core::tensor::{Args, Tensor};
use dt_core::{DType, SourceFile};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "dtc", version, about = "The DT compiler: check, evaluate, emit and run .dt kernel specs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Arguments that say what to run a kernel on.
#[derive(clap::Args)]
struct RunArgs {
    /// The spec.
    file: PathBuf,
    /// The kernel to run (default: the only one in the file).
    #[arg(long)]
    kernel: Option<String>,
    /// An input tensor: NAME=PATH.npy (float32 or float16).
    #[arg(long = "input", value_name = "NAME=PATH")]
    inputs: Vec<String>,
    /// A scalar input: NAME=VALUE.
    #[arg(long = "scalar", value_name = "NAME=VALUE")]
    scalars: Vec<String>,
    /// The size of a dimension that no input fixes: DIM=N.
    #[arg(long = "size", value_name = "DIM=N")]
    sizes: Vec<String>,
    /// Element type (default: that of the inputs; bf16 must be asked for, and is read and
    /// written as float32).
    #[arg(long)]
    dtype: Option<String>,
    /// Where to write the result (.npy).
    #[arg(long)]
    output: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Check specs; exit 0 when all are valid, 1 with diagnostics on stderr otherwise.
    Check { files: Vec<PathBuf> },
    /// Run the reference evaluator (the meaning of the spec) on .npy inputs.
    Eval(RunArgs),
    /// Print what the compiler makes of a spec.
    Emit {
        file: PathBuf,
        /// The kernel (default: every kernel of the file).
        #[arg(long)]
        kernel: Option<String>,
        #[arg(long, value_enum)]
        target: Target,
        /// Write here instead of standard output.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// Run a kernel on .npy inputs through a backend.
    Run {
        #[arg(long, value_enum)]
        backend: Backend,
        #[command(flatten)]
        args: RunArgs,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Target {
    /// The kernel IR, in its readable text form.
    Kir,
    /// C for the CPU: one function per kernel and element type.
    C,
    /// CUDA C, self-contained (`nvcc -cubin -arch=sm_90a FILE.cu` compiles it).
    Cuda,
    /// HIP C, self-contained (`hipcc --genco --offload-arch=gfx90a FILE.hip` compiles it).
    Hip,
    /// The GPU plan of each kernel and element type for CUDA: the decisions made before
    /// printing (roles, shared-memory rings, copies, barriers, tensor-core instructions).
    GpuPlan,
    /// The manifest the library reads (as `cargo xtask regen` writes it): each kernel's
    /// signature, the launch parameters of every CUDA and HIP kernel built, the CPU symbols.
    Manifest,
    /// The spec with its schedule blocks written out, as the checker reads it: each class's
    /// copies of the algorithm declared, defined and scheduled under their names, one statement
    /// per line (with --kernel, only that kernel's schedule and the algorithm).
    Spec,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Backend {
    /// The generated C, compiled with the system C compiler.
    Cpu,
    /// The generated CUDA C, compiled with NVRTC, on GPU 0.
    Cuda,
    /// The kernel-IR interpreter.
    Interp,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { files } => check(&files),
        Command::Eval(args) => eval(&args),
        Command::Emit { file, kernel, target, output } => emit(&file, kernel.as_deref(), target, output.as_deref()),
        Command::Run { backend, args } => run(backend, &args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("{}", msg.trim_end());
            }
            ExitCode::FAILURE
        }
    }
}

/// The spec at `path` and its program, or its diagnostics rendered.
fn load_source(path: &Path) -> Result<(SourceFile, Program), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: error: {e}", path.display()))?;
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            // Located at the first byte that is not UTF-8: the line and column of the text before it.
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let before = std::str::from_utf8(valid).unwrap_or_default();
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            return Err(format!("{}:{line}:{col}: error: the file is not UTF-8 text (byte {})", path.display(), valid.len()));
        }
    };
    let src = SourceFile::new(path.display().to_string(), text);
    let program = dt_core::compile_spec(src.text()).map_err(|diags| src.render_all(&diags))?;
    Ok((src, program))
}

/// Kernel `fid` of `p` lowered, or an error located at its definition.
fn lowered(p: &Program, fid: FuncId) -> Result<dt_core::kir::Kernel, dt_core::Diagnostic> {
    let f = p.func(fid);
    dt_core::lower::lower(p, fid)
        .map_err(|e| dt_core::Diagnostic::new(f.span, format!("kernel `{}` cannot be lowered: {e}", f.name)).with_label("this kernel"))
}

/// What the lowering, the GPU plan and the printer say of `kernels` of a spec that checks: an
/// error at the kernel for each one that does not lower, or that the CUDA printer cannot build
/// (a warp-specialized ring or tiles that do not fit the target's shared memory), located at its
/// `compile()`; a warning at its `num_stages` for each request the CUDA plan serves with fewer
/// stages, because the buffers of more do not fit (the library and the bench run what fits); a
/// warning at its `compile()` where it `requires(aligned)` and no later size class of its family
/// takes other tensors. The errors of a class added for whole tiles (`dt_core::whole_classes`)
/// are left out where the kernel it copies has errors: they share its statements, so they would
/// repeat its errors under other names.
fn kernel_diagnostics(p: &Program, kernels: &[FuncId]) -> Vec<dt_core::Diagnostic> {
    let each: Vec<(FuncId, Vec<dt_core::Diagnostic>)> =
        kernels.iter().enumerate().map(|(i, &fid)| (fid, diagnostics_of(p, kernels, i))).collect();
    let fails = |f: FuncId| each.iter().any(|(g, d)| *g == f && d.iter().any(|d| d.severity == Severity::Error));
    let mut out = Vec::new();
    for (fid, diags) in &each {
        let origin_fails = p.func(*fid).class_of.is_some_and(fails);
        out.extend(diags.iter().filter(|d| !(origin_fails && d.severity == Severity::Error)).cloned());
    }
    out
}

/// [`kernel_diagnostics`] of `kernels[i]`.
fn diagnostics_of(p: &Program, kernels: &[FuncId], i: usize) -> Vec<dt_core::Diagnostic> {
    let mut out = Vec::new();
    let fid = kernels[i];
    let f = p.func(fid);
    let family = dt_core::select::family_of(&f.name);
    let later = |g: &FuncId| dt_core::select::is_variant_of(&p.func(*g).name, family) && !p.func(*g).schedule.requires_aligned;
    // The classes added for whole tiles share their kernel's `compile()`: it warns once.
    let origin = |g: FuncId| p.func(g).class_of.unwrap_or(g);
    let same_compile = |g: &FuncId| origin(*g) == origin(fid);
    if f.schedule.requires_aligned && !kernels[i + 1..].iter().any(later) && !kernels[i + 1..].iter().any(same_compile) {
        out.push(
            dt_core::Diagnostic::warning(
                f.schedule.compile_span.unwrap_or(f.span),
                format!("no size class of `{family}` after `{}` takes tensors that are not in whole 16-byte runs", f.name),
            )
            .with_label("it requires(aligned): the library, the bench and `dtc run` refuse other tensors; add a class without it after"),
        );
    }
    let k = match lowered(p, fid) {
        Ok(k) => k,
        Err(d) => {
            out.push(d);
            return out;
        }
    };
    let items: Vec<_> = k.dtypes.iter().map(|d| (&k, *d, dt_codegen::emit::symbol(&k, *d))).collect();
    if let Err(e) = dt_codegen::emit::gpu::emit_file("", Dialect::Cuda, &items) {
        let span = f.schedule.compile_span.unwrap_or(f.span);
        out.push(dt_core::Diagnostic::new(span, e.to_string()).with_label("the CUDA build of this kernel fails"));
        return out;
    }
    // One warning per loop and stages, naming the element types it holds for.
    let lowered = dt_codegen::plan::lowered_stages(&k);
    let mut seen = Vec::new();
    for l in &lowered {
        if seen.contains(&(l.dim, l.asked, l.planned)) {
            continue;
        }
        seen.push((l.dim, l.asked, l.planned));
        let types: Vec<&str> =
            lowered.iter().filter(|m| (m.dim, m.asked, m.planned) == (l.dim, l.asked, l.planned)).map(|m| m.dtype.name()).collect();
        let span = f.schedule.num_stages_span.unwrap_or(f.span);
        let stages = if l.planned == 1 { "1 stage".to_string() } else { format!("{} stages", l.planned) };
        out.push(
            dt_core::Diagnostic::warning(
                span,
                format!(
                    "`{}` runs num_stages({}) with {stages} on CUDA in its loop over `{}` ({})",
                    f.name,
                    l.asked,
                    k.dim_name(l.dim),
                    types.join(", ")
                ),
            )
            .with_label(format!("the buffers of more do not fit the shared memory its CUDA target gives a block; ask for {}", l.planned)),
        );
    }
    out
}

/// Where a CUDA build of `kernels` failed: the errors [`kernel_diagnostics`] locates, rendered
/// (none: the failure is not one of those).
fn cuda_build_errors(src: &SourceFile, p: &Program, kernels: &[FuncId]) -> Option<String> {
    let errors: Vec<_> = kernel_diagnostics(p, kernels).into_iter().filter(|d| d.severity == Severity::Error).collect();
    (!errors.is_empty()).then(|| src.render_all(&errors))
}

fn check(files: &[PathBuf]) -> Result<(), String> {
    if files.is_empty() {
        return Err("dtc check: no files given".into());
    }
    let mut errors = Vec::new();
    for f in files {
        match load_source(f) {
            Ok((src, p)) => {
                let diags = kernel_diagnostics(&p, &p.kernels);
                let (errs, warnings): (Vec<_>, Vec<_>) = diags.into_iter().partition(|d| d.severity == Severity::Error);
                if !warnings.is_empty() {
                    eprint!("{}", src.render_all(&warnings));
                }
                if !errs.is_empty() {
                    errors.push(src.render_all(&errs));
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

fn pick_kernel(p: &Program, name: Option<&str>, file: &Path) -> Result<FuncId, String> {
    let names: Vec<&str> = p.kernels.iter().map(|k| p.func(*k).name.as_str()).collect();
    match name {
        Some(n) => p.kernel_by_name(n).ok_or_else(|| format!("{}: no kernel `{n}` (kernels: {})", file.display(), names.join(", "))),
        None if p.kernels.len() == 1 => Ok(p.kernels[0]),
        None => Err(format!("{}: several kernels ({}); choose one with --kernel", file.display(), names.join(", "))),
    }
}

fn split_pair<'a>(s: &'a str, what: &str) -> Result<(&'a str, &'a str), String> {
    s.split_once('=').ok_or_else(|| format!("expected {what}, got `{s}`"))
}

/// Everything a run needs: the program, the kernel, its arguments and the element type.
struct Prepared {
    /// The spec's text, where diagnostics point.
    src: SourceFile,
    program: Program,
    kernel: FuncId,
    args: Args,
    dtype: DType,
}

/// Reads the arguments of a run and picks its kernel: the one named, the only one, or the size
/// class the library would run on a backend offering `features`.
fn prepare(a: &RunArgs, features: GpuFeatures) -> Result<Prepared, String> {
    let (src, program) = load_source(&a.file)?;
    let mut args = Args::default();
    let mut input_dtype: Option<DType> = None;
    for s in &a.inputs {
        let (name, path) = split_pair(s, "NAME=PATH")?;
        let (t, dt) = npy::read(Path::new(path))?;
        match input_dtype {
            Some(prev) if prev != dt => return Err(format!("inputs mix element types ({prev} and {dt}); a kernel takes one")),
            _ => input_dtype = Some(dt),
        }
        if args.inputs.iter().any(|(n, _)| n == name) {
            return Err(format!("--input {name} is given twice"));
        }
        args.inputs.push((name.to_string(), t));
    }
    for s in &a.scalars {
        let (name, text) = split_pair(s, "NAME=VALUE")?;
        let v: f32 = text.parse().map_err(|_| format!("scalar `{name}`: `{text}` is not a number"))?;
        if !v.is_finite() {
            return Err(format!("scalar `{name}`: `{text}` is not a finite number"));
        }
        if args.scalars.iter().any(|(n, _)| n == name) {
            return Err(format!("--scalar {name} is given twice"));
        }
        args.scalars.push((name.to_string(), v));
    }
    for s in &a.sizes {
        let (name, v) = split_pair(s, "DIM=N")?;
        let n: usize = v.parse().map_err(|_| format!("size of `{name}`: `{v}` is not a whole number"))?;
        if args.sizes.iter().any(|(d, _)| d == name) {
            return Err(format!("--size {name} is given twice"));
        }
        args.sizes.push((name.to_string(), n));
    }
    let dtype = match &a.dtype {
        Some(s) => DType::from_name(s).ok_or_else(|| format!("unknown --dtype `{s}` (f16, bf16, f32)"))?,
        None => input_dtype.unwrap_or(DType::F32),
    };
    let kernel = match pick_kernel(&program, a.kernel.as_deref(), &a.file) {
        // No class takes the arguments: where they bind to none of the kernels (a wrong rank, an
        // unknown input or scalar), that is what is wrong, not the choice of a kernel.
        Err(several) if a.kernel.is_none() => pick_size_class(&program, &args, dtype, features).ok_or_else(|| {
            let errors: Vec<String> =
                program.kernels.iter().filter_map(|k| dt_core::tensor::bind(&program, *k, &args).err().map(|e| e.to_string())).collect();
            match errors.first() {
                Some(first) if errors.len() == program.kernels.len() => format!("{}: {first}", a.file.display()),
                _ => several,
            }
        })?,
        other => other?,
    };
    Ok(Prepared { src, program, kernel, args, dtype })
}

/// For a spec whose kernels are the size-class variants of one kernel (`softmax_1k`, ...,
/// `softmax`), the one the library would run on a backend offering `features`
/// ([`dt_codegen::host::choose_size_class`]).
fn pick_size_class(p: &Program, args: &Args, dtype: DType, features: GpuFeatures) -> Option<FuncId> {
    let names: Vec<&str> = p.kernels.iter().map(|k| p.func(*k).name.as_str()).collect();
    let family = names.iter().find(|f| names.iter().all(|n| dt_core::select::is_variant_of(n, f)))?;
    let kernels = dt_core::lower::lower_all(p).ok()?;
    let (kernel, _) = dt_codegen::host::choose_size_class(p, &kernels, family, args, dtype, features)?;
    p.kernel_by_name(&kernel.name)
}

fn eval(a: &RunArgs) -> Result<(), String> {
    let p = prepare(a, GpuFeatures::NONE)?;
    let out: Tensor = dt_core::eval::evaluate(&p.program, p.kernel, &p.args, p.dtype).map_err(|e| format!("dtc eval: {e}"))?;
    npy::write(&a.output, &out, p.dtype)
}

fn kernels_to_emit(p: &Program, name: Option<&str>, file: &Path) -> Result<Vec<FuncId>, String> {
    match name {
        Some(_) => Ok(vec![pick_kernel(p, name, file)?]),
        None => Ok(p.kernels.clone()),
    }
}

fn emit(file: &Path, kernel: Option<&str>, target: Target, output: Option<&Path>) -> Result<(), String> {
    let (src, p) = load_source(file)?;
    let ids = kernels_to_emit(&p, kernel, file)?;
    let (mut kernels, mut refused) = (Vec::new(), Vec::new());
    for k in &ids {
        match lowered(&p, *k) {
            Ok(k) => kernels.push(k),
            Err(d) => refused.push(d),
        }
    }
    if !refused.is_empty() {
        return Err(src.render_all(&refused));
    }
    // A CUDA build that fails is reported as `dtc check` reports it, at the kernel.
    let located = |e: String| cuda_build_errors(&src, &p, &ids).unwrap_or_else(|| format!("{}: error: {e}", file.display()));
    // A whole file for the CPU or HIP goes without the kernels only CUDA runs, as the library's
    // files do (it runs another size class there); one kernel asked for by name, or a file of
    // nothing else, is refused with the reason.
    if kernel.is_none() && matches!(target, Target::C | Target::Hip) && kernels.iter().any(|k| !k.cuda_only()) {
        let name = if matches!(target, Target::C) { "C" } else { "HIP" };
        for (k, why) in kernels.iter().filter_map(|k| Some((k, k.cuda_only_reason()?))) {
            eprintln!("{}: note: kernel `{}` is {why}: left out of the {name} file", file.display(), k.name);
        }
        kernels.retain(|k| !k.cuda_only());
    }
    let text = match target {
        Target::Spec => match kernel {
            Some(k) => dt_core::explore::kernel_spec(src.text(), k),
            None => dt_core::blocks::flat_text(src.text()),
        }
        .map_err(|d| src.render_all(&d))?,
        Target::Kir => kernels.iter().map(dt_core::kir::print).collect::<Vec<_>>().join("\n"),
        Target::Manifest => {
            let name = file.file_stem().map_or_else(|| "spec".into(), |s| s.to_string_lossy());
            dt_codegen::generate::build(&name, &header(file), &kernels).map_err(|e| located(e.to_string()))?.manifest.to_json()
        }
        Target::GpuPlan => {
            kernels.iter().map(dt_codegen::plan::print_cuda).collect::<Result<Vec<_>, _>>().map_err(|e| located(e.to_string()))?.join("\n")
        }
        Target::C => {
            let items = dt_codegen::emit::items(&kernels);
            dt_codegen::emit::c::emit_file(&header(file), &items).map_err(|e| format!("{}: error: {e}", file.display()))?
        }
        Target::Cuda | Target::Hip => {
            let dialect = if matches!(target, Target::Cuda) { Dialect::Cuda } else { Dialect::Hip };
            let items = dt_codegen::emit::items(&kernels);
            let built = dt_codegen::emit::gpu::emit_file(&header(file), dialect, &items);
            match dialect {
                Dialect::Cuda => built.map_err(|e| located(e.to_string()))?.0,
                _ => built.map_err(|e| format!("{}: error: {e}", file.display()))?.0,
            }
        }
    };
    write_output(output, &text)
}

/// What `dtc emit` prints: to `output`, else to standard output.
fn write_output(output: Option<&Path>, text: &str) -> Result<(), String> {
    match output {
        Some(path) => dt_codegen::host::write_atomically(path, text.as_bytes()),
        None => {
            use std::io::Write;
            // A closed pipe (`dtc emit ... | head`) or a full disk is an error, not a panic.
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|_| out.flush()).map_err(|e| format!("dtc emit: writing to standard output: {e}"))
        }
    }
}

fn run(backend: Backend, a: &RunArgs) -> Result<(), String> {
    let gpu = match backend {
        Backend::Cuda => Some(dt_codegen::cuda_run::CudaRunner::new(0).map_err(|e| format!("dtc run: {e}"))?),
        Backend::Cpu | Backend::Interp => None,
    };
    let features = gpu.as_ref().map_or(GpuFeatures::NONE, |g| g.features());
    let p = prepare(a, features)?;
    let types = p.program.kernel_dtypes(p.kernel);
    if !types.contains(&p.dtype) {
        let names: Vec<&str> = types.iter().map(|d| d.name()).collect();
        return Err(format!("kernel `{}` is not built for {} (its dtypes: {})", p.program.func(p.kernel).name, p.dtype, names.join(", ")));
    }
    let kir = lowered(&p.program, p.kernel).map_err(|d| p.src.render(&d))?;
    let bound = dt_core::tensor::bind(&p.program, p.kernel, &p.args).map_err(|e| format!("dtc run: {e}"))?;
    let out = match backend {
        Backend::Interp => {
            // As the compiled backends do: a size above a bound the kernel was built for is an error.
            dt_codegen::host::check_bounds(&kir, &bound).map_err(|e| format!("dtc run: {e}"))?;
            dt_core::interp::run(&kir, &bound, p.dtype)
        }
        Backend::Cpu => {
            let symbol = dt_codegen::emit::symbol(&kir, p.dtype);
            let src = dt_codegen::emit::c::emit_file(&header(&a.file), &[(&kir, p.dtype, symbol.clone())])
                .map_err(|e| format!("{}: error: {e}", a.file.display()))?;
            // A directory of this process's own (mode 0700, a fresh name), removed on every path
            // when `dir` is dropped.
            let dir = dt_codegen::host::private_dir("dtc-").map_err(|e| e.to_string())?;
            let lib = dt_codegen::host::compile(&src, dir.path(), &kir.name).map_err(|e| e.to_string())?;
            lib.run(&symbol, &kir, &bound, p.dtype).map_err(|e| e.to_string())?
        }
        Backend::Cuda => {
            let symbol = dt_codegen::emit::symbol(&kir, p.dtype);
            let (src, infos) =
                dt_codegen::emit::gpu::emit_file(&header(&a.file), Dialect::Cuda, &[(&kir, p.dtype, symbol)]).map_err(|e| {
                    cuda_build_errors(&p.src, &p.program, &[p.kernel]).unwrap_or_else(|| format!("{}: error: {e}", a.file.display()))
                })?;
            let gpu = gpu.ok_or("dtc run: no GPU")?;
            if !kir.runs_on(gpu.features()) {
                return Err(format!(
                    "dtc run: kernel `{}` needs a GPU with what its schedule uses (clusters of its size, or sm_90's TMA and wgmma)",
                    kir.name
                ));
            }
            let module = gpu.compile(&src).map_err(|e| format!("dtc run: {e}"))?;
            gpu.run(&module, &infos[0], &kir, &bound, p.dtype).map_err(|e| format!("dtc run: {e}"))?
        }
    };
    npy::write(&a.output, &out, p.dtype)
}

/// The comment at the top of generated files.
fn header(file: &Path) -> String {
    let name = file.file_name().map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned());
    format!("Generated by dtc from {name}. Do not edit.")
}
