//! HIP: find `hipcc`, choose target architectures, compile code objects, probe which
//! architectures the installed compiler supports.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::search::ToolSearch;
use crate::{cache, command, ArchParseError, BuildEnv, CompileError};

/// Architectures built when `HIP_ARCHS` is not set.
pub const DEFAULT_HIP_ARCHS: [&str; 2] = ["gfx90a", "gfx942"];

/// Flags every hipcc compile gets.
pub const HIPCC_FLAGS: &[&str] = &["-O3", "-std=c++17"];

const ARCH_EXPECTED: &str = "an AMD GPU target such as gfx90a, gfx942 or gfx90a:xnack+";

/// The kernel compiled to probe an architecture.
const PROBE_SOURCE: &str = "#include <hip/hip_runtime.h>\n\
extern \"C\" __global__ void dt_probe(float* x) { x[threadIdx.x] += 1.0f; }\n";

/// Finds hipcc: `HIPCC` (the executable, or a bare name looked up on `PATH`), then
/// `$ROCM_PATH/bin/hipcc`, then `/opt/rocm/bin/hipcc`, then `PATH`. Records in `env` every
/// variable read.
pub fn find_hipcc(env: &BuildEnv) -> Option<PathBuf> {
    ToolSearch { exe: "hipcc", exe_var: "HIPCC", root_vars: &["ROCM_PATH"], fixed_roots: vec![PathBuf::from("/opt/rocm")] }.find(env)
}

/// The architectures to build: `HIP_ARCHS` (a comma list), else [`DEFAULT_HIP_ARCHS`].
/// Duplicates are dropped; order is kept. Records `HIP_ARCHS` in `env`.
pub fn hip_archs(env: &BuildEnv) -> Result<Vec<String>, ArchParseError> {
    match env.var("HIP_ARCHS").filter(|v| !v.trim().is_empty()) {
        Some(value) => parse_hip_archs(&value).map_err(|e| e.in_var("HIP_ARCHS")),
        None => Ok(DEFAULT_HIP_ARCHS.map(String::from).to_vec()),
    }
}

/// Parses a comma (or whitespace) separated list of `gfx` targets, each optionally with
/// target features (`gfx90a:xnack+`).
pub fn parse_hip_archs(list: &str) -> Result<Vec<String>, ArchParseError> {
    let mut archs: Vec<String> = Vec::new();
    for entry in list.split([',', ' ', '\t']).filter(|e| !e.is_empty()) {
        let valid = entry.strip_prefix("gfx").is_some_and(|rest| {
            let (name, features) = rest.split_once(':').unwrap_or((rest, ""));
            !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric())
                && features.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-:".contains(&b))
        });
        if !valid {
            return Err(ArchParseError { value: entry.to_owned(), var: None, expected: ARCH_EXPECTED });
        }
        if !archs.iter().any(|a| a == entry) {
            archs.push(entry.to_owned());
        }
    }
    if archs.is_empty() {
        return Err(ArchParseError { value: list.to_owned(), var: None, expected: ARCH_EXPECTED });
    }
    Ok(archs)
}

/// Compiles `src` into the code object `out` for `arch`:
/// `hipcc --genco --offload-arch=ARCH` with [`HIPCC_FLAGS`] and then `extra_flags`.
pub fn compile_code_object(hipcc: &Path, src: &Path, out: &Path, arch: &str, extra_flags: &[&str]) -> Result<(), CompileError> {
    command::create_parent(out)?;
    let mut cmd = Command::new(hipcc);
    cmd.arg("--genco").arg(format!("--offload-arch={arch}")).args(HIPCC_FLAGS).args(extra_flags).arg("-o").arg(out).arg(src);
    command::run(&mut cmd)
}

/// Flags that make every hipcc warning an error: what CI builds the generated code with
/// (`DT_KERNELS_WERROR`), so that warnings cannot land.
pub const HIPCC_WERROR_FLAGS: &[&str] = &["-Wall", "-Wextra", "-Werror"];

/// [`compile_code_object`] of the file `src`, cached in `cache_dir` as `<name>_<arch>-<hash>.co`,
/// the hash over the source's bytes (not its path), the architecture, every flag and hipcc's
/// path and version: a build script and a test that compile the same source alike share one
/// compile.
pub fn cached_code_object(
    cache_dir: &Path,
    name: &str,
    hipcc: &Path,
    src: &Path,
    arch: &str,
    extra_flags: &[&str],
) -> Result<PathBuf, CompileError> {
    let source = std::fs::read(src).map_err(|source| CompileError::Io { path: src.to_owned(), source })?;
    let version = command::version(hipcc)?;
    let flags = HIPCC_FLAGS.iter().chain(extra_flags).copied().collect::<Vec<_>>().join(" ");
    let key: [&[u8]; 5] = [&source, arch.as_bytes(), flags.as_bytes(), version.as_bytes(), hipcc.as_os_str().as_encoded_bytes()];
    // A target id such as `gfx90a:xnack+` is no file name.
    let safe: String = arch.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    cache::cached(cache_dir, &format!("{name}_{safe}.co"), &key, |tmp| compile_code_object(hipcc, src, tmp, arch, extra_flags))
}

/// Splits `candidates` into the architectures `hipcc` can compile for and those it cannot, by
/// compiling a tiny kernel for each (in parallel), so that a build script can build the first
/// and warn about the rest. Order is kept.
///
/// Each answer is cached in `work_dir` (use OUT_DIR) under a name that hashes the hipcc version
/// and the architecture, so reruns of the build script do not probe again. Fails only when
/// hipcc cannot be run at all or `work_dir` cannot be written.
pub fn supported_archs<S: AsRef<str>>(hipcc: &Path, candidates: &[S], work_dir: &Path) -> Result<(Vec<String>, Vec<String>), CompileError> {
    let version = command::version(hipcc)?;
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| CompileError::Io { path, source }
    };
    let probe_dir = work_dir.join("hip-probe");
    std::fs::create_dir_all(&probe_dir).map_err(io_err(&probe_dir))?;
    let src = probe_dir.join("probe.hip");
    if std::fs::read_to_string(&src).ok().as_deref() != Some(PROBE_SOURCE) {
        std::fs::write(&src, PROBE_SOURCE).map_err(io_err(&src))?;
    }

    let probe = |arch: &str| -> Result<bool, CompileError> {
        let key = cache::content_hash(&[version.as_bytes(), arch.as_bytes(), PROBE_SOURCE.as_bytes()]);
        let safe: String = arch.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let marker = probe_dir.join(format!("{safe}-{key}.result"));
        match std::fs::read_to_string(&marker).as_deref() {
            Ok("supported") => return Ok(true),
            Ok("unsupported") => return Ok(false),
            _ => {}
        }
        let out = probe_dir.join(format!("{safe}-{key}.co"));
        let supported = match compile_code_object(hipcc, &src, &out, arch, &[]) {
            Ok(()) => true,
            Err(CompileError::Failed { .. }) => false,
            Err(e) => return Err(e),
        };
        let _ = std::fs::remove_file(&out);
        let answer = if supported { "supported" } else { "unsupported" };
        std::fs::write(&marker, answer).map_err(io_err(&marker))?;
        Ok(supported)
    };

    let answers: Vec<Result<bool, CompileError>> = std::thread::scope(|s| {
        let handles: Vec<_> = candidates
            .iter()
            .map(|arch| {
                let arch: &str = arch.as_ref();
                let probe = &probe;
                s.spawn(move || probe(arch))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("probe thread panicked")).collect()
    });
    let (mut supported, mut unsupported) = (Vec::new(), Vec::new());
    for (arch, answer) in candidates.iter().zip(answers) {
        let arch = arch.as_ref().to_owned();
        if answer? {
            supported.push(arch);
        } else {
            unsupported.push(arch);
        }
    }
    Ok((supported, unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hip_archs() {
        assert_eq!(parse_hip_archs("gfx90a, gfx942,gfx90a").unwrap(), ["gfx90a", "gfx942"]);
        assert_eq!(parse_hip_archs("gfx90a:xnack+").unwrap(), ["gfx90a:xnack+"]);
        for bad in ["", "sm_80", "gfx", "gfx90a;x", "90a"] {
            assert!(parse_hip_archs(bad).is_err(), "{bad:?} parsed");
        }
        let env = BuildEnv::from_pairs::<&str, &str>([]);
        assert_eq!(hip_archs(&env).unwrap(), DEFAULT_HIP_ARCHS);
        assert_eq!(env.vars_read(), ["HIP_ARCHS"]);
        let env = BuildEnv::from_pairs([("HIP_ARCHS", "gfx1100")]);
        assert_eq!(hip_archs(&env).unwrap(), ["gfx1100"]);
        let env = BuildEnv::from_pairs([("HIP_ARCHS", "sm_90")]);
        assert!(hip_archs(&env).unwrap_err().to_string().contains("in HIP_ARCHS"));
    }

    #[cfg(unix)]
    #[test]
    fn find_hipcc_precedence() {
        use crate::search::tests::fake_tool;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let explicit = fake_tool(&d.join("explicit"), "hipcc", "exit 0");
        let rocm = fake_tool(&d.join("rocm"), "hipcc", "exit 0");
        let on_path = fake_tool(&d.join("path"), "hipcc", "exit 0");
        let path = d.join("path/bin").into_os_string();
        let no_opt_rocm = !Path::new("/opt/rocm/bin/hipcc").exists();

        let env = BuildEnv::from_pairs([
            ("HIPCC", explicit.clone().into_os_string()),
            ("ROCM_PATH", d.join("rocm").into_os_string()),
            ("PATH", path.clone()),
        ]);
        assert_eq!(find_hipcc(&env), Some(explicit));
        assert_eq!(env.vars_read(), ["HIPCC"]);
        let env = BuildEnv::from_pairs([("ROCM_PATH", d.join("rocm").into_os_string()), ("PATH", path.clone())]);
        assert_eq!(find_hipcc(&env), Some(rocm));
        if no_opt_rocm {
            let env = BuildEnv::from_pairs([("PATH", path)]);
            assert_eq!(find_hipcc(&env), Some(on_path));
            assert_eq!(env.vars_read(), ["HIPCC", "ROCM_PATH", "PATH"]);
        }
    }

    #[cfg(unix)]
    #[test]
    fn supported_archs_probes_once_and_caches() {
        use crate::search::tests::fake_tool;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        // Supports gfx90a and gfx942 only; logs each compile.
        let script = format!(
            r#"if [ "$1" = --version ]; then echo "HIP version: 6.2"; exit 0; fi
echo "$2" >> '{}'
case "$2" in
  --offload-arch=gfx90a|--offload-arch=gfx942) ;;
  *) echo "clang: error: unsupported HIP gpu architecture: ${{2#--offload-arch=}}" >&2; exit 1;;
esac
for a in "$@"; do if [ "$prev" = -o ]; then echo obj > "$a"; fi; prev="$a"; done"#,
            log.display()
        );
        let hipcc = fake_tool(dir.path(), "hipcc", &script);
        let work = dir.path().join("out");
        let candidates = ["gfx90a", "gfx1200", "gfx942", "gfx90a:xnack+"];
        let expected = (vec!["gfx90a".to_owned(), "gfx942".to_owned()], vec!["gfx1200".to_owned(), "gfx90a:xnack+".to_owned()]);
        assert_eq!(supported_archs(&hipcc, &candidates, &work).unwrap(), expected);
        let probes = std::fs::read_to_string(&log).unwrap().lines().count();
        assert_eq!(probes, 4);
        assert_eq!(supported_archs(&hipcc, &candidates, &work).unwrap(), expected);
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 4, "probed again");

        let missing = dir.path().join("no-hipcc");
        assert!(matches!(supported_archs(&missing, &candidates, &work), Err(CompileError::Spawn { .. })));
    }
}
