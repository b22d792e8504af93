//! Pass `cluster_waits`: where a clustered kernel waits on the cluster barrier.
//!
//! At each meeting of a cluster reduction (a reduction over the programs of a cluster, or one
//! meeting for a pair of row statistics, `Op::ClusterPaired`), every program writes its partial
//! to a buffer of its own, meets the others (`dt_cluster_sync`), reads theirs, and then only
//! *arrives* at the cluster barrier (`dt_cluster_arrive`): no program may overwrite its buffer,
//! or exit, before every other program has read it, but none needs to wait for that until then.
//! The matching `dt_cluster_wait` comes at the first of these points after the arrival:
//! - before the next meeting (which writes a buffer again);
//! - before a loop that has meetings of its own (a wait inside would come once per iteration);
//! - at the end of a loop's body, for a meeting inside it (an arrival and its wait in one
//!   iteration of one loop);
//! - when the program ends.
//!
//! A loop without meetings does not wait for an arrival from before it: the wait comes after
//! the loop, so that the loop's work (a clustered row's output) overlaps the other programs'
//! reading of this one's buffer.
//!
//! [`verify`] checks the result: at every meeting, loop with meetings, end of a loop body and
//! the end of the program, no arrival is left without its wait.

use super::layouts::Plan;
use super::{BodyPrinted, WarpSpecialized};
use dt_core::kir::*;
use std::fmt::Write;

/// A point of the printed kernel where it may wait on the cluster barrier.
#[derive(Clone, Copy, Debug)]
pub enum WaitPoint<'k> {
    /// Before the meeting printed at the statement defining this value.
    Meeting(ValueId),
    /// Before this loop.
    BeforeLoop(&'k Loop),
    /// At the end of this loop's body.
    EndOfBody(&'k Loop),
    /// When the program ends (each program's block, in a warp-specialized kernel).
    Exit,
}

impl WaitPoint<'_> {
    fn same(&self, other: &WaitPoint) -> bool {
        match (self, other) {
            (WaitPoint::Meeting(a), WaitPoint::Meeting(b)) => a == b,
            (WaitPoint::BeforeLoop(a), WaitPoint::BeforeLoop(b)) | (WaitPoint::EndOfBody(a), WaitPoint::EndOfBody(b)) => {
                std::ptr::eq(*a, *b)
            }
            (WaitPoint::Exit, WaitPoint::Exit) => true,
            _ => false,
        }
    }
}

/// The pass's decisions for one kernel instance.
#[derive(Clone, Debug, Default)]
pub struct ClusterWaits<'k> {
    /// The meetings, by the value whose statement prints each, in the order printed.
    pub meetings: Vec<ValueId>,
    /// The paired statistics that meet at the cluster reduction right before them: (that
    /// reduction, the paired statistic).
    pub paired: Vec<(ValueId, ValueId)>,
    /// Where the kernel waits on the cluster barrier.
    pub waits: Vec<WaitPoint<'k>>,
}

impl ClusterWaits<'_> {
    /// The paired statistic that meets at cluster reduction `met`, if one does.
    pub fn paired_at(&self, met: ValueId) -> Option<ValueId> {
        self.paired.iter().find(|(m, _)| *m == met).map(|(_, p)| *p)
    }

    /// Whether paired statistic `id` meets at the cluster reduction before it.
    pub fn meets_before(&self, id: ValueId) -> bool {
        self.paired.iter().any(|(_, p)| *p == id)
    }

    /// Whether the kernel waits at `point`.
    pub fn waits_at(&self, point: WaitPoint) -> bool {
        self.waits.iter().any(|w| w.same(&point))
    }
}

/// The meetings of the statement list `stmts`, where it is printed as a list: each cluster
/// reduction, and each paired statistic but one that follows the reduction of its first (their
/// meeting is one, printed at the reduction); and those pairs, (reduction, paired statistic).
fn meetings_of(stmts: &[Stmt]) -> (Vec<ValueId>, Vec<(ValueId, ValueId)>) {
    let (mut meetings, mut paired) = (Vec::new(), Vec::new());
    for (i, s) in stmts.iter().enumerate() {
        match s {
            Stmt::Let { value, op: Op::ClusterReduce { .. } } => meetings.push(*value),
            Stmt::Let { value, op: Op::ClusterPaired { first, .. } } => match i.checked_sub(1).map(|j| &stmts[j]) {
                Some(Stmt::Let { value: met, op: Op::ClusterReduce { value: v, .. } }) if v == first => paired.push((*met, *value)),
                _ => meetings.push(*value),
            },
            _ => {}
        }
    }
    (meetings, paired)
}

/// Whether `stmts` meet the cluster, nested loops included.
pub(crate) fn reduces_over_the_cluster(stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Let { op: Op::ClusterReduce { .. } | Op::ClusterPaired { .. }, .. } => true,
        Stmt::Loop(l) => reduces_over_the_cluster(&l.body),
        _ => false,
    })
}

/// Places the waits of kernel `k`, in the order the printer prints its statements: `registers`
/// says which loops run staged dots, `ws` which loop is a warp-specialized kernel's.
pub(crate) fn plan_cluster_waits<'k>(k: &'k Kernel, registers: &Plan, ws: Option<&WarpSpecialized>) -> ClusterWaits<'k> {
    let mut w = Walk { registers, ws, arrived: false, out: ClusterWaits::default() };
    if k.grid.cluster.is_some() {
        w.stmts(&k.body, BodyPrinted::AsList);
        w.settle(WaitPoint::Exit);
    }
    w.out
}

struct Walk<'a, 'k> {
    registers: &'a Plan,
    ws: Option<&'a WarpSpecialized>,
    /// Whether the program has arrived at the cluster barrier and not waited on it since.
    arrived: bool,
    out: ClusterWaits<'k>,
}

impl<'k> Walk<'_, 'k> {
    fn settle(&mut self, at: WaitPoint<'k>) {
        if std::mem::take(&mut self.arrived) {
            self.out.waits.push(at);
        }
    }

    fn stmts(&mut self, stmts: &'k [Stmt], printed: BodyPrinted) {
        let meetings = match printed {
            BodyPrinted::AsList => {
                let (meetings, paired) = meetings_of(stmts);
                self.out.paired.extend(paired);
                meetings
            }
            BodyPrinted::OneByOne | BodyPrinted::Not => Vec::new(),
        };
        for s in stmts {
            match s {
                Stmt::Let { value, op: Op::ClusterReduce { .. } | Op::ClusterPaired { .. } } => {
                    let meets = match printed {
                        BodyPrinted::AsList => meetings.contains(value),
                        BodyPrinted::OneByOne | BodyPrinted::Not => true,
                    };
                    if meets {
                        self.settle(WaitPoint::Meeting(*value));
                        self.arrived = true;
                        self.out.meetings.push(*value);
                    }
                }
                Stmt::Loop(l) => self.loop_stmt(l),
                _ => {}
            }
        }
    }

    fn loop_stmt(&mut self, l: &'k Loop) {
        // An arrival from before a loop without meetings is waited on after it.
        let pending = !reduces_over_the_cluster(&l.body) && std::mem::take(&mut self.arrived);
        self.settle(WaitPoint::BeforeLoop(l));
        match BodyPrinted::of(l, self.registers, self.ws) {
            BodyPrinted::Not => {}
            BodyPrinted::OneByOne => self.stmts(&l.body, BodyPrinted::OneByOne),
            BodyPrinted::AsList => {
                self.stmts(&l.body, BodyPrinted::AsList);
                self.settle(WaitPoint::EndOfBody(l));
            }
        }
        self.arrived |= pending;
    }
}

/// Checks `waits` against kernel `k`: walking its statements in print order with the waits
/// given, no meeting, loop with meetings, end of a loop's body or end of the program comes while
/// an arrival is still outstanding, and every meeting is one of `waits.meetings`.
pub(crate) fn verify(k: &Kernel, registers: &Plan, ws: Option<&WarpSpecialized>, waits: &ClusterWaits) -> Result<(), String> {
    struct Check<'a, 'p> {
        registers: &'a Plan,
        ws: Option<&'a WarpSpecialized>,
        waits: &'a ClusterWaits<'p>,
        arrived: Option<ValueId>,
    }
    impl Check<'_, '_> {
        fn wait(&mut self, at: WaitPoint) {
            if self.waits.waits_at(at) {
                self.arrived = None;
            }
        }
        fn settled(&self, at: &str) -> Result<(), String> {
            match self.arrived {
                Some(v) => Err(format!("the arrival of the meeting of %{} is not waited on before {at}", v.0)),
                None => Ok(()),
            }
        }
        fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), String> {
            for s in stmts {
                match s {
                    Stmt::Let { value, .. } if self.waits.meetings.contains(value) => {
                        self.wait(WaitPoint::Meeting(*value));
                        self.settled(&format!("the meeting of %{}", value.0))?;
                        self.arrived = Some(*value);
                    }
                    Stmt::Loop(l) => {
                        let meets = reduces_over_the_cluster(&l.body);
                        let before = if meets { None } else { self.arrived.take() };
                        self.wait(WaitPoint::BeforeLoop(l));
                        if meets {
                            self.settled(&format!("the loop over {:?} that meets the cluster", l.dim))?;
                        }
                        let printed = BodyPrinted::of(l, self.registers, self.ws);
                        if printed != BodyPrinted::Not {
                            self.stmts(&l.body)?;
                        }
                        if printed == BodyPrinted::AsList {
                            self.wait(WaitPoint::EndOfBody(l));
                            self.settled(&format!("the end of the body of the loop over {:?}", l.dim))?;
                        }
                        self.arrived = self.arrived.or(before);
                    }
                    _ => {}
                }
            }
            Ok(())
        }
    }
    let mut check = Check { registers, ws, waits, arrived: None };
    check.stmts(&k.body)?;
    check.wait(WaitPoint::Exit);
    check.settled("the end of the program")?;
    let mut lets = Vec::new();
    super::layouts::collect(&k.body, &mut lets, &mut Vec::new());
    for v in &waits.meetings {
        if !lets.iter().any(|(id, op)| id == v && matches!(op, Op::ClusterReduce { .. } | Op::ClusterPaired { .. })) {
            return Err(format!("%{} is a meeting but no cluster reduction", v.0));
        }
    }
    Ok(())
}

/// Prints the waits of `waits`, a line for a clustered kernel.
pub(crate) fn print(waits: &ClusterWaits, out: &mut String) {
    if waits.meetings.is_empty() {
        return;
    }
    let points: Vec<String> = waits
        .waits
        .iter()
        .map(|w| match w {
            WaitPoint::Meeting(v) => format!("before the meeting of %{}", v.0),
            WaitPoint::BeforeLoop(l) => format!("before the loop of {}", l.origin),
            WaitPoint::EndOfBody(l) => format!("at the end of the loop of {}", l.origin),
            WaitPoint::Exit => "at the end of the program".to_string(),
        })
        .collect();
    let meetings: Vec<String> = waits
        .meetings
        .iter()
        .map(|v| match waits.paired_at(*v) {
            Some(p) => format!("%{} and %{}", v.0, p.0),
            None => format!("%{}", v.0),
        })
        .collect();
    let _ = writeln!(out, "  cluster   meetings {}; waits {}", meetings.join(", "), points.join("; "));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::gpu::Dialect;
    use dt_core::DType;

    /// Softmax's row split over a cluster of 8 (the library's class for 16-bit rows of 262144):
    /// one meeting for both statistics, waited on at the end of the row's loop; the verifier
    /// refuses the plan without that wait, or with the wait only when the program ends.
    #[test]
    fn every_arrival_is_waited_on_and_the_verifier_says_where_one_is_not() {
        let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../dt-kernels/specs/softmax.dt")).expect("spec");
        let p = dt_core::compile_spec(&src).expect("checks");
        let kernels = dt_core::lower::lower_all(&p).expect("lowers");
        let k = kernels.iter().find(|k| k.name == "softmax_256k_16bit").expect("the clustered class");
        let older = crate::plan::plan_older(k, DType::F16, Dialect::Cuda, None).expect("plans");
        let waits = &older.cluster;
        assert_eq!(waits.meetings.len(), 1, "both statistics meet once");
        assert_eq!(waits.paired.len(), 1, "{waits:?}");
        assert_eq!(waits.paired_at(waits.meetings[0]), Some(waits.paired[0].1));
        assert!(matches!(waits.waits[..], [WaitPoint::EndOfBody(_)]), "{waits:?}");
        verify(k, &older.registers, None, waits).expect("the plan is valid");

        let none = ClusterWaits { waits: Vec::new(), ..waits.clone() };
        let e = verify(k, &older.registers, None, &none).expect_err("an arrival is left");
        assert!(e.contains("is not waited on before the end of the body"), "{e}");

        // Waiting only when the program ends leaves the arrival of every row but the last.
        let late = ClusterWaits { waits: vec![WaitPoint::Exit], ..waits.clone() };
        assert!(verify(k, &older.registers, None, &late).is_err());

        // A kernel without a cluster has no meetings and no waits.
        let plain = kernels.iter().find(|k| k.name == "softmax").expect("the looped class");
        let older = crate::plan::plan_older(plain, DType::F16, Dialect::Cuda, None).expect("plans");
        assert!(older.cluster.meetings.is_empty() && older.cluster.waits.is_empty());
    }
}
