//! The kernel IR's verifier, run after every lowering pass in debug builds and tests (and
//! wherever `DT_VERIFY_KIR` is set): the invariants of [`crate::kir`] that every pass must keep.
//!
//! - Every value is defined once, before it is read, in the same statement list or an enclosing
//!   one; every accumulator is initialized before it is read or updated, likewise.
//! - Element-wise operations (and updates, and stores) broadcast by name: each dimension of an
//!   operand that spans more than one lane is a dimension of the result, with the same extent.
//! - A reduction's result and a dot's result have no lanes along the dimension they combine,
//!   and a dot's two operands agree on that dimension's extent.
//! - A dimension whose blocks the grid takes last first ([`crate::kir::Grid::descending`]) has
//!   a grid entry of its own (`n - 1 - g` is a block only there) and is not clustered.
//! - A multicast ([`crate::kir::Grid::multicast`]) is not clustered by `cluster` too, and its
//!   dimension varies fastest: the last grid entry is that dimension, or a split of it by a
//!   multiple of its programs, so that a cluster's programs hold adjacent blocks.

use crate::kir::{Kernel, Op, Shape, Stmt, ValueId, VarId};
use std::collections::HashSet;

/// Checks kernel `k`; the first broken rule, in words, where one is.
pub fn verify(k: &Kernel) -> Result<(), String> {
    for d in &k.grid.descending {
        if !k.grid.has_own_entry(*d) {
            return Err(format!("the grid takes the blocks of {} last first, which need a grid entry of their own", k.dim_name(*d)));
        }
    }
    if let Some((d, n)) = k.grid.multicast {
        if k.grid.cluster.is_some() || !k.grid.order.last().is_some_and(|e| e.runs_adjacent_blocks(d, n)) {
            return Err(format!(
                "the multicast along {} is clustered twice or its blocks are not adjacent in program order",
                k.dim_name(d)
            ));
        }
    }
    let mut scope = Scope { values: HashSet::new(), vars: HashSet::new(), defined: HashSet::new() };
    check_list(k, &k.body, &mut scope)
}

struct Scope {
    /// Values and accumulators visible at this point.
    values: HashSet<ValueId>,
    vars: HashSet<VarId>,
    /// Every value defined anywhere so far (each is defined once).
    defined: HashSet<ValueId>,
}

fn check_list(k: &Kernel, stmts: &[Stmt], scope: &mut Scope) -> Result<(), String> {
    // What this list defines goes out of scope after it.
    let (values, vars) = (scope.values.clone(), scope.vars.clone());
    for s in stmts {
        check_stmt(k, s, scope)?;
    }
    scope.values = values;
    scope.vars = vars;
    Ok(())
}

fn check_stmt(k: &Kernel, s: &Stmt, scope: &mut Scope) -> Result<(), String> {
    let value_in_scope = |v: &ValueId, scope: &Scope| -> Result<(), String> {
        if scope.values.contains(v) {
            Ok(())
        } else {
            Err(format!("%{} is read where it is not defined", v.0))
        }
    };
    match s {
        Stmt::Let { value, op } => {
            for o in op.operands() {
                value_in_scope(&o, scope)?;
            }
            if let Op::Var(var) = op {
                if !scope.vars.contains(var) {
                    return Err(format!("$acc{} is read before it is initialized", var.0));
                }
                broadcasts(k.var(*var), &k.value(*value).shape).map_err(|e| format!("%{} = read $acc{}: {e}", value.0, var.0))?;
            }
            check_shapes(k, *value, op).map_err(|e| format!("%{}: {e}", value.0))?;
            if !scope.defined.insert(*value) {
                return Err(format!("%{} is defined twice", value.0));
            }
            scope.values.insert(*value);
        }
        Stmt::Init { var, .. } => {
            scope.vars.insert(*var);
        }
        Stmt::Update { var, value, .. } => {
            value_in_scope(value, scope)?;
            if !scope.vars.contains(var) {
                return Err(format!("$acc{} is updated before it is initialized", var.0));
            }
            broadcasts(&k.value(*value).shape, k.var(*var)).map_err(|e| format!("update of $acc{} by %{}: {e}", var.0, value.0))?;
        }
        Stmt::Store { value, tile } => {
            value_in_scope(value, scope)?;
            broadcasts(&k.value(*value).shape, tile).map_err(|e| format!("store of %{}: {e}", value.0))?;
        }
        Stmt::Loop(l) => {
            if l.step == 0 {
                return Err(format!("a loop over {} steps by 0", k.dim_name(l.dim)));
            }
            if let Some(d) = l.until {
                let blocked = k.grid.block_extent(d).is_some();
                // Pass `full_steps` does not split such a loop: every arm but `Steps::All`
                // would stop at the dimension's end instead.
                let all = l.steps == crate::kir::Steps::All;
                if !blocked || d == l.dim || l.kind == crate::kir::LoopKind::Block || l.backward || !all {
                    return Err(format!("the loop over {} cannot stop at the end of a block of {}", k.dim_name(l.dim), k.dim_name(d)));
                }
            }
            if let Some(g) = l.diagonal {
                let defined = l.body.iter().any(|s| matches!(s, Stmt::Let { value, .. } if *value == g.cond));
                if l.until.is_none() || !defined {
                    return Err(format!(
                        "the loop over {} has a diagonal condition %{} it does not define or stop at",
                        k.dim_name(l.dim),
                        g.cond.0
                    ));
                }
            }
            check_list(k, &l.body, scope)?;
        }
    }
    Ok(())
}

/// Whether a tile of shape `from` can be read under shape `to`: every dimension of `from` that
/// spans more than one lane is a dimension of `to`, of the same extent.
fn broadcasts(from: &Shape, to: &Shape) -> Result<(), String> {
    for (d, n) in from.0.iter().filter(|(_, n)| *n > 1) {
        if to.extent(*d) != Some(*n) {
            return Err(format!("an operand spans {n} lanes of dimension {} where the result spans {:?}", d.index(), to.extent(*d)));
        }
    }
    Ok(())
}

fn check_shapes(k: &Kernel, value: ValueId, op: &Op) -> Result<(), String> {
    let result = &k.value(value).shape;
    let shape = |v: ValueId| &k.value(v).shape;
    match op {
        Op::Unary(_, a) | Op::MaskFill { value: a, .. } | Op::RunReduce { value: a, .. } | Op::ClusterReduce { value: a, .. } => {
            broadcasts(shape(*a), result)
        }
        Op::Binary(_, a, b) => broadcasts(shape(*a), result).and_then(|_| broadcasts(shape(*b), result)),
        Op::Select(c, a, b) => [c, a, b].into_iter().try_for_each(|o| broadcasts(shape(*o), result)),
        Op::Reduce { value: a, dim, .. } => {
            if result.extent(*dim).is_some_and(|n| n > 1) {
                return Err(format!("a reduction over dimension {} keeps its lanes", dim.index()));
            }
            let mut kept = shape(*a).clone();
            kept.0.retain(|(d, _)| d != dim);
            broadcasts(&kept, result)
        }
        Op::Dot { a, b, dim } => {
            let (sa, sb) = (shape(*a), shape(*b));
            if sa.extent(*dim) != sb.extent(*dim) {
                return Err(format!(
                    "a dot's operands span {:?} and {:?} lanes of dimension {}",
                    sa.extent(*dim),
                    sb.extent(*dim),
                    dim.index()
                ));
            }
            if result.extent(*dim).is_some_and(|n| n > 1) {
                return Err(format!("a dot over dimension {} keeps its lanes", dim.index()));
            }
            for s in [sa, sb] {
                let mut kept = s.clone();
                kept.0.retain(|(d, _)| d != dim);
                broadcasts(&kept, result)?;
            }
            Ok(())
        }
        Op::ClusterPaired { .. }
        | Op::Const(_)
        | Op::Scalar(_)
        | Op::Index(_)
        | Op::Len(_)
        | Op::BlockLanes(_)
        | Op::Load { .. }
        | Op::Var(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::verify;
    use crate::kir::{Op, Stmt};

    fn kernel() -> crate::kir::Kernel {
        let p = crate::compile_spec("Func out; In A, B; Var x; out[x] = A[x] + B[x]; out.block(x:64); out.tensorize(x:64); out.compile();")
            .expect("checks");
        crate::lower::lower(&p, p.kernels[0]).expect("lowers")
    }

    /// The statements of the kernel, loops flattened (outer first).
    fn lets(stmts: &mut [Stmt]) -> Vec<&mut Stmt> {
        let mut out = Vec::new();
        for s in stmts {
            match s {
                Stmt::Loop(l) => out.extend(lets(&mut l.body)),
                s => out.push(s),
            }
        }
        out
    }

    #[test]
    fn a_lowered_kernel_verifies() {
        verify(&kernel()).unwrap();
    }

    /// A multicast over blocks that are not adjacent in program order (its dimension not the
    /// grid's last entry), or next to a `cluster`, is caught; the checked schedule verifies.
    #[test]
    fn a_multicast_over_blocks_that_are_not_adjacent_is_caught() {
        let p = crate::compile_spec(
            "Func mm; In A, B; Var x, y; RVar k; mm[x, y] = rdot(A[x, k], B[k, y], k); mm.block(x:128, y:64); mm.tensorize(x:128, y:64, k:64); mm.multicast(y:2); mm.num_warps(8); mm.num_stages(4); mm.warp_specialize(); mm.dtypes(f16); mm.compile();",
        )
        .expect("checks");
        let mut k = crate::lower::lower(&p, p.kernels[0]).expect("lowers");
        verify(&k).unwrap();
        let (x, y) = (k.grid.blocked[0].0, k.grid.blocked[1].0);
        k.grid.multicast = Some((x, 2));
        assert!(verify(&k).unwrap_err().contains("not adjacent in program order"));
        k.grid.multicast = Some((y, 2));
        k.grid.cluster = Some((y, 2));
        assert!(verify(&k).unwrap_err().contains("clustered twice"));
    }

    #[test]
    fn a_value_read_before_its_definition_is_caught() {
        let mut k = kernel();
        // The sum reads the first load; make the first load read the sum instead.
        let stmts = lets(&mut k.body);
        let sum = stmts.iter().find_map(|s| match s {
            Stmt::Let { value, op: Op::Binary(..) } => Some(*value),
            _ => None,
        });
        let sum = sum.expect("a sum");
        for s in lets(&mut k.body) {
            if let Stmt::Let { op: op @ Op::Load { .. }, .. } = s {
                *op = Op::Unary(crate::algo::UnOp::Neg, sum);
                break;
            }
        }
        let err = verify(&k).unwrap_err();
        assert!(err.contains("is read where it is not defined"), "{err}");
    }

    #[test]
    fn a_store_of_a_wider_tile_is_caught() {
        let mut k = kernel();
        for s in lets(&mut k.body) {
            if let Stmt::Store { tile, .. } = s {
                tile.0.iter_mut().for_each(|(_, n)| *n /= 2);
            }
        }
        let err = verify(&k).unwrap_err();
        assert!(err.contains("store of"), "{err}");
    }

    #[test]
    fn blocks_taken_last_first_need_a_grid_entry_of_their_own() {
        let mut k = kernel();
        let x = k.grid.blocked[0].0;
        k.grid.descending.push(x);
        verify(&k).unwrap();
        // `map(x:x1/2, x1)` splits x's blocks over two entries.
        k.grid.order = vec![
            crate::schedule::MapEntry::Outer { dim: x, factor: 2 },
            crate::schedule::MapEntry::Inner { dim: x, factor: 2, name: "x1".into() },
        ];
        let err = verify(&k).unwrap_err();
        assert!(err.contains("last first"), "{err}");
    }
}
