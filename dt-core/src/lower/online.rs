//! Pass 9: a statistic that needs another one first is carried along with it, in one loop.
//!
//! Softmax's sum of `exp(a - max)` needs the row maximum, layernorm's sum of `(x - mean)^2` needs
//! the mean: each lowers to two reduction loops over the row, the second reading the first's
//! result, so a looped row is read twice before the pass that writes the output. Where the
//! second statistic can be kept up to date as the first one changes, the two loops become one.
//! It works on the lane-by-lane partial tiles of [`super::defer`]: every lane keeps its own
//! running statistics, and the lanes are combined once, after the loop.
//!
//! - **Sums scaled by `exp(-m)`**: the second loop sums `t`, where `t` reads the maximum `m` of
//!   the first loop's partial only through factors `exp(z - m)` (times, divided by or masked as
//!   anything that does not read `m`), so that `t(m') = t(m) exp(m - m')`. Each lane sums `t`
//!   at its own running maximum and rescales its sum by `exp(old - new)` when that grows; after
//!   the loop, each lane's sum is rescaled to the row's maximum before the lanes are added.
//! - **Squared deviations from the mean**: the second loop sums `(z - mean)^2`, the mean being
//!   the first loop's sum of `z` over the row length. Each lane keeps a count, a running mean
//!   and the sum of squared deviations from it (Welford's update); after the loop, each lane
//!   adds `count (lane mean - mean)^2` before the lanes are added.
//!
//! Running maxima of `-inf` (a lane that has seen nothing else yet) are read as 0 where they
//! are subtracted, so that `exp(-inf - -inf)` never makes a NaN the two loops would not make.
//!
//! **Per run of lanes.** Where every read of the partials after the loop ends, through
//! element-wise work, in a reduction over the row, the running statistics are kept per run of
//! [`RUN`] lanes rather than per lane ([`Op::RunReduce`]; the reductions after the loop then read
//! one lane per run). Softmax's maximum moves by the run's largest lane and its sum gains the
//! run's sum of `exp(z - max)`: one rescaling `exp(old - new)` per run, not per lane.
//! Layernorm's run gets its step's count, mean and squared deviations from that mean, combined
//! with the running ones as parallel variance does: one division per run, not per lane. On the
//! H100 the looped layernorm and softmax ran faster so (docs/decisions/0006-row-statistics.md).
//!
//! **Rows split over a cluster.** Each program loops over its block of the row (`in block`
//! loops) and the first statistic is combined over the cluster before the second loop reads it
//! (`ClusterReduce` after the accumulator's read, and before the division of the mean). The
//! merged loop is the same: after it, each lane's second statistic is rescaled to the first one
//! as combined over the cluster, so that the program's share, combined over the cluster in turn,
//! is the row's.
//!
//! It applies to two consecutive reduction loops over the same dimension, chunk and pipeline depth
//! with no inner loop, where the second updates only its own partial tile (of the first's
//! shape) and reads nothing computed from the first loop but the statistic. Statements between
//! the two loops that do not depend on the first move before the merged loop.

use super::edit::{defs, exp_scaled, finite_or_zero, merge_loops, push, renamed, Scaled};
use crate::algo::{BinOp, DimId, RedOp, UnOp};
use crate::kir::{reads_var, written_vars, Combine, Kernel, Loop, LoopKind, Op, PairRule, Shape, Stmt, ValueId, VarId};
use std::collections::{HashMap, HashSet};

/// Runs pass `online` over kernel `k` (see the module docs).
pub fn merge_statistic_loops(k: &mut Kernel) {
    merge_loops(k, &find, &|m: &Match| m.first, &merge);
}

/// Two loops to merge: the indices of both in their statement list, and how.
struct Match {
    first: usize,
    second: usize,
    rule: Rule,
    /// The accumulator the second loop sums into (a partial tile of the first's shape).
    p2: VarId,
    /// The first loop's partial tile from which the statistic comes.
    p1: VarId,
    /// The statistic the second loop reads (the maximum, or the mean).
    stat: ValueId,
}

enum Rule {
    ExpScaled,
    /// `z`: what the first loop sums (defined in its body).
    SquaredDeviation {
        z: ValueId,
    },
}

/// A reduction loop with no inner loop: over the whole row, or over this program's block of a
/// row split over a cluster (its statistics are then combined over the cluster after it).
fn plain_reduction(s: &Stmt) -> Option<&Loop> {
    match s {
        Stmt::Loop(l) if matches!(l.kind, LoopKind::Reduction | LoopKind::Block) && !l.body.iter().any(|s| matches!(s, Stmt::Loop(_))) => {
            Some(l)
        }
        _ => None,
    }
}

fn find(k: &Kernel, stmts: &[Stmt], from: usize) -> Option<Match> {
    for i in from..stmts.len() {
        let Some(l1) = plain_reduction(&stmts[i]) else { continue };
        let j = (i + 1..stmts.len()).find(|&j| matches!(stmts[j], Stmt::Loop(_)))?;
        let Some(l2) = plain_reduction(&stmts[j]) else { continue };
        if l1.kind != l2.kind || l1.dim != l2.dim || l1.step != l2.step || l1.stages != l2.stages {
            continue;
        }
        if let Some(m) = match_loops(k, stmts, i, j) {
            return Some(m);
        }
    }
    None
}

/// The values of the statements between the loops (top level) that depend on what the first
/// loop computes, and the accumulators those statements write.
fn dependent(between: &[Stmt], first_writes: &HashSet<VarId>) -> HashSet<ValueId> {
    let mut vars = first_writes.clone();
    let mut values = HashSet::new();
    for s in between {
        match s {
            Stmt::Let { value, op } => {
                let reads_var = matches!(op, Op::Var(v) if vars.contains(v));
                if reads_var || op.operands().iter().any(|o| values.contains(o)) {
                    values.insert(*value);
                }
            }
            Stmt::Update { var, .. } => {
                vars.insert(*var);
            }
            _ => {}
        }
    }
    values
}

fn match_loops(k: &Kernel, stmts: &[Stmt], i: usize, j: usize) -> Option<Match> {
    let (Stmt::Loop(l1), Stmt::Loop(l2)) = (&stmts[i], &stmts[j]) else { return None };
    let between = &stmts[i + 1..j];
    if between.iter().any(|s| matches!(s, Stmt::Store { .. })) {
        return None;
    }
    // The second loop: one update, a sum into a partial tile; no accumulator read.
    let updates: Vec<(VarId, Combine, ValueId)> = l2
        .body
        .iter()
        .filter_map(|s| match s {
            Stmt::Update { var, combine, value } => Some((*var, *combine, *value)),
            _ => None,
        })
        .collect();
    let [(p2, Combine::Reduce(RedOp::Sum), t)] = updates[..] else { return None };
    if l2.body.iter().any(|s| matches!(s, Stmt::Let { op: Op::Var(_), .. } | Stmt::Store { .. })) {
        return None;
    }
    let pshape = k.var(p2).clone();
    if k.value(t).shape != pshape || !between.iter().any(|s| matches!(s, Stmt::Init { var, .. } if *var == p2)) {
        return None;
    }
    // After the second loop, the partial is only read, at the top level.
    if written_vars(&stmts[j + 1..]).contains(&p2) || reads_nested(&stmts[j + 1..], p2) {
        return None;
    }
    // What the second loop reads from outside: at most one value computed from the first loop.
    let first_writes: HashSet<VarId> = written_vars(&l1.body).into_iter().collect();
    let dep = dependent(between, &first_writes);
    let own: HashSet<ValueId> = defs(&l2.body).into_keys().collect();
    let outside: HashSet<ValueId> = l2
        .body
        .iter()
        .flat_map(|s| match s {
            Stmt::Let { op, .. } => op.operands(),
            Stmt::Update { value, .. } | Stmt::Store { value, .. } => vec![*value],
            _ => vec![],
        })
        .filter(|v| !own.contains(v))
        .collect();
    let from_first: Vec<ValueId> = outside.into_iter().filter(|v| dep.contains(v)).collect();
    let [stat] = from_first[..] else { return None };
    let between_defs = defs(between);
    // The statistic: an accumulator read, itself the reduction across lanes of partial p1 (or
    // that over the length of the row, for the mean), combined over the cluster where the row
    // is split over one. Whatever the statistic, the merged loop's rescaling after it gives
    // what the second loop would have summed over this program's lanes.
    let (acc_read, rule_op) = match between_defs.get(&stat)? {
        Op::Var(_) | Op::ClusterReduce { op: RedOp::Max, .. } => (stat, RedOp::Max),
        Op::Binary(BinOp::Div, s, len) if len_of(&between_defs, stmts, i, *len) == Some(l1.dim) => (*s, RedOp::Sum),
        _ => return None,
    };
    let acc_read = match between_defs.get(&acc_read)? {
        Op::ClusterReduce { op, value, dim } if *op == rule_op && *dim == l1.dim => *value,
        _ => acc_read,
    };
    let Op::Var(acc) = between_defs.get(&acc_read)? else { return None };
    let combined = between.iter().find_map(|s| match s {
        Stmt::Update { var, combine: Combine::Reduce(op), value } if var == acc && *op == rule_op => Some(*value),
        _ => None,
    })?;
    let Op::Reduce { op, value: lanes, dim, run: 1 } = between_defs.get(&combined)? else { return None };
    let Op::Var(p1) = between_defs.get(lanes)? else { return None };
    if *op != rule_op || *dim != l1.dim || *k.var(*p1) != pshape {
        return None;
    }
    // p1 is the first loop's partial of z, written nowhere else after its initialization.
    let z = l1.body.iter().find_map(|s| match s {
        Stmt::Update { var, combine: Combine::Reduce(op), value } if var == p1 && *op == rule_op => Some(*value),
        _ => None,
    })?;
    if written_vars(&stmts[j..]).contains(p1) || written_vars(between).contains(p1) || k.value(z).shape != pshape {
        return None;
    }
    let rule = match rule_op {
        RedOp::Max if exp_scaled(k, &l2.body, t, stat, Scaled::Shaped(&pshape)).is_some() => Rule::ExpScaled,
        RedOp::Sum if squared_deviation(&l1.body, &l2.body, t, stat, z, l1.dim) => Rule::SquaredDeviation { z },
        _ => return None,
    };
    Some(Match { first: i, second: j, rule, p2, p1: *p1, stat })
}

/// The dimension whose length value `v` is, if it is one (defined between the loops or before
/// the first).
fn len_of(between: &HashMap<ValueId, &Op>, stmts: &[Stmt], first: usize, v: ValueId) -> Option<DimId> {
    let op = between.get(&v).copied().or_else(|| defs(&stmts[..first]).get(&v).copied())?;
    match op {
        Op::Len(d) => Some(*d),
        _ => None,
    }
}

/// Whether a nested loop of `stmts` reads accumulator `v`.
fn reads_nested(stmts: &[Stmt], v: VarId) -> bool {
    stmts.iter().any(|s| matches!(s, Stmt::Loop(l) if reads_var(&l.body, v)))
}

/// Whether `t` is `(z' - mean)^2`, masked to 0 past the end of `dim`, with `z'` computed as the
/// first loop's `z` is.
fn squared_deviation(first: &[Stmt], second: &[Stmt], t: ValueId, mean: ValueId, z: ValueId, dim: DimId) -> bool {
    let d2 = defs(second);
    let Some(Op::MaskFill { value: sq, dim: md, fill }) = d2.get(&t) else { return false };
    let Some(Op::Binary(BinOp::Mul, a, b)) = d2.get(sq) else { return false };
    let Some(Op::Binary(BinOp::Sub, z2, m)) = d2.get(a) else { return false };
    *md == dim && *fill == 0.0 && a == b && *m == mean && same(&defs(first), z, &d2, *z2)
}

/// Whether value `a` (defined in `da` or outside) and value `b` (defined in `db` or outside)
/// are computed the same way.
fn same(da: &HashMap<ValueId, &Op>, a: ValueId, db: &HashMap<ValueId, &Op>, b: ValueId) -> bool {
    if a == b {
        return true;
    }
    let (Some(oa), Some(ob)) = (da.get(&a), db.get(&b)) else { return false };
    let (xa, xb) = (oa.operands(), ob.operands());
    let strip = |o: &Op| (*o).clone().renamed(|_| ValueId(0));
    strip(oa) == strip(ob) && xa.len() == xb.len() && xa.iter().zip(&xb).all(|(x, y)| same(da, *x, db, *y))
}

fn new_var(k: &mut Kernel, shape: Shape) -> VarId {
    k.vars.push(shape);
    VarId(k.vars.len() as u32 - 1)
}

fn merge(k: &mut Kernel, mut stmts: Vec<Stmt>, m: Match) -> Vec<Stmt> {
    let after = stmts.split_off(m.second + 1);
    let Some(Stmt::Loop(l2)) = stmts.pop() else { unreachable!("the second loop") };
    let between = stmts.split_off(m.first + 1);
    let Some(Stmt::Loop(l1)) = stmts.pop() else { unreachable!("the first loop") };
    let mut out = stmts;

    // Statements between the loops that do not depend on the first move before it.
    let first_writes: HashSet<VarId> = written_vars(&l1.body).into_iter().collect();
    let dep = dependent(&between, &first_writes);
    let (mut hoisted, mut kept): (Vec<Stmt>, Vec<Stmt>) = (Vec::new(), Vec::new());
    for s in between {
        let moves = match &s {
            Stmt::Let { value, .. } => !dep.contains(value),
            Stmt::Init { var, .. } => !first_writes.contains(var),
            _ => false,
        };
        if moves {
            hoisted.push(s);
        } else {
            kept.push(s);
        }
    }
    out.extend(hoisted);

    let pshape = k.var(m.p2).clone();
    let origin = format!("{} + {}, in one pass", l1.origin, l2.origin);
    let dim = l1.dim;
    let runs = partials_end_in_reductions(k, &kept, &after, &[m.p1, m.p2], dim);
    let mut extra_run_vars = Vec::new();
    let mut body = Vec::new();
    let after_loop;
    // How the cluster combines the second statistic.
    let pair: PairRule;
    match m.rule {
        Rule::ExpScaled => {
            let old = push(k, &mut body, pshape.clone(), Op::Var(m.p1));
            let first_loads: Vec<(ValueId, Op)> = l1
                .body
                .iter()
                .filter_map(|s| match s {
                    Stmt::Let { value, op: op @ Op::Load { .. } } => Some((*value, op.clone())),
                    _ => None,
                })
                .collect();
            // The running maximum moves once per run: by the largest of the run's lanes.
            first_loop_body(k, &mut body, l1.body, m.p1, runs.then_some(&pshape), dim);
            let new = push(k, &mut body, pshape.clone(), Op::Var(m.p1));
            let new0 = finite_or_zero(k, &mut body, new);
            let shift = push(k, &mut body, pshape.clone(), Op::Binary(BinOp::Sub, old, new0));
            let scale = push(k, &mut body, pshape.clone(), Op::Unary(UnOp::Exp, shift));
            let mut rename: HashMap<ValueId, ValueId> = HashMap::from([(m.stat, new0)]);
            for s in l2.body {
                match s {
                    Stmt::Let { value, op } => {
                        let op = op.renamed(|v| rename.get(&v).copied().unwrap_or(v));
                        // A load the first loop made too is read once (masked with this fill).
                        let again = match &op {
                            Op::Load { input, axes, fill } => first_loads.iter().find_map(|(v, o)| match o {
                                Op::Load { input: i, axes: a, fill: f } if i == input && a == axes && k.value(*v) == k.value(value) => {
                                    Some((*v, *f == *fill, *fill))
                                }
                                _ => None,
                            }),
                            _ => None,
                        };
                        match again {
                            Some((v, true, _)) => {
                                rename.insert(value, v);
                            }
                            Some((v, false, fill)) => body.push(Stmt::Let { value, op: Op::MaskFill { value: v, dim, fill } }),
                            None => body.push(Stmt::Let { value, op }),
                        }
                    }
                    Stmt::Update { var, value, .. } => {
                        let mut t = rename.get(&value).copied().unwrap_or(value);
                        if runs {
                            t = push(k, &mut body, pshape.clone(), Op::RunReduce { op: RedOp::Sum, value: t, dim, run: RUN });
                        }
                        let sum = push(k, &mut body, pshape.clone(), Op::Var(var));
                        let scaled = push(k, &mut body, pshape.clone(), Op::Binary(BinOp::Mul, sum, scale));
                        let next = push(k, &mut body, pshape.clone(), Op::Binary(BinOp::Add, scaled, t));
                        body.push(Stmt::Update { var, combine: Combine::Set, value: next });
                    }
                    other => body.push(other),
                }
            }
            pair = PairRule::ExpScaled;
            // After the loop: each lane's sum at the row's maximum.
            let (p1, stat) = (m.p1, m.stat);
            after_loop = rescale_reads(k, after, m.p2, |k, out, raw| {
                let lane_max = push(k, out, pshape.clone(), Op::Var(p1));
                let row_max = finite_or_zero(k, out, stat);
                let shift = push(k, out, pshape.clone(), Op::Binary(BinOp::Sub, lane_max, row_max));
                let scale = push(k, out, pshape.clone(), Op::Unary(UnOp::Exp, shift));
                push(k, out, pshape.clone(), Op::Binary(BinOp::Mul, raw, scale))
            });
        }
        Rule::SquaredDeviation { z } => {
            let count = new_var(k, pshape.clone());
            let mean = new_var(k, pshape.clone());
            let by = if runs { "run" } else { "lane" };
            for (var, what) in [(count, "count"), (mean, "running mean")] {
                out.push(Stmt::Init { var, value: 0.0, origin: format!("{by} {what} over {}", k.dim_name(dim)) });
            }
            let old = [push(k, &mut body, pshape.clone(), Op::Var(count)), push(k, &mut body, pshape.clone(), Op::Var(mean))];
            // Each run adds its sum to the first statistic's partial.
            first_loop_body(k, &mut body, l1.body, m.p1, runs.then_some(&pshape), dim);
            // 1 for the step's lanes inside the row, 0 past its end: a mask, which every backend
            // tests in integers (a lane index compared as f32 would miscount past 2^24).
            let lane_shape = Shape(vec![(dim, l1.step)]);
            let one = push(k, &mut body, lane_shape.clone(), Op::Const(1.0));
            let valid = push(k, &mut body, lane_shape, Op::MaskFill { value: one, dim, fill: 0.0 });
            let vars = [count, mean, m.p2];
            if runs {
                combine_runs(k, &mut body, vars, old, z, valid, &pshape, dim);
            } else {
                welford(k, &mut body, vars, old, z, valid, &pshape);
            }
            pair = PairRule::SquaredDeviation;
            // After the loop: each lane's (or run's) squares from the row's mean.
            let stat = m.stat;
            after_loop = rescale_reads(k, after, m.p2, |k, out, raw| {
                let n = push(k, out, pshape.clone(), Op::Var(count));
                let lane_mean = push(k, out, pshape.clone(), Op::Var(mean));
                let off = push(k, out, pshape.clone(), Op::Binary(BinOp::Sub, lane_mean, stat));
                let off2 = push(k, out, pshape.clone(), Op::Binary(BinOp::Mul, off, off));
                let weighted = push(k, out, pshape.clone(), Op::Binary(BinOp::Mul, n, off2));
                push(k, out, pshape.clone(), Op::Binary(BinOp::Add, raw, weighted))
            });
            if runs {
                extra_run_vars = vec![count, mean];
            }
        }
    }
    if runs {
        // The partials of both statistics now hold one value per run.
        for s in out.iter_mut().chain(kept.iter_mut()) {
            if let Stmt::Init { var, origin, .. } = s {
                if *var == m.p1 || *var == m.p2 {
                    *origin = origin.replace("lane by lane", &format!("by runs of {RUN} lanes"));
                }
            }
        }
    }
    let mut tail = kept;
    tail.extend(after_loop);
    let mut tail = super::cluster_pair::meet_once(k, tail, pair, m.stat, dim);
    if runs {
        let vars: Vec<VarId> = [m.p1, m.p2].into_iter().chain(extra_run_vars).collect();
        read_one_lane_per_run(k, &mut tail, &vars, dim);
    }
    out.push(Stmt::Loop(Loop {
        dim,
        kind: l1.kind,
        step: l1.step,
        stages: l1.stages,
        backward: false,
        until: None,
        diagonal: None,
        steps: crate::kir::Steps::All,
        origin,
        body,
    }));
    out.extend(tail);
    out
}

/// Appends the first loop's statements to `body`. With `runs` (the partial's shape), the update
/// of partial `p1` combines the run's lanes first (`RunReduce` by the update's own operation),
/// so that the partial holds one value per run.
fn first_loop_body(k: &mut Kernel, body: &mut Vec<Stmt>, first: Vec<Stmt>, p1: VarId, runs: Option<&Shape>, dim: DimId) {
    for s in first {
        match (s, runs) {
            (Stmt::Update { var, combine: Combine::Reduce(op), value }, Some(shape)) if var == p1 => {
                let run = push(k, body, shape.clone(), Op::RunReduce { op, value, dim, run: RUN });
                body.push(Stmt::Update { var, combine: Combine::Reduce(op), value: run });
            }
            (s, _) => body.push(s),
        }
    }
}

/// Welford's update, lane by lane: `vars` are the count, the running mean and the sum of
/// squared deviations from it, `old` the count and mean read before the step, `z` the lanes
/// (0 where `valid` is 0).
#[allow(clippy::too_many_arguments)]
fn welford(k: &mut Kernel, body: &mut Vec<Stmt>, vars: [VarId; 3], old: [ValueId; 2], z: ValueId, valid: ValueId, pshape: &Shape) {
    let ([count, mean, m2], [count_old, mean_old]) = (vars, old);
    let count_new = push(k, body, pshape.clone(), Op::Binary(BinOp::Add, count_old, valid));
    body.push(Stmt::Update { var: count, combine: Combine::Set, value: count_new });
    let one = push(k, body, Shape::default(), Op::Const(1.0));
    let divisor = push(k, body, pshape.clone(), Op::Binary(BinOp::Max, count_new, one));
    let delta = push(k, body, pshape.clone(), Op::Binary(BinOp::Sub, z, mean_old));
    let delta = push(k, body, pshape.clone(), Op::Binary(BinOp::Mul, delta, valid));
    let step = push(k, body, pshape.clone(), Op::Binary(BinOp::Div, delta, divisor));
    let mean_new = push(k, body, pshape.clone(), Op::Binary(BinOp::Add, mean_old, step));
    body.push(Stmt::Update { var: mean, combine: Combine::Set, value: mean_new });
    let delta_new = push(k, body, pshape.clone(), Op::Binary(BinOp::Sub, z, mean_new));
    let square = push(k, body, pshape.clone(), Op::Binary(BinOp::Mul, delta, delta_new));
    let sum = push(k, body, pshape.clone(), Op::Var(m2));
    let next = push(k, body, pshape.clone(), Op::Binary(BinOp::Add, sum, square));
    body.push(Stmt::Update { var: m2, combine: Combine::Set, value: next });
}

/// The same statistics kept per run: each step's run of lanes has its count `b`, mean and
/// squared deviations from that mean, combined with the run's running ones (count `a`) as
/// parallel variance does: the mean moves by `delta b / (a + b)`, and the squares gain the
/// step's own plus `delta^2 a b / (a + b)`. One division per run rather than one per lane.
#[allow(clippy::too_many_arguments)]
fn combine_runs(
    k: &mut Kernel,
    body: &mut Vec<Stmt>,
    vars: [VarId; 3],
    old: [ValueId; 2],
    z: ValueId,
    valid: ValueId,
    pshape: &Shape,
    dim: DimId,
) {
    let ([count, mean, m2], [count_old, mean_old]) = (vars, old);
    let lanes = k.value(valid).shape.clone();
    let run_sum = |k: &mut Kernel, body: &mut Vec<Stmt>, shape: &Shape, value| {
        push(k, body, shape.clone(), Op::RunReduce { op: RedOp::Sum, value, dim, run: RUN })
    };
    let b = run_sum(k, body, &lanes, valid);
    let total = run_sum(k, body, pshape, z);
    let one = push(k, body, Shape::default(), Op::Const(1.0));
    let b1 = push(k, body, lanes.clone(), Op::Binary(BinOp::Max, b, one));
    let step_mean = push(k, body, pshape.clone(), Op::Binary(BinOp::Div, total, b1));
    let dev = push(k, body, pshape.clone(), Op::Binary(BinOp::Sub, z, step_mean));
    let dev = push(k, body, pshape.clone(), Op::Binary(BinOp::Mul, dev, valid));
    let dev2 = push(k, body, pshape.clone(), Op::Binary(BinOp::Mul, dev, dev));
    let step_m2 = run_sum(k, body, pshape, dev2);
    let count_new = push(k, body, pshape.clone(), Op::Binary(BinOp::Add, count_old, b));
    body.push(Stmt::Update { var: count, combine: Combine::Set, value: count_new });
    let n1 = push(k, body, pshape.clone(), Op::Binary(BinOp::Max, count_new, one));
    let weight = push(k, body, pshape.clone(), Op::Binary(BinOp::Div, b, n1));
    let delta = push(k, body, pshape.clone(), Op::Binary(BinOp::Sub, step_mean, mean_old));
    let moved = push(k, body, pshape.clone(), Op::Binary(BinOp::Mul, delta, weight));
    let mean_new = push(k, body, pshape.clone(), Op::Binary(BinOp::Add, mean_old, moved));
    body.push(Stmt::Update { var: mean, combine: Combine::Set, value: mean_new });
    let cross = push(k, body, pshape.clone(), Op::Binary(BinOp::Mul, moved, delta));
    let cross = push(k, body, pshape.clone(), Op::Binary(BinOp::Mul, cross, count_old));
    let sum = push(k, body, pshape.clone(), Op::Var(m2));
    let sum = push(k, body, pshape.clone(), Op::Binary(BinOp::Add, sum, step_m2));
    let next = push(k, body, pshape.clone(), Op::Binary(BinOp::Add, sum, cross));
    body.push(Stmt::Update { var: m2, combine: Combine::Set, value: next });
}

/// Lanes per run of the running statistics (see the module docs): a 16-byte load of 16-bit
/// values. The GPU emitter splits runs to the lanes a thread holds together (4 in f32, see
/// `gpu_runs.rs` in dt-codegen).
pub const RUN: u32 = 8;

/// Values of `stmts` (top level) computed from reads of the accumulators `vars` by element-wise
/// operations whose other operands do not vary along `dim`: uniform in any run along `dim` the
/// accumulators are. `None` where such a value has any other use than element-wise work of that
/// kind or a reduction over `dim` (anything that would tell the lanes of a run apart).
fn run_uniform(stmts: &[Stmt], k: &Kernel, vars: &[VarId], dim: DimId) -> Option<HashSet<ValueId>> {
    let mut uniform: HashSet<ValueId> = HashSet::new();
    for s in stmts {
        match s {
            Stmt::Let { value, op: Op::Var(v) } if vars.contains(v) => {
                uniform.insert(*value);
            }
            Stmt::Let { value, op } => {
                let reads: Vec<ValueId> = op.operands().into_iter().filter(|o| uniform.contains(o)).collect();
                if reads.is_empty() {
                    continue;
                }
                let broadcast = |o: &ValueId| uniform.contains(o) || k.value(*o).shape.extent(dim).is_none();
                match op {
                    Op::Unary(..) | Op::Binary(..) | Op::Select(..) if op.operands().iter().all(broadcast) => {
                        uniform.insert(*value);
                    }
                    Op::Reduce { dim: d, run: 1, .. } if *d == dim => {}
                    _ => return None,
                }
            }
            Stmt::Update { value, .. } | Stmt::Store { value, .. } if uniform.contains(value) => return None,
            Stmt::Loop(l) if vars.iter().any(|v| reads_var(&l.body, *v)) => return None,
            _ => {}
        }
    }
    Some(uniform)
}

/// Whether every read of the partials `vars` after the merged loop (`kept`, then `after`) ends
/// in a reduction over `dim` through element-wise work only, so that the partials may hold one
/// value per run (the reductions then read one lane per run).
fn partials_end_in_reductions(k: &Kernel, kept: &[Stmt], after: &[Stmt], vars: &[VarId], dim: DimId) -> bool {
    let tail: Vec<Stmt> = kept.iter().chain(after).cloned().collect();
    run_uniform(&tail, k, vars, dim).is_some()
}

/// Makes each reduction over `dim` of a value uniform in the runs of `vars` read one lane per
/// run (see [`partials_end_in_reductions`]).
fn read_one_lane_per_run(k: &Kernel, stmts: &mut [Stmt], vars: &[VarId], dim: DimId) {
    let uniform = run_uniform(stmts, k, vars, dim).expect("the reads after the loop end in reductions (partials_end_in_reductions)");
    for s in stmts {
        if let Stmt::Let { op: Op::Reduce { value, dim: d, run, .. }, .. } = s {
            if *d == dim && uniform.contains(value) {
                *run = RUN;
            }
        }
    }
}

/// `after` with each top-level read of accumulator `var` replaced by `fix(read)`.
fn rescale_reads(
    k: &mut Kernel,
    after: Vec<Stmt>,
    var: VarId,
    mut fix: impl FnMut(&mut Kernel, &mut Vec<Stmt>, ValueId) -> ValueId,
) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(after.len());
    let mut rename: HashMap<ValueId, ValueId> = HashMap::new();
    for s in after {
        match s {
            Stmt::Let { value, op: Op::Var(v) } if v == var => {
                let raw = push(k, &mut out, k.value(value).shape.clone(), Op::Var(v));
                let fixed = fix(k, &mut out, raw);
                rename.insert(value, fixed);
            }
            s => out.push(renamed(s, &rename)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::kir::{Kernel, LoopKind, Stmt};
    use crate::tensor::{bind, Args, Tensor};
    use crate::DType;

    const SOFTMAX: &str = "Func m, s, out; In A; Var x; RVar y;
        m[x] = rmax(A[x, y], y);
        s[x] = rsum(exp(A[x, y] - m[x]), y);
        out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
        out.block(x:1); out.tensorize(x:0, y:8); m.fuse_at(out, x); s.fuse_at(out, x);
        out.compile_to_kernel();";
    const LAYERNORM: &str = "Func mean, var, out; In X; Var x; RVar y;
        mean[x] = rsum(X[x, y], y) / len(y);
        var[x] = rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y) / len(y);
        out[x, y] = (X[x, y] - mean[x]) * rsqrt(var[x] + 0.00001);
        out.block(x:1); out.tensorize(x:0, y:8); mean.fuse_at(out, x); var.fuse_at(out, x);
        out.compile_to_kernel();";

    fn lowered(src: &str) -> (crate::algo::Program, Kernel) {
        let p = crate::compile_spec(src).expect("spec checks");
        let k = super::super::lower(&p, p.kernels[0]).expect("lowers");
        (p, k)
    }

    /// The reduction loops of the program's row, outermost statement list first (the partial
    /// step of a loop split by pass `full_steps` counts with its full steps).
    fn reduction_loops(stmts: &[Stmt]) -> usize {
        stmts
            .iter()
            .map(|s| match s {
                Stmt::Loop(l) => {
                    usize::from(l.kind == LoopKind::Reduction && l.steps != crate::kir::Steps::Partial) + reduction_loops(&l.body)
                }
                _ => 0,
            })
            .sum()
    }

    /// Runs the lowered kernel and the reference evaluator on `rows`; they agree within `tol`,
    /// relative.
    fn check(src: &str, input: &str, rows: &[Vec<f32>], tol: f32) {
        let (p, k) = lowered(src);
        let cols = rows[0].len();
        let data: Vec<f32> = rows.iter().flatten().copied().collect();
        let args = Args::default().input(input, Tensor::new(vec![rows.len(), cols], data));
        let want = crate::eval::evaluate(&p, p.kernels[0], &args, DType::F32).expect("evaluates");
        let got = crate::interp::run(&k, &bind(&p, p.kernels[0], &args).expect("binds"), DType::F32);
        for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
            let close = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan());
            assert!(close, "element {i} (row {}): got {g}, want {w}\n{}", i / cols, crate::kir::print(&k));
        }
    }

    #[test]
    fn softmax_statistics_take_one_loop() {
        let (_, k) = lowered(SOFTMAX);
        assert_eq!(reduction_loops(&k.body), 1, "{}", crate::kir::print(&k));
    }

    #[test]
    fn layernorm_statistics_take_one_loop() {
        let (_, k) = lowered(LAYERNORM);
        assert_eq!(reduction_loops(&k.body), 1, "{}", crate::kir::print(&k));
    }

    /// The second sum reads the maximum outside a factor exp(z - m), or squares deviations of
    /// another value than the one the mean is of: two loops stay two loops.
    #[test]
    fn statistics_that_cannot_be_carried_keep_their_loops() {
        let shifted = SOFTMAX.replace("rsum(exp(A[x, y] - m[x]), y)", "rsum(exp(A[x, y] - m[x]) + m[x], y)");
        let other = LAYERNORM.replace(
            "rsum((X[x, y] - mean[x]) * (X[x, y] - mean[x]), y)",
            "rsum((2.0 * X[x, y] - mean[x]) * (2.0 * X[x, y] - mean[x]), y)",
        );
        for src in [shifted, other] {
            let (_, k) = lowered(&src);
            assert_eq!(reduction_loops(&k.body), 2, "{}", crate::kir::print(&k));
        }
        let rows: Vec<Vec<f32>> = (0..3).map(|r| (0..21).map(|i| ((i * 7 + r * 3) % 11) as f32 - 4.0).collect()).collect();
        check(&SOFTMAX.replace("rsum(exp(A[x, y] - m[x]), y)", "rsum(exp(A[x, y] - m[x]) + m[x], y)"), "A", &rows, 1e-5);
    }

    #[test]
    fn online_softmax_matches_reference() {
        let ninf = f32::NEG_INFINITY;
        // 21 columns: chunks of 8, the last one partial. Rows whose maximum comes late, early,
        // and lanes that see only -inf for a while (or always).
        let rising: Vec<f32> = (0..21).map(|i| i as f32 * 0.7 - 3.0).collect();
        let falling: Vec<f32> = rising.iter().rev().copied().collect();
        let masked: Vec<f32> = (0..21).map(|i| if i < 13 { ninf } else { (i as f32).sin() * 5.0 }).collect();
        let holes: Vec<f32> = (0..21).map(|i| if i % 3 == 0 { ninf } else { 40.0 - i as f32 }).collect();
        let big: Vec<f32> = (0..21).map(|i| 80.0 + (i as f32 * 1.3).cos() * 9.0).collect();
        check(SOFTMAX, "A", &[rising, falling, masked, holes, big], 1e-5);
    }

    /// Steps of 32 lanes hold 4 runs of 8 each, the last one of a 70-column row partly past
    /// the end: the running statistics per run give the reference's results.
    #[test]
    fn statistics_per_run_match_reference() {
        let rows: Vec<Vec<f32>> =
            (0..4)
                .map(|r| {
                    (0..70)
                        .map(|i| {
                            if r == 3 && i % 9 < 4 {
                                f32::NEG_INFINITY
                            } else {
                                ((i * 13 + r * 5) % 17) as f32 * 0.6 - 4.0 + r as f32 * 30.0
                            }
                        })
                        .collect()
                })
                .collect();
        let (_, k) = lowered(&SOFTMAX.replace("y:8", "y:32"));
        assert!(crate::kir::print(&k).contains("over runs of 8"), "{}", crate::kir::print(&k));
        check(&SOFTMAX.replace("y:8", "y:32"), "A", &rows, 1e-5);
        let finite: Vec<Vec<f32>> = rows.iter().map(|r| r.iter().map(|x| if x.is_finite() { *x } else { 100.0 }).collect()).collect();
        let (_, k) = lowered(&LAYERNORM.replace("y:8", "y:32"));
        assert!(crate::kir::print(&k).contains("over runs of 8"), "{}", crate::kir::print(&k));
        check(&LAYERNORM.replace("y:8", "y:32"), "X", &finite, 1e-4);
    }

    #[test]
    fn online_variance_matches_reference() {
        let offset: Vec<f32> = (0..21).map(|i| 1000.0 + (i as f32 * 0.9).sin()).collect();
        let trend: Vec<f32> = (0..21).map(|i| i as f32 * 3.0 - 20.0).collect();
        let single_outlier: Vec<f32> = (0..21).map(|i| if i == 17 { 50.0 } else { 0.5 }).collect();
        // Rows near 1000 lose about 5 digits to f32 either way: element 2 of the first row is
        // 1.3802703 exactly, 1.380238 here and 1.3802125 by the reference's two passes.
        check(LAYERNORM, "X", &[offset, trend, single_outlier], 1e-4);
    }
}
