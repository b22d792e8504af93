//! The GPU emitter, for CUDA C and HIP C (one emitter, a [`Dialect`]).
//!
//! A program is one thread block of `num_warps` warps (wavefronts on AMD). Every value has a
//! register layout, decided per kernel instance before printing (`crate::plan::register_layouts`). Most tiles
//! follow the blocked layout in its simplest form: element `e` of a tile of `N` elements
//! (row-major) lives in register slot `e / T` of thread `e % T`, `T` being the block's thread
//! count, so element-wise work between tiles of one shape needs no communication and loads and
//! stores are coalesced along the last dimension. On CUDA, f16 and bf16 dots that tensor cores
//! can compute, and what is computed from them element-wise, use the `mma.sync` accumulator
//! layout instead (see `gpu_mma.rs`). An operand read under another shape or another layout (a
//! broadcast, the input of a reduction, a dot operand) is first published to a shared-memory
//! slot with its producer's mapping; threads then read the elements they need from there. The
//! blocked layout depends on nothing but the thread count.

#[path = "gpu_hopper.rs"]
mod hopper;
#[path = "gpu_mma.rs"]
mod mma;
#[path = "gpu_output_runs.rs"]
mod output_runs;

use super::expr::{binary_in, combine, float_lit, unary_in, Math};
use super::{check_abi, program_coords, EmitError, Lanes};
use crate::abi;
use crate::plan::layouts::{self, same_layout, Mapping, Plan, RegLayout};
use crate::plan::publishing::{plan_publishing, store_layout, Publishing, Reader};
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

/// Launch parameters of one emitted kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchInfo {
    pub symbol: String,
    pub threads: u32,
    /// Dynamic shared memory per program, in bytes.
    pub shared_bytes: u32,
    /// Programs per thread-block cluster (1: not clustered). Above 8 (a size that not every GPU
    /// with clusters allows, [`dt_core::kir::MAX_PORTABLE_CLUSTER`]), the launcher opts the kernel in.
    pub cluster: u32,
    /// The tensor layouts the kernel is built for.
    pub layouts: Layouts,
    /// The tensor maps the kernel takes ahead of its argument block (`dt_tma_args_t`), which
    /// the host encodes per launch; none for most kernels.
    pub tensor_maps: Vec<dt_core::abi::TensorMapSpec>,
    /// Launched with as many programs as the GPU runs at once (one per multiprocessor), fewer
    /// where the grid has fewer: the kernel takes its blocks in turn (`persistent()`).
    pub persistent: bool,
}

/// Most dynamic shared memory a program may ask for (bytes): what an sm_80 GPU and an MI200
/// offer, so a kernel runs on every supported GPU.
pub const MAX_SHARED_BYTES: u32 = 64 * 1024;

/// Most shared memory a kernel with loads staged in shared memory (`num_stages` above 2) may take,
/// its tiles' slots included: what every GPU of sm_80 and newer (sm_86 and sm_89 give 99 KiB) lets
/// a block have. A loop whose stages do not fit keeps its loads one step ahead in registers.
pub const MAX_STAGED_SHARED_BYTES: u32 = 99 * 1024;
/// The same for a clustered kernel's loop that holds its block in shared memory (see
/// `Emitter::staged_rows`): such a kernel runs only on sm_90 and newer, which give a block 227
/// KiB, less room here for the slots of its cluster reductions (static shared memory).
pub const MAX_CLUSTER_STAGED_SHARED_BYTES: u32 = 224 * 1024;
/// 32-bit registers of one multiprocessor (sm_80, sm_90).
const REGISTERS_PER_SM: u32 = 64 * 1024;

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
        let (text, info) = emit_kernel(k, *dtype, symbol, dialect, Layouts::Any)?;
        out += "\n";
        out += &text;
        infos.push(info);
        // A warp-specialized kernel reads through tensor maps, whatever the layouts: no twins.
        if k.warp_specialize {
            continue;
        }
        // The kernel for whole runs, where its code differs (it does wherever a tile is read or
        // written in 16-byte runs).
        let whole = whole_runs_symbol(symbol);
        let (text_whole, info_whole) = emit_kernel(k, *dtype, &whole, dialect, Layouts::WholeRuns)?;
        if text_whole.replace(&whole, symbol) != text {
            out += "\n";
            out += &text_whole;
            infos.push(info_whole);
        }
        // The twin for the sizes the schedule specializes (`specialize`), where it can run: it
        // needs whole runs, which a specialized size along a tensor's last axis that is no
        // multiple of the run never gives.
        let run = (dt_core::kir::RUN_BYTES / dtype.size_bytes()) as u64;
        let last_axes = run_dims(k);
        if !k.specialize.is_empty() && k.specialize.iter().all(|(d, n)| !last_axes.contains(d) || n % run == 0) {
            let (text_exact, info_exact) = emit_kernel(k, *dtype, &specialized_symbol(symbol), dialect, Layouts::Specialized)?;
            out += "\n";
            out += &text_exact;
            infos.push(info_exact);
        }
    }
    Ok((out, infos))
}

/// Whether every 16-byte run of `vector` elements that kernel `k` reads or writes starts at a
/// multiple of `vector` along its tensor's last axis: every block and loop step along such an
/// axis is a multiple of `vector`. Then, given tensors whose runs are whole, each run the kernel
/// accesses is one of them.
fn runs_start_whole(k: &Kernel, vector: usize) -> bool {
    fn steps_ok(body: &[Stmt], run_dims: &[DimId], vector: usize) -> bool {
        body.iter().all(|s| match s {
            Stmt::Loop(l) => {
                (!run_dims.contains(&l.dim) || (l.step as usize).is_multiple_of(vector)) && steps_ok(&l.body, run_dims, vector)
            }
            _ => true,
        })
    }
    let run_dims = run_dims(k);
    run_dims.iter().all(|d| k.grid.block_extent(*d).is_none_or(|b| (b as usize).is_multiple_of(vector)))
        && steps_ok(&k.body, &run_dims, vector)
}

/// The lane along `d` of element `element` (a C expression) of a tile of `shape`, row-major.
/// Unsigned: an element index is never negative, and so / and % by powers of two are shifts and
/// masks.
fn lane_of(shape: &Shape, d: DimId, element: &str) -> String {
    format!("(int)((unsigned){element} / {}u % {}u)", shape.stride(d), shape.extent(d).unwrap_or(1))
}

/// The dimensions that are the last axis of a tensor of `k`: those its 16-byte runs lie along.
/// Where runs are whole, the size of each is a multiple of the run.
fn run_dims(k: &Kernel) -> Vec<DimId> {
    k.inputs.iter().chain([&k.output]).filter_map(|t| t.dims.last().copied()).collect()
}

/// The layouts a kernel is built for, and the symbols of its twins.
pub use dt_core::kir::{specialized_symbol, whole_runs_symbol, Layouts};

fn c_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "dt_f16",
        DType::BF16 => "dt_bf16",
    }
}

pub fn emit_kernel(k: &Kernel, dtype: DType, symbol: &str, dialect: Dialect, layouts: Layouts) -> Result<(String, LaunchInfo), EmitError> {
    check_abi(k)?;
    if dialect == Dialect::Hip {
        super::check_no_cluster(k, "HIP")?;
        super::check_not_warp_specialized(k, "HIP")?;
    }
    // The decisions of the GPU plan stage (`crate::plan`), where the kernel has any.
    let target = crate::plan::cuda_target(k);
    let gpu_plan = match &target {
        Some(t) => Some(crate::plan::plan(k, dtype, t).map_err(|e| EmitError(e.0))?),
        None => None,
    };
    let ws = gpu_plan.as_ref().and_then(|p| p.warp_specialized.clone());
    // The threads that run the kernel's statements: all of them, or a warp-specialized
    // kernel's consumers (its producer warpgroup comes after them).
    let threads = dialect.warps(k.num_warps) * dialect.warp_size();
    let mapping = Mapping::of(k, dtype, dialect);
    let vector = mapping.vector;
    let plan = crate::plan::register_layouts(k, dtype, dialect, ws.as_ref(), mapping);
    let publishing = plan_publishing(k, &plan, mapping);
    let mut offsets = Vec::new();
    // A warp-specialized kernel's ring comes first, its slots after it.
    let mut total = ws.as_ref().map_or(0, |w| w.shared_bytes as usize / 4);
    for n in &publishing.slot_elements {
        offsets.push(total);
        // Every slot starts 16-byte aligned, as `ldmatrix` rows must.
        total += n.next_multiple_of(4);
    }
    let shared_bytes = (total * 4) as u32;
    if let Some(t) = target.filter(|_| ws.is_some()) {
        if shared_bytes > t.shared_bytes_per_block {
            return Err(EmitError(format!(
                "kernel `{}` needs {shared_bytes} bytes of shared memory for its ring and tiles (at most {} on {}); lower num_stages",
                k.name, t.shared_bytes_per_block, t.name
            )));
        }
    } else if shared_bytes > MAX_SHARED_BYTES {
        return Err(EmitError(format!(
            "kernel `{}` needs {shared_bytes} bytes of shared memory for its tiles (at most {MAX_SHARED_BYTES}); use smaller tiles",
            k.name
        )));
    }
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
        slot_offsets: offsets,
        plan,
        partials: Partials::default(),
        prefetched: Vec::new(),
        once: false,
        full: Vec::new(),
        cluster_arrived: false,
        pairs: Vec::new(),
        dialect,
        ring_offset: total,
        ring_used: 0,
        ring_words: 0,
        held: Vec::new(),
        run_window: None,
        whole_runs: layouts != Layouts::Any && runs_start_whole(k, vector),
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
            cluster: 1,
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
        (Dialect::Cuda, Some(n)) => format!("{threads}, {}", (REGISTERS_PER_SM / (n * threads)).max(1)),
        _ => threads.to_string(),
    };
    let cluster = k.grid.cluster.map_or(String::new(), |(_, n)| format!(" DT_CLUSTER({n})"));
    let _ = writeln!(
        e.out,
        "extern \"C\" __global__ void __launch_bounds__({bounds}){cluster} {symbol}(DT_GRID_CONSTANT const {} args) {{",
        abi::GpuArgs::of(k).c_type()
    );
    e.line("extern __shared__ float dt_smem[];");
    e.line("(void)dt_smem;");
    e.prologue();
    e.line("const long long pid = (long long)blockIdx.x;");
    for l in program_coords(k, "return;", super::GPU_INDEX) {
        e.line(&l);
    }
    e.stmts(&k.body)?;
    e.settle_cluster();
    e.out += "}\n";
    // The rings of loads staged in shared memory come after the slots.
    let shared_bytes = shared_bytes + (e.ring_words * 4) as u32;
    let head =
        format!("/* kernel {} for {dtype}: grid {}; {threads} threads, {shared_bytes} bytes of shared memory */\n", k.name, k.grid.origin);
    Ok((
        head + &e.out,
        LaunchInfo {
            symbol: symbol.to_string(),
            threads,
            shared_bytes,
            cluster: k.grid.cluster.map_or(1, |(_, n)| n),
            layouts,
            tensor_maps: Vec::new(),
            persistent: false,
        },
    ))
}

/// Whether `stmts` meet the cluster (a cluster reduction, or a pair's second statistic), at any
/// depth.
fn reduces_over_the_cluster(stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Let { op: Op::ClusterReduce { .. } | Op::ClusterPaired { .. }, .. } => true,
        Stmt::Loop(l) => reduces_over_the_cluster(&l.body),
        _ => false,
    })
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
    /// The register layout of every value and accumulator, and the tensor-core dots.
    plan: Plan,
    partials: Partials,
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
    /// The dimensions whose full steps ([`Steps::Full`]), or steps of one, the printed code is
    /// in: every lane along them is valid.
    full: Vec<DimId>,
    /// Whether the printed code has arrived at a cluster barrier it has not yet waited on (see
    /// [`Emitter::cluster_reduce`]).
    cluster_arrived: bool,
    /// Cluster reductions followed by the second statistic of their pair (found by
    /// [`Emitter::stmts`]): the reduction's value, the pair's, its rule, operand and counts. The
    /// reduction's meeting computes the pair's value too ([`Emitter::paired_meeting`]).
    pairs: Vec<(ValueId, ValueId, PairRule, ValueId, Option<ValueId>)>,
    /// The dialect printed for (loads staged in shared memory need CUDA's asynchronous copies).
    dialect: Dialect,
    /// Where the rings of [`Emitter::staged_rows`] start in shared memory (in 4-byte words, after
    /// every slot), the words the rings of the staged loops the printed code is in take (a
    /// nested loop's ring comes after them), and the most words they ever take together.
    ring_offset: usize,
    ring_used: usize,
    ring_words: usize,
    /// The blocks that staged loops left in shared memory, for later loops over the same block.
    held: Vec<HeldRing>,
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

/// The ring of a staged loop over a block that has a buffer per step of the block
/// ([`Emitter::staged_rows`]): after the loop it holds the whole block of each of its loads, and
/// a later loop over the same block reads them there instead of from memory.
#[derive(Clone, Debug)]
struct HeldRing {
    dim: DimId,
    step: u32,
    /// Where it starts in shared memory, in 4-byte words.
    offset: usize,
    loads: Vec<HeldTile>,
}

/// A load a [`HeldRing`] holds.
#[derive(Clone, Debug)]
struct HeldTile {
    input: usize,
    axes: Vec<DimId>,
    shape: Shape,
    /// The offsets of its other axes (the row it belongs to), as printed.
    at: Vec<String>,
    /// Where its buffers start in the ring (16-byte words), and its 16-byte runs per thread.
    base: usize,
    runs: usize,
}

/// A load of a loop that a [`HeldRing`] holds: where the ring starts in shared memory (4-byte
/// words), where the load's buffers start in it (16-byte words), and its runs per thread.
#[derive(Clone, Copy, Debug)]
struct HeldLoad {
    offset: usize,
    base: usize,
    runs: usize,
}

/// A load that [`Emitter::pipelined_rows`] issues ahead, with the offsets of the single-step
/// loops it sits in.
struct Prefetch {
    value: ValueId,
    input: usize,
    axes: Vec<DimId>,
    at: Vec<(DimId, String)>,
}

/// What the printed code has done so far to the two regions of partials of reductions in
/// registers, so that a reduction can tell whether a barrier must come before its writes.
#[derive(Clone, Copy, Debug, Default)]
struct Partials {
    /// The region the next reduction writes.
    next: usize,
    /// Regions threads may still be reading: read since the last barrier, or unknown.
    dirty: [bool; 2],
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
        super::masked_address(super::GPU_INDEX, self.k, dims, lanes, |d| self.offset(d), stride, &self.full)
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
    /// is valid along `d` exactly where the run's first lane is: in a kernel for whole runs, a
    /// blocked tile dealt in runs whose last dimension is `d`, where `d` is the last axis of a
    /// tensor (so its size and the offsets along it are multiples of the run, [`runs_start_whole`]).
    fn masks_by_run(&self, shape: &Shape, layout: RegLayout, d: DimId) -> bool {
        let n = self.mapping.width(shape.elements());
        let last = shape.0.last().map(|(x, _)| *x);
        let runs_along_d = last == Some(d) && shape.extent(d).is_some_and(|x| (x as usize).is_multiple_of(n));
        self.whole_runs && layout == RegLayout::Blocked && n > 1 && runs_along_d && run_dims(self.k).contains(&d)
    }

    /// The validity condition of `lane` along `d`: none where every lane along `d` is valid
    /// ([`Self::full`]), as in [`Self::address`].
    fn valid(&self, d: DimId, lane: &str) -> String {
        if self.full.contains(&d) {
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

    /// Writes `v` (in registers) to shared-memory slot `s` as a row-major tile, between
    /// barriers: each thread writes the elements its layout gives it.
    fn publish(&mut self, v: ValueId, s: usize) {
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
            layout => self.for_owned(&shape, layout, |e, _| e.line(&format!("{slot}[e] = v{}[r];", v.0))),
        }
        self.barrier();
    }

    /// Publishes what statement `reader` reads across threads or layouts; returns how each
    /// operand is read.
    fn sources(&mut self, reader: Reader, operands: &[ValueId]) -> Vec<Source> {
        let plan = self.publishing.reads.iter().find(|(r, _)| *r == reader).map(|(_, l)| l.clone()).unwrap_or_default();
        for (o, s) in &plan {
            self.publish(*o, *s);
        }
        let iter_layout = match reader {
            Reader::Let(v) => self.layout(v),
            Reader::Update(var, _) => self.plan.vars[var.0 as usize],
            Reader::Store(_) => RegLayout::Blocked,
        };
        operands
            .iter()
            .map(|o| match (plan.iter().find(|(x, _)| x == o), self.layout(*o)) {
                (Some((_, s)), _) => Source::Shared(*s, self.k.value(*o).shape.clone()),
                (None, RegLayout::Replicated) => Source::Replicated(format!("v{}", o.0)),
                (None, RegLayout::Runs(n)) if iter_layout != RegLayout::Runs(n) => Source::Run(format!("v{}", o.0), n),
                (None, _) => Source::Own(format!("v{}", o.0)),
            })
            .collect()
    }

    fn read(&self, src: &Source, lanes: &Lanes) -> String {
        match src {
            Source::Own(name) => format!("{name}[r]"),
            Source::Run(name, n) => format!("{name}[r / {n}]"),
            Source::Replicated(name) => format!("{name}[0]"),
            Source::Shared(s, shape) => format!("{}[{}]", self.slot(*s), lanes.index(shape)),
        }
    }

    /// Loops over the elements of `shape` this thread owns under `layout`, with the lane along
    /// each dimension decoded (only the lanes the body uses are declared); `r` is the register
    /// slot and `e` the row-major index of the element.
    fn for_owned(&mut self, shape: &Shape, layout: RegLayout, body: impl FnOnce(&mut Self, &Lanes)) {
        match layout {
            RegLayout::Mma(t) => self.for_owned_mma(shape, t, body),
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
    fn for_blocked(&mut self, shape: &Shape, pragma: &str, body: impl FnOnce(&mut Self, &Lanes)) {
        self.for_registers(shape, pragma, 1, body);
    }

    /// [`Self::for_owned`] for a tile in runs of `n` lanes: register `r` holds the run that starts
    /// at blocked register `r * n` (`n` = 1: the blocked layout), and `e` is its first element.
    fn for_registers(&mut self, shape: &Shape, pragma: &str, n: usize, body: impl FnOnce(&mut Self, &Lanes)) {
        let elements = shape.elements();
        let r = self.regs(elements) / n;
        let first = if n == 1 { "r".to_string() } else { format!("r * {n}") };
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
        self.line(&format!("const int e = {};", self.mapping.element(elements, &first)));
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
    fn with_lanes(&mut self, shape: &Shape, body: impl FnOnce(&mut Self, &Lanes)) {
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
    fn for_owned_mma(&mut self, shape: &Shape, t: layouts::MmaTile, body: impl FnOnce(&mut Self, &Lanes)) {
        let r = self.regs(shape.elements());
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {r}; r++) {{"));
        self.depth += 1;
        let lanes = Lanes(shape.0.iter().map(|(d, _)| (*d, self.fresh("l"))).collect());
        let before = std::mem::take(&mut self.out);
        body(self, &lanes);
        let inner = std::mem::replace(&mut self.out, before);
        let (row, col) = t.row_col("r");
        let e = if mentions(&inner, "e") { format!("const int e = {};", lanes.index(shape)) } else { String::new() };
        for (d, l) in &lanes.0 {
            if mentions(&inner, l) || mentions(&e, l) {
                let v = if *d == t.m {
                    row.as_str()
                } else if *d == t.n {
                    col.as_str()
                } else {
                    "0"
                };
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

    /// A reduction by groups of `group` consecutive threads per result element: each thread
    /// combines a strided share of the reduced lanes (read from slot 0), the group combines
    /// through shuffles within `group` lanes, and its first thread writes the result to slot 1.
    fn cooperative_reduce(&mut self, op: dt_core::algo::RedOp, result: &Shape, input: &Shape, n: usize, st: usize, group: usize) {
        let (src, res, nres) = (self.slot(0), self.slot(1), result.elements());
        let ident = float_lit(op.identity());
        self.line(&format!("/* cooperative reduction: {group} threads per result */"));
        self.line("{");
        self.depth += 1;
        self.line(&format!("const int j = tid / {group};"));
        self.line(&format!("const int q = tid % {group};"));
        self.line(&format!("float p = {ident};"));
        self.line(&format!("if (j < {nres}) {{"));
        self.depth += 1;
        let lanes = Lanes(result.0.iter().map(|(d, _)| (*d, self.fresh("l"))).collect());
        let base = lanes.index(input);
        for ((d, ext), (_, l)) in result.0.iter().zip(&lanes.0) {
            if mentions(&base, l) {
                self.line(&format!("const int {l} = (j / {}) % {ext};", result.stride(*d)));
            }
        }
        self.line(&format!("for (int i = q; i < {n}; i += {group}) p = {};", combine(op, "p", &format!("{src}[{base} + i * {st}]"))));
        self.depth -= 1;
        self.line("}");
        self.line(&format!(
            "for (int m = {}; m > 0; m >>= 1) p = {};",
            group / 2,
            combine(op, "p", &format!("dt_shfl_xor(p, m, {group})"))
        ));
        self.line(&format!("if (q == 0 && j < {nres}) {res}[j] = p;"));
        self.depth -= 1;
        self.line("}");
        self.barrier();
    }

    /// A reduction whose rows each thread holds a share of in its own registers (see
    /// [`Mapping::register_reduce`]): each thread combines its share of every row, each warp
    /// combines its threads' partials with shuffles (in groups of 32 lanes, which is all of a
    /// warp on NVIDIA and half a wavefront on AMD), and the groups' partials meet in slot 1,
    /// where the thread holding each result (under `layout`: every thread when it is
    /// replicated) combines them. The tile never goes through shared memory.
    #[allow(clippy::too_many_arguments)]
    fn register_reduce(
        &mut self,
        op: dt_core::algo::RedOp,
        src: &str,
        input: &Shape,
        dim: DimId,
        rows: usize,
        lanes_per_register: usize,
        dst: &str,
        result: &Shape,
        layout: RegLayout,
    ) {
        let per_row = input.extent(dim).unwrap_or(1) as usize / self.threads as usize / lanes_per_register;
        let groups = self.threads as usize / 32;
        let (ident, red) = (float_lit(op.identity()), self.slot(1));
        if groups == 1 {
            // One warp: after the shuffles every lane holds each row's result; no shared memory,
            // no barrier.
            self.line(&format!("/* reduction in registers: {per_row} per thread and row, then shuffles */"));
        } else {
            self.line(&format!("/* reduction in registers: {per_row} per thread and row, then shuffles, then {groups} groups of 32 */"));
        }
        self.line("{");
        self.depth += 1;
        self.line(&format!("float p[{rows}];"));
        self.line("#pragma unroll");
        self.line(&format!("for (int i = 0; i < {rows}; i++) {{"));
        self.depth += 1;
        self.line(&format!("p[i] = {ident};"));
        self.line("#pragma unroll");
        self.line(&format!("for (int q = 0; q < {per_row}; q++) p[i] = {};", combine(op, "p[i]", &format!("{src}[i * {per_row} + q]"))));
        self.line(&format!("for (int m = 16; m > 0; m >>= 1) p[i] = {};", combine(op, "p[i]", "dt_shfl_xor(p[i], m, 32)")));
        self.depth -= 1;
        self.line("}");
        if groups == 1 {
            self.for_owned(result, layout, |e, _| e.line(&format!("{dst}[r] = p[e];")));
            self.depth -= 1;
            self.line("}");
            return;
        }
        // The partials alternate between two regions: a region still being read by the last
        // reduction that used it needs a barrier first; otherwise the one between them served.
        let region = self.partials.next;
        if self.partials.dirty[region] {
            self.barrier();
        }
        let red = format!("({red} + {})", region * self.publishing.partials);
        self.line(&format!("if (tid % 32 == 0) {{ for (int i = 0; i < {rows}; i++) {red}[(tid / 32) * {rows} + i] = p[i]; }}"));
        self.barrier();
        self.partials = Partials { next: 1 - region, dirty: [false, false] };
        self.partials.dirty[region] = true;
        self.depth -= 1;
        self.line("}");
        self.for_owned(result, layout, |e, _| {
            let acc = e.fresh("a");
            e.line(&format!("float {acc} = {ident};"));
            e.line(&format!("for (int g = 0; g < {groups}; g++) {acc} = {};", combine(op, &acc, &format!("{red}[g * {rows} + e]"))));
            e.line(&format!("{dst}[r] = {acc};"));
        });
    }

    /// [`Op::ClusterReduce`]: each program writes its partial to a shared-memory buffer; after a
    /// cluster barrier every program reads the buffers of all of them through distributed shared
    /// memory and combines them in one order, so that all get the same result. A one-element
    /// partial is read by the first lanes of every warp, one program each, and combined by
    /// shuffles; a larger one by each thread for its elements, program after program. Each
    /// program then arrives at a second barrier, which it waits on only before it writes a
    /// buffer again or exits ([`Self::settle_cluster`]): no program overwrites a buffer, or
    /// leaves, before every program has read it, and none waits for that in between.
    fn cluster_reduce(&mut self, op: dt_core::algo::RedOp, value: ValueId, dim: DimId, id: ValueId) {
        let shape = self.k.value(id).shape.clone();
        let (dst, src, buf) = (format!("v{}", id.0), format!("v{}", value.0), self.fresh("cl"));
        let ranks = self.k.grid.cluster_size(dim).unwrap_or(1);
        let ident = float_lit(op.identity());
        self.declare(&dst, &shape);
        self.line(&format!("/* {} over the {ranks} programs of the cluster along {} */", op.name(), self.k.dim_name(dim)));
        self.line(&format!("__shared__ float {buf}[{}];", shape.elements()));
        self.settle_cluster();
        let replicated = self.layout(value) == RegLayout::Replicated && self.layout(id) == RegLayout::Replicated;
        match self.layout(value) {
            RegLayout::Replicated => self.line(&format!("if (tid == 0) {buf}[0] = {src}[0];")),
            layout => self.for_owned(&shape, layout, |e, _| e.line(&format!("{buf}[e] = {src}[r];"))),
        }
        self.line("dt_cluster_sync();");
        if replicated {
            self.line("{");
            self.line(&format!("    float p = (tid % 32) < {ranks} ? dt_cluster_load(&{buf}[0], (unsigned)(tid % 32)) : {ident};"));
            self.line(&format!("    for (int m = 16; m > 0; m >>= 1) p = {};", combine(op, "p", "dt_shfl_xor(p, m, 32)")));
            self.line(&format!("    {dst}[0] = p;"));
            self.line("}");
        } else {
            self.for_owned(&shape, self.layout(id), |e, _| {
                let acc = e.fresh("a");
                e.line(&format!("float {acc} = {ident};"));
                e.line(&format!(
                    "for (unsigned q = 0; q < {ranks}u; q++) {acc} = {};",
                    combine(op, &acc, &format!("dt_cluster_load(&{buf}[e], q)"))
                ));
                e.line(&format!("{dst}[r] = {acc};"));
            });
        }
        self.line("dt_cluster_arrive();");
        self.cluster_arrived = true;
    }

    /// The pair whose second statistic follows cluster reduction `met` in its statement list.
    fn paired_after(&self, met: ValueId) -> Option<(ValueId, PairRule, ValueId, Option<ValueId>)> {
        self.pairs.iter().find(|p| p.0 == met).map(|p| (p.1, p.2, p.3, p.4))
    }

    /// [`Op::ClusterPaired`]: one meeting for a row's two statistics. Each program writes its
    /// `first` statistic, its share `second` of the second one (about its own first) and, for
    /// layernorm, its `count` of lanes to a buffer; after a cluster barrier every program reads
    /// every program's and combines them ([`PairRule`]) into the second statistic `id` and, where
    /// the meeting stands for the first statistic's cluster reduction too (`first_met`), into
    /// that one's value. Values every thread holds are read by the first lanes of every warp, one
    /// program each, and combined by shuffles; others by the thread that holds them, program
    /// after program. The closing barrier is as [`Self::cluster_reduce`]'s.
    #[allow(clippy::too_many_arguments)]
    fn paired_meeting(
        &mut self,
        rule: PairRule,
        first: ValueId,
        first_met: Option<ValueId>,
        second: ValueId,
        count: Option<ValueId>,
        dim: DimId,
        id: ValueId,
    ) {
        let shape = self.k.value(id).shape.clone();
        let ranks = self.k.grid.cluster_size(dim).unwrap_or(1);
        let buf = self.fresh("cl");
        let dst = format!("v{}", id.0);
        self.declare(&dst, &shape);
        if let Some(met) = first_met {
            self.declare(&format!("v{}", met.0), &shape);
        }
        self.line(&format!(
            "/* {} over the {ranks} programs of the cluster along {}, at one meeting */",
            rule.name(),
            self.k.dim_name(dim)
        ));
        self.line(&format!("__shared__ float {buf}[{}];", 3 * shape.elements()));
        self.settle_cluster();
        let parts: Vec<(usize, ValueId)> = [Some((0, first)), Some((1, second)), count.map(|c| (2, c))].into_iter().flatten().collect();
        for &(slot, v) in &parts {
            match self.layout(v) {
                RegLayout::Replicated => self.line(&format!("if (tid == 0) {buf}[{slot}] = v{}[0];", v.0)),
                layout => self.for_owned(&shape, layout, |e, _| e.line(&format!("{buf}[3 * e + {slot}] = v{}[r];", v.0))),
            }
        }
        self.line("dt_cluster_sync();");
        let math = self.math;
        let exp = move |a: &str| unary_in(math, dt_core::algo::UnOp::Exp, a);
        let mut all = parts.iter().map(|p| p.1).chain([id]).chain(first_met);
        if all.all(|v| self.layout(v) == RegLayout::Replicated) {
            // Lane q < ranks reads program q's shares; the warp combines them.
            let shuffle = |e: &mut Self, v: &str, max: bool| {
                let c = if max { format!("fmaxf({v}, dt_shfl_xor({v}, m, 32))") } else { format!("{v} + dt_shfl_xor({v}, m, 32)") };
                e.line(&format!("    for (int m = 16; m > 0; m >>= 1) {v} = {c};"));
            };
            let none = if rule == PairRule::ExpScaled { "(-INFINITY)" } else { "0e0f" };
            self.line("{");
            self.line("    const unsigned q = (unsigned)(tid % 32);");
            self.line(&format!("    const float f = q < {ranks}u ? dt_cluster_load(&{buf}[0], q) : {none};"));
            self.line(&format!("    const float s = q < {ranks}u ? dt_cluster_load(&{buf}[1], q) : 0e0f;"));
            let met_value = match rule {
                PairRule::ExpScaled => {
                    self.line("    float top = f;");
                    shuffle(self, "top", true);
                    self.line(&format!("    float t = f == (-INFINITY) ? 0e0f : s * {};", exp("f - top")));
                    "top"
                }
                PairRule::SquaredDeviation => {
                    self.line(&format!("    const float n = q < {ranks}u ? dt_cluster_load(&{buf}[2], q) : 0e0f;"));
                    self.line("    float total = f, lanes = n;");
                    shuffle(self, "total", false);
                    shuffle(self, "lanes", false);
                    self.line("    const float d = n > 0e0f ? f / n - total / fmaxf(lanes, 1e0f) : 0e0f;");
                    self.line("    float t = n > 0e0f ? s + n * d * d : 0e0f;");
                    "total"
                }
            };
            shuffle(self, "t", false);
            if let Some(met) = first_met {
                self.line(&format!("    v{}[0] = {met_value};", met.0));
            }
            self.line(&format!("    {dst}[0] = t;"));
            self.line("}");
        } else {
            let load = |slot: usize| format!("dt_cluster_load(&{buf}[3 * e + {slot}], q)");
            let each = |body: String| format!("    for (unsigned q = 0; q < {ranks}u; q++) {{ {body} }}");
            let combined = |e: &mut Self, target: ValueId, met: bool| {
                let layout = e.layout(target);
                e.for_owned(&shape, layout, |e, _| {
                    e.line("{");
                    let result = match rule {
                        PairRule::ExpScaled => {
                            e.line("    float top = (-INFINITY), t = 0e0f;");
                            e.line(&each(format!("top = fmaxf(top, {});", load(0))));
                            e.line(&each(format!("const float f = {}; t += f == (-INFINITY) ? 0e0f : {} * {};", load(0), load(1), exp("f - top"))));
                            if met { "top" } else { "t" }
                        }
                        PairRule::SquaredDeviation => {
                            e.line("    float total = 0e0f, lanes = 0e0f, t = 0e0f;");
                            e.line(&each(format!("total += {}; lanes += {};", load(0), load(2))));
                            e.line(&each(format!(
                                "const float n = {}; const float d = n > 0e0f ? {} / n - total / fmaxf(lanes, 1e0f) : 0e0f; t += n > 0e0f ? {} + n * d * d : 0e0f;",
                                load(2),
                                load(0),
                                load(1)
                            )));
                            if met { "total" } else { "t" }
                        }
                    };
                    e.line(&format!("    v{}[r] = {result};", target.0));
                    e.line("}");
                });
            };
            combined(self, id, false);
            if let Some(met) = first_met {
                combined(self, met, true);
            }
        }
        self.line("dt_cluster_arrive();");
        self.cluster_arrived = true;
    }

    /// Waits on the cluster barrier arrived at after the last cluster reduction, if any: before
    /// a buffer of the cluster's is written again (the next reduction), before a loop that makes
    /// cluster reductions of its own and after any other loop ([`Self::loop_stmt`]), at the end
    /// of a loop's body (so that an arrival and its wait are in one iteration of one loop), and
    /// before the program exits.
    fn settle_cluster(&mut self) {
        if std::mem::take(&mut self.cluster_arrived) {
            self.line("dt_cluster_wait();");
        }
    }

    /// The run length for 16-byte accesses to a tensor indexed along `axes` by a tile of
    /// `shape`, if runs apply: the tile is dealt in runs (see [`Mapping`]) and a run lies along the
    /// tensor's last axis, within one row of the tile.
    fn vector_run(&self, shape: &Shape, axes: &[DimId]) -> Option<usize> {
        let v = self.mapping.width(shape.elements());
        let (last, ext) = *shape.0.last()?;
        (v > 1 && axes.last() == Some(&last) && (ext as usize).is_multiple_of(v)).then_some(v)
    }

    /// Loops over the runs of `v` consecutive elements of `shape` this thread holds, with the
    /// lanes of each run's first element decoded; `body` gets the lanes and the C expression of
    /// the run's first register.
    fn for_runs(&mut self, shape: &Shape, v: usize, body: impl FnOnce(&mut Self, &Lanes, String)) {
        let runs = self.regs(shape.elements()) / v;
        let t = self.threads;
        match self.run_window {
            Some((run, w)) if w == v => {
                self.line("{");
                self.line(&format!("    const int c = {run};"));
            }
            _ => {
                self.line(unroll(runs));
                self.line(&format!("for (int c = 0; c < {runs}; c++) {{"));
            }
        }
        self.depth += 1;
        let before = std::mem::take(&mut self.out);
        self.with_lanes(shape, |e, lanes| body(e, lanes, format!("c * {v}")));
        let inner = std::mem::replace(&mut self.out, before);
        // A run read whole from a staged buffer needs neither its element nor its lanes.
        if mentions(&inner, "e") {
            self.line(&format!("const int e = (c * {t} + tid) * {v};"));
        }
        self.out += &inner;
        self.depth -= 1;
        self.line("}");
    }

    /// The `v` values in the 16 bytes of `uint4 q`, as f32 expressions, in memory order.
    fn unpack_words(&self, v: usize) -> Vec<String> {
        let word = |i: usize| ["q.x", "q.y", "q.z", "q.w"][i];
        match self.dtype {
            DType::F32 => (0..v).map(|j| format!("__uint_as_float({})", word(j))).collect(),
            DType::F16 | DType::BF16 => {
                let load = format!("dt_load_{}", self.dtype.name());
                (0..v)
                    .map(|j| {
                        if j % 2 == 0 {
                            format!("{load}((unsigned short)({} & 0xffffu))", word(j / 2))
                        } else {
                            format!("{load}((unsigned short)({} >> 16))", word(j / 2))
                        }
                    })
                    .collect()
            }
        }
    }

    /// The four 32-bit words holding registers `BASE ..` of `src` stored as the element type.
    fn pack_words(&self, src: &str, v: usize) -> Vec<String> {
        match self.dtype {
            DType::F32 => (0..v).map(|j| format!("__float_as_uint({src}[BASE + {j}])")).collect(),
            DType::F16 | DType::BF16 => {
                let pack = format!("dt_pack2_{}", self.dtype.name());
                (0..v / 2).map(|w| format!("{pack}({src}[BASE + {}], {src}[BASE + {}])", 2 * w, 2 * w + 1)).collect()
            }
        }
    }

    /// A 16-byte load from `addr` (an element pointer) of an input indexed along `axes`. In a
    /// `backward` loop, an input indexed along every dimension of the output (the row, not
    /// layernorm's weights, which every row reads) is read for the last time.
    fn vector_load(&self, addr: &str, axes: &[DimId]) -> String {
        if self.once && self.k.output.dims.iter().all(|d| axes.contains(d)) {
            format!("dt_load_once((const uint4*)({addr}))")
        } else {
            format!("*(const uint4*)({addr})")
        }
    }

    /// A 16-byte store of `word` to `addr` (an element pointer).
    fn vector_store(&self, addr: &str, word: &str) -> String {
        if self.once {
            format!("dt_store_once((uint4*)({addr}), {word})")
        } else {
            format!("*(uint4*)({addr}) = {word}")
        }
    }

    /// Issues the 16-byte loads of a 16-bit tile of `input` read along `axes` at the current
    /// offsets into `q[c]`, with `fast[c]` saying which runs it loaded (the others are read one
    /// element at a time where they are unpacked).
    fn issue_vector_loads(&mut self, shape: &Shape, input: usize, axes: &[DimId], q: &str, fast: &str) {
        let v = self.vector_run(shape, axes).unwrap_or(1);
        self.for_runs(shape, v, |e, lanes, _| {
            e.vector_access(input, axes, lanes, v, fast, true);
            e.line(&format!("if ({fast}[c]) {q}[c] = {};", e.vector_load(&format!("in{input} + a"), axes)));
        });
    }

    /// Prints, for the run at `lanes` of a load of input `input`, its element offset `a` (where
    /// the caller `reads_memory` there, or checks its alignment) and `fast[c]`: whether it is one
    /// 16-byte access (contiguous, inside the tensor, aligned; for whole runs, inside).
    fn vector_access(&mut self, input: usize, axes: &[DimId], lanes: &Lanes, v: usize, fast: &str, reads_memory: bool) {
        let strides = self.input_strides(input);
        let stride = |a: usize| strides[a].clone();
        let last = axes.len() - 1;
        let (inside, addr) = self.address(axes, lanes, stride);
        if self.whole_runs {
            if reads_memory {
                self.line(&format!("const {} a = {addr};", super::GPU_INDEX));
            }
            self.line(&format!("{fast}[c] = {inside};"));
            return;
        }
        self.line(&format!("const {} a = {addr};", super::GPU_INDEX));
        let (end_ok, _) = self.address(axes, &lanes.shifted(axes[last], v - 1), stride);
        self.line(&format!("{fast}[c] = {} == 1 && {end_ok} && ((unsigned long long)(in{input} + a) & 15) == 0;", stride(last)));
    }

    /// Whether value `id` is a 16-bit load kept as loaded: in a 16-bit kernel, a tile read in
    /// 16-byte runs whose fill the element type holds exactly. Its registers hold the raw words
    /// (`dt_f16s<R>` / `dt_bf16s<R>` of the runtime), half the registers of the f32 values, and
    /// every read of an element widens it there (one instruction); so a row kept across the
    /// reductions of layernorm takes 8 registers per 16 elements, not 16.
    fn packed(&self, id: ValueId) -> bool {
        self.dtype.size_bytes() == 2 && self.read_in_runs(id)
    }

    /// Whether value `id` is a load read in 16-byte runs that its element type holds as loaded
    /// (fill included): the loads a loop may issue ahead ([`Self::prefetchable`]).
    fn read_in_runs(&self, id: ValueId) -> bool {
        let Op::Load { axes, fill, .. } = self.def(id) else { return false };
        let shape = &self.k.value(id).shape;
        self.layout(id) == RegLayout::Blocked
            && !self.plan.direct_load(id)
            && self.vector_run(shape, axes).is_some()
            && self.dtype.round(*fill) == *fill
    }

    /// The words and flags of load `id` where a loop issued its runs ahead ([`Self::prefetched`]).
    fn prefetched_runs(&self, id: ValueId) -> Option<(String, String)> {
        self.prefetched.iter().find(|(x, ..)| *x == id).map(|(_, q, f)| (q.clone(), f.clone()))
    }

    /// The operation that defines value `id`.
    fn def(&self, id: ValueId) -> &Op {
        fn find(stmts: &[Stmt], id: ValueId) -> Option<&Op> {
            stmts.iter().find_map(|s| match s {
                Stmt::Let { value, op } if *value == id => Some(op),
                Stmt::Loop(l) => find(&l.body, id),
                _ => None,
            })
        }
        find(&self.k.body, id).expect("every value is defined")
    }

    /// A [`Self::packed`] load: its 16-byte runs (issued ahead by the block loop, or here), and
    /// element by element, as raw 16-bit values, the runs that are partly out of bounds,
    /// misaligned or strided (`fill` where out of bounds).
    fn packed_load(&mut self, id: ValueId, input: usize, axes: &[DimId], fill: f32) {
        let shape = self.k.value(id).shape.clone();
        let v = self.vector_run(&shape, axes).unwrap_or(1);
        debug_assert_eq!(v, 8, "16-byte runs of 16-bit values");
        let runs = self.regs(shape.elements()) / v;
        let dst = format!("v{}", id.0);
        let strides = self.input_strides(input);
        let stride = |a: usize| strides[a].clone();
        let last = axes.len() - 1;
        let bits = match self.dtype {
            DType::BF16 => half::bf16::from_f32(fill).to_bits(),
            _ => half::f16::from_f32(fill).to_bits(),
        };
        self.line(&format!("dt_{}s<{}> {dst}; /* 16-bit values as loaded */", self.dtype.name(), runs * v));
        let (q, fast) = match self.prefetched_runs(id) {
            Some(names) => names,
            None => {
                let (q, fast) = (self.fresh("q"), self.fresh("f"));
                self.line(&format!("uint4 {q}[{runs}];"));
                self.line(&format!("bool {fast}[{runs}];"));
                self.issue_vector_loads(&shape, input, axes, &q, &fast);
                (q, fast)
            }
        };
        self.for_runs(&shape, v, |e, lanes, _| {
            let (_, addr) = e.address(axes, lanes, stride);
            e.line(&format!("if ({fast}[c]) {{"));
            e.line(&format!("    {dst}.w[c] = {q}[c];"));
            e.line("} else {");
            if e.whole_runs {
                let word = (bits as u32) | ((bits as u32) << 16);
                e.line(&format!("    {dst}.w[c] = make_uint4({word:#x}u, {word:#x}u, {word:#x}u, {word:#x}u);"));
                e.line("}");
                return;
            }
            e.line(&format!("    const {} a = {addr};", super::GPU_INDEX));
            e.line("    uint4 w = make_uint4(0u, 0u, 0u, 0u);");
            let (cond, _) = e.address(axes, &lanes.shifted_by(axes[last], "j"), stride);
            e.line("    #pragma unroll");
            e.line(&format!(
                "    for (int j = 0; j < {v}; j++) dt_shift_in8(w, ({cond}) ? (unsigned)in{input}[a + j * {}] : {bits:#06x}u);",
                stride(last)
            ));
            e.line(&format!("    {dst}.w[c] = w;"));
            e.line("}");
        });
    }

    /// The loads of pipelined loop `l` (over the rows of a block or the chunks of a dimension:
    /// the lowering decides which) that [`Self::pipelined_rows`] issues ahead: tiles read in
    /// 16-byte runs, at the top of its body or of single-step loops there (their offsets then
    /// known ahead: the start of their block); in f32, only where the loop holds its block
    /// ([`Self::loop_stmt`] decides). The tensor-core dots pipeline their own loops.
    fn prefetchable(&self, l: &Loop) -> Vec<Prefetch> {
        if l.stages < 2 || self.single_iteration(l) {
            return Vec::new();
        }
        let mut out = Vec::new();
        self.collect_prefetchable(&l.body, &mut Vec::new(), &mut out);
        out
    }

    fn collect_prefetchable(&self, body: &[Stmt], at: &mut Vec<(DimId, String)>, out: &mut Vec<Prefetch>) {
        for s in body {
            match s {
                Stmt::Let { value, op: Op::Load { input, axes, .. } } if self.read_in_runs(*value) => {
                    out.push(Prefetch { value: *value, input: *input, axes: axes.clone(), at: at.clone() });
                }
                Stmt::Loop(inner) if self.single_iteration(inner) => {
                    at.push((inner.dim, format!("({})", super::LoopSteps::of(self.k, inner).first())));
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
    fn pipelined_rows(&mut self, l: &Loop, loads: &[Prefetch]) -> Result<(), EmitError> {
        let steps = super::LoopSteps::of(self.k, l);
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
        self.line(&super::loop_header(self.k, l, &o));
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
    fn staged_rows(&mut self, l: &Loop, loads: &[Prefetch], holds: bool) -> Result<(), EmitError> {
        let stages = l.stages as usize;
        let steps = super::LoopSteps::of(self.k, l);
        // Where a held block's steps are staged from: every step of the block.
        let staged = super::LoopSteps::over(self.k, l, if holds { Steps::All } else { l.steps });
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
        self.line(&super::loop_header(self.k, l, &o));
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
    fn read_ring(&mut self, p: &Prefetch, dim: DimId, o: &str, ring: &str, base: usize, runs: usize, buffer: &str) -> (String, String) {
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
    fn holds_block(&self, l: &Loop, loads: &[Prefetch]) -> bool {
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
    fn ring_buffers(&self, l: &Loop, holds: bool) -> usize {
        match self.k.grid.block_extent(l.dim) {
            Some(b) if holds => b.div_ceil(l.step) as usize,
            _ => l.stages as usize,
        }
    }

    /// The number of the step at offset `at` of a loop over this program's block of its
    /// dimension.
    fn block_step(&self, l: &Loop, at: &str) -> String {
        let b = self.k.grid.block_extent(l.dim).expect("a loop over a block");
        format!("((unsigned)({at} - b{} * {b}) / {}u)", self.k.dim_slot(l.dim), l.step)
    }

    /// The loads of loop `l` that a staged loop before it left in shared memory ([`HeldRing`]):
    /// a tile of the same input, axes and shape, over the same block in the same steps.
    fn held_loads(&self, l: &Loop) -> Vec<(Prefetch, HeldLoad)> {
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
    fn other_offsets(&self, p: &Prefetch, dim: DimId) -> Vec<String> {
        p.axes.iter().filter(|d| **d != dim).map(|d| self.offset(*d)).collect()
    }

    /// Reads, at the step at offset `o` of loop `l`, its `held` loads from shared memory (the
    /// copies there complete before the loop, [`Self::loop_stmt`]): their words and flags, for
    /// [`Self::prefetched`].
    fn read_held(&mut self, l: &Loop, o: &str, held: &[(Prefetch, HeldLoad)]) -> Vec<(ValueId, String, String)> {
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
    fn runs_per_thread(&self, p: &Prefetch) -> usize {
        let shape = &self.k.value(p.value).shape;
        self.regs(shape.elements()) / self.vector_run(shape, &p.axes).unwrap_or(1)
    }

    /// The 4-byte words of shared memory [`Self::staged_rows`] takes for loop `l`: its buffers
    /// ([`Self::ring_buffers`]) for each load that moves with the loop.
    fn ring_words_for(&self, l: &Loop, loads: &[Prefetch], holds: bool) -> usize {
        let per_stage: usize = loads.iter().filter(|p| p.axes.contains(&l.dim)).map(|p| self.runs_per_thread(p)).sum();
        per_stage * self.threads as usize * self.ring_buffers(l, holds) * 4
    }

    /// Prints `body` with the offset of `dim` at `at` and the offsets of the single-step loops
    /// `inner` (as [`Prefetch::at`] holds them).
    fn at_step(&mut self, dim: DimId, at: String, inner: &[(DimId, String)], body: impl FnOnce(&mut Self)) {
        let depth = self.offsets.len();
        self.offsets.push((dim, at));
        self.offsets.extend(inner.iter().cloned());
        body(self);
        self.offsets.truncate(depth);
    }

    /// Notes, at the top of the body of loop `l`, that every lane along its dimension is valid
    /// there if it runs full steps or steps of one ([`Loop::lanes_all_valid`]); returns what to
    /// truncate [`Self::full`] to after the body.
    fn enter_steps(&mut self, l: &Loop) -> usize {
        let before = self.full.len();
        if l.lanes_all_valid() {
            self.full.push(l.dim);
        }
        before
    }

    fn declare(&mut self, name: &str, shape: &Shape) {
        let r = self.regs(shape.elements());
        self.line(&format!("float {name}[{r}];"));
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), EmitError> {
        // A block a staged loop here holds stays in shared memory until the end of these
        // statements ([`HeldRing`]).
        let (held, ring_used) = (self.held.len(), self.ring_used);
        // A cluster reduction right before the second statistic of its pair meets for both.
        for w in stmts.windows(2) {
            if let [Stmt::Let { value: met, op: Op::ClusterReduce { value: first, .. } }, Stmt::Let { value: paired, op: Op::ClusterPaired { rule, value, first: f, count, .. } }] =
                w
            {
                if first == f {
                    self.pairs.push((*met, *paired, *rule, *value, *count));
                }
            }
        }
        // Outputs printed run by run (see `output_runs`), by the index of their first statement.
        let segments: Vec<_> =
            if self.run_window.is_none() { (0..stmts.len()).filter_map(|j| self.output_segment(stmts, j)).collect() } else { Vec::new() };
        let mut i = 0;
        while i < stmts.len() {
            match segments.iter().find(|g| g.start == i) {
                Some(&seg) => {
                    self.output_by_runs(stmts, seg)?;
                    i = seg.store + 1;
                }
                None => {
                    self.stmt(&stmts[i])?;
                    i += 1;
                }
            }
        }
        self.held.truncate(held);
        self.ring_used = ring_used;
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), EmitError> {
        let start = self.out.len();
        let (before, reduce_in_registers) = (self.partials, self.reduces_in_registers(s));
        let single = matches!(s, Stmt::Loop(l) if self.single_iteration(l));
        if matches!(s, Stmt::Loop(_)) && !single {
            // A loop's next iteration follows its last: nothing is known at the start of each.
            self.partials.dirty = [true, true];
        }
        self.stmt_body(s)?;
        if !reduce_in_registers && !single && self.out[start..].contains("dt_smem") {
            // Anything else that used shared memory may have read any part of it.
            self.partials.dirty = [true, true];
        }
        if matches!(s, Stmt::Loop(_)) && !single {
            self.partials.dirty = [true, true];
            self.partials.next = before.next;
        }
        Ok(())
    }

    /// Whether `s` is a reduction of a tile in registers ([`Self::register_reduce`]), which
    /// keeps track of the partials itself.
    fn reduces_in_registers(&self, s: &Stmt) -> bool {
        match s {
            Stmt::Let { op: Op::Reduce { value, dim, .. }, .. } => {
                matches!(self.layout(*value), RegLayout::Blocked | RegLayout::Runs(_))
                    && self.mapping.register_reduce(&self.k.value(*value).shape, *dim).is_some()
            }
            _ => false,
        }
    }

    /// Whether loop `l` runs exactly once: over a block of this program as wide as its step
    /// (the grid gives each program a block that starts inside the dimension).
    fn single_iteration(&self, l: &Loop) -> bool {
        super::at_most_one_step(self.k, l)
    }

    /// A loop. An arrival at the cluster barrier from before it (the last cluster reduction's)
    /// is waited on before the loop where the loop makes cluster reductions of its own (a wait
    /// inside would come once per iteration); otherwise after it, so that the loop's work (a
    /// clustered row's output) overlaps the other programs' reading of this one's buffer.
    fn loop_stmt(&mut self, l: &Loop) -> Result<(), EmitError> {
        let defer = !reduces_over_the_cluster(&l.body);
        let pending = defer && std::mem::take(&mut self.cluster_arrived);
        self.settle_cluster();
        let done = self.loop_stmt_inner(l);
        self.cluster_arrived |= pending;
        done
    }

    /// A loop: tensor-core pipelined, with its loads issued a step ahead, or plain.
    fn loop_stmt_inner(&mut self, l: &Loop) -> Result<(), EmitError> {
        if let Some(w) = self.ws.clone().filter(|w| hopper::is_planned_loop(w, l)) {
            return self.consumer_loop(l, &w);
        }
        if let Some((id, d)) = self.plan.pipelined(l).map(|(id, d)| (id, d.clone())) {
            return self.pipelined_loop(l, id, &d);
        }
        // Loads a loop before this one left in shared memory are read there, once every copy
        // has landed (a single wait, before the loop).
        let held = self.held_loads(l);
        if !held.is_empty() {
            self.line("dt_cp_async_wait<0>(); /* the block held in shared memory */");
        }
        // Such a loop issues its other loads (layernorm's weights) at their use, never ahead:
        // one step ahead, their double buffer's copies and flags took 46 of the 152 instructions
        // of a step (ptxas does not unroll the loop to rename them), and the held layernorm ran
        // slower on the H100 (docs/decisions/0011-held-blocks.md).
        let loads: Vec<Prefetch> = if held.is_empty() { self.prefetchable(l) } else { Vec::new() };
        let holds = self.holds_block(l, &loads);
        // f32 loads go ahead only into a block held in shared memory: one step ahead in
        // registers they spilled, and staged in a ring they ran slower
        // (docs/decisions/0007-loads-in-flight.md).
        let loads = if self.dtype.size_bytes() == 2 || holds { loads } else { Vec::new() };
        let limit = if self.k.grid.cluster.is_some() && holds { MAX_CLUSTER_STAGED_SHARED_BYTES } else { MAX_STAGED_SHARED_BYTES };
        let ring_fits = (self.ring_offset + self.ring_used + self.ring_words_for(l, &loads, holds)) * 4 <= limit as usize;
        if !loads.is_empty() && l.stages > 2 && self.dialect == Dialect::Cuda && ring_fits {
            return self.staged_rows(l, &loads, holds);
        }
        if !loads.is_empty() && self.dtype.size_bytes() == 2 {
            return self.pipelined_rows(l, &loads);
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
        self.settle_cluster();
        self.prefetched.truncate(prefetched);
        self.full.truncate(full);
        self.offsets.pop();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    fn stmt_body(&mut self, s: &Stmt) -> Result<(), EmitError> {
        match s {
            Stmt::Let { value, op } => self.op(*value, op)?,
            Stmt::Init { var, value, origin } => {
                let shape = self.k.var(*var).clone();
                if !origin.is_empty() {
                    self.line(&format!("/* {origin} */"));
                }
                let name = format!("acc{}", var.0);
                self.declare(&name, &shape);
                let v = float_lit(*value);
                let layout = self.plan.vars[var.0 as usize];
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{name}[r] = {v};")));
            }
            Stmt::Update { var, value, .. } if self.plan.fused_update(*var, *value) => {
                self.line(&format!("/* acc{} += v{}: accumulated by the tensor-core dot above */", var.0, value.0));
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
            Stmt::Store { value, tile } if self.stores_in_pairs(*value, tile) => {
                let src = self.sources(Reader::Store(*value), &[*value]);
                let Some(Source::Own(name)) = src.first() else {
                    return Err(EmitError(format!("kernel `{}`: a tile stored in pairs is not in its own registers", self.k.name)));
                };
                let (RegLayout::Mma(t), name) = (self.layout(*value), name.clone()) else {
                    return Err(EmitError(format!("kernel `{}`: a tile stored in pairs is not in fragments", self.k.name)));
                };
                self.store_pairs(&name, t, tile);
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

    /// Whether a store of `value` to output tile `tile` writes pairs of adjacent elements: a whole
    /// tile in tensor-core fragments, whose pairs of registers hold adjacent columns along the
    /// output's contiguous last axis (a kernel for whole runs, or a warp-specialized one, whose
    /// tensors keep stride 1 there and 16-byte aligned rows).
    fn stores_in_pairs(&self, value: ValueId, tile: &Shape) -> bool {
        let RegLayout::Mma(t) = self.layout(value) else { return false };
        let contiguous = self.whole_runs || self.ws.is_some();
        contiguous
            && t.isa == layouts::MatrixIsa::MmaSync
            && self.k.value(value).shape == *tile
            && self.k.output.dims.last() == Some(&t.n)
            && self.sources_plan(Reader::Store(value)).is_none()
    }

    /// Whether statement `reader` publishes operands through shared memory (their slots).
    fn sources_plan(&self, reader: Reader) -> Option<&Vec<(ValueId, usize)>> {
        self.publishing.reads.iter().find(|(r, _)| *r == reader).map(|(_, l)| l).filter(|l| !l.is_empty())
    }

    /// The store of fragments `src` (layout `t`) to output tile `tile` two adjacent columns at a
    /// time: one 4-byte (16-bit types) or 8-byte (f32) store where both columns lie inside the
    /// output, the first alone where only it does.
    fn store_pairs(&mut self, src: &str, t: layouts::MmaTile, tile: &Shape) {
        let dims = self.k.output.dims.clone();
        let strides = self.output_strides();
        let stride = |a: usize| strides[a].clone();
        let (store, pair) = match self.dtype {
            DType::F32 => ("dt_store_f32", format!("*(float2*)(out + a) = make_float2({src}[r], {src}[r + 1]);")),
            d => ("", format!("*(unsigned*)(out + a) = dt_pack2_{}({src}[r], {src}[r + 1]);", d.name())),
        };
        let store = if store.is_empty() { format!("dt_store_{}", self.dtype.name()) } else { store.to_string() };
        let (row, col) = t.row_col("r");
        self.line("/* the fragments two adjacent columns at a time */");
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {}; r += 2) {{", self.regs(tile.elements())));
        self.depth += 1;
        self.line(&format!("const int lr = {row}, lc = {col};"));
        let lanes = Lanes(
            tile.0
                .iter()
                .map(|(d, _)| {
                    (
                        *d,
                        if *d == t.m {
                            "lr"
                        } else if *d == t.n {
                            "lc"
                        } else {
                            "0"
                        }
                        .to_string(),
                    )
                })
                .collect(),
        );
        let (inside, addr) = self.address(&dims, &lanes, stride);
        let (both, _) = self.address(&dims, &lanes.shifted(t.n, 1), stride);
        self.line(&format!("const {} a = {addr};", super::GPU_INDEX));
        self.line(&format!("if ({both}) {pair}"));
        self.line(&format!("else if ({inside}) out[a] = {store}({src}[r]);"));
        self.depth -= 1;
        self.line("}");
    }

    fn op(&mut self, id: ValueId, op: &Op) -> Result<(), EmitError> {
        let shape = self.k.value(id).shape.clone();
        let dst = format!("v{}", id.0);
        let layout = self.layout(id);
        match op {
            Op::Const(c) => {
                self.declare(&dst, &shape);
                let c = float_lit(*c);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {c};")));
            }
            Op::Scalar(i) => {
                self.declare(&dst, &shape);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = args.scalars[{i}];")));
            }
            Op::Len(d) => {
                self.declare(&dst, &shape);
                let s = self.size(*d);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = (float){s};")));
            }
            Op::BlockLanes(d) => {
                self.declare(&dst, &shape);
                let n = super::block_lanes(self.k, *d);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {n};")));
            }
            Op::Index(d) => {
                self.declare(&dst, &shape);
                let o = self.offset(*d);
                self.for_owned(&shape, layout, |e, l| e.line(&format!("{dst}[r] = (float)({o} + {});", l.lane(*d))));
            }
            Op::Load { .. } if self.plan.direct_load(id) => {
                self.line(&format!("/* v{}: loaded by the tensor-core dot that reads it */", id.0));
            }
            Op::Load { input, axes, fill } if self.packed(id) => self.packed_load(id, *input, axes, *fill),
            Op::Load { input, axes, fill } if layout == RegLayout::Blocked && self.vector_run(&shape, axes).is_some() => {
                self.declare(&dst, &shape);
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
                self.declare(&dst, &shape);
                let load = format!("dt_load_{}", self.dtype.name());
                let fill = float_lit(*fill);
                self.for_owned(&shape, layout, |e, l| {
                    let (cond, addr) = e.address(axes, l, |a| e.input_stride(*input, a));
                    e.line(&format!("{dst}[r] = ({cond}) ? {load}(in{input}[{addr}]) : {fill};"));
                });
            }
            Op::Unary(u, a) => {
                let src = self.sources(Reader::Let(id), &[*a]);
                self.declare(&dst, &shape);
                self.for_owned(&shape, layout, |e, l| {
                    let v = e.read(&src[0], l);
                    e.line(&format!("{dst}[r] = {};", unary_in(e.math, *u, &v)));
                });
            }
            Op::Binary(b, x, y) => {
                let src = self.sources(Reader::Let(id), &[*x, *y]);
                self.declare(&dst, &shape);
                self.for_owned(&shape, layout, |e, l| {
                    let (vx, vy) = (e.read(&src[0], l), e.read(&src[1], l));
                    e.line(&format!("{dst}[r] = {};", binary_in(e.math, *b, &vx, &vy)));
                });
            }
            Op::Select(c, x, y) => {
                let src = self.sources(Reader::Let(id), &[*c, *x, *y]);
                self.declare(&dst, &shape);
                self.for_owned(&shape, layout, |e, l| {
                    let (vc, vx, vy) = (e.read(&src[0], l), e.read(&src[1], l), e.read(&src[2], l));
                    e.line(&format!("{dst}[r] = {vc} != 0.0f ? {vx} : {vy};"));
                });
            }
            Op::MaskFill { value, dim, fill } => {
                let src = self.sources(Reader::Let(id), &[*value]);
                self.declare(&dst, &shape);
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
                self.declare(&dst, &shape);
                self.mma_row_reduce(*op, &format!("v{}", value.0), t, &dst, &shape, layout);
            }
            Op::Reduce { op, value, dim, .. }
                if matches!(self.layout(*value), RegLayout::Blocked | RegLayout::Runs(_))
                    && self.mapping.register_reduce(&self.k.value(*value).shape, *dim).is_some() =>
            {
                let sv = self.k.value(*value).shape.clone();
                let rows = self.mapping.register_reduce(&sv, *dim).unwrap_or(1);
                // A tile in runs holds one lane of each run: the one the reduction reads.
                let lanes_per_register = match self.layout(*value) {
                    RegLayout::Runs(n) => n as usize,
                    _ => 1,
                };
                self.declare(&dst, &shape);
                let src = format!("v{}", value.0);
                self.register_reduce(*op, &src, &sv, *dim, rows, lanes_per_register, &dst, &shape, layout);
            }
            // Where runs are split into single lanes (see `gpu_runs.rs`), every lane is a run.
            Op::RunReduce { op, value, .. } => {
                let src = format!("v{}", value.0);
                self.declare(&dst, &shape);
                match layout {
                    RegLayout::Runs(n) => self.for_owned(&shape, layout, |e, _| {
                        let lanes: Vec<String> = (0..n).map(|j| format!("{src}[r * {n} + {j}]")).collect();
                        e.line(&format!("{dst}[r] = {};", combine_tree(*op, &lanes)));
                    }),
                    _ => self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {src}[r];"))),
                }
            }
            Op::Reduce { op, value, dim, .. } => {
                let sv = self.k.value(*value).shape.clone();
                self.sources(Reader::Let(id), &[*value]);
                let slot = self.slot(0);
                self.declare(&dst, &shape);
                let (n, st) = (sv.extent(*dim).unwrap_or(1) as usize, sv.stride(*dim));
                let ident = float_lit(op.identity());
                let group = reduce_group(self.threads as usize, shape.elements(), n);
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
            Op::ClusterPaired { .. } if self.pairs.iter().any(|p| p.1 == id) => {}
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
                self.declare(&dst, &shape);
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
                self.declare(&dst, &shape);
                let src = format!("acc{}", v.0);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {src}[r];")));
            }
        }
        Ok(())
    }
}

/// The statements after loop `l` in the list of statements that holds it.
fn statements_after<'a>(stmts: &'a [Stmt], l: &Loop) -> Option<&'a [Stmt]> {
    stmts.iter().enumerate().find_map(|(i, s)| match s {
        Stmt::Loop(x) if std::ptr::eq(x, l) => Some(&stmts[i + 1..]),
        Stmt::Loop(x) => statements_after(&x.body, l),
        _ => None,
    })
}

/// `values` combined by `op` pairwise, as a balanced tree (independent operations first).
fn combine_tree(op: dt_core::algo::RedOp, values: &[String]) -> String {
    match values {
        [] => float_lit(op.identity()),
        [one] => one.clone(),
        _ => {
            let (a, b) = values.split_at(values.len() / 2);
            let side = |half: &[String]| if half.len() > 1 { format!("({})", combine_tree(op, half)) } else { combine_tree(op, half) };
            combine(op, &side(a), &side(b))
        }
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

/// Threads per result element of a reduction: a power of two, at most 32 (so the group lies in
/// one warp on NVIDIA and in one half-wavefront on AMD), no more than the threads allow per
/// result, and no more than the reduced lanes; 1 means one thread per result.
fn reduce_group(threads: usize, results: usize, lanes: usize) -> usize {
    let per_result = threads / results.max(1);
    let mut g = 1;
    while g * 2 <= per_result.min(32) && g * 2 <= lanes {
        g *= 2;
    }
    g
}
