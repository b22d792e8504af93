//! What the build script embedded (`OUT_DIR/kernels.rs`): per spec its text, CUDA C, fatbin,
//! launch parameters and CPU kernels; and the launch metadata, re-lowered from the spec text once
//! per process.

use crate::error::{Error, Result};
use dt_core::kir::Kernel;
use std::sync::OnceLock;

/// Most tensor inputs a kernel may have.
pub(crate) const MAX_INPUTS: usize = 8;
/// Most axes a tensor may have.
pub const MAX_RANK: usize = 8;
/// Most scalar inputs a kernel may have.
pub(crate) const MAX_SCALARS: usize = 8;
/// Most dimensions (size arguments) a kernel may have.
pub(crate) const MAX_DIMS: usize = 16;

/// The argument block every generated kernel takes (`dt_args` of the generated C, mirrored from
/// `dt_codegen::abi::DtArgs`; the build script asserts that both have one layout). Pointers are
/// 64-bit integers, strides are in elements, sizes follow the kernel's `dims` order and scalars
/// its `scalars` order.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DtArgs {
    pub inputs: [u64; MAX_INPUTS],
    pub input_strides: [[i64; MAX_RANK]; MAX_INPUTS],
    pub output: u64,
    pub output_strides: [i64; MAX_RANK],
    pub sizes: [i64; MAX_DIMS],
    pub scalars: [f32; MAX_SCALARS],
}

impl Default for DtArgs {
    fn default() -> Self {
        DtArgs {
            inputs: [0; MAX_INPUTS],
            input_strides: [[0; MAX_RANK]; MAX_INPUTS],
            output: 0,
            output_strides: [0; MAX_RANK],
            sizes: [0; MAX_DIMS],
            scalars: [0.0; MAX_SCALARS],
        }
    }
}

// SAFETY: `DtArgs` is `repr(C)`, made of plain integers and floats, and has the layout of the
// `dt_args` parameter that generated GPU kernels take by value.
unsafe impl cudarc::driver::DeviceRepr for DtArgs {}

/// A generated CPU kernel: `void SYMBOL(const dt_args*)`.
pub(crate) type CpuFn = unsafe extern "C" fn(*const DtArgs);

/// Launch parameters of one CUDA kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaunchRow {
    pub symbol: &'static str,
    pub threads: u32,
    pub shared_bytes: u32,
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
    pub cpu: &'static [(&'static str, CpuFn)],
    /// The lowered kernels, made from `dt` at first use.
    pub kernels: OnceLock<std::result::Result<Vec<Kernel>, String>>,
}

mod built {
    #![allow(clippy::all)]
    use super::{CpuFn, DtArgs, LaunchRow, SpecData, MAX_DIMS, MAX_INPUTS, MAX_RANK, MAX_SCALARS};
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

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

    pub(crate) fn cpu_fn(&self, symbol: &str) -> Option<CpuFn> {
        self.cpu.iter().find(|(s, _)| *s == symbol).map(|(_, f)| *f)
    }
}
