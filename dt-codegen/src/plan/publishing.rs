//! Shared-memory publishing, decided per kernel instance before printing: which operands of which
//! statements the GPU emitter writes to a shared-memory slot and reads back under another shape
//! or layout (a broadcast, the input of a reduction, a dot operand), and how large each slot
//! is. The emitter's module docs (`emit/gpu.rs`) say why.

use super::layouts::{row_reduced_tile, same_layout, Mapping, Plan, RegLayout};
use dt_core::kir::*;

/// Which operands of which statements go through shared memory, and the slots they use.
#[derive(Clone, Debug)]
pub(crate) struct Publishing {
    /// (value, slot) pairs, by the statement that reads them.
    pub reads: Vec<(Reader, Vec<(ValueId, usize)>)>,
    /// Elements of each slot.
    pub slot_elements: Vec<usize>,
    /// Elements of each of the two regions of slot 1 that reductions in registers alternate
    /// between for their partials (see [`Emitter::register_reduce`]).
    pub partials: usize,
    /// Values that are an index along a dimension read only element-wise (and by updates and
    /// stores): every reader computes them from its own lanes (`offset + lane`), whatever its
    /// layout, and they take no registers.
    pub indices: Vec<(ValueId, dt_core::algo::DimId)>,
}

/// A statement that reads operands element-wise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reader {
    Let(ValueId),
    Update(VarId, ValueId),
    Store(ValueId),
}

/// Assigns a shared-memory slot to every operand read under a shape or a layout other than its
/// own.
pub(crate) fn plan_publishing(k: &Kernel, plan: &Plan, mapping: Mapping) -> Publishing {
    let mut p = Publishing { reads: Vec::new(), slot_elements: Vec::new(), partials: 0, indices: Vec::new() };
    let mut lets = Vec::new();
    let mut updates = Vec::new();
    super::layouts::collect(&k.body, &mut lets, &mut updates);
    // An index read only element-wise: every reader computes it in place, so it has no
    // registers of its own.
    let read_otherwise = |v: ValueId| {
        lets.iter().any(|(_, op)| {
            op.operands().contains(&v) && !matches!(op, Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::MaskFill { .. })
        })
    };
    p.indices = lets
        .iter()
        .filter_map(|(v, op)| match op {
            Op::Index(d) if !read_otherwise(*v) => Some((*v, *d)),
            _ => None,
        })
        .collect();
    fn walk(k: &Kernel, plan: &Plan, mapping: Mapping, stmts: &[Stmt], p: &mut Publishing) {
        let layout = |v: ValueId| plan.values[v.0 as usize];
        for s in stmts {
            // What the statement iterates over, and which operands it reads element-wise.
            let (reader, shape, iter_layout, operands): (Reader, Shape, RegLayout, Vec<ValueId>) = match s {
                Stmt::Let { value, op } => {
                    let shape = k.value(*value).shape.clone();
                    let ops = match op {
                        Op::Unary(..) | Op::MaskFill { .. } | Op::Binary(..) | Op::Select(..) => op.operands(),
                        // Reductions and dots read across threads: always published.
                        Op::Reduce { value: operand, dim, .. } => {
                            // Slot 1 receives the partial results of the threads (in registers)
                            // or of the cooperative groups (through slot 0).
                            let sv = &k.value(*operand).shape;
                            if let Some(t) = row_reduced_tile(k, plan, *operand, *dim, *value) {
                                // The warps along the columns meet in slot 1, unless the result
                                // stays in the rows' registers.
                                if !matches!(layout(*value), RegLayout::MmaRows(_)) {
                                    grow(p, 1, (t.wn * t.rows) as usize);
                                }
                                continue;
                            }
                            let in_registers = matches!(layout(*operand), RegLayout::Blocked | RegLayout::Runs(_));
                            let partials = match mapping.register_reduce(sv, *dim).filter(|_| in_registers) {
                                Some(rows) => {
                                    p.partials = p.partials.max(rows * (mapping.threads / 32));
                                    2 * p.partials
                                }
                                None => {
                                    add(p, Reader::Let(*value), k, vec![*operand]);
                                    shape.elements()
                                }
                            };
                            while p.slot_elements.len() < 2 {
                                p.slot_elements.push(0);
                            }
                            p.slot_elements[1] = p.slot_elements[1].max(partials);
                            continue;
                        }
                        Op::Dot { a, b, .. } => {
                            match plan.dot(*value) {
                                // Read by wgmma from the ring of a warp-specialized loop.
                                Some(d) if d.wgmma => {}
                                // Staged in the rings of its loop (`super::dot_rings`), but for
                                // a computed `a` the rings do not hold, staged in slot 0 at each
                                // step.
                                Some(d) if d.ring.is_some() => {
                                    if d.a_in_slot_each_step() {
                                        grow(p, 0, d.buffer_words(0));
                                    }
                                }
                                // Staged in padded lines by the dot itself.
                                Some(d) => {
                                    for (slot, words) in [d.slot_words(0), d.slot_words(1)].into_iter().enumerate() {
                                        if slot > 0 || !d.a_in_fragments {
                                            grow(p, slot, words);
                                        }
                                    }
                                }
                                None => add(p, Reader::Let(*value), k, vec![*a, *b]),
                            }
                            continue;
                        }
                        _ => vec![],
                    };
                    (Reader::Let(*value), shape, layout(*value), ops)
                }
                Stmt::Update { var, value, .. } => {
                    (Reader::Update(*var, *value), k.var(*var).clone(), plan.vars[var.0 as usize], vec![*value])
                }
                Stmt::Store { value, tile } => {
                    let l = store_layout(layout(*value), &k.value(*value).shape, tile);
                    (Reader::Store(*value), tile.clone(), l, vec![*value])
                }
                Stmt::Loop(l) => {
                    walk(k, plan, mapping, &l.body, p);
                    continue;
                }
                Stmt::Init { .. } => continue,
            };
            let cross: Vec<ValueId> = operands
                .into_iter()
                .filter(|o| {
                    let (ol, os) = (layout(*o), &k.value(*o).shape);
                    // A replicated value is in every thread's registers, whoever reads it; a
                    // value in runs, in the registers of every reader of its shape.
                    let own_runs = matches!(ol, RegLayout::Runs(_))
                        && matches!(iter_layout, RegLayout::Blocked | RegLayout::Runs(_))
                        && same_layout(os, &shape);
                    // A vector in accumulator rows, in the registers of every reader of its
                    // rows: itself, and a tile of those rows that reads it along its columns.
                    let own_rows = match (ol, iter_layout) {
                        (RegLayout::MmaRows(r), RegLayout::MmaRows(i)) => r == i && same_layout(os, &shape),
                        (RegLayout::MmaRows(r), RegLayout::Mma(t)) => t.row_tile() == Some(r),
                        _ => false,
                    };
                    ol != RegLayout::Replicated
                        && !own_runs
                        && !own_rows
                        && !p.indices.iter().any(|(v, _)| v == o)
                        && (ol != iter_layout || !same_layout(os, &shape))
                })
                .collect();
            if !cross.is_empty() {
                add(p, reader, k, cross);
            }
        }
    }
    fn grow(p: &mut Publishing, slot: usize, n: usize) {
        if p.slot_elements.len() <= slot {
            p.slot_elements.resize(slot + 1, 0);
        }
        p.slot_elements[slot] = p.slot_elements[slot].max(n);
    }
    fn add(p: &mut Publishing, reader: Reader, k: &Kernel, ops: Vec<ValueId>) {
        let mut list = Vec::new();
        for (slot, o) in ops.into_iter().enumerate() {
            grow(p, slot, k.value(o).shape.elements());
            list.push((o, slot));
        }
        p.reads.push((reader, list));
    }
    walk(k, plan, mapping, &k.body, &mut p);
    p
}

/// The layout a store of a tile of `shape` in `layout` to output tile `tile` runs in: the
/// tile's own where it is the whole tile, else blocked; a tile in runs is stored lane by lane,
/// one in accumulator rows once per row.
pub(crate) fn store_layout(layout: RegLayout, shape: &Shape, tile: &Shape) -> RegLayout {
    match layout {
        // Lanes that share a row hold the same value: stored once, blocked.
        RegLayout::Runs(_) | RegLayout::MmaRows(_) => RegLayout::Blocked,
        l if shape == tile => l,
        _ => RegLayout::Blocked,
    }
}

/// Whether statement `s` (not a loop) of kernel `k` reads or writes shared memory where it is
/// printed: operands read through slots, a reduction or dot through slots, a row reduction of
/// an accumulator tile whose warps meet in shared memory.
pub(crate) fn uses_shared_memory(k: &Kernel, plan: &Plan, publishing: &Publishing, mapping: Mapping, s: &Stmt) -> bool {
    let reader = match s {
        Stmt::Let { value, .. } => Some(Reader::Let(*value)),
        Stmt::Update { var, value, .. } => Some(Reader::Update(*var, *value)),
        Stmt::Store { value, .. } => Some(Reader::Store(*value)),
        _ => None,
    };
    if reader.is_some_and(|r| publishing.reads.iter().any(|(x, slots)| *x == r && !slots.is_empty())) {
        return true;
    }
    match s {
        Stmt::Let { value: id, op: Op::Reduce { value, dim, .. } } => match super::layouts::row_reduced_tile(k, plan, *value, *dim, *id) {
            Some(t) => !matches!(plan.values[id.0 as usize], RegLayout::MmaRows(_)) && t.wn > 1,
            None => !plan.reduces_in_registers(k, mapping, *value, *dim),
        },
        Stmt::Let { op: Op::Dot { .. }, .. } => true,
        _ => false,
    }
}
