//! Printing a warp-specialized kernel (`warp_specialize()`) from its GPU plan
//! ([`crate::plan::warp_specialize`], which decides everything printed here): the kernel's
//! frame with its roles, the producer warpgroup's loop of bulk tensor copies, and the consumers'
//! `rdot` loop of `wgmma`. The consumers run the kernel's other statements (the accumulator's
//! initialization, the epilogue) as every kernel does, in the accumulator's fragment layout.

use super::super::{program_coords, program_count, start_offset, GPU_INDEX, IDLE};
use super::{EmitError, Emitter};
use crate::abi;
use crate::plan::cluster_waits::WaitPoint;
use crate::plan::layouts::MmaDot;
use crate::plan::layouts::MmaTile;
use crate::plan::shared::ATOM_WORDS;
use crate::plan::warp_specialize::{
    Major, StagedOperand, StagedStore, WarpSpecialized, ROWS_PER_CONSUMER, ROW_BYTES, STEP, STORE_BUFFERS, STORE_COLS,
};
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;
use std::fmt::Write;

/// The C variable counting the steps of the `rdot` loop a role has run, over all its blocks:
/// step `i` uses stage `i % stages` in phase `(i / stages) % 2`.
const STEP_COUNTER: &str = "dt_step";
/// The C variable counting the chunks a consumer warpgroup has stored through shared memory:
/// chunk `i` uses staging buffer `i % 2`.
const STORE_COUNTER: &str = "dt_stored";

/// Whether a tensor map describes input operand `i` of a launch (`dt_by_map0`, ...), and both.
const BY_MAP: &str = "dt_by_map";
const BY_MAPS: &str = "dt_by_maps";

/// A bulk tensor copy through tensor map `map` (coordinates `coords`, innermost first) to
/// shared address `dst`, completing on the barrier at `bar`; with `multicast` (the cluster's
/// programs, this program's slice's bytes), this program's slice, `rank` slices into `dst`,
/// into every program of the cluster.
fn tma_load(dst: &str, map: usize, bar: &str, multicast: Option<(u32, u32)>, coords: &[String]) -> String {
    let (dims, coords) = (coords.len(), coords.join(", "));
    match multicast {
        None => format!("dt_tma_load_{dims}d({dst}, &targs.maps[{map}], {bar}, {coords});"),
        Some((programs, bytes)) => format!(
            "dt_tma_load_{dims}d_multicast({dst} + dt_cluster_rank() * {bytes}, &targs.maps[{map}], {bar}, {}, {coords});",
            (1u32 << programs) - 1
        ),
    }
}

/// The statement by which a consumer warpgroup frees the stage whose `empty` barrier is at
/// `bar`: in its own program, or in every program of a multicast's cluster, whose producers
/// all copy into it.
fn free_stage(w: &WarpSpecialized, bar: &str) -> String {
    match w.operands.iter().find_map(|o| o.multicast) {
        Some(m) => format!("dt_mbar_arrive_cluster({bar}, {});", m.programs),
        None => format!("dt_mbar_arrive({bar});"),
    }
}

/// The barrier of `threads` consumer threads (a named barrier the producer never reaches).
pub(super) fn consumer_sync(threads: u32) -> String {
    format!("dt_consumer_sync<{threads}>();")
}

/// The `wgmma` helper for `m64n{n}k16` in `dtype`, once per file (a guard macro): a warpgroup's
/// `d += A B` with A and B from descriptors, `TA` and `TB` the transpose flags of MN-major
/// operands, `d` the accumulator fragments (`n / 2` per thread); with `a_in_registers`
/// (`..._rs`), A from four registers per thread (`a`) and only `TB`.
pub(super) fn wgmma_helper(n: u32, dtype: DType, a_in_registers: bool) -> String {
    let t = dtype.name();
    let regs = n / 2;
    let rs = if a_in_registers { "_rs" } else { "" };
    let guard = format!("DT_WGMMA_M64N{n}K16_{}{}", t.to_uppercase(), rs.to_uppercase());
    let outs: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let cons: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let (params, a, ins, flags, template) = if a_in_registers {
        let a = format!("{{%{}, %{}, %{}, %{}}}", regs, regs + 1, regs + 2, regs + 3);
        let ins = "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), \"n\"(TB)";
        ("const unsigned* a", a, ins, format!("%{}", regs + 5), "template <int TB>")
    } else {
        let ins = "\"l\"(a), \"l\"(b), \"n\"(TA), \"n\"(TB)";
        ("unsigned long long a", format!("%{regs}"), ins, format!("%{}, %{}", regs + 2, regs + 3), "template <int TA, int TB>")
    };
    let b = if a_in_registers { regs + 4 } else { regs + 1 };
    let mut s = String::new();
    let _ = writeln!(s, "#ifndef {guard}\n#define {guard}");
    let _ = writeln!(s, "{template}");
    let _ = writeln!(s, "DT_FN void dt_wgmma_m64n{n}k16_{t}{rs}(float* d, {params}, unsigned long long b) {{");
    let _ = writeln!(s, "#if DT_SM90A");
    let _ = writeln!(
        s,
        "    asm volatile(\"{{ .reg .pred p; setp.ne.b32 p, 1, 0; wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{}}}, {a}, %{b}, p, 1, 1, {flags}; }}\"",
        outs.join(", "),
    );
    let _ = writeln!(s, "                 : {}", cons.join(", "));
    let _ = writeln!(s, "                 : {ins});");
    let _ = writeln!(s, "#else\n    (void)d, (void)a, (void)b;\n    __trap();\n#endif\n}}\n#endif");
    s
}

impl Emitter<'_> {
    /// The whole kernel `symbol`, warp-specialized by plan `w`.
    pub(super) fn warp_specialized_kernel(&mut self, w: &WarpSpecialized, symbol: &str) -> Result<String, EmitError> {
        let k = self.k;
        let r = w.roles;
        let consumers = r.producer_thread();
        let args = abi::GpuArgs::of(k).c_type();
        let maps = w.tensor_maps().len();
        let cluster = match k.grid.cluster_programs() {
            1 => String::new(),
            n => format!(" DT_CLUSTER({n})"),
        };
        let _ = writeln!(
            self.out,
            "extern \"C\" __global__ void __launch_bounds__({}, 1){cluster} {symbol}(DT_GRID_CONSTANT const dt_tma_args_t<{maps}, {args}> targs) {{",
            r.threads()
        );
        self.out += "#if defined(__CUDA_ARCH__) && !DT_SM90A\n";
        self.line("__trap(); /* built for sm_90a, where the library runs it */");
        self.out += "#else\n";
        self.line(&format!("const {args}& args = targs.args;"));
        self.line("extern __shared__ float dt_smem[];");
        self.prologue();
        let (full, empty, s) = (w.full.offset, w.empty.offset, w.stages);
        self.line(&format!(
            "/* {s} stages of {} bytes from dt_ring (1024-aligned), then barriers full[{s}] at +{full} and empty[{s}] at +{empty} */",
            w.stage_bytes
        ));
        self.line("const unsigned dt_ring = (dt_smem_u32(dt_smem) + 1023u) & ~1023u;");
        self.line("if (tid == 0) {");
        self.depth += 1;
        self.line(&format!("for (int st = 0; st < {s}; st++) {{"));
        self.line(&format!("    dt_mbar_init(dt_ring + {full} + 8 * st, {});", w.full.arrivals));
        self.line(&format!("    dt_mbar_init(dt_ring + {empty} + 8 * st, {});", w.empty.arrivals));
        self.line("}");
        self.line("dt_mbar_fence_init();");
        self.depth -= 1;
        self.line("}");
        if k.grid.multicast.is_some() {
            // The fence above releases the barriers' initialization to the cluster: the arrival
            // needs no release of its own (which would fence every memory access of the GPU).
            self.line("__syncwarp();");
            self.line("dt_cluster_arrive_relaxed();");
            self.line("dt_cluster_wait(); /* every program's barriers are ready before the others' copies and arrivals reach them */");
        } else {
            self.line("__syncthreads();");
        }
        self.line(&format!("const long long programs = {};", program_count(k)));
        self.line(&format!(
            "/* warp_specialize(): threads {consumers}.. copy (one thread, or all where no tensor map describes an input), threads 0..{consumers} compute */"
        ));
        self.line(&format!("if (tid >= {consumers}) {{"));
        self.depth += 1;
        self.line(&format!("dt_setmaxnreg_dec<{}>();", r.producer_registers));
        self.line("/* the inputs the host encoded tensor maps for: the warpgroup copies the others */");
        for (i, o) in w.operands.iter().enumerate() {
            self.line(&format!("const bool {BY_MAP}{i} = (targs.mapped >> {}) & 1;", o.map));
        }
        let all: Vec<String> = (0..w.operands.len()).map(|i| format!("{BY_MAP}{i}")).collect();
        self.line(&format!("const bool {BY_MAPS} = {};", all.join(" && ")));
        self.branch(
            BY_MAPS,
            |e| {
                e.line(&format!("if (tid == {consumers}) {{"));
                e.depth += 1;
                e.producer(w, true);
                e.depth -= 1;
                e.line("}");
            },
            |e| e.producer(w, false),
        );
        if let Some(split) = w.split {
            // Every thread of the cluster meets at its barriers: the producer warpgroup as often
            // as the consumers do, at each of their combinations of the partial sums.
            self.line(&format!("/* the consumers' combinations over the {} programs of the cluster */", split.programs));
            for _ in 0..crate::plan::warp_specialize::cluster_meetings(&k.body) {
                self.line("dt_cluster_sync();");
                self.line("dt_cluster_arrive();");
                self.line("dt_cluster_wait();");
            }
        }
        self.depth -= 1;
        self.line("} else {");
        self.depth += 1;
        self.line(&format!("dt_setmaxnreg_inc<{}>();", r.consumer_registers));
        self.line(&format!("unsigned {STEP_COUNTER} = 0;"));
        if w.store.is_some() {
            self.line(&format!("unsigned {STORE_COUNTER} = 0;"));
        }
        self.program_loop(w, true, |e| {
            e.idle_consumers(w);
            e.stmts(&k.body)
        })?;
        if w.store.is_some() {
            // Only their reads of shared memory need to be done: the stores themselves complete
            // with the kernel.
            self.line(
                "if ((tid & 127) == 0) dt_bulk_wait_read<0>(); /* the last stores have read their buffers before the program ends */",
            );
        }
        self.depth -= 1;
        self.line("}");
        self.out += "#endif\n";
        self.out += "}\n";
        self.drop_unused_pointers();
        let head = format!(
            "{}/* kernel {} for {}: grid {}; {} threads, warp-specialized for sm_90a */\n",
            wgmma_helper(w.wgmma_n, self.dtype, false),
            k.name,
            self.dtype,
            k.grid.origin,
            r.threads()
        );
        Ok(head + &self.out)
    }

    /// The loop over this program's blocks: one (a launch of one program per block) or, for a
    /// persistent launch, every `gridDim.x`-th; `body` prints one block's work.
    /// `consumers`: the loop of the consumers, which skip a multicast's blocks past the end
    /// (after freeing their stages, `idle_consumers`); its producer copies them all the same.
    fn program_loop(
        &mut self,
        w: &WarpSpecialized,
        consumers: bool,
        body: impl FnOnce(&mut Self) -> Result<(), EmitError>,
    ) -> Result<(), EmitError> {
        let how = if w.persistent { "persistent(): this program's blocks, in map order" } else { "this program's block" };
        self.line(&format!("/* {how} */"));
        self.line("for (long long pid = (long long)blockIdx.x; pid < programs; pid += (long long)gridDim.x) {");
        self.depth += 1;
        // A multicast's program past the end still copies its slices for the others.
        let skip = match (self.k.grid.multicast.is_some(), consumers) {
            (false, _) => "continue;".to_string(),
            (true, false) => "{} /* still copies its slices for the cluster */".to_string(),
            (true, true) => {
                self.line(&format!("bool {IDLE} = false; /* past the end: frees its stages, computes nothing */"));
                format!("{IDLE} = true;")
            }
        };
        for l in program_coords(self.k, &skip, GPU_INDEX, None, None) {
            self.line(&l);
        }
        body(self)?;
        self.cluster_wait(WaitPoint::Exit);
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// The producer: for each block and step, waits until the stage is free, announces its
    /// bytes and copies both operand tiles into it. `by_maps`: tensor maps describe both inputs,
    /// and one thread issues bulk copies; else the warpgroup's threads run the loop, copying the
    /// inputs no map describes themselves and arriving once their writes are done (see the
    /// plan's docs). Two loops, so that the copies by threads take no registers from the other.
    fn producer(&mut self, w: &WarpSpecialized, by_maps: bool) {
        let (full, empty) = (w.full.offset, w.empty.offset);
        let first = w.roles.producer_thread();
        self.line(&format!("unsigned {STEP_COUNTER} = 0;"));
        let _ = self.program_loop(w, false, |e| {
            e.ring_steps(w, "o");
            e.line(&format!("dt_mbar_wait(dt_ring + {empty} + 8 * st, phase ^ 1u); /* the consumers are done with stage st */"));
            if by_maps {
                e.line(&format!("dt_mbar_expect_tx(dt_ring + {full} + 8 * st, {});", w.stage_bytes));
                e.line(&format!("const unsigned stage = dt_ring + st * {};", w.stage_bytes));
                for o in &w.operands {
                    e.bulk_copies(o, w);
                }
            } else {
                e.line(&format!("const unsigned stage = dt_ring + st * {};", w.stage_bytes));
                let bytes: Vec<String> =
                    w.operands.iter().enumerate().map(|(i, o)| format!("({BY_MAP}{i} ? {}u : 0u)", o.bytes())).collect();
                e.line(&format!("if (tid == {first}) dt_mbar_expect_tx_only(dt_ring + {full} + 8 * st, {});", bytes.join(" + ")));
                for (i, o) in w.operands.iter().enumerate() {
                    e.branch(
                        &format!("{BY_MAP}{i}"),
                        |e| {
                            e.line(&format!("if (tid == {first}) {{"));
                            e.depth += 1;
                            e.bulk_copies(o, w);
                            e.depth -= 1;
                            e.line("}");
                        },
                        |e| e.thread_copies(o, w),
                    );
                }
                e.line("dt_fence_proxy_async(); /* the threads' writes, visible to wgmma */");
                e.line(&format!("dt_warpgroup_sync({});", w.roles.producer_barrier));
                e.line(&format!("if (tid == {first}) dt_mbar_arrive(dt_ring + {full} + 8 * st);"));
            }
            e.depth -= 1;
            e.line("}");
            Ok(())
        });
        if self.k.grid.multicast.is_some() {
            self.producer_tail(w);
        }
    }

    /// A multicast's producer, before its program ends: waits until every stage is free again,
    /// as if to fill it once more. Each stage's last use was freed by the consumers of every
    /// program of the cluster, which had waited for every copy into theirs, so once these waits
    /// return no copy or arrival of another program is still to reach this one's shared memory,
    /// and the program may end without a barrier of the cluster.
    fn producer_tail(&mut self, w: &WarpSpecialized) {
        let (empty, s) = (w.empty.offset, w.stages);
        self.line("/* every stage freed by the cluster's consumers: nothing of theirs is still to reach this program */");
        self.line(&format!("for (unsigned t = 0; t < {s}u; t++, {STEP_COUNTER}++) {{"));
        self.depth += 1;
        self.stage_of_step(w);
        self.line(&format!("dt_mbar_wait(dt_ring + {empty} + 8 * st, phase ^ 1u);"));
        self.depth -= 1;
        self.line("}");
    }

    /// `if (cond) { then } else { otherwise }`, each printed one level deeper.
    fn branch(&mut self, cond: &str, then: impl FnOnce(&mut Self), otherwise: impl FnOnce(&mut Self)) {
        self.line(&format!("if ({cond}) {{"));
        self.depth += 1;
        then(self);
        self.depth -= 1;
        self.line("} else {");
        self.depth += 1;
        otherwise(self);
        self.depth -= 1;
        self.line("}");
    }

    /// The bounds of the `rdot` loop: the whole contraction, or this program's block of it where
    /// it is split over a cluster.
    fn contraction_range(&self, w: &WarpSpecialized) -> (String, String) {
        let size = self.size(w.k);
        match w.split {
            None => ("0".into(), size),
            Some(s) => {
                let lo = start_offset(self.k, w.k);
                let hi = format!("dt_min_ll({lo} + {}, {size})", s.block);
                (lo, hi)
            }
        }
    }

    /// The bulk tensor copies of operand `op` into the stage at `stage`, at step offset `o` of
    /// the loop.
    fn bulk_copies(&mut self, op: &StagedOperand, w: &WarpSpecialized) {
        let k = self.k;
        let name = &k.inputs[op.input].name;
        let axes: Vec<&str> = op.axes.iter().map(|d| k.dim_name(*d)).collect();
        let boxes: Vec<String> = op.axes.iter().zip(&op.boxes).map(|(d, b)| format!("{}:{b}", k.dim_name(*d))).collect();
        self.line(&format!(
            "/* {name}[{}]: {} cop{} of box [{}] */",
            axes.join(", "),
            op.copies,
            if op.copies == 1 { "y" } else { "ies" },
            boxes.join(", ")
        ));
        // Coordinates, innermost axis first; copy c moves the contiguous axis by 64.
        let contiguous = op.contiguous_axis();
        let coords: Vec<String> = (0..op.axes.len())
            .rev()
            .map(|a| {
                let d = op.axes[a];
                let at = if d == w.k { "o".to_string() } else { start_offset(k, d) };
                if a == contiguous && op.copies > 1 {
                    format!("(int)({at} + c * {STEP})")
                } else {
                    format!("(int)({at})")
                }
            })
            .collect();
        let copy = if op.copies > 1 { format!(" + c * {}", op.copy_bytes) } else { String::new() };
        let dst = format!("stage + {}{copy}", op.offset);
        let bar = format!("dt_ring + {} + 8 * st", w.full.offset);
        let call = match op.multicast {
            None => tma_load(&dst, op.map, &bar, None, &coords),
            Some(m) => {
                // This program's slice: its lines of the box, from line `rank * extent`.
                self.line(&format!("/* this program's {} lines of each, into all {} programs of the cluster */", m.extent, m.programs));
                let sliced = op.axes.len() - 1 - m.axis;
                let coords: Vec<String> = coords
                    .iter()
                    .enumerate()
                    .map(|(i, c)| if i == sliced { format!("{c} + (int)dt_cluster_rank() * {}", m.extent) } else { c.clone() })
                    .collect();
                tma_load(&dst, op.map, &bar, Some((m.programs, m.bytes)), &coords)
            }
        };
        if op.copies > 1 {
            self.line("#pragma unroll");
            self.line(&format!("for (int c = 0; c < {}; c++) {call}", op.copies));
        } else {
            self.line(&call);
        }
    }

    /// The producer warpgroup's copy of operand `op` into the stage at `stage`, at step offset
    /// `o`, where no tensor map describes its input: the boxes its bulk copies would move, in the
    /// same lines (`dt_copy_box_by_threads`), lines along the operand's rows (K-major) or `k`.
    fn thread_copies(&mut self, op: &StagedOperand, w: &WarpSpecialized) {
        let k = self.k;
        let input = op.input;
        let stride = |a: usize| format!("args.input_strides[{input}][{a}]");
        let axis_of = |d: DimId| op.axes.iter().position(|x| *x == d).expect("the operand spans its rows and k");
        let (rows_axis, k_axis) = (axis_of(op.rows_dim), axis_of(w.k));
        // The box's first element, but along the rows (added per box).
        let fixed: Vec<String> = (0..op.axes.len())
            .filter(|a| *a != rows_axis)
            .map(|a| {
                let d = op.axes[a];
                let at = if d == w.k { "o".to_string() } else { start_offset(k, d) };
                format!("({at}) * {}", stride(a))
            })
            .collect();
        let rows_start = start_offset(k, op.rows_dim);
        let (rows_size, k_size) = (self.size(op.rows_dim), self.size(w.k));
        let t = format!("tid - {}", w.roles.producer_thread());
        let name = &k.inputs[input].name;
        self.line(&format!("/* {name}: the same boxes, copied by the warpgroup's threads */"));
        let call = |row0: String, dst: String, lines: u32| {
            let src = format!("(const unsigned short*)in{input} + {} + ({row0}) * {}", fixed.join(" + "), stride(rows_axis));
            match op.major {
                Major::K => format!(
                    "dt_copy_box_by_threads<{lines}>({dst}, {src}, {}, {}, {rows_size} - ({row0}), {k_size} - o, {t});",
                    stride(rows_axis),
                    stride(k_axis)
                ),
                Major::Mn => format!(
                    "dt_copy_box_by_threads<{lines}>({dst}, {src}, {}, {}, {k_size} - o, {rows_size} - ({row0}), {t});",
                    stride(k_axis),
                    stride(rows_axis)
                ),
            }
        };
        match op.major {
            Major::K => self.line(&call(rows_start, format!("stage + {}", op.offset), op.copied_rows)),
            Major::Mn => {
                self.line("#pragma unroll 1");
                self.line(&format!("for (int c = 0; c < {}; c++) {{", op.copies));
                self.line(&format!(
                    "    {}",
                    call(format!("{rows_start} + c * {STEP}"), format!("stage + {} + c * {}", op.offset, op.copy_bytes), STEP)
                ));
                self.line("}");
            }
        }
    }

    /// Opens the loop over the steps of this program's part of the contraction (one step per
    /// stage of the ring, counted over all its blocks), `var` the step's offset, with `st` and
    /// `phase`, the step's stage and the parity its barriers complete; the caller closes it.
    fn ring_steps(&mut self, w: &WarpSpecialized, var: &str) {
        let (lo, hi) = self.contraction_range(w);
        self.line(&format!("for (long long {var} = {lo}; {var} < {hi}; {var} += {}, {STEP_COUNTER}++) {{", w.step));
        self.depth += 1;
        self.stage_of_step(w);
    }

    /// `st` and `phase`: the stage of the ring the current step uses and the parity its
    /// barriers complete with.
    fn stage_of_step(&mut self, w: &WarpSpecialized) {
        let s = w.stages;
        self.line(&format!("const unsigned st = {STEP_COUNTER} % {s}u, phase = ({STEP_COUNTER} / {s}u) & 1u;"));
    }

    /// A multicast's consumers past the end (see `program_loop`): for each step of the loop, they
    /// wait for the stage and free it in every program of the cluster, as computing it would,
    /// so that the others' producers may fill it again; then they skip the block.
    fn idle_consumers(&mut self, w: &WarpSpecialized) {
        if self.k.grid.multicast.is_none() {
            return;
        }
        let (full, empty) = (w.full.offset, w.empty.offset);
        self.line(&format!("if ({IDLE}) {{"));
        self.depth += 1;
        self.ring_steps(w, "o");
        self.line(&format!("dt_mbar_wait(dt_ring + {full} + 8 * st, phase);"));
        self.line(&format!("if ((tid & 127) == 0) {}", free_stage(w, &format!("dt_ring + {empty} + 8 * st"))));
        self.depth -= 1;
        self.line("}");
        self.line("continue;");
        self.depth -= 1;
        self.line("}");
    }

    /// The consumers' `rdot` loop: for each step, waits for its stage, issues the warpgroup's
    /// `wgmma` on it, and frees the stage of the step before once that step's products are done
    /// (one group of products stays in flight); after the loop, waits for all and frees the
    /// last stage.
    pub(super) fn consumer_loop(&mut self, l: &Loop, w: &WarpSpecialized) -> Result<(), EmitError> {
        let (s, full, empty) = (w.stages, w.full.offset, w.empty.offset);
        let [a, b] = &w.operands;
        let acc = format!("acc{}", w.acc.0);
        let o = self.fresh("o");
        if !l.origin.is_empty() {
            self.line(&format!("/* {} */", l.origin));
        }
        self.line(&format!(
            "/* warp_specialize(): the operands arrive in stages by TMA; m64n{}k16 wgmma, {} per stage, one group in flight */",
            w.wgmma_n, w.wgmma_per_stage
        ));
        let (lo, hi) = self.contraction_range(w);
        self.ring_steps(w, &o);
        // This warpgroup's 64 rows of A; all of B.
        let a_at = format!("dt_ring + st * {} + {} + (tid >> 7) * {}", w.stage_bytes, a.offset, a.desc.slice_step);
        let b_at = format!("dt_ring + st * {} + {}", w.stage_bytes, b.offset);
        let wait = format!("dt_mbar_wait(dt_ring + {full} + 8 * st, phase); /* stage st has landed */");
        let (da, db) = if w.descriptors_before_wait {
            // The stage's descriptors before its wait (pinned there by the fences), each
            // product's by one add, as in `warpgroup_issue`: `kk` counts products here.
            self.line(&format!("unsigned long long da = dt_wgmma_desc({a_at}, {}, {});", a.desc.lbo, a.desc.sbo));
            self.line(&format!("unsigned long long db = dt_wgmma_desc({b_at}, {}, {});", b.desc.lbo, b.desc.sbo));
            self.line("dt_reg_fence_u64(da);");
            self.line("dt_reg_fence_u64(db);");
            self.line(&wait);
            (
                format!("da + (unsigned long long)(kk * {})", a.desc.k_step / 16),
                format!("db + (unsigned long long)(kk * {})", b.desc.k_step / 16),
            )
        } else {
            self.line(&wait);
            self.line(&format!("const unsigned fa = {a_at};"));
            self.line(&format!("const unsigned fb = {b_at};"));
            (
                format!("dt_wgmma_desc(fa + kk * {}, {}, {})", a.desc.k_step, a.desc.lbo, a.desc.sbo),
                format!("dt_wgmma_desc(fb + kk * {}, {}, {})", b.desc.k_step, b.desc.lbo, b.desc.sbo),
            )
        };
        self.line("dt_wgmma_fence();");
        self.line("#pragma unroll");
        self.line(&format!(
            "for (int kk = 0; kk < {}; kk++) dt_wgmma_m64n{}k16_{}<{}, {}>({acc}, {da}, {db});",
            w.wgmma_per_stage,
            w.wgmma_n,
            self.dtype.name(),
            u8::from(a.desc.transposed),
            u8::from(b.desc.transposed),
        ));
        self.line("dt_wgmma_commit();");
        self.line("dt_wgmma_wait<1>();");
        let free = free_stage(w, &format!("dt_ring + {empty} + 8 * (({STEP_COUNTER} + {}u) % {s}u)", s - 1));
        self.line(&format!("if ({o} > {lo} && (tid & 127) == 0) {free} /* the step before is done */"));
        self.depth -= 1;
        self.line("}");
        self.line("dt_wgmma_wait<0>();");
        self.line(&format!("if ({hi} > {lo} && (tid & 127) == 0) {free}"));
        let regs = self.regs(self.k.var(w.acc).elements());
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {regs}; r++) dt_reg_fence({acc}[r]);"));
        Ok(())
    }
}

impl Emitter<'_> {
    /// The store of fragments `src` (layout `t`) through shared memory by plan `s`: each
    /// consumer warpgroup writes its 64 rows, a chunk of 64 columns at a time, into its next
    /// staging buffer (once the store that read it last is done), two adjacent columns per
    /// 4-byte write at the 128-byte swizzle's place, and its first thread stores the chunk with
    /// a bulk tensor copy, which leaves out what lies outside the output.
    pub(super) fn store_staged(&mut self, src: &str, t: MmaTile, s: &StagedStore) {
        let w = self.ws.clone().expect("a staged store belongs to a warp-specialized kernel");
        let per_consumer = STORE_BUFFERS * s.buffer_bytes;
        let (row, col) = t.row_col("r");
        let (m0, n0) = (start_offset(self.k, w.m), start_offset(self.k, w.n));
        let sync = format!("dt_warpgroup_sync({} + (tid >> 7));", s.first_barrier);
        self.line(&format!(
            "/* the tile through shared memory: {STORE_COLS} columns of the warpgroup's {ROWS_PER_CONSUMER} rows at a time, into one of its {STORE_BUFFERS} buffers, stored by a bulk tensor copy */"
        ));
        self.line("#pragma unroll");
        self.line(&format!("for (int c = 0; c < {}; c++, {STORE_COUNTER}++) {{", s.chunks));
        self.depth += 1;
        self.line(&format!(
            "const unsigned buf = dt_ring + {} + (tid >> 7) * {per_consumer} + ({STORE_COUNTER} % {STORE_BUFFERS}u) * {};",
            s.offset, s.buffer_bytes
        ));
        self.line(&format!("if ((tid & 127) == 0) dt_bulk_wait_read<{}>(); /* the store that read buf is done */", STORE_BUFFERS - 1));
        self.line(&sync);
        self.line("#pragma unroll");
        self.line(&format!("for (int j = 0; j < {}; j += 2) {{", s.registers_per_chunk));
        self.depth += 1;
        self.line(&format!("const int r = c * {} + j;", s.registers_per_chunk));
        self.line(&format!("const int lr = ({row}) % {ROWS_PER_CONSUMER}, lc = ({col}) % {STORE_COLS};"));
        self.line(&format!(
            "dt_st_shared_u32(buf + lr * {ROW_BYTES} + (((lc >> 3) ^ (lr & 7)) << 4) + (lc & 7) * 2, dt_pack2_{}({src}[r], {src}[r + 1]));",
            self.dtype.name()
        ));
        self.depth -= 1;
        self.line("}");
        self.line("dt_fence_proxy_async();");
        self.line(&sync);
        self.line(&format!(
            "if ((tid & 127) == 0) {{ dt_tma_store_2d(&targs.maps[{}], buf, (int)({n0} + c * {STORE_COLS}), (int)({m0} + (tid >> 7) * {ROWS_PER_CONSUMER})); dt_bulk_commit(); }}",
            s.map
        ));
        self.depth -= 1;
        self.line("}");
    }
}

impl Emitter<'_> {
    /// Leaves out of the printed kernel the pointers of the inputs it does not read and of an
    /// output it does not write: those its copies move through tensor maps only.
    pub(super) fn drop_unused_pointers(&mut self) {
        let names = (0..self.k.inputs.len()).map(|i| format!("in{i}")).chain(["out".to_string()]);
        for name in names {
            let declaration = |l: &str| l.contains(&format!("* __restrict__ {name} = "));
            let used = self.out.lines().any(|l| !declaration(l) && super::mentions(l, &name));
            if !used {
                self.out = self.out.lines().filter(|l| !declaration(l)).map(|l| format!("{l}\n")).collect();
            }
        }
    }

    /// The bulk tensor copies (TMA) of the operands of `dots` that change along `dim`, at offset
    /// `at` (when in range), into their buffer `buf`, and, where condition `held` holds, of those
    /// the loop's steps share (into their one buffer): thread 0 announces their bytes on the buffer's
    /// barrier in `bars` (which completes its phase with none when there are none) and issues
    /// one copy per 64-element piece of each operand's lines. What lies outside a tensor is
    /// read as zeros, as the loads' fill is. `issuer`: the condition that picks the thread that
    /// issues them, or `None` where the code runs in that thread alone.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ring_bulk_copies(
        &mut self,
        dots: &[(ValueId, MmaDot)],
        dim: DimId,
        at: &str,
        size: &str,
        buf: &str,
        bars: &str,
        held: Option<&str>,
        issuer: Option<&str>,
    ) {
        self.offsets.push((dim, at.to_string()));
        let bytes = |want_held: bool| -> u32 {
            let mut n = 0;
            for (_, d) in dots {
                let r = d.ring.expect("a ring");
                for i in 0..2 {
                    if r.maps[i].is_some() && r.held[i] == want_held {
                        n += d.buffer_words(i) as u32 * 4;
                    }
                }
            }
            n
        };
        let step_bytes = bytes(false);
        let held_bytes = match held {
            Some(when) => format!("({when} ? {}u : 0u) + ", bytes(true)),
            None => String::new(),
        };
        if let Some(issuer) = issuer {
            self.line(&format!("if ({issuer}) {{"));
            self.depth += 1;
        }
        self.line(&format!("const unsigned bar = {bars} + 8 * {buf};"));
        self.line(&format!("dt_mbar_expect_tx(bar, {held_bytes}({at} < {size} ? {step_bytes}u : 0u));"));
        for want_held in [true, false] {
            let when = match (want_held, held) {
                (true, None) => continue,
                (true, Some(when)) => when.to_string(),
                (false, _) => format!("{at} < {size}"),
            };
            self.line(&format!("if ({when}) {{"));
            self.depth += 1;
            for (_, d) in dots {
                let r = d.ring.expect("a ring");
                for i in 0..2 {
                    if let Some(m) = r.maps[i].filter(|_| r.held[i] == want_held) {
                        let slice = r.multicast.and_then(|mc| mc.slice_lines[i].map(|l| (l, mc.programs)));
                        self.bulk_copy(d, i, m, if want_held { None } else { Some(buf) }, slice);
                    }
                }
            }
            self.depth -= 1;
            self.line("}");
        }
        if issuer.is_some() {
            self.depth -= 1;
            self.line("}");
        }
        self.offsets.pop();
    }

    /// The copies of operand `i` of `d` through tensor map `map` into its buffer `buf` (its one
    /// buffer when held), on barrier `bar`: one per 64-element piece of its lines, the piece's
    /// block of the buffer (`MmaDot::atom_pieces`) from the tile's offsets. `slice`: the lines
    /// of this program's slice of each piece and the programs of the multicast's cluster, into
    /// all of whose buffers it copies (`RingBuffers::multicast`).
    fn bulk_copy(&mut self, d: &MmaDot, i: usize, map: usize, buf: Option<&str>, slice: Option<(u32, u32)>) {
        let k = self.k;
        let load = d.direct[i].as_ref().expect("a copied operand");
        let along = if d.trans(i) { d.rows(i).0 } else { d.k };
        let line_dim = if d.trans(i) { d.k } else { d.rows(i).0 };
        let (pieces, piece_bytes) = d.atom_pieces(i);
        let coords: Vec<String> = load
            .axes
            .iter()
            .rev()
            .map(|a| {
                let at = self.offset(*a);
                match slice {
                    _ if *a == along && pieces > 1 => format!("(int)({at} + c * 64)"),
                    Some((lines, _)) if *a == line_dim => format!("(int)({at} + dt_cluster_rank() * {lines})"),
                    _ => format!("(int)({at})"),
                }
            })
            .collect();
        let name = &k.inputs[load.input].name;
        let dst = format!("dt_smem_u32({})", self.buffer(d, i, buf));
        let piece = if pieces > 1 { format!(" + c * {piece_bytes}") } else { String::new() };
        let call = tma_load(&format!("{dst}{piece}"), map, "bar", slice.map(|(lines, programs)| (programs, lines * 128)), &coords);
        self.line(&format!(
            "/* v{}: {name}, {pieces} piece{} of 64 along its last axis */",
            if i == 0 { d.a.0 } else { d.b.0 },
            if pieces == 1 { "" } else { "s" }
        ));
        if pieces > 1 {
            self.line(&format!("for (int c = 0; c < {pieces}; c++) {call}"));
        } else {
            self.line(&call);
        }
    }

    /// The contraction of a warpgroup dot ([`MmaDot::warpgroup`], a `wgmma()` kernel) on its
    /// staged operands (buffer `buf` of their rings), into `acc`: each warpgroup issues one
    /// `m64nNk16` per k16 step over its 64 rows, reading the swizzled buffers through matrix
    /// descriptors (A from registers where the dot reads it from fragments, repacked first), and
    /// waits for them. An operand staged [rows][K] is K-major: step `kk` starts `kk * 2` bytes
    /// into its piece of 64 elements, pieces `lines * 128` bytes apart; one staged [K][rows] is
    /// MN-major: step `kk` starts at line `kk`, its pieces of 64 rows `lines * 128` bytes apart
    /// (the leading byte offset). Eight lines of 128 bytes make a swizzle atom (the stride
    /// byte offset, 1024).
    pub(super) fn warpgroup_steps(&mut self, d: &MmaDot, acc: &str, buf: Option<&str>) {
        self.line("{");
        self.depth += 1;
        self.warpgroup_issue(d, acc, buf, None);
        self.line("dt_wgmma_commit();");
        self.warpgroup_wait(d, acc, 0);
        self.depth -= 1;
        self.line("}");
    }

    /// Waits until at most `pending` groups of warpgroup products are in flight, then fences
    /// accumulator `acc` of `d` so that nothing reads it earlier.
    pub(super) fn warpgroup_wait(&mut self, d: &MmaDot, acc: &str, pending: u32) {
        self.line(&format!("dt_wgmma_wait<{pending}>();"));
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {}; r++) dt_reg_fence({acc}[r]);", d.tile.cols / 2));
    }

    /// Issues the products of [`Self::warpgroup_steps`] without committing or waiting for them;
    /// A from `carried` (fragments packed by [`Self::carry_fragments`]) where given.
    pub(super) fn warpgroup_issue(&mut self, d: &MmaDot, acc: &str, buf: Option<&str>, carried: Option<&str>) {
        let t = d.tile;
        let ty = self.dtype.name();
        let mut descs = Vec::new();
        for (i, name) in ["fa", "fb"].into_iter().enumerate() {
            if i == 0 && d.a_in_fragments {
                continue;
            }
            let desc = d.wgmma_descriptor(i);
            // The warpgroup's 64 rows of A.
            let rows = if i == 0 { format!(" + (tid >> 7) * {}", desc.slice_step) } else { String::new() };
            self.line(&format!("const unsigned {name} = dt_smem_u32({}){rows};", self.buffer(d, i, buf)));
            // The descriptor of the first step, and each step's by adding its byte offset / 16 to
            // the address field (which the offsets, inside shared memory, never carry out of):
            // one add per product instead of the descriptor's masks, shifts and ors. `kk` counts
            // elements of `k`, 16 per product.
            let per_k = desc.k_step / 16;
            let offset = match desc.pieces {
                Some((n, piece)) => format!("(kk >> {}) * {piece} + (kk & {}) * {per_k}", n.trailing_zeros(), n - 1),
                None => format!("kk * {per_k}"),
            };
            self.line(&format!("const unsigned long long {name}_desc = dt_wgmma_desc({name}, {}, {});", desc.lbo, desc.sbo));
            descs.push(format!("{name}_desc + (unsigned long long)(({offset}) >> 4)"));
        }
        let steps = d.reach / 16;
        let regs = t.cols / 2;
        let fas = carried.unwrap_or("fas");
        if d.a_in_fragments && carried.is_none() {
            self.line(&format!("unsigned fas[{steps}][4];"));
            self.carry_fragments(d, "fas");
        }
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {regs}; r++) dt_reg_fence({acc}[r]);"));
        self.line("dt_wgmma_fence();");
        self.line("#pragma unroll");
        let call = if d.a_in_fragments {
            format!("dt_wgmma_m64n{}k16_{ty}_rs<{}>({acc}, {fas}[kk / 16], {})", t.cols, u8::from(d.trans(1)), descs[0])
        } else {
            format!(
                "dt_wgmma_m64n{}k16_{ty}<{}, {}>({acc}, {}, {})",
                t.cols,
                u8::from(d.trans(0)),
                u8::from(d.trans(1)),
                descs[0],
                descs[1]
            )
        };
        self.line(&format!("for (int kk = 0; kk < {}; kk += 16) {call};", d.reach));
    }

    /// Packs the A fragments of warpgroup dot `d` (its computed operand, rounded to the element
    /// type) into `regs[step][4]`, every step's before the fence that orders them before the
    /// products that read them.
    pub(super) fn carry_fragments(&mut self, d: &MmaDot, regs: &str) {
        self.line("#pragma unroll");
        self.line(&format!("for (int kk = 0; kk < {}; kk += 16) {{", d.reach));
        self.depth += 1;
        self.line("unsigned fa[1][4];");
        self.a_from_fragments(d, 1);
        self.line("#pragma unroll");
        self.line(&format!("for (int w = 0; w < 4; w++) {{ {regs}[kk / 16][w] = fa[0][w]; dt_reg_fence_u32({regs}[kk / 16][w]); }}"));
        self.depth -= 1;
        self.line("}");
    }
}

/// Refuses a `wgmma()` kernel whose dots are not all warpgroup products
/// ([`crate::plan::layouts::warpgroup_fits`]), saying what each lacks; checks that the rings
/// give them whole swizzle atoms.
pub(super) fn check_warpgroup_dots(k: &Kernel, plan: &crate::plan::layouts::Plan) -> Result<(), EmitError> {
    if k.warp_specialize {
        return Err(EmitError(format!(
            "kernel `{}` asks for wgmma() and warp_specialize(); a warp-specialized loop computes its dot with wgmma already: drop wgmma()",
            k.name
        )));
    }
    if plan.dots.is_empty() {
        return Err(EmitError(format!(
            "kernel `{}` asks for wgmma(), but none of its rdots runs on the tensor cores (a dot of two loaded or computed tiles over a tensorized dimension); drop wgmma()",
            k.name
        )));
    }
    for (id, d) in &plan.dots {
        if d.warpgroup {
            let ring = d.ring.expect("a warpgroup dot reads a ring");
            if (0..2).any(|i| d.direct[i].is_some() && ring.maps[i].is_none()) {
                return Err(EmitError(format!(
                    "kernel `{}` asks for wgmma(), but the operands of its dot %{} cannot be copied by tensor maps: each must run along its input's contiguous axis, its other axes one element or its lines (at most 256), 2 to 5 axes, at most {} maps",
                    k.name,
                    id.0,
                    dt_core::abi::MAX_TENSOR_MAPS
                )));
            }
            let aligned = (0..2).all(|i| ring.at[i].is_none_or(|at| at % ATOM_WORDS == 0 && d.buffer_words(i) % ATOM_WORDS == 0));
            if !aligned {
                return Err(EmitError(format!("kernel `{}`: the ring buffers of dot %{} are not whole swizzle atoms", k.name, id.0)));
            }
            continue;
        }
        let why = crate::plan::layouts::warpgroup_misfit(d).unwrap_or_else(|| crate::plan::layouts::RINGS_MISFIT.into());
        return Err(EmitError(format!("kernel `{}` asks for wgmma(), but its dot %{} cannot run on it: {why}", k.name, id.0)));
    }
    Ok(())
}
