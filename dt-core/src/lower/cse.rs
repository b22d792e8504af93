//! Pass 4: common subexpressions. Within one statement list, a `Let` whose operation (after
//! earlier merges) and shape equal those of an earlier `Let` is dropped and its uses read the
//! earlier value. Every operation but reading an accumulator is pure (inputs are read-only), and
//! a list runs at fixed loop offsets, so equal operations there compute equal tiles. Loads merge
//! too, which is what makes a fused row computation read its row once.
//!
//! Reading an accumulator merges while nothing writes it in between, and a read after a `set`
//! of the whole accumulator is the value set (also inside nested loops that do not write it).
//! That is what lets a consumer fused at a producer reuse what the producer computed from the
//! same statistic (softmax's `exp(A - max)`), instead of computing it again.

use std::collections::HashMap;

use crate::kir::{Combine, Kernel, Op, Stmt, ValueId, VarId};

pub fn merge_common_subexpressions(k: &mut Kernel) {
    let mut replace: Vec<ValueId> = (0..k.values.len() as u32).map(ValueId).collect();
    let body = std::mem::take(&mut k.body);
    k.body = merge(k, body, &mut replace, HashMap::new());
}

/// `set_to`: for each accumulator whose current value is known to be a whole value, that value.
fn merge(k: &Kernel, stmts: Vec<Stmt>, replace: &mut [ValueId], mut set_to: HashMap<VarId, ValueId>) -> Vec<Stmt> {
    let mut seen: Vec<(Op, ValueId)> = Vec::new();
    let mut out = Vec::with_capacity(stmts.len());
    // A write to `var` ends what was known of its value.
    let forget = |var: VarId, seen: &mut Vec<(Op, ValueId)>, set_to: &mut HashMap<VarId, ValueId>| {
        seen.retain(|(o, _)| *o != Op::Var(var));
        set_to.remove(&var);
    };
    for s in stmts {
        let r = |v: ValueId, replace: &[ValueId]| replace[v.0 as usize];
        match s {
            Stmt::Let { value, op } => {
                let op = op.renamed(|v| r(v, replace));
                if let Op::Var(var) = op {
                    if let Some(&set) = set_to.get(&var).filter(|s| k.value(**s) == k.value(value)) {
                        replace[value.0 as usize] = set;
                        continue;
                    }
                }
                let same = seen.iter().find(|(o, v)| *o == op && k.value(*v) == k.value(value));
                if let Some((_, earlier)) = same {
                    replace[value.0 as usize] = *earlier;
                    continue;
                }
                seen.push((op.clone(), value));
                out.push(Stmt::Let { value, op });
            }
            Stmt::Update { var, combine, value } => {
                let value = r(value, replace);
                forget(var, &mut seen, &mut set_to);
                if combine == Combine::Set && k.value(value).shape == *k.var(var) {
                    set_to.insert(var, value);
                }
                out.push(Stmt::Update { var, combine, value });
            }
            Stmt::Store { value, tile } => out.push(Stmt::Store { value: r(value, replace), tile }),
            Stmt::Loop(mut l) => {
                for var in &crate::kir::written_vars(&l.body) {
                    forget(*var, &mut seen, &mut set_to);
                }
                l.body = merge(k, l.body, replace, set_to.clone());
                out.push(Stmt::Loop(l));
            }
            Stmt::Init { var, value, origin } => {
                forget(var, &mut seen, &mut set_to);
                out.push(Stmt::Init { var, value, origin });
            }
        }
    }
    out
}
