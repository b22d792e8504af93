//! The checked-in generated sources (`dt-kernels/generated/`): fresh, and accepted by the real
//! toolchains: nvcc for sm_80 and sm_90a, hipcc for gfx90a, gcc and clang for the CPU C, all
//! with warnings as errors; and the CUDA and HIP C of the lowering's test specs and of schedules
//! drawn at random for every spec, too. Without a
//! toolchain a test says so and passes, unless `DT_REQUIRE_TOOLCHAINS=1` (set by CI), where a
//! missing toolchain fails.
//!
//! The library's own generated code is compiled through build-support's shared cache, keyed by
//! source, flags and compiler: where the build ran with `DT_KERNELS_WERROR=1` (as CI does), it
//! already compiled each file with these flags and the test takes that compile; otherwise the
//! test compiles it (once; later runs find it in `target/dt-build-cache`).

use build_support::cuda::{self, Arch};
use build_support::{hip, BuildEnv};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

fn generated(ext: &str) -> Vec<PathBuf> {
    let dir = workspace().join("dt-kernels/generated");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("generated dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no .{ext} files under {}", dir.display());
    v
}

/// A toolchain, or `None` after saying why the test is skipped (a failure under CI).
fn require(tool: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    if found.is_none() {
        if std::env::var_os("DT_REQUIRE_TOOLCHAINS").is_some() {
            panic!("{tool} not found, and DT_REQUIRE_TOOLCHAINS is set (source .venv/toolchains.env after .ci/install-toolchains.sh)");
        }
        eprintln!("skipped: {tool} not found (run .ci/install-toolchains.sh and source .venv/toolchains.env)");
    }
    found
}

/// nvcc through the usual search, then the project's own install under `.venv/cuda`.
fn nvcc() -> Option<PathBuf> {
    cuda::find_nvcc(&BuildEnv::from_process()).or_else(|| Some(workspace().join(".venv/cuda/bin/nvcc")).filter(|p| p.exists()))
}

/// build-support's shared cache of the target directory (`cache::shared_dir`), where
/// dt-kernels' build script puts its fatbins and code objects.
fn cache_dir() -> PathBuf {
    std::env::var_os("DT_BUILD_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target directory").join("dt-build-cache"))
}

/// One compile, to run with others ([`compile_all`]).
type Compile = Box<dyn FnOnce() -> Result<(), build_support::CompileError> + Send>;

/// Runs `job` on every item, as many at once as the machine has cores (the compiles of one
/// test are independent); fails with every failure's message.
fn compile_all<T: Send>(items: Vec<T>, job: impl Fn(T) -> Result<(), String> + Sync) {
    let queue = std::sync::Mutex::new(items);
    let failures = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let Some(item) = queue.lock().unwrap().pop() else { return };
                if let Err(e) = job(item) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn out_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name).join(std::process::id().to_string());
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

#[test]
fn generated_sources_are_fresh() {
    for entry in std::fs::read_dir(workspace().join("dt-kernels/specs")).expect("specs").flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "dt") {
            continue;
        }
        let name = path.file_stem().expect("stem").to_string_lossy().into_owned();
        let src = std::fs::read_to_string(&path).expect("spec");
        let outputs = dt_codegen::generate::generate(&name, &format!("dt-kernels/specs/{name}.dt"), &src).expect("spec compiles");
        for (file, contents) in outputs.files() {
            let on_disk = std::fs::read_to_string(workspace().join("dt-kernels/generated").join(&file)).unwrap_or_default();
            assert!(on_disk == contents, "dt-kernels/generated/{file} is stale: run `cargo xtask regen`");
        }
    }
}

/// What ptxas says (`-v`) of each kernel of CUDA file `src`, compiled for sm_90a into `dir`.
fn ptxas_log(nvcc: &Path, src: &Path, dir: &Path) -> Result<String, String> {
    let out = dir.join(src.with_extension("cubin").file_name().expect("a file name"));
    let run = std::process::Command::new(nvcc)
        .args(["-cubin", "-arch=sm_90a", "-Xptxas", "-v", "-o"])
        .arg(&out)
        .arg(src)
        .output()
        .map_err(|e| format!("nvcc: {e}"))?;
    let log = String::from_utf8_lossy(&run.stderr).into_owned();
    if !run.status.success() {
        return Err(format!("{}: {log}", src.display()));
    }
    Ok(log)
}

/// `layernorm_16k` holds a 16-bit row of up to 16384 per program of 16 warps under
/// `max_registers(64)`, two programs per multiprocessor. Its kernels fit those registers only
/// with the output written run by run and the program's one row printed as a block (either
/// alone, ptxas spilled 116 to 244 bytes, docs/language.md): a spill here is a regression.
#[test]
fn capped_held_layernorm_does_not_spill() {
    let Some(nvcc) = require("nvcc", nvcc()) else { return };
    let src = workspace().join("dt-kernels/generated/layernorm.cu");
    let log = ptxas_log(&nvcc, &src, &out_dir("spills")).unwrap_or_else(|e| panic!("{e}"));
    for kernel in ["dt_layernorm_16k_f16", "dt_layernorm_16k_f16_whole", "dt_layernorm_16k_bf16", "dt_layernorm_16k_bf16_whole"] {
        let props = log.find(&format!("Function properties for {kernel}\n")).unwrap_or_else(|| panic!("no properties of {kernel}:\n{log}"));
        let line = log[props..].lines().nth(1).unwrap_or_default();
        assert!(line.contains(" 0 bytes spill stores"), "{kernel} spills: {line}");
    }
}

/// What ptxas must not report of the Hopper classes (`_90a_` in their names: `wgmma()`
/// attention, warp-specialized matmuls), which `-Werror` would not catch; one compile of each
/// file that holds them checks both:
/// - a serialized product: ptxas keeps a kernel's `wgmma` products in flight only where nothing
///   else touches their accumulators between a product and its wait, in the layout of the code;
///   otherwise it waits after every product and says so as information (C7514, C7515:
///   "wgmma.mma_async instructions are serialized"), and the kernel runs far slower (decision
///   0021);
/// - a spill: attention's causal class at head dimension 128 uses 254 of its 255 registers, and a
///   spill in a loop of tensor-core products costs more than the products (decision 0027).
#[test]
fn hopper_classes_are_not_serialized_and_do_not_spill() {
    let Some(nvcc) = require("nvcc", nvcc()) else { return };
    let dir = out_dir("hopper");
    let sources: Vec<PathBuf> =
        generated("cu").into_iter().filter(|p| std::fs::read_to_string(p).is_ok_and(|s| s.contains("_90a_"))).collect();
    assert!(
        sources.iter().any(|p| std::fs::read_to_string(p).is_ok_and(|s| s.contains("wgmma.mma_async"))),
        "no generated CUDA issues wgmma"
    );
    compile_all(sources, |src| {
        let log = ptxas_log(&nvcc, &src, &dir)?;
        let mut found: Vec<String> =
            log.lines().filter(|l| l.contains("wgmma.mma_async instructions are serialized")).map(str::to_string).collect();
        let mut kernels = 0;
        for (at, _) in log.match_indices("Function properties for ") {
            let mut lines = log[at..].lines();
            let name = lines.next().unwrap_or_default().trim_start_matches("Function properties for ");
            if !name.contains("_90a_") {
                continue;
            }
            kernels += 1;
            let props = lines.next().unwrap_or_default();
            if !props.contains(" 0 bytes spill stores, 0 bytes spill loads") {
                found.push(format!("{name} spills: {}", props.trim()));
            }
        }
        match (kernels, &found[..]) {
            (0, _) => Err(format!("{}: ptxas reported no Hopper class:\n{log}", src.display())),
            (_, []) => Ok(()),
            _ => Err(format!("{}: {}", src.display(), found.join("\n"))),
        }
    });
}

#[test]
fn generated_cuda_compiles_for_sm80_and_sm90a() {
    let Some(nvcc) = require("nvcc", nvcc()) else { return };
    // The build's default architectures (a fatbin of both, and PTX), so that its compile serves.
    assert_eq!(cuda::DEFAULT_COMPUTE_CAPS, [Arch::new(80), Arch::with_suffix(90, 'a')]);
    compile_all(generated("cu"), |src| {
        let name = src.file_stem().unwrap().to_string_lossy();
        cuda::cached_fatbin(&cache_dir(), &name, &nvcc, &src, &cuda::DEFAULT_COMPUTE_CAPS, cuda::NVCC_WERROR_FLAGS)
            .map(drop)
            .map_err(|e| e.to_string())
    });
}

#[test]
fn generated_hip_compiles_for_gfx90a() {
    let Some(hipcc) = require("hipcc", hip::find_hipcc(&BuildEnv::from_process())) else { return };
    let mut jobs = Vec::new();
    for src in generated("hip") {
        // Files with matrix-core dots also for the GPUs that take the other branches of the
        // runtime's MFMA helpers: gfx908 (f16 only) and gfx906 (none: the shuffle fallback).
        let text = std::fs::read_to_string(&src).expect("generated source reads");
        // And for gfx942 (MI300) through clang 19 where the toolchain script installed it
        // (`HIPCC_CLANG19`): Debian's hipcc (clang 15) does not know that GPU.
        let dots = text.contains("dt_mfma_16x16x16_f16(&");
        let mut builds: Vec<(std::path::PathBuf, &str)> = vec![(hipcc.clone(), "gfx90a")];
        if dots {
            builds.extend([(hipcc.clone(), "gfx908"), (hipcc.clone(), "gfx906")]);
            if let Some(clang19) = std::env::var_os("HIPCC_CLANG19") {
                builds.push((clang19.into(), "gfx942"));
            }
        }
        jobs.extend(builds.into_iter().map(|(compiler, arch)| (src.clone(), compiler, arch)));
    }
    compile_all(jobs, |(src, compiler, arch)| {
        let name = src.file_stem().unwrap().to_string_lossy();
        hip::cached_code_object(&cache_dir(), &name, &compiler, &src, arch, hip::HIPCC_WERROR_FLAGS).map(drop).map_err(|e| e.to_string())
    });
}

/// The lowering's test specs (`dt-codegen/tests/specs/`), which cover schedules the library
/// specs do not, emitted as CUDA and HIP C and compiled as the library's are (sm_80 and gfx90a,
/// warnings as errors).
#[test]
fn test_specs_compile_for_sm80_and_gfx90a() {
    let Some(nvcc) = require("nvcc", nvcc()) else { return };
    let Some(hipcc) = require("hipcc", hip::find_hipcc(&BuildEnv::from_process())) else { return };
    let dir = out_dir("test_specs");
    let specs = workspace().join("dt-codegen/tests/specs");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&specs).expect("test specs").flatten().map(|e| e.path()).collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "dt"));
    paths.sort();
    assert!(!paths.is_empty(), "no specs under {}", specs.display());
    let mut jobs: Vec<Compile> = Vec::new();
    for path in paths {
        let name = path.file_stem().expect("stem").to_string_lossy().into_owned();
        let src = std::fs::read_to_string(&path).expect("spec");
        let outputs = dt_codegen::generate::generate(&name, &format!("dt-codegen/tests/specs/{name}.dt"), &src)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (cu, hip_src) = (dir.join(format!("{name}.cu")), dir.join(format!("{name}.hip")));
        std::fs::write(&cu, &outputs.cuda).expect("write");
        std::fs::write(&hip_src, &outputs.hip).expect("write");
        let (nvcc, hipcc, cubin, hsaco) =
            (nvcc.clone(), hipcc.clone(), dir.join(format!("{name}.cubin")), dir.join(format!("{name}.gfx90a.hsaco")));
        jobs.push(Box::new(move || cuda::compile_cubin(&nvcc, &cu, &cubin, Arch::new(80), cuda::NVCC_WERROR_FLAGS)));
        jobs.push(Box::new(move || hip::compile_code_object(&hipcc, &hip_src, &hsaco, "gfx90a", hip::HIPCC_WERROR_FLAGS)));
    }
    compile_all(jobs, |job| job().map_err(|e| e.to_string()));
}

/// The clustered test specs (`dt-codegen/tests/cluster/`): their CUDA C compiles for sm_90a,
/// where it uses thread-block clusters, and for sm_80, where those bodies trap (the library runs
/// clustered kernels on sm_90 and newer only), warnings as errors. They have no CPU or HIP C.
#[test]
fn cluster_specs_compile_for_sm80_and_sm90a() {
    let Some(nvcc) = require("nvcc", nvcc()) else { return };
    let dir = out_dir("cluster_specs");
    let specs = workspace().join("dt-codegen/tests/cluster");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&specs).expect("cluster specs").flatten().map(|e| e.path()).collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "dt"));
    assert!(!paths.is_empty(), "no specs under {}", specs.display());
    let mut jobs: Vec<Compile> = Vec::new();
    for path in paths {
        let name = path.file_stem().expect("stem").to_string_lossy().into_owned();
        let src = std::fs::read_to_string(&path).expect("spec");
        let outputs = dt_codegen::generate::generate(&name, &format!("dt-codegen/tests/cluster/{name}.dt"), &src)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(outputs.cuda.contains("DT_CLUSTER(") && outputs.manifest.cpu.is_empty(), "{name}: every kernel is clustered");
        let cu = dir.join(format!("{name}.cu"));
        std::fs::write(&cu, &outputs.cuda).expect("write");
        for arch in cuda::DEFAULT_COMPUTE_CAPS {
            let (nvcc, cu, cubin) = (nvcc.clone(), cu.clone(), dir.join(format!("{name}.{arch}.cubin")));
            jobs.push(Box::new(move || cuda::compile_cubin(&nvcc, &cu, &cubin, arch, cuda::NVCC_WERROR_FLAGS)));
        }
    }
    compile_all(jobs, |job| job().map_err(|e| e.to_string()));
}

/// Schedules drawn anywhere in the space of valid ones (`dt_core::explore::random_spec`, as
/// `cargo xtask explore --anywhere` draws them, clusters included) for every library and test
/// spec: their CUDA C compiles for sm_90a and sm_80 and their HIP C for gfx90a, warnings as
/// errors, as the library's own. Such schedules reach printer paths no checked-in spec does (a
/// load staged by an outer loop and read after an inner staged one; a grid of one program).
/// `DRAWS` per spec from a fixed seed; `DT_DRAW_SEED` draws others. hipcc of Debian's ROCm 5.2
/// crashes in its register coalescer on some kernels: a crash of the compiler itself (not an
/// error in the code) is reported and not counted.
#[test]
fn drawn_schedules_compile_warning_free() {
    const DRAWS: usize = 2;
    let Some(nvcc) = require("nvcc", nvcc()) else { return };
    let Some(hipcc) = require("hipcc", hip::find_hipcc(&BuildEnv::from_process())) else { return };
    let seed = std::env::var("DT_DRAW_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0xd5a3);
    let mut rng = dt_core::explore::Rng::new(seed);
    let opts = dt_core::explore::Options { max_size: 3000, max_tile_elements: 1 << 13, max_cluster: 16 };
    let dir = out_dir("drawn_schedules");
    let mut jobs: Vec<Compile> = Vec::new();
    for folder in ["dt-kernels/specs", "dt-codegen/tests/specs"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(workspace().join(folder)).expect("specs").flatten().map(|e| e.path()).collect();
        paths.retain(|p| p.extension().is_some_and(|e| e == "dt"));
        paths.sort();
        for path in paths {
            let name = path.file_stem().expect("stem").to_string_lossy().into_owned();
            let src = std::fs::read_to_string(&path).expect("spec");
            let program = dt_core::compile_spec(&src).unwrap_or_else(|d| panic!("{}: {d:?}", path.display()));
            let algorithm = dt_core::explore::algorithm_text(&src).expect("spec parses");
            for i in 0..DRAWS {
                let text = dt_core::explore::random_spec(&algorithm, &program, &mut rng, &opts);
                let label = format!("{name}_{i}");
                let spec = dir.join(format!("{label}.dt"));
                std::fs::write(&spec, &text).expect("write");
                let outputs = dt_codegen::generate::generate(&label, &spec.display().to_string(), &text)
                    .unwrap_or_else(|e| panic!("{e}\n(drawn for {}, seed {seed})", path.display()));
                let (cu, hip_src) = (dir.join(format!("{label}.cu")), dir.join(format!("{label}.hip")));
                std::fs::write(&cu, &outputs.cuda).expect("write");
                std::fs::write(&hip_src, &outputs.hip).expect("write");
                for arch in cuda::DEFAULT_COMPUTE_CAPS {
                    let (nvcc, cu, cubin) = (nvcc.clone(), cu.clone(), dir.join(format!("{label}.{}.cubin", arch.sm())));
                    jobs.push(Box::new(move || cuda::compile_cubin(&nvcc, &cu, &cubin, arch, cuda::NVCC_WERROR_FLAGS)));
                }
                let (hipcc, hsaco) = (hipcc.clone(), dir.join(format!("{label}.gfx90a.hsaco")));
                jobs.push(Box::new(move || match hip::compile_code_object(&hipcc, &hip_src, &hsaco, "gfx90a", hip::HIPCC_WERROR_FLAGS) {
                    Err(build_support::CompileError::Failed { stderr, .. }) if stderr.contains("PLEASE submit a bug report") => {
                        eprintln!("hipcc crashed (not counted): {}", hip_src.display());
                        Ok(())
                    }
                    other => other,
                }));
            }
        }
    }
    compile_all(jobs, |job| job().map_err(|e| format!("{e}\n(the drawn spec is next to the source; seed {seed})")));
}

#[test]
fn generated_c_compiles_warning_free_with_gcc_and_clang() {
    let dir = out_dir("c");
    let compilers: Vec<&str> =
        ["gcc", "clang", "clang-19"].into_iter().filter(|c| std::process::Command::new(c).arg("--version").output().is_ok()).collect();
    assert!(compilers.contains(&"gcc"), "gcc is needed to check the generated C");
    for src in generated("c") {
        for cc in &compilers {
            let out = dir.join(format!("{}.{cc}.o", src.file_stem().unwrap().to_string_lossy()));
            let status = std::process::Command::new(cc)
                .args(["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "-o"])
                .arg(&out)
                .arg(&src)
                .output()
                .expect("compiler runs");
            assert!(status.status.success(), "{cc} rejects {}:\n{}", src.display(), String::from_utf8_lossy(&status.stderr));
        }
    }
}
