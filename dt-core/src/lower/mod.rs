//! Lowering: algorithm IR + schedule -> kernel IR. The passes, in order:
//!
//! 1. [`grid::build_grid`]: `block` and `map` become the launch grid.
//! 2. [`nest::build_body`]: the loop nest of one program: loops from `block` and `tensorize`,
//!    fused producers at their `fuse_at` level, reductions as masked chunk loops, the store.
//! 3. [`single_pass::inline_single_iteration_loops`]: loops whose tile covers the dimension's
//!    bound become straight-line code.
//! 4. [`cse::merge_common_subexpressions`]: equal operations in one statement list (loads
//!    included) are computed once.
//! 5. [`masks::drop_redundant_masks`]: a mask whose work the load under it can do goes.
//! 6. [`dead::drop_dead_code`]: values and accumulators nothing reads are dropped.
//! 7. [`flash::run_dots_online`]: attention's loops over the keys (the row maximum, the sum
//!    and the dot of `exp(s - max)`) become one, the sum and the dot rescaled as the maximum
//!    grows and the scores computed once; scores masked causally (`where(j <= i, s, -inf)`)
//!    stop the merged loop at the end of the program's block of queries (`Loop::until`);
//!    [`cse`] and [`dead`] then run again.
//! 8. [`defer::defer_lane_reductions`]: a reduction loop that runs more than once combines its
//!    chunks lane by lane and reduces across lanes once, after the loop.
//! 9. [`online::merge_statistic_loops`]: a statistic that needs another one first (softmax's
//!    sum, layernorm's variance) is computed in the other's loop, both kept per run of lanes
//!    where the reads after the loop allow, and a row split over a cluster combines both over the
//!    cluster at one meeting ([`cluster_pair::meet_once`]); [`cse`] and [`dead`] then run again
//!    over the merged loops.
//! 10. [`max_before_scale::take_max_before_scale`]: the maximum of a tile scaled by a positive
//!     factor (attention's scores) is taken before the scaling, once per row.
//! 11. [`exp2::exp_as_exp2`]: where every build approximates `exp`, `exp(x - m)` with `m` per
//!     row becomes `exp2(x·log2 e - m·log2 e)`, a multiply-add per element; [`cse`] and [`dead`]
//!     then run again.
//! 12. [`layout::assign_layouts`]: tensor-core layouts for `rdot` operands and accumulators.
//! 13. [`reverse::reverse_second_passes`]: a `whole` loop that reads again what a `reduce` loop
//!     before it read runs backward, starting with the chunks still in the L2 cache.
//! 14. [`hoist::hoist_loop_invariants`]: what does not change from one step of a loop to the
//!     next (layernorm's `rsqrt(variance + eps)` in its output loop) is computed before it.
//! 15. [`full_steps::split_full_steps`]: a `whole` or `reduce` loop runs its full steps without
//!     masks or lane tests, and its partial last step, if any, with them; [`dead`] then runs
//!     again.
//! 16. [`heaviest_first::take_heaviest_first`]: a grid whose programs run longer the later their
//!     block of a dimension (causal attention's queries, [`kir::Loop::until`]) takes that
//!     dimension's blocks last first, the longest programs starting first.
//!
//! Set `DT_PRINT_KIR=1` to print the kernel IR after each pass (on stderr). The verifier
//! ([`verify::verify`]) checks it after each pass in debug builds and tests, and wherever
//! `DT_VERIFY_KIR` is set. The passes from 3 on are one table ([`PASSES`]), each with the
//! clean-up that follows it, which `lower` runs in order; [`run_pass`] runs one by its name on
//! a kernel read from its text ([`crate::kir_text::parse`]), as the pass tests of
//! `dt-core/tests/passes/` do.

mod cluster_pair;
mod cse;
mod dead;
mod defer;
mod edit;
mod exp2;
mod flash;
mod full_steps;
mod grid;
mod heaviest_first;
mod hoist;
mod layout;
mod masks;
mod max_before_scale;
mod nest;
mod online;
mod reverse;
mod single_pass;
/// How far a step's maximum must pass the running one to move it (pass `flash`).
pub use flash::MOVE_MARGIN;
pub mod verify;

use crate::algo::{FuncId, Program};
use crate::kir::{self, Kernel, TensorParam};
use crate::signature::Signature;
use std::fmt;

/// A schedule the lowering cannot realize (beyond what the checker rejects).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LowerError(pub String);

impl fmt::Display for LowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LowerError {}

/// Most elements any one tile may hold.
pub const MAX_TILE_ELEMENTS: usize = 1 << 20;

/// Lowers kernel `k` of a checked program.
pub fn lower(p: &Program, k: FuncId) -> Result<Kernel, LowerError> {
    let f = p.func(k);
    // An input's axes are named by the first labelling under which the kernel reads it.
    let loads = p.kernel_loads(k);
    let param = |i: &crate::algo::InputId| TensorParam {
        name: p.input(*i).name.clone(),
        dims: loads.iter().find(|(x, _)| x == i).map(|(_, l)| l.clone()).unwrap_or_default(),
    };
    let mut kernel = Kernel {
        signature: Signature {
            name: f.name.clone(),
            inputs: p.kernel_inputs(k).iter().map(param).collect(),
            scalars: p.kernel_scalars(k).iter().map(|s| p.scalars[s.index()].name.clone()).collect(),
            output: TensorParam { name: f.name.clone(), dims: f.dims.clone() },
            dims: p.kernel_dims(k).into_iter().map(|d| (d, p.dim_name(d).to_string())).collect(),
            bounds: bounds(p, k),
            specialize: f.schedule.specialize.clone(),
            dtypes: f.schedule.dtypes.clone(),
            grid: grid::build_grid(p, k),
            warp_specialize: f.schedule.warp_specialize,
            wgmma: f.schedule.wgmma,
            persistent: f.schedule.persistent,
            requires: f.schedule.requires,
            aligned: f.schedule.requires_aligned,
        },
        num_warps: f.schedule.num_warps,
        num_stages: f.schedule.num_stages,
        max_registers: f.schedule.max_registers,
        fast_math: f.schedule.fast_math,
        fma_exp: f.schedule.fma_exp,
        values: Vec::new(),
        vars: Vec::new(),
        body: Vec::new(),
    };
    after_pass("grid", &kernel)?;
    nest::build_body(p, k, &mut kernel)?;
    after_pass("nest", &kernel)?;
    for entry in &PASSES {
        (entry.run)(&mut kernel);
        entry.cleanup.run(&mut kernel);
        after_pass(entry.name, &kernel)?;
    }
    if kernel.max_tile_elements() > MAX_TILE_ELEMENTS {
        return Err(LowerError(format!(
            "kernel `{}` has a tile of {} elements; at most {MAX_TILE_ELEMENTS} are supported",
            kernel.name,
            kernel.max_tile_elements()
        )));
    }
    Ok(kernel)
}

/// A pass from a kernel's IR to its IR, in place.
pub type Pass = fn(&mut Kernel);

/// What runs after a pass, before its IR is checked: the clean-up its rewrites leave to do.
#[derive(Clone, Copy, Debug)]
pub enum Cleanup {
    None,
    /// [`dead`]: code the pass left unused.
    Dead,
    /// [`cse`], then [`dead`]: values the pass made equal, and code it left unused.
    CseAndDead,
}

impl Cleanup {
    fn run(self, k: &mut Kernel) {
        if let Cleanup::CseAndDead = self {
            cse::merge_common_subexpressions(k);
        }
        if !matches!(self, Cleanup::None) {
            dead::drop_dead_code(k);
        }
    }
}

/// A kernel-IR pass of the pipeline: the name it reports its IR under (`DT_PRINT_KIR`, the
/// verifier's errors, [`run_pass`]), what it does, and the clean-up after it in the pipeline.
#[derive(Clone, Copy, Debug)]
pub struct PassEntry {
    pub name: &'static str,
    pub run: Pass,
    pub cleanup: Cleanup,
}

const fn pass(name: &'static str, run: Pass, cleanup: Cleanup) -> PassEntry {
    PassEntry { name, run, cleanup }
}

/// The passes from a kernel's IR to its IR (those after `nest`), in the order [`lower`] runs
/// them; the pass tests (`dt-core/tests/passes`) run one alone, without its clean-up.
pub const PASSES: [PassEntry; 14] = [
    pass("single_pass", single_pass::inline_single_iteration_loops, Cleanup::None),
    pass("cse", cse::merge_common_subexpressions, Cleanup::None),
    pass("masks", masks::drop_redundant_masks, Cleanup::None),
    pass("dead", dead::drop_dead_code, Cleanup::None),
    pass("flash", flash::run_dots_online, Cleanup::CseAndDead),
    pass("defer", defer::defer_lane_reductions, Cleanup::None),
    pass("online", online::merge_statistic_loops, Cleanup::CseAndDead),
    pass("max_before_scale", max_before_scale::take_max_before_scale, Cleanup::None),
    pass("exp2", exp2::exp_as_exp2, Cleanup::CseAndDead),
    pass("layout", layout::assign_layouts, Cleanup::None),
    pass("reverse", reverse::reverse_second_passes, Cleanup::None),
    pass("hoist", hoist::hoist_loop_invariants, Cleanup::None),
    pass("full_steps", full_steps::split_full_steps, Cleanup::Dead),
    pass("heaviest_first", heaviest_first::take_heaviest_first, Cleanup::None),
];

/// Runs pass `name` of [`PASSES`] on `k`, then the verifier: an unknown name or IR the pass
/// leaves invalid is an error.
pub fn run_pass(name: &str, k: &mut Kernel) -> Result<(), LowerError> {
    let pass = PASSES.iter().find(|p| p.name == name).ok_or_else(|| {
        LowerError(format!("`{name}` is no kernel-IR pass ({})", PASSES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")))
    })?;
    (pass.run)(k);
    verify::verify(k).map_err(|e| LowerError(format!("the kernel IR of `{}` is invalid after pass {name}: {e}", k.name)))
}

/// Lowers every kernel of a program.
pub fn lower_all(p: &Program) -> Result<Vec<Kernel>, LowerError> {
    p.kernels.iter().map(|k| lower(p, *k)).collect()
}

/// Bounds from the kernel's schedule and those of the Funcs fused into it.
pub(crate) fn bounds(p: &Program, k: FuncId) -> Vec<(crate::algo::DimId, u64)> {
    let mut out: Vec<(crate::algo::DimId, u64)> = Vec::new();
    // A cluster holds a whole row: its N blocks of the clustered dimension.
    let kf = p.func(k);
    if let Some((d, n)) = kf.schedule.cluster {
        out.push((d, n as u64 * kf.schedule.block_extent(d).unwrap_or(1) as u64));
    }
    for f in std::iter::once(k).chain(p.producers(k)) {
        for (d, n) in &p.func(f).schedule.bounds {
            match out.iter_mut().find(|(x, _)| x == d) {
                Some(slot) => slot.1 = slot.1.min(*n),
                None => out.push((*d, *n)),
            }
        }
    }
    out
}

/// Prints the kernel IR after `pass` where `DT_PRINT_KIR` asks for it, and checks it
/// ([`verify::verify`]) in debug builds and tests, or where `DT_VERIFY_KIR` is set.
fn after_pass(pass: &str, k: &Kernel) -> Result<(), LowerError> {
    if std::env::var_os("DT_PRINT_KIR").is_some() {
        eprintln!("---- kernel IR after {pass} ----\n{}", kir::print(k));
    }
    if cfg!(debug_assertions) || std::env::var_os("DT_VERIFY_KIR").is_some() {
        verify::verify(k).map_err(|e| {
            LowerError(format!("internal error: the kernel IR of `{}` is invalid after pass {pass}: {e}\n{}", k.name, kir::print(k)))
        })?;
    }
    Ok(())
}
