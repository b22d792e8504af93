//! The `dtc` command line, run as a user runs it: `check` on the library specs, `emit --target
//! kir` against the checked-in kernel IR (golden files, re-blessed by `cargo xtask regen`), and
//! `eval` / `run --backend cpu` against numpy on `.npy` files numpy wrote (numpy from the
//! project's `.venv`, installed by CI; without it the numpy test says so and passes, unless
//! `DT_REQUIRE_TOOLCHAINS=1`).

mod common;

use common::workspace;
use std::path::{Path, PathBuf};
use std::process::Command;

fn dtc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dtc"));
    c.current_dir(workspace());
    c
}

fn library_specs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(workspace().join("dt-kernels/specs"))
        .expect("specs")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "dt"))
        .collect();
    v.sort();
    v
}

#[test]
fn dtc_check_accepts_every_library_spec() {
    let out = dtc().arg("check").args(library_specs()).output().expect("dtc runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Every library kernel runs with the stages it asks for.
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `emit --target spec` writes a spec's schedule blocks out: the classes' copies under their
/// names, which check to the same kernels.
#[test]
fn dtc_emit_spec_writes_the_schedule_blocks_out() {
    let out = dtc().args(["emit", "--target", "spec", "dt-kernels/specs/dyt.dt"]).output().expect("dtc runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("schedule "), "{text}");
    for line in ["Func dyt_1k;", "dyt_1k[x, y] = tanh(alpha * X[x, y]) * W[y] + B[y];", "dyt_1k.bound(y:1024);", "dyt_1k.compile();"] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    let names = |p: dt_core::algo::Program| p.kernels.iter().map(|k| p.func(*k).name.clone()).collect::<Vec<_>>();
    let spec = std::fs::read_to_string(workspace().join("dt-kernels/specs/dyt.dt")).unwrap();
    assert_eq!(names(dt_core::compile_spec(&text).unwrap()), names(dt_core::compile_spec(&spec).unwrap()));
}

/// A `num_stages` that the plan serves with fewer stages (the talk's 2mm asking for 8; the
/// buffers of 5 fit sm_80's shared memory along `k`) checks, with a warning at the request that
/// names the loop and the element types; the 4 the listing asks for fit its kernel's loop over
/// `k`, with no warning, its class for `l` up to 64 (a held operand of 64 columns beside the
/// ring of `C`) runs 2 along `n`, and the kernel itself (`l` up to 128) none: one stage.
#[test]
fn dtc_check_warns_where_fewer_stages_fit_than_asked() {
    let out = dtc().args(["check", "dt-codegen/tests/specs/talk_2mm.dt"]).output().expect("dtc runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("loop over `k`"), "{err}");
    assert!(err.contains("warning: `_2mm_64l` runs num_stages(4) with 2 stages on CUDA in its loop over `n` (f32)"), "{err}");
    assert!(err.contains("warning: `_2mm` runs num_stages(4) with 1 stage on CUDA in its loop over `n` (f32)"), "{err}");
    let spec = std::fs::read_to_string(workspace().join("dt-codegen/tests/specs/talk_2mm.dt")).unwrap();
    let path = scratch("stages").join("talk_2mm_8.dt");
    std::fs::write(&path, spec.replace("num_stages(4)", "num_stages(8)")).unwrap();
    let out = dtc().args(["check", path.to_str().unwrap()]).output().expect("dtc runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("talk_2mm_8.dt:12:1: warning: `_2mm` runs num_stages(8) with 5 stages on CUDA in its loop over `k`"), "{err}");
    assert!(err.contains(" 12 | _2mm.num_stages(8);") && err.contains("ask for 5"), "{err}");
}

/// A size class that `requires(aligned)` with no class after it for other tensors checks, with
/// a warning at its `compile()`; the test spec, which has one after it, checks without.
#[test]
fn dtc_check_warns_where_no_class_takes_unaligned_tensors() {
    let out = dtc().args(["check", "dt-codegen/tests/specs/aligned_rows.dt"]).output().expect("dtc runs");
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let spec = std::fs::read_to_string(workspace().join("dt-codegen/tests/specs/aligned_rows.dt")).unwrap();
    let only = spec.split("\nout.block(x:1, y:256);").next().expect("the spec").to_string() + "\n";
    let path = scratch("aligned").join("aligned_only.dt");
    std::fs::write(&path, only).unwrap();
    let out = dtc().args(["check", path.to_str().unwrap()]).output().expect("dtc runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "aligned_only.dt:15:3: warning: no size class of `out` after `out_1k` takes tensors that are not in whole 16-byte runs"
        ),
        "{err}"
    );
}

/// A kernel that checks but that its target cannot build (a warp-specialized ring of 16 stages
/// of 48 KiB, above sm_90a's shared memory) is refused by `check` as by `emit`, at its
/// `compile()`, not accepted there and refused only when built; `emit` refuses it the same way.
#[test]
fn dtc_check_refuses_a_kernel_its_target_cannot_build() {
    let spec = "Func mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n\
        mm.block(x:128, y:256);\nmm.tensorize(x:128, y:256, k:64);\nmm.num_warps(8);\nmm.num_stages(16);\n\
        mm.warp_specialize();\nmm.dtypes(f16);\nmm.compile();\n";
    let path = scratch("unbuildable").join("deep_ring.dt");
    std::fs::write(&path, spec).unwrap();
    let path = path.to_str().unwrap();
    let (code, err) = stderr_of(&["check", path]);
    assert_eq!(code, Some(1), "{err}");
    let at = format!("{path}:12:1: error: kernel `mm` is scheduled with warp_specialize(), but its 16 stages");
    assert!(err.starts_with(&at), "{err}");
    assert!(err.contains(" 12 | mm.compile();") && err.contains("the CUDA build of this kernel fails"), "{err}");
    // `emit` refuses it with the same located error.
    let (code, emitted) = stderr_of(&["emit", "--target", "cuda", path]);
    assert_eq!((code, emitted.trim_end()), (Some(1), err.trim_end()));
}

/// A kernel whose classes for whole tiles (`k:0` unbounded: `mm_32k`, `mm_64k`) fail as it does
/// is reported once, under its own name, not once per class.
#[test]
fn dtc_check_reports_an_error_shared_by_whole_tile_classes_once() {
    let spec = "Func mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n\
        mm.block(x:128, y:256);\nmm.tensorize(x:128, y:256, k:0);\nmm.num_warps(8);\nmm.num_stages(16);\n\
        mm.warp_specialize();\nmm.dtypes(f16);\nmm.compile();\n";
    let path = scratch("class_errors").join("whole_k.dt");
    std::fs::write(&path, spec).unwrap();
    let (code, err) = stderr_of(&["check", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    assert!(err.contains("error: kernel `mm` is scheduled with warp_specialize()"), "{err}");
}

#[test]
fn dtc_check_reports_a_located_error_and_exits_1() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dtc_cli_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.dt");
    std::fs::write(&bad, "Func f; In A; Var x;\nf[x] = A[x, z];\nf.compile();\n").unwrap();
    let out = dtc().arg("check").arg(&bad).output().expect("dtc runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.dt:2:13: error: `z` is not a declared dimension"), "{err}");
    assert!(err.contains("^"), "{err}");
}

/// A clustered kernel has CUDA C only: asked for C or HIP C (by name, or in a file of nothing
/// else), dtc says why and exits 1; the interpreter runs it.
#[test]
fn dtc_refuses_clustered_kernels_for_the_cpu_and_hip() {
    let spec = "dt-codegen/tests/cluster/row_stats_cluster.dt";
    for target in ["c", "hip"] {
        let out = dtc().args(["emit", "--target", target, spec]).output().expect("dtc runs");
        assert_eq!(out.status.code(), Some(1), "--target {target}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("kernel `softmax` is clustered (`cluster(y:8)`)") && err.contains("no thread-block clusters"), "{err}");
    }
    let out = dtc().args(["emit", "--target", "cuda", spec]).output().expect("dtc runs");
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("DT_CLUSTER(8)"));
}

/// A library spec with clustered classes emits for the CPU and HIP as the library's files do:
/// its other kernels, each one left out named on stderr; the clustered kernel by name is refused.
#[test]
fn dtc_emits_a_spec_for_the_cpu_and_hip_without_its_clustered_kernels() {
    let spec = "dt-kernels/specs/softmax.dt";
    for (target, generated) in [("c", "softmax.c"), ("hip", "softmax.hip")] {
        let out = dtc().args(["emit", "--target", target, spec]).output().expect("dtc runs");
        let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "--target {target}: {err}");
        assert!(err.contains("note: kernel `softmax_256k` is clustered (CUDA sm_90 only): left out of the"), "{err}");
        let library = std::fs::read_to_string(workspace().join("dt-kernels/generated").join(generated)).expect("generated file");
        let symbols = |t: &str| {
            t.lines().filter(|l| l.contains("dt_softmax")).filter_map(|l| l.split('(').next()).map(str::to_string).collect::<Vec<_>>()
        };
        assert!(symbols(&library).len() > 10, "--target {target}: {:?}", symbols(&library));
        assert_eq!(symbols(&text), symbols(&library), "--target {target}: the kernels of the library's file");
        assert!(!text.contains("dt_softmax_256k_f32"), "--target {target}");
    }
    let out = dtc().args(["emit", "--target", "hip", "--kernel", "softmax_256k", spec]).output().expect("dtc runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kernel `softmax_256k` is clustered"));
}

#[test]
fn dtc_emit_kir_matches_the_checked_in_kernel_ir() {
    for spec in library_specs() {
        let name = spec.file_stem().unwrap().to_string_lossy().into_owned();
        let out = dtc().args(["emit", "--target", "kir"]).arg(&spec).output().expect("dtc runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let golden = std::fs::read_to_string(workspace().join(format!("dt-kernels/generated/{name}.kir"))).expect("golden kir");
        // The golden file starts with a header comment and a blank line.
        let body = golden.split_once("\n\n").map_or("", |(_, b)| b);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            body,
            "{name}: kernel IR differs from dt-kernels/generated/{name}.kir (run `cargo xtask regen`)"
        );
    }
}

#[test]
fn dtc_emit_manifest_matches_the_checked_in_manifest() {
    for spec in library_specs() {
        let name = spec.file_stem().unwrap().to_string_lossy().into_owned();
        let out = dtc().args(["emit", "--target", "manifest"]).arg(&spec).output().expect("dtc runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let golden = std::fs::read_to_string(workspace().join(format!("dt-kernels/generated/{name}.manifest.json"))).expect("manifest");
        assert_eq!(String::from_utf8_lossy(&out.stdout), golden, "{name}: the manifest differs (run `cargo xtask regen`)");
    }
}

fn python() -> Option<PathBuf> {
    let p = workspace().join(".venv/bin/python");
    let ok = p.exists() && Command::new(&p).args(["-c", "import numpy"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var_os("DT_REQUIRE_TOOLCHAINS").is_some() {
            panic!("numpy not found in .venv (run .ci/install-toolchains.sh and .venv/bin/pip install numpy)");
        }
        eprintln!("skipped: numpy not found in .venv");
        return None;
    }
    Some(p)
}

fn run_py(py: &Path, script: &str, dir: &Path) -> String {
    let out = Command::new(py).arg("-c").arg(script).current_dir(dir).output().expect("python runs");
    assert!(out.status.success(), "python failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn dtc_eval_and_cpu_run_match_numpy() {
    let Some(py) = python() else { return };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dtc_numpy_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    run_py(
        &py,
        "import numpy as np\nr = np.random.default_rng(7)\n\
         np.save('a.npy', r.standard_normal((67, 131)).astype(np.float32))\n\
         np.save('b.npy', r.standard_normal((131, 45)).astype(np.float32))\n\
         np.save('w.npy', r.standard_normal(131).astype(np.float32))\n\
         np.save('bias.npy', r.standard_normal(131).astype(np.float32))\n",
        &dir,
    );
    let specs = workspace().join("dt-kernels/specs");
    let cases: [(&str, Vec<String>); 3] = [
        ("matmul", vec!["--input".into(), "A=a.npy".into(), "--input".into(), "B=b.npy".into()]),
        ("softmax", vec!["--input".into(), "A=a.npy".into()]),
        (
            "layernorm",
            vec![
                "--input".into(),
                "X=a.npy".into(),
                "--input".into(),
                "W=w.npy".into(),
                "--input".into(),
                "B=bias.npy".into(),
                "--scalar".into(),
                "eps=1e-5".into(),
            ],
        ),
    ];
    for (name, args) in &cases {
        for (cmd, out) in [(vec!["eval"], format!("{name}_eval.npy")), (vec!["run", "--backend", "cpu"], format!("{name}_cpu.npy"))] {
            let o = Command::new(env!("CARGO_BIN_EXE_dtc"))
                .current_dir(&dir)
                .args(&cmd)
                .arg(specs.join(format!("{name}.dt")))
                .args(args)
                .args(["--output", &out])
                .output()
                .expect("dtc runs");
            assert!(o.status.success(), "dtc {cmd:?} {name}: {}", String::from_utf8_lossy(&o.stderr));
        }
    }
    let report = run_py(
        &py,
        "import numpy as np\n\
         a = np.load('a.npy').astype(np.float64); b = np.load('b.npy').astype(np.float64)\n\
         w = np.load('w.npy'); bias = np.load('bias.npy')\n\
         e = np.exp(a - a.max(1, keepdims=True))\n\
         m = a.mean(1, keepdims=True); v = ((a - m) ** 2).mean(1, keepdims=True)\n\
         want = {'matmul': a @ b, 'softmax': e / e.sum(1, keepdims=True), 'layernorm': (a - m) / np.sqrt(v + 1e-5) * w + bias}\n\
         for n, ref in want.items():\n\
         \x20   for how in ('eval', 'cpu'):\n\
         \x20       got = np.load(f'{n}_{how}.npy')\n\
         \x20       print(n, how, np.linalg.norm(got - ref) / np.linalg.norm(ref))\n",
        &dir,
    );
    for line in report.lines() {
        let rel: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(rel < 1e-5, "relative error against numpy too large: {line}");
    }
    assert_eq!(report.lines().count(), 6, "{report}");
}

/// A scratch directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dtc_cli_{name}_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `.npy` file of f32 values with a shape written by hand (no numpy needed).
fn npy(path: &Path, shape: &[u64], values: &[f32]) {
    let dims: Vec<String> = shape.iter().map(|n| n.to_string()).collect();
    let shape_text = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    std::fs::write(path, common::npy_bytes("<f4", false, &shape_text, values)).unwrap();
}

/// A scratch directory `name` holding `a.npy`, four f32 values in one axis.
fn scratch_with_four_values(name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let a = dir.join("a.npy");
    npy(&a, &[4], &[1.0, 2.0, 3.0, 4.0]);
    (dir, a)
}

fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let out = dtc().args(args).output().expect("dtc runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Bad arguments and data files are errors that name what is wrong (exit 1), never panics,
/// signals or huge allocations: a header whose shape multiplies to 2^64 (0 when the product
/// wraps around), an input or scalar given twice, a scalar the kernel does not read, a
/// non-finite scalar, a size above 2^31, a size above a kernel's bound on the interpreter.
#[test]
fn dtc_run_rejects_bad_arguments_and_data_with_clear_errors() {
    let (dir, a) = scratch_with_four_values("bad_args");
    let wrapped = dir.join("wrapped.npy");
    npy(&wrapped, &[1 << 32, 1 << 32], &[]);
    let spec = dir.join("add.dt");
    std::fs::write(&spec, "Func f; In A; SIn s; Var x;\nf[x] = A[x] * s;\nf.bound(x:3);\nf.compile();\n").unwrap();
    let (spec, a, wrapped, out) = (spec.to_str().unwrap(), a.to_str().unwrap(), wrapped.to_str().unwrap(), dir.join("o.npy"));
    let out = out.to_str().unwrap();
    let input = |p: &str| format!("A={p}");
    let cases: [(Vec<String>, &str); 7] = [
        (vec![input(wrapped), "--scalar".into(), "s=1".into()], "has more than 2^31 elements"),
        (vec![input(a), "--input".into(), input(a), "--scalar".into(), "s=1".into()], "--input A is given twice"),
        (vec![input(a), "--scalar".into(), "s=1".into(), "--scalar".into(), "s=2".into()], "--scalar s is given twice"),
        (vec![input(a), "--scalar".into(), "s=1".into(), "--scalar".into(), "t=2".into()], "has no scalar `t`"),
        (vec![input(a), "--scalar".into(), "s=inf".into()], "scalar `s`: `inf` is not a finite number"),
        (vec![input(a), "--scalar".into(), "s=1".into(), "--size".into(), "x=99999999999".into()], "at most 2^31"),
        (vec![input(a), "--scalar".into(), "s=1".into()], "above the bound 3"),
    ];
    for (extra, want) in cases {
        let mut args: Vec<String> =
            vec!["run".into(), "--backend".into(), "interp".into(), spec.into(), "--output".into(), out.into(), "--input".into()];
        args.extend(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, err) = stderr_of(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(want) && !err.contains("panicked"), "{args:?}: {err}");
    }
}

/// On a spec of several size classes and no `--kernel`, arguments that bind to none of its
/// kernels are reported as what is wrong with them, not as a kernel to choose.
#[test]
fn dtc_reports_arguments_no_size_class_takes() {
    let (dir, a) = scratch_with_four_values("no_class");
    let softmax = library_specs().into_iter().find(|p| p.ends_with("softmax.dt")).expect("softmax.dt");
    let (spec, a, out) = (softmax.to_str().unwrap(), a.to_str().unwrap(), dir.join("o.npy"));
    for (input, want) in [("A", "input `A` has 1 dimensions, but `softmax_1k` reads it with 2"), ("B", "has no input `B`")] {
        let (code, err) = stderr_of(&["eval", spec, "--input", &format!("{input}={a}"), "--output", out.to_str().unwrap()]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(want) && !err.contains("choose one with --kernel"), "{err}");
    }
}

/// A spec of more inputs than the argument block holds (9 of 8), in two size classes: `dtc eval`
/// picks the class and evaluates it (the reference evaluator needs no argument block), and `dtc
/// run` on the CPU backend (the generated C) says that the kernel has too many inputs; neither panics.
#[test]
fn dtc_evaluates_and_refuses_to_build_a_kernel_of_too_many_inputs() {
    let (dir, a) = scratch_with_four_values("nine_inputs");
    let names = ["A", "B", "C", "D", "E", "F", "G", "H", "I"];
    let sum: Vec<String> = names.iter().map(|n| format!("{n}[x]")).collect();
    let spec = dir.join("nine.dt");
    std::fs::write(
        &spec,
        format!(
            "Func f; In {}; Var x;\nf[x] = {};\nschedule f_1k {{\n  f.bound(x:1024);\n  f.compile();\n}}\nf.compile();\n",
            names.join(", "),
            sum.join(" + ")
        ),
    )
    .unwrap();
    let (spec, a, out) = (spec.to_str().unwrap(), a.to_str().unwrap(), dir.join("o.npy"));
    let inputs: Vec<String> = names.iter().flat_map(|n| ["--input".to_string(), format!("{n}={a}")]).collect();
    let with = |head: &[&str]| -> Vec<String> {
        head.iter()
            .map(|s| s.to_string())
            .chain([spec.into(), "--output".into(), out.to_str().unwrap().into()])
            .chain(inputs.clone())
            .collect()
    };
    let eval = with(&["eval"]);
    let eval: Vec<&str> = eval.iter().map(String::as_str).collect();
    let (code, err) = stderr_of(&eval);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.exists());
    let run = with(&["run", "--backend", "cpu"]);
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    let (code, err) = stderr_of(&run);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("has 9 inputs; at most 8 are supported") && !err.contains("panicked"), "{err}");
}

/// A spec that is not UTF-8 is a located error; output that cannot be written (a full disk)
/// is an error, not a panic, and leaves the file that was there as it was.
#[test]
fn dtc_reports_unreadable_specs_and_unwritable_outputs() {
    let dir = scratch("io");
    let bad = dir.join("bad.dt");
    std::fs::write(&bad, b"Func f;\nIn A;\xff\n").unwrap();
    let (code, err) = stderr_of(&["check", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("bad.dt:2:6: error: the file is not UTF-8 text"), "{err}");
    if Path::new("/dev/full").exists() {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
        let out = dtc().args(["emit", "--target", "kir", "dt-kernels/specs/softmax.dt"]).stdout(full).output().expect("dtc runs");
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("writing to standard output") && !err.contains("panicked"), "{err}");
    }
    // An output written through a directory that does not exist fails before touching anything.
    let kept = dir.join("kept.kir");
    std::fs::write(&kept, "before").unwrap();
    let (code, _) = stderr_of(&["emit", "--target", "kir", "dt-kernels/specs/softmax.dt", "-o", kept.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(std::fs::read_to_string(&kept).unwrap().starts_with("kernel "), "written whole");
    let missing = dir.join("no_such_dir").join("out.kir");
    let (code, err) = stderr_of(&["emit", "--target", "kir", "dt-kernels/specs/softmax.dt", "-o", missing.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
}

/// What a fuzzer of `dtc eval` and `dtc run` found, each now a clear error or a plain write: a
/// `.npy` whose header claims 4 GiB in a 20-byte file (npyz would allocate it before reading),
/// an intermediate Func that the evaluator would compute whole at more than 2^31 elements (each
/// size within the limit), and an output that names a pipe or a device, which is written into
/// rather than replaced by a file.
#[test]
fn dtc_refuses_oversized_headers_and_intermediates_and_writes_into_devices() {
    let dir = scratch("fuzzed");
    let spec = dir.join("mm.dt");
    std::fs::write(&spec, "Func out; In A, B; Var x, y; RVar k;\nout[x, y] = rdot(A[x, k], B[k, y], k);\nout.compile();\n").unwrap();
    let header = dir.join("header.npy");
    let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
    bytes.extend(u32::MAX.to_le_bytes());
    bytes.extend(b"{}\n");
    std::fs::write(&header, bytes).unwrap();
    let b = dir.join("b.npy");
    npy(&b, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let out = dir.join("o.npy");
    let (spec_s, out_s) = (spec.to_str().unwrap(), out.to_str().unwrap());
    let (a_arg, b_arg) = (format!("A={}", header.display()), format!("B={}", b.display()));
    let (code, err) = stderr_of(&["eval", spec_s, "--input", &a_arg, "--input", &b_arg, "--output", out_s]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("its header says 4294967295 bytes") && !err.contains("panicked"), "{err}");

    let chain = dir.join("chain.dt");
    std::fs::write(
        &chain,
        "Func t, out; Var x; RVar k, j;\nt[x, k, j] = len(x);\nout[x] = rsum(rsum(t[x, k, j], k), j);\nout.compile();\n",
    )
    .unwrap();
    for x in ["4", "1"] {
        let args = ["eval", chain.to_str().unwrap(), "--size", &format!("x={x}"), "--size", "k=2147483648", "--size", "j=2147483648"];
        let (code, err) = stderr_of(&[&args[..], &["--output", out_s]].concat());
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("`t`, which the evaluator computes whole for `out`, would have more than 2^31") && !err.contains("panicked"),
            "{err}"
        );
    }

    // A FIFO read back by a thread while dtc writes the result into it.
    let fifo = dir.join("out.fifo");
    let _ = std::fs::remove_file(&fifo);
    if Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(&fifo).expect("the FIFO reads"))
        };
        let a = dir.join("a.npy");
        npy(&a, &[2, 2], &[1.0, 0.0, 0.0, 1.0]);
        let a_arg = format!("A={}", a.display());
        let (code, err) = stderr_of(&["eval", spec_s, "--input", &a_arg, "--input", &b_arg, "--output", fifo.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
        let written = reader.join().expect("reader");
        assert!(written.starts_with(b"\x93NUMPY"), "the result went into the FIFO");
        assert!(std::fs::metadata(&fifo).is_ok_and(|m| !m.is_file()), "the FIFO is still a FIFO");
    }
}
