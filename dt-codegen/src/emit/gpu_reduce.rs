//! Reductions across the threads of a program: by cooperative groups reading a tile published
//! in shared memory, or in registers first (each thread its share, then shuffles, then the warps'
//! partials).

use super::*;
use crate::emit::expr::{combine, float_lit};
use crate::emit::Lanes;
use crate::plan::layouts::RegLayout;
use dt_core::algo::DimId;

impl Emitter<'_> {
    /// A reduction by groups of `group` consecutive threads per result element: each thread
    /// combines a strided share of the reduced lanes (read from slot 0), the group combines
    /// through shuffles within `group` lanes, and its first thread writes the result to slot 1.
    pub(super) fn cooperative_reduce(
        &mut self,
        op: dt_core::algo::RedOp,
        result: &Shape,
        input: &Shape,
        n: usize,
        st: usize,
        group: usize,
    ) {
        let (src, res, nres) = (self.slot(0), self.slot(1), result.elements());
        let ident = float_lit(op.identity());
        self.line(&format!("/* cooperative reduction: {group} threads per result */"));
        self.line("{");
        self.depth += 1;
        self.line(&format!("const int j = tid / {group};"));
        self.line(&format!("const int q = tid % {group};"));
        self.line(&format!("float p = {ident};"));
        self.line(&format!("if (j < {nres}) {{"));
        self.depth += 1;
        let lanes = Lanes(result.0.iter().map(|(d, _)| (*d, self.fresh("l"))).collect());
        let base = lanes.index(input);
        for ((d, ext), (_, l)) in result.0.iter().zip(&lanes.0) {
            if mentions(&base, l) {
                self.line(&format!("const int {l} = (j / {}) % {ext};", result.stride(*d)));
            }
        }
        self.line(&format!("for (int i = q; i < {n}; i += {group}) p = {};", combine(op, "p", &format!("{src}[{base} + i * {st}]"))));
        self.depth -= 1;
        self.line("}");
        self.line(&format!(
            "for (int m = {}; m > 0; m >>= 1) p = {};",
            group / 2,
            combine(op, "p", &format!("dt_shfl_xor(p, m, {group})"))
        ));
        self.line(&format!("if (q == 0 && j < {nres}) {res}[j] = p;"));
        self.depth -= 1;
        self.line("}");
        self.barrier();
    }

    /// A reduction whose rows each thread holds a share of in its own registers (see
    /// [`Mapping::register_reduce`]): each thread combines its share of every row, each warp
    /// combines its threads' partials with shuffles (in groups of 32 lanes, which is all of a
    /// warp on NVIDIA and half a wavefront on AMD), and the groups' partials meet in slot 1,
    /// where the thread holding each result (under `layout`: every thread when it is
    /// replicated) combines them. The tile never goes through shared memory.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn register_reduce(
        &mut self,
        id: ValueId,
        op: dt_core::algo::RedOp,
        src: &str,
        input: &Shape,
        dim: DimId,
        rows: usize,
        lanes_per_register: usize,
        dst: &str,
        result: &Shape,
        layout: RegLayout,
    ) {
        let per_row = input.extent(dim).unwrap_or(1) as usize / self.threads as usize / lanes_per_register;
        let groups = self.threads as usize / 32;
        let (ident, red) = (float_lit(op.identity()), self.slot(1));
        if groups == 1 {
            // One warp: after the shuffles every lane holds each row's result; no shared memory,
            // no barrier.
            self.line(&format!("/* reduction in registers: {per_row} per thread and row, then shuffles */"));
        } else {
            self.line(&format!("/* reduction in registers: {per_row} per thread and row, then shuffles, then {groups} groups of 32 */"));
        }
        self.line("{");
        self.depth += 1;
        self.line(&format!("float p[{rows}];"));
        self.line("#pragma unroll");
        self.line(&format!("for (int i = 0; i < {rows}; i++) {{"));
        self.depth += 1;
        self.line(&format!("p[i] = {ident};"));
        self.line("#pragma unroll");
        self.line(&format!("for (int q = 0; q < {per_row}; q++) p[i] = {};", combine(op, "p[i]", &format!("{src}[i * {per_row} + q]"))));
        self.line(&format!("for (int m = 16; m > 0; m >>= 1) p[i] = {};", combine(op, "p[i]", "dt_shfl_xor(p[i], m, 32)")));
        self.depth -= 1;
        self.line("}");
        if groups == 1 {
            self.for_owned(result, layout, |e, _| e.line(&format!("{dst}[r] = p[e];")));
            self.depth -= 1;
            self.line("}");
            return;
        }
        // The partials alternate between two regions, and a barrier comes first where the
        // region may still be read (`plan::partials`).
        let region = self.partials.region(id).expect("the plan places the partials of every reduction in registers");
        if self.partials.barrier_before(id) {
            self.barrier();
        }
        let red = format!("({red} + {})", region * self.publishing.partials);
        self.line(&format!("if (tid % 32 == 0) {{ for (int i = 0; i < {rows}; i++) {red}[(tid / 32) * {rows} + i] = p[i]; }}"));
        self.barrier();
        self.depth -= 1;
        self.line("}");
        self.for_owned(result, layout, |e, _| {
            let acc = e.fresh("a");
            e.line(&format!("float {acc} = {ident};"));
            e.line(&format!("for (int g = 0; g < {groups}; g++) {acc} = {};", combine(op, &acc, &format!("{red}[g * {rows} + e]"))));
            e.line(&format!("{dst}[r] = {acc};"));
        });
    }
}

/// `values` combined by `op` pairwise, as a balanced tree (independent operations first).
pub(super) fn combine_tree(op: dt_core::algo::RedOp, values: &[String]) -> String {
    match values {
        [] => float_lit(op.identity()),
        [one] => one.clone(),
        _ => {
            let (a, b) = values.split_at(values.len() / 2);
            let side = |half: &[String]| if half.len() > 1 { format!("({})", combine_tree(op, half)) } else { combine_tree(op, half) };
            combine(op, &side(a), &side(b))
        }
    }
}

/// Threads per result element of a reduction: a power of two, at most 32 (so the group lies in
/// one warp on NVIDIA and in one half-wavefront on AMD), no more than the threads allow per
/// result, and no more than the reduced lanes; 1 means one thread per result.
pub(super) fn reduce_group(threads: usize, results: usize, lanes: usize) -> usize {
    let per_result = threads / results.max(1);
    let mut g = 1;
    while g * 2 <= per_result.min(32) && g * 2 <= lanes {
        g *= 2;
    }
    g
}
