//! Plan pass (older path): how each loop over the rows or chunks of a block issues its tile loads
//! ahead of its work (`num_stages`), and where the rings of loads staged in shared memory lie.
//!
//! A loop of several steps whose loads are read in 16-byte runs takes one of three forms:
//! - [`RowLoads::Staged`]: with more than two stages on CUDA, the loads of the next S - 1 steps
//!   copied by `cp.async` into a ring of S buffers in shared memory; a loop over a block of no
//!   more steps than stages, whose loads a later loop over the same block reads again, *holds*
//!   the block: a buffer per step of the block, kept until the end of the statements it is in;
//! - [`RowLoads::Registers`]: 16-bit loads one step ahead in registers;
//! - [`RowLoads::Held`]: a later loop over a held block reads its loads from that ring.
//!
//! f32 loads go ahead only into a held block: one step ahead in registers they spilled, and
//! staged in a ring they ran slower (docs/decisions/0007-loads-in-flight.md). A loop that reads a
//! held block issues its other loads at their use (docs/decisions/0011-held-blocks.md). A ring
//! that does not fit the target's shared memory ([`super::shared::staged_ring_fits`]) leaves its
//! loads in registers.

use super::layouts::{Mapping, Plan, RegLayout};
use super::WarpSpecialized;
use crate::emit::gpu::Dialect;
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;

/// A tile load issued ahead of the step that reads it.
#[derive(Clone, Debug)]
pub struct AheadLoad<'k> {
    pub value: ValueId,
    pub input: usize,
    pub axes: Vec<DimId>,
    /// The loops of one step between the pipelined loop and the load, outermost first: the load
    /// is issued at their first (only) offset.
    pub within: Vec<&'k Loop>,
}

/// The ring of a [`RowLoads::Staged`] loop.
#[derive(Clone, Debug)]
pub struct StagedRing<'k> {
    /// Every load the loop issues ahead; those that do not move with the loop once, before it.
    pub loads: Vec<AheadLoad<'k>>,
    /// The ring has a buffer per step of the loop's block and keeps it after the loop.
    pub holds: bool,
    /// Where the ring starts, in 4-byte words from the start of shared memory.
    pub offset: usize,
    /// Buffers of the ring: the stages, or the block's steps where it holds the block.
    pub buffers: usize,
    /// 4-byte words the ring takes.
    pub words: usize,
    /// For each load that moves with the loop, in order: where its buffers start in the ring (in
    /// 16-byte words) and its 16-byte runs per thread.
    pub rings: Vec<(usize, usize)>,
}

/// Where a load of a loop lies in the ring of an earlier loop that holds its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldLoad {
    /// Where the ring starts, in 4-byte words.
    pub offset: usize,
    /// Where the load's buffers start in it (16-byte words), and its runs per thread.
    pub base: usize,
    pub runs: usize,
}

/// How one loop issues its loads ahead.
#[derive(Clone, Debug)]
pub enum RowLoads<'k> {
    Staged(StagedRing<'k>),
    Registers(Vec<AheadLoad<'k>>),
    Held(Vec<(AheadLoad<'k>, HeldLoad)>),
}

/// The pass's decisions for one kernel instance: the loops that issue loads ahead (every other
/// loop issues each load at its use), and the shared memory their rings take.
#[derive(Clone, Debug, Default)]
pub struct StagedRows<'k> {
    pub loops: Vec<(&'k Loop, RowLoads<'k>)>,
    /// 4-byte words after the start of the staged rows' rings that the rings take at most.
    pub ring_words: usize,
    /// Loops whose ring of `num_stages` does not fit the shared memory, with the stages they
    /// run instead: two (16-bit loads one step ahead in registers) or one.
    pub unfitted: Vec<(&'k Loop, u32)>,
}

impl<'k> StagedRows<'k> {
    /// The form of loop `l`, if it issues loads ahead.
    pub fn of(&self, l: &Loop) -> Option<&RowLoads<'k>> {
        self.loops.iter().find(|(x, _)| std::ptr::eq(*x, l)).map(|(_, r)| r)
    }
}

/// What the pass reads of a kernel instance's other decisions.
pub(crate) struct Inputs<'a, 'k> {
    pub k: &'k Kernel,
    pub dtype: DType,
    pub dialect: Dialect,
    pub mapping: Mapping,
    pub registers: &'a Plan,
    pub ws: Option<&'a WarpSpecialized>,
    /// Where the rings start, in 4-byte words ([`super::shared::SharedLayout::staged_rings`]).
    pub base: usize,
}

/// Plans the loops of kernel `k` that issue loads ahead, in the order the printer meets them.
pub(crate) fn plan_staged_rows<'k>(inputs: &Inputs<'_, 'k>) -> StagedRows<'k> {
    let mut w = Walk { i: inputs, used: 0, held: Vec::new(), enclosing: Vec::new(), out: StagedRows::default() };
    w.stmts(&inputs.k.body);
    w.out
}

/// Prints the decisions of `rows` for kernel `k`, a line per loop.
pub(crate) fn print(k: &Kernel, rows: &StagedRows, out: &mut String) {
    use std::fmt::Write;
    let values = |loads: Vec<&AheadLoad>| {
        loads.iter().map(|p| format!("v{} ({})", p.value.0, k.inputs[p.input].name)).collect::<Vec<_>>().join(", ")
    };
    for (l, form) in &rows.loops {
        let what = match form {
            RowLoads::Staged(r) => format!(
                "{} by cp.async into a ring of {} buffers at word {} ({} bytes){}: {}",
                if r.holds { "every step of its block".to_string() } else { format!("{} steps ahead", l.stages - 1) },
                r.buffers,
                r.offset,
                r.words * 4,
                if r.holds { ", held for the loops after it" } else { "" },
                values(r.loads.iter().collect())
            ),
            RowLoads::Registers(loads) => format!("one step ahead in registers: {}", values(loads.iter().collect())),
            RowLoads::Held(held) => format!(
                "reads from the block held at word {}: {}",
                held.first().map_or(0, |(_, h)| h.offset),
                values(held.iter().map(|(p, _)| p).collect())
            ),
        };
        let unfitted = match rows.unfitted.iter().find(|(x, _)| std::ptr::eq(*x, *l)) {
            Some((_, stages)) => format!(" (num_stages({}) runs with {stages}: its ring does not fit the shared memory)", l.stages),
            None => String::new(),
        };
        let _ = writeln!(out, "  rows      loop over {} ({}): {what}{unfitted}", k.dim_name(l.dim), l.origin);
    }
    for (l, stages) in rows.unfitted.iter().filter(|(l, _)| rows.of(l).is_none()) {
        let _ = writeln!(
            out,
            "  rows      loop over {} ({}): num_stages({}) runs with {stages}: its ring does not fit the shared memory",
            k.dim_name(l.dim),
            l.origin,
            l.stages
        );
    }
}

/// A block a staged loop holds in shared memory after it.
struct HeldRing<'k> {
    dim: DimId,
    step: u32,
    offset: usize,
    tiles: Vec<HeldTile<'k>>,
}

/// A load a [`HeldRing`] holds.
struct HeldTile<'k> {
    input: usize,
    axes: Vec<DimId>,
    shape: Shape,
    /// The loops whose offsets its other axes are at (none: the program's block).
    rows: Vec<Option<&'k Loop>>,
    base: usize,
    runs: usize,
}

struct Walk<'a, 'b, 'k> {
    i: &'a Inputs<'b, 'k>,
    /// 4-byte words of the rings in use where the walk is.
    used: usize,
    held: Vec<HeldRing<'k>>,
    /// The loops around the walk's statement, outermost first.
    enclosing: Vec<&'k Loop>,
    out: StagedRows<'k>,
}

impl<'k> Walk<'_, '_, 'k> {
    /// A list of statements: what a loop in it holds stays held until its end.
    fn stmts(&mut self, stmts: &'k [Stmt]) {
        let (held, used) = (self.held.len(), self.used);
        for s in stmts {
            self.stmt(s);
        }
        self.held.truncate(held);
        self.used = used;
    }

    fn stmt(&mut self, s: &'k Stmt) {
        let Stmt::Loop(l) = s else { return };
        let k = self.i.k;
        // The warp-specialized loop prints no statements of its body; the loop of staged dots
        // prints its statements one by one.
        if self.i.ws.is_some_and(|w| w.is_its_loop(l)) {
            return;
        }
        if !self.i.registers.staged_dots(l).is_empty() {
            self.enclosing.push(l);
            for s in &l.body {
                self.stmt(s);
            }
            self.enclosing.pop();
            return;
        }
        let held = self.held_loads(l);
        let loads = if held.is_empty() { self.prefetchable(l) } else { Vec::new() };
        let holds = self.holds_block(l, &loads);
        let loads = if self.i.dtype.size_bytes() == 2 || holds { loads } else { Vec::new() };
        let own = self.ring_words(l, &loads, holds);
        let fits = super::shared::staged_ring_fits(k, &self.i.registers.target, self.i.base + self.used + own);
        if !loads.is_empty() && l.stages > 2 && self.i.dialect == Dialect::Cuda {
            if fits {
                self.staged(l, loads, holds, own);
                return;
            }
            self.out.unfitted.push((l, if self.i.dtype.size_bytes() == 2 { 2 } else { 1 }));
        }
        if !held.is_empty() {
            self.out.loops.push((l, RowLoads::Held(held)));
        } else if !loads.is_empty() && self.i.dtype.size_bytes() == 2 {
            self.out.loops.push((l, RowLoads::Registers(loads)));
        }
        self.body(l);
    }

    fn body(&mut self, l: &'k Loop) {
        self.enclosing.push(l);
        self.stmts(&l.body);
        self.enclosing.pop();
    }

    /// Loop `l` staged in a ring of `own` words after those in use; its body takes the shared
    /// memory after it, and a ring that holds its block keeps it after the loop.
    fn staged(&mut self, l: &'k Loop, loads: Vec<AheadLoad<'k>>, holds: bool, own: usize) {
        let threads = self.i.mapping.threads;
        let buffers = self.buffers(l, holds);
        let mut rings = Vec::new();
        let mut words = 0;
        for p in loads.iter().filter(|p| p.axes.contains(&l.dim)) {
            let runs = self.runs_per_thread(p);
            rings.push((words, runs));
            words += buffers * runs * threads;
        }
        let outer = self.used;
        let offset = self.i.base + outer;
        self.out.ring_words = self.out.ring_words.max(outer + own);
        let tiles: Vec<HeldTile<'k>> = if holds {
            loads
                .iter()
                .filter(|p| p.axes.contains(&l.dim))
                .zip(&rings)
                .map(|(p, (base, runs))| HeldTile {
                    input: p.input,
                    axes: p.axes.clone(),
                    shape: self.i.k.value(p.value).shape.clone(),
                    rows: self.rows_of(p, l.dim),
                    base: *base,
                    runs: *runs,
                })
                .collect()
        } else {
            Vec::new()
        };
        self.out.loops.push((l, RowLoads::Staged(StagedRing { loads, holds, offset, buffers, words: own, rings })));
        self.used = outer + own;
        self.body(l);
        self.used = outer;
        if holds {
            self.held.push(HeldRing { dim: l.dim, step: l.step, offset, tiles });
            self.used = outer + own;
        }
    }

    /// The loads of loop `l` read in 16-byte runs, at the top of its body or of single-step loops
    /// there (their offsets then known ahead: the start of their block), where `l` has stages
    /// and several steps.
    fn prefetchable(&self, l: &'k Loop) -> Vec<AheadLoad<'k>> {
        let mut out = Vec::new();
        if l.stages >= 2 && !crate::emit::at_most_one_step(self.i.k, l) {
            self.collect(&l.body, &mut Vec::new(), &mut out);
        }
        out
    }

    fn collect(&self, body: &'k [Stmt], within: &mut Vec<&'k Loop>, out: &mut Vec<AheadLoad<'k>>) {
        for s in body {
            match s {
                Stmt::Let { value, op: Op::Load { input, axes, .. } } if self.read_in_runs(*value) => {
                    out.push(AheadLoad { value: *value, input: *input, axes: axes.clone(), within: within.clone() });
                }
                Stmt::Loop(inner) if crate::emit::at_most_one_step(self.i.k, inner) => {
                    within.push(inner);
                    self.collect(&inner.body, within, out);
                    within.pop();
                }
                _ => {}
            }
        }
    }

    fn read_in_runs(&self, id: ValueId) -> bool {
        read_in_runs(self.i.k, self.i.dtype, self.i.mapping, self.i.registers, id)
    }

    /// Whether staged loop `l` holds its block: a loop over a block of several steps, but no
    /// more than its stages, that is not the partial step of the block, and whose staged loads
    /// a later loop over the same block reads again.
    fn holds_block(&self, l: &'k Loop, loads: &[AheadLoad<'k>]) -> bool {
        // A backward loop would stage from its last full step down, never its partial step.
        if !self.i.k.grid.block_fits_stages(l) || l.steps == Steps::Partial || l.backward {
            return false;
        }
        if loads.iter().any(|p| !p.within.is_empty()) {
            return false;
        }
        let Some(rest) = statements_after(&self.i.k.body, l) else { return false };
        let tile = |p: &AheadLoad| (p.input, p.axes.clone(), self.i.k.value(p.value).shape.clone());
        let moving: Vec<_> = loads.iter().filter(|p| p.axes.contains(&l.dim)).map(tile).collect();
        rest.iter().any(|s| match s {
            Stmt::Loop(later) if later.kind == LoopKind::Block && later.dim == l.dim && later.step == l.step => {
                let mut theirs = Vec::new();
                self.collect(&later.body, &mut Vec::new(), &mut theirs);
                let theirs: Vec<_> = theirs.iter().map(tile).collect();
                !moving.is_empty() && moving.iter().all(|t| theirs.contains(t))
            }
            _ => false,
        })
    }

    /// The loads of loop `l` that a staged loop before it holds: a tile of the same input, axes
    /// and shape, in the same rows, over the same block in the same steps.
    fn held_loads(&self, l: &'k Loop) -> Vec<(AheadLoad<'k>, HeldLoad)> {
        if l.kind != LoopKind::Block || crate::emit::at_most_one_step(self.i.k, l) || self.held.is_empty() {
            return Vec::new();
        }
        let mut loads = Vec::new();
        self.collect(&l.body, &mut Vec::new(), &mut loads);
        loads
            .into_iter()
            .filter(|p| p.within.is_empty())
            .filter_map(|p| {
                let shape = &self.i.k.value(p.value).shape;
                let rows = self.rows_of(&p, l.dim);
                let same_rows = |t: &HeldTile| t.rows.len() == rows.len() && t.rows.iter().zip(&rows).all(|(a, b)| same_loop(*a, *b));
                let found = self.held.iter().filter(|h| h.dim == l.dim && h.step == l.step).find_map(|h| {
                    h.tiles.iter().find(|t| t.input == p.input && t.axes == p.axes && t.shape == *shape && same_rows(t)).map(|t| HeldLoad {
                        offset: h.offset,
                        base: t.base,
                        runs: t.runs,
                    })
                });
                found.map(|h| (p, h))
            })
            .collect()
    }

    /// For each axis of load `p` but `dim`, the innermost loop around the walk over it (none:
    /// the program's block): which row of a block the load reads.
    fn rows_of(&self, p: &AheadLoad, dim: DimId) -> Vec<Option<&'k Loop>> {
        p.axes.iter().filter(|d| **d != dim).map(|d| self.enclosing.iter().rev().find(|l| l.dim == *d).copied()).collect()
    }

    /// The buffers of the ring of staged loop `l`: one per stage, or, where it `holds` its block,
    /// one per step of the block.
    fn buffers(&self, l: &Loop, holds: bool) -> usize {
        match self.i.k.grid.block_extent(l.dim) {
            Some(b) if holds => b.div_ceil(l.step) as usize,
            _ => l.stages as usize,
        }
    }

    fn runs_per_thread(&self, p: &AheadLoad) -> usize {
        runs_per_thread(self.i.k, self.i.mapping, p)
    }

    /// The 4-byte words of shared memory a ring for loop `l` takes: its buffers for each load
    /// that moves with the loop.
    fn ring_words(&self, l: &Loop, loads: &[AheadLoad], holds: bool) -> usize {
        let per_stage: usize = loads.iter().filter(|p| p.axes.contains(&l.dim)).map(|p| self.runs_per_thread(p)).sum();
        per_stage * self.i.mapping.threads * self.buffers(l, holds) * 4
    }
}

/// Whether value `id` of kernel `k` is a load read in 16-byte runs that `dtype` holds as loaded
/// (fill included): the loads a loop may issue ahead.
pub(crate) fn read_in_runs(k: &Kernel, dtype: DType, mapping: Mapping, registers: &Plan, id: ValueId) -> bool {
    let Some(Op::Load { axes, fill, .. }) = k.def_of(id) else { return false };
    let shape = &k.value(id).shape;
    registers.values[id.0 as usize] == RegLayout::Blocked
        && !registers.direct_load(id)
        && mapping.vector_run(shape, axes).is_some()
        && dtype.round(*fill) == *fill
}

/// The 16-byte runs per thread of load `p` of kernel `k`.
pub(crate) fn runs_per_thread(k: &Kernel, mapping: Mapping, p: &AheadLoad) -> usize {
    let shape = &k.value(p.value).shape;
    mapping.regs(shape.elements()) / mapping.vector_run(shape, &p.axes).unwrap_or(1)
}

fn same_loop(a: Option<&Loop>, b: Option<&Loop>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => std::ptr::eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// The statements after loop `l` in the list of statements that holds it.
pub(crate) fn statements_after<'a>(stmts: &'a [Stmt], l: &Loop) -> Option<&'a [Stmt]> {
    stmts.iter().enumerate().find_map(|(i, s)| match s {
        Stmt::Loop(x) if std::ptr::eq(x, l) => Some(&stmts[i + 1..]),
        Stmt::Loop(x) => statements_after(&x.body, l),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::verify::verify_staged_rows;

    fn kernel(step: u32, stages: u32) -> Kernel {
        let src = format!(
            "Func out; In A; Var x; RVar y; out[x] = rsum(A[x, y], y) / len(y);
            out.block(x:1); out.tensorize(x:0, y:{step}); out.num_warps(32); out.num_stages({stages});
            out.dtypes(f16); out.compile();"
        );
        let p = dt_core::compile_spec(&src).expect("checks");
        dt_core::lower::lower(&p, p.kernels[0]).expect("lowers")
    }

    /// A ring moved past the words the plan asks for, or a held block read that no loop holds,
    /// is caught.
    #[test]
    fn the_verifier_catches_a_broken_staged_rows_plan() {
        let k = kernel(8192, 4);
        let older = crate::plan::plan_older(&k, DType::F16, Dialect::Cuda, None).expect("plans");
        let base = older.shared.staged_rings;
        let mut rows = older.rows.clone();
        assert!(verify_staged_rows(&k, &older.registers.target, &rows, base).is_ok());
        let (l, RowLoads::Staged(ring)) = rows.loops[0].clone() else { panic!("a staged loop: {:?}", rows.loops) };
        let mut moved = ring.clone();
        moved.offset += 4;
        rows.loops[0] = (l, RowLoads::Staged(moved));
        assert!(verify_staged_rows(&k, &older.registers.target, &rows, base).unwrap_err().contains("lies outside"));
        let held = HeldLoad { offset: ring.offset, base: 0, runs: 1 };
        rows.loops[0] = (l, RowLoads::Held(vec![(ring.loads[0].clone(), held)]));
        assert!(verify_staged_rows(&k, &older.registers.target, &rows, base).unwrap_err().contains("no loop before it holds"));
    }
}
