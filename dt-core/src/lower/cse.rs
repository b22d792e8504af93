//! Pass 4: common subexpressions. Within one statement list, a `Let` whose operation (after
//! earlier merges) and shape equal those of an earlier `Let` is dropped and its uses read the
//! earlier value. Every operation but reading an accumulator is pure (inputs are read-only), and
//! a list runs at fixed loop offsets, so equal operations there compute equal tiles. Loads merge
//! too, which is what makes a fused row computation read its row once.

use crate::kir::{Kernel, Op, Stmt, ValueId};

pub fn merge_common_subexpressions(k: &mut Kernel) {
    let mut replace: Vec<ValueId> = (0..k.values.len() as u32).map(ValueId).collect();
    let body = std::mem::take(&mut k.body);
    k.body = merge(k, body, &mut replace);
}

fn merge(k: &Kernel, stmts: Vec<Stmt>, replace: &mut [ValueId]) -> Vec<Stmt> {
    let mut seen: Vec<(Op, ValueId)> = Vec::new();
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        let r = |v: ValueId, replace: &[ValueId]| replace[v.0 as usize];
        match s {
            Stmt::Let { value, op } => {
                let op = rename(op, |v| r(v, replace));
                if !matches!(op, Op::Var(_)) {
                    let same = seen.iter().find(|(o, v)| *o == op && k.value(*v) == k.value(value));
                    if let Some((_, earlier)) = same {
                        replace[value.0 as usize] = *earlier;
                        continue;
                    }
                    seen.push((op.clone(), value));
                }
                out.push(Stmt::Let { value, op });
            }
            Stmt::Update { var, combine, value } => out.push(Stmt::Update { var, combine, value: r(value, replace) }),
            Stmt::Store { value, tile } => out.push(Stmt::Store { value: r(value, replace), tile }),
            Stmt::Loop(mut l) => {
                l.body = merge(k, l.body, replace);
                out.push(Stmt::Loop(l));
            }
            init @ Stmt::Init { .. } => out.push(init),
        }
    }
    out
}

/// `op` with each operand `v` replaced by `f(v)`.
fn rename(op: Op, f: impl Fn(ValueId) -> ValueId) -> Op {
    match op {
        Op::Unary(u, a) => Op::Unary(u, f(a)),
        Op::Binary(b, x, y) => Op::Binary(b, f(x), f(y)),
        Op::Select(c, x, y) => Op::Select(f(c), f(x), f(y)),
        Op::MaskFill { value, dim, fill } => Op::MaskFill { value: f(value), dim, fill },
        Op::Reduce { op, value, dim } => Op::Reduce { op, value: f(value), dim },
        Op::Dot { a, b, dim } => Op::Dot { a: f(a), b: f(b), dim },
        leaf @ (Op::Const(_) | Op::Scalar(_) | Op::Index(_) | Op::Len(_) | Op::Load { .. } | Op::Var(_)) => leaf,
    }
}
