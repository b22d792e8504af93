//! Pass 12: layouts. Element-wise tiles stay [`Layout::Blocked`]; the operands and results of a
//! `dot` get tensor-core layouts, so the GPU emitters know where conversions are needed.

use crate::kir::{Kernel, Layout, Op, Stmt};

pub fn assign_layouts(k: &mut Kernel) {
    let mut marks = Vec::new();
    collect(&k.body, &mut marks);
    for (v, l) in marks {
        k.values[v.0 as usize].layout = l;
    }
}

fn collect(stmts: &[Stmt], marks: &mut Vec<(crate::kir::ValueId, Layout)>) {
    for s in stmts {
        match s {
            Stmt::Let { value, op: Op::Dot { .. } } => marks.push((*value, Layout::DotAcc)),
            Stmt::Loop(l) => collect(&l.body, marks),
            _ => {}
        }
    }
    // Dot operands: marked after results so an operand that is itself a dot result keeps the
    // operand layout (a conversion the emitter makes explicit).
    for s in stmts {
        if let Stmt::Let { op: Op::Dot { a, b, .. }, .. } = s {
            marks.push((*a, Layout::DotA));
            marks.push((*b, Layout::DotB));
        }
    }
}
