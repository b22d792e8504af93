//! What the compiler publishes about the kernels of one spec, as data: each kernel's
//! [`Signature`] (what choosing one and filling its arguments needs), the launch parameters of
//! every CUDA and HIP kernel built (per element type and twin), and the CPU symbols. `cargo xtask
//! regen` checks it in (`dt-kernels/generated/<spec>.manifest.json`); the library embeds it and
//! chooses and launches kernels from it alone, with the selection the bench and `dtc` use too
//! ([`crate::select`]).

use crate::abi::TensorMapSpec;
use crate::select::Layouts;
use crate::signature::Signature;
use serde::{Deserialize, Serialize};

/// The kernels of one spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The spec's name (its file stem).
    pub spec: String,
    /// Every kernel, in the spec's order (the order the size classes are tried in).
    pub kernels: Vec<Signature>,
    /// Launch parameters of each CUDA kernel, in the order of the CUDA file.
    pub cuda: Vec<LaunchInfo>,
    /// Launch parameters of each HIP kernel (those of `cuda` but the ones only sm_90 runs).
    pub hip: Vec<LaunchInfo>,
    /// The symbols of the CPU C (the same kernels as `hip`, without twins).
    pub cpu: Vec<String>,
}

impl Manifest {
    /// The manifest as the JSON that is checked in: a kernel or a launch per line, so that a
    /// diff shows which one changed.
    pub fn to_json(&self) -> String {
        fn list<T: Serialize>(items: &[T]) -> String {
            let lines: Vec<String> =
                items.iter().map(|i| format!("    {}", serde_json::to_string(i).expect("a manifest serializes"))).collect();
            if lines.is_empty() {
                "[]".to_string()
            } else {
                format!("[\n{}\n  ]", lines.join(",\n"))
            }
        }
        format!(
            "{{\n  \"spec\": {},\n  \"kernels\": {},\n  \"cuda\": {},\n  \"hip\": {},\n  \"cpu\": {}\n}}\n",
            serde_json::to_string(&self.spec).expect("a string serializes"),
            list(&self.kernels),
            list(&self.cuda),
            list(&self.hip),
            list(&self.cpu)
        )
    }

    /// Reads a manifest from [`Manifest::to_json`]'s text.
    pub fn from_json(text: &str) -> Result<Manifest, String> {
        serde_json::from_str(text).map_err(|e| format!("the manifest does not read: {e}"))
    }

    /// The kernel named `name`.
    pub fn kernel(&self, name: &str) -> Option<&Signature> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// The launch parameters of CUDA kernel `symbol`.
    pub fn cuda_launch(&self, symbol: &str) -> Option<&LaunchInfo> {
        self.cuda.iter().find(|l| l.symbol == symbol)
    }

    /// The launch parameters of HIP kernel `symbol`.
    pub fn hip_launch(&self, symbol: &str) -> Option<&LaunchInfo> {
        self.hip.iter().find(|l| l.symbol == symbol)
    }
}

/// Launch parameters of one GPU kernel the compiler built (a kernel of the spec for one element
/// type, or one of its twins).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchInfo {
    pub symbol: String,
    pub threads: u32,
    /// Dynamic shared memory per program, in bytes.
    pub shared_bytes: u32,
    /// Programs per thread-block cluster (1: not clustered). Above 8 (a size that not every GPU
    /// with clusters allows, [`crate::signature::MAX_PORTABLE_CLUSTER`]), the launcher opts the kernel in.
    pub cluster: u32,
    /// The tensor layouts the kernel is built for.
    pub layouts: Layouts,
    /// The tensor maps the kernel takes ahead of its argument block (`dt_tma_args_t`), which
    /// the host encodes per launch; none for most kernels.
    pub tensor_maps: Vec<TensorMapSpec>,
    /// Launched with as many programs as the GPU runs at once (one per multiprocessor), fewer
    /// where the grid has fewer: the kernel takes its blocks in turn (`persistent()`).
    pub persistent: bool,
}
