//! The `num_stages` pipelines of the register plan's dots (`super::layouts`): how many buffers
//! a dot that is all its loop does gets, and what each loop asked for against what it got (the
//! stages `dtc check` warns of and the readable plan shows).

use super::layouts::Plan;
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;

/// Gives every dot that is all its `num_stages` loop does (see the module docs) that many
/// buffers per operand, as many as fit in shared memory.
pub(super) fn pipeline(stmts: &[Stmt], p: &mut Plan) {
    let async_copies = p.async_copies;
    for s in stmts {
        let Stmt::Loop(l) = s else { continue };
        pipeline(&l.body, p);
        if l.stages < 2 || l.kind == LoopKind::Block {
            continue;
        }
        let dots: Vec<ValueId> =
            l.body.iter().filter_map(|s| if let Stmt::Let { value, op: Op::Dot { .. } } = s { Some(*value) } else { None }).collect();
        let [dot] = dots[..] else { continue };
        let Some((_, d)) = p.dots.iter_mut().find(|(x, _)| *x == dot) else { continue };
        if d.wgmma {
            continue;
        }
        let loaded_by_dot = |v: &ValueId| (d.direct[0].is_some() && d.a == *v) || (d.direct[1].is_some() && d.b == *v);
        let only_the_dot = l.body.iter().all(|s| match s {
            Stmt::Let { value, op: Op::Load { .. } } => loaded_by_dot(value),
            Stmt::Let { value, .. } => *value == dot,
            Stmt::Update { var, value, .. } => *value == dot && d.into == Some(*var),
            _ => false,
        });
        if !async_copies || !only_the_dot || d.direct.iter().any(Option::is_none) || d.k != l.dim || d.depth != l.step {
            continue;
        }
        let words = d.buffer_words(0) + d.buffer_words(1);
        let fit = (p.target.shared_bytes_per_block as usize / 4 / words) as u32;
        d.stages = l.stages.min(fit).max(1);
        if d.stages == 1 {
            p.unfitted_stages.push((l.dim, l.stages));
        }
    }
}

/// What the plan's `stages` for dot `dot` are to its loop's `num_stages`: that, or fewer where
/// the buffers of more do not fit the shared memory of `target` (say so, as the plan chose it on
/// its own).
pub(super) fn stages_asked(k: &Kernel, dot: ValueId, stages: u32, target: &crate::plan::Target) -> String {
    match asked_stages(&k.body, dot) {
        Some(n) if n > stages => format!("num_stages({n}) lowered to {stages}: more do not fit the shared memory of {}", target.name),
        _ => "num_stages".to_string(),
    }
}

/// The `num_stages` of the loop whose body computes `dot`.
fn asked_stages(stmts: &[Stmt], dot: ValueId) -> Option<u32> {
    stages_loop(stmts, dot).map(|(_, stages)| stages)
}

/// The pipelines and rings of plan `p` that take fewer stages than their loop's `num_stages`
/// (the buffers of more do not fit), one where not even two fit: each loop, the stages asked
/// for and those planned, once each.
pub(crate) fn lowered_stages(k: &Kernel, p: &Plan, dtype: DType) -> Vec<super::LoweredStages> {
    let mut out: Vec<super::LoweredStages> = Vec::new();
    let unfitted = p.unfitted_stages.iter().map(|(dim, asked)| super::LoweredStages { dim: *dim, asked: *asked, planned: 1, dtype });
    let lowered = p.dots.iter().filter_map(|(id, d)| {
        let planned = d.ring.map_or(d.stages, |r| r.stages);
        let pipelined = d.ring.is_some() || d.stages > 1;
        let (dim, asked) = stages_loop(&k.body, *id)?;
        (pipelined && asked > planned).then_some(super::LoweredStages { dim, asked, planned, dtype })
    });
    for l in unfitted.chain(lowered) {
        if !out.contains(&l) {
            out.push(l);
        }
    }
    out
}

/// The dimension and `num_stages` of the loop whose body computes `dot`.
fn stages_loop(stmts: &[Stmt], dot: ValueId) -> Option<(DimId, u32)> {
    stmts.iter().find_map(|s| match s {
        Stmt::Loop(l) if l.body.iter().any(|s| matches!(s, Stmt::Let { value, op: Op::Dot { .. } } if *value == dot)) => {
            Some((l.dim, l.stages))
        }
        Stmt::Loop(l) => stages_loop(&l.body, dot),
        _ => None,
    })
}
