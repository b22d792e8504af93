//! What the build script embedded (`OUT_DIR/kernels.rs`): per spec its manifest (the kernels'
//! signatures and launch parameters, read once per process), CUDA C, fatbin and CPU kernels.

use crate::error::{Error, Result};
use dt_core::manifest::{LaunchInfo, Manifest};
use std::sync::OnceLock;

pub use dt_core::abi::MAX_RANK;
pub(crate) use dt_core::abi::{DtArgs, MAX_DIMS, MAX_INPUTS, MAX_SCALARS};

/// A generated CPU kernel: `int SYMBOL(const dt_args*, long long first, long long last)`
/// (`dt_args`: [`DtArgs`]), which runs programs `first..last` of its grid
/// ([`dt_core::abi::CpuKernelFn`]).
pub(crate) type CpuFn = dt_core::abi::CpuKernelFn;

/// Everything embedded for one spec.
pub struct SpecData {
    pub name: &'static str,
    /// Its manifest's text ([`Manifest::to_json`]).
    pub manifest_json: &'static str,
    /// Its CUDA C (self-contained), for NVRTC.
    pub cuda: &'static str,
    /// Its fatbin, where nvcc was found at build time.
    pub fatbin: Option<&'static [u8]>,
    /// Per architecture built, its HIP code object (with the `hip` feature, where hipcc was
    /// found at build time).
    #[cfg(feature = "hip")]
    pub hip_objects: &'static [(&'static str, &'static [u8])],
    pub cpu: &'static [(&'static str, CpuFn)],
    /// The manifest, read from `manifest_json` at first use.
    pub manifest: OnceLock<std::result::Result<Manifest, String>>,
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
    use super::{CpuFn, DtArgs, SpecData};
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
    /// The manifest of this spec (read once per process).
    pub(crate) fn manifest(&'static self) -> Result<&'static Manifest> {
        let read = self.manifest.get_or_init(|| Manifest::from_json(self.manifest_json).map_err(|e| format!("spec `{}`: {e}", self.name)));
        read.as_ref().map_err(|e| Error::Internal(e.clone()))
    }

    /// The launch parameters of CUDA kernel `symbol`.
    pub(crate) fn launch_row(&'static self, symbol: &str) -> Option<&'static LaunchInfo> {
        self.manifest().ok()?.cuda_launch(symbol)
    }

    /// The launch parameters of HIP kernel `symbol`.
    #[cfg(feature = "hip")]
    pub(crate) fn hip_launch_row(&'static self, symbol: &str) -> Option<&'static LaunchInfo> {
        self.manifest().ok()?.hip_launch(symbol)
    }

    pub(crate) fn cpu_fn(&self, symbol: &str) -> Option<CpuFn> {
        self.cpu.iter().find(|(s, _)| *s == symbol).map(|(_, f)| *f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spec's embedded manifest reads, and names what was built: a CUDA launch for each
    /// kernel and element type, and for each kernel that runs without sm_90, a CPU function
    /// (and its twins none, as the CPU has no twins).
    #[test]
    fn every_embedded_manifest_names_the_kernels_built() {
        for spec in SPECS {
            let manifest = spec.manifest().unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            assert_eq!(manifest.spec, spec.name);
            assert!(!manifest.kernels.is_empty(), "{}: no kernels", spec.name);
            for k in &manifest.kernels {
                for dtype in &k.dtypes {
                    let symbol = format!("dt_{}_{}", k.name, dtype.name());
                    assert!(spec.launch_row(&symbol).is_some(), "{}: no CUDA launch for {symbol}", spec.name);
                    assert_eq!(spec.cpu_fn(&symbol).is_some(), !k.cuda_only(), "{}: the CPU function of {symbol}", spec.name);
                }
            }
            assert_eq!(manifest.cpu.len(), spec.cpu.len(), "{}: CPU symbols", spec.name);
        }
    }
}
