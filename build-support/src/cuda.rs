//! CUDA: find `nvcc`, choose target architectures, compile fatbins, cubins and PTX.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use crate::search::ToolSearch;
use crate::{command, ArchParseError, BuildEnv, CompileError};

/// Variables that name the CUDA installation root, in the order they are tried.
pub const CUDA_ROOT_VARS: &[&str] = &["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR"];

/// Architectures built when neither `CUDA_COMPUTE_CAPS` nor `CUDA_COMPUTE_CAP` is set.
pub const DEFAULT_COMPUTE_CAPS: [Arch; 2] = [Arch::new(80), Arch::with_suffix(90, 'a')];

/// Flags every nvcc compile gets; `extra_flags` must not repeat them (nvcc rejects a second
/// `-std`).
pub const NVCC_FLAGS: &[&str] = &["-O3", "-std=c++17"];

const ARCH_EXPECTED: &str = "a compute capability such as 80, 90a, sm_90a, compute_86 or 8.6";

/// A CUDA GPU architecture: a compute capability (`90` for 9.0) with an optional suffix
/// (`a` for arch-specific features such as wgmma on sm_90a, `f` for family-specific ones).
///
/// Displays as `sm_90a`. Code built for a suffixed architecture runs only on that
/// architecture (or family), so its PTX is useless to newer GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    number: u32,
    suffix: Option<char>,
}

impl Arch {
    /// `sm_{number}`, e.g. `Arch::new(80)` is sm_80.
    pub const fn new(number: u32) -> Self {
        Arch { number, suffix: None }
    }

    /// `sm_{number}{suffix}`, e.g. `Arch::with_suffix(90, 'a')` is sm_90a.
    pub const fn with_suffix(number: u32, suffix: char) -> Self {
        Arch { number, suffix: Some(suffix) }
    }

    /// The compute capability times ten, e.g. 90 for sm_90a.
    pub fn number(self) -> u32 {
        self.number
    }

    /// The suffix, e.g. `Some('a')` for sm_90a.
    pub fn suffix(self) -> Option<char> {
        self.suffix
    }

    /// Whether PTX for this architecture can be JIT-compiled for later GPUs (no suffix).
    pub fn is_portable(self) -> bool {
        self.suffix.is_none()
    }

    /// The real architecture, e.g. `sm_90a`.
    pub fn sm(self) -> String {
        self.to_string()
    }

    /// The virtual architecture, e.g. `compute_90a`.
    pub fn compute(self) -> String {
        format!("compute_{}", self.digits())
    }

    fn digits(self) -> String {
        match self.suffix {
            Some(s) => format!("{}{s}", self.number),
            None => self.number.to_string(),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.digits())
    }
}

impl FromStr for Arch {
    type Err = ArchParseError;

    /// Accepts `80`, `90a`, `sm_90a`, `compute_90a`, `8.6` and `9.0a`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ArchParseError { value: s.to_owned(), var: None, expected: ARCH_EXPECTED };
        let t = s.trim();
        let t = t.strip_prefix("sm_").or_else(|| t.strip_prefix("compute_")).unwrap_or(t);
        let (t, suffix) = match t.strip_suffix(['a', 'f']) {
            Some(rest) => (rest, t.chars().last()),
            None => (t, None),
        };
        let digits: String = match t.split_once('.') {
            Some((major, minor)) if minor.len() == 1 => format!("{major}{minor}"),
            Some(_) => return Err(err()),
            None => t.to_owned(),
        };
        if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        let number = digits.parse().map_err(|_| err())?;
        Ok(Arch { number, suffix })
    }
}

/// Finds nvcc: `NVCC` (the executable, or a bare name looked up on `PATH`), then `bin/nvcc`
/// under `CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`, then
/// `/usr/local/cuda/bin/nvcc`, then `PATH`. Candidates that are not executable files are
/// skipped. Records in `env` every variable read.
pub fn find_nvcc(env: &BuildEnv) -> Option<PathBuf> {
    nvcc_search().find(env)
}

fn nvcc_search() -> ToolSearch {
    ToolSearch { exe: "nvcc", exe_var: "NVCC", root_vars: CUDA_ROOT_VARS, fixed_roots: vec![PathBuf::from("/usr/local/cuda")] }
}

/// The architectures to build: `CUDA_COMPUTE_CAPS` (a comma list such as `80,90a` or
/// `sm_80,sm_90a`), else `CUDA_COMPUTE_CAP` (one entry), else [`DEFAULT_COMPUTE_CAPS`].
/// Duplicates are dropped; order is kept. Records in `env` every variable read.
pub fn compute_caps(env: &BuildEnv) -> Result<Vec<Arch>, ArchParseError> {
    for var in ["CUDA_COMPUTE_CAPS", "CUDA_COMPUTE_CAP"] {
        if let Some(value) = env.var(var).filter(|v| !v.trim().is_empty()) {
            return parse_compute_caps(&value).map_err(|e| e.in_var(var));
        }
    }
    Ok(DEFAULT_COMPUTE_CAPS.to_vec())
}

/// Parses a comma (or whitespace) separated list of architectures; see [`Arch::from_str`].
pub fn parse_compute_caps(list: &str) -> Result<Vec<Arch>, ArchParseError> {
    let mut archs = Vec::new();
    for entry in list.split([',', ' ', '\t']).filter(|e| !e.is_empty()) {
        let arch: Arch = entry.parse()?;
        if !archs.contains(&arch) {
            archs.push(arch);
        }
    }
    if archs.is_empty() {
        return Err(ArchParseError { value: list.to_owned(), var: None, expected: ARCH_EXPECTED });
    }
    Ok(archs)
}

/// The `-gencode` flags of a fatbin: SASS for each of `archs` and PTX for the highest portable
/// (unsuffixed) one, so that GPUs newer than all of them can JIT it. Without a portable
/// architecture there is no PTX: PTX for `compute_90a` runs on sm_90 only.
pub fn fatbin_gencode_flags(archs: &[Arch]) -> Vec<String> {
    let mut unique: Vec<Arch> = Vec::new();
    for &a in archs {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    let mut flags: Vec<String> = unique.iter().map(|&a| gencode_sass(a)).collect();
    if let Some(ptx) = unique.iter().filter(|a| a.is_portable()).max() {
        flags.push(format!("-gencode=arch={0},code={0}", ptx.compute()));
    }
    flags
}

fn gencode_sass(arch: Arch) -> String {
    format!("-gencode=arch={},code={}", arch.compute(), arch.sm())
}

/// Compiles `src` into the fatbin `out` for `archs` (see [`fatbin_gencode_flags`]), with
/// [`NVCC_FLAGS`] and then `extra_flags`.
pub fn compile_fatbin(nvcc: &Path, src: &Path, out: &Path, archs: &[Arch], extra_flags: &[&str]) -> Result<(), CompileError> {
    if archs.is_empty() {
        return Err(CompileError::InvalidInput(format!("no CUDA architecture to compile {} for", src.display())));
    }
    nvcc_compile(nvcc, "--fatbin", &fatbin_gencode_flags(archs), src, out, extra_flags)
}

/// Flags that make every warning of nvcc, of its front end and of ptxas an error: what CI
/// builds the generated code with (`DT_KERNELS_WERROR`), so that warnings cannot land.
pub const NVCC_WERROR_FLAGS: &[&str] = &["-Werror", "all-warnings", "-Xptxas", "-Werror"];

/// [`compile_fatbin`] of the file `src`, cached in `cache_dir` as `<name>-<hash>.fatbin`, the
/// hash over the source's bytes (not its path), the architectures, every flag and nvcc's path
/// and version: a build script and a test that compile the same source alike share one compile.
pub fn cached_fatbin(
    cache_dir: &Path,
    name: &str,
    nvcc: &Path,
    src: &Path,
    archs: &[Arch],
    extra_flags: &[&str],
) -> Result<PathBuf, CompileError> {
    let source = std::fs::read(src).map_err(|source| CompileError::Io { path: src.to_owned(), source })?;
    let version = command::version(nvcc)?;
    let archs_text = archs.iter().map(Arch::to_string).collect::<Vec<_>>().join(",");
    let flags = NVCC_FLAGS.iter().chain(extra_flags).copied().collect::<Vec<_>>().join(" ");
    let key: [&[u8]; 5] = [&source, archs_text.as_bytes(), flags.as_bytes(), version.as_bytes(), nvcc.as_os_str().as_encoded_bytes()];
    crate::cache::cached(cache_dir, &format!("{name}.fatbin"), &key, |tmp| compile_fatbin(nvcc, src, tmp, archs, extra_flags))
}

/// Compiles `src` into the cubin `out` for the one architecture `arch` (SASS only). Used to
/// check that generated code compiles, and for loading on a known GPU.
pub fn compile_cubin(nvcc: &Path, src: &Path, out: &Path, arch: Arch, extra_flags: &[&str]) -> Result<(), CompileError> {
    nvcc_compile(nvcc, "--cubin", &[gencode_sass(arch)], src, out, extra_flags)
}

/// Compiles `src` into the PTX file `out` for the virtual architecture of `arch`.
pub fn compile_ptx(nvcc: &Path, src: &Path, out: &Path, arch: Arch, extra_flags: &[&str]) -> Result<(), CompileError> {
    let gencode = format!("-gencode=arch={0},code={0}", arch.compute());
    nvcc_compile(nvcc, "--ptx", &[gencode], src, out, extra_flags)
}

fn nvcc_compile(nvcc: &Path, mode: &str, gencode: &[String], src: &Path, out: &Path, extra_flags: &[&str]) -> Result<(), CompileError> {
    command::create_parent(out)?;
    let mut cmd = Command::new(nvcc);
    cmd.arg(mode).args(NVCC_FLAGS).args(gencode).args(extra_flags).arg("-o").arg(out).arg(src);
    command::run(&mut cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Vec<String> {
        parse_compute_caps(s).unwrap().iter().map(|a| a.sm()).collect()
    }

    #[test]
    fn parses_arch_spellings() {
        assert_eq!(parse("80,90a"), ["sm_80", "sm_90a"]);
        assert_eq!(parse("sm_80, sm_90a"), ["sm_80", "sm_90a"]);
        assert_eq!(parse("compute_86"), ["sm_86"]);
        assert_eq!(parse("8.6,9.0a,120"), ["sm_86", "sm_90a", "sm_120"]);
        assert_eq!(parse("100f"), ["sm_100f"]);
        assert_eq!(parse("90a,80,90a"), ["sm_90a", "sm_80"]);
        assert_eq!(Arch::with_suffix(90, 'a').compute(), "compute_90a");
        for bad in ["", ",", "8", "sm_8x", "90b", "1000", "8.10", "sm_", "x80"] {
            assert!(parse_compute_caps(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn compute_caps_precedence_and_default() {
        let caps = |pairs: &[(&str, &str)]| {
            let env = BuildEnv::from_pairs(pairs.iter().copied());
            (compute_caps(&env), env.vars_read())
        };
        let (r, read) = caps(&[]);
        assert_eq!(r.unwrap(), DEFAULT_COMPUTE_CAPS);
        assert_eq!(read, ["CUDA_COMPUTE_CAPS", "CUDA_COMPUTE_CAP"]);

        let (r, _) = caps(&[("CUDA_COMPUTE_CAP", "86")]);
        assert_eq!(r.unwrap(), [Arch::new(86)]);

        let (r, read) = caps(&[("CUDA_COMPUTE_CAPS", "sm_80,sm_90a"), ("CUDA_COMPUTE_CAP", "86")]);
        assert_eq!(r.unwrap(), [Arch::new(80), Arch::with_suffix(90, 'a')]);
        assert_eq!(read, ["CUDA_COMPUTE_CAPS"]);

        let (r, _) = caps(&[("CUDA_COMPUTE_CAPS", " "), ("CUDA_COMPUTE_CAP", "75")]);
        assert_eq!(r.unwrap(), [Arch::new(75)]);

        let (r, _) = caps(&[("CUDA_COMPUTE_CAP", "sm_8x")]);
        let e = r.unwrap_err();
        assert_eq!(e.var.as_deref(), Some("CUDA_COMPUTE_CAP"));
        assert!(e.to_string().contains("\"sm_8x\" in CUDA_COMPUTE_CAP"));
    }

    #[test]
    fn fatbin_flags_use_gencode_and_ptx_of_highest_portable_arch() {
        assert_eq!(
            fatbin_gencode_flags(&DEFAULT_COMPUTE_CAPS),
            ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_80,code=compute_80",]
        );
        assert_eq!(
            fatbin_gencode_flags(&parse_compute_caps("90,86,80,86").unwrap()),
            [
                "-gencode=arch=compute_90,code=sm_90",
                "-gencode=arch=compute_86,code=sm_86",
                "-gencode=arch=compute_80,code=sm_80",
                "-gencode=arch=compute_90,code=compute_90",
            ]
        );
        assert_eq!(fatbin_gencode_flags(&[Arch::with_suffix(90, 'a')]), ["-gencode=arch=compute_90a,code=sm_90a"]);
    }

    #[cfg(unix)]
    mod with_fake_nvcc {
        use super::super::*;
        use crate::search::tests::fake_tool;

        const CUDA_VARS: [&str; 5] = ["NVCC", "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR"];

        /// A search whose fixed root is under `dir`, so the machine's own CUDA cannot interfere.
        fn search_in(dir: &Path) -> ToolSearch {
            ToolSearch { fixed_roots: vec![dir.join("usr-local-cuda")], ..nvcc_search() }
        }

        #[test]
        fn find_nvcc_precedence() {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            // One installation per source, each with its own nvcc.
            let nvcc: Vec<PathBuf> = CUDA_VARS.iter().map(|v| fake_tool(&d.join(v), "nvcc", "exit 0")).collect();
            let fixed = fake_tool(&d.join("usr-local-cuda"), "nvcc", "exit 0");
            let on_path = fake_tool(&d.join("path"), "nvcc", "exit 0");
            let value = |i: usize| -> PathBuf {
                if i == 0 {
                    nvcc[0].clone()
                } else {
                    d.join(CUDA_VARS[i])
                }
            };
            let path_var = std::env::join_paths([d.join("empty"), d.join("path/bin")]).unwrap();

            // With sources 0..n all set, the first one wins; drop them one by one.
            for first in 0..CUDA_VARS.len() {
                let mut pairs: Vec<(String, std::ffi::OsString)> =
                    (first..CUDA_VARS.len()).map(|i| (CUDA_VARS[i].to_owned(), value(i).into_os_string())).collect();
                pairs.push(("PATH".into(), path_var.clone()));
                let env = BuildEnv::from_pairs(pairs);
                assert_eq!(search_in(d).find(&env).as_ref(), Some(&nvcc[first]), "first = {first}");
                // Variables after the hit are not read: they cannot change the result.
                assert_eq!(env.vars_read(), CUDA_VARS[..=first]);
            }

            let env = BuildEnv::from_pairs([("PATH", path_var.clone())]);
            assert_eq!(search_in(d).find(&env), Some(fixed.clone()));
            assert_eq!(env.vars_read(), CUDA_VARS);

            std::fs::remove_file(&fixed).unwrap();
            let env = BuildEnv::from_pairs([("PATH", path_var.clone())]);
            assert_eq!(search_in(d).find(&env), Some(on_path.clone()));
            let mut all: Vec<&str> = CUDA_VARS.to_vec();
            all.push("PATH");
            assert_eq!(env.vars_read(), all);
            assert!(env.rerun_if_env_changed_lines().contains("cargo:rerun-if-env-changed=CUDA_TOOLKIT_ROOT_DIR\n"));

            // Broken settings fall through; a bare NVCC name is looked up on PATH.
            let env = BuildEnv::from_pairs([
                ("NVCC", d.join("missing/nvcc").into_os_string()),
                ("CUDA_HOME", d.join("missing").into_os_string()),
                ("PATH", path_var.clone()),
            ]);
            assert_eq!(search_in(d).find(&env), Some(on_path.clone()));
            let env =
                BuildEnv::from_pairs([("NVCC", "nvcc".into()), ("CUDA_HOME", d.join("CUDA_HOME").into_os_string()), ("PATH", path_var)]);
            assert_eq!(search_in(d).find(&env), Some(on_path));

            assert_eq!(search_in(d).find(&BuildEnv::from_pairs::<&str, &str>([])), None);
        }

        /// A fake nvcc that writes its arguments into the file after `-o`, or fails like nvcc
        /// when the source contains `error`.
        const FAKE_NVCC: &str = r#"
out=""; src=""; prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out="$a"; fi
  prev="$a"; src="$a"
done
if grep -q error "$src"; then echo "$src(1): error: expected a \";\"" >&2; exit 1; fi
printf '%s\n' "$@" > "$out""#;

        #[test]
        fn compile_runs_the_right_command_and_reports_failures() {
            let dir = tempfile::tempdir().unwrap();
            let nvcc = fake_tool(dir.path(), "nvcc", FAKE_NVCC);
            let src = dir.path().join("k.cu");
            std::fs::write(&src, "__global__ void k() {}\n").unwrap();

            let out = dir.path().join("sub dir/k.fatbin");
            compile_fatbin(&nvcc, &src, &out, &DEFAULT_COMPUTE_CAPS, &["-lineinfo"]).unwrap();
            let args = std::fs::read_to_string(&out).unwrap();
            let expected = [
                "--fatbin",
                "-O3",
                "-std=c++17",
                "-gencode=arch=compute_80,code=sm_80",
                "-gencode=arch=compute_90a,code=sm_90a",
                "-gencode=arch=compute_80,code=compute_80",
                "-lineinfo",
                "-o",
                out.to_str().unwrap(),
                src.to_str().unwrap(),
            ];
            assert_eq!(args.lines().collect::<Vec<_>>(), expected);

            let cubin = dir.path().join("k.cubin");
            compile_cubin(&nvcc, &src, &cubin, Arch::with_suffix(90, 'a'), &[]).unwrap();
            assert!(std::fs::read_to_string(&cubin)
                .unwrap()
                .starts_with("--cubin\n-O3\n-std=c++17\n-gencode=arch=compute_90a,code=sm_90a\n-o\n"));
            let ptx = dir.path().join("k.ptx");
            compile_ptx(&nvcc, &src, &ptx, Arch::new(80), &[]).unwrap();
            assert!(std::fs::read_to_string(&ptx).unwrap().contains("\n-gencode=arch=compute_80,code=compute_80\n"));

            let err = compile_fatbin(&nvcc, &src, &out, &[], &[]).unwrap_err();
            assert!(matches!(err, CompileError::InvalidInput(_)), "{err}");

            std::fs::write(&src, "error here\n").unwrap();
            let err = compile_cubin(&nvcc, &src, &cubin, Arch::new(80), &[]).unwrap_err();
            let msg = err.to_string();
            let command = format!(
                "{} --cubin -O3 -std=c++17 -gencode=arch=compute_80,code=sm_80 -o {} {}",
                nvcc.display(),
                cubin.display(),
                src.display()
            );
            assert!(!command.contains('\''), "temp dir needs no quoting");
            assert_eq!(
                msg,
                format!("command failed (exit status: 1):\n  {command}\n--- stderr ---\n{}(1): error: expected a \";\"\n", src.display())
            );
        }
    }

    /// Compiles a trivial kernel with the nvcc found through the environment; skipped (with a
    /// message) where there is none.
    #[test]
    fn real_nvcc_compiles_trivial_kernel() {
        let env = BuildEnv::from_process();
        let Some(nvcc) = find_nvcc(&env) else {
            eprintln!("skipped: no nvcc found (set NVCC or CUDA_HOME to run this test)");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("k.cu");
        std::fs::write(
            &src,
            "extern \"C\" __global__ void add1(float* x, int n) {\n\
             int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
             if (i < n) x[i] += 1.0f;\n}\n",
        )
        .unwrap();
        let cubin = dir.path().join("k.cubin");
        compile_cubin(&nvcc, &src, &cubin, Arch::new(80), &[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(std::fs::read(&cubin).unwrap().starts_with(b"\x7fELF"));
        let fatbin = dir.path().join("k.fatbin");
        compile_fatbin(&nvcc, &src, &fatbin, &DEFAULT_COMPUTE_CAPS, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(std::fs::metadata(&fatbin).unwrap().len() > 0);
    }
}
