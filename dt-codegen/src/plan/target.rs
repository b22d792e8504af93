//! What a GPU target offers a kernel: shared memory, registers, and the instructions the plan may
//! choose. Plan passes read it instead of constants, and a request it cannot meet is an error
//! that names the target.

use crate::emit::gpu::Dialect;
use dt_core::kir::Kernel;

/// Instructions and mechanisms a target may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// `cp.async`: copies from global to shared memory that run while the threads go on (sm_80).
    pub cp_async: bool,
    /// `ldmatrix` and `mma.sync.m16n8k16` (sm_80).
    pub mma_sync: bool,
    /// Bulk tensor copies through tensor maps (TMA), completing on `mbarrier`s (sm_90).
    pub tma: bool,
    /// `wgmma.mma_async`: a warpgroup's matrix product from shared-memory descriptors (sm_90a).
    pub wgmma: bool,
    /// `setmaxnreg`: warpgroups hand registers to each other (sm_90a).
    pub setmaxnreg: bool,
    /// Thread-block clusters (sm_90).
    pub clusters: bool,
}

/// A GPU target of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Its name, as the diagnostics and the printed plan give it.
    pub name: &'static str,
    /// Most shared memory one program may have, in bytes (with the opt-in above 48 KiB).
    pub shared_bytes_per_block: u32,
    /// Shared memory of one multiprocessor, which its resident programs share, in bytes.
    pub shared_bytes_per_sm: u32,
    /// 32-bit registers of one multiprocessor.
    pub registers_per_sm: u32,
    /// Most registers one thread may have.
    pub max_registers_per_thread: u32,
    pub features: Features,
}

impl Target {
    /// The target the older path plans kernel `k`'s build for `dialect` for: on HIP, every GPU
    /// ([`Self::PORTABLE`], the MI200's 64 KiB); on CUDA, sm_90a for a kernel only Hopper runs
    /// (clusters, tensor maps: [`dt_core::signature::Signature::needs_sm90`]), sm_80 otherwise.
    pub fn older(k: &Kernel, dialect: Dialect) -> Target {
        match dialect {
            Dialect::Hip => Self::PORTABLE,
            Dialect::Cuda if k.needs_sm90() => Self::SM90A,
            Dialect::Cuda => Self::SM80,
        }
    }

    /// Every GPU the older path's kernels run on, CUDA sm_80 and newer and AMD gfx90a (MI200):
    /// 64 KiB of shared memory (the MI200's LDS). The target of HIP builds.
    pub const PORTABLE: Target = Target {
        name: "sm_80 and newer, gfx90a",
        shared_bytes_per_block: 64 * 1024,
        shared_bytes_per_sm: 64 * 1024,
        registers_per_sm: 64 * 1024,
        max_registers_per_thread: 255,
        features: Features { cp_async: false, mma_sync: false, tma: false, wgmma: false, setmaxnreg: false, clusters: false },
    };

    /// CUDA GPUs of sm_80 and newer, as a kernel with loads staged in shared memory or rings of
    /// several dots may take them: 99 KiB per block (sm_86 and sm_89 give no more).
    pub const SM80: Target = Target {
        name: "sm_80",
        shared_bytes_per_block: 99 * 1024,
        shared_bytes_per_sm: 100 * 1024,
        registers_per_sm: 64 * 1024,
        max_registers_per_thread: 255,
        features: Features { cp_async: true, mma_sync: true, tma: false, wgmma: false, setmaxnreg: false, clusters: false },
    };

    /// NVIDIA Hopper (H100, H200) with its architecture-specific instructions, as nvcc's
    /// `compute_90a` and `sm_90a` build for it: 227 KiB of shared memory per block.
    pub const SM90A: Target = Target {
        name: "sm_90a",
        shared_bytes_per_block: 227 * 1024,
        shared_bytes_per_sm: 228 * 1024,
        registers_per_sm: 64 * 1024,
        max_registers_per_thread: 255,
        features: Features { cp_async: true, mma_sync: true, tma: true, wgmma: true, setmaxnreg: true, clusters: true },
    };
}
