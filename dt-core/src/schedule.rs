//! The schedule of a Func as plain data: how it is computed, apart from what it computes.
//!
//! Built and validated by [`crate::check`]; read by the lowering.

use crate::algo::{DimId, FuncId};
use crate::dtype::DType;

/// One entry of `map(...)`: program ids are assigned to blocks in the order of these entries,
/// outermost first, the last fastest.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MapEntry {
    /// All blocks of a blocked dimension.
    Whole(DimId),
    /// `x:x1/8`: the outer part of `x`, in groups of `factor` blocks.
    Outer { dim: DimId, factor: u32 },
    /// `x1` of `x:x1/8`: the block within its group of `factor`.
    Inner { dim: DimId, factor: u32, name: String },
}

impl MapEntry {
    /// Whether, as the last entry of a grid's order (the one that varies fastest with the
    /// program id), this entry puts `n` adjacent blocks of `d` in each run of `n` consecutive
    /// programs: `d` itself, or the inner part of a split of `d` by a multiple of `n`.
    pub fn runs_adjacent_blocks(&self, d: DimId, n: u32) -> bool {
        match self {
            MapEntry::Whole(x) => *x == d,
            MapEntry::Inner { dim, factor, .. } => *dim == d && factor.is_multiple_of(n),
            MapEntry::Outer { .. } => false,
        }
    }
}

/// The target a kernel is built for only (`requires(...)`): a guard of its size class beside
/// `bound` (sizes) and `dtypes` (element types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Requirement {
    /// `requires(cuda)`: CUDA GPUs (sm_80 and newer), not HIP or the CPU; the kernel may take
    /// the shared memory of sm_80 (99 KiB a block), more than every GPU has.
    Cuda,
    /// `requires(sm_90)`: CUDA GPUs of sm_90 (the H100 and H200), built for sm_90a, with its
    /// 227 KiB of shared memory a block.
    Sm90,
}

impl Requirement {
    /// As the schedule writes it.
    pub fn name(self) -> &'static str {
        match self {
            Requirement::Cuda => "cuda",
            Requirement::Sm90 => "sm_90",
        }
    }

    pub fn from_name(s: &str) -> Option<Requirement> {
        [Requirement::Cuda, Requirement::Sm90].into_iter().find(|r| r.name() == s)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// `block(x:4, y:64)`: the extent of each blocked dimension per program.
    pub block: Vec<(DimId, u32)>,
    /// `tensorize(y:64, k:32)`: tile extents; 0 means the whole extent within the block.
    pub tensorize: Vec<(DimId, u32)>,
    pub map: Option<Vec<MapEntry>>,
    /// `cluster(y:8)`: the blocks of `y` go to programs of one thread-block cluster, this many
    /// of them, which combine their reductions over `y` (CUDA, sm_90 and later).
    pub cluster: Option<(DimId, u32)>,
    /// `multicast(y:2)`: programs of this many adjacent blocks of `y` form a thread-block
    /// cluster whose producers share the copies of the operand that does not vary along `y`,
    /// each copying a slice of it into every program of the cluster (warp-specialized kernels,
    /// CUDA sm_90a).
    pub multicast: Option<(DimId, u32)>,
    /// `fuse_at(c, d)`: computed inside consumer `c` at its loop over `d`.
    pub fuse_at: Option<(FuncId, DimId)>,
    pub num_warps: u32,
    pub num_stages: u32,
    /// Where `num_stages` was asked for (a warning points there when fewer stages fit).
    pub num_stages_span: Option<crate::span::Span>,
    /// Where `compile()` marked the Func as a kernel: where diagnostics about the kernel as a
    /// whole (one its target cannot build) point.
    pub compile_span: Option<crate::span::Span>,
    /// `max_registers(n)`: at most `n` registers per thread on CUDA (none: the compiler's
    /// choice).
    pub max_registers: Option<u32>,
    /// `fast_math()`: on the GPU, f32 kernels too evaluate `exp`, `log`, `tanh`, `sigmoid`,
    /// `rsqrt` and division with the hardware's approximations, as 16-bit kernels always do.
    pub fast_math: bool,
    /// `fma_exp(n)`: in the builds that approximate `exp`, one in every `n` of the `exp2`s that
    /// a thread evaluates in a tile (the spec's own, and `exp(x - m)` with `m` one value per row,
    /// which those builds evaluate as `exp2`) is a polynomial on the FMA units instead of the
    /// special-function unit's `ex2`.
    pub fma_exp: Option<u32>,
    /// `warp_specialize()`: one more warpgroup of the program copies the operands of its
    /// `rdot` loop into shared memory (TMA) while the `num_warps` warps compute (CUDA sm_90).
    pub warp_specialize: bool,
    /// `wgmma()`: the kernel's tensor-core `rdot`s run as Hopper's warpgroup products on the
    /// operands it stages (CUDA sm_90a).
    pub wgmma: bool,
    /// `persistent()`: as many programs as the GPU runs at once, each taking blocks in the map
    /// order, one after the other.
    pub persistent: bool,
    /// `requires(cuda)`, `requires(sm_90)`: the kernel is built only for that target, and the
    /// library runs another size class elsewhere.
    pub requires: Option<Requirement>,
    /// `requires(aligned)`: the kernel runs only on tensors whose 16-byte runs are whole
    /// (`crate::select::runs_are_whole`), and the library runs another size class on others.
    pub requires_aligned: bool,
    /// Marked with `compile()`: a kernel entry point.
    pub kernel: bool,
    /// `dtypes(f16, bf16, f32)`: the element types the kernel is built for (default f32).
    pub dtypes: Vec<DType>,
    /// `bound(y:4096)`: the largest size a dimension may have at run time, which gives `y:0`
    /// tiles on dimensions that are not blocked an extent.
    pub bounds: Vec<(DimId, u64)>,
    /// The dimensions in `bounds` at the default for a whole tile (`check::DEFAULT_WHOLE_BOUND`),
    /// given no `bound`: `crate::whole_classes` adds smaller classes for them.
    pub default_bounds: Vec<DimId>,
    /// `specialize(y:16384)`: also build the kernel for these sizes and contiguous tensors, which
    /// it then knows as constants; the library runs it where a launch has them.
    pub specialize: Vec<(DimId, u64)>,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            block: Vec::new(),
            tensorize: Vec::new(),
            map: None,
            cluster: None,
            multicast: None,
            fuse_at: None,
            num_warps: 4,
            num_stages: 1,
            num_stages_span: None,
            compile_span: None,
            max_registers: None,
            fast_math: false,
            fma_exp: None,
            warp_specialize: false,
            wgmma: false,
            persistent: false,
            requires: None,
            requires_aligned: false,
            kernel: false,
            dtypes: vec![DType::F32],
            bounds: Vec::new(),
            default_bounds: Vec::new(),
            specialize: Vec::new(),
        }
    }
}

impl Schedule {
    pub fn block_extent(&self, d: DimId) -> Option<u32> {
        self.block.iter().find(|(x, _)| *x == d).map(|(_, n)| *n)
    }
    pub fn tile_extent(&self, d: DimId) -> Option<u32> {
        self.tensorize.iter().find(|(x, _)| *x == d).map(|(_, n)| *n)
    }
    pub fn bound(&self, d: DimId) -> Option<u64> {
        self.bounds.iter().find(|(x, _)| *x == d).map(|(_, n)| *n)
    }
}
