//! Loops whose loads run ahead of their work (`num_stages`): rows pipelined in registers, chunks
//! of a long row staged in rings of shared-memory buffers with `cp.async`, and blocks held in
//! shared memory for the loops after them.

use super::*;
use dt_core::algo::DimId;

impl Emitter<'_> {
    /// The offsets of the single-step loops load `p` sits in, as printed: their first.
    fn within(&self, p: &AheadLoad) -> Vec<(DimId, String)> {
        p.within.iter().map(|l| (l.dim, format!("({})", crate::emit::LoopSteps::of(self.k, l).first()))).collect()
    }

    /// A loop over several rows or chunks whose loads are issued one step ahead (`num_stages`):
    /// the loads of the first step before the loop, and in each step, before its work, those
    /// of the next, into registers the work then no longer needs (a double buffer of raw
    /// 16-byte words). The memory system so always has a step's loads in flight. A load that
    /// does not move with the loop (layernorm's weights) is issued once, before it.
    pub(super) fn pipelined_rows(&mut self, l: &Loop, loads: &[AheadLoad]) -> Result<(), EmitError> {
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
        let moving = |p: &AheadLoad| p.axes.contains(&l.dim);
        let issue = |e: &mut Self, at: String, only_moving: bool| {
            for (p, (q, f, _)) in loads.iter().zip(&names) {
                if only_moving && !moving(p) {
                    continue;
                }
                let shape = e.k.value(p.value).shape.clone();
                let within = e.within(p);
                e.at_step(l.dim, at.clone(), &within, |e| e.issue_vector_loads(&shape, p.input, &p.axes, q, f));
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
        // This loop's loads, for its body; an enclosing loop's stay for what follows the loop.
        let outer = self.prefetched.len();
        self.prefetched.extend(current);
        self.stmts(&l.body)?;
        self.cluster_wait(WaitPoint::EndOfBody(l));
        self.prefetched.truncate(outer);
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
    /// there, as later loops over the block do ([`RowLoads::Held`]). The plan
    /// (`plan::staged_rows`) decides the ring: where it lies, its buffers, whether it holds.
    pub(super) fn staged_rows(&mut self, l: &Loop, plan: &StagedRing) -> Result<(), EmitError> {
        let StagedRing { loads, holds, offset, rings, .. } = plan;
        let (loads, holds) = (loads.as_slice(), *holds);
        let stages = l.stages as usize;
        let steps = crate::emit::LoopSteps::of(self.k, l);
        // Where a held block's steps are staged from: every step of the block.
        let staged = crate::emit::LoopSteps::over(self.k, l, if holds { Steps::All } else { l.steps });
        let threads = self.threads as usize;
        let moving: Vec<&AheadLoad> = loads.iter().filter(|p| p.axes.contains(&l.dim)).collect();
        let ring = self.fresh("ring");
        let ahead = if holds { "the block's steps".to_string() } else { format!("{} steps ahead", stages - 1) };
        self.line(&format!("/* {}: loads {ahead}, staged in shared memory */", l.origin));
        self.line(&format!("uint4* const {ring} = (uint4*)(dt_smem + {offset});"));
        if moving.is_empty() {
            // Every load is made once, before the loop (a drawn schedule can ask for stages of a
            // loop that nothing moves with): the ring stays empty.
            self.line(&format!("(void){ring};"));
        }
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
            let within = self.within(p);
            self.at_step(l.dim, format!("({})", steps.first()), &within, |e| e.issue_vector_loads(&shape, p.input, &p.axes, &q, &f));
            current.push((p.value, q, f));
        }
        // Copies the runs of step `at`, if it is one to stage, into buffer `stage` of each ring;
        // one group either way, so that the group of a step is always its step's number.
        let stage_step = |e: &mut Self, at: String, stage: String| {
            e.line(&format!("if ({}) {{", staged.in_range(&at)));
            e.depth += 1;
            for (p, (base, runs)) in moving.iter().zip(rings) {
                let shape = e.k.value(p.value).shape.clone();
                let v = e.vector_run(&shape, &p.axes).unwrap_or(1);
                let fast = e.fresh("fs");
                let within = e.within(p);
                e.at_step(l.dim, at.clone(), &within, |e| {
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
        for (p, (base, runs)) in moving.iter().zip(rings) {
            let (q, f) = self.read_ring(p, l.dim, &o, &ring, *base, *runs, &this);
            current.push((p.value, q, f));
        }
        let outer = self.prefetched.len();
        self.prefetched.extend(current);
        self.stmts(&l.body)?;
        self.cluster_wait(WaitPoint::EndOfBody(l));
        self.prefetched.truncate(outer);
        if !holds {
            self.line(&format!("{st} = ({st} + 1) % {stages}u;"));
        }
        self.full.truncate(full);
        self.offsets.pop();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// Reads back, at offset `o` of `dim` (a step of the loop over it), the runs of load `p` that
    /// `ring` holds from `base` (16-byte words) in buffer `buffer`, `runs` per thread: its words
    /// and flags.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_ring(
        &mut self,
        p: &AheadLoad,
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
        let within = self.within(p);
        self.at_step(dim, o.to_string(), &within, |e| {
            e.for_runs(&shape, v, |e, lanes, _| {
                e.vector_access(p.input, &p.axes, lanes, v, f.as_str(), false);
                e.line(&format!("if ({f}[c]) {q}[c] = {ring}[{base} + ({buffer} * {runs} + c) * {threads} + tid];"));
            });
        });
        (q, f)
    }

    /// The number of the step at offset `at` of a loop over this program's block of its
    /// dimension.
    pub(super) fn block_step(&self, l: &Loop, at: &str) -> String {
        let b = self.k.grid.block_extent(l.dim).expect("a loop over a block");
        format!("((unsigned)({at} - b{} * {b}) / {}u)", self.k.dim_slot(l.dim), l.step)
    }

    /// Reads, at the step at offset `o` of loop `l`, its `held` loads from shared memory (the
    /// copies there complete before the loop, [`Self::loop_stmt`]): their words and flags, for
    /// [`Self::prefetched`].
    pub(super) fn read_held(&mut self, l: &Loop, o: &str, held: &[(AheadLoad, HeldLoad)]) -> Vec<(ValueId, String, String)> {
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

    /// Prints `body` with the offset of `dim` at `at` and the offsets of the single-step loops
    /// `inner` (as [`Self::within`] prints them).
    pub(super) fn at_step(&mut self, dim: DimId, at: String, inner: &[(DimId, String)], body: impl FnOnce(&mut Self)) {
        let depth = self.offsets.len();
        self.offsets.push((dim, at));
        self.offsets.extend(inner.iter().cloned());
        body(self);
        self.offsets.truncate(depth);
    }

    /// Notes, at the top of the body of loop `l`, whether every lane along its dimension is
    /// valid there (it runs full steps or steps of one, [`Loop::lanes_all_valid`]), for its body
    /// (an outer loop's note about the same dimension no longer holds there); returns what to
    /// truncate [`Self::full`] to after the body.
    pub(super) fn enter_steps(&mut self, l: &Loop) -> usize {
        let before = self.full.len();
        self.full.push((l.dim, l.lanes_all_valid()));
        before
    }
}
