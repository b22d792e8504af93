//! Part of pass 9 ([`super::online`]): a row split over a cluster meets once for both statistics.
//!
//! After the merged loop of a row split over a cluster, each program combines its lanes into its
//! partial of the first statistic (softmax's maximum, layernorm's sum), the cluster combines the
//! partials (a `ClusterReduce`), each program rescales its lanes' second statistic to the row's
//! first one, and the cluster combines the second statistic in turn: two meetings per row, each
//! a barrier of every program of the cluster. Here the lanes' second statistic is taken about
//! the program's own first one instead (its maximum; its mean, its sum over the lanes of its
//! block inside the row, known from the block's bounds), and the second `ClusterReduce` becomes
//! an [`Op::ClusterPaired`] right after the first one, which targets combine in the same
//! exchange:
//!
//! ```text
//! %4 = rsum %3 over the cluster           %m = div %3, max(lanes of this block of y, 1)
//! %6 = div %4, len y                      (the lanes' squares about %m, summed: %16)
//! (the lanes' squares about %6: %16)  =>  %4 = rsum %3 over the cluster
//! %17 = rsum %16 over the cluster         %17 = squares %16 about %3 over the cluster, at its meeting
//!                                         %6 = div %4, len y
//! ```
//!
//! On the H100 at 256x262144 softmax and layernorm rows ran faster with one meeting than with
//! two, in 16-bit types and in f32; leaving the second meeting out altogether (wrong results,
//! timed only) bounds what a meeting costs. Taking the program's count of lanes from its block's
//! bounds ([`Op::BlockLanes`]) instead of a reduction across its threads changed the 16-bit
//! layernorm by no more than the spread and made the f32 one a little faster
//! (docs/decisions/0010-one-cluster-meeting.md).

use crate::algo::{BinOp, DimId, RedOp};
use crate::kir::{Kernel, Layout, Op, PairRule, Shape, Stmt, Value, ValueId};
use std::collections::{HashMap, HashSet};

/// The statements after a merged loop (`tail`), rewritten to meet once where the row is split
/// over a cluster along `dim`; unchanged where they do not have the shape the merge leaves.
/// `stat` is the row's first statistic as the rescaling after the loop reads it (softmax's
/// maximum over the cluster, layernorm's mean).
pub(super) fn meet_once(k: &mut Kernel, tail: Vec<Stmt>, rule: PairRule, stat: ValueId, dim: DimId) -> Vec<Stmt> {
    if k.grid.cluster.map(|(d, _)| d) != Some(dim) {
        return tail;
    }
    match plan(k, &tail, rule, stat, dim) {
        Some(p) => rewrite(k, tail, p, rule, dim),
        None => tail,
    }
}

/// Where the two meetings are, and what the rescaling reads of the first.
struct Plan {
    /// The first meeting (`ClusterReduce` of `first`, giving `met`) and the second.
    at_first: usize,
    at_second: usize,
    first: ValueId,
    met: ValueId,
    /// What the rescaling reads in place of the row's statistic: `met` itself (softmax's
    /// maximum) or the mean computed from it (layernorm's).
    root: ValueId,
}

fn plan(k: &Kernel, tail: &[Stmt], rule: PairRule, stat: ValueId, dim: DimId) -> Option<Plan> {
    let op1 = match rule {
        PairRule::ExpScaled => RedOp::Max,
        PairRule::SquaredDeviation => RedOp::Sum,
    };
    let def = |v: ValueId| tail.iter().position(|s| matches!(s, Stmt::Let { value, .. } if *value == v));
    // The root: the statistic; for the mean, its division of the first meeting's result.
    let met = match rule {
        PairRule::ExpScaled => stat,
        PairRule::SquaredDeviation => match &tail[def(stat)?] {
            Stmt::Let { op: Op::Binary(BinOp::Div, met, _), .. } => *met,
            _ => return None,
        },
    };
    let at_first = def(met)?;
    let Stmt::Let { op: Op::ClusterReduce { op, value: first, dim: d }, .. } = &tail[at_first] else { return None };
    if *op != op1 || *d != dim {
        return None;
    }
    let at_second =
        (at_first + 1..tail.len()).find(|&i| matches!(tail[i], Stmt::Let { op: Op::ClusterReduce { .. }, .. } | Stmt::Loop(_)))?;
    match &tail[at_second] {
        Stmt::Let { op: Op::ClusterReduce { op: RedOp::Sum, value, dim: d }, .. } if *d == dim => {
            // One value per program, of the first's shape.
            if k.value(*value).shape != k.value(*first).shape {
                return None;
            }
        }
        _ => return None,
    }
    // Between the meetings, the first one's result is read only through the statistic (which
    // [`rewrite`] replaces), and nothing is stored.
    let (mut from_met, mut replaced) = (HashSet::from([met]), HashSet::from([stat]));
    for s in &tail[at_first + 1..at_second] {
        match s {
            Stmt::Let { value, .. } if *value == stat => {
                from_met.insert(*value);
            }
            Stmt::Let { value, op } if op.operands().iter().any(|o| from_met.contains(o)) => {
                if op.operands().iter().any(|o| from_met.contains(o) && !replaced.contains(o)) {
                    return None;
                }
                from_met.insert(*value);
                replaced.insert(*value);
            }
            Stmt::Let { .. } | Stmt::Init { .. } => {}
            Stmt::Update { value, .. } if !from_met.contains(value) || replaced.contains(value) => {}
            _ => return None,
        }
    }
    Some(Plan { at_first, at_second, first: *first, met, root: stat })
}

fn rewrite(k: &mut Kernel, mut tail: Vec<Stmt>, p: Plan, rule: PairRule, dim: DimId) -> Vec<Stmt> {
    let after = tail.split_off(p.at_second + 1);
    let Some(Stmt::Let { value: second_met, op: Op::ClusterReduce { value: second, .. } }) = tail.pop() else {
        unreachable!("the second meeting (plan)")
    };
    let between = tail.split_off(p.at_first + 1);
    let Some(first_meeting) = tail.pop() else { unreachable!("the first meeting (plan)") };
    let mut out = tail;
    let shape = k.value(p.first).shape.clone();

    // The program's own statistic, in place of the row's.
    // The count of its lanes is that of its block's lanes inside the row, from the block's
    // bounds rather than a reduction of the lanes' counts across the program's threads.
    let (own, counted) = match rule {
        PairRule::SquaredDeviation => {
            let n = push(k, &mut out, shape.clone(), Op::BlockLanes(dim));
            let one = push(k, &mut out, Shape::default(), Op::Const(1.0));
            let n1 = push(k, &mut out, shape.clone(), Op::Binary(BinOp::Max, n, one));
            (push(k, &mut out, shape.clone(), Op::Binary(BinOp::Div, p.first, n1)), Some(n))
        }
        _ => (p.first, None),
    };

    // Between the meetings: what reads the row's statistic reads the program's (a copy of each
    // statement on the way); the statistic and what follows from it move after the meetings.
    let mut subst: HashMap<ValueId, ValueId> = HashMap::from([(p.root, own)]);
    let mut from_met: HashSet<ValueId> = HashSet::from([p.met]);
    let mut inside = Vec::new();
    let mut moved = Vec::new();
    for s in between {
        match s {
            Stmt::Let { value, op } if value == p.root => {
                from_met.insert(value);
                moved.push(Stmt::Let { value, op });
            }
            Stmt::Let { value, op } if op.operands().iter().any(|o| from_met.contains(o)) => {
                let copy = push(k, &mut inside, k.value(value).shape.clone(), op.clone().renamed(|o| subst.get(&o).copied().unwrap_or(o)));
                subst.insert(value, copy);
                from_met.insert(value);
                moved.push(Stmt::Let { value, op });
            }
            Stmt::Update { var, combine, value } => {
                inside.push(Stmt::Update { var, combine, value: subst.get(&value).copied().unwrap_or(value) });
            }
            s => inside.push(s),
        }
    }
    out.extend(inside);
    out.push(first_meeting);
    let op = Op::ClusterPaired { rule, value: second, first: p.first, count: counted, dim };
    out.push(Stmt::Let { value: second_met, op });
    out.extend(moved);
    out.extend(after);
    out
}

fn push(k: &mut Kernel, out: &mut Vec<Stmt>, shape: Shape, op: Op) -> ValueId {
    let value = k.push_value(Value { shape, layout: Layout::Blocked });
    out.push(Stmt::Let { value, op });
    value
}

#[cfg(test)]
mod tests {
    use crate::kir::PairRule;
    use proptest::prelude::*;

    /// A row cut into programs' blocks (some empty, as past the end of a short row): each
    /// program's (first, second, count) as a program computes them about its own first statistic.
    fn shares(row: &[f32], cuts: &[usize], rule: PairRule) -> Vec<(f32, f32, f32)> {
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (row.len() + 1)).collect();
        bounds.extend([0, row.len()]);
        bounds.sort_unstable();
        bounds
            .windows(2)
            .map(|w| {
                let block = &row[w[0]..w[1]];
                let n = block.len() as f32;
                match rule {
                    PairRule::ExpScaled => {
                        let m = block.iter().fold(f32::NEG_INFINITY, |a, &z| a.max(z));
                        (m, block.iter().map(|z| (z - m).exp()).sum(), n)
                    }
                    PairRule::SquaredDeviation => {
                        let s: f32 = block.iter().sum();
                        let mean = s / n.max(1.0);
                        (s, block.iter().map(|z| (z - mean) * (z - mean)).sum(), n)
                    }
                }
            })
            .collect()
    }

    proptest! {
        /// Combining the programs' shares gives the second statistic of the whole row, taken
        /// about the row's first: softmax's sum of exp(z - row max), layernorm's squares from the
        /// row mean.
        #[test]
        fn paired_meeting_gives_the_rows_second_statistic(
            row in prop::collection::vec(-30.0f32..30.0, 1..200),
            cuts in prop::collection::vec(0usize..400, 0..15),
        ) {
            let max = row.iter().fold(f32::NEG_INFINITY, |a, &z| a.max(z));
            let want: f32 = row.iter().map(|z| (z - max).exp()).sum();
            let got = PairRule::ExpScaled.combine(&shares(&row, &cuts, PairRule::ExpScaled));
            prop_assert!((got - want).abs() <= 1e-4 * want, "softmax: {got} against {want}");
            let mean = row.iter().sum::<f32>() / row.len() as f32;
            let want: f32 = row.iter().map(|z| (z - mean) * (z - mean)).sum();
            let got = PairRule::SquaredDeviation.combine(&shares(&row, &cuts, PairRule::SquaredDeviation));
            prop_assert!((got - want).abs() <= 1e-3 * (1.0 + want), "layernorm: {got} against {want}");
        }
    }
}
