//! A held row's output, printed run by run.
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
//! stays loaded as it was). A segment holds at least one such load: without one there is nothing
//! to interleave.
//!
//! Only kernels with `max_registers` are printed so: without a cap, ptxas takes the registers,
//! and the looped f32 layernorm ran slower with its output run by run (its weight loads no
//! longer went out together; docs/decisions/0008-register-caps.md).

use super::{Emitter, Reader};
use crate::plan::layouts::same_layout;
use crate::plan::layouts::RegLayout;
use dt_core::kir::*;

/// Statements `start..=store` of a list, printed run by run: `runs` runs of `vector` registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    pub start: usize,
    pub store: usize,
    pub runs: usize,
    pub vector: usize,
}

impl Emitter<'_> {
    /// The segment that ends with statement `store` of `stmts`, if there is one.
    pub(super) fn output_segment(&self, stmts: &[Stmt], store: usize) -> Option<Segment> {
        // Only under a register cap (see the module docs and docs/language.md).
        self.k.max_registers?;
        let Stmt::Store { value, tile } = &stmts[store] else { return None };
        let out_dims = &self.k.output.dims;
        let vector = self.vector_run(tile, out_dims)?;
        let in_mapping = |v: ValueId| {
            let shape = &self.k.value(v).shape;
            self.layout(v) == RegLayout::Blocked && same_layout(shape, tile) && shape.elements() == tile.elements()
        };
        if !in_mapping(*value) {
            return None;
        }
        // Reads of each value after the store (the segment's values must have none).
        let mut later = vec![0; self.k.values.len()];
        count_uses(&stmts[store + 1..], &mut later);
        let mut start = store;
        let mut loads = 0;
        while start > 0 {
            let Stmt::Let { value: id, op } = &stmts[start - 1] else { break };
            let published = self.publishing.reads.iter().any(|(r, _)| *r == Reader::Let(*id));
            if !in_mapping(*id) || published || later[id.0 as usize] > 0 {
                break;
            }
            let ok = match op {
                // What it reads (defined before it, in the segment or not) is in the same
                // registers of the same thread, or replicated.
                Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::MaskFill { .. } => {
                    op.operands().iter().all(|o| in_mapping(*o) || self.layout(*o) == RegLayout::Replicated)
                }
                Op::Load { axes, .. } => {
                    let weight = !out_dims.iter().all(|d| axes.contains(d));
                    let in_runs =
                        self.packed(*id) || (!self.plan.direct_load(*id) && self.vector_run(&self.k.value(*id).shape, axes).is_some());
                    let ok = weight && in_runs && self.prefetched_runs(*id).is_none();
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
        let runs = self.regs(tile.elements()) / vector;
        (loads > 0 && runs > 1).then_some(Segment { start, store, runs, vector })
    }

    /// Prints segment `seg` of `stmts`: a loop over the runs, each statement restricted to the
    /// current run's registers ([`Emitter::run_window`]).
    pub(super) fn output_by_runs(&mut self, stmts: &[Stmt], seg: Segment) -> Result<(), super::EmitError> {
        self.line("/* the output run by run: each run's loads next to its arithmetic and its store */");
        self.line("#pragma unroll");
        self.line(&format!("for (int cr = 0; cr < {}; cr++) {{", seg.runs));
        self.depth += 1;
        self.run_window = Some(("cr", seg.vector));
        let done = stmts[seg.start..=seg.store].iter().try_for_each(|s| self.stmt(s));
        self.run_window = None;
        self.depth -= 1;
        self.line("}");
        done
    }
}
