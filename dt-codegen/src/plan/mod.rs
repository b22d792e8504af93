//! The GPU plan: decisions about how one kernel instance runs on a GPU target, taken from the
//! kernel IR before printing and kept as data, which the CUDA printer translates and
//! `dtc emit --target gpu-plan` prints.
//!
//! ```text
//! kernel IR ──▶ plan passes (in order, the verifier after each) ──▶ GpuPlan ──▶ printers
//! ```
//!
//! The passes, in order (one file each):
//! 1. [`warp_specialize::plan_warp_specialized`], for a kernel scheduled with
//!    `warp_specialize()`: the ring of shared-memory stages of its `rdot` loop, the tensor maps
//!    and copies that fill it, the barriers between producer and consumers, the roles of the
//!    warpgroups with their registers, and the `wgmma` instructions with their descriptors.
//!
//! [`verify::verify`] runs after every pass. Set `DT_PRINT_PLAN=1` to print the plan after each
//! pass (on stderr).
//!
//! Architecture Invariant: the printers read every decision listed here from the plan; a
//! request the target cannot meet is a [`PlanError`] that names the kernel and the primitive,
//! never a silent change.
//!
//! The older path (every kernel on sm_80 and HIP, and the parts of a warp-specialized kernel
//! outside its loop) is planned by [`plan_older`], in order:
//! - `layouts::plan`: register layouts, tensor-core dots with their staging, `cp.async`
//!   pipelines, and the rings of `dot_rings` for loops of several dots, which in a `wgmma()`
//!   kernel feed warpgroup dots through bulk tensor copies;
//! - `rows` (row statistics in the accumulator's rows), `replicate` and `runs`, with
//!   `verify::verify_registers` after each in debug builds and tests;
//! - `publishing`: which operands go through shared memory;
//! - `shared`: where the slots and rings lie, and whether the kernel fits the shared memory of
//!   its GPUs, checked (with the staged rows' rings) by `verify::verify_shared`;
//! - `staged_rows`: how each loop over rows issues its loads ahead (staged in a ring of shared
//!   memory, held for the loops after it, or one step ahead in registers) and where those rings
//!   lie, checked by `verify::verify_staged_rows`;
//! - `output_runs`: which statements of a capped kernel's output are printed run by run;
//! - `cluster_waits`: where a clustered kernel waits on the cluster barrier after each meeting,
//!   checked by `cluster_waits::verify`;
//! - `partials`: where each reduction in registers writes its partials, and which wait at a
//!   barrier first.
//!
//! Then `twins` decides which twins of the kernel are built (for whole runs where its code
//! depends on them, for its specialized sizes), and the printer prints each from the one plan.
//! `dtc emit --target gpu-plan` prints the decisions. Still decided while printing: the order
//! of copies, barriers and loads within a statement, the element-wise code of each layout. That
//! path's shared-memory limits are those of the build's target ([`Target::older`]: every GPU on
//! HIP, sm_80 on CUDA, sm_90a for a kernel only Hopper runs), which `layouts::plan` keeps in the
//! register plan for the passes after it; a `cp.async` pipeline of one dot (`pipelines::pipeline`),
//! the rings of several (`dot_rings`) and the rings of staged rows take fewer stages than
//! `num_stages` asks where those do not fit, which the printed plan shows and `dtc check` warns
//! of ([`lowered_stages`]).

pub(crate) mod cluster_waits;
pub(crate) mod dot_rings;
pub mod layouts;
mod layouts_print;
mod mapping;
pub(crate) mod output_runs;
pub(crate) mod partials;
mod pipelines;
pub(crate) mod publishing;
mod replicate;
mod rows;
mod runs;
pub mod shared;
pub mod staged_rows;
pub mod target;
pub(crate) mod twins;
pub mod verify;
pub mod warp_specialize;

use dt_core::algo::DimId;
use dt_core::kir::Kernel;
use dt_core::DType;
use std::fmt::Write;
pub use target::Target;
pub use warp_specialize::WarpSpecialized;

/// A schedule the plan cannot realize on its target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError(pub String);

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

/// The plan of one kernel built for one element type.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuPlan {
    pub target: Target,
    pub dtype: DType,
    /// The warp-specialized `rdot` loop, for a kernel scheduled with `warp_specialize()`.
    pub warp_specialized: Option<WarpSpecialized>,
}

/// How the printer prints the body of a loop, which the passes that follow its order
/// (`output_runs`, `cluster_waits`, `partials`) walk alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyPrinted {
    /// Not at all: the warp-specialized loop, whose consumers only issue `wgmma`.
    Not,
    /// Statement by statement: a loop of staged dots (`ring_loop`).
    OneByOne,
    /// As a list (`stmts`), where outputs print run by run and paired statistics meet once.
    AsList,
}

impl BodyPrinted {
    /// How the body of loop `l` is printed, given the register plan and the warp-specialized
    /// loop `ws`, if any.
    pub(crate) fn of(l: &dt_core::kir::Loop, registers: &layouts::Plan, ws: Option<&WarpSpecialized>) -> BodyPrinted {
        if ws.is_some_and(|w| w.is_its_loop(l)) {
            BodyPrinted::Not
        } else if !registers.staged_dots(l).is_empty() {
            BodyPrinted::OneByOne
        } else {
            BodyPrinted::AsList
        }
    }
}

/// The register layouts of kernel `k` built for `dtype` in `dialect` (the older path's plan, the
/// warp-specialized loop `ws` aside), in the order of its passes: tensor-core layouts, dots and
/// pipelines ([`layouts::plan`]), then row statistics in the accumulator's rows
/// ([`rows::rows`]), then replicated scalars ([`replicate::replicate`]), then runs
/// ([`runs::runs`]). `mapping` is how the program's threads hold a blocked tile.
pub(crate) fn register_layouts(
    k: &Kernel,
    dtype: DType,
    dialect: crate::emit::gpu::Dialect,
    ws: Option<&WarpSpecialized>,
    mapping: layouts::Mapping,
) -> layouts::Plan {
    let mut p = layouts::plan(k, dtype, dialect, ws);
    check_registers("layouts", k, &p);
    rows::rows(k, &mut p);
    check_registers("rows", k, &p);
    replicate::replicate(k, mapping, &mut p);
    check_registers("replicate", k, &p);
    runs::runs(k, mapping, &mut p);
    check_registers("runs", k, &p);
    p
}

/// The older path's plan of one kernel instance, in the order of its passes: how its threads
/// hold a blocked tile, its register layouts ([`register_layouts`]), the operands read through
/// shared memory ([`publishing::plan_publishing`]), where its shared memory lies
/// ([`shared::lay_out`]), how its loops over rows issue their loads ahead
/// ([`staged_rows::plan_staged_rows`]), which outputs are printed run by run
/// ([`output_runs::plan_output_runs`]), and where a clustered kernel waits on the cluster
/// barrier ([`cluster_waits::plan_cluster_waits`]).
#[derive(Clone, Debug)]
pub(crate) struct OlderPlan<'k> {
    pub mapping: layouts::Mapping,
    pub registers: layouts::Plan,
    pub publishing: publishing::Publishing,
    pub shared: shared::SharedLayout,
    pub rows: staged_rows::StagedRows<'k>,
    pub outputs: output_runs::OutputRuns<'k>,
    pub cluster: cluster_waits::ClusterWaits<'k>,
    pub partials: partials::Partials,
}

impl OlderPlan<'_> {
    /// The bytes of dynamic shared memory a program asks for: the layout's, then the staged
    /// rows' rings.
    pub fn shared_bytes(&self) -> u32 {
        self.shared.bytes + (self.rows.ring_words * 4) as u32
    }
}

/// Plans kernel `k` built for `dtype` in `dialect` on the older path; `ws` is its
/// warp-specialized loop's plan and target, if it has one.
pub(crate) fn plan_older<'k>(
    k: &'k Kernel,
    dtype: DType,
    dialect: crate::emit::gpu::Dialect,
    ws: Option<(&WarpSpecialized, &Target)>,
) -> Result<OlderPlan<'k>, PlanError> {
    let mapping = layouts::Mapping::of(k, dtype, dialect);
    let registers = register_layouts(k, dtype, dialect, ws.map(|(w, _)| w), mapping);
    if let (Some((d, n)), None) = (k.grid.multicast, ws) {
        if dialect == crate::emit::gpu::Dialect::Cuda && !registers.dots.iter().any(|(_, x)| x.ring.is_some_and(|r| r.multicast.is_some()))
        {
            return Err(PlanError(format!(
                "kernel `{}` is multicast along `{}`, but no loop of its bulk copies has an operand that its {n} programs could share",
                k.name,
                k.dim_name(d)
            )));
        }
    }
    let publishing = publishing::plan_publishing(k, &registers, mapping);
    let shared = shared::lay_out(k, ws, &publishing.slot_elements, &registers)?;
    let rows = staged_rows::plan_staged_rows(&staged_rows::Inputs {
        k,
        dtype,
        dialect,
        mapping,
        registers: &registers,
        ws: ws.map(|(w, _)| w),
        base: shared.staged_rings,
    });
    if cfg!(debug_assertions) {
        let ws_words = ws.map_or(0, |(w, _)| w.shared_bytes as usize / 4);
        let target = ws.map_or(&registers.target, |(_, t)| t);
        let checked = verify::verify_shared(k, target, &shared, &publishing.slot_elements, registers.ring_words, ws_words, rows.ring_words);
        if let Err(e) = checked {
            panic!("the shared memory of kernel `{}` is laid out wrongly: {e}\n{}", k.name, dt_core::kir::print(k));
        }
        if let Err(e) = verify::verify_staged_rows(k, &registers.target, &rows, shared.staged_rings) {
            panic!("the staged rows' plan of kernel `{}` is invalid: {e}\n{}", k.name, dt_core::kir::print(k));
        }
    }
    let outputs = output_runs::plan_output_runs(&output_runs::Inputs {
        k,
        dtype,
        mapping,
        registers: &registers,
        publishing: &publishing,
        rows: &rows,
        ws: ws.map(|(w, _)| w),
    });
    let cluster = cluster_waits::plan_cluster_waits(k, &registers, ws.map(|(w, _)| w));
    if cfg!(debug_assertions) {
        if let Err(e) = cluster_waits::verify(k, &registers, ws.map(|(w, _)| w), &cluster) {
            panic!("the cluster waits of kernel `{}` are invalid: {e}\n{}", k.name, dt_core::kir::print(k));
        }
    }
    let partials =
        partials::plan_partials(&partials::Inputs { k, mapping, registers: &registers, publishing: &publishing, ws: ws.map(|(w, _)| w) });
    Ok(OlderPlan { mapping, registers, publishing, shared, rows, outputs, cluster, partials })
}

/// The register plan's verifier after pass `pass`, in debug builds and tests: a broken rule is
/// a bug of the pass, reported with the kernel.
fn check_registers(pass: &str, k: &Kernel, p: &layouts::Plan) {
    if cfg!(debug_assertions) {
        if let Err(e) = verify::verify_registers(k, p) {
            panic!("the register plan of kernel `{}` after pass {pass} is invalid: {e}\n{}", k.name, dt_core::kir::print(k));
        }
    }
}

/// The target a kernel's CUDA build is planned for: sm_90a for what only Hopper runs, none (the
/// older path) otherwise.
pub fn cuda_target(k: &Kernel) -> Option<Target> {
    k.warp_specialize.then_some(Target::SM90A)
}

/// Runs the plan passes over kernel `k` built for `dtype` on `target`.
pub fn plan(k: &Kernel, dtype: DType, target: &Target) -> Result<GpuPlan, PlanError> {
    let mut p = GpuPlan { target: *target, dtype, warp_specialized: None };
    if k.warp_specialize {
        p.warp_specialized = Some(warp_specialize::plan_warp_specialized(k, dtype, target)?);
        after_pass("warp_specialize", k, &p)?;
    }
    Ok(p)
}

fn after_pass(pass: &str, k: &Kernel, p: &GpuPlan) -> Result<(), PlanError> {
    if std::env::var_os("DT_PRINT_PLAN").is_some() {
        eprintln!("---- GPU plan after {pass} ----\n{}", print(k, p));
    }
    verify::verify(k, p).map_err(|e| PlanError(format!("the GPU plan of kernel `{}` after pass {pass} is invalid: {e}", k.name)))
}

/// The CUDA plan of kernel `k` built for each of its element types, as `dtc emit --target
/// gpu-plan` prints it.
pub fn print_cuda(k: &Kernel) -> Result<String, PlanError> {
    let mut out = String::new();
    for dtype in &k.dtypes {
        match cuda_target(k) {
            Some(t) => out += &print(k, &plan(k, *dtype, &t)?),
            None => {
                let older = plan_older(k, *dtype, crate::emit::gpu::Dialect::Cuda, None)?;
                let target = older.registers.target;
                let on = match (k.wgmma, target.name) {
                    (true, _) => "sm_90a (wgmma())".to_string(),
                    (false, "sm_80") => "sm_80 and newer".to_string(),
                    (false, name) => name.to_string(),
                };
                let _ = writeln!(out, "plan {} for {} on {on}", k.name, dtype.name());
                let _ = writeln!(out, "  threads   {}", older.mapping.threads);
                layouts_print::print(k, *dtype, &older.registers, &mut out);
                staged_rows::print(k, &older.rows, &mut out);
                output_runs::print(&older.outputs, &mut out);
                cluster_waits::print(&older.cluster, &mut out);
                partials::print(&older.partials, &mut out);
                let built = twins::twins(k, *dtype, older.mapping, &older.registers);
                if built[0] == dt_core::select::Layouts::WholeRuns {
                    let _ = writeln!(out, "  layouts   whole runs only (requires(aligned)): no kernel for any layout");
                }
                let twins: Vec<&str> = built
                    .iter()
                    .skip(1)
                    .map(|l| match l {
                        dt_core::select::Layouts::WholeRuns => "for whole runs",
                        dt_core::select::Layouts::Specialized => "for its specialized sizes",
                        dt_core::select::Layouts::Any => "for any layout",
                    })
                    .collect();
                let _ = writeln!(out, "  twins     {}", if twins.is_empty() { "none".to_string() } else { twins.join(", ") });
                let slots: Vec<String> =
                    older.publishing.slot_elements.iter().map(|n| format!("{} bytes", n.next_multiple_of(4) * 4)).collect();
                let _ = writeln!(
                    out,
                    "  shared    {} statements read operands through shared memory; slots: {}; {} bytes in all",
                    older.publishing.reads.len(),
                    if slots.is_empty() { "none".to_string() } else { slots.join(", ") },
                    older.shared_bytes()
                );
            }
        }
    }
    Ok(out)
}

/// The layouts kernel `k` built for `dtype` in `dialect` comes in: any layout first, then the
/// twins whose code differs or that its schedule asks for (pass `twins`).
pub fn twins(k: &Kernel, dtype: DType, dialect: crate::emit::gpu::Dialect) -> Result<Vec<dt_core::select::Layouts>, PlanError> {
    if k.warp_specialize {
        return Ok(vec![dt_core::select::Layouts::Any]);
    }
    let older = plan_older(k, dtype, dialect, None)?;
    Ok(twins::twins(k, dtype, older.mapping, &older.registers))
}

/// A `num_stages` that a loop runs with fewer stages (see [`lowered_stages`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoweredStages {
    /// The loop's dimension.
    pub dim: DimId,
    pub asked: u32,
    pub planned: u32,
    /// The element type whose buffers these are.
    pub dtype: DType,
}

/// Each `num_stages` that the CUDA plan of kernel `k` serves with fewer stages, for any of its
/// element types, because the buffers of more do not fit (what `dtc check` warns of): the loop,
/// the stages asked for and those planned, once each per element type. A warp-specialized kernel is refused
/// instead.
pub fn lowered_stages(k: &Kernel) -> Vec<LoweredStages> {
    let mut out = Vec::new();
    if cuda_target(k).is_some() {
        return out;
    }
    for dtype in &k.dtypes {
        // A kernel the plan refuses has no stages to report (`dtc check` reports the refusal).
        let Ok(older) = plan_older(k, *dtype, crate::emit::gpu::Dialect::Cuda, None) else { continue };
        // A loop whose ring does not fit counts where no loop of the kernel stages its rows:
        // `num_stages` is the kernel's, and a ring elsewhere serves it.
        let staged = older.rows.loops.iter().any(|(_, r)| matches!(r, staged_rows::RowLoads::Staged(_)));
        let rows = older.rows.unfitted.iter().filter(|_| !staged).map(|(l, planned)| LoweredStages {
            dim: l.dim,
            asked: l.stages,
            planned: *planned,
            dtype: *dtype,
        });
        for lowered in pipelines::lowered_stages(k, &older.registers, *dtype).into_iter().chain(rows) {
            if !out.contains(&lowered) {
                out.push(lowered);
            }
        }
    }
    out
}

/// The plan in its readable form.
pub fn print(k: &Kernel, p: &GpuPlan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "plan {} for {} on {}", k.name, p.dtype.name(), p.target.name);
    let Some(w) = &p.warp_specialized else {
        let _ = writeln!(out, "  (no plan decisions)");
        return out;
    };
    let dim = |d| k.dim_name(d);
    let r = &w.roles;
    let _ = writeln!(out, "  threads   {} (warp_specialize())", r.threads());
    let which = if r.consumers == 1 { "warpgroup 0".to_string() } else { format!("warpgroups 0 to {}", r.consumers - 1) };
    let _ = writeln!(
        out,
        "  consumers {which}: wgmma, {} accumulator rows each, setmaxnreg {} registers",
        warp_specialize::ROWS_PER_CONSUMER,
        r.consumer_registers
    );
    let _ = writeln!(
        out,
        "  producer  warpgroup {}: thread {} issues every bulk copy, setmaxnreg {} registers (all start with {}); the warpgroup copies an input no tensor map describes, meeting at named barrier {}",
        r.consumers,
        r.producer_thread(),
        r.producer_registers,
        r.entry_registers,
        r.producer_barrier
    );
    let grid = if w.persistent {
        "persistent: min(programs, multiprocessors) programs, each taking blocks in map order (persistent())"
    } else {
        "one program per block"
    };
    let _ = writeln!(out, "  grid      {grid}");
    if let Some(split) = w.split {
        let _ = writeln!(
            out,
            "  split     {} in blocks of {} over a cluster of {} programs, which add their accumulators through {} bytes of shared memory each",
            k.dim_name(w.k),
            split.block,
            split.programs,
            split.partial_bytes
        );
    }
    let _ = writeln!(
        out,
        "  loop      {} step {}, {} stages of {} bytes (num_stages({}))",
        dim(w.k),
        w.step,
        w.stages,
        w.stage_bytes,
        w.stages
    );
    for (name, o) in ["A", "B"].iter().zip(&w.operands) {
        let input = &k.inputs[o.input];
        let axes: Vec<String> = o.axes.iter().map(|d| dim(*d).to_string()).collect();
        let boxes: Vec<String> = o.axes.iter().zip(&o.boxes).map(|(d, b)| format!("{}:{b}", dim(*d))).collect();
        let major = match o.major {
            warp_specialize::Major::K => "K-major",
            warp_specialize::Major::Mn => "MN-major",
        };
        let _ = writeln!(
            out,
            "  {name}         {}[{}] {major}, rows along {}: map {}, {} cop{} of box [{}] ({} bytes), 128-byte swizzle, at +{} of a stage",
            input.name,
            axes.join(", "),
            dim(o.rows_dim),
            o.map,
            o.copies,
            if o.copies == 1 { "y" } else { "ies" },
            boxes.join(", "),
            o.copy_bytes,
            o.offset
        );
        let _ = writeln!(out, "            {}", o.desc.describe());
        if let Some(m) = o.multicast {
            let _ = writeln!(
                out,
                "            multicast: each of the cluster's {} programs copies {} lines along {} ({} bytes) of each box into all of them",
                m.programs,
                m.extent,
                dim(o.axes[m.axis]),
                m.bytes
            );
        }
    }
    let per =
        if w.operands.iter().any(|o| o.multicast.is_some()) { "per consumer warpgroup of the cluster" } else { "per consumer warpgroup" };
    let _ = writeln!(
        out,
        "  barriers  full[{}] at {}: {} arrival + {} bytes; empty[{}] at {}: {} arrivals (one {per})",
        w.stages, w.full.offset, w.full.arrivals, w.full.tx_bytes, w.stages, w.empty.offset, w.empty.arrivals
    );
    let _ = writeln!(
        out,
        "  wgmma     m64n{}k16 f32 += {} x {}, {} per stage per consumer; $acc{} [{}:{}, {}:{}] in fragments of a warp per 16 rows{}",
        w.wgmma_n,
        p.dtype.name(),
        p.dtype.name(),
        w.wgmma_per_stage,
        w.acc.0,
        dim(w.m),
        w.rows,
        dim(w.n),
        w.cols,
        if w.swapped { " (swapped: the tile's columns are wgmma's M, its rows N)" } else { "" }
    );
    if w.descriptors_before_wait {
        let _ = writeln!(out, "  early     each step's descriptors built before the wait for its stage");
    }
    if let Some(s) = &w.store {
        let _ = writeln!(
            out,
            "  store     {}[{}:{}, {}:{}] through shared memory: map {}, {} bulk stores of box [{}:{}, {}:{}] per consumer; {} buffers of {} bytes per consumer at +{}, 128-byte swizzle; named barriers {} on",
            k.output.name,
            dim(w.m),
            w.rows,
            dim(w.n),
            w.cols,
            s.map,
            s.chunks,
            dim(w.m),
            s.boxes[0],
            dim(w.n),
            s.boxes[1],
            warp_specialize::STORE_BUFFERS,
            s.buffer_bytes,
            s.offset,
            s.first_barrier
        );
    }
    let _ = writeln!(
        out,
        "  shared    {} bytes for the ring{} (1024-aligned, barriers included) of {}",
        w.shared_bytes,
        if w.store.is_some() { " and the staging buffers" } else { "" },
        p.target.shared_bytes_per_block
    );
    out
}
