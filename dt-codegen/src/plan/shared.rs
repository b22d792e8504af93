//! The shared memory of a kernel on the older path: where its slots and rings lie, and how much
//! it may take on the GPUs that run it.
//!
//! ```text
//! [warp-specialized ring] [slots ...] [rings of dots (wgmma: 1024-byte aligned)] [staged rows' rings]
//! ```
//!
//! The limits are the target descriptions' ([`Target`]): the portable target's for a kernel
//! that must run on every GPU, sm_80's for one that stages loads in rings, sm_90a's for a
//! `wgmma()` or clustered kernel, which only sm_90 runs. A kernel whose tiles alone exceed its
//! limit is refused ([`lay_out`]); a loop whose staged ring would exceed it keeps its loads in
//! registers instead ([`staged_ring_fits`]).

use super::layouts::Plan;
use super::{PlanError, Target, WarpSpecialized};
use dt_core::kir::Kernel;

/// Most dynamic shared memory a program may ask for (bytes): the portable target's, so a kernel
/// runs on every supported GPU.
pub const MAX_SHARED_BYTES: u32 = Target::PORTABLE.shared_bytes_per_block;

/// Most shared memory a kernel with loads staged in shared memory (`num_stages` above 2) may take,
/// its tiles' slots included: sm_80's. A loop whose stages do not fit keeps its loads one step
/// ahead in registers.
pub const MAX_STAGED_SHARED_BYTES: u32 = Target::SM80.shared_bytes_per_block;

/// The same for a clustered kernel's loop that holds its block in shared memory: such a kernel
/// runs only on sm_90 and newer, less room here for the slots of its cluster reductions (static
/// shared memory).
pub const MAX_CLUSTER_STAGED_SHARED_BYTES: u32 = Target::SM90A.shared_bytes_per_block - 3 * 1024;

/// 4-byte words of a 128-byte swizzle atom (eight lines of 128 bytes), the alignment `wgmma`
/// reads swizzled operands at.
pub const ATOM_WORDS: usize = 256;

/// Where a kernel's shared memory lies, in 4-byte words from the start of its dynamic shared
/// memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedLayout {
    /// Each slot of `publishing` (tiles shared between warps), 16-byte aligned.
    pub slot_offsets: Vec<usize>,
    /// The rings of loops that feed several dots (`dot_rings`).
    pub dot_rings: usize,
    /// The first word after all of the above, where the rings of staged rows start.
    pub staged_rings: usize,
    /// Bytes the kernel asks for before any staged row's ring (a `wgmma()` kernel's included
    /// 1024 bytes more, to find a 1024-byte aligned base).
    pub bytes: u32,
}

/// Lays out the shared memory of kernel `k`: the ring of its warp-specialized loop `ws` (planned
/// for its target) first, then the slots of `slot_elements` elements (4-byte words), then the
/// rings of `plan`; refuses a kernel that needs more than the GPUs that run it give a block.
pub(crate) fn lay_out(
    k: &Kernel,
    ws: Option<(&WarpSpecialized, &Target)>,
    slot_elements: &[usize],
    plan: &Plan,
) -> Result<SharedLayout, PlanError> {
    let mut total = ws.map_or(0, |(w, _)| w.shared_bytes as usize / 4);
    let mut slot_offsets = Vec::new();
    for n in slot_elements {
        slot_offsets.push(total);
        // Every slot starts 16-byte aligned, as `ldmatrix` rows must.
        total += n.next_multiple_of(4);
    }
    // In a `wgmma()` kernel the rings start at a multiple of 1024 bytes from a base of 1024-byte
    // alignment (1024 bytes more to find it), where `wgmma`'s swizzle atoms start.
    if k.wgmma {
        total = total.next_multiple_of(ATOM_WORDS);
    }
    let dot_rings = total;
    total += plan.ring_words;
    let bytes = (total * 4) as u32 + if k.wgmma { ATOM_WORDS as u32 * 4 } else { 0 };
    let limit = if k.wgmma {
        Target::SM90A.shared_bytes_per_block
    } else if plan.ring_words > 0 {
        MAX_STAGED_SHARED_BYTES
    } else {
        MAX_SHARED_BYTES
    };
    match ws {
        Some((_, t)) if bytes > t.shared_bytes_per_block => Err(PlanError(format!(
            "kernel `{}` needs {bytes} bytes of shared memory for its ring and tiles (at most {} on {}); lower num_stages",
            k.name, t.shared_bytes_per_block, t.name
        ))),
        None if bytes > limit => Err(PlanError(format!(
            "kernel `{}` needs {bytes} bytes of shared memory for its tiles (at most {limit}); use smaller tiles",
            k.name
        ))),
        _ => Ok(SharedLayout { slot_offsets, dot_rings, staged_rings: total, bytes }),
    }
}

/// Whether a staged loop's ring, ending `end_words` words from the start of shared memory, fits
/// kernel `k`: in a clustered kernel a ring that `holds` its block may take sm_90a's room.
pub(crate) fn staged_ring_fits(k: &Kernel, holds: bool, end_words: usize) -> bool {
    let limit = if k.grid.cluster.is_some() && holds { MAX_CLUSTER_STAGED_SHARED_BYTES } else { MAX_STAGED_SHARED_BYTES };
    end_words * 4 <= limit as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::layouts::{Plan, RegLayout};

    fn kernel(schedule: &str) -> Kernel {
        let src = format!("Func out; In A; Var x; out[x] = A[x] * 2; out.block(x:64); out.tensorize(x:64); {schedule} out.compile();");
        let p = dt_core::compile_spec(&src).expect("checks");
        dt_core::lower::lower(&p, p.kernels[0]).expect("lowers")
    }

    fn plan(k: &Kernel, ring_words: usize) -> Plan {
        Plan {
            values: vec![RegLayout::Blocked; k.values.len()],
            vars: vec![RegLayout::Blocked; k.vars.len()],
            dots: Vec::new(),
            ring_words,
            async_copies: true,
            tensor_maps: Vec::new(),
        }
    }

    #[test]
    fn slots_are_16_byte_aligned_and_rings_follow_them() {
        let k = kernel("");
        let s = lay_out(&k, None, &[5, 8], &plan(&k, 12)).unwrap();
        assert_eq!(s.slot_offsets, [0, 8]);
        assert_eq!((s.dot_rings, s.staged_rings, s.bytes), (16, 28, 28 * 4));
    }

    /// Tiles alone that exceed the portable limit are refused; rings may take sm_80's.
    #[test]
    fn a_kernel_over_the_limit_of_its_gpus_is_refused() {
        let k = kernel("");
        let words = MAX_SHARED_BYTES as usize / 4;
        assert!(lay_out(&k, None, &[words], &plan(&k, 0)).is_ok());
        let err = lay_out(&k, None, &[words + 4], &plan(&k, 0)).unwrap_err();
        assert!(err.0.contains("use smaller tiles"), "{}", err.0);
        assert!(lay_out(&k, None, &[4], &plan(&k, words)).is_ok());
        assert!(lay_out(&k, None, &[4], &plan(&k, MAX_STAGED_SHARED_BYTES as usize / 4)).is_err());
    }

    #[test]
    fn a_held_ring_of_a_clustered_kernel_may_take_the_room_of_sm_90() {
        let plain = kernel("");
        let clustered = kernel("out.cluster(x:2);");
        let words = MAX_STAGED_SHARED_BYTES as usize / 4 + 1;
        assert!(!staged_ring_fits(&plain, true, words));
        assert!(!staged_ring_fits(&clustered, false, words));
        assert!(staged_ring_fits(&clustered, true, words));
        assert!(!staged_ring_fits(&clustered, true, MAX_CLUSTER_STAGED_SHARED_BYTES as usize / 4 + 1));
    }
}
