//! The shared memory of a kernel on the older path: where its slots and rings lie, and how much
//! it may take on the GPUs that run it.
//!
//! ```text
//! [warp-specialized ring] [slots ...] [rings of dots (wgmma: 1024-byte aligned)] [staged rows' rings]
//! ```
//!
//! The limits are those of the build's target ([`Target::older`], kept in the register plan):
//! on HIP every GPU's, on CUDA sm_80's, or sm_90a's for a kernel only Hopper runs (clusters,
//! tensor maps). A kernel whose tiles alone exceed it is refused ([`lay_out`]); a loop whose
//! staged ring would exceed it keeps its loads in registers instead ([`staged_ring_fits`]).

use super::layouts::Plan;
use super::{PlanError, Target, WarpSpecialized};
use dt_core::kir::{Kernel, Op};

/// Shared memory a clustered kernel keeps out of its staged rows' rings, for the slots of its
/// cluster reductions (static shared memory, which the dynamic limit does not count).
pub const CLUSTER_SLOTS_RESERVE: u32 = 3 * 1024;

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
/// rings of `plan`; refuses a kernel that needs more than the plan's target gives a block.
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
    let limit = plan.target.shared_bytes_per_block;
    // The buffers of the cluster meetings are static shared memory, which a block's limit counts
    // with the dynamic part.
    let with_meetings = bytes + cluster_meeting_bytes(k);
    match ws {
        Some((_, t)) if with_meetings > t.shared_bytes_per_block => Err(PlanError(format!(
            "kernel `{}` needs {with_meetings} bytes of shared memory for its ring and tiles (at most {} on {}); lower num_stages",
            k.name, t.shared_bytes_per_block, t.name
        ))),
        None if with_meetings > limit => Err(PlanError(format!(
            "kernel `{}` needs {with_meetings} bytes of shared memory for its tiles{} (at most {limit} on {}); use smaller tiles",
            k.name,
            if with_meetings > bytes { " and its cluster meetings" } else { "" },
            plan.target.name
        ))),
        _ => Ok(SharedLayout { slot_offsets, dot_rings, staged_rings: total, bytes }),
    }
}

/// Bytes of the static shared memory of kernel `k`'s cluster meetings (`emit::gpu_cluster`): a
/// buffer of the met tile per `ClusterReduce`, of three per `ClusterPaired`.
pub(crate) fn cluster_meeting_bytes(k: &Kernel) -> u32 {
    let bytes: usize = k
        .lets()
        .iter()
        .map(|(v, op)| match op {
            Op::ClusterReduce { .. } => 4 * k.value(*v).shape.elements(),
            Op::ClusterPaired { .. } => 12 * k.value(*v).shape.elements(),
            _ => 0,
        })
        .sum();
    bytes.min(u32::MAX as usize) as u32
}

/// Whether a staged loop's ring, ending `end_words` words from the start of shared memory, fits
/// kernel `k` on `target` (less the static buffers of its cluster meetings, at least
/// [`CLUSTER_SLOTS_RESERVE`] in a clustered kernel).
pub(crate) fn staged_ring_fits(k: &Kernel, target: &Target, end_words: usize) -> bool {
    let reserve = if k.grid.cluster.is_some() { CLUSTER_SLOTS_RESERVE.max(cluster_meeting_bytes(k)) } else { 0 };
    end_words * 4 <= (target.shared_bytes_per_block - reserve) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::gpu::Dialect;
    use crate::plan::layouts::{Plan, RegLayout};

    fn kernel(schedule: &str) -> Kernel {
        let src = format!("Func out; In A; Var x; out[x] = A[x] * 2; out.block(x:64); out.tensorize(x:64); {schedule} out.compile();");
        let p = dt_core::compile_spec(&src).expect("checks");
        dt_core::lower::lower(&p, p.kernels[0]).expect("lowers")
    }

    fn plan(k: &Kernel, dialect: Dialect, ring_words: usize) -> Plan {
        Plan {
            values: vec![RegLayout::Blocked; k.values.len()],
            vars: vec![RegLayout::Blocked; k.vars.len()],
            dots: Vec::new(),
            ring_words,
            async_copies: dialect == Dialect::Cuda,
            tensor_maps: Vec::new(),
            target: Target::older(k, dialect),
            unfitted_stages: Vec::new(),
            unit_rescales: Vec::new(),
        }
    }

    #[test]
    fn slots_are_16_byte_aligned_and_rings_follow_them() {
        let k = kernel("");
        let s = lay_out(&k, None, &[5, 8], &plan(&k, Dialect::Cuda, 12)).unwrap();
        assert_eq!(s.slot_offsets, [0, 8]);
        assert_eq!((s.dot_rings, s.staged_rings, s.bytes), (16, 28, 28 * 4));
    }

    /// The limit is the build's target's: sm_80's 99 KiB on CUDA, the MI200's 64 KiB on HIP.
    #[test]
    fn a_kernel_over_the_limit_of_its_target_is_refused() {
        let k = kernel("");
        for (dialect, target) in [(Dialect::Cuda, Target::SM80), (Dialect::Hip, Target::PORTABLE)] {
            let words = target.shared_bytes_per_block as usize / 4;
            assert!(lay_out(&k, None, &[words], &plan(&k, dialect, 0)).is_ok());
            let err = lay_out(&k, None, &[words + 4], &plan(&k, dialect, 0)).unwrap_err();
            assert!(err.0.contains("use smaller tiles") && err.0.contains(target.name), "{}", err.0);
            assert!(lay_out(&k, None, &[4], &plan(&k, dialect, words)).is_err());
        }
    }

    /// A clustered kernel runs on sm_90 only: its rings may take that target's room, less the
    /// reserve for its cluster reductions' slots.
    #[test]
    fn a_ring_of_a_clustered_kernel_may_take_the_room_of_sm_90() {
        let (plain, clustered) = (kernel(""), kernel("out.cluster(x:2);"));
        let (sm80, sm90) = (Target::older(&plain, Dialect::Cuda), Target::older(&clustered, Dialect::Cuda));
        assert_eq!((sm80, sm90), (Target::SM80, Target::SM90A));
        let words = Target::SM80.shared_bytes_per_block as usize / 4;
        assert!(staged_ring_fits(&plain, &sm80, words) && !staged_ring_fits(&plain, &sm80, words + 1));
        assert!(staged_ring_fits(&clustered, &sm90, words + 1));
        let words = (Target::SM90A.shared_bytes_per_block - CLUSTER_SLOTS_RESERVE) as usize / 4;
        assert!(staged_ring_fits(&clustered, &sm90, words) && !staged_ring_fits(&clustered, &sm90, words + 1));
    }
}
