//! Mutated specs and bad data files, through the whole of `dtc` as a user runs it: `check`,
//! every `emit` target (kernel IR, C, CUDA, HIP, GPU plan, spec), `run --backend interp` and, for
//! every eighth case, `run --backend cpu` (the C compiler and the compiled kernel). Each run is a
//! process with a time limit; what holds for every case: it exits 0, or 1 with an error on stderr
//! and no panic or internal error (`dtc` runs with `DT_VERIFY_KIR`, so the kernel IR's verifier
//! checks every lowering pass); never a signal (a crash, a stack overflow), never past its time. A spec that
//! `check` refuses gets a diagnostic at `file:line:col`; any other refusal is located too or
//! names what it refuses (`DT_FUZZ_SHOW=1` prints those); a bad data file's error names the file
//! or the input.
//!
//! The cases are drawn from a fixed seed (`DT_FUZZ_SEED` sets another), so a failure names a
//! case that fails again: the
//! library specs, the examples and the test specs, each with token mutations (deletions,
//! duplications, swaps, replacements from DT's vocabulary and numbers that stress the limits) or
//! with a schedule drawn by the explorer; and data files whose headers lie (shapes that overflow,
//! wrong element types, truncated data, Fortran order).

mod common;

use common::{npy_bytes, workspace};
use dt_core::explore::Rng;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Mutants drawn (each through check, five emitters and the interpreter); `PROPTEST_CASES`
/// sets another count.
const CASES: u32 = 400;
/// One case in this many also compiles its C and runs it.
const CPU_EVERY: usize = 8;
/// The time limit of one `dtc` run.
const LIMIT: Duration = Duration::from_secs(30);

const VOCABULARY: &[&str] = &[
    "Func",
    "In",
    "SIn",
    "Var",
    "RVar",
    "x",
    "y",
    "k",
    "z",
    "A",
    "B",
    "rsum",
    "rmax",
    "rdot",
    "exp",
    "where",
    "len",
    "reshape",
    "block",
    "tensorize",
    "map",
    "num_warps",
    "num_stages",
    "fuse_at",
    "compile",
    "schedule",
    "{",
    "}",
    "bound",
    "dtypes",
    "f16",
    "f32",
    "cluster",
    "specialize",
    "warp_specialize",
    "wgmma",
    "persistent",
    "max_registers",
    "0",
    "1",
    "3",
    "64",
    "4096",
    "65536",
    "1e38",
    "2147483648",
    "-1",
    "(",
    ")",
    "[",
    "]",
    ",",
    ";",
    ":",
    ".",
    "+",
    "*",
    "/",
    "-",
    "<",
    "inf",
];

fn dtc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dtc"));
    c.current_dir(workspace()).env("DT_VERIFY_KIR", "1");
    c
}

/// How a `dtc` run ended, when it kept the rules.
enum Ended {
    Ok,
    /// Exit 1 with this error (no panic).
    Refused(String),
}

/// Runs `dtc` with `args` under the time limit: how it ended, or a description of what broke the
/// rules.
fn run(args: &[String]) -> Result<Ended, String> {
    let mut child = dtc().args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("dtc starts");
    let start = Instant::now();
    loop {
        match child.try_wait().expect("dtc waits") {
            Some(status) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                return match status.code() {
                    Some(0) => Ok(Ended::Ok),
                    Some(1) if !err.trim().is_empty() && !err.contains("panicked") && !err.contains("internal error") => {
                        Ok(Ended::Refused(err))
                    }
                    Some(code) => Err(format!("exit {code}: {err}")),
                    None => Err(format!("killed by a signal ({status}): {err}")),
                };
            }
            None if start.elapsed() > LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("still running after {LIMIT:?}"));
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// The specs every mutation starts from.
fn seeds() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in ["dt-kernels/specs", "docs/examples", "dt-codegen/tests/specs"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(workspace().join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "dt"))
            .collect();
        paths.sort();
        out.extend(paths.iter().map(|p| (p.display().to_string(), std::fs::read_to_string(p).expect("spec"))));
    }
    out
}

/// A mutation of `src`: tokens (split at whitespace and punctuation) deleted, duplicated,
/// swapped or replaced, 1 to 4 times; or, for a spec that checks, a schedule of its algorithm
/// drawn by the explorer.
fn mutate(src: &str, rng: &mut Rng) -> String {
    if rng.chance(25) {
        if let (Ok(algorithm), Ok(p)) = (dt_core::explore::algorithm_text(src), dt_core::compile_spec(src)) {
            return dt_core::explore::random_spec(
                &algorithm,
                &p,
                rng,
                &dt_core::explore::Options { max_size: 4096, max_tile_elements: 1 << 14, max_cluster: 16 },
            );
        }
    }
    let mut toks: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in src.chars() {
        if c.is_alphanumeric() || c == '_' || c == '.' && cur.chars().all(|d| d.is_ascii_digit()) && !cur.is_empty() {
            cur.push(c);
        } else {
            if !cur.is_empty() {
                toks.push(std::mem::take(&mut cur));
            }
            toks.push(c.to_string());
        }
    }
    toks.push(cur);
    for _ in 0..1 + rng.below(4) {
        if toks.is_empty() {
            break;
        }
        let i = rng.below(toks.len() as u64) as usize;
        match rng.below(4) {
            0 => {
                toks.remove(i);
            }
            1 => {
                let t = toks[i].clone();
                toks.insert(i, t);
            }
            2 => {
                let j = rng.below(toks.len() as u64) as usize;
                toks.swap(i, j);
            }
            _ => toks[i] = rng.pick(VOCABULARY).to_string(),
        }
    }
    toks.concat()
}

/// Arguments of `dtc run` for kernel `k` of `p`: each input as an `.npy` of sizes drawn from
/// 1 to 9 per dimension, each scalar 0.5, every dimension's size.
fn run_args(p: &dt_core::algo::Program, k: dt_core::algo::FuncId, dir: &Path, rng: &mut Rng) -> Vec<String> {
    let sizes: Vec<usize> = (0..p.dims.len()).map(|_| 1 + rng.below(9) as usize).collect();
    let mut args = vec!["--kernel".to_string(), p.func(k).name.clone()];
    for i in p.kernel_inputs(k) {
        let input = p.input(i);
        let shape: Vec<usize> = input.dims().iter().map(|d| sizes[d.index()]).collect();
        let n = shape.iter().product();
        let path = dir.join(format!("{}.npy", input.name));
        let t = dt_core::tensor::Tensor::new(shape, (0..n).map(|v| (v % 7) as f32 * 0.25 - 0.5).collect());
        dt_codegen::npy::write(&path, &t, dt_core::DType::F32).expect("writes");
        args.extend(["--input".into(), format!("{}={}", input.name, path.display())]);
    }
    for s in p.kernel_scalars(k) {
        args.extend(["--scalar".into(), format!("{}=0.5", p.scalars[s.index()].name)]);
    }
    for d in p.kernel_dims(k) {
        args.extend(["--size".into(), format!("{}={}", p.dim_name(d), sizes[d.index()])]);
    }
    args
}

/// Whether error `err` points into the spec at a line and column (`case7.dt:3:14`).
fn located_in(err: &str, file: &str) -> bool {
    err.match_indices(file).any(|(i, _)| {
        let rest = &err[i + file.len()..];
        let mut parts = rest.splitn(3, ':');
        let line = parts.next().unwrap_or("");
        let col: String = parts.next().unwrap_or("").chars().take_while(char::is_ascii_digit).collect();
        !line.is_empty() && line.chars().all(|c| c.is_ascii_digit()) && !col.is_empty()
    })
}

/// What kind of refusal `err` is, for the summary.
fn refusal_kind(err: &str, file: &str) -> &'static str {
    if located_in(err, file) {
        "located in the spec"
    } else if err.contains('`') || err.contains("--") {
        "naming what it refuses"
    } else {
        "other"
    }
}

#[test]
fn mutated_specs_and_bad_data_never_crash_or_hang_dtc() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz_back_end_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seeds = seeds();
    // Another seed (`DT_FUZZ_SEED`) draws other cases, for a longer search than CI's.
    let seed = std::env::var("DT_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0xF022);
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    let (mut checked, mut ran) = (0, 0);
    let mut refusals: std::collections::BTreeMap<&str, usize> = Default::default();
    let cases = common::cases(CASES) as usize;
    for case in 0..cases {
        let (name, src) = &seeds[case % seeds.len()];
        let mutant = mutate(src, &mut rng);
        let spec = dir.join(format!("case{case}.dt"));
        std::fs::write(&spec, &mutant).unwrap();
        let spec_arg = spec.display().to_string();
        let mut runs: Vec<Vec<String>> = vec![vec!["check".into(), spec_arg.clone()]];
        for target in ["kir", "c", "cuda", "hip", "gpu-plan", "spec"] {
            runs.push(vec![
                "emit".into(),
                spec_arg.clone(),
                "--target".into(),
                target.into(),
                "-o".into(),
                dir.join("out.txt").display().to_string(),
            ]);
        }
        if let Ok(p) = dt_core::compile_spec(&mutant) {
            checked += 1;
            if let Some(&k) = p.kernels.first() {
                let args = run_args(&p, k, &dir, &mut rng);
                let output = ["--output".to_string(), dir.join("out.npy").display().to_string()];
                let backends: &[&str] = if case % CPU_EVERY == 0 { &["interp", "cpu"] } else { &["interp"] };
                for backend in backends {
                    let mut r: Vec<String> = vec!["run".into(), "--backend".into(), backend.to_string(), spec_arg.clone()];
                    r.extend(args.iter().cloned());
                    r.extend(output.iter().cloned());
                    runs.push(r);
                    ran += 1;
                }
            }
        }
        let located = format!("case{case}.dt:");
        for args in runs {
            match run(&args) {
                Err(what) => failures.push(format!("case {case} (a mutation of {name}): dtc {}: {what}\n{mutant}", args.join(" "))),
                // A spec the checker refuses gets a diagnostic at its file:line:col.
                Ok(Ended::Refused(err)) if args[0] == "check" && !located_in(&err, &located) => {
                    failures.push(format!("case {case} (a mutation of {name}): dtc check refused it with no location: {err}\n{mutant}"))
                }
                // Any other refusal is located, or names what it refuses.
                Ok(Ended::Refused(err)) => match refusal_kind(&err, &located) {
                    "other" => failures.push(format!(
                        "case {case} (a mutation of {name}): dtc {}: an unlocated error that names nothing: {err}",
                        args.join(" ")
                    )),
                    kind => {
                        if std::env::var_os("DT_FUZZ_SHOW").is_some() && kind != "located in the spec" {
                            eprintln!("dtc {}: {err}", args.join(" "));
                        }
                        *refusals.entry(kind).or_default() += 1
                    }
                },
                Ok(Ended::Ok) => {}
            }
        }
    }
    // Data files whose headers lie, through eval and both runners.
    let vadd = workspace().join("dt-codegen/tests/specs/vadd.dt").display().to_string();
    let bad: &[(&str, Vec<u8>)] = &[
        ("wrapping shape", npy_bytes("<f4", false, "(4294967296, 4294967296)", &[])),
        ("huge shape", npy_bytes("<f4", false, "(3000000000,)", &[1.0])),
        ("short data", npy_bytes("<f4", false, "(4, 4)", &[1.0, 2.0])),
        ("f64", npy_bytes("<f8", false, "(2, 2)", &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])),
        ("fortran", npy_bytes("<f4", true, "(2, 2)", &[1.0, 2.0, 3.0, 4.0])),
        ("no header", b"\x93NUMPY\x01\x00\xff\xff".to_vec()),
        ("not npy", b"hello".to_vec()),
    ];
    for (what, bytes) in bad {
        let path = dir.join("bad.npy");
        std::fs::write(&path, bytes).unwrap();
        for verb in [&["eval"][..], &["run", "--backend", "interp"], &["run", "--backend", "cpu"]] {
            let mut args: Vec<String> = verb.iter().map(|s| s.to_string()).collect();
            args.extend([
                vadd.clone(),
                "--input".into(),
                format!("A={}", path.display()),
                "--input".into(),
                format!("B={}", path.display()),
            ]);
            args.extend(["--output".into(), dir.join("out.npy").display().to_string()]);
            match run(&args) {
                Err(broke) => failures.push(format!("{what}: dtc {}: {broke}", args.join(" "))),
                // The error names the file or the input it came from.
                Ok(Ended::Refused(err)) if err.contains("bad.npy") || err.contains("`A`") || err.contains("A=") => {}
                Ok(Ended::Refused(err)) => {
                    failures.push(format!("{what}: dtc {}: an error that names neither the file nor the input: {err}", args.join(" ")))
                }
                Ok(Ended::Ok) => failures.push(format!("{what}: dtc {} accepted it", args.join(" "))),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{cases} mutants ({checked} checked, {ran} runs of their kernels) and {} bad data files: {} failures; refusals: {refusals:?}",
        bad.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n---\n"));
}
