//! Compiles generated CPU C into a shared library with the system C compiler (found as the `cc`
//! crate finds it) and calls its kernels on host tensors: the engine behind
//! `dtc run --backend cpu` and the tests that run generated C.

use crate::abi::DtArgs;
use crate::emit::gpu::Layouts;
use dt_core::algo::Program;
use dt_core::kir::Kernel;
use dt_core::signature::{GpuFeatures, Signature};
use dt_core::tensor::{strides, Bound, Tensor};
use dt_core::DType;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug)]
pub struct HostError(pub String);

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostError {}

/// The C compiler and flags for this machine.
pub fn c_compiler() -> Result<cc::Tool, HostError> {
    let target = env!("DT_HOST_TARGET");
    cc::Build::new()
        .target(target)
        .host(target)
        .opt_level(2)
        .cargo_metadata(false)
        .try_get_compiler()
        .map_err(|e| HostError(format!("no C compiler found: {e}")))
}

/// A directory of this process's own for build products, removed when dropped: a fresh name,
/// created with mode 0700, so that no other user can place or swap files in it.
pub fn private_dir(prefix: &str) -> Result<tempfile::TempDir, HostError> {
    tempfile::Builder::new().prefix(prefix).tempdir().map_err(|e| HostError(format!("creating a private build directory: {e}")))
}

/// Writes `bytes` to `path` whole or not at all: into a new file beside it, then renamed over it,
/// so that a failed write (a full disk) leaves the file that was there as it was. As a plain
/// write would: through a symbolic link to the file it names, keeping the permissions of the file
/// replaced, and giving a new one those of the process's umask. A path that names a device, a
/// pipe or a socket is written into as it is.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let target = if path.is_symlink() { std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()) } else { path.to_path_buf() };
    let dir = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let existing = std::fs::metadata(&target).ok();
    // A device, pipe or socket (`/dev/stdout`, a FIFO) is written into, not replaced by a file.
    if existing.as_ref().is_some_and(|m| !m.is_file() && !m.is_dir()) {
        return std::fs::OpenOptions::new().write(true).open(&target).and_then(|mut f| f.write_all(bytes)).map_err(err);
    }
    let replaced = existing.map(|m| m.permissions());
    let mut builder = tempfile::Builder::new();
    // Created as `open` creates a file, 0666 less the umask (a temporary file's own is 0600).
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut tmp = builder.tempfile_in(dir).map_err(err)?;
    if let Some(permissions) = replaced {
        tmp.as_file().set_permissions(permissions).map_err(err)?;
    }
    tmp.write_all(bytes).and_then(|_| tmp.as_file().sync_all()).map_err(err)?;
    tmp.persist(&target).map_err(|e| err(e.error))?;
    Ok(())
}

/// A compiled shared library of generated kernels.
pub struct CpuLibrary {
    lib: libloading::Library,
    pub path: PathBuf,
}

/// Compiles C `source` into a shared library under `dir` (with `-O2 -Wall -Wextra -Werror`).
pub fn compile(source: &str, dir: &Path, name: &str) -> Result<CpuLibrary, HostError> {
    compile_with(source, dir, name, "-O2")
}

/// As [`compile`], with another optimization flag (tests that compile many kernels use `-O1`).
pub fn compile_with(source: &str, dir: &Path, name: &str, opt: &str) -> Result<CpuLibrary, HostError> {
    std::fs::create_dir_all(dir).map_err(|e| HostError(format!("{}: {e}", dir.display())))?;
    let src = dir.join(format!("{name}.c"));
    let lib = dir.join(format!("lib{name}.so"));
    std::fs::write(&src, source).map_err(|e| HostError(format!("{}: {e}", src.display())))?;
    let tool = c_compiler()?;
    let mut cmd: Command = tool.to_command();
    cmd.args([opt, "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .arg("-lm");
    // The command as a shell would run it: the program and its arguments, not the environment.
    let line = std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
    let out = cmd.output().map_err(|e| HostError(format!("could not start the C compiler ({line}): {e}")))?;
    if !out.status.success() {
        return Err(HostError(format!("C compile failed: {line}\n{}", String::from_utf8_lossy(&out.stderr))));
    }
    // SAFETY: the library is code we generated and just compiled; loading runs no initializers
    // beyond the C runtime's.
    let handle = unsafe { libloading::Library::new(&lib) }.map_err(|e| HostError(format!("{}: {e}", lib.display())))?;
    Ok(CpuLibrary { lib: handle, path: lib })
}

/// Host storage of one tensor in an element type.
pub(crate) enum Buf {
    F32(Vec<f32>),
    Half(Vec<u16>),
}

impl Buf {
    pub(crate) fn from(t: &Tensor, dtype: DType) -> Buf {
        match dtype {
            DType::F32 => Buf::F32(t.data.clone()),
            DType::F16 => Buf::Half(t.data.iter().map(|v| half::f16::from_f32(*v).to_bits()).collect()),
            DType::BF16 => Buf::Half(t.data.iter().map(|v| half::bf16::from_f32(*v).to_bits()).collect()),
        }
    }

    pub(crate) fn addr(&self) -> u64 {
        match self {
            Buf::F32(v) => v.as_ptr() as u64,
            Buf::Half(v) => v.as_ptr() as u64,
        }
    }

    pub(crate) fn to_f32(&self, dtype: DType) -> Vec<f32> {
        match (self, dtype) {
            (Buf::F32(v), _) => v.clone(),
            (Buf::Half(v), DType::BF16) => v.iter().map(|b| half::bf16::from_bits(*b).to_f32()).collect(),
            (Buf::Half(v), _) => v.iter().map(|b| half::f16::from_bits(*b).to_f32()).collect(),
        }
    }
}

/// Fills the argument block for `k` from bound arguments and buffer addresses.
pub fn fill_args(k: &Signature, bound: &Bound, input_addrs: &[u64], output_addr: u64) -> DtArgs {
    let mut a = DtArgs::default();
    for (i, t) in bound.inputs.iter().enumerate() {
        a.inputs[i] = input_addrs[i];
        for (axis, s) in strides(&t.shape).iter().enumerate() {
            a.input_strides[i][axis] = *s as i64;
        }
    }
    a.output = output_addr;
    for (axis, s) in strides(&bound.out_shape).iter().enumerate() {
        a.output_strides[axis] = *s as i64;
    }
    for (slot, (d, _)) in k.dims.iter().enumerate() {
        a.sizes[slot] = bound.size(*d) as i64;
    }
    for (i, v) in bound.scalars.iter().enumerate() {
        a.scalars[i] = *v;
    }
    a
}

/// The most specific layouts the launch of `k` with argument block `a` has
/// ([`Layouts::of_launch`]): which of the kernel's twins may run it.
pub fn launch_layouts(k: &Kernel, dtype: DType, a: &DtArgs) -> Layouts {
    Layouts::of_launch(k, dtype.size_bytes(), |slot| a.sizes[slot], &dt_core::select::launch_tensors(k, a))
}

/// Checks that the kernel of launch parameters `info` may run on tensors of layouts `have`
/// ([`launch_layouts`]): one built for whole runs only where they are, the specialized twin only
/// on its sizes and contiguous tensors.
pub fn check_layouts(info: &crate::emit::gpu::LaunchInfo, have: Layouts) -> Result<(), HostError> {
    if info.layouts <= have {
        return Ok(());
    }
    Err(HostError(match info.layouts {
        Layouts::Specialized => format!(
            "kernel `{}` is built for the sizes its schedule specializes and contiguous tensors, and this launch \
             does not have them all",
            info.symbol
        ),
        _ => format!(
            "kernel `{}` is built for whole 16-byte runs, and the tensors of this launch do not all have them ({})",
            info.symbol,
            dt_core::select::WHOLE_RUNS_NEED
        ),
    }))
}

/// Checks sizes against the kernel's bounds.
pub fn check_bounds(k: &Signature, bound: &Bound) -> Result<(), HostError> {
    for (d, n) in &k.bounds {
        if bound.size(*d) as u64 > *n {
            return Err(HostError(format!(
                "dimension `{}` is {}, above the bound {n} that kernel `{}` was compiled for",
                k.dim_name(*d),
                bound.size(*d),
                k.name
            )));
        }
    }
    Ok(())
}

/// The size class of kernel `family` of program `p` (lowered to `kernels`) that a run of `args`
/// in element type `dtype` runs on a backend offering `features`, with the arguments bound to it:
/// the library's rule ([`dt_core::select::choose_class`]) with the checks it makes, the type
/// built, the bounds admitting the sizes, the tensors admitted, for the fresh contiguous buffers
/// of the bench and `dtc run` (every address aligned).
pub fn choose_size_class<'k, 'a, K: AsRef<Signature>>(
    p: &Program,
    kernels: &'k [K],
    family: &str,
    args: &'a dt_core::tensor::Args,
    dtype: DType,
    features: GpuFeatures,
) -> Option<(&'k K, Bound<'a>)> {
    dt_core::select::choose_class(
        kernels,
        family,
        features,
        |kernel| {
            let kernel = kernel.as_ref();
            let bound = dt_core::tensor::bind(p, p.kernel_by_name(&kernel.name)?, args).ok()?;
            // A kernel of more arguments than the argument block holds has no launch to check
            // (`dtc eval` runs it all the same; the emitters refuse it, saying so).
            let tensors_ok = crate::emit::check_abi(kernel).is_err() || {
                let a = fill_args(kernel, &bound, &vec![0; kernel.inputs.len()], 0);
                kernel.admits_tensors(dtype.size_bytes(), &a.sizes, &dt_core::select::launch_tensors(kernel, &a))
            };
            (kernel.dtypes.contains(&dtype) && check_bounds(kernel, &bound).is_ok() && tensors_ok).then_some(bound)
        },
        |bound, d| bound.size(d),
    )
}

impl CpuLibrary {
    /// Runs kernel `k` (compiled as `symbol` for `dtype`). The output starts as NaN, so an
    /// element the kernel fails to write shows.
    pub fn run(&self, symbol: &str, k: &Kernel, bound: &Bound, dtype: DType) -> Result<Tensor, HostError> {
        check_bounds(k, bound)?;
        let inputs: Vec<Buf> = bound.inputs.iter().map(|t| Buf::from(t, dtype)).collect();
        let n: usize = bound.out_shape.iter().product();
        let out = Buf::from(&Tensor { shape: vec![n], data: vec![f32::NAN; n] }, dtype);
        let args = fill_args(k, bound, &inputs.iter().map(Buf::addr).collect::<Vec<_>>(), out.addr());
        // SAFETY: the symbol was emitted with the signature
        // `int(const dt_args*, long long, long long)` (all programs: 0..i64::MAX), and every
        // pointer in `args` refers to a buffer that outlives the call, sized for the shapes the
        // kernel reads and writes.
        let status = unsafe {
            let f: libloading::Symbol<dt_core::abi::CpuKernelFn> =
                self.lib.get(symbol.as_bytes()).map_err(|e| HostError(format!("{symbol}: {e}")))?;
            f(&args, 0, i64::MAX)
        };
        if status != 0 {
            return Err(HostError(format!("{symbol}: {}", dt_core::abi::cpu_failure(status))));
        }
        Ok(Tensor { shape: bound.out_shape.clone(), data: out.to_f32(dtype) })
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::write_atomically;
    use std::os::unix::fs::PermissionsExt;

    /// A new file gets the mode a plain write gives it (0666 less the umask), a replaced file
    /// keeps its own, and a symbolic link is written through to the file it names.
    #[test]
    fn atomic_writes_keep_modes_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"x").unwrap();
        let new = dir.path().join("new");
        write_atomically(&new, b"y").unwrap();
        assert_eq!(mode(&new), mode(&plain));
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomically(&plain, b"z").unwrap();
        assert_eq!((mode(&plain), std::fs::read(&plain).unwrap()), (0o640, b"z".to_vec()));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&plain, &link).unwrap();
        write_atomically(&link, b"w").unwrap();
        assert!(link.is_symlink());
        assert_eq!((std::fs::read(&plain).unwrap(), mode(&plain)), (b"w".to_vec(), 0o640));
    }
}
