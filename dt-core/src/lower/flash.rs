//! Pass 7: a dot of softmax's numerator runs in the loop that finds the maximum, rescaled as the
//! maximum grows (the online or "flash" form).
//!
//! Attention as written reduces over the keys `j` three times: the row maximum `m` of the
//! scores, the sum of `exp(s - m)`, and the dot of `exp(s - m)` with `V`; each loop computes the
//! scores again, and the second and third need the first's result. Every sum or dot over `j` that
//! reads `m` only through factors `exp(z - m)` satisfies `t(m') = t(m) exp(m - m')`, so it can be
//! accumulated at the running maximum of the keys seen so far and rescaled by `exp(old - new)`
//! each time that grows. The three loops then become one:
//!
//! ```text
//! $m = -inf                               $m = -inf ; $l = 0 ; $o = 0
//! for j: $m = max($m, rmax s over j)      for j:
//! $l = 0                                    %r = rmax s over j           (s computed once)
//! for j: $l += rsum exp(s - m) over j       %old = read $m ; $m = max($m, %r) ; %new = read $m
//! $o = 0                           =>       %scale = exp(%old - %new)
//! for j: $o += dot(exp(s - m), V) over j    $l = $l * %scale ; $l += rsum exp(s - %new) over j
//! out = $o / $l                             $o = $o * %scale ; $o += dot(exp(s - %new), V) over j
//!                                         out = $o / $l
//! ```
//!
//! Where every build approximates `exp` (`Kernel::approximates`: 16-bit element types, or
//! `fast_math()`), the running maximum moves only when a step's maximum exceeds it by more than
//! [`MOVE_MARGIN`] (8 ln 2): `%new = select(%r > %old + margin, %r, %old)`. The form is as exact
//! as before (every accumulator is taken at the same maximum, which need not be the largest
//! score seen), each term `exp(s - m)` stays below 2^8 (within f16's range, and far within the
//! f32 accumulators'), and in the steps where the maximum stays, nearly all of them after the
//! first few, the rescale is exactly `exp(0) = 1`: a target skips multiplying the output's
//! accumulator by it (`plan::layouts::Plan::unit_rescales` in dt-codegen). Only the roundings
//! change (each term rounded to 16 bits at another scale), by less than the approximation's error,
//! so exact builds keep the maximum itself.
//!
//! A maximum of -inf (a row that has seen only masked keys) is read as 0 where it is subtracted,
//! so that `exp(-inf - -inf)` makes no NaN; the scale is then 0 and the accumulators are still 0.
//! The statistic is a row's (one per query, combined across the tile's keys in each step), since
//! a dot's accumulator mixes the keys of a step. What the loops computed alike (the scores: an
//! accumulator set, summed over an inner loop and read) is computed once, the later copies
//! reading the first's.
//!
//! It applies to a reduction loop whose only update is a maximum over its dimension into an
//! accumulator read nowhere inside it (its read after the loop being the statistic), followed by
//! reduction loops over the same dimension, step and stages (or the last of them alone inside a
//! `block` loop, as attention's loop over its block of `e`), each with one sum update of a value
//! scaled as above, at least one of them a dot, and none reading the other statistics (a dot
//! of `exp(s - m) / l` needs the whole sum first). Statements between that do not depend on the
//! loops move before the merged loop; reads of the accumulators move after it. The merged loop
//! sits where the last one was (inside its `block` loop, which recomputes the statistics in each
//! of its steps, as it would in each step of a tiled head dimension). Softmax and layernorm,
//! which have no dot, are left to [`super::online`].
//!
//! Where the maximum's scores are masked to `-inf` past each query (`where(j <= i, s, -inf)`,
//! causal attention) and the queries are blocked, the merged loop stops at the end of the
//! program's block of queries (`Loop::until`, see `causal_end`).

use super::edit::{constant, defs, exp_scaled, finite_or_zero, merge_loops, push, renamed, Scaled};
use crate::algo::{BinOp, DimId, RedOp, UnOp};
use crate::kir::{reads_var, written_vars, Combine, Diagonal, Kernel, Loop, LoopKind, Op, Shape, Stmt, ValueId, VarId};
use std::collections::{HashMap, HashSet};

/// How far a step's maximum must exceed the running maximum to move it, where the kernel
/// approximates `exp` (see the module docs): `ln 256`, so that `exp(s - m) < 256`.
pub const MOVE_MARGIN: f32 = 8.0 * std::f32::consts::LN_2;

/// Runs pass `flash` over kernel `k` (see the module docs).
pub fn run_dots_online(k: &mut Kernel) {
    merge_loops(k, &find, &|m: &Match| m.first, &merge);
}

/// A loop that sums a scaled value into an accumulator.
struct Consumer {
    /// Index of the loop in its statement list (the top level, or the `block` loop's body).
    index: usize,
    acc: VarId,
}

/// The loops to merge.
struct Match {
    /// Index of the maximum's loop, and the accumulator it updates.
    first: usize,
    max_acc: VarId,
    /// The statistic: the read of `max_acc` after the first loop.
    stat: ValueId,
    /// Sum loops at the top level.
    top: Vec<Consumer>,
    /// The `block` loop holding the last consumer, and that consumer (indexed in its body).
    block: Option<(usize, Consumer)>,
    /// Index of the last top-level statement the match covers.
    last: usize,
}

/// Whether `l` is a reduction loop over the dimension of `like`, in its steps and stages.
fn same_reduction(l: &Loop, like: &Loop) -> bool {
    l.kind == LoopKind::Reduction && l.dim == like.dim && l.step == like.step && l.stages == like.stages
}

/// The updates of loop body `body` (top level) of accumulators that outlive a step: those the
/// body initializes itself (the scores' accumulator of a dot over a whole head dimension) are
/// part of the step's computation.
fn updates(body: &[Stmt]) -> Vec<(VarId, Combine, ValueId)> {
    let local: HashSet<VarId> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::Init { var, .. } => Some(*var),
            _ => None,
        })
        .collect();
    body.iter()
        .filter_map(|s| match s {
            Stmt::Update { var, combine, value } if !local.contains(var) => Some((*var, *combine, *value)),
            _ => None,
        })
        .collect()
}

/// Whether loop `l` is a maximum over its dimension into an accumulator it reads nowhere:
/// that accumulator.
fn max_loop(k: &Kernel, l: &Loop) -> Option<VarId> {
    if l.kind != LoopKind::Reduction {
        return None;
    }
    let [(acc, Combine::Reduce(RedOp::Max), r)] = updates(&l.body)[..] else { return None };
    let Some(Op::Reduce { op: RedOp::Max, dim, run: 1, .. }) = defs(&l.body).get(&r).copied() else { return None };
    let once = written_vars(&l.body).iter().filter(|v| **v == acc).count() == 1;
    (*dim == l.dim && once && !reads_var(&l.body, acc) && k.var(acc).extent(l.dim).is_none()).then_some(acc)
}

/// Whether loop `l` sums, in one update into an accumulator it does not read, a value scaled
/// by the statistic `stat` (see the module docs): its accumulator, and whether the value is a dot.
fn consumer(k: &Kernel, l: &Loop, stat: ValueId, dim: DimId) -> Option<(VarId, bool)> {
    let [(acc, Combine::Reduce(RedOp::Sum), t)] = updates(&l.body)[..] else { return None };
    if reads_var(&l.body, acc) || written_vars(&l.body).iter().filter(|v| **v == acc).count() != 1 {
        return None;
    }
    // The scale, of the statistic's shape, must broadcast to the accumulator.
    let stat_shape = &k.value(stat).shape;
    if stat_shape.dims().any(|d| k.var(acc).extent(d).is_none()) {
        return None;
    }
    // Nested loops must not read the statistic.
    let nested_reads = l.body.iter().any(|s| matches!(s, Stmt::Loop(inner) if reads_value(&inner.body, stat)));
    if nested_reads {
        return None;
    }
    let dot = exp_scaled(k, &l.body, t, stat, Scaled::SumsOver(dim))?;
    Some((acc, dot))
}

/// Whether anything in `stmts`, nested loops included, reads value `v`.
fn reads_value(stmts: &[Stmt], v: ValueId) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Let { op, .. } => op.operands().contains(&v),
        Stmt::Update { value, .. } | Stmt::Store { value, .. } => *value == v,
        Stmt::Loop(l) => reads_value(&l.body, v),
        Stmt::Init { .. } => false,
    })
}

fn find(k: &Kernel, stmts: &[Stmt], from: usize) -> Option<Match> {
    (from..stmts.len()).find_map(|i| match_at(k, stmts, i))
}

fn match_at(k: &Kernel, stmts: &[Stmt], first: usize) -> Option<Match> {
    let Stmt::Loop(l1) = &stmts[first] else { return None };
    let max_acc = max_loop(k, l1)?;
    let stat = stmts[first + 1..].iter().find_map(|s| match s {
        Stmt::Let { value, op: Op::Var(v) } if *v == max_acc => Some(*value),
        _ => None,
    })?;
    let mut top = Vec::new();
    let mut block = None;
    let mut any_dot = false;
    let mut last = first;
    for (i, s) in stmts.iter().enumerate().skip(first + 1) {
        match s {
            Stmt::Loop(l) if l.kind == LoopKind::Block => {
                // The last consumer, alone inside a block loop.
                let inner: Vec<(usize, &Loop)> = l
                    .body
                    .iter()
                    .enumerate()
                    .filter_map(|(j, s)| match s {
                        Stmt::Loop(x) => Some((j, x)),
                        _ => None,
                    })
                    .collect();
                let [(j, c)] = inner[..] else { break };
                let Some((acc, dot)) = same_reduction(c, l1).then(|| consumer(k, c, stat, l1.dim)).flatten() else { break };
                any_dot |= dot;
                block = Some((i, Consumer { index: j, acc }));
                last = i;
                break;
            }
            Stmt::Loop(l) => {
                let Some((acc, dot)) = same_reduction(l, l1).then(|| consumer(k, l, stat, l1.dim)).flatten() else { break };
                any_dot |= dot;
                top.push(Consumer { index: i, acc });
                last = i;
            }
            Stmt::Store { .. } => break,
            _ => {}
        }
    }
    if !any_dot {
        return None;
    }
    // With the merged loop inside a block loop, what follows that must not read what the loops
    // compute (it is computed inside the block loop now).
    let accs: HashSet<VarId> = top.iter().map(|c| c.acc).chain(block.iter().map(|(_, c)| c.acc)).chain([max_acc]).collect();
    let dependent = dependent_values(&stmts[first + 1..=last], &accs);
    let read_after = stmts[last + 1..].iter().any(|s| {
        dependent.iter().any(|v| reads_value(std::slice::from_ref(s), *v)) || accs.iter().any(|a| reads_var(std::slice::from_ref(s), *a))
    });
    if block.is_some() && read_after {
        return None;
    }
    // The reads of the accumulators move after the merged loop: the consumers read none of them
    // but the statistic, nor does what precedes the last consumer in its block loop.
    let reads_dependent = |stmts: &[Stmt], but: Option<ValueId>| dependent.iter().any(|v| Some(*v) != but && reads_value(stmts, *v));
    let loop_body = |i: usize| match &stmts[i] {
        Stmt::Loop(l) => l.body.as_slice(),
        _ => &[],
    };
    let reads_acc = |stmts: &[Stmt]| accs.iter().any(|a| reads_var(stmts, *a));
    if top.iter().any(|c| reads_dependent(loop_body(c.index), Some(stat)) || reads_acc(loop_body(c.index))) {
        return None;
    }
    if let Some((i, c)) = &block {
        let body = loop_body(*i);
        let consumer = &body[c.index..=c.index];
        if reads_dependent(&body[..c.index], None) || reads_dependent(consumer, Some(stat)) || reads_acc(&body[..=c.index]) {
            return None;
        }
    }
    // Between the loops (top level), what depends on them is reads of their accumulators.
    for s in &stmts[first + 1..=last] {
        if let Stmt::Let { value, op } = s {
            if dependent.contains(value) && !matches!(op, Op::Var(_)) {
                return None;
            }
        }
        if let Stmt::Update { var, .. } = s {
            if accs.contains(var) {
                return None;
            }
        }
    }
    Some(Match { first, max_acc, stat, top, block, last })
}

/// The values of `stmts` (top level) that read accumulators `accs`, directly or through others.
fn dependent_values(stmts: &[Stmt], accs: &HashSet<VarId>) -> HashSet<ValueId> {
    let mut out = HashSet::new();
    for s in stmts {
        if let Stmt::Let { value, op } = s {
            let reads = matches!(op, Op::Var(v) if accs.contains(v)) || op.operands().iter().any(|o| out.contains(o));
            if reads {
                out.insert(*value);
            }
        }
    }
    out
}

/// Statement list `stmts` with the loops of match `m` merged into one (see the module docs).
fn merge(k: &mut Kernel, mut stmts: Vec<Stmt>, m: Match) -> Vec<Stmt> {
    let after = stmts.split_off(m.last + 1);
    let covered = stmts.split_off(m.first);
    let mut out = stmts;
    let mut covered: Vec<Option<Stmt>> = covered.into_iter().map(Some).collect();
    let Some(Stmt::Loop(l1)) = covered[0].take() else { unreachable!("the maximum's loop") };
    let accs: HashSet<VarId> = m.top.iter().map(|c| c.acc).chain(m.block.iter().map(|(_, c)| c.acc)).chain([m.max_acc]).collect();

    // The block loop holding the last consumer, taken apart.
    let mut block = m.block.map(|(i, c)| {
        let Some(Stmt::Loop(b)) = covered[i - m.first].take() else { unreachable!("the block loop") };
        (b, c)
    });
    let mut consumers: Vec<Loop> = m
        .top
        .iter()
        .map(|c| match covered[c.index - m.first].take() {
            Some(Stmt::Loop(l)) => l,
            _ => unreachable!("a consumer loop"),
        })
        .collect();
    let mut sums: Vec<VarId> = m.top.iter().map(|c| c.acc).collect();
    let (mut block_before, mut block_after) = (Vec::new(), Vec::new());
    let mut block_loop = None;
    if let Some((b, c)) = block.as_mut() {
        let mut body = std::mem::take(&mut b.body);
        block_after = body.split_off(c.index + 1);
        let Some(Stmt::Loop(l)) = body.pop() else { unreachable!("the block's consumer") };
        block_before = body;
        consumers.push(l);
        sums.push(c.acc);
        block_loop = Some(std::mem::replace(b, Loop { body: Vec::new(), ..b.clone() }));
    }

    // The statements between: independent ones move before, accumulator initializations to
    // just before the merged loop, reads of the accumulators after it.
    let dependent = dependent_values(&covered.iter().flatten().cloned().collect::<Vec<_>>(), &accs);
    let (mut before, mut inits, mut reads) = (Vec::new(), Vec::new(), Vec::new());
    for s in covered.into_iter().flatten() {
        match &s {
            Stmt::Init { var, .. } if accs.contains(var) => inits.push(s),
            Stmt::Let { value, .. } if dependent.contains(value) => reads.push(s),
            _ => before.push(s),
        }
    }
    // The initializations of the accumulators before the first loop move too.
    let mut kept = Vec::with_capacity(out.len());
    for s in out {
        match &s {
            Stmt::Init { var, .. } if accs.contains(var) => inits.push(s),
            _ => kept.push(s),
        }
    }
    out = kept;
    out.extend(before);

    // The merged loop.
    let dim = l1.dim;
    let origin = std::iter::once(l1.origin.clone()).chain(consumers.iter().map(|l| l.origin.clone())).collect::<Vec<_>>().join(" + ");
    let stat_shape = k.value(m.stat).shape.clone();
    let mut body = Vec::new();
    let mut first_body = l1.body.clone();
    let max_update =
        first_body.iter().position(|s| matches!(s, Stmt::Update { var, .. } if *var == m.max_acc)).expect("the maximum's update");
    let update = first_body.remove(max_update);
    body.extend(first_body);
    let old = push(k, &mut body, stat_shape.clone(), Op::Var(m.max_acc));
    let Stmt::Update { value: step_max, .. } = update else { unreachable!("the maximum's update") };
    if k.approximates() {
        // The running maximum moves only past its margin (see the module docs).
        let margin = push(k, &mut body, Shape::default(), Op::Const(MOVE_MARGIN));
        let raised = push(k, &mut body, stat_shape.clone(), Op::Binary(BinOp::Add, old, margin));
        let moves = push(k, &mut body, stat_shape.clone(), Op::Binary(BinOp::Gt, step_max, raised));
        let next = push(k, &mut body, stat_shape.clone(), Op::Select(moves, step_max, old));
        body.push(Stmt::Update { var: m.max_acc, combine: Combine::Set, value: next });
    } else {
        body.push(update);
    }
    let new = push(k, &mut body, stat_shape.clone(), Op::Var(m.max_acc));
    let new0 = finite_or_zero(k, &mut body, new);
    let shift = push(k, &mut body, stat_shape.clone(), Op::Binary(BinOp::Sub, old, new0));
    let scale = push(k, &mut body, stat_shape.clone(), Op::Unary(UnOp::Exp, shift));
    for (l, acc) in consumers.into_iter().zip(sums) {
        // The accumulator moves to the new maximum first; the step's sum then adds to it as
        // before (so that a dot still accumulates straight into it).
        let shape = k.var(acc).clone();
        let sum = push(k, &mut body, shape.clone(), Op::Var(acc));
        let rescaled = push(k, &mut body, shape, Op::Binary(BinOp::Mul, sum, scale));
        body.push(Stmt::Update { var: acc, combine: Combine::Set, value: rescaled });
        let (stmts, mut rename) = drop_repeats(k, &l1.body, l.body);
        rename.insert(m.stat, new0);
        body.extend(stmts.into_iter().map(|s| renamed(s, &rename)));
    }
    let causal = causal_end(k, &body, step_max, dim);
    let merged = Stmt::Loop(Loop {
        dim,
        kind: l1.kind,
        step: l1.step,
        stages: l1.stages,
        backward: false,
        until: causal.map(|(i, _)| i),
        diagonal: causal.map(|(_, g)| g),
        steps: l1.steps,
        origin: format!("{origin}, online"),
        body,
    });
    match block_loop {
        Some(mut b) => {
            b.body = block_before;
            b.body.extend(inits);
            b.body.push(merged);
            b.body.extend(reads);
            b.body.extend(block_after);
            out.push(Stmt::Loop(b));
        }
        None => {
            out.extend(inits);
            out.push(merged);
            out.extend(reads);
        }
    }
    out.extend(after);
    out
}

/// Where the merged loop over `dim` (its body `body`, `step_max` the maximum of a step's scores)
/// may stop: at the end of this program's block of `i` when the scores are masked causally, `-inf`
/// wherever `dim`'s index exceeds `i`'s (`where(j <= i, s, -inf)`, or `j < i`), `i` blocked,
/// and the unmasked scores read only through such masks. A step whose keys all lie past the block's
/// last query then has scores of `-inf` only: the maximum keeps its value, the rescale is 1
/// (or 0 on accumulators that are still 0), and every sum and dot, scaled by `exp(s - max)`,
/// adds 0. The causal half of attention's key steps is skipped so. Also returns the mask's
/// condition, which holds in every lane of the steps below the diagonal ([`Diagonal`]).
fn causal_end(k: &Kernel, body: &[Stmt], step_max: ValueId, dim: DimId) -> Option<(DimId, Diagonal)> {
    let defs = defs(body);
    let Some(Op::Reduce { value, .. }) = defs.get(&step_max) else { return None };
    let masked = match defs.get(value) {
        Some(Op::MaskFill { value, .. }) => *value,
        _ => *value,
    };
    // Definitions in the loop's body, or anywhere in the kernel.
    let def = |v: ValueId| defs.get(&v).copied().or_else(|| k.def_of(v));
    let index = |v: &ValueId| match def(*v) {
        Some(Op::Index(d)) => Some(*d),
        _ => None,
    };
    // The query dimension `i` of a select that keeps a score where `dim`'s index is at most
    // `i`'s and makes it -inf elsewhere, with the scores it masks.
    let causal = |v: ValueId| -> Option<(DimId, ValueId, Diagonal)> {
        let Some(Op::Select(cond, scores, fill)) = defs.get(&v) else { return None };
        if constant(&def, *fill) != Some(f32::NEG_INFINITY) {
            return None;
        }
        let Some(Op::Binary(op, a, b)) = defs.get(cond) else { return None };
        let i = match (op, index(a), index(b)) {
            (BinOp::Le | BinOp::Lt, Some(x), Some(i)) if x == dim => i,
            (BinOp::Ge | BinOp::Gt, Some(i), Some(x)) if x == dim => i,
            _ => return None,
        };
        let diagonal = Diagonal { cond: *cond, strict: matches!(op, BinOp::Lt | BinOp::Gt) };
        (i != dim && k.grid.block_extent(i).is_some()).then_some((i, *scores, diagonal))
    };
    let (i, scores, diagonal) = causal(masked)?;
    // Everything else that reads the scores masks them alike (the copies the other loops made
    // before they merged), so nothing in the loop sees a score past the query.
    let masked_alike = body.iter().all(|s| match s {
        Stmt::Let { value, op } if op.operands().contains(&scores) => causal(*value).is_some_and(|(x, s, _)| (x, s) == (i, scores)),
        Stmt::Update { value, .. } | Stmt::Store { value, .. } => *value != scores,
        _ => true,
    });
    masked_alike.then_some((i, diagonal))
}

/// `body` without the computations it repeats from `first` (an accumulator initialized, what
/// updates it, a loop or the statements of one step, and its read: the scores of attention),
/// and the renaming of the values read from those to `first`'s.
fn drop_repeats(k: &Kernel, first: &[Stmt], body: Vec<Stmt>) -> (Vec<Stmt>, HashMap<ValueId, ValueId>) {
    let mut rename = HashMap::new();
    let mut out = Vec::with_capacity(body.len());
    // The runs of `first`: (first statement, last statement).
    let first_runs: Vec<(usize, usize)> = (0..first.len()).filter_map(|q| run_at(first, q).map(|end| (q, end))).collect();
    let mut i = 0;
    while i < body.len() {
        let repeated = run_at(&body, i).and_then(|end| {
            first_runs.iter().find_map(|&(q, first_end)| same_run(k, &first[q..=first_end], &body[i..=end]).map(|reads| (reads, end)))
        });
        match repeated {
            Some(((read_first, read_body), end)) => {
                rename.insert(read_body, read_first);
                i = end + 1;
            }
            None => {
                out.push(body[i].clone());
                i += 1;
            }
        }
    }
    (out, rename)
}

/// Where statement `i` of `stmts` initializes an accumulator that a later statement of the
/// list reads: the index of that read (the end of the accumulator's run).
fn run_at(stmts: &[Stmt], i: usize) -> Option<usize> {
    let Stmt::Init { var, .. } = &stmts[i] else { return None };
    (i + 1..stmts.len()).find(|j| matches!(&stmts[*j], Stmt::Let { op: Op::Var(v), .. } if v == var))
}

/// Whether runs `a` and `b` are each an accumulator's initialization, what updates it and its
/// read, computed alike: the two reads.
fn same_run(k: &Kernel, a: &[Stmt], b: &[Stmt]) -> Option<(ValueId, ValueId)> {
    let (Some(Stmt::Init { var: va, value: xa, .. }), Some(Stmt::Init { var: vb, value: xb, .. })) = (a.first(), b.first()) else {
        return None;
    };
    let (Some(Stmt::Let { value: ra, op: Op::Var(qa) }), Some(Stmt::Let { value: rb, op: Op::Var(qb) })) = (a.last(), b.last()) else {
        return None;
    };
    if a.len() != b.len() || xa.to_bits() != xb.to_bits() || qa != va || qb != vb || k.var(*va) != k.var(*vb) {
        return None;
    }
    let mut vals = HashMap::new();
    let mut vars = HashMap::from([(*vb, *va)]);
    same_stmts(k, &a[1..a.len() - 1], &b[1..b.len() - 1], &mut vals, &mut vars).then_some((*ra, *rb))
}

/// Whether statements `b` compute what `a` computes, `b`'s values and accumulators named as
/// `vals` and `vars` map them to `a`'s (extended as `b` defines more).
fn same_stmts(k: &Kernel, a: &[Stmt], b: &[Stmt], vals: &mut HashMap<ValueId, ValueId>, vars: &mut HashMap<VarId, VarId>) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).all(|(sa, sb)| match (sa, sb) {
        (Stmt::Let { value: va, op: oa }, Stmt::Let { value: vb, op: ob }) => {
            let ob = match ob {
                Op::Var(v) => Op::Var(vars.get(v).copied().unwrap_or(*v)),
                o => o.clone().renamed(|v| vals.get(&v).copied().unwrap_or(v)),
            };
            let same = ob == *oa && k.value(*va).shape == k.value(*vb).shape;
            if same {
                vals.insert(*vb, *va);
            }
            same
        }
        (Stmt::Init { var: va, value: xa, .. }, Stmt::Init { var: vb, value: xb, .. }) => {
            let same = xa.to_bits() == xb.to_bits() && k.var(*va) == k.var(*vb);
            if same {
                vars.insert(*vb, *va);
            }
            same
        }
        (Stmt::Update { var: va, combine: ca, value: xa }, Stmt::Update { var: vb, combine: cb, value: xb }) => {
            vars.get(vb) == Some(va) && ca == cb && vals.get(xb).copied().unwrap_or(*xb) == *xa
        }
        (Stmt::Loop(la), Stmt::Loop(lb)) => {
            la.dim == lb.dim
                && la.kind == lb.kind
                && la.step == lb.step
                && la.stages == lb.stages
                && la.backward == lb.backward
                && la.steps == lb.steps
                && same_stmts(k, &la.body, &lb.body, vals, vars)
        }
        _ => false,
    })
}
