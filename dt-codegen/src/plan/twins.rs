//! Plan pass: the twins a kernel instance is built as, besides the kernel for any layout
//! ([`Layouts`]).
//!
//! - **Whole runs** ([`Layouts::WholeRuns`]): where every 16-byte run the kernel reads or writes
//!   starts at a multiple of the run along its tensor's last axis ([`runs_start_whole`]), a twin
//!   for tensors whose runs are all aligned and either inside or outside the tensor checks a
//!   run's first element only. It is built where its code differs from the kernel for any
//!   layout ([`depends_on_whole_runs`]).
//! - **Specialized sizes** ([`Layouts::Specialized`]): where the schedule asks (`specialize`)
//!   and whole runs are possible at those sizes.
//!
//! A kernel that `requires(aligned)` is itself built for whole runs, where its code depends on
//! them: no launch of other layouts reaches it. A warp-specialized kernel reads and writes
//! through tensor maps, whatever the layouts: it has no twins.

use super::layouts::{collect, Mapping, Plan, RegLayout};
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::select::Layouts;
use dt_core::DType;

/// The layouts kernel `k`, built for `dtype` with register plan `registers` and thread mapping
/// `mapping`, comes in: the kernel's own first (any layout, or whole runs where it
/// `requires(aligned)` and its code depends on them), then its twins (see the module docs).
pub(crate) fn twins(k: &Kernel, dtype: DType, mapping: Mapping, registers: &Plan) -> Vec<Layouts> {
    if k.warp_specialize {
        return vec![Layouts::Any];
    }
    let whole = runs_start_whole(k, mapping.vector) && depends_on_whole_runs(k, mapping, registers);
    let mut out = vec![if whole && k.aligned { Layouts::WholeRuns } else { Layouts::Any }];
    if whole && !k.aligned {
        out.push(Layouts::WholeRuns);
    }
    let run = (RUN_BYTES / dtype.size_bytes()) as u64;
    let last_axes = run_dims(k);
    if !k.specialize.is_empty() && k.specialize.iter().all(|(d, n)| !last_axes.contains(d) || n % run == 0) {
        out.push(Layouts::Specialized);
    }
    out
}

/// Whether the code of kernel `k` depends on its runs being whole, as the printer reads it:
/// a blocked tile loaded or stored in 16-byte runs, a mask by runs along a tensor's last axis
/// ([`masks_by_run`]), fragments stored in runs of adjacent columns, or the f32 elements of a
/// pipelined dot's operands copied one by one (asynchronously only in a kernel for any layout).
fn depends_on_whole_runs(k: &Kernel, mapping: Mapping, registers: &Plan) -> bool {
    let pipelined_fma =
        |d: &super::layouts::MmaDot| d.tile.isa.is_fma() && (d.stages > 1 || d.ring.is_some()) && d.direct.iter().any(Option::is_some);
    if registers.dots.iter().any(|(_, d)| pipelined_fma(d)) {
        return true;
    }
    let mut lets = Vec::new();
    let mut updates = Vec::new();
    collect(&k.body, &mut lets, &mut updates);
    let layout = |id: ValueId| registers.values[id.0 as usize];
    let blocked = |id: ValueId| layout(id) == RegLayout::Blocked && !registers.direct_load(id);
    let lets = lets.iter().any(|(id, op)| match op {
        Op::Load { axes, .. } => blocked(*id) && mapping.vector_run(&k.value(*id).shape, axes).is_some(),
        Op::MaskFill { dim, .. } => masks_by_run(k, mapping, &k.value(*id).shape, layout(*id), *dim),
        _ => false,
    });
    let in_runs = |value: ValueId, tile: &Shape| match layout(value) {
        RegLayout::Blocked => !registers.direct_load(value) && mapping.vector_run(tile, &k.output.dims).is_some(),
        layout => fragments_in_runs(k, value, layout, tile).is_some(),
    };
    lets || stores(&k.body).iter().any(|(value, tile)| in_runs(*value, tile))
}

/// The fragment layout in which a store of `value` (in `layout`) to output tile `tile` may write
/// runs of adjacent columns ([`MatrixIsa::adjacent_columns`]): a whole tile in fragments whose
/// consecutive registers hold adjacent columns along the output's last axis.
pub(crate) fn fragments_in_runs(k: &Kernel, value: ValueId, layout: RegLayout, tile: &Shape) -> Option<super::layouts::MmaTile> {
    match layout {
        RegLayout::Mma(t) if t.isa.adjacent_columns() > 1 && k.value(value).shape == *tile && k.output.dims.last() == Some(&t.n) => Some(t),
        _ => None,
    }
}

/// Whether, in a kernel for whole runs, every lane of a register run of a `shape` tile in
/// `layout` is valid along `d` exactly where the run's first lane is: a blocked tile dealt in
/// runs whose last dimension is `d`, where `d` is the last axis of a tensor (so its size and the
/// offsets along it are multiples of the run, [`runs_start_whole`]).
pub(crate) fn masks_by_run(k: &Kernel, mapping: Mapping, shape: &Shape, layout: RegLayout, d: DimId) -> bool {
    let n = mapping.width(shape.elements());
    let last = shape.0.last().map(|(x, _)| *x);
    let runs_along_d = last == Some(d) && shape.extent(d).is_some_and(|x| (x as usize).is_multiple_of(n));
    layout == RegLayout::Blocked && n > 1 && runs_along_d && run_dims(k).contains(&d)
}

/// The values and tiles `stmts` store, at any depth.
fn stores(stmts: &[Stmt]) -> Vec<(ValueId, &Shape)> {
    stmts
        .iter()
        .flat_map(|s| match s {
            Stmt::Store { value, tile } => vec![(*value, tile)],
            Stmt::Loop(l) => stores(&l.body),
            _ => Vec::new(),
        })
        .collect()
}

/// Whether every 16-byte run of `vector` elements that kernel `k` reads or writes starts at a
/// multiple of `vector` along its tensor's last axis: every block and loop step along such an
/// axis is a multiple of `vector`. Then, given tensors whose runs are whole, each run the kernel
/// accesses is one of them.
pub(crate) fn runs_start_whole(k: &Kernel, vector: usize) -> bool {
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

/// The dimensions that are the last axis of a tensor of `k`: those its 16-byte runs lie along.
/// Where runs are whole, the size of each is a multiple of the run.
pub(crate) fn run_dims(k: &Kernel) -> Vec<DimId> {
    k.inputs.iter().chain([&k.output]).filter_map(|t| t.dims.last().copied()).collect()
}
