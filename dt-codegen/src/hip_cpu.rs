//! Runs generated HIP C on the CPU: compiles it unchanged as host C++ with clang against a
//! stand-in for `<hip/hip_runtime.h>` (`src/runtime/hip_cpu/hip/hip_runtime.h`) that executes
//! every thread of a block as a fiber, wavefronts of 64 lanes, shuffles as HIP defines them and
//! the matrix-core builtins of gfx90a, then calls kernels on host tensors. It exists because no
//! AMD GPU is at hand: the HIP C is otherwise only ever compiled. Slow (one core, one thread at
//! a time), so for small sizes: tests, and `tests/hip_cpu_matches_reference.rs` above all.

use crate::abi::{DtArgs, GpuArgs};
use crate::emit::gpu::LaunchInfo;
use crate::host::{check_bounds, check_layouts, fill_args, launch_layouts, Buf};
use dt_core::kir::Kernel;
use dt_core::tensor::{Bound, Tensor};
use dt_core::DType;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The emulated runtime header, written next to each compiled source as `hip/hip_runtime.h`.
pub const RUNTIME_HEADER: &str = include_str!("runtime/hip_cpu/hip/hip_runtime.h");

#[derive(Debug)]
pub struct HipCpuError(pub String);

impl std::fmt::Display for HipCpuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HipCpuError {}

/// The clang++ that compiles HIP C for the CPU: `DT_HIP_CPU_CXX`, else `clang++-15` or
/// `clang++` on `PATH`, else `/usr/lib/llvm-15/bin/clang++`. (It must be clang: the code uses
/// `_Float16` and `ext_vector_type`.)
pub fn find_compiler() -> Result<PathBuf, HipCpuError> {
    if let Some(c) = std::env::var_os("DT_HIP_CPU_CXX") {
        return Ok(PathBuf::from(c));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["clang++-15", "clang++"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    let fallback = PathBuf::from("/usr/lib/llvm-15/bin/clang++");
    if fallback.is_file() {
        return Ok(fallback);
    }
    Err(HipCpuError(
        "no clang++ found to compile HIP C for the CPU (set DT_HIP_CPU_CXX, or put clang++-15 or clang++ on PATH; \
         Debian's hipcc package brings clang-15)"
            .into(),
    ))
}

/// How to compile a HIP source for the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Define `__gfx90a__`, as the device pass for an MI200 does: selects the matrix-core path
    /// (`__builtin_amdgcn_mfma_*`, emulated) where the source has one; without it, whatever the
    /// source does on a GPU without matrix cores.
    pub gfx90a: bool,
}

/// A compiled shared library of HIP kernels for the emulator.
pub struct HipCpuLibrary {
    lib: libloading::Library,
    pub path: PathBuf,
}

/// The text compiled for `source`: the source unchanged, then the launch entry
/// `dt_hip_cpu_launch_<symbol>` of every kernel in `symbols`.
pub fn with_entries(source: &str, symbols: &[&str]) -> String {
    let mut text = source.to_string();
    text += "\n/* Launch entries of the CPU emulator (dt-codegen/src/hip_cpu.rs). */\n";
    for s in symbols {
        text += &format!("DT_HIP_CPU_KERNEL({s})\n");
    }
    text
}

/// Compiles HIP C `source` (kernels `symbols`, each `extern "C" void SYMBOL(T arg)`) into a
/// shared library under `dir`, named after `name` and a hash of everything that goes into it (a
/// library already there with that hash is reused).
pub fn compile(source: &str, symbols: &[&str], dir: &Path, name: &str, target: Target) -> Result<HipCpuLibrary, HipCpuError> {
    let cxx = find_compiler()?;
    let text = with_entries(source, symbols);
    let mut flags = vec!["-x", "c++", "-std=c++20", "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-D__HIPCC__"];
    if target.gfx90a {
        flags.push("-D__gfx90a__");
    }
    let hash = |x: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        x(&mut h);
        h.finish()
    };
    // Files are written whole under another name, then renamed: a concurrent compile (another
    // test, another process) never reads half of one.
    let write = |path: &Path, text: &str| -> Result<(), HipCpuError> {
        let tmp = path.with_extension(format!("tmp{}", unique()));
        std::fs::write(&tmp, text).map_err(io(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io(path))
    };
    let include = dir.join(format!("hip_cpu_include-{:016x}", hash(&|h| RUNTIME_HEADER.hash(h))));
    let header = include.join("hip").join("hip_runtime.h");
    if !header.exists() {
        std::fs::create_dir_all(include.join("hip")).map_err(io(&include))?;
        write(&header, RUNTIME_HEADER)?;
    }
    let tag = format!("{name}-{:016x}", hash(&|h| (&text, RUNTIME_HEADER, &flags, &cxx).hash(h)));
    let lib = dir.join(format!("lib{tag}.so"));
    if !lib.exists() {
        let src = dir.join(format!("{tag}.hip"));
        write(&src, &text)?;
        let tmp = dir.join(format!("lib{tag}.so.tmp{}", unique()));
        let mut cmd = Command::new(&cxx);
        cmd.args(&flags).arg("-I").arg(&include).arg("-o").arg(&tmp).arg(&src);
        let out = cmd.output().map_err(|e| HipCpuError(format!("could not start {} ({cmd:?}): {e}", cxx.display())))?;
        if !out.status.success() {
            return Err(HipCpuError(format!("HIP C for the CPU did not compile: {cmd:?}\n{}", String::from_utf8_lossy(&out.stderr))));
        }
        std::fs::rename(&tmp, &lib).map_err(io(&lib))?;
    }
    // SAFETY: the library is code we generated and just compiled; loading it runs the C++
    // runtime's initializers only (the emulator's state is constructed on first use).
    let handle = unsafe { libloading::Library::new(&lib) }.map_err(|e| HipCpuError(format!("{}: {e}", lib.display())))?;
    Ok(HipCpuLibrary { lib: handle, path: lib })
}

/// A suffix for temporary files that no other compile, in this process or another, uses.
fn unique() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    format!("{}-{}", std::process::id(), NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

fn io(p: &Path) -> impl Fn(std::io::Error) -> HipCpuError + '_ {
    move |e| HipCpuError(format!("{}: {e}", p.display()))
}

/// `int dt_hip_cpu_launch_<symbol>(const void* args, unsigned grid, unsigned threads,
/// unsigned shared_bytes, unsigned long long max_steps, char* err, unsigned long err_len)`.
type Entry = unsafe extern "C" fn(*const std::ffi::c_void, u32, u32, u32, u64, *mut std::ffi::c_char, usize) -> i32;

impl HipCpuLibrary {
    /// Runs kernel `symbol` on `grid` blocks of `threads` threads with `shared_bytes` of dynamic
    /// shared memory; its argument is `*args`. An error is a missing symbol, bad launch
    /// parameters, or a collective operation that the threads do not reach together.
    ///
    /// # Safety
    /// `A` must be the type of the kernel's one parameter, and every pointer in it must be valid
    /// for what the kernel reads and writes.
    pub unsafe fn launch<A>(&self, symbol: &str, args: &A, grid: u32, threads: u32, shared_bytes: u32) -> Result<(), HipCpuError> {
        // SAFETY: the caller's promise.
        unsafe { self.launch_limited(symbol, args, grid, threads, shared_bytes, 0) }.map(|_| ())
    }

    /// As [`launch`](Self::launch), giving up (`Ok(false)`, the output then partly written)
    /// once threads have been resumed `max_steps` times in all (each start, and each return from
    /// a barrier, shuffle or MFMA, of each thread of each block); 0: no limit.
    ///
    /// # Safety
    /// As for [`launch`](Self::launch).
    pub unsafe fn launch_limited<A>(
        &self,
        symbol: &str,
        args: &A,
        grid: u32,
        threads: u32,
        shared_bytes: u32,
        max_steps: u64,
    ) -> Result<bool, HipCpuError> {
        let entry = format!("dt_hip_cpu_launch_{symbol}");
        // SAFETY: the entry was defined by DT_HIP_CPU_KERNEL with the signature of `Entry`.
        let f: libloading::Symbol<Entry> = unsafe { self.lib.get(entry.as_bytes()) }.map_err(|e| HipCpuError(format!("{symbol}: {e}")))?;
        let mut err = vec![0u8; 4096];
        // SAFETY: `args` is what the kernel takes (the caller's promise), `err` is writable for
        // its length.
        let rc = unsafe { f((args as *const A).cast(), grid, threads, shared_bytes, max_steps, err.as_mut_ptr().cast(), err.len()) };
        let message = || {
            let end = err.iter().position(|b| *b == 0).unwrap_or(err.len());
            HipCpuError(String::from_utf8_lossy(&err[..end]).into_owned())
        };
        match rc {
            0 => Ok(true),
            2 => Ok(false),
            _ => Err(message()),
        }
    }

    /// Runs kernel `k` (emitted for `dtype` with launch parameters `info`) on bound host
    /// arguments, one block per program as on the GPU. The output starts as NaN, so an element
    /// the kernel fails to write shows.
    pub fn run(&self, info: &LaunchInfo, k: &Kernel, bound: &Bound, dtype: DType) -> Result<Tensor, HipCpuError> {
        self.run_limited(info, k, bound, dtype, 0)?.ok_or_else(|| HipCpuError(format!("kernel `{}`: the emulator gave up", k.name)))
    }

    /// As [`run`](Self::run), but `None` where the launch gave up after `max_steps` (see
    /// [`launch_limited`](Self::launch_limited)).
    pub fn run_limited(
        &self,
        info: &LaunchInfo,
        k: &Kernel,
        bound: &Bound,
        dtype: DType,
        max_steps: u64,
    ) -> Result<Option<Tensor>, HipCpuError> {
        check_bounds(k, bound).map_err(|e| HipCpuError(e.0))?;
        let inputs: Vec<Buf> = bound.inputs.iter().map(|t| Buf::from(t, dtype)).collect();
        let n: usize = bound.out_shape.iter().product();
        let out = Buf::from(&Tensor { shape: vec![n], data: vec![f32::NAN; n] }, dtype);
        let args: DtArgs = fill_args(k, bound, &inputs.iter().map(Buf::addr).collect::<Vec<_>>(), out.addr());
        check_layouts(info, launch_layouts(k, dtype, &args)).map_err(|e| HipCpuError(e.0))?;
        let programs = k.grid.programs(&bound.sizes);
        if programs > i32::MAX as usize {
            return Err(HipCpuError(format!("kernel `{}` would need {programs} programs; at most 2^31-1 fit a grid", k.name)));
        }
        if programs > 0 && n > 0 {
            let packed = GpuArgs::of(k).pack(&args);
            // SAFETY: the kernel takes one `dt_args_t`, in the layout `packed` was packed in for
            // it; its pointers refer to `inputs` and `out`, which outlive the call and are sized
            // for the shapes the kernel reads and writes.
            let finished =
                unsafe { self.launch_limited(&info.symbol, &packed, programs as u32, info.threads, info.shared_bytes, max_steps)? };
            if !finished {
                return Ok(None);
            }
        }
        Ok(Some(Tensor { shape: bound.out_shape.clone(), data: out.to_f32(dtype) }))
    }
}
