//! Register layouts of the GPU emitter, and `rdot` on staged operands: NVIDIA tensor cores
//! (`mma.sync`), AMD matrix cores (MFMA), and f32 fused multiply-adds (`Fma`).
//!
//! Before a kernel is printed, [`plan`] gives every value and accumulator a [`RegLayout`]: where
//! each element of the tile lives (which thread, which register slot). Most tiles are
//! [`RegLayout::Blocked`]. A dot that the matrix units can compute gets [`RegLayout::Mma`], the
//! accumulator layout of the dialect's matrix instruction ([`MatrixIsa`]: `mma.sync.m16n8k16` on
//! CUDA, `v_mfma_f32_16x16x16` on HIP), and so do the accumulators it is summed into and the
//! element-wise values computed only from such tiles, so that the epilogue (scaling, masking, the
//! store) runs on the fragments in place. Where two layouts meet, the value is published through
//! shared memory with its producer's mapping and read back under the reader's, as any tile read
//! under another shape is.
//!
//! A matrix-unit dot stages both operands in shared memory as 16-bit values, in lines padded (or,
//! in rings that would not fit padded, swizzled: `MmaDot::swizzle`) so that the eight line
//! addresses of an `ldmatrix` fall in distinct banks: [rows][K], or
//! [K][rows] (read with `ldmatrix.trans`) for an operand whose input has the row dimension as
//! its last, contiguous axis, so that the copy from global memory is coalesced either way. An
//! operand loaded only for the dot is copied there straight from global memory, 16 bytes at a
//! time where the input allows. Each warp then walks the contraction in steps of 16, loading
//! fragments (with `ldmatrix` on CUDA; on HIP each lane reads its four consecutive elements along
//! K, 8 bytes at a time from [rows][K] lines) and accumulating in f32 (`mma.sync`,
//! `__builtin_amdgcn_mfma_f32_16x16x16f16` / `..bf16_1k`), into the registers of the accumulator
//! the dot is summed into. This applies to f16 and bf16 kernels, for tiles the warps divide into
//! whole fragments. Operands loaded from the inputs (possibly masked with a fill the type
//! represents) are exact in that type, so the result changes only by the order of f32
//! additions; an operand computed in the kernel (attention's probabilities) is rounded to the
//! kernel's type when staged, as FlashAttention and cuDNN do. The CUDA helpers need sm_80; the
//! HIP helpers use MFMA where the architecture has it (gfx908 for f16, gfx90a and the gfx94x for
//! both) and an exchange of the operands by shuffles within the wavefront elsewhere, which
//! computes the same result.
//!
//! f32 dots take the same path on the CUDA cores (AMD's vector units, [`MatrixIsa::Fma`]):
//! operands staged as f32 in lines of an odd number of 16-byte units, each lane holding a 4 x 4
//! block of each 16 x 32 fragment (32-lane groups, half a wavefront on AMD) and reading its rows
//! of A and columns of B 16 bytes at a time, `fmaf` in k order. The result is that of a plain
//! loop: no operand is rounded.
//!
//! `num_stages(S)` with S >= 2 pipelines a reduction loop that does nothing but such a dot of
//! two operands it loads itself (a plain matmul's k loop), on CUDA: each operand gets S
//! shared-memory buffers, the copies for step i + S - 1 are started with `cp.async` before the
//! dot works on step i, and one `__syncthreads` per step both publishes step i and frees
//! the buffer that step i + S - 1 overwrites (it was read in step i - 1). A loop whose work
//! holds several such dots and other statements (attention's loop over the keys) feeds them
//! the same way through one ring per operand (`plan::dot_rings`, [`Emitter::ring_loop`]), an
//! operand that does not change along the loop copied once before it. Any other loop, a dot
//! whose S buffers do not fit in shared memory, and HIP (no asynchronous copies to overlap)
//! run unpipelined (S lowered until they fit).
//!
//! In a `wgmma()` kernel (CUDA sm_90a) the dots are warpgroup products instead
//! (`MmaDot::warpgroup`, printed by `gpu_hopper.rs`): the rings are filled by bulk tensor
//! copies that the first thread issues, each stage completing on an `mbarrier`, and the
//! operands are read through `wgmma` matrix descriptors, not `ldmatrix`.

use super::overlap::{OverlapBody, OverlapRole};
use super::{Emitter, Lanes};
use crate::plan::layouts::{MatrixIsa, MmaDot, MmaTile, RegLayout};
use crate::plan::publishing::Reader;
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;

impl Emitter<'_> {
    /// `id = dot` on staged operands (see the module docs), into the accumulator it is fused with
    /// or into a fresh zeroed tile.
    pub(super) fn mma_dot(&mut self, id: ValueId, d: &MmaDot) {
        self.barrier();
        if !d.a_in_fragments {
            self.stage(d, 0, None);
        }
        self.stage(d, 1, None);
        self.barrier();
        self.mma_compute(id, d, None);
    }

    /// A loop that copies the operands of its staged dots S - 1 steps ahead (see the module
    /// docs): a dot pipelined alone, in S buffers per operand, or the dots fed through rings
    /// (`plan::dot_rings`). The held operands and the copies of the first S - 1 steps start
    /// before it; step i waits for its own copies, starts those of step i + S - 1 (into the
    /// buffers step i - 1 read, which the barrier after the wait has freed) and then runs its
    /// statements, each dot reading buffer i % S. Where the last warp done with a stage refills
    /// it (`RingBuffers::done_counts`), the first S steps' copies start before the loop and
    /// step i's last warp starts those of step i + S, with no barrier in the loop.
    pub(super) fn ring_loop(&mut self, l: &Loop, dots: &[(ValueId, MmaDot)]) -> Result<(), super::EmitError> {
        let s = dots[0].1.ring.map_or(dots[0].1.stages, |r| r.stages);
        let steps = crate::emit::LoopSteps::of(self.k, l);
        // The loop's first offset: 0, or the start of this program's block of a contraction
        // split over a cluster.
        let (step, size, first) = (l.step, steps.end().to_string(), steps.first());
        let o = self.fresh("o");
        let (rd, wr) = (self.fresh("rd"), self.fresh("wr"));
        if !l.origin.is_empty() {
            self.line(&format!("/* {} */", l.origin));
        }
        let held = dots.iter().any(|(_, d)| d.ring.is_some_and(|r| r.held.contains(&true)));
        // Bulk tensor copies (a `wgmma()` kernel): the first thread copies, the stages'
        // barriers say when they have landed; `ph` is the parity of buffer `rd`'s phase.
        let bulk = dots[0].1.ring.and_then(|r| r.barriers).map(|b| format!("dt_smem_u32(dt_smem + {})", self.dot_rings + b));
        let counts = dots[0].1.ring.and_then(|r| r.done_counts).map(|c| format!("((unsigned*)(dt_smem + {}))", self.dot_rings + c));
        let ph = self.fresh("ph");
        self.line(&format!(
            "/* num_stages({s}): the operands of the next {} steps are copied ({}) while the dots work on this one{} */",
            s - 1,
            match (&bulk, &counts) {
                (Some(_), Some(_)) =>
                    "bulk tensor copies: the first steps' by thread 0, each later one's by the last warp done with its stage",
                (Some(_), None) => "bulk tensor copies by thread 0",
                _ => "cp.async",
            },
            if held { "; those the steps share, once" } else { "" }
        ));
        self.line("{");
        self.depth += 1;
        // A multicast's stages (`RingBuffers::multicast`): freed once every program of the
        // cluster is done with them; `eph` is the parity of buffer `wr`'s phase of those.
        let multicast = dots[0].1.ring.and_then(|r| r.multicast);
        let empty = multicast.map(|m| (format!("dt_smem_u32(dt_smem + {})", self.dot_rings + m.empty), m.programs));
        let eph = if empty.is_some() { self.fresh("eph") } else { String::new() };
        if let Some(bars) = &bulk {
            let zero = counts.as_ref().map_or(String::new(), |c| format!(" {c}[st] = 0u;"));
            let empties = empty.as_ref().map_or(String::new(), |(e, n)| format!(" dt_mbar_init({e} + 8 * st, {n});"));
            self.line(&format!(
                "if (tid == 0) {{ for (int st = 0; st < {s}; st++) {{ dt_mbar_init({bars} + 8 * st, 1);{empties}{zero} }} dt_mbar_fence_init(); }}"
            ));
        }
        self.barrier();
        if empty.is_some() {
            self.line("dt_cluster_arrive_relaxed();");
            self.line("dt_cluster_wait(); /* every program's barriers are ready before the others' copies and arrivals reach them */");
        }
        match &counts {
            Some(_) => self.line(&format!("int {rd} = 0;")),
            None => self.line(&format!("int {rd} = 0, {wr} = {};", s - 1)),
        }
        if bulk.is_some() {
            self.line(&format!("unsigned {ph} = 0;"));
            if empty.is_some() {
                self.line(&format!("unsigned {eph} = 0;"));
            }
        } else {
            for (_, d) in dots {
                for i in 0..2 {
                    if d.ring.is_some_and(|r| r.held[i]) {
                        self.stage(d, i, Some("0"));
                    }
                }
            }
        }
        let ahead_steps = if counts.is_some() { s } else { s - 1 };
        self.line(&format!("for (int st = 0; st < {ahead_steps}; st++) {{"));
        self.depth += 1;
        let from = if first == "0" { String::new() } else { format!("{first} + ") };
        self.line(&format!("const long long {o} = {from}(long long)st * {step};"));
        match &bulk {
            Some(bars) => self.ring_bulk_copies(dots, l.dim, &o, &size, "st", bars, Some("st == 0"), Some("tid == 0")),
            None => self.ring_copies(dots, l.dim, &o, &size, "st"),
        }
        self.depth -= 1;
        self.line("}");
        // An overlapped loop (`RingBuffers::overlapped`) of its first and last dot.
        let overlapped = dots.len() == 2 && dots[0].1.ring.is_some_and(|r| r.overlapped);
        let overlap = overlapped.then(|| self.overlap_state(&dots[1].1));
        self.line(&super::super::loop_header(self.k, l, &o));
        self.depth += 1;
        self.offsets.push((l.dim, o.clone()));
        // This loop's lanes, not an outer loop's over the same dimension, decide its masks.
        let entered = self.enter_steps(l);
        if counts.is_some() {
            self.line(&format!("/* wait for the copies of this step (buffer {rd}) */"));
        } else {
            self.line(&format!(
                "/* wait for the copies of this step (buffer {rd}), then start those {} steps ahead (buffer {wr}) */",
                s - 1
            ));
        }
        match &bulk {
            Some(bars) => self.line(&format!("dt_mbar_wait({bars} + 8 * {rd}, {ph});")),
            None => self.line(&format!("dt_cp_async_wait<{}>();", s - 2)),
        }
        if let Some(state) = &overlap {
            let init = l.body.iter().find(|st| matches!(st, Stmt::Init { var, .. } if Some(*var) == dots[0].1.into));
            let init = init.expect("the first dot's accumulator starts in the step");
            self.overlap_issue(state, (dots[0].0, &dots[0].1), &dots[1].1, init, &rd, s)?;
        }
        let ov =
            overlap.as_ref().map(|state| OverlapBody { first: (dots[0].0, &dots[0].1), last: (dots[1].0, &dots[1].1), regs: &state.regs });
        if counts.is_none() {
            self.barrier();
            let ahead = self.fresh("o");
            self.line(&format!("const long long {ahead} = {o} + {};", (s - 1) * step));
            if let Some((e, n)) = &empty {
                // Every step, copies or none, so that the last one's wait returns only once no
                // arrival of another program is still to reach this one's shared memory.
                self.line(&format!(
                    "if (tid == 0) {{ dt_mbar_arrive_cluster({e} + 8 * {wr}, {n}); dt_mbar_wait({e} + 8 * {wr}, {eph}); }} /* every program of the cluster is done with buffer {wr} */"
                ));
            }
            match &bulk {
                Some(bars) => self.ring_bulk_copies(dots, l.dim, &ahead, &size, &wr, bars, None, Some("tid == 0")),
                None => self.ring_copies(dots, l.dim, &ahead, &size, &wr),
            }
        }
        // A body that masks the lanes past the end of the loop's dimension runs unmasked in the
        // steps that lie wholly inside it (all but the last), as a loop split by pass
        // `full_steps` would, which this loop is not: its rings run across all its steps.
        let masks = l.body.iter().any(|s| matches!(s, Stmt::Let { op: Op::MaskFill { dim, .. }, .. } if *dim == l.dim));
        let full = masks && !self.is_full(l.dim);
        // A causal loop's steps below the diagonal (`Loop::diagonal`) run with its mask's
        // condition taken as true, and unmasked: every lane of theirs is valid.
        if let (Some(g), Some(i)) = (l.diagonal, l.until) {
            let cmp = if g.strict { "<" } else { "<=" };
            self.line(&format!("if ({o} + {step} <= {} && {o} + {} {cmp} {}) {{", self.size(l.dim), step - 1, self.offset(i)));
            self.depth += 1;
            self.line(&format!("/* a step below the diagonal: v{} holds in every lane */", g.cond.0));
            self.full.push((l.dim, true));
            self.holds.push(g.cond);
            self.ring_body(l, dots, &rd, ov)?;
            self.holds.pop();
            self.full.pop();
            self.depth -= 1;
            self.line("} else {");
            self.depth += 1;
        }
        if full {
            self.line(&format!("if ({o} + {step} <= {}) {{", self.size(l.dim)));
            self.depth += 1;
            self.line("/* a full step: every lane valid */");
            self.full.push((l.dim, true));
            self.ring_body(l, dots, &rd, ov)?;
            self.full.pop();
            self.depth -= 1;
            self.line("} else {");
            self.depth += 1;
            self.ring_body(l, dots, &rd, ov)?;
            self.depth -= 1;
            self.line("}");
        } else {
            self.ring_body(l, dots, &rd, ov)?;
        }
        if l.diagonal.is_some() && l.until.is_some() {
            self.depth -= 1;
            self.line("}");
        }
        match (&bulk, &counts, &overlap) {
            // The previous step's stage, its products done, with the step `s` after it.
            (Some(bars), Some(c), Some(state)) => {
                self.line(&format!("if ({}) {{", state.carried));
                self.depth += 1;
                self.refill_by_last_warp(dots, l.dim, &format!("{o} + {}", (s - 1) * step), &size, &state.prev, bars, c);
                self.depth -= 1;
                self.line("}");
                self.line(&format!("{} = true;", state.carried));
            }
            (Some(bars), Some(c), None) => self.refill_by_last_warp(dots, l.dim, &format!("{o} + {}", s * step), &size, &rd, bars, c),
            _ => {}
        }
        self.line(&format!("{rd} = {rd} + 1 == {s} ? 0 : {rd} + 1;"));
        if counts.is_none() {
            self.line(&format!("{wr} = {wr} + 1 == {s} ? 0 : {wr} + 1;"));
            if empty.is_some() {
                self.line(&format!("{eph} ^= {wr} == {} ? 1u : 0u;", s - 1));
            }
        }
        if bulk.is_some() {
            self.line(&format!("{ph} ^= {rd} == 0 ? 1u : 0u;"));
        }
        self.full.truncate(entered);
        self.offsets.pop();
        self.depth -= 1;
        self.line("}");
        if let Some(state) = &overlap {
            self.overlap_drain(state, &dots[1].1, &rd, s);
        }
        match &bulk {
            // A loop of no steps (its first offset at or past its end: a program whose block of a
            // split dimension starts past the size, too) waits for the copies of what the steps
            // share, so that none is still writing when the program ends.
            Some(bars) if held => self.line(&format!("if (!({first} < {size})) dt_mbar_wait({bars}, 0);")),
            Some(_) => {}
            None => self.line("dt_cp_async_wait<0>();"),
        }
        self.barrier();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// The end of a step of a loop along `dim` whose last warp done with a stage refills it
    /// (`RingBuffers::done_counts`): each warp, its products waited for, counts itself done
    /// with stage `rd` (in `counts[rd]`), and the one that completes the count (the warps'
    /// number) resets it and issues the copies of the step at offset `ahead` (the loop's stages
    /// ahead) into it. The fences order the warps' reads of the stage before the copies'
    /// writes, as the block-wide barrier they replace did.
    #[allow(clippy::too_many_arguments)]
    fn refill_by_last_warp(&mut self, dots: &[(ValueId, MmaDot)], dim: DimId, ahead: &str, size: &str, rd: &str, bars: &str, counts: &str) {
        let warps = self.threads / 32;
        self.line("__syncwarp();");
        self.line("if ((tid & 31) == 0) {");
        self.depth += 1;
        self.line("__threadfence_block();");
        self.line(&format!("if (atomicAdd({counts} + {rd}, 1u) == {}u) {{ /* the last warp done with stage {rd} refills it */", warps - 1));
        self.depth += 1;
        self.line(&format!("{counts}[{rd}] = 0u;"));
        self.line("__threadfence_block();");
        let at = self.fresh("o");
        self.line(&format!("const long long {at} = {ahead};"));
        self.ring_bulk_copies(dots, dim, &at, size, rd, bars, None, None);
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }

    /// The statements of ring loop `l`'s body, its dots reading buffer `rd`; in an overlapped
    /// loop (`overlap`: its first and last dot), as `gpu_overlap.rs` has them.
    fn ring_body(&mut self, l: &Loop, dots: &[(ValueId, MmaDot)], rd: &str, overlap: Option<OverlapBody>) -> Result<(), super::EmitError> {
        let mut touched = false;
        let acc = overlap.map(|o| super::overlap::accumulator(o.last.1));
        for stmt in &l.body {
            if let (Some(OverlapBody { first, last, regs }), Some(acc)) = (overlap, &acc) {
                match super::overlap::overlap_role(stmt, first, last, touched) {
                    OverlapRole::Issued => continue,
                    OverlapRole::WaitsForLast => {
                        touched = true;
                        self.line("/* the previous step's last dot, done */");
                        self.warpgroup_wait(last.1, acc, 0);
                    }
                    OverlapRole::Carried => {
                        // The carried registers are the previous step's operand until its products
                        // are done.
                        if !touched {
                            self.warpgroup_wait(last.1, acc, 0);
                        }
                        self.line(&format!(
                            "/* v{}: its A operand v{} packed and carried into the next step, which issues it */",
                            last.0 .0, last.1.a.0
                        ));
                        self.carry_fragments(last.1, regs);
                        continue;
                    }
                    OverlapRole::Plain => {}
                }
            }
            let dot = match stmt {
                Stmt::Let { value, .. } => dots.iter().find(|(id, _)| id == value),
                _ => None,
            };
            match dot {
                Some((id, d)) => {
                    // A computed `a` the rings do not hold goes to its slot once every warp is
                    // done with what the slot held, and is read once every warp has stored it.
                    if d.a_in_slot_each_step() {
                        self.barrier();
                        self.stage(d, 0, None);
                        self.barrier();
                    }
                    self.mma_compute(*id, d, Some(rd))
                }
                None => self.stmt(stmt)?,
            }
        }
        Ok(())
    }

    /// Starts the copies of the operands of `dots` that change along `dim`, at offset `at` (when
    /// in range), into their buffer `buf`, as one cp.async group.
    fn ring_copies(&mut self, dots: &[(ValueId, MmaDot)], dim: DimId, at: &str, size: &str, buf: &str) {
        self.offsets.push((dim, at.to_string()));
        self.line(&format!("if ({at} < {size}) {{"));
        self.depth += 1;
        for (_, d) in dots {
            for i in 0..2 {
                if d.ring.is_none_or(|r| r.at[i].is_some() && !r.held[i]) {
                    self.stage(d, i, Some(buf));
                }
            }
        }
        self.depth -= 1;
        self.line("}");
        self.line("dt_cp_async_commit();");
        self.offsets.pop();
    }

    /// Shared memory of operand `i` of `d`: its buffer `buf` (a C expression) when pipelined or
    /// fed through a ring (a held operand has one buffer).
    pub(super) fn buffer(&self, d: &MmaDot, i: usize, buf: Option<&str>) -> String {
        if let Some(r) = d.ring {
            // A computed operand of a ring-fed dot lies in its slot.
            let Some(at) = r.at[i] else { return self.slot(i) };
            let at = self.dot_rings + at;
            return match buf {
                Some(b) if !r.held[i] => format!("(dt_smem + {at} + {b} * {})", d.buffer_words(i)),
                _ => format!("(dt_smem + {at})"),
            };
        }
        match buf {
            Some(b) => format!("({} + {b} * {})", self.slot(i), d.buffer_words(i)),
            None => self.slot(i),
        }
    }

    /// The matrix-unit work of `id = dot` on operands already staged (in buffer `buf`).
    fn mma_compute(&mut self, id: ValueId, d: &MmaDot, buf: Option<&str>) {
        let t = d.tile;
        let (fm, fn_) = t.frags();
        let (fr, fc) = t.isa.fragment();
        let (unit, warps) = match t.isa {
            MatrixIsa::MmaSync => ("tensor cores", "warps"),
            MatrixIsa::Mfma => ("matrix cores", "wavefronts"),
            MatrixIsa::Fma { .. } => ("the vector units (fmaf)", "groups of 32 lanes"),
        };
        self.line(&format!(
            "/* rdot on {unit}: [{}:{}, {}:{}] over {}:{} by {} x {} {warps} of {fm} x {fn_} m{fr}n{fc}k{} fragments */",
            self.k.dim_name(t.m),
            t.rows,
            self.k.dim_name(t.n),
            t.cols,
            self.k.dim_name(d.k),
            d.depth,
            t.wm,
            t.wn,
            t.isa.k_step()
        ));
        let acc = match d.into {
            Some(var) => format!("acc{}", var.0),
            None => {
                let dst = format!("v{}", id.0);
                let shape = self.k.value(id).shape.clone();
                self.declare(&dst, &shape);
                self.for_owned(&shape, RegLayout::Mma(t), |e, _| e.line(&format!("{dst}[r] = 0.0f;")));
                dst
            }
        };
        match t.isa {
            MatrixIsa::MmaSync if d.warpgroup => self.warpgroup_steps(d, &acc, buf),
            MatrixIsa::MmaSync => self.mma_sync_steps(d, &acc, buf),
            MatrixIsa::Mfma => self.mfma_steps(d, &acc, buf),
            MatrixIsa::Fma { .. } => self.fma_steps(d, &acc, buf),
        }
    }

    /// The contraction of a staged f32 dot in steps of 4 on the CUDA cores (see
    /// [`MatrixIsa::Fma`]): each lane loads its rows of A and its `cols` columns of B for four
    /// values of k, 16 bytes (8 for pairs of columns) at a time where the staged lines run along
    /// what it loads, and adds their products into `acc` with `fmaf`, k in order (as a plain loop
    /// sums them).
    fn fma_steps(&mut self, d: &MmaDot, acc: &str, buf: Option<&str>) {
        let t = d.tile;
        let (fm, fn_) = t.frags();
        let (_, fc) = t.isa.fragment();
        let cols = t.isa.adjacent_columns();
        let (pa, pb) = (d.pitch(0), d.pitch(1));
        let (wrow, wcol) = t.warp_origin(1);
        self.line("{");
        self.depth += 1;
        self.line("const int lane = tid & 31;");
        // The lane's first row of A and first column of B at k 0; `fa[i][q * 4 + kq]` holds
        // row q of fragment i at k `kk + kq`, `fb[j][kq * cols + c]` column c of fragment j.
        let (sa, sb) = (self.buffer(d, 0, buf), self.buffer(d, 1, buf));
        let fa0 = if d.trans(0) { format!("{sa} + {wrow} + (lane >> 3)") } else { format!("{sa} + ({wrow} + (lane >> 3)) * {pa}") };
        let fb0 = if d.trans(1) {
            format!("{sb} + {wcol} + (lane & 7) * {cols}")
        } else {
            format!("{sb} + ({wcol} + (lane & 7) * {cols}) * {pb}")
        };
        self.line(&format!("const float* fa0 = (const float*)({fa0});"));
        self.line(&format!("const float* fb0 = (const float*)({fb0});"));
        self.line("#pragma unroll");
        self.line(&format!("for (int kk = 0; kk < {}; kk += 4) {{", d.depth));
        self.depth += 1;
        self.line(&format!("float fa[{fm}][16], fb[{fn_}][{}];", 4 * cols));
        // `n` consecutive floats at `src` (16 or 8 bytes) into `dst[first + step * x]`.
        let run = |n: u32, dst: &str, first: &str, step: u32, src: &str| {
            let fields = ["x", "y", "z", "w"];
            let sets: Vec<String> = (0..n as usize)
                .map(|x| match x {
                    0 => format!("{dst}[{first}] = w.x;"),
                    _ => format!("{dst}[{first} + {}] = w.{};", x as u32 * step, fields[x]),
                })
                .collect();
            format!("{{ const float{n} w = *(const float{n}*)({src}); {} }}", sets.join(" "))
        };
        self.line("#pragma unroll");
        if d.trans(0) {
            // Lines along the rows, but the lane's rows are 4 apart: element by element.
            self.line(&format!(
                "for (int i = 0; i < {fm}; i++) for (int q = 0; q < 4; q++) for (int kq = 0; kq < 4; kq++) fa[i][q * 4 + kq] = fa0[(kk + kq) * {pa} + i * 16 + q * 4];"
            ));
        } else {
            self.line(&format!(
                "for (int i = 0; i < {fm}; i++) for (int q = 0; q < 4; q++) {}",
                run(4, "fa[i]", "q * 4", 1, &format!("fa0 + (i * 16 + q * 4) * {pa} + kk"))
            ));
        }
        self.line("#pragma unroll");
        if d.trans(1) {
            self.line(&format!(
                "for (int j = 0; j < {fn_}; j++) for (int kq = 0; kq < 4; kq++) {}",
                run(cols, "fb[j]", &format!("kq * {cols}"), 1, &format!("fb0 + (kk + kq) * {pb} + j * {fc}"))
            ));
        } else {
            self.line(&format!(
                "for (int j = 0; j < {fn_}; j++) for (int c = 0; c < {cols}; c++) {}",
                run(4, "fb[j]", "c", cols, &format!("fb0 + (j * {fc} + c) * {pb} + kk"))
            ));
        }
        let regs = 4 * cols;
        self.line("#pragma unroll");
        self.line("for (int kq = 0; kq < 4; kq++)");
        self.line("#pragma unroll");
        self.line(&format!("for (int i = 0; i < {fm}; i++)"));
        self.line("#pragma unroll");
        self.line(&format!("for (int j = 0; j < {fn_}; j++)"));
        self.line("#pragma unroll");
        self.line("for (int q = 0; q < 4; q++)");
        self.line("#pragma unroll");
        self.line(&format!(
            "for (int c = 0; c < {cols}; c++) {acc}[(i * {fn_} + j) * {regs} + q * {cols} + c] = fmaf(fa[i][q * 4 + kq], fb[j][kq * {cols} + c], {acc}[(i * {fn_} + j) * {regs} + q * {cols} + c]);"
        ));
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }

    /// The contraction of a staged dot in steps of 16 on NVIDIA tensor cores: fragments loaded
    /// with `ldmatrix`, accumulated with `mma.sync` into `acc`.
    fn mma_sync_steps(&mut self, d: &MmaDot, acc: &str, buf: Option<&str>) {
        let t = d.tile;
        let (fm, fn_) = t.frags();
        let suffix = self.dtype.name();
        self.line("{");
        self.depth += 1;
        self.line("const int lane = tid & 31;");
        // Each lane gives the address of one 8-element line; lanes 8i..8i+7 those of matrix i,
        // which fills fragment registers in the order a0a1 (rows 0-7, k 0-7), a2a3 (rows 8-15),
        // a4a5 (k 8-15), a6a7 of A, and b0b1 (k 0-7), b2b3 (k 8-15) of two n8 fragments of B.
        // The .x2 form for a last odd B fragment uses the addresses of lanes 0-15 only.
        let mut walks: [Option<Walk>; 2] = [None, None];
        for (i, name) in ["fa", "fb"].into_iter().enumerate() {
            if i == 0 && d.a_in_fragments {
                continue;
            }
            let w = Walk::of(t, i, d.trans(i), d.pitch(i), d.swizzled(i));
            for line in w.bases(name, &self.buffer(d, i, buf)) {
                self.line(&line);
            }
            walks[i] = Some(w);
        }
        let at = |i: usize, f: &str| walks[i].as_ref().expect("a staged operand").address(["fa", "fb"][i], f);
        let (a_trans, b_trans) = (if d.trans(0) { "_trans" } else { "" }, if d.trans(1) { "_trans" } else { "" });
        self.line("#pragma unroll");
        self.line(&format!("for (int kk = 0; kk < {}; kk += 16) {{", d.depth));
        self.depth += 1;
        self.line(&format!("unsigned fa[{fm}][4], fb[{fn_}][2];"));
        self.line("#pragma unroll");
        if d.a_in_fragments {
            self.a_from_fragments(d, fm);
        } else {
            self.line(&format!(
                "for (int i = 0; i < {fm}; i++) dt_ldmatrix_x4{a_trans}(fa[i][0], fa[i][1], fa[i][2], fa[i][3], {});",
                at(0, "i")
            ));
        }
        if fn_ >= 2 {
            self.line("#pragma unroll");
            self.line(&format!(
                "for (int j = 0; j + 1 < {fn_}; j += 2) dt_ldmatrix_x4{b_trans}(fb[j][0], fb[j][1], fb[j + 1][0], fb[j + 1][1], {});",
                at(1, "j")
            ));
        }
        if fn_ % 2 == 1 {
            let j = fn_ - 1;
            self.line(&format!("dt_ldmatrix_x2{b_trans}(fb[{j}][0], fb[{j}][1], {});", at(1, &j.to_string())));
        }
        self.fragment_products(&format!("dt_mma_m16n8k16_{suffix}"), acc, fm, fn_);
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }

    /// The A fragments `fa[i]` of step `kk` repacked from the accumulator fragments of operand
    /// `a` (see [`MmaDot::a_in_fragments`]): the A fragment of rows block `i` and k16 step `kk`
    /// is accumulator fragments `kk / 8` and `kk / 8 + 1` of that rows block, each register pair
    /// (columns `2t`, `2t + 1` of row `g`, then of row `g + 8`) rounded and packed in one word.
    pub(super) fn a_from_fragments(&mut self, d: &MmaDot, fm: u32) {
        let per_row = d.depth / MatrixIsa::MmaSync.fragment().1;
        let (a, pack) = (format!("v{}", d.a.0), format!("dt_pack2_{}", self.dtype.name()));
        self.line(&format!("for (int i = 0; i < {fm}; i++) {{"));
        self.depth += 1;
        self.line(&format!("const int f = (i * {per_row} + kk / 8) * 4;"));
        for (w, r) in [(0, 0), (1, 2), (2, 4), (3, 6)] {
            self.line(&format!("fa[i][{w}] = {pack}({a}[f + {r}], {a}[f + {}]);", r + 1));
        }
        self.depth -= 1;
        self.line("}");
    }

    /// `acc` += the products of the `fm` A fragments `fa[i]` and the `fn_` B fragments `fb[j]`
    /// of one step, through the matrix instruction helper `mma` (4 accumulator registers per
    /// fragment, fragments row-major).
    fn fragment_products(&mut self, mma: &str, acc: &str, fm: u32, fn_: u32) {
        self.line("#pragma unroll");
        self.line(&format!("for (int i = 0; i < {fm}; i++) {{"));
        self.depth += 1;
        self.line("#pragma unroll");
        self.line(&format!("for (int j = 0; j < {fn_}; j++) {mma}(&{acc}[(i * {fn_} + j) * 4], fa[i], fb[j]);"));
        self.depth -= 1;
        self.line("}");
    }

    /// The contraction of a staged dot in steps of 16 on AMD matrix cores: each lane packs the
    /// four elements along K that `v_mfma_f32_16x16x16` wants from it (see [`MatrixIsa::Mfma`])
    /// in two 32-bit words, the first element in the low half, read 8 bytes at a time from an
    /// operand staged [rows][K] and element by element from one staged [K][rows].
    fn mfma_steps(&mut self, d: &MmaDot, acc: &str, buf: Option<&str>) {
        let t = d.tile;
        let (fm, fn_) = t.frags();
        let suffix = self.dtype.name();
        let (wrow, wcol) = t.warp_origin(1);
        self.line("{");
        self.depth += 1;
        self.line("const int lane = tid & 63;");
        // Operand i's staged lines as 16-bit elements, at this lane's first element (row or
        // column `lane % 16` of fragment 0, k `(lane / 16) * 4`) and k 0; `(fstride, kstride)`
        // are the element steps to the next fragment and along k.
        let mut steps = Vec::new();
        for (i, (name, first_row)) in [("fa", wrow), ("fb", wcol)].into_iter().enumerate() {
            let p = d.pitch(i);
            let (at, st) = if d.trans(i) {
                (format!("((lane >> 4) * 4) * {p} + {first_row} + (lane & 15)"), (16, p))
            } else {
                (format!("({first_row} + (lane & 15)) * {p} + (lane >> 4) * 4"), (16 * p, 1))
            };
            let smem = self.buffer(d, i, buf);
            self.line(&format!("const unsigned short* {name}0 = (const unsigned short*){smem} + {at};"));
            steps.push(st);
        }
        self.line("#pragma unroll");
        self.line(&format!("for (int kk = 0; kk < {}; kk += 16) {{", d.depth));
        self.depth += 1;
        self.line(&format!("unsigned fa[{fm}][2], fb[{fn_}][2];"));
        for (i, (name, count)) in [("fa", fm), ("fb", fn_)].into_iter().enumerate() {
            let (fs, ks) = steps[i];
            let at = format!("{name}0 + {name}i * {fs} + kk * {ks}");
            self.line("#pragma unroll");
            if ks == 1 {
                // Four consecutive elements of one line: 8 bytes, aligned (pitches and the
                // lane's first k are multiples of 4 elements).
                self.line(&format!(
                    "for (int {name}i = 0; {name}i < {count}; {name}i++) {{ const uint2 w = *(const uint2*)({at}); {name}[{name}i][0] = w.x; {name}[{name}i][1] = w.y; }}"
                ));
            } else {
                self.line(&format!("for (int {name}i = 0; {name}i < {count}; {name}i++) {{"));
                self.depth += 1;
                self.line(&format!("const unsigned short* q = {at};"));
                self.line(&format!("{name}[{name}i][0] = (unsigned)q[0] | ((unsigned)q[{ks}] << 16);"));
                self.line(&format!("{name}[{name}i][1] = (unsigned)q[{}] | ((unsigned)q[{}] << 16);", 2 * ks, 3 * ks));
                self.depth -= 1;
                self.line("}");
            }
        }
        self.fragment_products(&format!("dt_mfma_16x16x16_{suffix}"), acc, fm, fn_);
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }

    /// `dst` = the reduction by `op` of `src`, an accumulator-layout tile `t`, over its columns:
    /// each thread combines its registers of each of its rows, the lanes sharing a row combine
    /// with shuffles, and the warps along the columns meet in slot 1 (`t.wn` partials per row),
    /// where the thread holding each result under `layout` combines them; a result in
    /// accumulator rows (one warp along the columns) is what the shuffles leave. The tile never
    /// goes through shared memory (softmax's row maximum and sum in attention's key loop).
    pub(super) fn mma_row_reduce(&mut self, op: dt_core::algo::RedOp, src: &str, t: MmaTile, dst: &str, result: &Shape, layout: RegLayout) {
        let (fm, fn_) = t.frags();
        let (per_lane, sharing) = t.isa.rows_per_lane();
        let slots = fm * per_lane;
        let regs = (fm * fn_) << t.isa.register_bits();
        let ident = crate::emit::expr::float_lit(op.identity());
        let in_rows = matches!(layout, RegLayout::MmaRows(_));
        let meet = if in_rows { "the result stays in the rows' registers" } else { "the warps along the columns meet in shared memory" };
        self.line(&format!(
            "/* row reduction of an accumulator tile: registers, shuffles in groups of {sharing} lanes, {} warps per row; {meet} */",
            t.wn
        ));
        self.line("{");
        self.depth += 1;
        self.line(&format!("float p[{slots}];"));
        self.line("#pragma unroll");
        self.line(&format!("for (int s = 0; s < {slots}; s++) p[s] = {ident};"));
        self.line("#pragma unroll");
        self.line(&format!(
            "for (int r = 0; r < {regs}; r++) {{ const int s = {}; p[s] = {}; }}",
            t.row_slot("r"),
            crate::emit::expr::combine(op, "p[s]", &format!("{src}[r]"))
        ));
        self.line("#pragma unroll");
        self.line(&format!("for (int s = 0; s < {slots}; s++) {{"));
        self.depth += 1;
        self.line("#pragma unroll");
        self.line(&format!(
            "for (int m = 1; m < {sharing}; m <<= 1) p[s] = {};",
            crate::emit::expr::combine(op, "p[s]", &format!("dt_shfl_xor(p[s], m, {sharing})"))
        ));
        self.depth -= 1;
        self.line("}");
        if in_rows {
            // Every lane of a row holds its result: the slots are the result's registers.
            self.line("#pragma unroll");
            self.line(&format!("for (int s = 0; s < {slots}; s++) {dst}[s] = p[s];"));
            self.depth -= 1;
            self.line("}");
            return;
        }
        self.barrier();
        let red = self.slot(1);
        let (row, warp_col) = t.slot_row("s");
        self.line(&format!("if ((tid & {}) == 0) {{", sharing - 1));
        self.depth += 1;
        self.line("#pragma unroll");
        self.line(&format!("for (int s = 0; s < {slots}; s++) {red}[{warp_col} * {} + {row}] = p[s];", t.rows));
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
        self.barrier();
        let m = t.m;
        self.for_owned(result, layout, |e, l| {
            let parts: Vec<String> = (0..t.wn).map(|w| format!("{red}[{} + {}]", w * t.rows, l.lane(m))).collect();
            let mut acc = parts[0].clone();
            for p in &parts[1..] {
                acc = crate::emit::expr::combine(op, &acc, p);
            }
            e.line(&format!("{dst}[r] = {acc};"));
        });
    }

    /// Writes operand `i` of `d` to shared-memory slot `i` as 16-bit values (f32 for an `Fma`
    /// dot), in lines of
    /// [`MmaDot::pitch`] elements (row-major [rows][K] or, for [`MmaDot::trans`], [K][rows]),
    /// whatever the operand's own dimension order: from global memory when the dot makes the
    /// load, else from the operand's registers.
    /// Pipelined (`buf` given), into that buffer and with `cp.async`.
    fn stage(&mut self, d: &MmaDot, i: usize, buf: Option<&str>) {
        let v = if i == 0 { d.a } else { d.b };
        let (rows, k, pitch, swizzled) = (d.rows(i).0, d.k, d.pitch(i), d.swizzled(i));
        let at = move |l: &Lanes| {
            let (line, col) = if d.trans(i) { (l.lane(k), l.lane(rows)) } else { (l.lane(rows), l.lane(k)) };
            staged_index(line, col, pitch, swizzled)
        };
        let shape = self.k.value(v).shape.clone();
        // The staged type, its elements in 16 bytes, its zero, and the conversion of a computed
        // operand (f32 in registers) to it.
        let (ety, group, zero, cvt) = match d.tile.isa {
            MatrixIsa::Fma { .. } => ("float", 4, "0.0f", String::new()),
            MatrixIsa::MmaSync | MatrixIsa::Mfma => ("unsigned short", 8, "(unsigned short)0", format!("dt_f32_to_{}", self.dtype.name())),
        };
        let dst = format!("(({ety}*){})", self.buffer(d, i, buf));
        let Some(load) = &d.direct[i] else {
            let layout = self.plan.values[v.0 as usize];
            self.for_owned(&shape, layout, |e, l| e.line(&format!("{dst}[{}] = {cvt}(v{}[r]);", at(l), v.0)));
            return;
        };
        // Threads along the input's last axis, so that they read consecutive addresses of a
        // row-major input; unrolled by 8 at most, so that loads are in flight together without
        // keeping so many addresses live that the accumulator spills (a full unroll of 32 does).
        let mut order = Shape::default();
        for a in &load.axes {
            if order.extent(*a).is_none() {
                order.0.push((*a, shape.extent(*a).unwrap_or(1)));
            }
        }
        let (input, axes) = (load.input, load.axes.clone());
        let name = self.k.inputs[input].name.clone();
        // Element by element: in a kernel for any layout, f32 elements go through the pipeline's
        // asynchronous copies too (4 bytes is the smallest such copy), so that an input whose
        // runs are not aligned (rows of 77 elements) does not wait for its loads at every step.
        // (A kernel for whole runs copies elements only at the edges, where the registers these
        // copies' addresses take cost more than the waits.)
        let async4 = !self.whole_runs && buf.is_some() && d.tile.isa.is_fma();
        let copy = |e: &mut Self, l: &Lanes| {
            let (cond, addr) = e.address(&axes, l, |a| e.input_stride(input, a));
            match async4 {
                true => {
                    e.line(&format!("if ({cond}) dt_cp_async4(&{dst}[{}], &in{input}[{addr}]); else {dst}[{}] = {zero};", at(l), at(l)))
                }
                false => e.line(&format!("{dst}[{}] = ({cond}) ? in{input}[{addr}] : {zero};", at(l))),
            }
        };
        // 16 bytes at a time where the input's last axis runs along the staged lines, in whole
        // groups of 16 bytes: then a group is consecutive elements in memory and in shared
        // memory. Whether the input is laid out for it (unit stride along that axis, 16-byte
        // alignment) is known at run time only; a group that is not, or that is partly out of
        // range, is copied element by element.
        let last = *load.axes.last().expect("a tile load has an axis");
        let inner = if d.trans(i) { rows } else { k };
        let distinct = order.0.len() == load.axes.len();
        if last != inner || !distinct || order.extent(last).unwrap_or(1) % group != 0 {
            let pragma = if self.regs(order.elements()) <= 8 { "#pragma unroll" } else { "#pragma unroll 8" };
            self.line(&format!("/* v{}: {name} copied as it is, along its last axis */", v.0));
            self.for_blocked(&order, pragma, copy);
            return;
        }
        let mut groups = order.clone();
        groups.0.last_mut().expect("an axis").1 /= group;
        let pragma = if self.regs(groups.elements()) <= 8 { "#pragma unroll" } else { "#pragma unroll 8" };
        let n = load.axes.len();
        let mut aligned = vec![format!("(args.inputs[{input}] & 15) == 0"), format!("args.input_strides[{input}][{}] == 1", n - 1)];
        aligned.extend((0..n - 1).map(|a| format!("(args.input_strides[{input}][{a}] & {}) == 0", group - 1)));
        let flag = self.fresh("vec");
        self.line(&format!("/* v{}: {name} copied as it is, along its last axis, 16 bytes at a time where it can be */", v.0));
        self.line("{");
        self.depth += 1;
        self.line(&format!("const bool {flag} = {};", aligned.join(" && ")));
        self.for_spread(&groups, pragma, |e, l| {
            let at_lane = |off: &str| {
                Lanes(
                    l.0.iter().map(|(x, name)| (*x, if *x == last { format!("({name} * {group}{off})") } else { name.clone() })).collect(),
                )
            };
            let (whole, _) = e.address(&load.axes, &at_lane(&format!(" + {}", group - 1)), |_| String::new());
            let first = at_lane("");
            let (first_ok, addr) = e.address(&load.axes, &first, |a| e.input_stride(input, a));
            e.line(&format!("if ({flag} && {whole}) {{"));
            e.depth += 1;
            let copy16 = if buf.is_some() { "dt_cp_async16" } else { "dt_copy16_to_shared" };
            e.line(&format!("{copy16}(&{dst}[{}], &in{input}[{addr}]);", at(&first)));
            e.depth -= 1;
            // A group wholly past the end (a head dimension of 80 in a tile of 128): zeros,
            // 16 bytes at once.
            e.line(&format!("}} else if (!({first_ok})) {{"));
            e.line(&format!("    *(uint4*)&{dst}[{}] = make_uint4(0u, 0u, 0u, 0u);", at(&first)));
            e.line("} else {");
            e.depth += 1;
            e.line("#pragma unroll");
            e.line(&format!("for (int q = 0; q < {group}; q++) {{"));
            e.depth += 1;
            copy(e, &at_lane(" + q"));
            e.depth -= 1;
            e.line("}");
            e.depth -= 1;
            e.line("}");
        });
        self.depth -= 1;
        self.line("}");
    }
}

impl Emitter<'_> {
    /// Whether the output keeps stride 1 along its last axis and 16-byte aligned rows, known
    /// when the kernel is built: a kernel for whole runs, or a warp-specialized one.
    fn output_in_runs(&self) -> bool {
        self.whole_runs || self.ws.is_some()
    }

    /// Whether a store of `value` to output tile `tile` writes runs of adjacent elements
    /// ([`MatrixIsa::adjacent_columns`]): a whole tile in fragments whose consecutive registers
    /// hold adjacent columns along the output's last axis. A kernel for whole runs, or a
    /// warp-specialized one, keeps stride 1 there and 16-byte aligned rows; elsewhere only `Fma`
    /// fragments (runs of four f32, one 16-byte write) are stored so, with the layout checked
    /// at run time.
    pub(super) fn stores_in_runs(&self, value: ValueId, tile: &Shape) -> bool {
        let Some(t) = crate::plan::twins::fragments_in_runs(self.k, value, self.layout(value), tile) else { return false };
        (self.output_in_runs() || t.isa.is_fma()) && self.sources_plan(Reader::Store(value)).is_none()
    }

    /// The store of fragments `src` (layout `t`) to output tile `tile` a run of adjacent columns
    /// at a time: one 4-byte (16-bit pairs), 8-byte (f32 pairs) or 16-byte (f32 runs of four)
    /// write where the run lies inside the output (and, in a kernel for any layout, the output
    /// has unit stride along it and the run is aligned), element by element where it does not.
    pub(super) fn store_runs(&mut self, src: &str, t: MmaTile, tile: &Shape) {
        // Only a kernel for whole runs: a warp-specialized one takes rows of any length.
        if t.isa == MatrixIsa::MmaSync && self.dtype != DType::F32 && self.whole_runs && t.frags().1.is_multiple_of(4) {
            return self.store_quad_runs(src, t, tile);
        }
        let dims = self.k.output.dims.clone();
        let strides = self.output_strides();
        let stride = |a: usize| strides[a].clone();
        let last = stride(dims.len() - 1);
        let w = t.isa.adjacent_columns();
        let elem = |j: usize| if j == 0 { format!("{src}[r]") } else { format!("{src}[r + {j}]") };
        let elems: Vec<String> = (0..w as usize).map(elem).collect();
        let run = match (self.dtype, w) {
            (DType::F32, 4) => format!("*(float4*)(out + a) = make_float4({});", elems.join(", ")),
            (DType::F32, _) => format!("*(float2*)(out + a) = make_float2({});", elems.join(", ")),
            (d, _) => format!("*(unsigned*)(out + a) = dt_pack2_{}({});", d.name(), elems.join(", ")),
        };
        let store = format!("dt_store_{}", self.dtype.name());
        let (row, col) = t.row_col("r");
        let count = if w == 4 { "four" } else { "two" };
        self.line(&format!("/* the fragments {count} adjacent columns at a time */"));
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {}; r += {w}) {{", self.regs(tile.elements())));
        self.depth += 1;
        self.line(&format!("const int lr = {row}, lc = {col};"));
        let lanes = tile_lanes(t, tile);
        let (_, addr) = self.address(&dims, &lanes, stride);
        let (all, _) = self.address(&dims, &lanes.shifted(t.n, w as usize - 1), stride);
        let contiguous = self.output_in_runs();
        let whole = match contiguous {
            true => all,
            false => {
                let bytes = w as usize * self.dtype.size_bytes();
                format!("{last} == 1 && {all} && ((unsigned long long)(out + a) & {}) == 0", bytes - 1)
            }
        };
        self.line(&format!("const {} a = {addr};", crate::emit::GPU_INDEX));
        self.line(&format!("if ({whole}) {run}"));
        // Element by element: where the run is contiguous and not whole, its last column lies
        // outside, and the columns before it may not.
        let singles: Vec<String> = (0..w as usize - usize::from(contiguous))
            .map(|j| {
                let (inside, _) = self.address(&dims, &lanes.shifted(t.n, j), stride);
                let at = if j == 0 { "a".to_string() } else { format!("a + {j} * {last}") };
                format!("if ({inside}) out[{at}] = {store}({});", elem(j))
            })
            .collect();
        match singles.as_slice() {
            [one] => self.line(&format!("else {one}")),
            _ => {
                self.line("else {");
                for single in &singles {
                    self.line(&format!("    {single}"));
                }
                self.line("}");
            }
        }
        self.depth -= 1;
        self.line("}");
    }

    /// The store of 16-bit `mma.sync` fragments `src` (layout `t`, a multiple of four fragments
    /// along a warp's row) to output tile `tile` in a kernel whose output is in whole runs, eight
    /// adjacent columns at a time: for each four fragments of a row, the four lanes of a quad,
    /// which hold two adjacent columns of each, trade their pairs (a 4 x 4 transpose in two xor
    /// shuffles) so that each holds the eight columns of one fragment, and write them with one
    /// 16-byte store. A warp's store then fills whole 32-byte sectors, where pairs wrote 16
    /// bytes of a row per store: the talk's 2mm at 4096 x 4096 in f16 was bound by the L2's
    /// requests (75% busy, DRAM 11%, `docs/decisions/0036-classes-for-whole-tiles.md`). In a
    /// kernel for whole runs a run of eight is inside the output or outside it whole.
    fn store_quad_runs(&mut self, src: &str, t: MmaTile, tile: &Shape) {
        let dims = self.k.output.dims.clone();
        let strides = self.output_strides();
        let stride = |a: usize| strides[a].clone();
        let (_, fn_) = t.frags();
        let (_, warp_col) = t.warp_origin(1);
        let pack = format!("dt_pack2_{}", self.dtype.name());
        self.line("/* the fragments eight adjacent columns at a time: each quad's lanes trade their column pairs */");
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {}; r += 16) {{", self.regs(tile.elements())));
        self.depth += 1;
        self.line("#pragma unroll");
        self.line("for (int h = 0; h < 4; h += 2) {");
        self.depth += 1;
        let pairs: Vec<String> = (0..4).map(|j| format!("{pack}({src}[r + {} + h], {src}[r + {} + h + 1])", j * 4, j * 4)).collect();
        self.line(&format!("unsigned p[4] = {{{}}};", pairs.join(", ")));
        self.line("const int q = tid & 3;");
        // Lanes q and q ^ 2 swap the 2 x 2 blocks off the diagonal, then lanes q and q ^ 1 the
        // pairs off the diagonal of their block: lane q then holds fragment q's pairs.
        for (mask, bit, slots) in [(2, 2, [0, 1]), (1, 1, [0, 2])] {
            for u in slots {
                let (low, high) = (u, u + mask);
                self.line(&format!("{{ const unsigned v = __shfl_xor_sync(0xffffffffu, (q & {bit}) ? p[{low}] : p[{high}], {mask});"));
                self.line(&format!("  if (q & {bit}) p[{low}] = v; else p[{high}] = v; }}"));
            }
        }
        let (row, _) = t.row_col("(r + h)");
        let col = format!("{warp_col} + (r >> 2) % {fn_} * 8 + q * 8");
        self.line(&format!("const int lr = {row}, lc = {col};"));
        let lanes = tile_lanes(t, tile);
        let (inside, addr) = self.address(&dims, &lanes, stride);
        self.line(&format!("const {} a = {addr};", crate::emit::GPU_INDEX));
        self.line(&format!("if ({inside}) *(uint4*)(out + a) = make_uint4(p[0], p[1], p[2], p[3]);"));
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }
}

/// The lanes of a store of `mma` tile `t` to output tile `tile`: its rows at `lr`, its columns
/// at `lc` (C names the store prints), its other dimensions at 0.
fn tile_lanes(t: MmaTile, tile: &Shape) -> Lanes {
    let lane = |d: &DimId| match d {
        d if *d == t.m => "lr",
        d if *d == t.n => "lc",
        _ => "0",
    };
    Lanes(tile.0.iter().map(|(d, _)| (*d, lane(d).to_string())).collect())
}

/// Where one lane's `ldmatrix` addresses of an operand lie in its staged lines: the lane's line
/// and 16-byte unit at fragment 0 and k 0, and the lines and units that one more fragment and
/// one more k16 step add. The eight lines of one matrix are consecutive from a multiple of 8, so
/// a line's place among them is `lane & 7`, which a swizzled operand's units are XORed with.
struct Walk {
    line0: String,
    unit0: String,
    per_fragment: (u32, u32),
    per_k16: (u32, u32),
    /// Elements per staged line, and whether the lines are swizzled.
    pitch: u32,
    swizzled: bool,
}

/// The index (a C expression, in elements) at which a staged operand of lines of `pitch`
/// elements holds element `col` of line `line` (C expressions): 16-byte unit `col / 8` of a
/// swizzled line at unit `col / 8 ^ line % 8`. (A warpgroup dot's operands, in pieces of 64
/// elements, are written by bulk copies: `MmaDot::atom_pieces`.)
fn staged_index(line: &str, col: &str, pitch: u32, swizzled: bool) -> String {
    if swizzled {
        format!("{line} * {pitch} + ((({col} >> 3) ^ ({line} & 7)) << 3) + ({col} & 7)")
    } else {
        format!("{line} * {pitch} + {col}")
    }
}

impl Walk {
    /// The declarations of the lane's base address `{name}0` (bytes, in shared memory at `smem`)
    /// and, swizzled, of its unit `{name}u`, which [`Walk::address`] adds to.
    fn bases(&self, name: &str, smem: &str) -> Vec<String> {
        let pitch = self.pitch;
        if self.swizzled {
            vec![
                format!("const unsigned {name}0 = dt_smem_u32({smem}) + ({}) * {};", self.line0, pitch * 2),
                format!("const int {name}u = {};", self.unit0),
            ]
        } else {
            vec![format!("const unsigned {name}0 = dt_smem_u32({smem}) + (({}) * {pitch} + ({}) * 8) * 2;", self.line0, self.unit0)]
        }
    }

    /// The walk of operand `i` (0: A, rows along the tile's rows; 1: B, along its columns) of a
    /// dot of tile `t`, staged [K][rows] when `trans`, in lines of `pitch` elements.
    fn of(t: MmaTile, i: usize, trans: bool, pitch: u32, swizzled: bool) -> Walk {
        let (row, col) = t.warp_origin(1);
        let (row_unit, col_unit) = t.warp_origin(8);
        let (line0, unit0, per_fragment, per_k16) = match (i, trans) {
            (0, true) => ("(lane & 7) + (lane >> 4) * 8".to_string(), format!("{row_unit} + ((lane >> 3) & 1)"), (0, 2), (16, 0)),
            (0, false) => (format!("{row} + (lane & 15)"), "(lane >> 4)".to_string(), (16, 0), (0, 2)),
            (_, true) => ("(lane & 15)".to_string(), format!("{col_unit} + (lane >> 4)"), (0, 1), (16, 0)),
            (_, false) => (format!("{col} + (lane & 7) + (lane >> 4) * 8"), "((lane >> 3) & 1)".to_string(), (8, 0), (0, 2)),
        };
        Walk { line0, unit0, per_fragment, per_k16, pitch, swizzled }
    }

    /// The address (a C expression) of fragment `f` (a C expression) at step `kk` of the
    /// operand whose lane base is `{name}0` (and, swizzled, whose lane unit is `{name}u`).
    fn address(&self, name: &str, f: &str) -> String {
        let pitch = self.pitch;
        let sum = |(per_f, per_k): (u32, u32)| {
            let terms: Vec<String> = [(f, per_f), ("(kk / 16)", per_k)]
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(x, n)| if *n == 1 { x.to_string() } else { format!("{x} * {n}") })
                .collect();
            if terms.is_empty() {
                "0".to_string()
            } else {
                format!("({})", terms.join(" + "))
            }
        };
        let lines = sum((self.per_fragment.0, self.per_k16.0));
        let units = sum((self.per_fragment.1, self.per_k16.1));
        if self.swizzled {
            format!("{name}0 + {lines} * {} + ((({name}u + {units}) ^ (lane & 7)) << 4)", pitch * 2)
        } else {
            format!("{name}0 + ({lines} * {pitch} + {units} * 8) * 2")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dt_core::algo::DimId;

    /// Every lane's `ldmatrix` address, as `mma_sync_steps` prints it, is the staged index
    /// (`stage()`'s) of the element the instruction wants from it: for A and B, staged
    /// [rows][K] or [K][rows], padded or swizzled, for several warp arrangements. The printed
    /// expressions are compiled and run as C.
    #[test]
    fn ldmatrix_addresses_read_what_staging_wrote() {
        let Ok(tool) = crate::host::c_compiler() else {
            eprintln!("skipped: no C compiler");
            return;
        };
        let dir = crate::host::private_dir("ldmatrix_walks").expect("a temporary directory");
        let mut c = String::from("#include <stdio.h>\n#define dt_smem_u32(x) 0u\nint main(void) {\n    long bad = 0, checked = 0;\n");
        let mut cases = 0;
        for (rows, cols, wm, wn, depth) in [(128, 128, 8, 1, 64), (128, 64, 4, 1, 128), (64, 128, 2, 2, 64), (128, 256, 2, 4, 128)] {
            let t = MmaTile { isa: MatrixIsa::MmaSync, m: DimId(0), n: DimId(1), rows, cols, wm, wn };
            let (frags_m, frags_n) = t.frags();
            for i in 0..2 {
                for trans in [false, true] {
                    let len = match (i, trans) {
                        (_, false) => depth,
                        (0, true) => rows,
                        (_, true) => cols,
                    };
                    for swizzled in [false, true] {
                        let pitch = if swizzled {
                            len
                        } else if (len / 8) % 2 == 0 {
                            len + 8
                        } else {
                            len + 16
                        };
                        let w = Walk::of(t, i, trans, pitch, swizzled);
                        // B is read two fragments at a time (x4), the last odd one alone (x2).
                        let (count, step, lanes) = if i == 0 { (frags_m, 1, 32) } else { (frags_n, 2, 32) };
                        cases += 1;
                        c += &format!("    for (int tid = 0; tid < {}; tid++) {{\n", wm * wn * 32);
                        c += "        const int lane = tid & 31;\n";
                        for line in w.bases("fw", "0") {
                            c += &format!("        {line}\n");
                        }
                        c += &format!("        for (int f = 0; f < {count}; f += {step}) for (int kk = 0; kk < {depth}; kk += 16) {{\n");
                        let live = if i == 1 && count % 2 == 1 { format!("(f + 1 < {count} ? {lanes} : 16)") } else { lanes.to_string() };
                        c += &format!("            if (lane >= {live}) continue;\n");
                        c += &format!("            const unsigned got = {};\n", w.address("fw", "f"));
                        // The element whose address the lane gives, as PTX defines `ldmatrix`
                        // and `mma.sync.m16n8k16` its fragments: lane l gives the start of row
                        // l % 8 of 8x8 matrix m = l / 8 in memory (8 consecutive elements of a
                        // staged line). A's four matrices are rows 0-7 / 8-15 by k 0-7, then by
                        // k 8-15; an x4 of B holds k 0-7 and 8-15 of fragment f, then of f + 1.
                        // A line of [rows][K] is a tile row (or column); one of [K][rows] a k.
                        let (wrow, wcol) = (format!("(tid >> 5) / {wn} * {}", rows / wm), format!("(tid >> 5) % {wn} * {}", cols / wn));
                        let (m, r) = ("(lane >> 3)", "(lane & 7)");
                        let (line, col) = match (i, trans) {
                            (0, false) => (format!("({wrow} + 16 * f + {r} + 8 * ({m} & 1))"), format!("(kk + 8 * ({m} >> 1))")),
                            (0, true) => (format!("(kk + {r} + 8 * ({m} >> 1))"), format!("({wrow} + 16 * f + 8 * ({m} & 1))")),
                            (_, false) => (format!("({wcol} + 8 * (f + ({m} >> 1)) + {r})"), format!("(kk + 8 * ({m} & 1))")),
                            (_, true) => (format!("(kk + {r} + 8 * ({m} & 1))"), format!("({wcol} + 8 * (f + ({m} >> 1)))")),
                        };
                        c += &format!("            const unsigned want = ({}) * 2;\n", staged_index(&line, &col, pitch, swizzled));
                        c += &format!(
                            "            checked++; if (got != want && bad++ < 5) printf(\"operand {i} trans {trans} swizzled {swizzled} tile {rows}x{cols} warps {wm}x{wn}: tid %d f %d kk %d: %u, not %u\\n\", tid, f, kk, got, want);\n"
                        );
                        c += "        }\n    }\n";
                    }
                }
            }
        }
        c += "    printf(\"%ld of %ld addresses wrong\\n\", bad, checked);\n    return bad != 0;\n}\n";
        let src = dir.path().join("walks.c");
        let exe = dir.path().join("walks");
        std::fs::write(&src, &c).expect("the test's C");
        let status = tool.to_command().args(["-O1", "-std=c11", "-o"]).arg(&exe).arg(&src).status().expect("the C compiler runs");
        assert!(status.success(), "{c}");
        let out = std::process::Command::new(&exe).output().expect("the test runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.starts_with("0 of ") && !text.starts_with("0 of 0 "), "{text}");
        assert_eq!(cases, 32);
    }
}
