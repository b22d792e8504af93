//! What choosing and launching a kernel needs of it, without its body: its [`Signature`]
//! (tensors, sizes and their bounds, element types, grid, twins, the features it needs) and what
//! a GPU offers ([`GpuFeatures`]). The manifest ([`crate::manifest`]) carries one per kernel, so
//! the library chooses and launches kernels from it without lowering their specs.

use crate::algo::DimId;
use crate::dtype::DType;
use crate::kir::{Grid, TensorParam};
use crate::schedule::Requirement;
use crate::select::{runs_are_whole, tma_describable, tma_describes, LaunchTensor};
use serde::{Deserialize, Serialize};

/// A kernel as its callers see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Signature {
    pub name: String,
    pub inputs: Vec<TensorParam>,
    pub scalars: Vec<String>,
    pub output: TensorParam,
    /// Every dimension whose size is an argument, with its name, in argument order.
    pub dims: Vec<(DimId, String)>,
    /// Largest allowed size of bounded dimensions (`bound`), checked at launch.
    pub bounds: Vec<(DimId, u64)>,
    /// Sizes a twin of the kernel is built for, with every tensor contiguous (`specialize`,
    /// [`crate::select::launch_is_specialized`]).
    pub specialize: Vec<(DimId, u64)>,
    pub dtypes: Vec<DType>,
    pub grid: Grid,
    /// A producer warpgroup feeds the `num_warps` compute warps (`warp_specialize`): only CUDA
    /// GPUs of sm_90 run the kernel, on tensors a tensor map describes ([`tma_describable`]).
    pub warp_specialize: bool,
    /// The tensor-core dots run as `wgmma`, by warpgroups of four warps over 64 rows each, on
    /// the operands the kernel stages (`wgmma`): only CUDA GPUs of sm_90 run the kernel.
    pub wgmma: bool,
    /// As many programs as the GPU runs at once, each taking blocks one after the other
    /// (`persistent`).
    pub persistent: bool,
    /// The only target the kernel is built for (`requires`), where the schedule names one.
    pub requires: Option<Requirement>,
    /// The kernel runs only on tensors whose 16-byte runs are whole (`requires(aligned)`,
    /// [`crate::select::runs_are_whole`]): its kernel is built for them
    /// ([`crate::select::Layouts::WholeRuns`]) and no kernel for any layout is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub aligned: bool,
}

impl AsRef<Signature> for Signature {
    fn as_ref(&self) -> &Signature {
        self
    }
}

impl Signature {
    /// The largest size dimension `d` may have (`bound`), where it has one.
    pub fn bound(&self, d: DimId) -> Option<u64> {
        self.bounds.iter().find(|(x, _)| *x == d).map(|(_, n)| *n)
    }
    pub fn dim_name(&self, d: DimId) -> &str {
        self.dims.iter().find(|(x, _)| *x == d).map_or("?", |(_, n)| n.as_str())
    }
    /// Position of dimension `d` among the size arguments.
    pub fn dim_slot(&self, d: DimId) -> usize {
        self.dims.iter().position(|(x, _)| *x == d).expect("dimension is a kernel argument")
    }
    /// Whether a GPU offering `f` runs this kernel: its clusters fit, a warp-specialized or
    /// `wgmma` kernel (or one that `requires(sm_90)`) has sm_90's copies and tensor-core
    /// instructions, and one that `requires(cuda)` has CUDA.
    pub fn runs_on(&self, f: GpuFeatures) -> bool {
        let hopper = self.takes_tensor_maps() || self.requires == Some(Requirement::Sm90);
        self.grid.runs_with_clusters_of(f.max_cluster) && (!hopper || f.hopper) && (!self.cuda_only() || f.cuda)
    }

    /// Whether only CUDA GPUs of sm_90 and newer run this kernel (clustered, warp-specialized,
    /// `wgmma` or `requires(sm_90)`): its CUDA build is planned for sm_90a.
    pub fn needs_sm90(&self) -> bool {
        self.grid.cluster.is_some() || self.takes_tensor_maps() || self.requires == Some(Requirement::Sm90)
    }

    /// Whether only CUDA GPUs run this kernel (it needs sm_90, or `requires(cuda)`): the CPU
    /// and HIP files go without it, and the library runs another size class there.
    pub fn cuda_only(&self) -> bool {
        self.needs_sm90() || self.requires == Some(Requirement::Cuda)
    }

    /// Why only CUDA GPUs run this kernel ([`Signature::cuda_only`]), in words, where they do.
    pub fn cuda_only_reason(&self) -> Option<String> {
        if self.warp_specialize {
            Some("warp-specialized (CUDA sm_90 only)".into())
        } else if self.wgmma {
            Some("built on wgmma (CUDA sm_90 only)".into())
        } else if self.grid.cluster.is_some() {
            Some("clustered (CUDA sm_90 only)".into())
        } else {
            self.requires.map(|r| format!("built for {} only (`requires({})`)", r.name(), r.name()))
        }
    }

    /// Whether the tensors of a launch (as for [`tma_describable`]; `sizes` the size arguments
    /// in slot order) suit this kernel: any do, but one that `requires(aligned)` takes only
    /// tensors of whole runs ([`runs_are_whole`]), a `wgmma` kernel copies its dots' operands
    /// through tensor maps, and a warp-specialized one stores through a map and reads inputs
    /// contiguous along their last axis (through maps where they describe them, else copied by
    /// its producer's threads, [`Signature::copies_without_map`]).
    pub fn admits_tensors(&self, elem_bytes: usize, sizes: &[i64], tensors: &[LaunchTensor<'_>]) -> bool {
        if self.aligned && !runs_are_whole(self, elem_bytes, |slot| sizes.get(slot).copied().unwrap_or(0), tensors) {
            return false;
        }
        if !self.warp_specialize {
            return !self.takes_tensor_maps() || tma_describable(self, elem_bytes, tensors);
        }
        let params: Vec<&TensorParam> = self.inputs.iter().chain([&self.output]).collect();
        tensors.len() == params.len()
            && params.iter().zip(tensors).enumerate().all(|(i, (p, t))| {
                let n = p.dims.len();
                tma_describes(n, elem_bytes, t)
                    || self.copies_without_map(Some(i)) && t.strides.len() >= n && n >= 1 && t.strides[n - 1] == 1
            })
    }

    /// Whether the kernel copies tensor `tensor` (input `i`, or the output: `None`) where no
    /// tensor map describes it, so that a launch passes no map for it: the inputs of a
    /// warp-specialized kernel, which its producer warpgroup's threads copy then.
    pub fn copies_without_map(&self, tensor: Option<usize>) -> bool {
        self.warp_specialize && tensor.is_some_and(|i| i < self.inputs.len())
    }

    /// Whether the kernel copies through tensor maps (`warp_specialize()`, `wgmma()`): sm_90's
    /// bulk tensor copies, which only sm_90 has.
    pub fn takes_tensor_maps(&self) -> bool {
        self.warp_specialize || self.wgmma
    }
}

/// What a GPU offers that a kernel's schedule may need, beyond what every backend has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuFeatures {
    /// A CUDA GPU (`requires(cuda)` kernels run).
    pub cuda: bool,
    /// The most programs of a thread-block cluster (0: none).
    pub max_cluster: u32,
    /// Tensor-memory copies (TMA), `wgmma` and `setmaxnreg`: CUDA sm_90 (the H100 and H200),
    /// which warp-specialized kernels need.
    pub hopper: bool,
}

impl GpuFeatures {
    /// The CPU, HIP, and any backend without these features.
    pub const NONE: GpuFeatures = GpuFeatures { cuda: false, max_cluster: 0, hopper: false };

    /// A CUDA GPU of compute capability `major`.x.
    pub fn cuda(major: i32) -> GpuFeatures {
        GpuFeatures { cuda: true, max_cluster: cuda_max_cluster(major), hopper: major == 9 }
    }
}

/// The largest thread-block cluster that every CUDA GPU with clusters runs.
pub const MAX_PORTABLE_CLUSTER: u32 = 8;

/// The largest cluster a kernel may ask for: above [`MAX_PORTABLE_CLUSTER`] the kernel must opt in
/// (`CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`), and only some GPUs run it (the H100
/// does); where a GPU cannot, the library runs another class.
pub const MAX_CLUSTER: u32 = 16;

/// The largest thread-block cluster that a CUDA GPU of compute capability `major`.x runs: none (0)
/// before sm_90; [`MAX_CLUSTER`] on sm_90 (the H100 and H200), where it is checked; elsewhere
/// [`MAX_PORTABLE_CLUSTER`], which every GPU with clusters runs.
pub fn cuda_max_cluster(major: i32) -> u32 {
    match major {
        ..=8 => 0,
        9 => MAX_CLUSTER,
        _ => MAX_PORTABLE_CLUSTER,
    }
}
