//! Build script of dt-kernels: compiles every `specs/*.dt` with the DT compiler (the code path of
//! `cargo xtask regen`) and embeds the results into the crate.
//!
//! Per spec it
//! - compiles the CPU C into a static library `dt_cpu_<spec>` with the system C compiler (always:
//!   it is the CPU fallback, and the crate links it);
//! - writes the CUDA C to OUT_DIR, where the crate embeds it for NVRTC;
//! - where nvcc is found (`NVCC`, `CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`,
//!   `/usr/local/cuda`, then `PATH`), compiles the CUDA C to a fatbin for `CUDA_COMPUTE_CAPS` /
//!   `CUDA_COMPUTE_CAP` (default sm_80, sm_90a and PTX) and embeds it. Without nvcc the build
//!   still succeeds: the kernels are compiled with NVRTC at first use. `DT_KERNELS_NO_NVCC=1`
//!   skips nvcc even where it is installed.
//! - with the `hip` feature: generates the bindings to the HIP runtime (`OUT_DIR/hip_sys.rs`,
//!   bindgen over `hip_runtime_api.h`, loaded dynamically at run time) and, where hipcc is found
//!   (`HIPCC`, `ROCM_PATH`, `/opt/rocm`, then `PATH`) and `DT_KERNELS_NO_HIPCC` is not set,
//!   compiles the HIP C to one code object per architecture of `HIP_ARCHS` (default gfx90a,
//!   gfx942) that the installed hipcc supports, warning about the others, and embeds them with
//!   the HIP launch parameters.
//!
//! Every artifact is named by a content hash of what it is made from (source, compiler, flags),
//! so a rerun that changes nothing compiles nothing; the GPU code objects go to build-support's
//! shared cache (`target/dt-build-cache`, `DT_BUILD_CACHE_DIR`), so that the debug, test and
//! release builds and the tests of the generated sources compile each once between them.
//! `DT_KERNELS_WERROR=1` (CI) compiles them with every warning an error. A failed compile stops the build with the
//! exact command line and the compiler's output.
//!
//! The result is `OUT_DIR/kernels.rs`, included by `src/lib.rs`: per spec its manifest (the
//! kernels' signatures and launch parameters, from which the library chooses and launches
//! kernels without lowering the spec), its CUDA C, its fatbin if any, and the `extern "C"`
//! declarations of its CPU kernels.

use build_support::{cache, command, cuda, embed::EmbedModule, hip, BuildEnv, CompileError};
use dt_codegen::generate::{generate, SpecOutputs};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One spec read from `specs/`.
struct Spec {
    name: String,
    out: SpecOutputs,
}

fn main() {
    let env = BuildEnv::from_process();
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR is set by Cargo"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by Cargo"));
    println!("cargo:rerun-if-changed=build.rs");

    let specs = read_specs(&manifest.join("specs"));
    check_unique_symbols(&specs);

    let cpu_dir = out_dir.join("cpu");
    let cpu_libs = compile_cpu(&env, &cpu_dir, &specs);
    println!("cargo:rustc-link-search=native={}", cpu_dir.display());
    for lib in &cpu_libs {
        println!("cargo:rustc-link-lib=static={lib}");
    }
    if std::env::var("CARGO_CFG_TARGET_FAMILY").is_ok_and(|f| f == "unix") {
        println!("cargo:rustc-link-lib=m");
    }

    // GPU code objects do not depend on the profile or features: one compile serves them all.
    let shared = cache::shared_dir(&env, &out_dir);
    let cuda_dir = out_dir.join("cuda");
    let cuda = compile_cuda(&env, &cuda_dir, &shared, &specs);

    let hip = if std::env::var_os("CARGO_FEATURE_HIP").is_some() {
        hip_bindings(&env, &out_dir);
        Some(compile_hip(&env, &out_dir.join("hip"), &shared, &specs))
    } else {
        None
    };

    let module = kernels_rs(&out_dir, &specs, &cuda, hip.as_ref());
    module.write(&out_dir.join("kernels.rs")).unwrap_or_else(|e| panic!("writing {}: {e}", out_dir.join("kernels.rs").display()));
    env.emit_rerun_if_env_changed();
}

/// Reads and compiles every `*.dt` under `dir`, sorted by name.
fn read_specs(dir: &Path) -> Vec<Spec> {
    println!("cargo:rerun-if-changed={}", dir.display());
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path())
        .filter(|p| p.extension().is_some_and(|x| x == "dt"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no *.dt specs under {}", dir.display());
    paths
        .iter()
        .map(|path| {
            println!("cargo:rerun-if-changed={}", path.display());
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_else(|| panic!("{}: the spec's name must be UTF-8", path.display()))
                .to_string();
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{}: a spec's name must be a C identifier",
                path.display()
            );
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let out = generate(&name, &format!("dt-kernels/specs/{name}.dt"), &text).unwrap_or_else(|e| panic!("DT compile failed:\n{e}"));
            Spec { name, out }
        })
        .collect()
}

/// All kernels of all specs link into one library, so their symbols must differ.
fn check_unique_symbols(specs: &[Spec]) {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for s in specs {
        for l in &s.out.manifest.cuda {
            if let Some((_, other)) = seen.iter().find(|(sym, _)| *sym == l.symbol) {
                panic!(
                    "kernel symbol `{}` is defined by both specs/{other}.dt and specs/{}.dt; rename one of the kernels",
                    l.symbol, s.name
                );
            }
            seen.push((&l.symbol, &s.name));
        }
    }
}

/// Writes `contents` to `path` unless it already holds them (keeps the timestamp).
fn write_if_changed(path: &Path, contents: &[u8]) {
    if std::fs::read(path).ok().as_deref() == Some(contents) {
        return;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    std::fs::write(path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The variables the `cc` crate reads for the compiler, archiver and flags, declared as inputs of
/// the build; their values, for the cache key.
fn cc_env(env: &BuildEnv) -> String {
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    let kind = if target == host { "HOST" } else { "TARGET" };
    let mut values = String::new();
    for var in ["CC", "CFLAGS", "AR", "ARFLAGS", "CRATE_CC_NO_DEFAULTS", "CC_FORCE_DISABLE", "CC_SHELL_ESCAPED_FLAGS"] {
        for name in [format!("{var}_{target}"), format!("{var}_{}", target.replace('-', "_")), format!("{kind}_{var}"), var.to_string()] {
            if let Some(v) = env.var_os(&name) {
                let _ = writeln!(values, "{name}={}", v.to_string_lossy());
            }
        }
    }
    values
}

/// Compiles the CPU C of every spec into its own static library under `dir` (in parallel), each
/// cached by a hash of its source and the compiler; returns the library names to link.
fn compile_cpu(env: &BuildEnv, dir: &Path, specs: &[Spec]) -> Vec<String> {
    let env_values = cc_env(env);
    let target = std::env::var("TARGET").unwrap_or_default();
    let tool = build_support::cpu::c_build()
        .debug(false)
        .cargo_metadata(false)
        .try_get_compiler()
        .unwrap_or_else(|e| panic!("no C compiler for the CPU fallback: {e}"));
    let compiler = format!("{:?}", tool.to_command());
    let version = command::version(tool.path()).unwrap_or_else(|e| panic!("{e}"));
    let msvc = std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|e| e == "msvc");
    let file_name = |lib: &str| if msvc { format!("{lib}.lib") } else { format!("lib{lib}.a") };
    std::thread::scope(|scope| {
        let jobs: Vec<_> = specs
            .iter()
            .map(|spec| {
                let (env_values, target, compiler, version) = (&env_values, &target, &compiler, &version);
                scope.spawn(move || {
                    let lib = format!("dt_cpu_{}", spec.name);
                    let scratch = dir.join(format!("build-{}", spec.name));
                    let artifact = cache::cached(
                        &dir.join("cache"),
                        &file_name(&lib),
                        &[spec.out.c.as_bytes(), compiler.as_bytes(), version.as_bytes(), target.as_bytes(), env_values.as_bytes()],
                        |tmp| {
                            let src = scratch.join(format!("{}.c", spec.name));
                            write_if_changed(&src, spec.out.c.as_bytes());
                            let mut build = build_support::cpu::c_build();
                            build.file(&src).out_dir(&scratch).debug(false).cargo_metadata(false);
                            build.try_compile(&lib)?;
                            let built = scratch.join(file_name(&lib));
                            std::fs::copy(&built, tmp).map_err(|source| CompileError::Io { path: built, source })?;
                            Ok(())
                        },
                    );
                    let artifact = artifact.unwrap_or_else(|e| panic!("compiling the CPU C of specs/{}.dt failed:\n{e}", spec.name));
                    let bytes = std::fs::read(&artifact).unwrap_or_else(|e| panic!("{}: {e}", artifact.display()));
                    write_if_changed(&dir.join(file_name(&lib)), &bytes);
                    lib
                })
            })
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}

/// `DT_KERNELS_WERROR=1` (CI): every warning of nvcc and hipcc on the generated code is an error.
/// The tests that check the generated code compile it with the same flags, so that in CI the
/// build's compile serves them (`dt-kernels/tests/generated_sources.rs`).
fn werror(env: &BuildEnv) -> bool {
    env.var("DT_KERNELS_WERROR").is_some_and(|v| v != "0")
}

/// What the CUDA step made: per spec the path of its CUDA C and, with nvcc, of its fatbin.
struct CudaArtifacts {
    sources: Vec<PathBuf>,
    fatbins: Vec<Option<PathBuf>>,
    archs: String,
}

/// Writes every spec's CUDA C under `dir`; with nvcc, compiles each to a fatbin (in parallel,
/// cached in `cache_dir` by a hash of the source, the architectures, the flags and nvcc).
fn compile_cuda(env: &BuildEnv, dir: &Path, cache_dir: &Path, specs: &[Spec]) -> CudaArtifacts {
    let sources: Vec<PathBuf> = specs
        .iter()
        .map(|s| {
            let path = dir.join(format!("{}.cu", s.name));
            write_if_changed(&path, s.out.cuda.as_bytes());
            path
        })
        .collect();
    let skip = env.var("DT_KERNELS_NO_NVCC").is_some_and(|v| v != "0");
    let nvcc = cuda::find_nvcc(env).filter(|_| !skip);
    // Read in every case, so that the variables are declared inputs of the build.
    let archs = cuda::compute_caps(env);
    let Some(nvcc) = nvcc else {
        return CudaArtifacts { fatbins: vec![None; specs.len()], sources, archs: String::new() };
    };
    let archs = archs.unwrap_or_else(|e| panic!("{e}"));
    let arch_list = archs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    let flags = if werror(env) { cuda::NVCC_WERROR_FLAGS } else { &[] };
    let fatbins = std::thread::scope(|scope| {
        let jobs: Vec<_> = specs
            .iter()
            .zip(&sources)
            .map(|(spec, src)| {
                let (nvcc, archs) = (&nvcc, &archs);
                scope.spawn(move || {
                    cuda::cached_fatbin(cache_dir, &spec.name, nvcc, src, archs, flags)
                        .unwrap_or_else(|e| panic!("compiling the CUDA C of specs/{}.dt with nvcc failed:\n{e}", spec.name))
                })
            })
            .collect();
        jobs.into_iter().map(|j| Some(j.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))).collect()
    });
    CudaArtifacts { sources, fatbins, archs: arch_list }
}

/// What the HIP step made (with the `hip` feature): per spec, a code object per built
/// architecture.
struct HipArtifacts {
    hipcc: Option<String>,
    requested: Vec<String>,
    built: Vec<String>,
    objects: Vec<Vec<(String, PathBuf)>>,
}

/// With hipcc (and without `DT_KERNELS_NO_HIPCC`), compiles every spec's HIP C to a code object
/// per architecture of `HIP_ARCHS` that hipcc supports (in parallel, cached in `cache_dir` by a
/// hash of the source, the architecture, the flags and hipcc); warns about requested
/// architectures hipcc cannot build. Without hipcc it builds nothing and says so in a warning.
fn compile_hip(env: &BuildEnv, dir: &Path, cache_dir: &Path, specs: &[Spec]) -> HipArtifacts {
    let skip = env.var("DT_KERNELS_NO_HIPCC").is_some_and(|v| v != "0");
    let hipcc = hip::find_hipcc(env).filter(|_| !skip);
    let requested = hip::hip_archs(env).unwrap_or_else(|e| panic!("{e}"));
    let Some(hipcc) = hipcc else {
        let why = if skip { "DT_KERNELS_NO_HIPCC is set" } else { "hipcc was not found (HIPCC, ROCM_PATH, /opt/rocm, PATH)" };
        println!("cargo:warning=dt-kernels: no HIP code objects built: {why}; the HIP ops will report that no kernels were built");
        return HipArtifacts { hipcc: None, requested, built: Vec::new(), objects: vec![Vec::new(); specs.len()] };
    };
    let (built, unsupported) = hip::supported_archs(&hipcc, &requested, dir).unwrap_or_else(|e| panic!("probing hipcc: {e}"));
    for arch in &unsupported {
        println!("cargo:warning=dt-kernels: {} cannot compile for {arch}; no HIP code objects for it", hipcc.display());
    }
    let hipcc_path = hipcc.to_string_lossy().into_owned();
    let flags = if werror(env) { hip::HIPCC_WERROR_FLAGS } else { &[] };
    let objects = std::thread::scope(|scope| {
        let jobs: Vec<_> = specs
            .iter()
            .map(|spec| {
                let (hipcc, built) = (&hipcc, &built);
                scope.spawn(move || {
                    let src = dir.join(format!("{}.hip", spec.name));
                    write_if_changed(&src, spec.out.hip.as_bytes());
                    built
                        .iter()
                        .map(|arch| {
                            let path = hip::cached_code_object(cache_dir, &spec.name, hipcc, &src, arch, flags).unwrap_or_else(|e| {
                                panic!("compiling the HIP C of specs/{}.dt for {arch} with hipcc failed:\n{e}", spec.name)
                            });
                            (arch.clone(), path)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    HipArtifacts { hipcc: Some(hipcc_path), requested, built, objects }
}

/// Writes `OUT_DIR/hip_sys.rs`: bindgen's bindings to the part of `hip_runtime_api.h` that
/// `src/hip/` uses, as a struct `HipLib` that loads libamdhip64 at run time. The header is
/// looked up under `HIP_PATH`, `ROCM_PATH`, `/opt/rocm` and `/usr` (`include/hip/`). bindgen is
/// a build-dependency only with the feature, hence the `cfg`.
#[cfg(feature = "hip")]
fn hip_bindings(env: &BuildEnv, out_dir: &Path) {
    let roots: Vec<PathBuf> = ["HIP_PATH", "ROCM_PATH"]
        .iter()
        .filter_map(|v| env.var_os(v).map(PathBuf::from))
        .chain([PathBuf::from("/opt/rocm"), PathBuf::from("/usr")])
        .collect();
    // Read so that changing it reruns the build script (clang-sys reads it to find libclang).
    let _ = env.var_os("LIBCLANG_PATH");
    let include = roots.iter().map(|r| r.join("include")).find(|i| i.join("hip/hip_runtime_api.h").is_file()).unwrap_or_else(|| {
        panic!(
            "the `hip` feature needs the HIP runtime headers (include/hip/hip_runtime_api.h), looked up under {}; \
             install ROCm (or Debian's `hipcc` / `libamdhip64-dev`) or set HIP_PATH",
            roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
        )
    });
    println!("cargo:rerun-if-changed={}", include.join("hip/hip_runtime_api.h").display());
    println!("cargo:rustc-check-cfg=cfg(dt_hip_props_r0600)");
    let bindings = bindgen::Builder::default()
        .header_contents("dt_hip.h", "#include <hip/hip_runtime_api.h>\n")
        .clang_arg(format!("-I{}", include.display()))
        .clang_arg("-D__HIP_PLATFORM_AMD__")
        .allowlist_function(
            "hip(Init|DriverGetVersion|SetDevice|GetDeviceCount|GetDeviceProperties.*|ModuleLoadData|ModuleUnload|ModuleGetFunction|\
             ModuleLaunchKernel|Malloc|Free|MemcpyHtoD|MemcpyDtoH|MemsetD8|StreamCreate|StreamDestroy|StreamSynchronize|GetErrorString|GetErrorName)",
        )
        .allowlist_type("hipDeviceProp_t.*")
        .allowlist_type("hipError_t")
        .prepend_enum_name(false)
        .dynamic_library_name("HipLib")
        .dynamic_link_require_all(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen over {}/hip/hip_runtime_api.h failed (is libclang installed? LIBCLANG_PATH): {e}", include.display()))
        .to_string();
    // ROCm 6 renamed the properties struct and call (the old names stay, with the old layout).
    if bindings.contains("hipGetDevicePropertiesR0600") {
        println!("cargo:rustc-cfg=dt_hip_props_r0600");
    }
    write_if_changed(&out_dir.join("hip_sys.rs"), bindings.as_bytes());
}

#[cfg(not(feature = "hip"))]
fn hip_bindings(_: &BuildEnv, _: &Path) {
    unreachable!("CARGO_FEATURE_HIP is set only when the build script is compiled with the `hip` feature")
}

fn const_name(spec: &str) -> String {
    spec.to_ascii_uppercase()
}

/// The text of `kernels.rs`.
fn kernels_rs(out_dir: &Path, specs: &[Spec], cuda: &CudaArtifacts, hip: Option<&HipArtifacts>) -> EmbedModule {
    let mut m = EmbedModule::new();
    m.item("// Generated by dt-kernels/build.rs. Do not edit.");
    m.item(&format!(
        "/// Architectures of the embedded fatbins (empty: none built, NVRTC at first use).\npub const NVCC_ARCHS: &str = {:?};",
        cuda.archs
    ));
    if let Some(hip) = hip {
        m.item(&format!(
            "/// hipcc at build time (None: not found, no code objects), the architectures asked for and those built.\n\
             pub const HIP_BUILD: HipBuild = HipBuild {{ hipcc: {:?}, requested: &{:?}, built: &{:?} }};",
            hip.hipcc, hip.requested, hip.built
        ));
    }
    let mut externs = String::from("extern \"C\" {\n");
    let mut table = String::from("pub static SPECS: &[&SpecData] = &[");
    for (i, ((spec, src), fatbin)) in specs.iter().zip(&cuda.sources).zip(&cuda.fatbins).enumerate() {
        let c = const_name(&spec.name);
        let manifest_path = out_dir.join("manifests").join(format!("{}.manifest.json", spec.name));
        write_if_changed(&manifest_path, spec.out.manifest_json.as_bytes());
        m.str(&format!("{c}_MANIFEST"), &manifest_path).expect("absolute path");
        m.str(&format!("{c}_CUDA"), src).expect("absolute path");
        let fatbin = match fatbin {
            Some(path) => {
                m.bytes(&format!("{c}_FATBIN"), path).expect("absolute path");
                format!("Some({c}_FATBIN)")
            }
            None => "None".to_string(),
        };
        let cpu: Vec<String> = spec.out.manifest.cpu.iter().map(|s| format!("({s:?}, {s} as CpuFn)")).collect();
        for s in &spec.out.manifest.cpu {
            let _ = writeln!(externs, "    fn {s}(args: *const DtArgs, first: i64, last: i64) -> i32;");
        }
        let hip_fields = match hip {
            Some(hip) => {
                let mut objects = Vec::new();
                for (arch, path) in &hip.objects[i] {
                    let name = format!("{c}_HIP_{}", arch.to_ascii_uppercase().replace(|ch: char| !ch.is_ascii_alphanumeric(), "_"));
                    m.bytes(&name, path).expect("absolute path");
                    objects.push(format!("({arch:?}, {name})"));
                }
                format!("    hip_objects: &[{}],\n", objects.join(", "))
            }
            None => String::new(),
        };
        m.item(&format!(
            "static {c}: SpecData = SpecData {{\n    name: {:?},\n    manifest_json: {c}_MANIFEST,\n    cuda: {c}_CUDA,\n    \
             fatbin: {fatbin},\n{hip_fields}    cpu: &[\n        {}\n    ],\n    manifest: std::sync::OnceLock::new(),\n}};",
            spec.name,
            cpu.join(",\n        "),
        ));
        let _ = write!(table, "&{c}, ");
    }
    externs.push('}');
    table.push_str("];");
    m.item(&externs);
    m.item(&table);
    m
}
