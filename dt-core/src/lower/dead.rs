//! Pass 6: dead code. Drops every `Let` whose value nothing reads, and every accumulator that
//! is never read (its `Init` and `Update`s), until nothing more goes; then loops left empty.
//! Common subexpressions leave such code behind: a fused statistic whose every read now uses
//! the value it was set from.

use crate::kir::{Kernel, Op, Stmt};

pub fn drop_dead_code(k: &mut Kernel) {
    loop {
        let mut used = vec![false; k.values.len()];
        let mut read = vec![false; k.vars.len()];
        mark(&k.body, &mut used, &mut read);
        let before = count(&k.body);
        let body = std::mem::take(&mut k.body);
        k.body = sweep(body, &used, &read);
        if count(&k.body) == before {
            return;
        }
    }
}

fn mark(stmts: &[Stmt], used: &mut [bool], read: &mut [bool]) {
    for s in stmts {
        match s {
            Stmt::Let { op, .. } => {
                if let Op::Var(v) = op {
                    read[v.0 as usize] = true;
                }
                for o in op.operands() {
                    used[o.0 as usize] = true;
                }
            }
            Stmt::Update { value, .. } | Stmt::Store { value, .. } => used[value.0 as usize] = true,
            Stmt::Loop(l) => mark(&l.body, used, read),
            Stmt::Init { .. } => {}
        }
    }
}

fn sweep(stmts: Vec<Stmt>, used: &[bool], read: &[bool]) -> Vec<Stmt> {
    stmts
        .into_iter()
        .filter_map(|s| match s {
            Stmt::Let { value, .. } if !used[value.0 as usize] => None,
            Stmt::Init { var, .. } | Stmt::Update { var, .. } if !read[var.0 as usize] => None,
            Stmt::Loop(mut l) => {
                l.body = sweep(l.body, used, read);
                (!l.body.is_empty()).then_some(Stmt::Loop(l))
            }
            s => Some(s),
        })
        .collect()
}

fn count(stmts: &[Stmt]) -> usize {
    stmts.iter().map(|s| if let Stmt::Loop(l) = s { 1 + count(&l.body) } else { 1 }).sum()
}
