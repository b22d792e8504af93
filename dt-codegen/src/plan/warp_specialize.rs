//! Plan pass: the `rdot` loop of a kernel scheduled with `warp_specialize()`, on a target with
//! TMA and `wgmma` (Hopper).
//!
//! The program's threads split into roles. The `num_warps` warps, in warpgroups of four, are the
//! consumers: each computes 64 rows of the accumulator tile with `wgmma.mma_async`, reading both
//! operands from shared memory through matrix descriptors, so its accumulator fragments are the
//! `mma.sync` layout of a warp per 16 rows (what the epilogue reads, `gpu_mma.rs`). One more
//! warpgroup is the producer: one of its threads copies each step's operand tiles from global
//! memory into a ring of shared-memory stages with bulk tensor copies (TMA), which zero-fill what
//! lies outside the tensors, so the loop needs no masks. Two rings of `mbarrier`s order them:
//! `full[s]` completes when stage `s`'s bytes have landed (the producer arrives once, announcing
//! the bytes), `empty[s]` when every consumer warpgroup has finished reading it (one arrival
//! each). Stage `s` of step `i` is `i % stages`, its phase `(i / stages) % 2`; the producer
//! waits on `empty` with the other parity, so the first round passes at once. The producer
//! keeps few registers (`setmaxnreg`), the consumers take the rest.
//!
//! An input that no tensor map describes (rows of a length that is no multiple of 16 bytes, an
//! unaligned address: the host encodes no map for it and says so in the argument block) is copied by
//! the producer warpgroup's 128 threads instead, element by element into the same swizzled
//! lines with zeros outside the tensor; then `full[s]` waits for their writes too (each thread
//! fences them for the async proxy, the warpgroup meets at its named barrier, and the copying
//! thread arrives after it, having announced only the bytes of the bulk copies). The consumers
//! are the same either way.
//!
//! Each operand tile is staged in rows of 128 bytes (64 16-bit elements) with the 128-byte
//! swizzle, in boxes of 64 elements along the input's contiguous axis: an operand whose
//! contiguous axis is the contraction `k` is "K-major" (one box of [rows, 64] per stage, `k` a
//! step of 64), one whose contiguous axis is its rows "MN-major" (boxes of [64 k, 64 rows], one
//! per 64 rows), which `wgmma` reads transposed.
//!
//! The epilogue stores the tile through shared memory where there is room ([`StagedStore`]):
//! each consumer warpgroup writes its 64 rows 64 columns at a time into one of two staging
//! buffers of the same swizzled rows, and one of its threads stores each with a bulk tensor copy,
//! which writes whole 128-byte lines and leaves out what lies outside the output.

use super::target::Target;
use super::PlanError;
use dt_core::abi::TensorMapSpec;
use dt_core::algo::{DimId, RedOp};
use dt_core::kir::*;
use dt_core::DType;

/// The contraction step the staging rows hold: 64 16-bit elements, 128 bytes.
pub const STEP: u32 = 64;
/// Bytes of one staged row, which the 128-byte swizzle permutes.
pub const ROW_BYTES: u32 = 128;
/// Rows of the accumulator one consumer warpgroup computes (`wgmma`'s M).
pub const ROWS_PER_CONSUMER: u32 = 64;
/// Threads of a warpgroup.
pub const WARPGROUP: u32 = 128;

/// Registers per thread of the producer warpgroup: enough for its threads' copy of a box no
/// tensor map describes to hold the 32 pairs of elements each loads before it stores them
/// (`dt_copy_box_by_threads`), one round trip to memory per box (decision 0026 measured 40,
/// 72 and 88). The consumers of two warpgroups keep 208.
pub const PRODUCER_REGISTERS: u32 = 88;

/// Which axis of an operand's input is contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Major {
    /// The contraction `k`: rows of the tile are 128-byte lines of `k`.
    K,
    /// The operand's rows (`m` for A, `n` for B): lines of 64 rows, one per `k`.
    Mn,
}

/// A `wgmma` shared-memory matrix descriptor's strides, and how its start address moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// Leading-dimension byte offset: for an MN-major operand, between its boxes of 64 rows.
    pub lbo: u32,
    /// Stride-dimension byte offset: between groups of 8 lines (1024 bytes with 128-byte rows).
    pub sbo: u32,
    /// Bytes the start address moves per 16 of `k` (one instruction).
    pub k_step: u32,
    /// Bytes the start address moves per 64 rows (a consumer warpgroup's slice).
    pub slice_step: u32,
    /// `wgmma`'s transpose flag: set for an MN-major operand.
    pub transposed: bool,
    /// Where `k` runs along lines cut in pieces (a `wgmma()` dot's K-major operand, see
    /// `MmaDot::atom_pieces`): the elements of `k` per piece and the bytes from one piece to the
    /// next; the start moves `k_step` per 16 of `k` within a piece. `None`: one piece.
    pub pieces: Option<(u32, u32)>,
}

impl Descriptor {
    /// The descriptor in the plan's readable form.
    pub fn describe(&self) -> String {
        let pieces = match self.pieces {
            Some((n, bytes)) => format!(" in pieces of {n}, {bytes} bytes apart"),
            None => String::new(),
        };
        format!(
            "descriptor lbo {} sbo {}, +{} bytes per k16{pieces}, +{} per 64 rows{}",
            self.lbo,
            self.sbo,
            self.k_step,
            self.slice_step,
            if self.transposed { ", transposed" } else { "" }
        )
    }
}

/// One operand of the dot as the ring stages it.
#[derive(Clone, Debug, PartialEq)]
pub struct StagedOperand {
    /// The load the producer's copies replace.
    pub value: ValueId,
    pub input: usize,
    /// The input's axes, each along one dimension.
    pub axes: Vec<DimId>,
    /// The dimension of the tile's rows (`m` for A, `n` for B) and their number.
    pub rows_dim: DimId,
    pub rows: u32,
    /// The rows a stage copies: `rows`, or fewer for a first operand whose dimension is bounded
    /// below them (see [`copied_rows`]); `wgmma` reads `rows` lines from `offset` all the same.
    pub copied_rows: u32,
    pub major: Major,
    /// Its tensor map among the kernel's (`dt_tma_args_t::maps`).
    pub map: usize,
    /// The box of one copy, per axis of the input.
    pub boxes: Vec<u32>,
    /// Copies per stage, and the bytes of each (consecutive in shared memory; each moves its
    /// coordinate along the contiguous axis by 64).
    pub copies: u32,
    pub copy_bytes: u32,
    /// Where the operand's tile starts in a stage.
    pub offset: u32,
    pub desc: Descriptor,
    /// Where the kernel is multicast along a dimension this operand does not vary along: how
    /// each program of the cluster copies its slice of every box into all of them.
    pub multicast: Option<Multicast>,
}

/// The slices of a multicast operand (see [`StagedOperand::multicast`]): each of `programs`
/// programs copies `1 / programs` of every box, cut along the box's outer axis `axis` (the
/// rows of a K-major operand, `k` of an MN-major one) into `extent` lines of `bytes`, program
/// `r`'s at line `r * extent`, into the same place of every program's stage. A slice is whole
/// groups of 8 lines (1024 bytes), so the 128-byte swizzle lays it out as the whole box would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Multicast {
    pub programs: u32,
    pub axis: usize,
    pub extent: u32,
    pub bytes: u32,
}

impl StagedOperand {
    /// Bytes of the operand's tile in one stage.
    pub fn bytes(&self) -> u32 {
        self.copies * self.copy_bytes
    }

    /// The input axis that is contiguous (its last).
    pub fn contiguous_axis(&self) -> usize {
        self.axes.len() - 1
    }
}

/// A ring of `mbarrier`s, one per stage, 8 bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierRing {
    /// Where the ring starts in shared memory (after the stages).
    pub offset: u32,
    /// Arrivals that complete a phase.
    pub arrivals: u32,
    /// Bytes of copies that complete a phase besides the arrivals (announced by the arrival).
    pub tx_bytes: u32,
}

/// Who does what among the program's warpgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles {
    /// Warpgroups that compute (warps 0 .. 4 * consumers), 64 accumulator rows each.
    pub consumers: u32,
    /// Registers per thread each role keeps after `setmaxnreg`; the kernel starts with
    /// `entry_registers` (its `__launch_bounds__(threads, 1)` cap).
    pub producer_registers: u32,
    pub consumer_registers: u32,
    pub entry_registers: u32,
    /// The named barrier at which the producer warpgroup's threads meet after copying a stage
    /// that no tensor map describes (after the consumers' barriers, see [`StagedStore`]).
    pub producer_barrier: u32,
}

impl Roles {
    /// Threads of the program: the consumers, then the producer warpgroup.
    pub fn threads(&self) -> u32 {
        WARPGROUP * (self.consumers + 1)
    }

    /// The registers `setmaxnreg` moves between the roles: the program's own, its threads
    /// times the entry cap. `setmaxnreg.inc` takes from what the program's `setmaxnreg.dec`
    /// returned, not from the rest of the multiprocessor, and waits until it can: consumers
    /// asking for more than the pool holds would wait forever.
    pub fn pool(&self) -> u32 {
        self.threads() * self.entry_registers
    }

    /// Whether the roles' registers after `setmaxnreg` fit in [`Self::pool`].
    pub fn fit_the_pool(&self) -> bool {
        WARPGROUP * (self.producer_registers + self.consumers * self.consumer_registers) <= self.pool()
    }

    /// The first thread of the producer warpgroup, which issues every bulk copy.
    pub fn producer_thread(&self) -> u32 {
        WARPGROUP * self.consumers
    }
}

/// The epilogue's store of the accumulator tile (or a tile computed from it element by element)
/// through shared memory and bulk tensor copies (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct StagedStore {
    /// The value the kernel's one store writes.
    pub value: ValueId,
    /// The output's tensor map among the kernel's (after the operands').
    pub map: usize,
    /// The box of one store, per axis of the output: 64 rows by 64 columns.
    pub boxes: Vec<u32>,
    /// Chunks of [`STORE_COLS`] columns per tile, and the registers of a thread's fragments that
    /// hold one chunk (consecutive: a warp's fragments of 8 columns hold 4 registers each).
    pub chunks: u32,
    pub registers_per_chunk: u32,
    /// Where the staging buffers start (from the ring's start, after the barriers, 1024-aligned):
    /// [`STORE_BUFFERS`] per consumer warpgroup, of `buffer_bytes` each.
    pub offset: u32,
    pub buffer_bytes: u32,
    /// The named barrier of consumer warpgroup `g` is `first_barrier + g` (0 is the program's,
    /// 1 the consumers').
    pub first_barrier: u32,
}

/// Columns of one staged store: a 128-byte row of 16-bit elements, as the swizzle permutes.
pub const STORE_COLS: u32 = 64;
/// Staging buffers per consumer warpgroup: one is written while the other's store reads it.
pub const STORE_BUFFERS: u32 = 2;
/// The widest `wgmma` N whose steps build their descriptors before waiting for their stage:
/// measured faster at N 16 and 64 (1-3%), slower at 256 (0.6%) (decision 0039).
pub const EARLY_DESCRIPTORS_MAX_N: u32 = 64;

/// The plan of a warp-specialized `rdot` loop (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct WarpSpecialized {
    /// The loop's dimension (the contraction) and step.
    pub k: DimId,
    pub step: u32,
    /// The dot and the accumulator it is summed into.
    pub dot: ValueId,
    pub acc: VarId,
    /// The accumulator tile: `rows` along `m`, `cols` along `n`. `swapped`: `m` is the
    /// dimension of the dot's columns and `n` of its rows (a tile of fewer rows than the
    /// consumer warpgroups compute, see [`plan_warp_specialized`]).
    pub swapped: bool,
    pub m: DimId,
    pub n: DimId,
    pub rows: u32,
    pub cols: u32,
    /// A (rows along `m`) and B (rows along `n`).
    pub operands: [StagedOperand; 2],
    pub stages: u32,
    /// Bytes of one stage: both operand tiles.
    pub stage_bytes: u32,
    pub full: BarrierRing,
    pub empty: BarrierRing,
    pub roles: Roles,
    /// `wgmma`'s N (the accumulator's columns) and its instructions per stage (`step / 16`).
    pub wgmma_n: u32,
    pub wgmma_per_stage: u32,
    /// Whether the consumers build a stage's descriptors before waiting for it, so that its
    /// products issue as soon as it lands: where products are short (`wgmma_n` up to
    /// [`EARLY_DESCRIPTORS_MAX_N`], decision 0039).
    pub descriptors_before_wait: bool,
    /// The epilogue's store through shared memory, where the output and the room allow it.
    pub store: Option<StagedStore>,
    /// Bytes of shared memory the ring takes, its barriers, the staging buffers and the padding
    /// that aligns it to 1024 bytes included (the epilogue's slots come after).
    pub shared_bytes: u32,
    pub persistent: bool,
    /// `cluster(k:N)` with `block(k:B)`: the loop covers this program's block of `B` along the
    /// contraction, and the cluster adds the programs' accumulators after it.
    pub split: Option<Split>,
}

/// A contraction split over the programs of a cluster (see [`WarpSpecialized::split`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// The block of the contraction each program sums, and the programs per cluster.
    pub block: u32,
    pub programs: u32,
    /// Bytes of shared memory each program's partial accumulator takes for the exchange (f32).
    pub partial_bytes: u32,
}

impl WarpSpecialized {
    /// Whether `l` is the loop this plan warp-specializes (the consumers' loop over the
    /// contraction; its body is the plan's, not printed statement by statement).
    pub fn is_its_loop(&self, l: &Loop) -> bool {
        (l.kind == LoopKind::Reduction || self.split.is_some() && l.kind == LoopKind::Block)
            && l.dim == self.k
            && l.body.iter().any(|s| matches!(s, Stmt::Let { value, .. } if *value == self.dot))
    }

    /// The tensor maps the kernel takes, in the order of [`StagedOperand::map`].
    pub fn tensor_maps(&self) -> Vec<TensorMapSpec> {
        let operands =
            self.operands.iter().map(|o| TensorMapSpec { tensor: Some(o.input), boxes: o.boxes.clone().into(), swizzle: ROW_BYTES });
        let output = self.store.iter().map(|s| TensorMapSpec { tensor: None, boxes: s.boxes.clone().into(), swizzle: ROW_BYTES });
        operands.chain(output).collect()
    }

    /// Whether value `v` is a load the producer's copies replace.
    pub fn copies_load(&self, v: ValueId) -> bool {
        self.operands.iter().any(|o| o.value == v)
    }
}

/// Plans the warp-specialized `rdot` loop of `k` built for `dtype` on `target`, or says why the
/// kernel cannot be warp-specialized.
pub fn plan_warp_specialized(k: &Kernel, dtype: DType, target: &Target) -> Result<WarpSpecialized, PlanError> {
    let fail = |why: String| PlanError(format!("kernel `{}` is scheduled with warp_specialize(), but {why}", k.name));
    let f = target.features;
    if !(f.tma && f.wgmma && f.setmaxnreg) {
        return Err(fail(format!("target {} has no tensor-memory copies and wgmma (CUDA sm_90a has)", target.name)));
    }
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(fail(format!("its {} build has no 16-bit operands for wgmma; build it for f16 and bf16 only", dtype.name())));
    }
    let mut found = Vec::new();
    find_rdot_loops(k, &k.body, true, &mut found);
    let [(l, enclosed_ok)] = found[..] else {
        return Err(fail(format!("it has {} rdot loops, and one is what a producer feeds", found.len())));
    };
    if !enclosed_ok {
        return Err(fail("its rdot loop sits inside a loop of several steps; block each dimension as wide as its tile".into()));
    }
    if l.steps != Steps::All || l.backward {
        return Err(fail("its rdot loop is split or reversed".into()));
    }
    let split = split_of(k, l);
    // The loop: two loads, their dot over the loop's dimension, the sum into an accumulator.
    let mut loads: Vec<(ValueId, usize, Vec<DimId>)> = Vec::new();
    let mut dot = None;
    let mut update = None;
    for s in &l.body {
        match s {
            Stmt::Let { value, op: Op::Load { input, axes, fill } } if *fill == 0.0 => loads.push((*value, *input, axes.clone())),
            Stmt::Let { value, op: Op::Dot { a, b, dim } } if dot.is_none() => dot = Some((*value, *a, *b, *dim)),
            Stmt::Update { var, combine: Combine::Reduce(RedOp::Sum), value } if update.is_none() => update = Some((*var, *value)),
            _ => return Err(fail("its rdot loop does more than load two inputs and sum their dot".into())),
        }
    }
    let (Some((dot, a, b, kdim)), Some((acc, summed))) = (dot, update) else {
        return Err(fail("its rdot loop has no dot summed into an accumulator".into()));
    };
    if summed != dot || kdim != l.dim || loads.len() != 2 || k.var(acc) != &k.value(dot).shape {
        return Err(fail("its rdot loop does more than load two inputs and sum their dot".into()));
    }
    if l.step != STEP {
        return Err(fail(format!("its contraction step is {}; it must be {STEP} (tensorize({}:{STEP}))", l.step, k.dim_name(l.dim))));
    }
    // The tile [m, n]: the dot's two wide dimensions, each a whole block.
    let shape = &k.value(dot).shape;
    let wide: Vec<(DimId, u32)> = shape.0.iter().filter(|(_, n)| *n > 1).copied().collect();
    let [(m, rows), (n, cols)] = wide[..] else {
        return Err(fail("its dot's result is not a tile of two dimensions".into()));
    };
    for (d, e) in [(m, rows), (n, cols)] {
        if k.grid.block_extent(d) != Some(e) {
            return Err(fail(format!("`{}` is not blocked by its tile extent {e}", k.dim_name(d))));
        }
    }
    let warps = k.num_warps;
    let consumer_rows = ROWS_PER_CONSUMER * (warps / 4);
    // A tile of fewer rows than its warpgroups compute, but whose columns they cover, runs
    // swapped: the columns are `wgmma`'s M and the rows its N, so that no product is computed
    // past the tile's rows (a 16-row tile would compute 64).
    let swapped = rows < consumer_rows && cols == consumer_rows && rows.is_multiple_of(8);
    let ((m, rows), (n, cols)) = if swapped { ((n, cols), (m, rows)) } else { ((m, rows), (n, cols)) };
    if !warps.is_multiple_of(4) || rows != consumer_rows {
        return Err(fail(format!("its {warps} warps are not one warpgroup (4 warps) per {ROWS_PER_CONSUMER} rows of the {rows}-row tile")));
    }
    // A swapped tile's N is its rows, any multiple of 8; an unswapped tile keeps columns of a
    // multiple of 64 (the narrower ones are not measured on a GPU).
    let unit = if swapped { 8 } else { 64 };
    if !cols.is_multiple_of(unit) || cols > 256 {
        return Err(fail(format!(
            "its tile has {cols} columns; wgmma takes a multiple of 64 up to 256 here (a tile of fewer rows than its warpgroups compute runs swapped, its rows wgmma's N)"
        )));
    }
    let consumers = warps / 4;
    // The operands: which load spans [m, k] (A) and which [n, k] (B).
    let spans = |axes: &[DimId], rows_dim: DimId| {
        let mut wide: Vec<DimId> = axes.iter().copied().filter(|d| *d == rows_dim || *d == l.dim).collect();
        wide.sort();
        wide.dedup();
        wide.len() == 2
    };
    let role = |v: ValueId| loads.iter().find(|(x, ..)| *x == v).cloned();
    let (Some(la), Some(lb)) = (role(a), role(b)) else {
        return Err(fail("its dot's operands are not the loop's loads".into()));
    };
    let (la, lb) = if spans(&la.2, m) && spans(&lb.2, n) {
        (la, lb)
    } else if spans(&lb.2, m) && spans(&la.2, n) {
        (lb, la)
    } else {
        return Err(fail("its dot's operands do not span [rows, k] and [columns, k]".into()));
    };
    let mut operands = Vec::new();
    let mut offset = 0;
    for (map, ((value, input, axes), rows_dim, rows)) in [(la, m, rows), (lb, n, cols)].into_iter().enumerate() {
        // A's tile comes first in a stage, B's `cols` lines after it.
        let copied = if map == 0 { copied_rows(k, rows_dim, rows, cols) } else { rows };
        let op = stage_operand(k, value, input, axes, (rows_dim, rows, copied), l.dim, map, offset).map_err(&fail)?;
        offset += op.bytes();
        operands.push(op);
    }
    if let Some((d, programs)) = k.grid.multicast {
        let varies = |o: &StagedOperand| o.axes.contains(&d);
        let shared: Vec<usize> = operands.iter().enumerate().filter(|(_, o)| !varies(o)).map(|(i, _)| i).collect();
        let [shared] = shared[..] else {
            let why = if shared.is_empty() { "both of its operands vary" } else { "neither of its operands varies" };
            return Err(fail(format!(
                "{why} along the multicast `{}`: the programs of a multicast share the operand that does not, and differ in the other",
                k.dim_name(d)
            )));
        };
        operands[shared] = multicast_operand(k, operands[shared].clone(), l.dim, (d, programs)).map_err(&fail)?;
    }
    let stage_bytes = offset;
    let stages = l.stages;
    if stages < 2 {
        return Err(fail("its rdot loop has one stage; give it num_stages(2) or more".into()));
    }
    let ring = stages * stage_bytes;
    let full = BarrierRing { offset: ring, arrivals: 1, tx_bytes: stage_bytes };
    // Each consumer warpgroup frees a stage in every program of its cluster where the producers
    // copy into all of them.
    let empty = BarrierRing { offset: ring + 8 * stages, arrivals: consumers * k.grid.multicast.map_or(1, |(_, n)| n), tx_bytes: 0 };
    // The ring starts 1024-aligned (the swizzle's period) wherever the dynamic shared memory
    // starts: up to 1024 bytes of padding ahead of it.
    let ring_bytes = 1024 + ring + 16 * stages;
    let store = staged_store(k, (m, rows), (n, cols), operands.len(), ring + 16 * stages)
        .filter(|s| 1024 + s.offset + consumers * STORE_BUFFERS * s.buffer_bytes <= target.shared_bytes_per_block);
    let shared_bytes = store.as_ref().map_or(ring_bytes, |s| 1024 + s.offset + consumers * STORE_BUFFERS * s.buffer_bytes);
    let partial_bytes = split.map_or(0, |_| rows * cols * 4);
    if shared_bytes + partial_bytes > target.shared_bytes_per_block {
        let partial = if partial_bytes > 0 { format!(" (and {partial_bytes} for the cluster's partial sums)") } else { String::new() };
        return Err(fail(format!(
            "its {stages} stages of {stage_bytes} bytes take {shared_bytes} bytes of shared memory{partial}, above the {} of {}; lower num_stages",
            target.shared_bytes_per_block, target.name
        )));
    }
    if split.is_some() && k.persistent {
        return Err(fail(format!(
            "its contraction `{}` is split over a cluster, whose programs each take one block: leave out persistent()",
            k.dim_name(l.dim)
        )));
    }
    if let (Some((d, n)), true) = (k.grid.cluster.or(k.grid.multicast), k.persistent) {
        return Err(fail(format!(
            "it is persistent (as many programs as multiprocessors, each taking blocks in turn), which need not fill whole clusters of {n} along `{}`: leave out persistent() or the cluster",
            k.dim_name(d)
        )));
    }
    // The producer warpgroup, which only copies, meets the cluster where the consumers combine
    // a split contraction's sums, after its copies: a reduction over the clustered dimension
    // anywhere else would have the consumers meet where the producer does not.
    let meetings = cluster_meetings(&k.body);
    let expected = usize::from(split.is_some());
    if meetings != expected {
        let (d, _) = k.grid.cluster.expect("a kernel that meets its cluster is clustered");
        return Err(fail(format!(
            "it combines {meetings} reductions over the clustered `{}` across the cluster, and its producer warpgroup meets the cluster {expected} time(s), for a split contraction's sums only: leave out warp_specialize() or the cluster",
            k.dim_name(d)
        )));
    }
    let split = split.map(|(block, programs)| Split { block, programs, partial_bytes });
    let roles = roles(consumers, target).map_err(&fail)?;
    let [a_op, b_op]: [StagedOperand; 2] = operands.try_into().map_err(|_| fail("it has no two operands".into()))?;
    Ok(WarpSpecialized {
        k: l.dim,
        step: l.step,
        dot,
        acc,
        swapped,
        m,
        n,
        rows,
        cols,
        operands: [a_op, b_op],
        stages,
        stage_bytes,
        full,
        empty,
        roles,
        wgmma_n: cols,
        wgmma_per_stage: l.step / 16,
        descriptors_before_wait: cols <= EARLY_DESCRIPTORS_MAX_N,
        store,
        shared_bytes,
        persistent: k.persistent,
        split,
    })
}

/// The block of the contraction and the programs per cluster where rdot loop `l` runs over this
/// program's block of a contraction split over a cluster (`block(k:B)`, `cluster(k:N)`).
fn split_of(k: &Kernel, l: &Loop) -> Option<(u32, u32)> {
    k.grid.reduces_a_cluster_share(l).then_some(())?;
    Some((k.grid.block_extent(l.dim)?, k.grid.cluster_size(l.dim)?))
}

/// The epilogue's store through shared memory of kernel `k`, whose accumulator tile is `rows`
/// along `m` by `cols` along `n`, with the staging buffers from `after` (the ring's end), or
/// `None` where the kernel does not end in one store of that whole tile into an output of axes
/// `[m, n]` (which then stores from the fragments, two columns at a time: rows of any length).
fn staged_store(k: &Kernel, (m, rows): (DimId, u32), (n, cols): (DimId, u32), map: usize, after: u32) -> Option<StagedStore> {
    let mut stores = Vec::new();
    find_stores(&k.body, &mut stores);
    let [(value, tile)] = stores[..] else { return None };
    let whole = |s: &Shape| s.0.len() == 2 && s.0.contains(&(m, rows)) && s.0.contains(&(n, cols));
    if k.output.dims != [m, n] || !whole(tile) || !whole(&k.value(value).shape) || !cols.is_multiple_of(STORE_COLS) {
        return None;
    }
    Some(StagedStore {
        value,
        map,
        boxes: vec![ROWS_PER_CONSUMER, STORE_COLS],
        chunks: cols / STORE_COLS,
        // A warp's fragments of 8 columns, 4 registers each, in column order.
        registers_per_chunk: STORE_COLS / 8 * 4,
        offset: after.next_multiple_of(1024),
        buffer_bytes: ROWS_PER_CONSUMER * ROW_BYTES,
        first_barrier: 2,
    })
}

/// The stores among `stmts`, at any depth: the value and the tile of each.
fn find_stores<'a>(stmts: &'a [Stmt], out: &mut Vec<(ValueId, &'a Shape)>) {
    for s in stmts {
        match s {
            Stmt::Store { value, tile } => out.push((*value, tile)),
            Stmt::Loop(l) => find_stores(&l.body, out),
            _ => {}
        }
    }
}

/// How one operand is staged (see the module docs): its tile's `rows` along `rows_dim`, of
/// which a stage copies `copied` where the operand is K-major.
#[allow(clippy::too_many_arguments)]
fn stage_operand(
    k: &Kernel,
    value: ValueId,
    input: usize,
    axes: Vec<DimId>,
    (rows_dim, rows, copied): (DimId, u32, u32),
    kdim: DimId,
    map: usize,
    offset: u32,
) -> Result<StagedOperand, String> {
    let name = &k.inputs[input].name;
    if axes.len() > 5 {
        return Err(format!("input `{name}` has {} axes; a tensor map takes 5 at most", axes.len()));
    }
    let last = *axes.last().ok_or_else(|| format!("input `{name}` has no axes"))?;
    let major = if last == kdim {
        Major::K
    } else if last == rows_dim {
        Major::Mn
    } else {
        return Err(format!("input `{name}`'s contiguous axis is neither `{}` nor `{}`", k.dim_name(kdim), k.dim_name(rows_dim)));
    };
    // An MN-major operand copies its whole tile, in boxes of 64 rows.
    let copied = if major == Major::K { copied } else { rows };
    if major == Major::Mn && !rows.is_multiple_of(64) {
        return Err(format!(
            "input `{name}`'s contiguous axis is the tile's `{}`, copied 64 at a time, and the tile has {rows} along it",
            k.dim_name(rows_dim)
        ));
    }
    let mut boxes = Vec::new();
    for (i, d) in axes.iter().enumerate() {
        if axes[..i].contains(d) {
            return Err(format!("input `{name}` is read along `{}` twice", k.dim_name(*d)));
        }
        let extent = if *d == kdim {
            STEP
        } else if *d == rows_dim {
            match major {
                Major::K => copied,
                Major::Mn => 64,
            }
        } else if k.grid.block_extent(*d) == Some(1) {
            1
        } else {
            return Err(format!("input `{name}`'s axis along `{}` is neither the tile's nor blocked by 1", k.dim_name(*d)));
        };
        boxes.push(extent);
    }
    let (copies, copy_bytes, desc) = match major {
        // One box of [rows, 64 k]: a 128-byte line per row, groups of 8 lines 1024 bytes apart.
        Major::K => (
            1,
            copied * ROW_BYTES,
            Descriptor { lbo: 16, sbo: 1024, k_step: 32, slice_step: 64 * ROW_BYTES, transposed: false, pieces: None },
        ),
        // Boxes of [64 k, 64 rows], one per 64 rows: a 128-byte line of rows per k.
        Major::Mn => {
            let box_bytes = STEP * ROW_BYTES;
            (
                rows / 64,
                box_bytes,
                Descriptor { lbo: box_bytes, sbo: 1024, k_step: 16 * ROW_BYTES, slice_step: box_bytes, transposed: true, pieces: None },
            )
        }
    };
    Ok(StagedOperand {
        value,
        input,
        axes,
        rows_dim,
        rows,
        copied_rows: copied,
        major,
        map,
        boxes,
        copies,
        copy_bytes,
        offset,
        desc,
        multicast: None,
    })
}

/// Operand `op` shared by the `programs` programs of a multicast along `d` (which it does not
/// vary along): its boxes cut into slices (see [`Multicast`]), or why they cannot be.
fn multicast_operand(k: &Kernel, mut op: StagedOperand, kdim: DimId, (d, programs): (DimId, u32)) -> Result<StagedOperand, String> {
    let name = &k.inputs[op.input].name;
    if op.axes.len() > 3 {
        return Err(format!("input `{name}` has {} axes; a multicast copy takes 3 at most", op.axes.len()));
    }
    let outer = if op.major == Major::K { op.rows_dim } else { kdim };
    let axis = op.axes.iter().position(|x| *x == outer).expect("an operand spans its rows and k");
    let lines = op.boxes[axis];
    let Some(extent) = multicast_slice(lines, programs) else {
        return Err(format!(
            "input `{name}`'s boxes of {lines} lines along `{}` do not cut into {programs} slices of whole groups of 8 lines for the multicast along `{}`",
            k.dim_name(outer),
            k.dim_name(d)
        ));
    };
    op.boxes[axis] = extent;
    op.multicast = Some(Multicast { programs, axis, extent, bytes: extent * ROW_BYTES });
    Ok(op)
}

/// The lines of each of `programs` programs' slice of a box of `lines` lines, where they cut
/// into whole groups of 8 lines (1024 bytes), which the 128-byte swizzle lays out as the whole
/// box would; `None` where they do not.
pub(crate) fn multicast_slice(lines: u32, programs: u32) -> Option<u32> {
    let slice = lines / programs;
    (lines.is_multiple_of(programs) && slice.is_multiple_of(8)).then_some(slice)
}

/// The rows of the first operand's tile (K-major, at the start of its stage) that a stage
/// copies: all `rows`, or fewer where the kernel's `bound` on their dimension admits fewer
/// (rounded up to whole groups of 8 lines), but no fewer than the stage's `lines_after` them
/// leave room for. `wgmma` still reads `rows` lines; those past the copied ones are the next
/// operand's, and the products of those rows lie past the bound, where nothing stores them.
fn copied_rows(k: &Kernel, rows_dim: DimId, rows: u32, lines_after: u32) -> u32 {
    let admitted = k.bound(rows_dim).map_or(rows, |b| (b.min(rows as u64) as u32).next_multiple_of(8));
    admitted.max(rows.saturating_sub(lines_after))
}

/// Registers per role: the producer keeps [`PRODUCER_REGISTERS`] and the consumers share what
/// it gives back ([`Roles::pool`]), in multiples of 8 as `setmaxnreg` takes them.
fn roles(consumers: u32, target: &Target) -> Result<Roles, String> {
    roles_with(consumers, PRODUCER_REGISTERS, target)
}

/// [`roles`] with the producer keeping `producer_registers`.
fn roles_with(consumers: u32, producer_registers: u32, target: &Target) -> Result<Roles, String> {
    let threads = WARPGROUP * (consumers + 1);
    let cap = target.max_registers_per_thread / 8 * 8;
    let entry_registers = (target.registers_per_sm / threads / 8 * 8).min(cap);
    let shared = (threads * entry_registers).saturating_sub(WARPGROUP * producer_registers);
    let consumer_registers = (shared / (WARPGROUP * consumers) / 8 * 8).min(256).min(cap);
    if consumer_registers < entry_registers {
        return Err(format!("its {consumers} compute warpgroups leave them fewer registers than they start with"));
    }
    // 0 is the program's barrier, 1 the consumers', 2.. one per consumer warpgroup.
    let producer_barrier = 2 + consumers;
    Ok(Roles { consumers, producer_registers, consumer_registers, entry_registers, producer_barrier })
}

/// The reduction loops that compute a dot, with whether every loop around them runs once (a
/// block loop over a block no wider than its step).
fn find_rdot_loops<'a>(k: &Kernel, stmts: &'a [Stmt], enclosed_ok: bool, out: &mut Vec<(&'a Loop, bool)>) {
    for s in stmts {
        let Stmt::Loop(l) = s else { continue };
        let has_dot = l.body.iter().any(|s| matches!(s, Stmt::Let { op: Op::Dot { .. }, .. }));
        if (l.kind == LoopKind::Reduction || split_of(k, l).is_some()) && has_dot {
            out.push((l, enclosed_ok));
        }
        let once = l.kind == LoopKind::Block && l.steps == Steps::All && k.grid.block_extent(l.dim).is_some_and(|b| b <= l.step);
        find_rdot_loops(k, &l.body, enclosed_ok && once, out);
    }
}

/// The meetings of the cluster among `stmts`, at any depth ([`Op::ClusterReduce`] and
/// [`Op::ClusterPaired`], each a meeting): as written, not times the trips of loops around them.
pub fn cluster_meetings(stmts: &[Stmt]) -> usize {
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Let { op: Op::ClusterReduce { .. } | Op::ClusterPaired { .. }, .. } => 1,
            Stmt::Loop(l) => cluster_meetings(&l.body),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// For one to three consumer warpgroups and every producer budget `setmaxnreg` takes, the
    /// consumers ask for no more than the program starts with less what the producer keeps
    /// (else `setmaxnreg.inc` would wait forever); the library's budget gives two consumers 208.
    #[test]
    fn roles_take_no_more_registers_than_the_program_starts_with() {
        let t = Target::SM90A;
        for consumers in 1..=3 {
            for producer in (24..=256).step_by(8) {
                let Ok(r) = roles_with(consumers, producer, &t) else { continue };
                assert!(r.fit_the_pool() && r.pool() <= t.registers_per_sm, "{consumers} consumers, producer {producer}: {r:?}");
                assert!(r.consumer_registers.is_multiple_of(8) && r.consumer_registers >= r.entry_registers, "{r:?}");
            }
        }
        // With 32 for the producer, the multiprocessor's 65,536 less the producer's would give two
        // consumers 240; the program starts with 384 x 168 and so has 232 for them.
        assert_eq!(roles_with(2, 32, &t).map(|r| r.consumer_registers), Ok(232));
        assert_eq!(roles(2, &t).map(|r| (r.entry_registers, r.consumer_registers)), Ok((168, 208)));
        assert_eq!(roles(1, &t).map(|r| (r.entry_registers, r.consumer_registers)), Ok((248, 248)));
    }

    /// The plan of `mm`'s schedule `sched` after the matmul `mm[x, y] = rdot(A, B, k) * extra`.
    fn planned(extra: &str, defs: &str, sched: &str) -> Result<WarpSpecialized, PlanError> {
        let src = format!(
            "Func t, mm; In A, B, C; Var x, y, z; RVar k;\n{defs}mm[x, y] = rdot(A[x, k], B[k, y], k){extra};\n{sched}mm.num_warps(4); mm.num_stages(4); mm.warp_specialize(); mm.dtypes(f16); mm.compile();"
        );
        let p = dt_core::compile_spec(&src).unwrap_or_else(|d| panic!("{src}: {d:?}"));
        let k = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
        plan_warp_specialized(&k, DType::F16, &Target::SM90A)
    }

    /// The producer warpgroup meets the cluster once, where the consumers add a split
    /// contraction's sums, and after all its copies: a kernel whose consumers would meet it
    /// more often (another reduction over the split contraction, fused in) or that need not
    /// fill its clusters (persistent) is refused, saying why; the split matmul alone plans.
    #[test]
    fn warp_specialized_kernels_meet_their_cluster_as_the_producer_does() {
        let split = "mm.block(x:64, y:64, k:2048); mm.tensorize(x:64, y:64, k:64); mm.cluster(k:2);\n";
        assert!(planned("", "", split).is_ok_and(|w| w.split.is_some()));
        let t = "t[x] = rsum(rmax(C[x, z, k], k), z);\n";
        let fused = "mm.block(x:64, y:64, k:2048); mm.tensorize(x:64, y:64, k:64, z:4); mm.cluster(k:2);\nt.fuse_at(mm, x);\n";
        let e = planned(" * t[x]", t, fused).expect_err("two meetings");
        assert!(e.to_string().contains("combines 2 reductions over the clustered `k`"), "{e}");
        let persistent = "mm.block(x:64, y:128); mm.tensorize(x:64, y:128, k:64); mm.cluster(y:8); mm.persistent();\n";
        let e = planned("", "", persistent).expect_err("persistent clusters");
        assert!(e.to_string().contains("need not fill whole clusters of 8 along `y`"), "{e}");
    }

    /// A tile of fewer rows than its consumer warpgroups compute, whose columns they cover, runs
    /// swapped: B's columns are `wgmma`'s M (MN-major, in boxes of 64) and A's rows its N
    /// (K-major, 16 lines a stage), so that the products stop at the tile's rows; an operand that
    /// would then be MN-major with fewer than 64 rows is refused, saying why.
    #[test]
    fn tiles_of_fewer_rows_than_their_warpgroups_run_swapped() {
        let w = planned("", "", "mm.bound(x:16); mm.block(x:16, y:64); mm.tensorize(x:16, y:64, k:64);\n").expect("plans");
        let [a, b] = &w.operands;
        assert_eq!((w.swapped, w.rows, w.cols, w.wgmma_n), (true, 64, 16, 16));
        assert_eq!((a.input, a.major, a.rows, a.copies), (1, Major::Mn, 64, 1));
        assert_eq!((b.input, b.major, b.rows, b.boxes.clone()), (0, Major::K, 16, vec![16, 64]));
        assert_eq!(w.stage_bytes, 8192 + 2048);
        // With 64 rows the tile is not swapped.
        let straight = planned("", "", "mm.block(x:64, y:64); mm.tensorize(x:64, y:64, k:64);\n").expect("plans");
        assert_eq!((straight.swapped, straight.operands[0].input, straight.wgmma_n), (false, 0, 64));
        // A given transposed (At[k, x]) would be an MN-major operand of 16 rows.
        let src = "Func mm; In At, B; Var x, y; RVar k;\nmm[x, y] = rdot(At[k, x], B[k, y], k);\nmm.block(x:16, y:64); mm.tensorize(x:16, y:64, k:64); mm.num_warps(4); mm.num_stages(4); mm.warp_specialize(); mm.dtypes(f16); mm.compile();";
        let p = dt_core::compile_spec(src).unwrap_or_else(|d| panic!("{d:?}"));
        let k = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
        let e = plan_warp_specialized(&k, DType::F16, &Target::SM90A).expect_err("16 MN-major rows");
        assert!(e.to_string().contains("copied 64 at a time, and the tile has 16 along it"), "{e}");
    }

    /// A multicast shares the operand that does not vary along its dimension: that operand's
    /// box is cut into one slice per program of the cluster, along its outer axis (A's rows,
    /// MN-major B's lines of `k`), each whole groups of 8 lines; every consumer warpgroup of the
    /// cluster frees each stage; slices of fewer than 8 lines are refused, saying why.
    #[test]
    fn multicast_slices_the_operand_its_dimension_does_not_vary() {
        let along_y = planned("", "", "mm.block(x:64, y:128); mm.tensorize(x:64, y:128, k:64); mm.multicast(y:2);\n").expect("plans");
        let [a, b] = &along_y.operands;
        assert_eq!(a.multicast, Some(Multicast { programs: 2, axis: 0, extent: 32, bytes: 4096 }));
        assert_eq!((a.boxes.clone(), a.copy_bytes, b.multicast), (vec![32, 64], 8192, None));
        assert_eq!(along_y.empty.arrivals, 2);
        let along_x =
            planned("", "", "mm.block(x:64, y:128); mm.tensorize(x:64, y:128, k:64); mm.map(x:x1/4, y, x1); mm.multicast(x:4);\n")
                .expect("plans");
        let [a, b] = &along_x.operands;
        assert_eq!(b.multicast, Some(Multicast { programs: 4, axis: 0, extent: 16, bytes: 2048 }));
        assert_eq!((b.boxes.clone(), b.copies, a.multicast), (vec![16, 64], 2, None));
        assert_eq!(along_x.empty.arrivals, 4);
        let thin = "mm.bound(x:16); mm.block(x:64, y:64); mm.tensorize(x:64, y:64, k:64); mm.multicast(y:4);\n";
        let e = planned("", "", thin).expect_err("slices of 4 lines");
        assert!(e.to_string().contains("do not cut into 4 slices of whole groups of 8 lines"), "{e}");
    }
}
