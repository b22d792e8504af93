//! The GPU emitter, for CUDA C and HIP C (one emitter, a [`Dialect`]).
//!
//! A program is one thread block of `num_warps` warps (wavefronts on AMD). Every value has a
//! register layout, decided per kernel instance before printing (`crate::plan::register_layouts`). Most tiles
//! follow the blocked layout in its simplest form: element `e` of a tile of `N` elements
//! (row-major) lives in register slot `e / T` of thread `e % T`, `T` being the block's thread
//! count, so element-wise work between tiles of one shape needs no communication and loads and
//! stores are coalesced along the last dimension. Dots that the matrix units (or, in f32, the
//! staged fused multiply-adds) can compute, and what is computed from them element-wise, use
//! their accumulator layout instead (see `gpu_mma.rs`). An operand read under another shape or another layout (a
//! broadcast, the input of a reduction, a dot operand) is first published to a shared-memory
//! slot with its producer's mapping; threads then read the elements they need from there. The
//! blocked layout depends on nothing but the thread count.

#[path = "gpu_cluster.rs"]
mod cluster;
#[path = "gpu_hopper.rs"]
mod hopper;
#[path = "gpu_mma.rs"]
mod mma;
#[path = "gpu_output_runs.rs"]
mod output_runs;
#[path = "gpu_overlap.rs"]
mod overlap;
#[path = "gpu_reduce.rs"]
mod reduce;
#[path = "gpu_staged.rs"]
mod staged;
#[path = "gpu_tiles.rs"]
mod tiles;
#[path = "gpu_vector.rs"]
mod vector;

use super::expr::{binary_in, combine, float_lit, unary_in, unary_in_register, Math};
use super::{check_abi, program_coords, EmitError, Lanes};
use crate::abi;
use crate::plan::cluster_waits::WaitPoint;
use crate::plan::layouts::{self, same_layout, Mapping, Plan, RegLayout};
use crate::plan::publishing::{store_layout, Publishing, Reader};
use crate::plan::staged_rows::{AheadLoad, HeldLoad, RowLoads, StagedRing};
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;
use std::fmt::Write;

/// The device runtime every generated GPU file starts with.
pub const RUNTIME: &str = include_str!("../runtime/dt_gpu.h");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Cuda,
    Hip,
}

impl Dialect {
    /// Lanes per warp (NVIDIA) or wavefront (AMD CDNA).
    pub fn warp_size(self) -> u32 {
        match self {
            Dialect::Cuda => 32,
            Dialect::Hip => 64,
        }
    }

    /// The warps (wavefronts) a program of `num_warps` runs with: as many, up to the 1024
    /// threads a block may have. Only AMD's 64-lane wavefronts reach it: `num_warps(32)` runs
    /// as 16 wavefronts there, so one schedule serves both (the emitter is correct for any
    /// thread count; each thread then takes twice the elements).
    pub fn warps(self, num_warps: u32) -> u32 {
        num_warps.min(MAX_THREADS / self.warp_size())
    }
}

/// Most threads a program (a CUDA block, a HIP workgroup) may have.
pub const MAX_THREADS: u32 = 1024;

/// 32-bit registers of one multiprocessor (sm_80, sm_90).
const REGISTERS_PER_SM: u32 = 64 * 1024;
/// The most programs a multiprocessor holds at once on sm_80 and sm_90: a larger minimum in
/// `__launch_bounds__` is out of range, and ptxas ignores it with a warning.
const MAX_PROGRAMS_PER_SM: u32 = 32;

/// A whole file: the runtime, the argument block and every (kernel, dtype, symbol).
pub fn emit_file(header: &str, dialect: Dialect, kernels: &[(&Kernel, DType, String)]) -> Result<(String, Vec<LaunchInfo>), EmitError> {
    let mut out = String::new();
    for line in header.lines() {
        let _ = writeln!(out, "/* {line} */");
    }
    out += RUNTIME;
    out += "\n";
    out += abi::GPU_DECL;
    let mut infos = Vec::new();
    for (k, dtype, symbol) in kernels {
        // The kernel (for any layout, or for whole runs where it `requires(aligned)`), then its
        // twins (pass `plan::twins`): for whole runs, where the code differs; for the
        // specialized sizes, where the schedule asks and whole runs are possible. One plan serves
        // them all.
        let plans = plan_kernel(k, *dtype, dialect)?;
        for (i, layouts) in crate::plan::twins::twins(k, *dtype, plans.older.mapping, &plans.older.registers).into_iter().enumerate() {
            let name = if i == 0 { symbol.clone() } else { layouts.symbol(symbol) };
            let (text, info) = print_kernel(k, *dtype, &name, dialect, layouts, plans.clone())?;
            out += "\n";
            out += &text;
            infos.push(info);
        }
    }
    Ok((out, infos))
}

/// The lane along `d` of element `element` (a C expression) of a tile of `shape`, row-major.
/// Unsigned: an element index is never negative, and so / and % by powers of two are shifts and
/// masks.
fn lane_of(shape: &Shape, d: DimId, element: &str) -> String {
    format!("(int)((unsigned){element} / {}u % {}u)", shape.stride(d), shape.extent(d).unwrap_or(1))
}

/// The layouts a kernel is built for, and the symbols of its twins.
pub use dt_core::manifest::LaunchInfo;
pub use dt_core::select::{specialized_symbol, whole_runs_symbol, Layouts};

fn c_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "dt_f16",
        DType::BF16 => "dt_bf16",
    }
}

/// Kernel `k` built for `dtype` in `dialect` for tensors of `layouts`, as function `symbol`.
pub fn emit_kernel(k: &Kernel, dtype: DType, symbol: &str, dialect: Dialect, layouts: Layouts) -> Result<(String, LaunchInfo), EmitError> {
    print_kernel(k, dtype, symbol, dialect, layouts, plan_kernel(k, dtype, dialect)?)
}

/// The plans of one kernel instance: the GPU plan stage's, where the kernel has one, and the
/// older path's.
#[derive(Clone)]
struct KernelPlans<'k> {
    gpu_plan: Option<crate::plan::GpuPlan>,
    older: crate::plan::OlderPlan<'k>,
}

/// Plans kernel `k` built for `dtype` in `dialect`, after checking that the dialect can have it.
fn plan_kernel(k: &Kernel, dtype: DType, dialect: Dialect) -> Result<KernelPlans<'_>, EmitError> {
    check_abi(k)?;
    if dialect == Dialect::Hip {
        super::check_no_cluster(k, "HIP")?;
        super::check_not_hopper_only(k, "HIP")?;
        super::check_required_target(k, "HIP")?;
    }
    // The decisions of the GPU plan stage (`crate::plan`), where the kernel has any.
    let target = crate::plan::cuda_target(k);
    let gpu_plan = match &target {
        Some(t) => Some(crate::plan::plan(k, dtype, t).map_err(|e| EmitError(e.0))?),
        None => None,
    };
    let ws = gpu_plan.as_ref().and_then(|p| p.warp_specialized.as_ref());
    let older = crate::plan::plan_older(k, dtype, dialect, ws.zip(target.as_ref())).map_err(|e| EmitError(e.0))?;
    if k.wgmma {
        hopper::check_warpgroup_dots(k, &older.registers)?;
    }
    Ok(KernelPlans { gpu_plan, older })
}

/// Prints kernel `k` built for `dtype` in `dialect` for tensors of `layouts`, as function
/// `symbol`, by its plans.
fn print_kernel<'k>(
    k: &'k Kernel,
    dtype: DType,
    symbol: &str,
    dialect: Dialect,
    layouts: Layouts,
    plans: KernelPlans<'k>,
) -> Result<(String, LaunchInfo), EmitError> {
    let KernelPlans { gpu_plan, older } = plans;
    let ws = gpu_plan.as_ref().and_then(|p| p.warp_specialized.clone());
    // The threads that run the kernel's statements: all of them, or a warp-specialized
    // kernel's consumers (its producer warpgroup comes after them).
    let shared_bytes = older.shared_bytes();
    let crate::plan::OlderPlan { mapping, registers: plan, publishing, shared, rows, outputs, cluster, partials } = older;
    let threads = mapping.threads as u32;
    let vector = mapping.vector;
    let mut e = Emitter {
        k,
        dtype,
        math: Math::of_gpu_build(k, dtype),
        threads,
        mapping,
        out: String::new(),
        depth: 1,
        offsets: Vec::new(),
        next: 0,
        publishing,
        slot_offsets: shared.slot_offsets,
        plan,
        partials,
        prefetched: Vec::new(),
        once: false,
        full: Vec::new(),
        holds: Vec::new(),
        cluster,
        dot_rings: shared.dot_rings,
        rows,
        outputs,
        run_window: None,
        whole_runs: layouts != Layouts::Any && crate::plan::twins::runs_start_whole(k, vector),
        specialized: layouts == Layouts::Specialized,
        barrier: if ws.is_some() { hopper::consumer_sync(threads) } else { "__syncthreads();".to_string() },
        ws: ws.clone(),
    };
    if let Some(w) = &ws {
        let text = e.warp_specialized_kernel(w, symbol)?;
        let info = LaunchInfo {
            symbol: symbol.to_string(),
            threads: w.roles.threads(),
            shared_bytes,
            // Its `__cluster_dims__` (DT_CLUSTER) fixes the cluster; the row tells the launcher
            // the size, which must opt in above the portable 8.
            cluster: k.grid.cluster_programs(),
            layouts,
            tensor_maps: w.tensor_maps(),
            persistent: w.persistent,
        };
        return Ok((text, info));
    }
    // max_registers(n): ask for as many resident programs per multiprocessor as n registers per
    // thread leave room for in its 64K registers; the compiler then keeps within n (spilling
    // what does not fit). HIP's second bound means something else, so it is left out there.
    let bounds = match (dialect, k.max_registers) {
        (Dialect::Cuda, Some(n)) => format!("{threads}, {}", (REGISTERS_PER_SM / (n * threads)).clamp(1, MAX_PROGRAMS_PER_SM)),
        _ => threads.to_string(),
    };
    let cluster = match k.grid.cluster_programs() {
        1 => String::new(),
        n => format!(" DT_CLUSTER({n})"),
    };
    let args = abi::GpuArgs::of(k).c_type();
    let tensor_maps = e.plan.tensor_maps.clone();
    if tensor_maps.is_empty() {
        let _ = writeln!(
            e.out,
            "extern \"C\" __global__ void __launch_bounds__({bounds}){cluster} {symbol}(DT_GRID_CONSTANT const {args} args) {{"
        );
    } else {
        // The tensor maps of the rings' bulk copies ahead of the argument block.
        let _ = writeln!(
            e.out,
            "extern \"C\" __global__ void __launch_bounds__({bounds}){cluster} {symbol}(DT_GRID_CONSTANT const dt_tma_args_t<{}, {args}> targs) {{",
            tensor_maps.len()
        );
        e.line(&format!("const {args}& args = targs.args;"));
    }
    if k.wgmma {
        e.line("extern __shared__ float dt_smem_base[];");
        e.line("/* wgmma(): shared memory from a multiple of 1024 bytes, where swizzle atoms start */");
        e.line("float* const dt_smem = dt_smem_base + ((1024u - (dt_smem_u32(dt_smem_base) & 1023u)) & 1023u) / 4;");
    } else {
        e.line("extern __shared__ float dt_smem[];");
    }
    e.line("(void)dt_smem;");
    e.prologue();
    // HIP takes fewer than 2^32 work-items along a grid dimension: a larger grid has rows of
    // blocks (`hip::launch`), the last row's blocks past the last program doing nothing.
    let past_grid = match dialect {
        Dialect::Hip => {
            e.line("const long long pid = (long long)blockIdx.y * gridDim.x + blockIdx.x;");
            Some(format!("if (pid >= {}) return; /* past the last program, in the grid's last row of blocks */", super::program_count(k)))
        }
        Dialect::Cuda => {
            e.line("const long long pid = (long long)blockIdx.x;");
            None
        }
    };
    let idle = (k.grid.multicast.is_some() && ws.is_none()).then_some(super::IDLE);
    for l in program_coords(k, "return;", super::GPU_INDEX, past_grid.as_deref(), idle) {
        e.line(&l);
    }
    e.stmts(&k.body)?;
    e.cluster_wait(WaitPoint::Exit);
    e.out += "}\n";
    if !tensor_maps.is_empty() {
        e.drop_unused_pointers();
    }
    let helpers: String = e.plan.wgmma_shapes().iter().map(|(n, rs)| hopper::wgmma_helper(*n, dtype, *rs)).collect();
    let head = format!(
        "{helpers}/* kernel {} for {dtype}: grid {}; {threads} threads, {shared_bytes} bytes of shared memory */\n",
        k.name, k.grid.origin
    );
    Ok((
        head + &e.out,
        LaunchInfo {
            symbol: symbol.to_string(),
            threads,
            shared_bytes,
            cluster: k.grid.cluster_programs(),
            layouts,
            tensor_maps,
            persistent: false,
        },
    ))
}

/// Bytes a thread moves per vector load or store.
pub(crate) const VECTOR_BYTES: usize = 16;

struct Emitter<'a> {
    k: &'a Kernel,
    dtype: DType,
    /// Approximate math where the kernel stores 16-bit results or asks for it with `fast_math()`
    /// (see [`Math::Fast`]).
    math: Math,
    threads: u32,
    mapping: Mapping,
    out: String,
    depth: usize,
    offsets: Vec<(DimId, String)>,
    next: usize,
    publishing: Publishing,
    slot_offsets: Vec<usize>,
    /// The register layout of every value and accumulator, and the staged dots.
    plan: Plan,
    /// Where reductions in registers write their partials, and which wait at a barrier first
    /// (`plan::partials`).
    partials: crate::plan::partials::Partials,
    /// Loads issued ahead by [`Emitter::pipelined_rows`]: the value and its words and flags.
    prefetched: Vec<(ValueId, String, String)>,
    /// Whether the kernel is built for tensors whose 16-byte runs are whole
    /// ([`Layouts::WholeRuns`]): each run is one aligned access, entirely inside or entirely
    /// outside its tensor, so a run needs its first element's bounds only and no element-wise
    /// fallback.
    whole_runs: bool,
    /// Whether the kernel is the twin built for its specialized sizes ([`Layouts::Specialized`]):
    /// those sizes are constants, and every stride the product of the sizes after it.
    specialized: bool,
    /// Inside a `backward` loop (the second read of a looped row): its 16-byte loads and stores
    /// touch lines for the last time, and say so (`dt_load_once`, `dt_store_once`).
    once: bool,
    /// Per enclosing loop, outermost first, its dimension and whether every lane along it is
    /// valid in its body (full steps, [`Steps::Full`], or steps of one): the innermost loop over
    /// a dimension decides ([`Self::is_full`]), as for [`Self::offsets`].
    full: Vec<(DimId, bool)>,
    /// Conditions that hold in every lane of the code being printed: a causal mask's below
    /// the diagonal (`Loop::diagonal`).
    holds: Vec<ValueId>,
    /// Where a clustered kernel waits on the cluster barrier (`plan::cluster_waits`).
    cluster: crate::plan::cluster_waits::ClusterWaits<'a>,
    /// Where the rings of the loops that feed several dots start in shared memory (4-byte words,
    /// after the slots; `plan::dot_rings`).
    dot_rings: usize,
    /// How the loops over rows or chunks issue their loads ahead (`plan::staged_rows`).
    rows: crate::plan::staged_rows::StagedRows<'a>,
    /// The outputs printed run by run (`plan::output_runs`).
    outputs: crate::plan::output_runs::OutputRuns<'a>,
    /// Inside the loop over the runs of an output printed run by run ([`output_runs`]): the
    /// run's C variable and the registers per run. Loops over a tile's registers or runs cover
    /// that run's only.
    run_window: Option<(&'static str, usize)>,
    /// The barrier of the threads that run the kernel's statements: `__syncthreads();`, or a
    /// named barrier of a warp-specialized kernel's consumers.
    barrier: String,
    /// The plan of a warp-specialized kernel's `rdot` loop (see `gpu_hopper.rs`).
    ws: Option<crate::plan::WarpSpecialized>,
}

/// Where an operand's elements are read from inside an element loop.
enum Source {
    /// The thread's own registers, same shape: `name[r]`.
    Own(String),
    /// A tile in runs of `n` (same shape) read by a blocked reader: `name[r / n]`.
    Run(String, u32),
    /// A one-element tile every thread holds: `name[0]`.
    Replicated(String),
    /// A shared-memory slot holding the whole tile, indexed by the lanes.
    Shared(usize, Shape),
    /// A vector in accumulator rows read along the columns by a tile `t` of its rows: the
    /// register of the reader's row, `name[t.row_slot(r)]`.
    Rows(String, layouts::MmaTile),
    /// An index along a dimension, computed from the reader's lanes (`offset + lane`).
    Index(DimId),
}

impl Emitter<'_> {
    fn line(&mut self, s: &str) {
        let _ = writeln!(self.out, "{}{s}", "    ".repeat(self.depth));
    }

    /// A barrier of the threads that run the kernel's statements.
    fn barrier(&mut self) {
        let b = self.barrier.clone();
        self.line(&b);
    }

    /// The start of a kernel's body: its thread index, sizes and tensor pointers.
    fn prologue(&mut self) {
        let (k, t) = (self.k, c_type(self.dtype));
        self.line("const int tid = (int)threadIdx.x;");
        for (slot, (d, name)) in k.dims.iter().enumerate() {
            match k.specialize.iter().find(|(x, _)| x == d).filter(|_| self.specialized) {
                Some((_, n)) => self.line(&format!("const long long s{slot} = {n}; /* size of {name}, specialized */")),
                None => self.line(&format!("const long long s{slot} = args.sizes[{slot}]; /* size of {name} */")),
            }
            // A dimension whose blocks are the grid's last entry may have no other use.
            self.line(&format!("(void)s{slot};"));
        }
        for (i, input) in k.inputs.iter().enumerate() {
            self.line(&format!("const {t}* __restrict__ in{i} = (const {t}*)args.inputs[{i}]; /* {} */", input.name));
        }
        self.line(&format!("{t}* __restrict__ out = ({t}*)args.output; /* {} */", k.output.name));
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    fn size(&self, d: DimId) -> String {
        format!("s{}", self.k.dim_slot(d))
    }

    fn offset(&self, d: DimId) -> String {
        self.offsets.iter().rev().find(|(x, _)| *x == d).map_or_else(|| super::start_offset(self.k, d), |(_, v)| v.clone())
    }

    /// The validity condition and element offset of an access along `dims` at `lanes` (see
    /// [`super::masked_address`]), with no bound on a dimension whose full steps this is in.
    fn address(&self, dims: &[DimId], lanes: &Lanes, stride: impl Fn(usize) -> String) -> (String, String) {
        let full: Vec<DimId> = dims.iter().copied().filter(|d| self.is_full(*d)).collect();
        super::masked_address(super::GPU_INDEX, self.k, dims, lanes, |d| self.offset(d), stride, &full)
    }

    /// Whether every lane along `d` is valid in the code being printed: the innermost loop over
    /// `d` runs full steps or steps of one ([`Self::full`]).
    pub(super) fn is_full(&self, d: DimId) -> bool {
        self.full.iter().rev().find(|(x, _)| *x == d).is_some_and(|(_, all)| *all)
    }

    /// The stride of axis `a` of input `input`, in the 32-bit arithmetic of [`super::GPU_INDEX`]:
    /// from the argument block, or, in the twin built for specialized sizes (whose tensors are
    /// contiguous), the product of the sizes of the axes after it, which the compiler folds where
    /// those sizes are the constants the twin has.
    fn input_stride(&self, input: usize, a: usize) -> String {
        match self.specialized {
            true => self.contiguous_stride(&self.k.inputs[input].dims[a + 1..]),
            false => format!("({})args.input_strides[{input}][{a}]", super::GPU_INDEX),
        }
    }

    /// [`Self::input_stride`] for every axis of input `input`.
    fn input_strides(&self, input: usize) -> Vec<String> {
        (0..self.k.inputs[input].dims.len()).map(|a| self.input_stride(input, a)).collect()
    }

    /// The stride of axis `a` of the output, as [`Self::input_stride`].
    fn output_stride(&self, a: usize) -> String {
        match self.specialized {
            true => self.contiguous_stride(&self.k.output.dims[a + 1..]),
            false => format!("({})args.output_strides[{a}]", super::GPU_INDEX),
        }
    }

    /// [`Self::output_stride`] for every axis of the output.
    fn output_strides(&self) -> Vec<String> {
        (0..self.k.output.dims.len()).map(|a| self.output_stride(a)).collect()
    }

    /// The stride of an axis of a contiguous tensor whose later axes are `later`.
    fn contiguous_stride(&self, later: &[DimId]) -> String {
        let sizes: Vec<String> = later.iter().map(|d| format!("s{}", self.k.dim_slot(*d))).collect();
        match sizes.is_empty() {
            true => format!("({})1", super::GPU_INDEX),
            false => format!("({})({})", super::GPU_INDEX, sizes.join(" * ")),
        }
    }

    /// Whether every lane of a register run ([`Mapping::run_start`]) of a `shape` tile in `layout`
    /// is valid along `d` exactly where the run's first lane is, in a kernel for whole runs
    /// ([`crate::plan::twins::masks_by_run`]).
    fn masks_by_run(&self, shape: &Shape, layout: RegLayout, d: DimId) -> bool {
        self.whole_runs && crate::plan::twins::masks_by_run(self.k, self.mapping, shape, layout, d)
    }

    /// The validity condition of `lane` along `d`: none where every lane along `d` is valid
    /// ([`Self::full`]), as in [`Self::address`].
    pub(super) fn valid(&self, d: DimId, lane: &str) -> String {
        if self.is_full(d) {
            return super::ALWAYS_VALID.to_string();
        }
        super::in_bounds(super::GPU_INDEX, &self.offset(d), lane, &self.size(d))
    }

    /// Whether the threads' registers hold exactly the `n` elements of a tile (none left over).
    fn covers(&self, n: usize) -> bool {
        n.is_multiple_of(self.threads as usize)
    }

    fn regs(&self, n: usize) -> usize {
        n.div_ceil(self.threads as usize).max(1)
    }

    fn slot(&self, s: usize) -> String {
        format!("(dt_smem + {})", self.slot_offsets[s])
    }

    fn layout(&self, v: ValueId) -> RegLayout {
        self.plan.values[v.0 as usize]
    }

    fn declare(&mut self, name: &str, shape: &Shape) {
        let r = self.regs(shape.elements());
        self.line(&format!("float {name}[{r}];"));
    }

    /// Declares the registers of a tile of `shape` held in `layout`.
    fn declare_in(&mut self, name: &str, shape: &Shape, layout: RegLayout) {
        match layout {
            RegLayout::MmaRows(r) => self.line(&format!("float {name}[{}];", r.slots())),
            _ => self.declare(name, shape),
        }
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), EmitError> {
        // Outputs printed run by run, where the plan has them (`plan::output_runs`).
        let mut i = 0;
        while i < stmts.len() {
            match self.outputs.starting_at(&stmts[i]) {
                Some(seg) => {
                    self.output_by_runs(&stmts[i..i + seg.len], seg)?;
                    i += seg.len;
                }
                None => {
                    self.stmt(&stmts[i])?;
                    i += 1;
                }
            }
        }
        Ok(())
    }

    /// A loop, after the wait on the cluster barrier the plan places before it, if any.
    fn loop_stmt(&mut self, l: &Loop) -> Result<(), EmitError> {
        self.cluster_wait(WaitPoint::BeforeLoop(l));
        self.loop_stmt_inner(l)
    }

    /// A loop: its staged dots pipelined, with its loads issued a step ahead, or plain.
    fn loop_stmt_inner(&mut self, l: &Loop) -> Result<(), EmitError> {
        if let Some(w) = self.ws.clone().filter(|w| w.is_its_loop(l)) {
            return self.consumer_loop(l, &w);
        }
        let staged = self.plan.staged_dots(l);
        if !staged.is_empty() {
            return self.ring_loop(l, &staged);
        }
        // How the plan has the loop issue its loads ahead (`plan::staged_rows`).
        let held = match self.rows.of(l).cloned() {
            Some(RowLoads::Staged(ring)) => return self.staged_rows(l, &ring),
            Some(RowLoads::Registers(loads)) => return self.pipelined_rows(l, &loads),
            Some(RowLoads::Held(held)) => held,
            None => Vec::new(),
        };
        // Loads a loop before this one left in shared memory are read there, once every copy
        // has landed (a single wait, before the loop).
        if !held.is_empty() {
            self.line("dt_cp_async_wait<0>(); /* the block held in shared memory */");
        }
        let o = self.fresh("o");
        if !l.origin.is_empty() {
            self.line(&format!("/* {} */", l.origin));
        }
        // Under a register cap, a loop that runs once is a block: as a `for`, nvcc hoists what
        // the body computes from anything but the loop's offset (layernorm's weight and bias
        // addresses) above it and keeps that live through the whole body, and ptxas spilled it.
        let header = self.k.max_registers.and_then(|_| super::single_step_header(self.k, l, &o));
        self.line(&header.unwrap_or_else(|| super::loop_header(self.k, l, &o)));
        self.depth += 1;
        self.offsets.push((l.dim, o.clone()));
        let full = self.enter_steps(l);
        let prefetched = self.prefetched.len();
        let read = self.read_held(l, &o, &held);
        self.prefetched.extend(read);
        self.stmts(&l.body)?;
        self.cluster_wait(WaitPoint::EndOfBody(l));
        self.prefetched.truncate(prefetched);
        self.full.truncate(full);
        self.offsets.pop();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), EmitError> {
        // A multicast's program past the end (see `program_coords`) computes its cluster's last
        // block with it, to take part in the shared copies, and stores nothing.
        if matches!(s, Stmt::Store { .. }) && self.k.grid.multicast.is_some() && self.ws.is_none() {
            self.line(&format!("if (!{}) {{ /* not past the end of the multicast */", super::IDLE));
            self.depth += 1;
            let stored = self.stmt_here(s);
            self.depth -= 1;
            self.line("}");
            return stored;
        }
        self.stmt_here(s)
    }

    fn stmt_here(&mut self, s: &Stmt) -> Result<(), EmitError> {
        match s {
            Stmt::Let { value, op } => self.op(*value, op)?,
            Stmt::Init { var, value, origin } => {
                let shape = self.k.var(*var).clone();
                if !origin.is_empty() {
                    self.line(&format!("/* {origin} */"));
                }
                let name = format!("acc{}", var.0);
                let layout = self.plan.vars[var.0 as usize];
                self.declare_in(&name, &shape, layout);
                let v = float_lit(*value);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{name}[r] = {v};")));
            }
            Stmt::Update { var, value, .. } if self.plan.fused_update(*var, *value) => {
                self.line(&format!("/* acc{} += v{}: accumulated by the dot above */", var.0, value.0));
            }
            Stmt::Update { var, combine: how, value } => {
                let shape = self.k.var(*var).clone();
                let src = self.sources(Reader::Update(*var, *value), &[*value]);
                let name = format!("acc{}", var.0);
                let layout = self.plan.vars[var.0 as usize];
                self.for_owned(&shape, layout, |e, l| {
                    let v = e.read(&src[0], l);
                    let rhs = match how {
                        Combine::Set => v,
                        Combine::Reduce(op) => combine(*op, &format!("{name}[r]"), &v),
                    };
                    e.line(&format!("{name}[r] = {rhs};"));
                });
            }
            Stmt::Loop(l) => {
                // Accesses inside a backward loop are the last to their lines (`once`).
                let outer = self.once;
                self.once |= l.backward;
                let done = self.loop_stmt(l);
                self.once = outer;
                done?;
            }
            Stmt::Store { value, tile }
                if self.layout(*value) == RegLayout::Blocked
                    && same_layout(&self.k.value(*value).shape, tile)
                    && self.vector_run(tile, &self.k.output.dims).is_some() =>
            {
                let dims = self.k.output.dims.clone();
                let v = self.vector_run(tile, &dims).unwrap_or(1);
                let strides = self.output_strides();
                let stride = |a: usize| strides[a].clone();
                let last = dims.len() - 1;
                let store = format!("dt_store_{}", self.dtype.name());
                let src = format!("v{}", value.0);
                let words = self.pack_words(&src, v);
                self.for_runs(tile, v, |e, lanes, base| {
                    let (inside, addr) = e.address(&dims, lanes, stride);
                    let (end_ok, _) = e.address(&dims, &lanes.shifted(dims[last], v - 1), stride);
                    e.line(&format!("const {} a = {addr};", super::GPU_INDEX));
                    let words: Vec<String> = words.iter().map(|w| w.replace("BASE", &base)).collect();
                    let word = format!("make_uint4({})", words.join(", "));
                    if e.whole_runs {
                        e.line(&format!("if ({inside}) {};", e.vector_store("out + a", &word)));
                        return;
                    }
                    e.line(&format!("if ({} == 1 && {end_ok} && ((unsigned long long)(out + a) & 15) == 0) {{", stride(last)));
                    e.line(&format!("    {};", e.vector_store("out + a", &word)));
                    e.line("} else {");
                    for j in 0..v {
                        let (cond, _) = e.address(&dims, &lanes.shifted(dims[last], j), stride);
                        e.line(&format!("    if ({cond}) out[a + {j} * {}] = {store}({src}[{base} + {j}]);", stride(last)));
                    }
                    e.line("}");
                });
            }
            Stmt::Store { value, tile } if self.stores_in_runs(*value, tile) => {
                let src = self.sources(Reader::Store(*value), &[*value]);
                let Some(Source::Own(name)) = src.first() else {
                    return Err(EmitError(format!("kernel `{}`: a tile stored in runs is not in its own registers", self.k.name)));
                };
                let (RegLayout::Mma(t), name) = (self.layout(*value), name.clone()) else {
                    return Err(EmitError(format!("kernel `{}`: a tile stored in runs is not in fragments", self.k.name)));
                };
                match self.ws.as_ref().and_then(|w| w.store.clone()).filter(|s| s.value == *value) {
                    Some(s) => self.store_staged(&name, t, &s),
                    None => self.store_runs(&name, t, tile),
                }
            }
            Stmt::Store { value, tile } => {
                let src = self.sources(Reader::Store(*value), &[*value]);
                let out_dims = self.k.output.dims.clone();
                let store = format!("dt_store_{}", self.dtype.name());
                // A store of a whole tile runs in the tile's layout; a broadcast one, blocked.
                let layout = store_layout(self.layout(*value), &self.k.value(*value).shape, tile);
                // A replicated tile is stored by one thread.
                let writer = if layout == RegLayout::Replicated { "tid == 0 && " } else { "" };
                self.for_owned(tile, layout, |e, l| {
                    let (cond, addr) = e.address(&out_dims, l, |a| e.output_stride(a));
                    let v = e.read(&src[0], l);
                    e.line(&format!("if ({writer}{cond}) out[{addr}] = {store}({v});"));
                });
            }
        }
        Ok(())
    }

    /// Whether statement `reader` publishes operands through shared memory (their slots).
    fn sources_plan(&self, reader: Reader) -> Option<&Vec<(ValueId, usize)>> {
        self.publishing.reads.iter().find(|(r, _)| *r == reader).map(|(_, l)| l).filter(|l| !l.is_empty())
    }

    fn op(&mut self, id: ValueId, op: &Op) -> Result<(), EmitError> {
        let shape = self.k.value(id).shape.clone();
        let dst = format!("v{}", id.0);
        let layout = self.layout(id);
        match op {
            Op::Const(c) => {
                self.declare_in(&dst, &shape, layout);
                let c = float_lit(*c);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {c};")));
            }
            Op::Scalar(i) => {
                self.declare_in(&dst, &shape, layout);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = args.scalars[{i}];")));
            }
            Op::Len(d) => {
                self.declare_in(&dst, &shape, layout);
                let s = self.size(*d);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = (float){s};")));
            }
            Op::BlockLanes(d) => {
                self.declare_in(&dst, &shape, layout);
                let n = super::block_lanes(self.k, *d);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {n};")));
            }
            Op::Index(d) if self.publishing.indices.iter().any(|(v, _)| *v == id) => {
                self.line(&format!("/* v{}: the index along {}, computed where it is read */", id.0, self.k.dim_name(*d)));
            }
            Op::Index(d) => {
                self.declare_in(&dst, &shape, layout);
                self.for_owned(&shape, layout, |e, l| e.line(&format!("{dst}[r] = {};", e.read(&Source::Index(*d), l))));
            }
            Op::Load { .. } if self.plan.direct_load(id) => {
                self.line(&format!("/* v{}: loaded by the dot that reads it (staged in shared memory) */", id.0));
            }
            Op::Load { input, axes, fill } if self.packed(id) => self.packed_load(id, *input, axes, *fill),
            Op::Load { input, axes, fill } if layout == RegLayout::Blocked && self.vector_run(&shape, axes).is_some() => {
                self.declare_in(&dst, &shape, layout);
                let fill = float_lit(*fill);
                let v = self.vector_run(&shape, axes).unwrap_or(1);
                let strides = self.input_strides(*input);
                let stride = |a: usize| strides[a].clone();
                let last = axes.len() - 1;
                let load = format!("dt_load_{}", self.dtype.name());
                let words = self.unpack_words(v);
                // Each load next to its use (16-bit tiles are held as loaded instead, see
                // `packed_load`, which issues them all first): given loads it may hoist freely,
                // the compiler raised their register use and spilled under `max_registers`
                // (docs/decisions/0008-register-caps.md).
                let aligned = |e: &Self, lanes: &Lanes| {
                    let (end_ok, _) = e.address(axes, &lanes.shifted(axes[last], v - 1), stride);
                    format!("{} == 1 && {end_ok} && ((unsigned long long)(in{input} + a) & 15) == 0", stride(last))
                };
                // Runs a loop staged in shared memory (f32 loads of a held block, Self::prefetchable):
                // read there where `f[c]` says the run was staged.
                let staged = self.prefetched_runs(id);
                self.for_runs(&shape, v, |e, lanes, base| {
                    let (inside, addr) = e.address(axes, lanes, stride);
                    let run = match &staged {
                        Some((q, _)) => format!("{q}[c]"),
                        None => e.vector_load(&format!("in{input} + a"), axes),
                    };
                    // The offset, for the load or the reads element by element of a run not whole.
                    if staged.is_none() || !e.whole_runs {
                        e.line(&format!("const {} a = {addr};", super::GPU_INDEX));
                    }
                    if e.whole_runs && inside == super::ALWAYS_VALID {
                        // Every lane valid here (full steps, a row per step): no branch.
                        e.line(&format!("const uint4 q = {run};"));
                        for (j, w) in words.iter().enumerate() {
                            e.line(&format!("{dst}[{base} + {j}] = {w};"));
                        }
                        return;
                    }
                    let cond = match &staged {
                        Some((_, f)) => format!("{f}[c]"),
                        None if e.whole_runs => inside,
                        None => aligned(e, lanes),
                    };
                    e.line(&format!("if ({cond}) {{"));
                    e.line(&format!("    const uint4 q = {run};"));
                    for (j, w) in words.iter().enumerate() {
                        e.line(&format!("    {dst}[{base} + {j}] = {w};"));
                    }
                    e.line("} else {");
                    if e.whole_runs {
                        for j in 0..v {
                            e.line(&format!("    {dst}[{base} + {j}] = {fill};"));
                        }
                        e.line("}");
                        return;
                    }
                    for j in 0..v {
                        let (cond, _) = e.address(axes, &lanes.shifted(axes[last], j), stride);
                        e.line(&format!("    {dst}[{base} + {j}] = ({cond}) ? {load}(in{input}[a + {j} * {}]) : {fill};", stride(last)));
                    }
                    e.line("}");
                });
            }
            Op::Load { input, axes, fill } => {
                self.declare_in(&dst, &shape, layout);
                let load = format!("dt_load_{}", self.dtype.name());
                let fill = float_lit(*fill);
                self.for_owned(&shape, layout, |e, l| {
                    let (cond, addr) = e.address(axes, l, |a| e.input_stride(*input, a));
                    e.line(&format!("{dst}[r] = ({cond}) ? {load}(in{input}[{addr}]) : {fill};"));
                });
            }
            Op::Unary(u, a) => {
                let src = self.sources(Reader::Let(id), &[*a]);
                self.declare_in(&dst, &shape, layout);
                self.for_owned(&shape, layout, |e, l| {
                    let v = e.read(&src[0], l);
                    e.line(&format!("{dst}[r] = {};", unary_in_register(e.k, e.math, *u, &v)));
                });
            }
            Op::Binary(b, x, y) => {
                let src = self.sources(Reader::Let(id), &[*x, *y]);
                self.declare_in(&dst, &shape, layout);
                // The online form's rescale (the plan's `unit_rescales`): skipped, a copy of the
                // accumulator instead, where every factor this thread holds is 1.
                let skipped = self.plan.unit_rescales.contains(&id).then(|| match self.layout(*y) {
                    RegLayout::MmaRows(rows) => {
                        (0..rows.slots()).map(|r| format!("v{}[{r}] != 1.0f", y.0)).collect::<Vec<_>>().join(" || ")
                    }
                    _ => unreachable!("a rescale's factor is held in rows"),
                });
                if let Some(any_not_one) = &skipped {
                    self.line(&format!("if ({any_not_one}) {{"));
                }
                self.for_owned(&shape, layout, |e, l| {
                    let (vx, vy) = (e.read(&src[0], l), e.read(&src[1], l));
                    e.line(&format!("{dst}[r] = {};", binary_in(e.math, *b, &vx, &vy)));
                });
                if skipped.is_some() {
                    self.line("} else {");
                    self.for_owned(&shape, layout, |e, l| {
                        let vx = e.read(&src[0], l);
                        e.line(&format!("{dst}[r] = {vx};"));
                    });
                    self.line("}");
                }
            }
            Op::Select(c, x, y) => {
                let src = self.sources(Reader::Let(id), &[*c, *x, *y]);
                self.declare_in(&dst, &shape, layout);
                self.for_owned(&shape, layout, |e, l| {
                    let (vc, vx, vy) = (e.read(&src[0], l), e.read(&src[1], l), e.read(&src[2], l));
                    // A condition that holds here is read (as C asks of what is set) and folded.
                    let vc = if e.holds.contains(c) { format!("({vc} != 0.0f || true)") } else { format!("{vc} != 0.0f") };
                    e.line(&format!("{dst}[r] = {vc} ? {vx} : {vy};"));
                });
            }
            Op::MaskFill { value, dim, fill } => {
                let src = self.sources(Reader::Let(id), &[*value]);
                self.declare_in(&dst, &shape, layout);
                let fill = float_lit(*fill);
                let by_run = self.masks_by_run(&shape, layout, *dim);
                self.for_owned(&shape, layout, |e, l| {
                    let cond = match (shape.extent(*dim), by_run) {
                        (None, _) => super::ALWAYS_VALID.into(),
                        // The lane of the first element of the register's run, the same expression
                        // for every register of the run: one test per run, not per lane.
                        (Some(_), true) => {
                            let first = format!("({})", e.mapping.run_start(shape.elements(), "r"));
                            e.valid(*dim, &lane_of(&shape, *dim, &first))
                        }
                        (Some(_), false) => e.valid(*dim, l.lane(*dim)),
                    };
                    let v = e.read(&src[0], l);
                    e.line(&format!("{dst}[r] = ({cond}) ? {v} : {fill};"));
                });
            }
            Op::Reduce { op, value, dim, .. } if layouts::row_reduced_tile(self.k, &self.plan, *value, *dim, id).is_some() => {
                let t = layouts::row_reduced_tile(self.k, &self.plan, *value, *dim, id).expect("checked");
                self.declare_in(&dst, &shape, layout);
                self.mma_row_reduce(*op, &format!("v{}", value.0), t, &dst, &shape, layout);
            }
            Op::Reduce { op, value, dim, .. } if self.plan.reduces_in_registers(self.k, self.mapping, *value, *dim) => {
                let sv = self.k.value(*value).shape.clone();
                let rows = self.mapping.register_reduce(&sv, *dim).unwrap_or(1);
                // A tile in runs holds one lane of each run: the one the reduction reads.
                let lanes_per_register = match self.layout(*value) {
                    RegLayout::Runs(n) => n as usize,
                    _ => 1,
                };
                self.declare_in(&dst, &shape, layout);
                let src = format!("v{}", value.0);
                self.register_reduce(id, *op, &src, &sv, *dim, rows, lanes_per_register, &dst, &shape, layout);
            }
            // Where runs are split into single lanes (see `gpu_runs.rs`), every lane is a run.
            Op::RunReduce { op, value, .. } => {
                let src = format!("v{}", value.0);
                self.declare_in(&dst, &shape, layout);
                match layout {
                    RegLayout::Runs(n) => self.for_owned(&shape, layout, |e, _| {
                        let lanes: Vec<String> = (0..n).map(|j| format!("{src}[r * {n} + {j}]")).collect();
                        e.line(&format!("{dst}[r] = {};", reduce::combine_tree(*op, &lanes)));
                    }),
                    _ => self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {src}[r];"))),
                }
            }
            Op::Reduce { op, value, dim, .. } => {
                let sv = self.k.value(*value).shape.clone();
                self.sources(Reader::Let(id), &[*value]);
                let slot = self.slot(0);
                self.declare_in(&dst, &shape, layout);
                let (n, st) = (sv.extent(*dim).unwrap_or(1) as usize, sv.stride(*dim));
                let ident = float_lit(op.identity());
                let group = reduce::reduce_group(self.threads as usize, shape.elements(), n);
                if group == 1 {
                    // One thread per result element, serially over the reduced lanes.
                    self.for_owned(&shape, layout, |e, l| {
                        let acc = e.fresh("a");
                        e.line(&format!("float {acc} = {ident};"));
                        e.line(&format!(
                            "for (int q = 0; q < {n}; q++) {acc} = {};",
                            combine(*op, &acc, &format!("{slot}[{} + q * {st}]", l.index(&sv)))
                        ));
                        e.line(&format!("{dst}[r] = {acc};"));
                    });
                } else {
                    self.cooperative_reduce(*op, &shape, &sv, n, st, group);
                    let res = self.slot(1);
                    self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {res}[e];")));
                }
            }
            Op::ClusterReduce { op, value, dim } => match self.paired_after(id) {
                Some((paired, rule, second, count)) => self.paired_meeting(rule, *value, Some(id), second, count, *dim, paired),
                None => self.cluster_reduce(*op, *value, *dim, id),
            },
            // Computed at the meeting of the cluster reduction before it.
            Op::ClusterPaired { .. } if self.cluster.meets_before(id) => {}
            // Apart from the first statistic's meeting: a meeting of its own.
            Op::ClusterPaired { rule, value, first, count, dim } => self.paired_meeting(*rule, *first, None, *value, *count, *dim, id),
            Op::Dot { .. } if self.plan.dot(id).is_some() => {
                let d = self.plan.dot(id).expect("planned").clone();
                self.mma_dot(id, &d);
            }
            Op::Dot { a, b, dim } => {
                let (sa, sb) = (self.k.value(*a).shape.clone(), self.k.value(*b).shape.clone());
                self.sources(Reader::Let(id), &[*a, *b]);
                let (s0, s1) = (self.slot(0), self.slot(1));
                self.declare_in(&dst, &shape, layout);
                let (n, ta, tb) = (sa.extent(*dim).unwrap_or(1), sa.stride(*dim), sb.stride(*dim));
                self.for_owned(&shape, layout, |e, l| {
                    let acc = e.fresh("a");
                    e.line(&format!("float {acc} = 0.0f;"));
                    e.line(&format!(
                        "for (int q = 0; q < {n}; q++) {acc} = fmaf({s0}[{} + q * {ta}], {s1}[{} + q * {tb}], {acc});",
                        l.index(&sa),
                        l.index(&sb)
                    ));
                    e.line(&format!("{dst}[r] = {acc};"));
                });
            }
            Op::Var(v) => {
                self.declare_in(&dst, &shape, layout);
                let src = format!("acc{}", v.0);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {src}[r];")));
            }
        }
        Ok(())
    }
}

/// Whether `text` uses the identifier `name` (not merely a longer identifier that starts with it).
fn mentions(text: &str, name: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back().is_none_or(|c| !ident(c));
        let after = text[i + name.len()..].chars().next().is_none_or(|c| !ident(c));
        before && after
    })
}

/// Register slots per thread up to which element loops are unrolled (keeping the tile in
/// registers); larger tiles keep the loop, which bounds code size and compile time, and puts
/// the tile in local memory. 32 lets a memory-bound row step of 16384 elements over 512
/// threads stay in registers (at 16, such a step went to local memory and ran far slower;
/// docs/decisions/0013-per-element-code.md).
const UNROLL_LIMIT: usize = 32;

fn unroll(regs: usize) -> &'static str {
    if regs <= UNROLL_LIMIT {
        "#pragma unroll"
    } else {
        "#pragma unroll 1"
    }
}
