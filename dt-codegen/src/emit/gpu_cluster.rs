//! Reductions over the programs of a thread-block cluster (`cluster(y:N)`): each program's
//! partial exchanged through distributed shared memory, one meeting for a pair of statistics,
//! and the cluster barriers that order them.

use super::*;
use crate::emit::expr::{combine, float_lit};
use crate::plan::layouts::RegLayout;
use dt_core::algo::DimId;

impl Emitter<'_> {
    /// [`Op::ClusterReduce`]: each program writes its partial to a shared-memory buffer; after a
    /// cluster barrier every program reads the buffers of all of them through distributed shared
    /// memory and combines them in one order, so that all get the same result. A one-element
    /// partial is read by the first lanes of every warp, one program each, and combined by
    /// shuffles; a larger one by each thread for its elements, program after program. Each
    /// program then arrives at a second barrier, which it waits on only before it writes a
    /// buffer again or exits ([`Self::cluster_wait`]): no program overwrites a buffer, or
    /// leaves, before every program has read it, and none waits for that in between.
    pub(super) fn cluster_reduce(&mut self, op: dt_core::algo::RedOp, value: ValueId, dim: DimId, id: ValueId) {
        let shape = self.k.value(id).shape.clone();
        let (dst, src, buf) = (format!("v{}", id.0), format!("v{}", value.0), self.fresh("cl"));
        let ranks = self.k.grid.cluster_size(dim).unwrap_or(1);
        let ident = float_lit(op.identity());
        self.declare(&dst, &shape);
        self.line(&format!("/* {} over the {ranks} programs of the cluster along {} */", op.name(), self.k.dim_name(dim)));
        self.line(&format!("__shared__ __align__(16) float {buf}[{}];", shape.elements()));
        self.cluster_wait(WaitPoint::Meeting(id));
        if let (RegLayout::Mma(a), RegLayout::Mma(b)) = (self.layout(value), self.layout(id)) {
            if a == b {
                self.exchange_fragments(op, a, &shape, &buf, &src, &dst, ranks);
                self.line("dt_cluster_arrive();");
                return;
            }
        }
        let replicated = self.layout(value) == RegLayout::Replicated && self.layout(id) == RegLayout::Replicated;
        match self.layout(value) {
            RegLayout::Replicated => self.line(&format!("if (tid == 0) {buf}[0] = {src}[0];")),
            layout => self.for_owned(&shape, layout, |e, _| e.line(&format!("{buf}[e] = {src}[r];"))),
        }
        self.line("dt_cluster_sync();");
        if replicated {
            self.line("{");
            self.line(&format!("    float p = (tid % 32) < {ranks} ? dt_cluster_load(&{buf}[0], (unsigned)(tid % 32)) : {ident};"));
            self.line(&format!("    for (int m = 16; m > 0; m >>= 1) p = {};", combine(op, "p", "dt_shfl_xor(p, m, 32)")));
            self.line(&format!("    {dst}[0] = p;"));
            self.line("}");
        } else {
            self.for_owned(&shape, self.layout(id), |e, _| {
                let acc = e.fresh("a");
                e.line(&format!("float {acc} = {ident};"));
                e.line(&format!(
                    "for (unsigned q = 0; q < {ranks}u; q++) {acc} = {};",
                    combine(op, &acc, &format!("dt_cluster_load(&{buf}[e], q)"))
                ));
                e.line(&format!("{dst}[r] = {acc};"));
            });
        }
        self.line("dt_cluster_arrive();");
    }

    /// [`Self::cluster_reduce`] of an accumulator tile (a contraction split over the cluster)
    /// whose sum keeps its fragment layout `t`: each thread writes its registers to `buf` and,
    /// after the cluster barrier, reads the same elements of every program's and combines them,
    /// `mma.sync`'s pairs of adjacent columns in one access. Rows past the output's end are not
    /// exchanged: they are never stored, and keep this program's own values.
    #[allow(clippy::too_many_arguments)]
    fn exchange_fragments(
        &mut self,
        op: dt_core::algo::RedOp,
        t: crate::plan::layouts::MmaTile,
        shape: &Shape,
        buf: &str,
        src: &str,
        dst: &str,
        ranks: u32,
    ) {
        // `mma.sync` registers `r` and `r + 1` (r even) hold adjacent columns of one row: they
        // go in one access. Other fragments go one float at a time (the CUDA cores' runs of 4
        // in one access were slower, decision 0025).
        let w = if t.isa == crate::plan::layouts::MatrixIsa::MmaSync { 2 } else { 1 };
        let regs = self.regs(shape.elements());
        let (row, col) = t.row_col("r");
        let (lr, lc) = (self.fresh("l"), self.fresh("l"));
        // The buffer is laid out [m][n], whatever the order of the value's dimensions, so that a
        // register pair's columns are adjacent in it (a swapped tile's `n` is the output's rows).
        let fragment_order = Shape(vec![(t.m, t.rows), (t.n, t.cols)]);
        debug_assert_eq!(fragment_order.elements(), shape.elements());
        let index = crate::emit::Lanes(vec![(t.m, lr.clone()), (t.n, lc.clone())]).index(&fragment_order);
        let inside = self.valid(t.m, &lr);
        let guard = if inside == crate::emit::ALWAYS_VALID { String::new() } else { format!("if ({inside}) ") };
        let (vec, load) = if w == 2 { ("float2", "dt_cluster_load2") } else { ("float", "dt_cluster_load") };
        let parts = ["x", "y"];
        let part = |v: &str, i: usize| if w == 1 { v.to_string() } else { format!("{v}.{}", parts[i]) };
        let each = |f: &dyn Fn(usize) -> String| (0..w).map(f).collect::<Vec<_>>().join(", ");
        let lanes = |e: &mut Self| {
            e.line(&format!("const int {lr} = {row}, {lc} = {col};"));
            e.line(&format!("const int e = {index};"));
        };
        let make = if w == 1 { format!("{src}[r]") } else { format!("make_{vec}({})", each(&|i| format!("{src}[r + {i}]"))) };
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {regs}; r += {w}) {{"));
        self.depth += 1;
        lanes(self);
        self.line(&format!("{guard}*({vec}*)&{buf}[e] = {make};"));
        self.depth -= 1;
        self.line("}");
        self.line("dt_cluster_sync();");
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {regs}; r += {w}) {{"));
        self.depth += 1;
        lanes(self);
        for i in 0..w {
            self.line(&format!("{dst}[r + {i}] = {src}[r + {i}];"));
        }
        self.line(&format!("{guard}{{"));
        self.depth += 1;
        let ident = float_lit(op.identity());
        self.line(&format!("{vec} a = {};", if w == 1 { ident.clone() } else { format!("make_{vec}({})", each(&|_| ident.clone())) }));
        self.line(&format!("for (unsigned q = 0; q < {ranks}u; q++) {{"));
        self.line(&format!("    const {vec} p = {load}(&{buf}[e], q);"));
        for i in 0..w {
            self.line(&format!("    {} = {};", part("a", i), combine(op, &part("a", i), &part("p", i))));
        }
        self.line("}");
        for i in 0..w {
            self.line(&format!("{dst}[r + {i}] = {};", part("a", i)));
        }
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }

    /// The pair whose second statistic meets at cluster reduction `met` (`plan::cluster_waits`):
    /// that statistic, its rule, its operand and its count.
    pub(super) fn paired_after(&self, met: ValueId) -> Option<(ValueId, PairRule, ValueId, Option<ValueId>)> {
        let paired = self.cluster.paired_at(met)?;
        match self.k.def_of(paired) {
            Some(Op::ClusterPaired { rule, value, count, .. }) => Some((paired, *rule, *value, *count)),
            _ => None,
        }
    }

    /// [`Op::ClusterPaired`]: one meeting for a row's two statistics. Each program writes its
    /// `first` statistic, its share `second` of the second one (about its own first) and, for
    /// layernorm, its `count` of lanes to a buffer; after a cluster barrier every program reads
    /// every program's and combines them ([`PairRule`]) into the second statistic `id` and, where
    /// the meeting stands for the first statistic's cluster reduction too (`first_met`), into
    /// that one's value. Values every thread holds are read by the first lanes of every warp, one
    /// program each, and combined by shuffles; others by the thread that holds them, program
    /// after program. The closing barrier is as [`Self::cluster_reduce`]'s.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn paired_meeting(
        &mut self,
        rule: PairRule,
        first: ValueId,
        first_met: Option<ValueId>,
        second: ValueId,
        count: Option<ValueId>,
        dim: DimId,
        id: ValueId,
    ) {
        let shape = self.k.value(id).shape.clone();
        let ranks = self.k.grid.cluster_size(dim).unwrap_or(1);
        let buf = self.fresh("cl");
        let dst = format!("v{}", id.0);
        self.declare(&dst, &shape);
        if let Some(met) = first_met {
            self.declare(&format!("v{}", met.0), &shape);
        }
        self.line(&format!(
            "/* {} over the {ranks} programs of the cluster along {}, at one meeting */",
            rule.name(),
            self.k.dim_name(dim)
        ));
        self.line(&format!("__shared__ float {buf}[{}];", 3 * shape.elements()));
        self.cluster_wait(WaitPoint::Meeting(first_met.unwrap_or(id)));
        let parts: Vec<(usize, ValueId)> = [Some((0, first)), Some((1, second)), count.map(|c| (2, c))].into_iter().flatten().collect();
        for &(slot, v) in &parts {
            match self.layout(v) {
                RegLayout::Replicated => self.line(&format!("if (tid == 0) {buf}[{slot}] = v{}[0];", v.0)),
                layout => self.for_owned(&shape, layout, |e, _| e.line(&format!("{buf}[3 * e + {slot}] = v{}[r];", v.0))),
            }
        }
        self.line("dt_cluster_sync();");
        let math = self.math;
        let exp = move |a: &str| unary_in(math, dt_core::algo::UnOp::Exp, a);
        let mut all = parts.iter().map(|p| p.1).chain([id]).chain(first_met);
        if all.all(|v| self.layout(v) == RegLayout::Replicated) {
            // Lane q < ranks reads program q's shares; the warp combines them.
            let shuffle = |e: &mut Self, v: &str, max: bool| {
                let c = if max { format!("fmaxf({v}, dt_shfl_xor({v}, m, 32))") } else { format!("{v} + dt_shfl_xor({v}, m, 32)") };
                e.line(&format!("    for (int m = 16; m > 0; m >>= 1) {v} = {c};"));
            };
            let none = if rule == PairRule::ExpScaled { "(-INFINITY)" } else { "0e0f" };
            self.line("{");
            self.line("    const unsigned q = (unsigned)(tid % 32);");
            self.line(&format!("    const float f = q < {ranks}u ? dt_cluster_load(&{buf}[0], q) : {none};"));
            self.line(&format!("    const float s = q < {ranks}u ? dt_cluster_load(&{buf}[1], q) : 0e0f;"));
            let met_value = match rule {
                PairRule::ExpScaled => {
                    self.line("    float top = f;");
                    shuffle(self, "top", true);
                    self.line(&format!("    float t = f == (-INFINITY) ? 0e0f : s * {};", exp("f - top")));
                    "top"
                }
                PairRule::SquaredDeviation => {
                    self.line(&format!("    const float n = q < {ranks}u ? dt_cluster_load(&{buf}[2], q) : 0e0f;"));
                    self.line("    float total = f, lanes = n;");
                    shuffle(self, "total", false);
                    shuffle(self, "lanes", false);
                    self.line("    const float d = n > 0e0f ? f / n - total / fmaxf(lanes, 1e0f) : 0e0f;");
                    self.line("    float t = n > 0e0f ? s + n * d * d : 0e0f;");
                    "total"
                }
            };
            shuffle(self, "t", false);
            if let Some(met) = first_met {
                self.line(&format!("    v{}[0] = {met_value};", met.0));
            }
            self.line(&format!("    {dst}[0] = t;"));
            self.line("}");
        } else {
            let load = |slot: usize| format!("dt_cluster_load(&{buf}[3 * e + {slot}], q)");
            let each = |body: String| format!("    for (unsigned q = 0; q < {ranks}u; q++) {{ {body} }}");
            let combined = |e: &mut Self, target: ValueId, met: bool| {
                let layout = e.layout(target);
                e.for_owned(&shape, layout, |e, _| {
                    e.line("{");
                    let result = match rule {
                        PairRule::ExpScaled => {
                            e.line("    float top = (-INFINITY), t = 0e0f;");
                            e.line(&each(format!("top = fmaxf(top, {});", load(0))));
                            e.line(&each(format!("const float f = {}; t += f == (-INFINITY) ? 0e0f : {} * {};", load(0), load(1), exp("f - top"))));
                            if met { "top" } else { "t" }
                        }
                        PairRule::SquaredDeviation => {
                            e.line("    float total = 0e0f, lanes = 0e0f, t = 0e0f;");
                            e.line(&each(format!("total += {}; lanes += {};", load(0), load(2))));
                            e.line(&each(format!(
                                "const float n = {}; const float d = n > 0e0f ? {} / n - total / fmaxf(lanes, 1e0f) : 0e0f; t += n > 0e0f ? {} + n * d * d : 0e0f;",
                                load(2),
                                load(0),
                                load(1)
                            )));
                            if met { "total" } else { "t" }
                        }
                    };
                    e.line(&format!("    v{}[r] = {result};", target.0));
                    e.line("}");
                });
            };
            combined(self, id, false);
            if let Some(met) = first_met {
                combined(self, met, true);
            }
        }
        self.line("dt_cluster_arrive();");
    }

    /// Waits on the cluster barrier where the plan has the kernel wait at `point`
    /// (`plan::cluster_waits`: after a meeting's arrival, before the next meeting, a loop with
    /// meetings, the end of a loop's body or of the program).
    pub(super) fn cluster_wait(&mut self, point: WaitPoint) {
        if self.cluster.waits_at(point) {
            self.line("dt_cluster_wait();");
        }
    }
}
