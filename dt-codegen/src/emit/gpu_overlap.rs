//! Printing a `wgmma()` ring loop whose steps overlap ([`RingBuffers::overlapped`], decided by
//! `plan::dot_rings`): each step issues its first dot (attention's `Q K^T`) and, in a second
//! group, the previous step's last dot (`P V`) from A fragments carried over in registers. Where
//! the plan says so (`RingBuffers::turns`), the two warpgroups take turns issuing a step's
//! products, so that one's softmax runs while the other's products are on the tensor cores. The
//! last dot of the last step is issued after the loop.
//!
//! The printed code waits for the first group (`wgmma.wait_group 1`), and for the second where
//! the statements next touch its accumulator. As ptxas compiles it, the first wait covers both:
//! the second group's products sit in a branch (`if (carried)`), ptxas closes a group at the
//! branch's end, and the commit after the branch adds an empty group, the one left in flight.
//! Each warpgroup's softmax therefore runs after its own `P V`. Every form that changes this
//! measured slower (decision 0031's addendum): the softmax beside its own `P V` (commit inside
//! the branch), with or without the carried registers held to the wait, and the same code with a
//! plain wait for both groups.
//!
//! [`RingBuffers::overlapped`]: crate::plan::layouts::RingBuffers::overlapped

use super::Emitter;
use crate::plan::layouts::MmaDot;
use dt_core::kir::*;

/// The C names of an overlapped loop's state.
pub(super) struct Overlap {
    /// The last dot's A fragments of the previous step, `[k16 steps][4]`.
    pub regs: String,
    /// Whether a step has run (so that its last dot is still to be issued).
    pub carried: String,
    /// The stage the previous step read.
    pub prev: String,
    /// The two warpgroups take turns issuing a step's products (`RingBuffers::turns`).
    pub turns: bool,
}

/// The C name of overlapped dot `d`'s accumulator.
pub(super) fn accumulator(d: &MmaDot) -> String {
    format!("acc{}", d.into.expect("an overlapped dot accumulates").0)
}

/// The stage before stage `rd` (a C expression) of a ring of `stages`.
fn stage_before(rd: &str, stages: u32) -> String {
    format!("{rd} == 0 ? {} : {rd} - 1", stages - 1)
}

impl Emitter<'_> {
    /// Declares the state an overlapped loop carries from step to step.
    pub(super) fn overlap_state(&mut self, last: &MmaDot) -> Overlap {
        let turns = last.ring.is_some_and(|r| r.turns);
        let o = Overlap { regs: self.fresh("carry"), carried: self.fresh("carried"), prev: self.fresh("rdp"), turns };
        self.line("/* the previous step's last dot: its A fragments, carried into this step, and whether it is still to be issued */");
        self.line(&format!("unsigned {}[{}][4];", o.regs, last.reach / 16));
        self.line(&format!("bool {} = false;", o.carried));
        if o.turns {
            self.line("if ((tid >> 7) == 1) dt_turn_pass(1); /* the first warpgroup goes first */");
        }
        o
    }

    /// The start of a step of an overlapped loop (stages `stages`, this step's `rd`): the first
    /// dot's accumulator set up (`init`) and its products issued, then the previous step's last
    /// dot issued from the carried fragments on the stage it read; waits for the first group
    /// (which, compiled, waits for both: the module's comment says why).
    pub(super) fn overlap_issue(
        &mut self,
        o: &Overlap,
        first: (ValueId, &MmaDot),
        last: &MmaDot,
        init: &Stmt,
        rd: &str,
        stages: u32,
    ) -> Result<(), super::EmitError> {
        self.line(&format!("const int {} = {};", o.prev, stage_before(rd, stages)));
        self.stmt(init)?;
        if o.turns {
            self.line("dt_turn_wait(tid >> 7); /* this warpgroup's turn */");
        }
        self.line(
            "/* this step's first dot, issued with the previous step's last one (both done at the wait below, as ptxas compiles it) */",
        );
        self.line("{");
        self.depth += 1;
        self.warpgroup_issue(first.1, &accumulator(first.1), Some(rd), None);
        self.line("dt_wgmma_commit();");
        self.depth -= 1;
        self.line("}");
        self.line(&format!("if ({}) {{", o.carried));
        self.depth += 1;
        self.warpgroup_issue(last, &accumulator(last), Some(&o.prev), Some(&o.regs));
        self.depth -= 1;
        self.line("}");
        self.line("dt_wgmma_commit();");
        if o.turns {
            self.line("dt_turn_pass(tid >> 7); /* the other warpgroup's turn */");
        }
        self.warpgroup_wait(first.1, &accumulator(first.1), 1);
        Ok(())
    }

    /// After an overlapped loop: the last step's last dot, on the stage it read.
    pub(super) fn overlap_drain(&mut self, o: &Overlap, last: &MmaDot, rd: &str, stages: u32) {
        let acc = accumulator(last);
        if o.turns {
            // Warpgroup 1 passed once more than warpgroup 0 waited (its pass before the loop).
            self.line("if ((tid >> 7) == 0) dt_turn_wait(0); /* the second warpgroup's last pass */");
        }
        self.line(&format!("if ({}) {{", o.carried));
        self.depth += 1;
        self.line("/* the last step's last dot */");
        self.warpgroup_issue(last, &acc, Some(&format!("({})", stage_before(rd, stages))), Some(&o.regs));
        self.line("dt_wgmma_commit();");
        self.warpgroup_wait(last, &acc, 0);
        self.depth -= 1;
        self.line("}");
    }
}

/// What printing an overlapped loop's body needs: its first and last dot, and the C name of the
/// registers that carry the last one's A fragments.
#[derive(Clone, Copy)]
pub(super) struct OverlapBody<'a> {
    pub first: (ValueId, &'a MmaDot),
    pub last: (ValueId, &'a MmaDot),
    pub regs: &'a str,
}

/// How a statement of an overlapped loop's body is printed.
pub(super) enum OverlapRole {
    /// Printed before the step's other statements (the first dot and its accumulator's setup).
    Issued,
    /// The first to touch the last dot's accumulator: waited for first.
    WaitsForLast,
    /// The last dot: its A fragments are packed and carried into the next step (after the wait
    /// for the previous step's, if no statement before touched its accumulator).
    Carried,
    Plain,
}

/// The role of statement `s` in an overlapped loop of dots `first` and `last`, where `touched`
/// says whether an earlier statement of the step touched `last`'s accumulator.
pub(super) fn overlap_role(s: &Stmt, first: (ValueId, &MmaDot), last: (ValueId, &MmaDot), touched: bool) -> OverlapRole {
    let acc = last.1.into;
    match s {
        Stmt::Let { value, .. } if *value == first.0 => OverlapRole::Issued,
        Stmt::Init { var, .. } if Some(*var) == first.1.into => OverlapRole::Issued,
        Stmt::Let { value, .. } if *value == last.0 => OverlapRole::Carried,
        Stmt::Let { op: Op::Var(v), .. } | Stmt::Update { var: v, .. } if Some(*v) == acc && !touched => OverlapRole::WaitsForLast,
        _ => OverlapRole::Plain,
    }
}
