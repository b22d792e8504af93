//! Dots fed through rings of shared-memory stages: a `num_stages(S)` reduction loop whose work
//! includes staged dots (tensor-core, or f32 `Fma`) of operands it loads (attention's loop over
//! the keys: `Q K^T`, then `P V`) copies the operands of step i + S - 1 with `cp.async` while it
//! works on step i, each operand into its own ring of S buffers. An operand whose load does not
//! read the loop's dimension (attention's queries) is the same at every step: it is copied once,
//! before the loop, and held in one buffer. Without this, every step copied its operands with
//! plain loads and waited for them (three round trips to memory per step of attention, nothing
//! in flight while the dots worked), and copied the queries again.
//!
//! It applies on CUDA (`cp.async`; `mma.sync` and f32 `Fma` dots) to a reduction loop with
//! `num_stages` of 2 or more and no nested loop, whose every load is made by a staged dot of the
//! loop, each such dot copying both its operands or reading `a` from fragments
//! ([`MmaDot::a_in_fragments`]). A loop around a single dot that is all it does is the plain
//! pipeline's (`layouts::pipeline`).
//! The operands' lines are padded where the rings fit so, else swizzled ([`MmaDot::swizzle`]):
//! S is lowered until the rings fit in [`RING_BYTES`]; a loop whose rings do not fit with two
//! stages runs unpipelined.

use super::layouts::{MmaDot, Plan, RingBuffers};
use dt_core::kir::*;

/// Most shared memory the rings of one kernel may take: what leaves room for the slots within
/// the staged path's limit (`emit::gpu::MAX_STAGED_SHARED_BYTES`), the 99 KB a block gets on
/// every GPU the CUDA build runs on (sm_86 and sm_89 give no more), until the limit comes from
/// the target.
pub(crate) const RING_BYTES: usize = 96 * 1024;

/// Gives the dots of every loop that qualifies (see the module docs) their rings, laid out one
/// after another from `p.ring_words` on.
pub(crate) fn plan_rings(stmts: &[Stmt], p: &mut Plan) {
    for s in stmts {
        let Stmt::Loop(l) = s else { continue };
        plan_rings(&l.body, p);
        if l.stages < 2 || l.kind != LoopKind::Reduction || l.body.iter().any(|s| matches!(s, Stmt::Loop(_))) {
            continue;
        }
        let dots: Vec<ValueId> = l
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::Let { value, op: Op::Dot { .. } } => Some(*value),
                _ => None,
            })
            .collect();
        if !p.async_copies {
            continue;
        }
        let fed = |v: &ValueId| {
            p.dot(*v).is_some_and(|d| !d.wgmma && d.stages == 1 && d.direct[1].is_some() && (d.direct[0].is_some() || d.a_in_fragments))
        };
        let loads_fed = l.body.iter().all(|s| !matches!(s, Stmt::Let { value, op: Op::Load { .. } } if !p.direct_load(*value)));
        if dots.is_empty() || !dots.iter().all(fed) || !loads_fed {
            continue;
        }
        let held = |d: &MmaDot, i: usize| d.direct[i].as_ref().is_some_and(|load| !load.axes.contains(&l.dim));
        let words = |stages: u32, swizzle: bool| -> usize {
            dots.iter()
                .filter_map(|v| p.dot(*v))
                .map(|d| {
                    let d = with_swizzle(d, swizzle);
                    (0..2)
                        .filter(|i| d.direct[*i].is_some())
                        .map(|i| d.buffer_words(i) * if held(&d, i) { 1 } else { stages as usize })
                        .sum::<usize>()
                })
                .sum()
        };
        // The most stages that fit, padded where that fits, else swizzled.
        let fits = |stages: u32, swizzle: bool| (p.ring_words + words(stages, swizzle)) * 4 <= RING_BYTES;
        let choice = (2..=l.stages).rev().find_map(|s| [false, true].into_iter().find(|sw| fits(s, *sw)).map(|sw| (s, sw)));
        let Some((stages, swizzle)) = choice else { continue };
        for v in dots {
            let start = p.ring_words;
            let Some((_, d)) = p.dots.iter_mut().find(|(x, _)| *x == v) else { continue };
            *d = with_swizzle(d, swizzle);
            let mut ring = RingBuffers { at: [None, None], held: [false, false], stages };
            let mut next = start;
            for i in 0..2 {
                if d.direct[i].is_none() {
                    continue;
                }
                ring.at[i] = Some(next);
                ring.held[i] = held(d, i);
                next += d.buffer_words(i) * if ring.held[i] { 1 } else { stages as usize };
            }
            d.ring = Some(ring);
            p.ring_words = next;
        }
    }
}

/// `d` with every operand it stages that can be swizzled swizzled, when `swizzle`.
fn with_swizzle(d: &MmaDot, swizzle: bool) -> MmaDot {
    let mut d = d.clone();
    for i in 0..2 {
        d.swizzle[i] = swizzle && d.direct[i].is_some() && d.can_swizzle(i);
    }
    d
}
