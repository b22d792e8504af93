//! What a GPU target offers a kernel: shared memory, registers, and the instructions the plan may
//! choose. Plan passes read it instead of constants, and a request it cannot meet is an error
//! that names the target.

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
    /// 32-bit registers of one multiprocessor.
    pub registers_per_sm: u32,
    /// Most registers one thread may have.
    pub max_registers_per_thread: u32,
    pub features: Features,
}

impl Target {
    /// NVIDIA Hopper (H100, H200) with its architecture-specific instructions, as nvcc's
    /// `compute_90a` and `sm_90a` build for it: 227 KiB of shared memory per block.
    pub const SM90A: Target = Target {
        name: "sm_90a",
        shared_bytes_per_block: 227 * 1024,
        registers_per_sm: 64 * 1024,
        max_registers_per_thread: 255,
        features: Features { cp_async: true, mma_sync: true, tma: true, wgmma: true, setmaxnreg: true, clusters: true },
    };
}
