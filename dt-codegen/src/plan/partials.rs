//! Pass `partials`: which reductions in registers need a barrier before they write their
//! partials.
//!
//! A reduction of a tile in registers over more than one group of 32 lanes (`mapping.
//! register_reduce`) combines each group's lanes with shuffles, then writes one partial per
//! group to shared memory, waits at a barrier, and reads them all back. The partials alternate
//! between the two regions of slot 1 (`Publishing::partials` elements each): a reduction writes
//! the region the one before it did not, so the barrier between them served for that one, and
//! a barrier before its writes is needed only where the region may still be read, that is:
//! - the reduction two back wrote it and no barrier came between (its threads may still read);
//! - anything else that uses shared memory ran since the last barrier
//!   ([`super::publishing::uses_shared_memory`]; a statement of a loop's body at that, since a
//!   loop's next iteration follows its last and nothing is known at the start of each).
//!
//! The walk follows the order in which the printer prints the statements.

use super::layouts::{Mapping, Plan};
use super::publishing::{uses_shared_memory, Publishing};
use super::{BodyPrinted, WarpSpecialized};
use dt_core::kir::*;
use std::fmt::Write;

/// The pass's decisions for one kernel instance.
#[derive(Clone, Debug, Default)]
pub struct Partials {
    /// The reductions in registers that write partials, with the region of slot 1 each writes.
    pub regions: Vec<(ValueId, usize)>,
    /// Those of them that wait at a barrier before writing.
    pub barriers: Vec<ValueId>,
}

impl Partials {
    /// The region reduction `id` writes its partials to, if it writes any.
    pub fn region(&self, id: ValueId) -> Option<usize> {
        self.regions.iter().find(|(v, _)| *v == id).map(|(_, r)| *r)
    }

    /// Whether reduction `id` waits at a barrier before writing its partials.
    pub fn barrier_before(&self, id: ValueId) -> bool {
        self.barriers.contains(&id)
    }
}

/// What the pass reads of a kernel instance's other decisions.
pub(crate) struct Inputs<'a> {
    pub k: &'a Kernel,
    pub mapping: Mapping,
    pub registers: &'a Plan,
    pub publishing: &'a Publishing,
    pub ws: Option<&'a WarpSpecialized>,
}

/// Whether statement `s` is a reduction of a tile in registers, which keeps track of the
/// partials itself (whether or not it writes any).
pub(crate) fn reduces_in_registers(k: &Kernel, mapping: Mapping, registers: &Plan, s: &Stmt) -> bool {
    match s {
        Stmt::Let { op: Op::Reduce { value, dim, .. }, .. } => registers.reduces_in_registers(k, mapping, *value, *dim),
        _ => false,
    }
}

/// Places the partials of kernel `k`'s reductions in registers and the barriers before them.
pub(crate) fn plan_partials(i: &Inputs) -> Partials {
    let mut w = Walk { i, next: 0, dirty: [false, false], out: Partials::default() };
    w.stmts(&i.k.body);
    w.out
}

struct Walk<'a, 'b> {
    i: &'b Inputs<'a>,
    /// The region the next reduction writes.
    next: usize,
    /// Regions threads may still be reading: read since the last barrier, or unknown.
    dirty: [bool; 2],
    out: Partials,
}

impl Walk<'_, '_> {
    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        let i = self.i;
        let before = self.next;
        let in_registers = reduces_in_registers(i.k, i.mapping, i.registers, s);
        match s {
            Stmt::Loop(l) => {
                if super::super::emit::at_most_one_step(i.k, l) {
                    self.loop_body(l);
                } else {
                    // A loop's next iteration follows its last: nothing is known at the start of
                    // each, nor after it.
                    self.dirty = [true, true];
                    self.loop_body(l);
                    self.dirty = [true, true];
                    self.next = before;
                }
            }
            // One group of 32 lanes: the shuffles leave every lane the result, no partials.
            Stmt::Let { .. } if in_registers && i.mapping.threads / 32 <= 1 => {}
            Stmt::Let { value, .. } if in_registers => {
                let region = self.next;
                if self.dirty[region] {
                    self.out.barriers.push(*value);
                }
                self.out.regions.push((*value, region));
                self.next = 1 - region;
                self.dirty = [false, false];
                self.dirty[region] = true;
            }
            _ if uses_shared_memory(i.k, i.registers, i.publishing, i.mapping, s) => self.dirty = [true, true],
            _ => {}
        }
    }

    /// The statements of loop `l`'s body that the printer prints: none of the warp-specialized
    /// loop's.
    fn loop_body(&mut self, l: &Loop) {
        if BodyPrinted::of(l, self.i.registers, self.i.ws) != BodyPrinted::Not {
            self.stmts(&l.body);
        }
    }
}

/// Prints the decisions of `partials`, a line where any reduction writes partials.
pub(crate) fn print(partials: &Partials, out: &mut String) {
    if partials.regions.is_empty() {
        return;
    }
    let each: Vec<String> = partials
        .regions
        .iter()
        .map(|(v, r)| format!("%{} in region {r}{}", v.0, if partials.barrier_before(*v) { " after a barrier" } else { "" }))
        .collect();
    let _ = writeln!(out, "  partials  {}", each.join(", "));
}

#[cfg(test)]
mod tests {
    use crate::emit::gpu::Dialect;
    use dt_core::kir::ValueId;
    use dt_core::DType;

    fn partials_of(kernel: &str, dtype: DType) -> super::Partials {
        let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../dt-kernels/specs/layernorm.dt")).expect("spec");
        let p = dt_core::compile_spec(&src).expect("checks");
        let kernels = dt_core::lower::lower_all(&p).expect("lowers");
        let k = kernels.iter().find(|k| k.name == kernel).expect("the class");
        crate::plan::plan_older(k, dtype, Dialect::Cuda, None).expect("plans").partials
    }

    /// Layernorm's two statistics reduce in registers over the warps of a program: the second
    /// writes the other region, so no barrier comes between them. Where the program runs its
    /// rows in a loop of several steps (the 16-bit class of two rows, pipelined), the first of
    /// each row waits, as the last row's second may still be read; where it runs one row,
    /// nothing came before the first.
    #[test]
    fn consecutive_reductions_alternate_regions_and_a_loop_step_starts_with_a_barrier() {
        let one_row = partials_of("layernorm_1k", DType::F32);
        assert_eq!(one_row.regions, vec![(ValueId(2), 0), (ValueId(14), 1)]);
        assert!(one_row.barriers.is_empty(), "{one_row:?}");

        let rows = partials_of("layernorm_1k_16bit", DType::F16);
        let regions: Vec<usize> = rows.regions.iter().map(|(_, r)| *r).collect();
        assert_eq!(regions, vec![0, 1, 0, 1], "{rows:?}");
        assert_eq!(rows.barriers, vec![rows.regions[0].0, rows.regions[2].0], "the first of each loop's step waits");
    }
}
