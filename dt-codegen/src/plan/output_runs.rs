//! Pass `output_runs`: which statements of a capped kernel's output are printed run by run.
//!
//! Statement by statement, the element-wise work that ends in a store is printed as one loop
//! per statement over all the registers of the tile. Where that work loads per-column inputs
//! (layernorm's weight and bias) while the row is held in registers, ptxas then issues every
//! run's loads before any arithmetic: at 32 elements per thread that is 32 more registers while
//! the row's 32 values are live, and under `max_registers(64)` a row of 16384 per program of 16
//! warps spilled 288 to 344 bytes. Printed once per 16-byte run instead (each run's loads next to
//! its arithmetic and its store, in a loop over the runs), and with the program's one row printed
//! as a block (`emit::single_step_header`; either alone still spilled 116 to 244 bytes), the same
//! kernels take 56 to 63 registers and spill nothing.
//!
//! The statements printed so are a [`Segment`]: the store of a blocked tile in 16-byte runs and
//! the statements right before it that only it reads, each element-wise in the tile's own
//! mapping (what they read is in the same registers of the same thread, or replicated) or a load
//! of an input that is not indexed along every dimension of the output (a weight; the row itself
//! stays loaded as it was) that no enclosing loop issued ahead. A segment holds at least one
//! such load: without one there is nothing to interleave.
//!
//! Only kernels with `max_registers` are printed so: without a cap, ptxas takes the registers,
//! and the looped f32 layernorm ran slower with its output run by run (its weight loads no
//! longer went out together; docs/decisions/0008-register-caps.md).

use super::layouts::{same_layout, Mapping, Plan, RegLayout};
use super::publishing::{Publishing, Reader};
use super::staged_rows::{read_in_runs, RowLoads, StagedRows};
use super::{BodyPrinted, WarpSpecialized};
use dt_core::kir::*;
use dt_core::DType;
use std::fmt::Write;

/// Statements `start..=store` of a statement list, printed run by run: `runs` runs of `vector`
/// registers.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'k> {
    /// The segment's first statement and its store, in the kernel's body.
    pub first: &'k Stmt,
    pub store: &'k Stmt,
    /// Statements in the segment.
    pub len: usize,
    pub runs: usize,
    pub vector: usize,
}

/// The pass's decisions for one kernel instance.
#[derive(Clone, Debug, Default)]
pub struct OutputRuns<'k> {
    pub segments: Vec<Segment<'k>>,
}

impl<'k> OutputRuns<'k> {
    /// The segment whose first statement is `s`, if there is one.
    pub fn starting_at(&self, s: &Stmt) -> Option<Segment<'k>> {
        self.segments.iter().find(|g| std::ptr::eq(g.first, s)).copied()
    }
}

/// What the pass reads of a kernel instance's other decisions.
pub(crate) struct Inputs<'a, 'k> {
    pub k: &'k Kernel,
    pub dtype: DType,
    pub mapping: Mapping,
    pub registers: &'a Plan,
    pub publishing: &'a Publishing,
    pub rows: &'a StagedRows<'k>,
    pub ws: Option<&'a WarpSpecialized>,
}

/// Finds the segments of kernel `k`'s statement lists that the printer prints as lists (its
/// body and the bodies of its loops, but those of loops of staged dots, which it prints
/// statement by statement, and the warp-specialized loop, whose body it does not print).
pub(crate) fn plan_output_runs<'k>(i: &Inputs<'_, 'k>) -> OutputRuns<'k> {
    let mut out = OutputRuns::default();
    // Only under a register cap (see the module docs).
    if i.k.max_registers.is_some() {
        walk(i, &i.k.body, true, &mut Vec::new(), &mut out);
    }
    out
}

/// Looks for segments in `stmts` (where `as_list`) and in the loops in it; `ahead` holds the
/// loads the enclosing loops issue ahead.
fn walk<'k>(i: &Inputs<'_, 'k>, stmts: &'k [Stmt], as_list: bool, ahead: &mut Vec<ValueId>, out: &mut OutputRuns<'k>) {
    if as_list {
        out.segments.extend((0..stmts.len()).filter_map(|j| segment(i, stmts, j, ahead)));
    }
    for s in stmts {
        let Stmt::Loop(l) = s else { continue };
        let printed = BodyPrinted::of(l, i.registers, i.ws);
        if printed == BodyPrinted::Not {
            continue;
        }
        let depth = ahead.len();
        ahead.extend(loads_ahead(i.rows.of(l)));
        walk(i, &l.body, printed == BodyPrinted::AsList, ahead, out);
        ahead.truncate(depth);
    }
}

/// The loads a loop of staged rows reads from registers it filled ahead, or from its ring.
fn loads_ahead(rows: Option<&RowLoads>) -> Vec<ValueId> {
    match rows {
        Some(RowLoads::Staged(ring)) => ring.loads.iter().map(|p| p.value).collect(),
        Some(RowLoads::Registers(loads)) => loads.iter().map(|p| p.value).collect(),
        Some(RowLoads::Held(held)) => held.iter().map(|(p, _)| p.value).collect(),
        None => Vec::new(),
    }
}

/// The segment that ends with statement `store` of `stmts`, if there is one.
fn segment<'k>(i: &Inputs<'_, 'k>, stmts: &'k [Stmt], store: usize, ahead: &[ValueId]) -> Option<Segment<'k>> {
    let (k, registers) = (i.k, i.registers);
    let Stmt::Store { value, tile } = &stmts[store] else { return None };
    let out_dims = &k.output.dims;
    let vector = i.mapping.vector_run(tile, out_dims)?;
    let layout = |v: ValueId| registers.values[v.0 as usize];
    let in_mapping = |v: ValueId| {
        let shape = &k.value(v).shape;
        layout(v) == RegLayout::Blocked && same_layout(shape, tile) && shape.elements() == tile.elements()
    };
    if !in_mapping(*value) {
        return None;
    }
    // Reads of each value after the store (the segment's values must have none).
    let mut later = vec![0; k.values.len()];
    count_uses(&stmts[store + 1..], &mut later);
    let mut start = store;
    let mut loads = 0;
    while start > 0 {
        let Stmt::Let { value: id, op } = &stmts[start - 1] else { break };
        let published = i.publishing.reads.iter().any(|(r, _)| *r == Reader::Let(*id));
        if !in_mapping(*id) || published || later[id.0 as usize] > 0 {
            break;
        }
        let ok = match op {
            // What it reads (defined before it, in the segment or not) is in the same
            // registers of the same thread, or replicated.
            Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::MaskFill { .. } => {
                op.operands().iter().all(|o| in_mapping(*o) || layout(*o) == RegLayout::Replicated)
            }
            Op::Load { axes, .. } => {
                let weight = !out_dims.iter().all(|d| axes.contains(d));
                let packed = i.dtype.size_bytes() == 2 && read_in_runs(k, i.dtype, i.mapping, registers, *id);
                let in_runs = packed || (!registers.direct_load(*id) && i.mapping.vector_run(&k.value(*id).shape, axes).is_some());
                let ok = weight && in_runs && !ahead.contains(id);
                loads += usize::from(ok);
                ok
            }
            _ => false,
        };
        if !ok {
            break;
        }
        start -= 1;
    }
    let runs = i.mapping.regs(tile.elements()) / vector;
    (loads > 0 && runs > 1).then_some(Segment { first: &stmts[start], store: &stmts[store], len: store + 1 - start, runs, vector })
}

/// Prints the segments of `runs`, a line each: the values of the statements printed run by run.
pub(crate) fn print(runs: &OutputRuns, out: &mut String) {
    for g in &runs.segments {
        let Stmt::Store { value, .. } = g.store else { continue };
        let _ = writeln!(
            out,
            "  output    the store of %{} and the {} statements before it, by {} runs of {}",
            value.0,
            g.len - 1,
            g.runs,
            g.vector
        );
    }
}
