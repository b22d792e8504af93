//! Tiles in registers: the loops over the elements a thread holds under each register layout
//! (blocked, in runs, replicated, in tensor-core fragments), and the publishing of an operand
//! through shared memory for a reader of another shape or layout.

use super::*;
use crate::emit::Lanes;
use crate::plan::layouts::{self, RegLayout};
use crate::plan::publishing::Reader;

impl Emitter<'_> {
    /// Writes `v` (in registers) to shared-memory slot `s` as a row-major tile, between
    /// barriers: each thread writes the elements its layout gives it.
    pub(super) fn publish(&mut self, v: ValueId, s: usize) {
        let shape = self.k.value(v).shape.clone();
        let n = shape.elements();
        let r = self.regs(n);
        let (e, slot) = (self.mapping.element(n, "r"), self.slot(s));
        self.barrier();
        match self.layout(v) {
            RegLayout::Blocked => {
                self.line(unroll(r));
                let store = format!("{slot}[e] = v{}[r];", v.0);
                let guarded = if self.covers(n) { store } else { format!("if (e < {n}) {store}") };
                self.line(&format!("for (int r = 0; r < {r}; r++) {{ const int e = {e}; {guarded} }}"));
            }
            RegLayout::Replicated => self.line(&format!("if (tid == 0) {slot}[0] = v{}[0];", v.0)),
            // The lanes that share a row hold the same value: the first of them writes it.
            layout @ RegLayout::MmaRows(rows) => {
                let sharing = rows.isa.rows_per_lane().1;
                self.for_owned(&shape, layout, |e, _| e.line(&format!("if ((tid & {}) == 0) {slot}[e] = v{}[r];", sharing - 1, v.0)))
            }
            layout => self.for_owned(&shape, layout, |e, _| e.line(&format!("{slot}[e] = v{}[r];", v.0))),
        }
        self.barrier();
    }

    /// Publishes what statement `reader` reads across threads or layouts; returns how each
    /// operand is read.
    pub(super) fn sources(&mut self, reader: Reader, operands: &[ValueId]) -> Vec<Source> {
        let plan = self.publishing.reads.iter().find(|(r, _)| *r == reader).map(|(_, l)| l.clone()).unwrap_or_default();
        for (o, s) in &plan {
            self.publish(*o, *s);
        }
        let iter_layout = match reader {
            Reader::Let(v) => self.layout(v),
            Reader::Update(var, _) => self.plan.vars[var.0 as usize],
            Reader::Store(_) => RegLayout::Blocked,
        };
        let index = |o: &ValueId| self.publishing.indices.iter().find(|(v, _)| v == o).map(|(_, d)| *d);
        operands
            .iter()
            .map(|o| {
                // An index is never published: every reader computes it.
                if let Some(d) = index(o) {
                    return Source::Index(d);
                }
                match (plan.iter().find(|(x, _)| x == o), self.layout(*o)) {
                    (Some((_, s)), _) => Source::Shared(*s, self.k.value(*o).shape.clone()),
                    (None, RegLayout::Replicated) => Source::Replicated(format!("v{}", o.0)),
                    (None, RegLayout::Runs(n)) if iter_layout != RegLayout::Runs(n) => Source::Run(format!("v{}", o.0), n),
                    (None, RegLayout::MmaRows(_)) => match iter_layout {
                        RegLayout::Mma(t) => Source::Rows(format!("v{}", o.0), t),
                        _ => Source::Own(format!("v{}", o.0)),
                    },
                    (None, _) => Source::Own(format!("v{}", o.0)),
                }
            })
            .collect()
    }

    pub(super) fn read(&self, src: &Source, lanes: &Lanes) -> String {
        match src {
            Source::Own(name) => format!("{name}[r]"),
            Source::Run(name, n) => format!("{name}[r / {n}]"),
            Source::Replicated(name) => format!("{name}[0]"),
            Source::Shared(s, shape) => format!("{}[{}]", self.slot(*s), lanes.index(shape)),
            Source::Rows(name, t) => format!("{name}[{}]", t.row_slot("r")),
            Source::Index(d) => format!("(float)({} + {})", self.offset(*d), lanes.lane(*d)),
        }
    }

    /// Loops over the elements of `shape` this thread owns under `layout`, with the lane along
    /// each dimension decoded (only the lanes the body uses are declared); `r` is the register
    /// slot and `e` the row-major index of the element.
    pub(super) fn for_owned(&mut self, shape: &Shape, layout: RegLayout, body: impl FnOnce(&mut Self, &Lanes)) {
        match layout {
            RegLayout::Mma(t) => self.for_owned_mma(shape, t, body),
            RegLayout::MmaRows(rows) => self.for_owned_rows(shape, rows, body),
            RegLayout::Blocked => self.for_blocked(shape, unroll(self.regs(shape.elements())), body),
            RegLayout::Runs(n) => {
                let n = n as usize;
                self.for_registers(shape, unroll(self.regs(shape.elements()) / n), n, body)
            }
            RegLayout::Replicated => {
                // Every thread, its one register.
                self.line("{");
                self.depth += 1;
                self.line("const int r = 0, e = 0;");
                self.line("(void)r; (void)e;");
                self.with_lanes(shape, body);
                self.depth -= 1;
                self.line("}");
            }
        }
    }

    /// [`Self::for_owned`] for the blocked layout, the loop preceded by `pragma`.
    pub(super) fn for_blocked(&mut self, shape: &Shape, pragma: &str, body: impl FnOnce(&mut Self, &Lanes)) {
        self.for_registers(shape, pragma, 1, body);
    }

    /// [`Self::for_owned`] for a tile in runs of `n` lanes: register `r` holds the run that starts
    /// at blocked register `r * n` (`n` = 1: the blocked layout), and `e` is its first element.
    pub(super) fn for_registers(&mut self, shape: &Shape, pragma: &str, n: usize, body: impl FnOnce(&mut Self, &Lanes)) {
        let elements = shape.elements();
        let first = if n == 1 { "r".to_string() } else { format!("r * {n}") };
        let element = self.mapping.element(elements, &first);
        self.for_elements(shape, pragma, n, &element, body);
    }

    /// A loop over the elements of `shape` dealt one at a time to consecutive threads (element
    /// `e` to thread `e % threads`), whatever the mapping's runs: for a tile whose every element
    /// is a 16-byte copy, so that the copies of one warp's instruction are one contiguous run
    /// of memory (in runs of the mapping, each touched only a part of every 32-byte sector, and
    /// the instructions together fetched each sector twice).
    pub(super) fn for_spread(&mut self, shape: &Shape, pragma: &str, body: impl FnOnce(&mut Self, &Lanes)) {
        let element = format!("tid + r * {}", self.threads);
        // A window of a run's registers is the mapping's; this loop covers every element.
        let window = self.run_window.take();
        self.for_elements(shape, pragma, 1, &element, body);
        self.run_window = window;
    }

    /// The loop of [`Self::for_registers`] and [`Self::for_spread`]: register `r` of every
    /// `n` holds element `element` (a C expression of `r` and `tid`).
    fn for_elements(&mut self, shape: &Shape, pragma: &str, n: usize, element: &str, body: impl FnOnce(&mut Self, &Lanes)) {
        let elements = shape.elements();
        let r = self.regs(elements) / n;
        match self.run_window {
            Some((run, v)) if n == 1 && r.is_multiple_of(v) => {
                self.line("#pragma unroll");
                self.line(&format!("for (int r = {run} * {v}; r < {run} * {v} + {v}; r++) {{"));
            }
            _ => {
                self.line(pragma);
                self.line(&format!("for (int r = 0; r < {r}; r++) {{"));
            }
        }
        self.depth += 1;
        self.line(&format!("const int e = {element};"));
        // Where every register holds an element, no guard: a guard makes each register's
        // assignment conditional, which costs registers.
        let guard = if self.covers(elements) { "(void)e; {".to_string() } else { format!("if (e < {elements}) {{") };
        self.line(&guard);
        self.depth += 1;
        self.with_lanes(shape, body);
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }

    /// Prints `body` with the lanes of element `e` of `shape` decoded ahead of it (only the
    /// lanes the body uses are declared).
    pub(super) fn with_lanes(&mut self, shape: &Shape, body: impl FnOnce(&mut Self, &Lanes)) {
        let lanes = Lanes(shape.0.iter().map(|(d, _)| (*d, self.fresh("l"))).collect());
        let before = std::mem::take(&mut self.out);
        body(self, &lanes);
        let inner = std::mem::replace(&mut self.out, before);
        for ((d, _), (_, l)) in shape.0.iter().zip(&lanes.0) {
            if mentions(&inner, l) {
                self.line(&format!("const int {l} = {};", lane_of(shape, *d, "e")));
            }
        }
        self.out += &inner;
    }

    /// [`Self::for_owned`] for the mma accumulator layout: always unrolled, so that the fragment
    /// registers stay registers (`mma.sync` needs them so), lanes computed from the thread and
    /// the register slot.
    pub(super) fn for_owned_mma(&mut self, shape: &Shape, t: layouts::MmaTile, body: impl FnOnce(&mut Self, &Lanes)) {
        let (row, col) = t.row_col("r");
        let r = self.regs(shape.elements());
        self.for_slots(shape, r, &[(t.m, row), (t.n, col)], body);
    }

    /// [`Self::for_owned`] for a vector in accumulator rows: each of the thread's row slots.
    pub(super) fn for_owned_rows(&mut self, shape: &Shape, rows: layouts::RowTile, body: impl FnOnce(&mut Self, &Lanes)) {
        let row = rows.slot_row("r");
        self.for_slots(shape, rows.slots() as usize, &[(rows.m, row)], body);
    }

    /// An unrolled loop over `count` register slots `r` whose lane along each dimension of
    /// `lanes_of` is the C expression given (0 along any other), with `e` the row-major index.
    fn for_slots(&mut self, shape: &Shape, count: usize, lanes_of: &[(DimId, String)], body: impl FnOnce(&mut Self, &Lanes)) {
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {count}; r++) {{"));
        self.depth += 1;
        let lanes = Lanes(shape.0.iter().map(|(d, _)| (*d, self.fresh("l"))).collect());
        let before = std::mem::take(&mut self.out);
        body(self, &lanes);
        let inner = std::mem::replace(&mut self.out, before);
        let e = if mentions(&inner, "e") { format!("const int e = {};", lanes.index(shape)) } else { String::new() };
        for (d, l) in &lanes.0 {
            if mentions(&inner, l) || mentions(&e, l) {
                let v = lanes_of.iter().find(|(x, _)| x == d).map_or("0", |(_, v)| v.as_str());
                self.line(&format!("const int {l} = {v};"));
            }
        }
        if !e.is_empty() {
            self.line(&e);
        }
        self.out += &inner;
        self.depth -= 1;
        self.line("}");
    }
}
