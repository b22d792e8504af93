//! Loops whose loads run ahead of their work (`num_stages`): rows pipelined in registers, chunks
//! of a long row staged in rings of shared-memory buffers with `cp.async`, and blocks held in
//! shared memory for the loops after them.

use super::*;
use dt_core::algo::DimId;

impl Emitter<'_> {
    /// The loads of pipelined loop `l` (over the rows of a block or the chunks of a dimension:
    /// the lowering decides which) that [`Self::pipelined_rows`] issues ahead: tiles read in
    /// 16-byte runs, at the top of its body or of single-step loops there (their offsets then
    /// known ahead: the start of their block); in f32, only where the loop holds its block
    /// ([`Self::loop_stmt`] decides). The tensor-core dots pipeline their own loops.
    pub(super) fn prefetchable(&self, l: &Loop) -> Vec<Prefetch> {
        if l.stages < 2 || self.single_iteration(l) {
            return Vec::new();
        }
        let mut out = Vec::new();
        self.collect_prefetchable(&l.body, &mut Vec::new(), &mut out);
        out
    }

    pub(super) fn collect_prefetchable(&self, body: &[Stmt], at: &mut Vec<(DimId, String)>, out: &mut Vec<Prefetch>) {
        for s in body {
            match s {
                Stmt::Let { value, op: Op::Load { input, axes, .. } } if self.read_in_runs(*value) => {
                    out.push(Prefetch { value: *value, input: *input, axes: axes.clone(), at: at.clone() });
                }
                Stmt::Loop(inner) if self.single_iteration(inner) => {
                    at.push((inner.dim, format!("({})", crate::emit::LoopSteps::of(self.k, inner).first())));
                    self.collect_prefetchable(&inner.body, at, out);
                    at.pop();
                }
                _ => {}
            }
        }
    }

    /// A loop over several rows or chunks whose loads are issued one step ahead (`num_stages`):
    /// the loads of the first step before the loop, and in each step, before its work, those
    /// of the next, into registers the work then no longer needs (a double buffer of raw
    /// 16-byte words). The memory system so always has a step's loads in flight. A load that
    /// does not move with the loop (layernorm's weights) is issued once, before it.
    pub(super) fn pipelined_rows(&mut self, l: &Loop, loads: &[Prefetch]) -> Result<(), EmitError> {
        let steps = crate::emit::LoopSteps::of(self.k, l);
        let o = self.fresh("o");
        self.line(&format!("/* {}: loads one step ahead */", l.origin));
        let mut names = Vec::new();
        for p in loads {
            let shape = &self.k.value(p.value).shape;
            let runs = self.regs(shape.elements()) / self.vector_run(shape, &p.axes).unwrap_or(1);
            let (q, f) = (self.fresh("qn"), self.fresh("fn"));
            self.line(&format!("uint4 {q}[{runs}];"));
            self.line(&format!("bool {f}[{runs}];"));
            names.push((q, f, runs));
        }
        let moving = |p: &Prefetch| p.axes.contains(&l.dim);
        let issue = |e: &mut Self, at: String, only_moving: bool| {
            for (p, (q, f, _)) in loads.iter().zip(&names) {
                if only_moving && !moving(p) {
                    continue;
                }
                let shape = e.k.value(p.value).shape.clone();
                e.at_step(l.dim, at.clone(), &p.at, |e| e.issue_vector_loads(&shape, p.input, &p.axes, q, f));
            }
        };
        issue(self, format!("({})", steps.first()), false);
        self.line(&crate::emit::loop_header(self.k, l, &o));
        self.depth += 1;
        self.offsets.push((l.dim, o.clone()));
        // Inside the loop, not before it: the first step's loads above are issued even where
        // the loop has no full step.
        let full = self.enter_steps(l);
        let mut current = Vec::new();
        for (p, (q, f, runs)) in loads.iter().zip(&names) {
            if !moving(p) {
                current.push((p.value, q.clone(), f.clone()));
                continue;
            }
            let (qc, fc) = (self.fresh("q"), self.fresh("f"));
            self.line(&format!("uint4 {qc}[{runs}];"));
            self.line(&format!("bool {fc}[{runs}];"));
            self.line("#pragma unroll");
            self.line(&format!("for (int c = 0; c < {runs}; c++) {{ {qc}[c] = {q}[c]; {fc}[c] = {f}[c]; }}"));
            current.push((p.value, qc, fc));
        }
        let next = steps.next(&o);
        self.line(&format!("if ({}) {{", steps.in_range(&next)));
        self.depth += 1;
        issue(self, format!("({next})"), true);
        self.depth -= 1;
        self.line("}");
        self.prefetched.extend(current);
        self.stmts(&l.body)?;
        self.settle_cluster();
        self.prefetched.clear();
        self.full.truncate(full);
        self.offsets.pop();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// [`Self::pipelined_rows`] with `num_stages(S)`, S > 2, on CUDA: the loads of the next S - 1
    /// steps are in flight while a step is computed, held in shared memory rather than in
    /// registers. Each thread copies its own 16-byte runs there with `cp.async`
    /// (`dt_cp_async16`), one group per step, into a ring of S buffers, and reads back only its
    /// own runs, after waiting for the step's group: no barrier is needed. A run that is not one
    /// aligned 16-byte access is not staged; it is read as it is used.
    ///
    /// A loop over a block of no more steps than stages holds the block ([`HeldRing`]): its ring
    /// has a buffer per step of the block, and it stages every step of the block, also those of
    /// the loop over the block's other steps (its partial step, [`Steps`]), which then reads them
    /// there, as later loops over the block do ([`Self::held_loads`]).
    pub(super) fn staged_rows(&mut self, l: &Loop, loads: &[Prefetch], holds: bool) -> Result<(), EmitError> {
        let stages = l.stages as usize;
        let steps = crate::emit::LoopSteps::of(self.k, l);
        // Where a held block's steps are staged from: every step of the block.
        let staged = crate::emit::LoopSteps::over(self.k, l, if holds { Steps::All } else { l.steps });
        let buffers = self.ring_buffers(l, holds);
        let threads = self.threads as usize;
        let moving: Vec<&Prefetch> = loads.iter().filter(|p| p.axes.contains(&l.dim)).collect();
        // Each staged load: its ring (offset in 16-byte words) and its runs per thread.
        let mut rings = Vec::new();
        let mut words = 0usize;
        for p in &moving {
            let runs = self.runs_per_thread(p);
            rings.push((words, runs));
            words += buffers * runs * threads;
        }
        let (outer, own) = (self.ring_used, self.ring_words_for(l, loads, holds));
        self.ring_words = self.ring_words.max(outer + own);
        let ring = self.fresh("ring");
        let ahead = if holds { "the block's steps".to_string() } else { format!("{} steps ahead", stages - 1) };
        self.line(&format!("/* {}: loads {ahead}, staged in shared memory */", l.origin));
        self.line(&format!("uint4* const {ring} = (uint4*)(dt_smem + {});", self.ring_offset + outer));
        // The buffer of the step at offset `at`; `rotating` where the ring does not hold the block.
        let buffer = |e: &Self, at: &str, rotating: String| if holds { e.block_step(l, at) } else { rotating };
        // The loads that do not move with the loop are made once, before it.
        let mut current = Vec::new();
        for p in loads.iter().filter(|p| !p.axes.contains(&l.dim)) {
            let shape = self.k.value(p.value).shape.clone();
            let runs = self.regs(shape.elements()) / self.vector_run(&shape, &p.axes).unwrap_or(1);
            let (q, f) = (self.fresh("qn"), self.fresh("fn"));
            self.line(&format!("uint4 {q}[{runs}];"));
            self.line(&format!("bool {f}[{runs}];"));
            self.at_step(l.dim, format!("({})", steps.first()), &p.at, |e| e.issue_vector_loads(&shape, p.input, &p.axes, &q, &f));
            current.push((p.value, q, f));
        }
        // Copies the runs of step `at`, if it is one to stage, into buffer `stage` of each ring;
        // one group either way, so that the group of a step is always its step's number.
        let stage_step = |e: &mut Self, at: String, stage: String| {
            e.line(&format!("if ({}) {{", staged.in_range(&at)));
            e.depth += 1;
            for (p, (base, runs)) in moving.iter().zip(&rings) {
                let shape = e.k.value(p.value).shape.clone();
                let v = e.vector_run(&shape, &p.axes).unwrap_or(1);
                let fast = e.fresh("fs");
                e.at_step(l.dim, at.clone(), &p.at, |e| {
                    e.line(&format!("bool {fast}[{runs}];"));
                    e.for_runs(&shape, v, |e, lanes, _| {
                        e.vector_access(p.input, &p.axes, lanes, v, &fast, true);
                        let slot = format!("{ring} + {base} + (({stage}) * {runs} + c) * {threads} + tid");
                        e.line(&format!("if ({fast}[c]) dt_cp_async16({slot}, in{} + a);", p.input));
                    });
                });
            }
            e.line("dt_cp_async_commit();");
            e.depth -= 1;
            e.line("} else {");
            e.line("    dt_cp_async_commit();");
            e.line("}");
        };
        let mut ahead = format!("({})", steps.first());
        for k in 0..stages - 1 {
            let stage = buffer(self, &ahead, k.to_string());
            stage_step(self, ahead.clone(), stage);
            ahead = format!("({})", steps.next(&ahead));
        }
        let (o, st) = (self.fresh("o"), self.fresh("st"));
        if !holds {
            self.line(&format!("unsigned {st} = 0; /* the buffer of this step */"));
        }
        self.line(&crate::emit::loop_header(self.k, l, &o));
        self.depth += 1;
        self.offsets.push((l.dim, o.clone()));
        let mut next = o.clone();
        for _ in 0..stages - 1 {
            next = format!("({})", steps.next(&next));
        }
        // A held block's steps past the loop's (its partial step) are staged too, so the lanes
        // of the step staged are checked even in a loop of full steps.
        let full = if holds { self.full.len() } else { self.enter_steps(l) };
        let stage = buffer(self, &next, format!("({st} + {}) % {stages}u", stages - 1));
        stage_step(self, next, stage);
        if holds {
            self.enter_steps(l);
        }
        self.line(&format!("dt_cp_async_wait<{}>();", stages - 1));
        let this = buffer(self, &o, st.clone());
        for (p, (base, runs)) in moving.iter().zip(&rings) {
            let (q, f) = self.read_ring(p, l.dim, &o, &ring, *base, *runs, &this);
            current.push((p.value, q, f));
        }
        self.prefetched.extend(current);
        // A staged loop inside this one takes the shared memory after this ring.
        self.ring_used = outer + own;
        let body = self.stmts(&l.body);
        self.ring_used = outer;
        body?;
        self.settle_cluster();
        self.prefetched.clear();
        if !holds {
            self.line(&format!("{st} = ({st} + 1) % {stages}u;"));
        }
        self.full.truncate(full);
        self.offsets.pop();
        self.depth -= 1;
        self.line("}");
        if holds {
            // Kept until the end of the statements the loop is in.
            let loads = moving
                .iter()
                .zip(&rings)
                .map(|(p, (base, runs))| HeldTile {
                    input: p.input,
                    axes: p.axes.clone(),
                    shape: self.k.value(p.value).shape.clone(),
                    at: self.other_offsets(p, l.dim),
                    base: *base,
                    runs: *runs,
                })
                .collect();
            self.held.push(HeldRing { dim: l.dim, step: l.step, offset: self.ring_offset + outer, loads });
            self.ring_used = outer + own;
        }
        Ok(())
    }

    /// Reads back, at offset `o` of `dim` (a step of the loop over it), the runs of load `p` that
    /// `ring` holds from `base` (16-byte words) in buffer `buffer`, `runs` per thread: its words
    /// and flags.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_ring(
        &mut self,
        p: &Prefetch,
        dim: DimId,
        o: &str,
        ring: &str,
        base: usize,
        runs: usize,
        buffer: &str,
    ) -> (String, String) {
        let shape = self.k.value(p.value).shape.clone();
        let v = self.vector_run(&shape, &p.axes).unwrap_or(1);
        let threads = self.threads;
        let (q, f) = (self.fresh("q"), self.fresh("f"));
        self.line(&format!("uint4 {q}[{runs}];"));
        self.line(&format!("bool {f}[{runs}];"));
        self.at_step(dim, o.to_string(), &p.at, |e| {
            e.for_runs(&shape, v, |e, lanes, _| {
                e.vector_access(p.input, &p.axes, lanes, v, f.as_str(), false);
                e.line(&format!("if ({f}[c]) {q}[c] = {ring}[{base} + ({buffer} * {runs} + c) * {threads} + tid];"));
            });
        });
        (q, f)
    }

    /// Whether staged loop `l` holds its block ([`HeldRing`]): a loop over a block of several
    /// steps, but no more than its stages, that is not the partial step of the block, and whose
    /// staged loads a later loop over the same block reads again.
    pub(super) fn holds_block(&self, l: &Loop, loads: &[Prefetch]) -> bool {
        // A backward loop would stage from its last full step down, never its partial step.
        if !self.k.grid.block_fits_stages(l) || l.steps == Steps::Partial || l.backward {
            return false;
        }
        if loads.iter().any(|p| !p.at.is_empty()) {
            return false;
        }
        let Some(rest) = statements_after(&self.k.body, l) else { return false };
        let tile = |p: &Prefetch| (p.input, p.axes.clone(), self.k.value(p.value).shape.clone());
        let moving: Vec<_> = loads.iter().filter(|p| p.axes.contains(&l.dim)).map(tile).collect();
        rest.iter().any(|s| match s {
            Stmt::Loop(later) if later.kind == LoopKind::Block && later.dim == l.dim && later.step == l.step => {
                let mut theirs = Vec::new();
                self.collect_prefetchable(&later.body, &mut Vec::new(), &mut theirs);
                let theirs: Vec<_> = theirs.iter().map(tile).collect();
                !moving.is_empty() && moving.iter().all(|t| theirs.contains(t))
            }
            _ => false,
        })
    }

    /// The buffers of the ring of staged loop `l`: one per stage, or, where it `holds` its block,
    /// one per step of the block.
    pub(super) fn ring_buffers(&self, l: &Loop, holds: bool) -> usize {
        match self.k.grid.block_extent(l.dim) {
            Some(b) if holds => b.div_ceil(l.step) as usize,
            _ => l.stages as usize,
        }
    }

    /// The number of the step at offset `at` of a loop over this program's block of its
    /// dimension.
    pub(super) fn block_step(&self, l: &Loop, at: &str) -> String {
        let b = self.k.grid.block_extent(l.dim).expect("a loop over a block");
        format!("((unsigned)({at} - b{} * {b}) / {}u)", self.k.dim_slot(l.dim), l.step)
    }

    /// The loads of loop `l` that a staged loop before it left in shared memory ([`HeldRing`]):
    /// a tile of the same input, axes and shape, over the same block in the same steps.
    pub(super) fn held_loads(&self, l: &Loop) -> Vec<(Prefetch, HeldLoad)> {
        if l.kind != LoopKind::Block || self.single_iteration(l) || self.held.is_empty() {
            return Vec::new();
        }
        let mut loads = Vec::new();
        self.collect_prefetchable(&l.body, &mut Vec::new(), &mut loads);
        loads
            .into_iter()
            .filter(|p| p.at.is_empty())
            .filter_map(|p| {
                let shape = &self.k.value(p.value).shape;
                let at = self.other_offsets(&p, l.dim);
                let found = self.held.iter().filter(|h| h.dim == l.dim && h.step == l.step).find_map(|h| {
                    h.loads.iter().find(|t| t.input == p.input && t.axes == p.axes && t.shape == *shape && t.at == at).map(|t| HeldLoad {
                        offset: h.offset,
                        base: t.base,
                        runs: t.runs,
                    })
                });
                found.map(|h| (p, h))
            })
            .collect()
    }

    /// The offsets, as printed here, of the axes of load `p` other than `dim`: which row of a
    /// block it reads.
    pub(super) fn other_offsets(&self, p: &Prefetch, dim: DimId) -> Vec<String> {
        p.axes.iter().filter(|d| **d != dim).map(|d| self.offset(*d)).collect()
    }

    /// Reads, at the step at offset `o` of loop `l`, its `held` loads from shared memory (the
    /// copies there complete before the loop, [`Self::loop_stmt`]): their words and flags, for
    /// [`Self::prefetched`].
    pub(super) fn read_held(&mut self, l: &Loop, o: &str, held: &[(Prefetch, HeldLoad)]) -> Vec<(ValueId, String, String)> {
        if held.is_empty() {
            return Vec::new();
        }
        let buffer = self.block_step(l, o);
        let mut read = Vec::new();
        for (p, h) in held {
            let ring = self.fresh("held");
            self.line(&format!("const uint4* const {ring} = (const uint4*)(dt_smem + {});", h.offset));
            let (q, f) = self.read_ring(p, l.dim, o, &ring, h.base, h.runs, &buffer);
            read.push((p.value, q, f));
        }
        read
    }

    /// The 16-byte runs per thread of prefetched load `p`.
    pub(super) fn runs_per_thread(&self, p: &Prefetch) -> usize {
        let shape = &self.k.value(p.value).shape;
        self.regs(shape.elements()) / self.vector_run(shape, &p.axes).unwrap_or(1)
    }

    /// The 4-byte words of shared memory [`Self::staged_rows`] takes for loop `l`: its buffers
    /// ([`Self::ring_buffers`]) for each load that moves with the loop.
    pub(super) fn ring_words_for(&self, l: &Loop, loads: &[Prefetch], holds: bool) -> usize {
        let per_stage: usize = loads.iter().filter(|p| p.axes.contains(&l.dim)).map(|p| self.runs_per_thread(p)).sum();
        per_stage * self.threads as usize * self.ring_buffers(l, holds) * 4
    }

    /// Prints `body` with the offset of `dim` at `at` and the offsets of the single-step loops
    /// `inner` (as [`Prefetch::at`] holds them).
    pub(super) fn at_step(&mut self, dim: DimId, at: String, inner: &[(DimId, String)], body: impl FnOnce(&mut Self)) {
        let depth = self.offsets.len();
        self.offsets.push((dim, at));
        self.offsets.extend(inner.iter().cloned());
        body(self);
        self.offsets.truncate(depth);
    }

    /// Notes, at the top of the body of loop `l`, that every lane along its dimension is valid
    /// there if it runs full steps or steps of one ([`Loop::lanes_all_valid`]); returns what to
    /// truncate [`Self::full`] to after the body.
    pub(super) fn enter_steps(&mut self, l: &Loop) -> usize {
        let before = self.full.len();
        if l.lanes_all_valid() {
            self.full.push(l.dim);
        }
        before
    }
}
