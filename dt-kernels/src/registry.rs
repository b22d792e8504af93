//! What the build script embedded (`OUT_DIR/kernels.rs`): per spec its text, CUDA C, fatbin,
//! launch parameters and CPU kernels; and the launch metadata, re-lowered from the spec text once
//! per process.

use crate::error::{Error, Result};
use dt_core::kir::Kernel;
use std::sync::OnceLock;

pub use dt_core::abi::MAX_RANK;
pub(crate) use dt_core::abi::{DtArgs, TensorMapSpec, MAX_DIMS, MAX_INPUTS, MAX_SCALARS};

/// A generated CPU kernel: `void SYMBOL(const dt_args*, long long first, long long last)`
/// (`dt_args`: [`DtArgs`]), which runs programs `first..last` of its grid.
pub(crate) type CpuFn = unsafe extern "C" fn(*const DtArgs, i64, i64);

/// Launch parameters of one CUDA kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaunchRow {
    pub symbol: &'static str,
    pub threads: u32,
    pub shared_bytes: u32,
    /// Programs per thread-block cluster (1: not clustered).
    pub cluster: u32,
    /// The tensor maps the kernel takes ahead of its argument block (none for most).
    pub tensor_maps: &'static [TensorMapSpec],
    /// Launched with at most one program per multiprocessor, each taking blocks in turn.
    pub persistent: bool,
}

/// Everything embedded for one spec.
pub(crate) struct SpecData {
    pub name: &'static str,
    /// The spec's text.
    pub dt: &'static str,
    /// Its CUDA C (self-contained), for NVRTC.
    pub cuda: &'static str,
    /// Its fatbin, where nvcc was found at build time.
    pub fatbin: Option<&'static [u8]>,
    /// Per kernel and dtype, in the order of the generated files.
    pub launch: &'static [LaunchRow],
    /// Per architecture built, its HIP code object (with the `hip` feature, where hipcc was
    /// found at build time).
    #[cfg(feature = "hip")]
    pub hip_objects: &'static [(&'static str, &'static [u8])],
    /// Launch parameters of the HIP kernels.
    #[cfg(feature = "hip")]
    pub hip_launch: &'static [LaunchRow],
    pub cpu: &'static [(&'static str, CpuFn)],
    /// The lowered kernels, made from `dt` at first use.
    pub kernels: OnceLock<std::result::Result<Vec<Kernel>, String>>,
}

/// What the build script did for HIP (with the `hip` feature).
#[cfg(feature = "hip")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HipBuild {
    /// The hipcc that compiled the code objects; `None` where none was found (or
    /// `DT_KERNELS_NO_HIPCC` was set), and then no code objects were built.
    pub hipcc: Option<&'static str>,
    /// The architectures asked for (`HIP_ARCHS`, default gfx90a and gfx942).
    pub requested: &'static [&'static str],
    /// Those the installed hipcc could compile for: every spec has a code object for each.
    pub built: &'static [&'static str],
}

mod built {
    #![allow(clippy::all)]
    #[cfg(feature = "hip")]
    use super::HipBuild;
    use super::{CpuFn, DtArgs, LaunchRow, SpecData, TensorMapSpec};
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

#[cfg(feature = "hip")]
pub(crate) use built::HIP_BUILD;
pub(crate) use built::{NVCC_ARCHS, SPECS};

/// The index of spec `name` in [`SPECS`].
pub(crate) fn spec_index(name: &str) -> Result<usize> {
    SPECS.iter().position(|s| s.name == name).ok_or_else(|| Error::Internal(format!("spec `{name}` was not built into dt-kernels")))
}

impl SpecData {
    /// The lowered kernels of this spec (lowered once per process).
    pub(crate) fn kernels(&'static self) -> Result<&'static [Kernel]> {
        let lowered = self.kernels.get_or_init(|| {
            let program = dt_core::compile_spec(self.dt).map_err(|d| format!("spec `{}` does not compile: {d:?}", self.name))?;
            dt_core::lower::lower_all(&program).map_err(|e| format!("spec `{}` does not lower: {e}", self.name))
        });
        lowered.as_deref().map_err(|e| Error::Internal(e.clone()))
    }

    pub(crate) fn launch_row(&self, symbol: &str) -> Option<LaunchRow> {
        self.launch.iter().find(|l| l.symbol == symbol).copied()
    }

    #[cfg(feature = "hip")]
    pub(crate) fn hip_launch_row(&self, symbol: &str) -> Option<LaunchRow> {
        self.hip_launch.iter().find(|l| l.symbol == symbol).copied()
    }

    pub(crate) fn cpu_fn(&self, symbol: &str) -> Option<CpuFn> {
        self.cpu.iter().find(|(s, _)| *s == symbol).map(|(_, f)| *f)
    }
}
