//! Pass 2: the loop nest of one program.
//!
//! The kernel's dimensions are looped over in the order of its definition, outermost first: a
//! blocked dimension over the tiles of this program's block, any other over its whole extent.
//! Tile extents come from `tensorize` (the Func's own, else the kernel's, else 1; `d:0` is the
//! block extent or the bound rounded up to a power of two). Producers placed with `fuse_at(c, d)`
//! are computed right after the loop over `d` opens, into an accumulator that later reads use.
//! Other Funcs are inlined. A reduction becomes an accumulator set to the identity and a loop over
//! chunks of the reduced dimension that masks invalid lanes with the identity before combining.
//! Over a clustered dimension (`cluster(y:N)`) that loop covers this program's block, and the
//! partial is then combined over the cluster ([`Op::ClusterReduce`]).

use super::LowerError;
use crate::algo::{DimId, Expr, FuncId, Program, RedOp};
use crate::check::expanded_reads;
use crate::kir::*;

pub fn build_body(p: &Program, k: FuncId, kernel: &mut Kernel) -> Result<(), LowerError> {
    let f = p.func(k);
    let mut order: Vec<DimId> = f.dims.clone();
    order.extend(p.kernel_dims(k).into_iter().filter(|d| !f.dims.contains(d)));
    let mut b =
        Builder { p, k, kernel, order, active: Vec::new(), stmts: vec![Vec::new()], placed: Vec::new(), inlined: Default::default() };
    b.kernel_loops(0)?;
    b.kernel.body = b.stmts.pop().unwrap_or_default();
    Ok(())
}

struct Builder<'a> {
    p: &'a Program,
    k: FuncId,
    kernel: &'a mut Kernel,
    /// The kernel's dimension order: tile shapes list their dimensions in this order.
    order: Vec<DimId>,
    /// Enclosing loops, outermost first: dimension and tile extent.
    active: Vec<(DimId, u32)>,
    /// Statement lists under construction, innermost last.
    stmts: Vec<Vec<Stmt>>,
    /// Producers computed so far: Func, the labels they were computed under, their accumulator.
    placed: Vec<(FuncId, Vec<DimId>, VarId)>,
    /// Funcs inlined so far, by Func and labels: the value, and the depth of the statement list
    /// that defines it. A read under the same labels in that list, or in one inside it, reuses
    /// the value, so that a Func read twice by each level of a graph is lowered once per level,
    /// not once per path.
    inlined: std::collections::HashMap<(FuncId, Vec<DimId>), (ValueId, usize)>,
}

impl Builder<'_> {
    fn emit(&mut self, s: Stmt) {
        self.stmts.last_mut().expect("a statement list is open").push(s);
    }

    fn shape_of(&self, dims: impl IntoIterator<Item = DimId>) -> Shape {
        let dims: Vec<DimId> = dims.into_iter().collect();
        let mut out: Vec<(DimId, u32)> = Vec::new();
        for d in &self.order {
            if dims.contains(d) {
                out.push((*d, self.active_extent(*d)));
            }
        }
        Shape(out)
    }

    fn active_extent(&self, d: DimId) -> u32 {
        self.active.iter().rev().find(|(x, _)| *x == d).map_or(1, |(_, n)| *n)
    }

    fn value(&mut self, shape: Shape, op: Op) -> ValueId {
        let id = ValueId(self.kernel.values.len() as u32);
        self.kernel.values.push(Value { shape, layout: Layout::Blocked });
        self.emit(Stmt::Let { value: id, op });
        id
    }

    fn var(&mut self, shape: Shape) -> VarId {
        self.kernel.vars.push(shape);
        VarId(self.kernel.vars.len() as u32 - 1)
    }

    fn shape(&self, v: ValueId) -> Shape {
        self.kernel.value(v).shape.clone()
    }

    /// Tile extent of `d` in loops that compute `f`, and the primitive it came from.
    fn tile_extent(&self, f: FuncId, d: DimId) -> Result<(u32, String), LowerError> {
        let kf = self.p.func(self.k);
        let own = self.p.func(f).schedule.tile_extent(d);
        let (t, by) = match own.or_else(|| kf.schedule.tile_extent(d)) {
            Some(t) => (t, Some(if own.is_some() { f } else { self.k })),
            None => (1, None),
        };
        let name = self.p.dim_name(d);
        let origin = match by {
            Some(g) => format!("{}.tensorize({name}:{t})", self.p.func(g).name),
            None => String::new(),
        };
        if t != 0 {
            return Ok((t, origin));
        }
        if let Some(b) = kf.schedule.block_extent(d) {
            return Ok((b, origin));
        }
        match self.kernel.bound(d) {
            Some(n) if n <= super::MAX_TILE_ELEMENTS as u64 => Ok(((n as u32).next_power_of_two(), format!("{origin} bound({name}:{n})"))),
            Some(n) => {
                Err(LowerError(format!("bound({name}:{n}) is too large for a whole-extent tile (at most {})", super::MAX_TILE_ELEMENTS)))
            }
            None => Err(LowerError(format!("`{name}:0` needs a bound: `{name}` is not blocked"))),
        }
    }

    fn open_loop(&mut self, d: DimId, step: u32) {
        self.active.push((d, step));
        self.stmts.push(Vec::new());
    }

    /// Closes the innermost loop; its origin names `num_stages` when it is pipelined.
    fn close_loop(&mut self, d: DimId, kind: LoopKind, step: u32, stages: u32, origin: String) {
        self.active.pop();
        let body = self.stmts.pop().unwrap_or_default();
        let depth = self.stmts.len();
        self.inlined.retain(|_, (_, at)| *at <= depth);
        let origin = origin.trim();
        let origin = if stages > 1 { format!("{origin} num_stages({stages})").trim().to_string() } else { origin.to_string() };
        self.emit(Stmt::Loop(Loop {
            dim: d,
            kind,
            step,
            stages,
            backward: false,
            steps: crate::kir::Steps::All,
            until: None,
            diagonal: None,
            origin,
            body,
        }));
    }

    /// Pipeline depth of the loop about to close over the chunks of a dimension (a whole
    /// dimension, a reduction, an `rdot`): the kernel's `num_stages` when no loop that runs more
    /// than once is inside it (its loads are then the chunk's; a loop whose tile covers its
    /// dimension's bound runs once and becomes straight-line code, pass `single_pass`), else 1.
    fn chunk_stages(&self) -> u32 {
        fn loops_again(k: &Kernel, s: &Stmt) -> bool {
            let Stmt::Loop(l) = s else { return false };
            !super::single_pass::runs_once(k, l) || l.body.iter().any(|x| loops_again(k, x))
        }
        let innermost = !self.stmts.last().is_some_and(|s| s.iter().any(|x| loops_again(self.kernel, x)));
        if innermost {
            self.p.func(self.k).schedule.num_stages
        } else {
            1
        }
    }

    /// Opens the loop over the kernel's dimension number `level` and everything inside it.
    fn kernel_loops(&mut self, level: usize) -> Result<(), LowerError> {
        let kf = self.p.func(self.k);
        if level == kf.dims.len() {
            let v = self.expr(&kf.body.clone(), self.k)?;
            let tile = self.shape_of(kf.dims.iter().copied());
            self.emit(Stmt::Store { value: v, tile });
            return Ok(());
        }
        let d = kf.dims[level];
        let (step, mut origin) = self.tile_extent(self.k, d)?;
        let kind = match kf.schedule.block_extent(d) {
            Some(b) => {
                origin = format!("block({}:{b}) {origin}", self.p.dim_name(d));
                LoopKind::Block
            }
            None => LoopKind::Whole,
        };
        self.open_loop(d, step);
        // Producers placed at this level, producers first.
        for g in self.p.producers(self.k) {
            if self.p.func(g).schedule.fuse_at == Some((self.k, d)) {
                self.compute_placed(g)?;
            }
        }
        self.kernel_loops(level + 1)?;
        // num_stages also pipelines the loads of a block loop with several steps (its rows), and
        // those of a loop over a whole dimension (chunks of a long row).
        let stages = match kf.schedule.block_extent(d) {
            Some(b) if b > step => kf.schedule.num_stages,
            Some(_) => 1,
            None => self.chunk_stages(),
        };
        self.close_loop(d, kind, step, stages, origin);
        Ok(())
    }

    fn compute_placed(&mut self, g: FuncId) -> Result<(), LowerError> {
        let reads: Vec<Vec<DimId>> = expanded_reads(self.p, self.k).into_iter().filter(|(f, _)| *f == g).map(|(_, l)| l).collect();
        let Some(labels) = reads.first().cloned() else { return Ok(()) };
        if reads.iter().any(|l| *l != labels) {
            return Err(LowerError(format!(
                "`{}` is read under different labels; a placed Func must be read one way",
                self.p.func(g).name
            )));
        }
        let body = self.p.renamed_body(g, &labels);
        let (c, d) = self.p.func(g).schedule.fuse_at.expect("placed");
        let origin = format!("{}.fuse_at({}, {})", self.p.func(g).name, self.p.func(c).name, self.p.dim_name(d));
        // Read inside reductions of the consumer (over dimensions no loop is open for yet):
        // computed here for all of each, one whole tile (the checker saw to it), in a loop of one
        // step whose tile is the one the consumer's reduction reads.
        let mut inner = Vec::new();
        for x in labels.iter().copied().filter(|x| !self.active.iter().any(|(a, _)| a == x)) {
            let (step, by) = self.tile_extent(c, x)?;
            inner.push((x, step, by));
        }
        let shape = Shape(
            self.order
                .iter()
                .filter(|x| labels.contains(x))
                .map(|x| (*x, inner.iter().find(|(y, _, _)| y == x).map_or_else(|| self.active_extent(*x), |(_, n, _)| *n)))
                .collect(),
        );
        // Producers placed in `g` (a chain of `fuse_at`) are computed with it: those placed at a
        // dimension whose loop is open before its own loops, the others inside them. `g`'s
        // dimensions are named here by the labels it is read under.
        let chained: Vec<(FuncId, DimId)> = self
            .p
            .producers(self.k)
            .into_iter()
            .filter_map(|h| match self.p.func(h).schedule.fuse_at {
                Some((c, d)) if c == g => {
                    let at = self.p.func(g).dims.iter().position(|x| *x == d).and_then(|i| labels.get(i)).copied().unwrap_or(d);
                    Some((h, at))
                }
                _ => None,
            })
            .collect();
        let opened = |x: &DimId| inner.iter().any(|(y, _, _)| y == x);
        for (h, _) in chained.iter().filter(|(_, at)| !opened(at)) {
            self.compute_placed(*h)?;
        }
        // The accumulator is set up before those loops (the statement goes in once it exists).
        let init_at = self.stmts.last().map_or(0, Vec::len);
        for (x, step, _) in &inner {
            self.open_loop(*x, *step);
        }
        for (h, _) in chained.iter().filter(|(_, at)| opened(at)) {
            self.compute_placed(*h)?;
        }
        let v = self.expr(&body, g)?;
        let var = self.var(shape);
        self.emit(Stmt::Update { var, combine: Combine::Set, value: v });
        for (x, step, by) in inner.into_iter().rev() {
            let origin = format!("{} for all of {}, {by}", self.p.func(g).name, self.p.dim_name(x));
            self.close_loop(x, LoopKind::Whole, step, 1, origin);
        }
        self.stmts.last_mut().expect("a statement list is open").insert(init_at, Stmt::Init { var, value: 0.0, origin });
        self.placed.push((g, labels, var));
        Ok(())
    }

    fn union(&self, vs: &[ValueId]) -> Shape {
        let dims: Vec<DimId> = vs.iter().flat_map(|v| self.kernel.value(*v).shape.dims().collect::<Vec<_>>()).collect();
        self.shape_of(dims)
    }

    fn expr(&mut self, e: &Expr, f: FuncId) -> Result<ValueId, LowerError> {
        Ok(match e {
            Expr::Const(c) => self.value(Shape::default(), Op::Const(*c as f32)),
            Expr::Scalar(s) => {
                let slot = self.p.kernel_scalars(self.k).iter().position(|x| x == s).expect("scalar of the kernel");
                self.value(Shape::default(), Op::Scalar(slot))
            }
            Expr::Index(d) => self.value(self.shape_of([*d]), Op::Index(*d)),
            Expr::Len(d) => self.value(Shape::default(), Op::Len(*d)),
            Expr::Load { input, index } => {
                let slot = self.p.kernel_inputs(self.k).iter().position(|x| x == input).expect("input of the kernel");
                self.value(self.shape_of(index.iter().copied()), Op::Load { input: slot, axes: index.clone(), fill: 0.0 })
            }
            Expr::Read { func, index } => {
                if let Some((_, labels, var)) = self.placed.iter().find(|(g, _, _)| g == func).cloned() {
                    if labels != *index {
                        return Err(LowerError(format!(
                            "`{}` is read under different labels; a placed Func must be read one way",
                            self.p.func(*func).name
                        )));
                    }
                    let shape = self.kernel.var(var).clone();
                    return Ok(self.value(shape, Op::Var(var)));
                }
                if let Some((c, _)) = self.p.func(*func).schedule.fuse_at {
                    if c == self.k {
                        return Err(LowerError(format!("`{}` is read before the loop it is placed at", self.p.func(*func).name)));
                    }
                }
                let key = (*func, index.clone());
                if let Some(&(v, _)) = self.inlined.get(&key) {
                    return Ok(v);
                }
                let body = self.p.renamed_body(*func, index);
                let v = self.expr(&body, *func)?;
                self.inlined.insert(key, (v, self.stmts.len()));
                v
            }
            Expr::Unary(op, a) => {
                let a = self.expr(a, f)?;
                self.value(self.shape(a), Op::Unary(*op, a))
            }
            Expr::Binary(op, a, b) => {
                let a = self.expr(a, f)?;
                let b = self.expr(b, f)?;
                self.value(self.union(&[a, b]), Op::Binary(*op, a, b))
            }
            Expr::Select(c, a, b) => {
                let c = self.expr(c, f)?;
                let a = self.expr(a, f)?;
                let b = self.expr(b, f)?;
                self.value(self.union(&[c, a, b]), Op::Select(c, a, b))
            }
            Expr::Reduce { op, dim, body } => {
                let result = self.shape_of(e.free_dims());
                let var = self.var(result);
                self.emit(Stmt::Init { var, value: op.identity(), origin: format!("{} identity", op.name()) });
                let (step, origin) = self.tile_extent(f, *dim)?;
                let kind = self.reduction_kind(*dim);
                self.open_loop(*dim, step);
                let v = self.expr(body, f)?;
                let masked = self.value(self.shape(v), Op::MaskFill { value: v, dim: *dim, fill: op.identity() });
                let mut rshape = self.shape(masked);
                rshape.0.retain(|(d, _)| d != dim);
                let r = self.value(rshape, Op::Reduce { op: *op, value: masked, dim: *dim, run: 1 });
                self.emit(Stmt::Update { var, combine: Combine::Reduce(*op), value: r });
                let stages = self.chunk_stages();
                self.close_loop(*dim, kind, step, stages, format!("{} {origin}", op.name()));
                let shape = self.kernel.var(var).clone();
                let partial = self.value(shape.clone(), Op::Var(var));
                self.across_cluster(*op, partial, *dim, f)?
            }
            Expr::Dot { dim, a, b } => {
                let result = self.shape_of(e.free_dims());
                let var = self.var(result);
                self.emit(Stmt::Init { var, value: 0.0, origin: "rdot accumulator".into() });
                let (step, origin) = self.tile_extent(f, *dim)?;
                let kind = self.reduction_kind(*dim);
                self.open_loop(*dim, step);
                let va = self.dot_operand(a, f, *dim)?;
                let vb = self.dot_operand(b, f, *dim)?;
                let mut dshape = self.union(&[va, vb]);
                dshape.0.retain(|(d, _)| d != dim);
                let r = self.value(dshape, Op::Dot { a: va, b: vb, dim: *dim });
                self.emit(Stmt::Update { var, combine: Combine::Reduce(RedOp::Sum), value: r });
                let stages = self.chunk_stages();
                self.close_loop(*dim, kind, step, stages, format!("rdot {origin}"));
                let shape = self.kernel.var(var).clone();
                let partial = self.value(shape, Op::Var(var));
                self.across_cluster(RedOp::Sum, partial, *dim, f)?
            }
        })
    }

    /// The loop kind of a reduction over `d`: over the whole dimension, or, where `d` is the
    /// kernel's clustered dimension, over this program's block of it (the cluster combines the
    /// blocks' partials, see [`Self::across_cluster`]).
    fn reduction_kind(&self, d: DimId) -> LoopKind {
        if self.kernel.grid.cluster_size(d).is_some() {
            LoopKind::Block
        } else {
            LoopKind::Reduction
        }
    }

    /// The reduction `partial` over `d` (in the computation of `f`) made whole: where `d` is
    /// clustered, combined over the programs of the cluster; elsewhere it is whole already. The
    /// programs of a cluster meet once per meeting, so none may sit in a loop of several steps
    /// over `d`: the programs' blocks of `d` hold different numbers of steps (none past the
    /// row's end).
    fn across_cluster(&mut self, op: RedOp, partial: ValueId, d: DimId, f: FuncId) -> Result<ValueId, LowerError> {
        if self.reduction_kind(d) != LoopKind::Block {
            return Ok(partial);
        }
        // A loop whose step covers the block runs once in every program (pass `single_pass`
        // prints it as a block): its meeting is met once by each.
        let block = self.p.func(self.k).schedule.block_extent(d).unwrap_or(u32::MAX);
        if self.active.iter().any(|(x, step)| *x == d && *step < block) {
            let (fname, kname, dname) = (&self.p.func(f).name, &self.p.func(self.k).name, self.p.dim_name(d));
            return Err(LowerError(format!(
                "`{fname}` reduces over `{dname}`, which `{kname}` splits over a cluster, inside the loop over `{dname}`: \
                 the programs of a cluster meet once per reduction, so place `{fname}` outside that loop (fuse it at a \
                 dimension of `{kname}` before `{dname}`)"
            )));
        }
        Ok(self.value(self.shape(partial), Op::ClusterReduce { op, value: partial, dim: d }))
    }

    /// An operand of a contraction, with lanes past the end of the contracted dimension set to 0
    /// (a load already reads 0 there; anything else is masked explicitly).
    fn dot_operand(&mut self, e: &Expr, f: FuncId, dim: DimId) -> Result<ValueId, LowerError> {
        let v = self.expr(e, f)?;
        let is_load =
            self.stmts.last().and_then(|s| s.last()).is_some_and(|s| matches!(s, Stmt::Let { value, op: Op::Load { .. } } if *value == v));
        if is_load {
            return Ok(v);
        }
        Ok(self.value(self.shape(v), Op::MaskFill { value: v, dim, fill: 0.0 }))
    }
}
