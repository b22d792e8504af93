//! Dots fed through rings of shared-memory stages: a `num_stages(S)` reduction loop whose work
//! includes staged dots (tensor-core, or f32 `Fma`) of operands it loads (attention's loop over
//! the keys: `Q K^T`, then `P V`) copies the operands of step i + S - 1 with `cp.async` while it
//! works on step i, each operand into its own ring of S buffers. An operand whose load does not
//! read the loop's dimension (attention's queries) is the same at every step: it is copied once,
//! before the loop, and held in one buffer. Without this, every step copied its operands with
//! plain loads and waited for them (three round trips to memory per step of attention, nothing
//! in flight while the dots worked), and copied the queries again.
//!
//! It applies on CUDA (`cp.async`; `mma.sync` and f32 `Fma` dots) to a loop with `num_stages`
//! of 2 or more and no nested loop, a reduction loop or a forward loop over a result dimension
//! (the talk's 2mm steps over the columns of `C`), whose body meets no cluster and whose every
//! load is made by a staged dot of the loop, each such dot copying its `b`. Its `a` is copied
//! too, read from fragments ([`MmaDot::a_in_fragments`]), or computed: one computed before the
//! loop is held in a buffer of the rings, stored from registers once; one computed in the loop
//! is stored into its slot at every step ([`MmaDot::a_in_slot_each_step`]). A loop around a
//! single dot that is all it does is the plain pipeline's (`pipelines::pipeline`).
//! The operands' lines are padded where the rings fit so, else swizzled ([`MmaDot::swizzle`]):
//! S is lowered until the rings fit the shared memory of the kernel's target less the slots'
//! reserve ([`ring_bytes`]); a loop whose rings do not fit with two
//! stages runs unpipelined. The operands of warpgroup dots ([`MmaDot::warpgroup`]) are always
//! swizzled, and every buffer of such a loop's rings is a whole number of 1024-byte swizzle
//! atoms, from a ring region that starts at a multiple of 1024 bytes (the printer's part).
//! Where such a loop's stages are refilled by the last warp done with them, three or more, and
//! its dots are the online attention's, its steps overlap ([`RingBuffers::overlapped`], see
//! `overlaps`), its two warpgroups taking turns ([`RingBuffers::turns`]).

use super::layouts::{MmaDot, Plan, RingBuffers, RingMulticast};
use super::warp_specialize::multicast_slice;
use dt_core::kir::*;

/// Shared memory a kernel keeps out of its rings for its slots: 3 KiB.
pub(crate) const RING_SLOTS_RESERVE: usize = 3 * 1024;

/// Shared memory a `wgmma()` kernel (sm_90a only, which gives a block 227 KiB) keeps out of its
/// rings: for its slots, and the 1024 bytes of alignment of its swizzle atoms.
pub(crate) const SLOTS_RESERVE: usize = 2 * 1024;

/// Most shared memory (bytes) the rings of kernel `k` may take on `target`: what it gives a
/// block less the slots' reserve ([`RING_SLOTS_RESERVE`], or [`SLOTS_RESERVE`] in a `wgmma()`
/// kernel) and the static buffers of its cluster meetings.
fn ring_bytes(k: &Kernel, target: &crate::plan::Target) -> usize {
    let reserve = if k.wgmma { SLOTS_RESERVE } else { RING_SLOTS_RESERVE };
    (target.shared_bytes_per_block as usize).saturating_sub(reserve + super::shared::cluster_meeting_bytes(k) as usize)
}

/// Gives the dots of every loop that qualifies (see the module docs) their rings, laid out one
/// after another from `p.ring_words` on.
pub(crate) fn plan_rings(k: &Kernel, stmts: &[Stmt], p: &mut Plan) {
    plan_rings_in(k, stmts, true, p);
}

/// [`plan_rings`] over `stmts`; `same_runs`: every loop around them runs as often in every
/// program of a multicast's cluster (each over the dimension of the multicast takes its whole
/// block in one step), so that a ring loop among them may share its copies ([`shared_slices`]).
fn plan_rings_in(k: &Kernel, stmts: &[Stmt], same_runs: bool, p: &mut Plan) {
    for s in stmts {
        let Stmt::Loop(l) = s else { continue };
        let once_a_block = |(d, _): (dt_core::algo::DimId, u32)| l.dim != d || k.grid.block_extent(d).is_some_and(|b| l.step >= b);
        plan_rings_in(k, &l.body, same_runs && k.grid.multicast.is_none_or(once_a_block), p);
        // A contraction's loop: over all of it, or over this program's block of it where the
        // cluster splits it (`cluster(k:N)`).
        let contraction = l.kind == LoopKind::Reduction || k.grid.reduces_a_cluster_share(l);
        // A loop over result tiles (the talk's 2mm: a block of rows times each 64 columns of C,
        // over all of them) copies the operands of its steps ahead alike; its steps run forward.
        // A loop whose body meets the cluster keeps its plain form, where the cluster waits are
        // placed at the end of each step (`cluster_waits`).
        let meets = super::cluster_waits::reduces_over_the_cluster(&l.body);
        if l.stages < 2 || (l.backward && !contraction) || meets || l.body.iter().any(|s| matches!(s, Stmt::Loop(_))) {
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
        // A computed `a` (not in fragments) is staged from registers into its slot at every step,
        // as where no ring feeds the dot.
        let fed = |v: &ValueId| {
            p.dot(*v).is_some_and(|d| !d.wgmma && d.stages == 1 && d.direct[1].is_some() && (!d.computed_a() || !d.warpgroup))
        };
        let loads_fed = l.body.iter().all(|s| !matches!(s, Stmt::Let { value, op: Op::Load { .. } } if !p.direct_load(*value)));
        if dots.is_empty() || !dots.iter().all(fed) || !loads_fed {
            continue;
        }
        // An operand the steps share: a copy that does not read the loop's dimension, or a
        // computed `a` from before the loop, stored once.
        let held = |d: &MmaDot, i: usize| match &d.direct[i] {
            Some(load) => !load.axes.contains(&l.dim),
            None => i == 0 && d.computed_a() && !defines(&l.body, d.a),
        };
        // The operands that take buffers of the rings: the copied ones and the held computed `a`.
        let ringed = |d: &MmaDot, i: usize| d.direct[i].is_some() || held(d, i);
        let words = |stages: u32, swizzle: bool| -> usize {
            dots.iter()
                .filter_map(|v| p.dot(*v))
                .map(|d| {
                    let d = with_swizzle(d, swizzle);
                    (0..2)
                        .filter(|i| ringed(&d, *i))
                        .map(|i| d.buffer_words(i) * if held(&d, i) { 1 } else { stages as usize })
                        .sum::<usize>()
                })
                .sum()
        };
        // The most stages that fit, padded where that fits, else swizzled.
        let slots = dot_slot_words(p, &dots, |d| ringed(d, 0));
        let fits = |stages: u32, swizzle: bool| (p.ring_words + slots + words(stages, swizzle)) * 4 <= ring_bytes(k, &p.target);
        let choice = (2..=l.stages).rev().find_map(|s| [false, true].into_iter().find(|sw| fits(s, *sw)).map(|sw| (s, sw)));
        let Some((stages, swizzle)) = choice else {
            p.unfitted_stages.push((l.dim, l.stages));
            continue;
        };
        for v in &dots {
            let start = p.ring_words;
            let Some((_, d)) = p.dots.iter_mut().find(|(x, _)| x == v) else { continue };
            *d = with_swizzle(d, swizzle);
            let mut ring = RingBuffers {
                at: [None, None],
                held: [false, false],
                stages,
                maps: [None, None],
                barriers: None,
                done_counts: None,
                overlapped: false,
                turns: false,
                multicast: None,
            };
            let mut next = start;
            for i in 0..2 {
                if !ringed(d, i) {
                    continue;
                }
                ring.at[i] = Some(next);
                ring.held[i] = held(d, i);
                next += d.buffer_words(i) * if ring.held[i] { 1 } else { stages as usize };
            }
            d.ring = Some(ring);
            p.ring_words = next;
        }
        if k.wgmma {
            bulk_copies(k, l, same_runs, &dots, p);
            if overlaps(l, &dots, p) {
                for v in &dots {
                    if let Some(r) = p.dots.iter_mut().find(|(x, _)| x == v).and_then(|(_, d)| d.ring.as_mut()) {
                        r.overlapped = true;
                        // Two warpgroups of four warps.
                        r.turns = k.num_warps == 8;
                    }
                }
            }
        }
    }
}

/// The 4-byte words that the dots' slots 0 and 1 will take (`publishing` makes each slot as
/// large as its largest user): each dot that stages its operands where it stands, pipelined
/// alone or not, and the computed `a` of a dot fed by rings (`ringed` among them) unless the
/// rings hold it (`a_ringed`).
fn dot_slot_words(p: &Plan, ringed: &[ValueId], a_ringed: impl Fn(&MmaDot) -> bool) -> usize {
    let mut slot = [0usize; 2];
    for (v, d) in &p.dots {
        if d.wgmma {
            continue;
        }
        if d.ring.is_none() && !ringed.contains(v) {
            for (i, words) in slot.iter_mut().enumerate() {
                if i == 1 || !d.a_in_fragments {
                    *words = (*words).max(d.slot_words(i));
                }
            }
        } else if (ringed.contains(v) && d.computed_a() && !a_ringed(d)) || d.a_in_slot_each_step() {
            slot[0] = slot[0].max(d.buffer_words(0));
        }
    }
    slot[0] + slot[1]
}

/// Whether loop `l`, whose rings feed `dots`, issues each step's first dot with the previous
/// step's last one ([`RingBuffers::overlapped`]): the online attention's form, two warpgroup
/// dots, the first on copied operands into an accumulator of the step, the second on the
/// first's computed result into an accumulator the steps carry, and nothing after the second
/// but its accumulation. The last warp done with a stage refills it (no block-wide barrier in
/// the loop; with the barrier, which the other program on the multiprocessor hides, the overlap
/// measured slower), with three stages or more, so that a stage freed once the previous step's
/// products are done is refilled a step before it is read.
fn overlaps(l: &Loop, dots: &[ValueId], p: &Plan) -> bool {
    let ([first, last], Some(ring)) = (dots, p.dot(dots[0]).and_then(|d| d.ring)) else { return false };
    let (Some(d1), Some(d2)) = (p.dot(*first), p.dot(*last)) else { return false };
    let initialized = |var: VarId| l.body.iter().any(|s| matches!(s, Stmt::Init { var: v, .. } if *v == var));
    let at = |v: &ValueId| l.body.iter().position(|s| matches!(s, Stmt::Let { value, .. } if value == v));
    let only_accumulated_after = at(last).is_some_and(|i| {
        l.body[i + 1..].iter().all(|s| matches!(s, Stmt::Update { var, value, .. } if Some(*var) == d2.into && value == last))
    });
    ring.done_counts.is_some()
        && ring.stages >= 3
        && d1.warpgroup
        && d2.warpgroup
        && !d1.a_in_fragments
        && d2.a_in_fragments
        && d1.into.is_some_and(initialized)
        && d2.into.is_some_and(|v| !initialized(v))
        && at(first) < at(last)
        && only_accumulated_after
}

/// Most elements of one axis of a tensor map's box.
const MAX_BOX: u32 = 256;

/// Gives the rings of a loop `l` of a `wgmma()` kernel, which feeds `dots`, bulk tensor copies
/// (see [`RingBuffers::maps`]) where every dot the loop feeds is a warpgroup dot whose copied
/// operands run along their input's contiguous axis (a [rows][K] operand's K, a [K][rows]
/// one's rows: each 64-element piece of a line is 128 contiguous bytes) and whose other axes
/// the tile covers with one element or with its lines, at most 256 of them; and the tensor
/// maps fit the kernel's argument. Otherwise the rings keep `cp.async` (and the printer refuses
/// the kernel). In a `multicast(d:N)` kernel the operands copied at every step that do not
/// vary along `d` are shared by the cluster ([`shared_slices`]).
fn bulk_copies(k: &Kernel, l: &Loop, same_runs: bool, dots: &[ValueId], p: &mut Plan) {
    let fed: Vec<usize> = dots.iter().filter_map(|v| p.dots.iter().position(|(x, _)| x == v)).collect();
    let mut maps = Vec::new();
    let mut slices = Vec::new();
    for x in &fed {
        let d = &p.dots[*x].1;
        if !d.warpgroup {
            return;
        }
        for i in 0..2 {
            let Some(load) = &d.direct[i] else { continue };
            let line_dim = if d.trans(i) { d.k } else { d.rows(i).0 };
            let along = if d.trans(i) { d.rows(i).0 } else { d.k };
            let shape = &k.value(if i == 0 { d.a } else { d.b }).shape;
            let mut boxes = Vec::new();
            for a in &load.axes {
                let extent = shape.extent(*a).unwrap_or(1);
                boxes.push(if *a == along {
                    64
                } else if *a == line_dim {
                    extent
                } else if extent == 1 {
                    1
                } else {
                    return;
                });
            }
            let lines = d.lines(i);
            if !(2..=5).contains(&load.axes.len())
                || load.axes.last() != Some(&along)
                || !load.axes.contains(&line_dim)
                || lines > MAX_BOX
                || !d.swizzled(i)
            {
                return;
            }
            let held = d.ring.is_some_and(|r| r.held[i]);
            let slice = shared_slices(k, l, &load.axes, held, lines).filter(|_| same_runs);
            if let Some(slice) = slice {
                let at = load.axes.iter().position(|a| *a == line_dim).expect("the box spans its lines");
                boxes[at] = slice;
            }
            slices.push((*x, i, slice));
            maps.push((*x, i, dt_core::abi::TensorMapSpec { tensor: Some(load.input), boxes: boxes.into(), swizzle: 128 }));
        }
    }
    if maps.is_empty() || p.tensor_maps.len() + maps.len() > dt_core::abi::MAX_TENSOR_MAPS {
        return;
    }
    // The barriers after the rings, 8-byte aligned (the buffers are whole swizzle atoms): the
    // stages' `full` barriers; a multicast's `empty` barriers; where one program fills a
    // multiprocessor (and the cluster does not share the stages), the stages' counts of warps
    // done after them.
    let stages = p.dots[fed[0]].1.ring.expect("fed by a ring").stages as usize;
    let barriers = p.ring_words.next_multiple_of(2);
    let multicast = k.grid.multicast.filter(|_| slices.iter().any(|(.., s)| s.is_some()));
    let empty = barriers + 2 * stages;
    let counts = if multicast.is_some() { empty + 2 * stages } else { empty };
    let done_counts = (multicast.is_none() && !two_programs_fit(&p.target, counts + stages)).then_some(counts);
    p.ring_words = done_counts.map_or(counts, |c| c + stages);
    for x in &fed {
        let slice_lines = [0, 1].map(|i| slices.iter().find(|(y, j, _)| y == x && *j == i).and_then(|(.., s)| *s));
        if let Some(r) = &mut p.dots[*x].1.ring {
            r.barriers = Some(barriers);
            r.done_counts = done_counts;
            r.multicast = multicast.map(|(_, programs)| RingMulticast { programs, empty, slice_lines });
        }
    }
    for (x, i, spec) in maps {
        if let Some(r) = &mut p.dots[x].1.ring {
            r.maps[i] = Some(p.tensor_maps.len());
        }
        p.tensor_maps.push(spec);
    }
}

/// The lines of each program's slice of a box of `lines` lines of an operand loaded along
/// `axes` and copied at every step of loop `l` (not `held`), where the kernel is multicast
/// along a dimension the operand does not vary along, the loop's steps are the same in every
/// program of the cluster (not bounded by the block, as a causal loop is, nor a share of a
/// split contraction; the caller checks the loops around it), and the slices are whole groups
/// of 8 lines ([`multicast_slice`]). `None`: each program copies the operand alone.
fn shared_slices(k: &Kernel, l: &Loop, axes: &[dt_core::algo::DimId], held: bool, lines: u32) -> Option<u32> {
    let (d, programs) = k.grid.multicast?;
    let same_steps = l.until.is_none() && l.diagonal.is_none() && !k.grid.reduces_a_cluster_share(l);
    (!held && same_steps && !axes.contains(&d)).then(|| multicast_slice(lines, programs)).flatten()
}

/// Whether two programs of a `wgmma()` kernel whose rings take `ring_words` fit one
/// multiprocessor's shared memory (with the slots' reserve each). Where they do, the other
/// program runs while one waits at its step's block-wide barrier, and the first thread refills
/// the stages after it. Where they do not, the warps of the one program would idle there: the
/// last warp done with a stage refills it instead ([`RingBuffers::done_counts`]), and no
/// barrier holds the warpgroups in step, so one computes its softmax while the other's
/// products run.
fn two_programs_fit(target: &crate::plan::Target, ring_words: usize) -> bool {
    2 * (ring_words * 4 + SLOTS_RESERVE) <= target.shared_bytes_per_sm as usize
}

/// `d` with every operand it stages that can be swizzled swizzled, when `swizzle` or when the
/// dot is a warpgroup product (`wgmma` reads swizzled atoms only).
fn with_swizzle(d: &MmaDot, swizzle: bool) -> MmaDot {
    let mut d = d.clone();
    for i in 0..2 {
        d.swizzle[i] = d.direct[i].is_some() && ((swizzle && d.can_swizzle(i)) || (d.warpgroup && d.fits_atoms(i)));
    }
    d
}

/// Whether `stmts` (nested loops included) define value `v`.
fn defines(stmts: &[Stmt], v: ValueId) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Let { value, .. } => *value == v,
        Stmt::Loop(l) => defines(&l.body, v),
        _ => false,
    })
}
