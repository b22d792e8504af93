//! A held row's output, printed run by run where the plan has it so (`plan::output_runs`, which
//! says why): a loop over the 16-byte runs, each statement of the segment restricted to the
//! current run's registers.

use super::Emitter;
use crate::plan::output_runs::Segment;
use dt_core::kir::*;

impl Emitter<'_> {
    /// Prints `stmts`, the statements of segment `seg`: a loop over the runs, each statement
    /// restricted to the current run's registers ([`Emitter::run_window`]).
    pub(super) fn output_by_runs(&mut self, stmts: &[Stmt], seg: Segment) -> Result<(), super::EmitError> {
        self.line("/* the output run by run: each run's loads next to its arithmetic and its store */");
        self.line("#pragma unroll");
        self.line(&format!("for (int cr = 0; cr < {}; cr++) {{", seg.runs));
        self.depth += 1;
        self.run_window = Some(("cr", seg.vector));
        let done = stmts.iter().try_for_each(|s| self.stmt(s));
        self.run_window = None;
        self.depth -= 1;
        self.line("}");
        done
    }
}
