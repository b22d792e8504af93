//! The schedule checks of [`super::check`]: each primitive's arguments as it is read, placements
//! (`fuse_at`, chains of them), and the rules that need every primitive of the file (`:0`
//! extents, producers read inside reductions, kernels reading kernels, reductions never placed).

use super::*;

impl<'a, 'd> Checker<'a, 'd> {
    pub(super) fn schedule(&mut self, file: &ast::File) {
        let mut deferred: Vec<(FuncId, &Ident, &Vec<SchedArg>, Span)> = Vec::new();
        for item in &file.items {
            let Item::Sched { func, prim, args, span } = item else { continue };
            let f = match self.lookup(&func.name) {
                Some(Entity::Func(f)) => f,
                Some(e) => {
                    self.err(
                        func.span,
                        format!("`{}` is {}; only a Func has a schedule", func.name, Self::kind_word(e)),
                        "schedule primitives apply to Funcs",
                    );
                    continue;
                }
                None => {
                    self.err(func.span, format!("`{}` is not a declared Func", func.name), "declare it with `Func` and define it");
                    continue;
                }
            };
            if self.defs[f.index()].is_none() {
                if self.complete && !self.broken[f.index()] {
                    self.err(
                        func.span,
                        format!("`{}` is scheduled but never defined", func.name),
                        format!("define it: `{}[...] = ...;`", func.name),
                    );
                }
                continue;
            }
            match prim.name.as_str() {
                "tensorize" | "map" | "cluster" | "multicast" | "fuse_at" => deferred.push((f, prim, args, *span)),
                _ => self.primitive(f, prim, args, *span),
            }
        }
        // `multicast` reads the grid order that `map` sets, wherever it is written.
        deferred.sort_by_key(|(_, prim, ..)| prim.name == "multicast");
        for (f, prim, args, span) in deferred {
            self.primitive(f, prim, args, span);
        }
        self.check_schedules();
    }

    fn int_arg(&mut self, v: f64, span: Span, what: &str) -> Option<u64> {
        if v.fract() != 0.0 || v < 0.0 || v > u32::MAX as f64 {
            self.err(span, format!("{what} must be a whole number"), "for example 64");
            return None;
        }
        Some(v as u64)
    }

    fn no_args(&mut self, prim: &Ident, args: &[SchedArg]) -> bool {
        if let Some(a) = args.first() {
            self.err(a.span(), format!("`{}` takes no arguments", prim.name), format!("write `{}()`", prim.name));
            return false;
        }
        true
    }

    fn one_number(&mut self, prim: &Ident, args: &[SchedArg]) -> Option<(u64, Span)> {
        match args {
            [SchedArg::Number(v, s)] => Some((self.int_arg(*v, *s, &format!("the argument of `{}`", prim.name))?, *s)),
            _ => {
                self.err(prim.span, format!("`{}` takes one number", prim.name), format!("for example `{}(4)`", prim.name));
                None
            }
        }
    }

    /// The one number of primitive `prim` of `f` (written at `span`), where `ok` accepts it; else
    /// a located error with `hint`. The primitive's place is kept either way, for later checks.
    fn number_within(
        &mut self,
        f: FuncId,
        prim: &Ident,
        args: &[SchedArg],
        span: Span,
        ok: impl Fn(u64) -> bool,
        hint: &str,
    ) -> Option<u32> {
        let (n, s) = self.one_number(prim, args)?;
        self.sched_spans[f.index()].placement.push(span);
        if ok(n) {
            Some(n as u32)
        } else {
            self.err(s, format!("{}({n}) is not supported", prim.name), hint);
            None
        }
    }

    /// The dimension `id` names in `f`'s `map` (`fname`), which must be one of its `blocked`
    /// dimensions: else a located error.
    fn mapped_dim(&mut self, id: &Ident, blocked: &[DimId], fname: &str) -> Option<DimId> {
        let d = self.dim(id, blocked)?;
        if !blocked.contains(&d) {
            let label = format!(
                "blocked dimensions are: {}; add `{}` to `{fname}.block(...)` or leave it out of `map`",
                self.dims_named(blocked),
                id.name
            );
            self.err(id.span, format!("`{}` is not a blocked dimension of `{fname}`", id.name), label);
            return None;
        }
        Some(d)
    }

    /// Dimensions that the computation of `f` loops over: its own, those it reduces, and those
    /// of every Func it reads.
    fn computed_dims(&self, f: FuncId) -> Vec<DimId> {
        self.prog.kernel_dims(f)
    }

    fn primitive(&mut self, f: FuncId, prim: &Ident, args: &[SchedArg], span: Span) {
        let fname = self.prog.func(f).name.clone();
        let fdims = self.prog.func(f).dims.clone();
        match prim.name.as_str() {
            "compile" | "compile_to_kernel" => {
                if self.no_args(prim, args) && !self.prog.funcs[f.index()].schedule.kernel {
                    self.prog.funcs[f.index()].schedule.kernel = true;
                    self.prog.funcs[f.index()].schedule.compile_span = Some(span);
                    self.prog.kernels.push(f);
                }
            }
            "num_warps" => {
                let ok = |n: u64| (1..=32).contains(&n) && n.is_power_of_two();
                if let Some(n) = self.number_within(f, prim, args, span, ok, "use 1, 2, 4, 8, 16 or 32") {
                    self.prog.funcs[f.index()].schedule.num_warps = n;
                }
            }
            "num_stages" => {
                let ok = |n: u64| (1..=16).contains(&n);
                if let Some(n) = self.number_within(f, prim, args, span, ok, "the pipeline depth is 1 (no pipelining) to 16") {
                    self.prog.funcs[f.index()].schedule.num_stages = n;
                    self.prog.funcs[f.index()].schedule.num_stages_span = Some(span);
                }
            }
            "max_registers" => {
                let ok = |n: u64| (32..=255).contains(&n);
                if let Some(n) = self.number_within(f, prim, args, span, ok, "registers per thread: 32 to 255") {
                    self.prog.funcs[f.index()].schedule.max_registers = Some(n);
                }
            }
            "fma_exp" => {
                let ok = |n: u64| (1..=64).contains(&n) && n.is_power_of_two();
                if let Some(n) = self.number_within(f, prim, args, span, ok, "one exponential in 1, 2, 4, ... or 64") {
                    self.prog.funcs[f.index()].schedule.fma_exp = Some(n);
                }
            }
            "fast_math" | "warp_specialize" | "wgmma" | "persistent" => {
                if self.no_args(prim, args) {
                    let sched = &mut self.prog.funcs[f.index()].schedule;
                    match prim.name.as_str() {
                        "fast_math" => sched.fast_math = true,
                        "warp_specialize" => sched.warp_specialize = true,
                        "wgmma" => sched.wgmma = true,
                        _ => sched.persistent = true,
                    }
                }
                self.sched_spans[f.index()].placement.push(span);
            }
            "requires" => {
                const EXAMPLE: &str = "for example `f.requires(cuda);`, `f.requires(sm_90, aligned);`";
                if args.is_empty() {
                    self.err(span, "`requires` takes a target, `aligned`, or both", EXAMPLE);
                }
                for a in args {
                    let SchedArg::Name(id) = a else {
                        self.err(a.span(), "`requires` takes names", EXAMPLE);
                        continue;
                    };
                    let sched = &mut self.prog.funcs[f.index()].schedule;
                    match (id.name.as_str(), crate::schedule::Requirement::from_name(&id.name)) {
                        ("aligned", _) if sched.requires_aligned => self.err(id.span, "`aligned` is required twice", "name it once"),
                        ("aligned", _) => sched.requires_aligned = true,
                        (_, Some(r)) if sched.requires.is_some_and(|had| had != r) => self.err(
                            id.span,
                            format!("`{}` is a second target", id.name),
                            "a kernel is built for one target only: cuda or sm_90",
                        ),
                        (_, Some(r)) => sched.requires = Some(r),
                        (_, None) => self.err(
                            id.span,
                            format!("`{}` is neither a target nor `aligned`", id.name),
                            "targets are cuda and sm_90; `aligned` admits only tensors of whole 16-byte runs",
                        ),
                    }
                }
                self.sched_spans[f.index()].placement.push(span);
            }
            "dtypes" => {
                let mut out = Vec::new();
                for a in args {
                    match a {
                        SchedArg::Name(id) if DType::from_name(&id.name).is_some() => {
                            let t = DType::from_name(&id.name).unwrap_or(DType::F32);
                            if out.contains(&t) {
                                self.err(id.span, format!("`{}` is listed twice", id.name), "list each element type once");
                            }
                            out.push(t);
                        }
                        SchedArg::Name(id) => {
                            self.err(id.span, format!("`{}` is not an element type", id.name), "element types are f16, bf16 and f32")
                        }
                        other => self.err(other.span(), "`dtypes` takes element types", "for example `f.dtypes(f16, bf16, f32);`"),
                    }
                }
                if out.is_empty() {
                    self.err(prim.span, "`dtypes` needs at least one element type", "for example `f.dtypes(f16, bf16, f32);`");
                } else {
                    self.prog.funcs[f.index()].schedule.dtypes = out;
                    self.sched_spans[f.index()].dtypes = Some(span);
                }
            }
            "block" | "bound" | "specialize" => {
                let is_block = prim.name == "block";
                if is_block && self.sched_spans[f.index()].block.is_some() {
                    self.err(span, format!("`{fname}` is blocked twice"), "give all blocked dimensions in one `block(...)`");
                    return;
                }
                let mut out: Vec<(DimId, u64)> = Vec::new();
                for a in args {
                    let SchedArg::Extent(id, v, s) = a else {
                        self.err(
                            a.span(),
                            format!("`{}` takes `dimension:extent` pairs", prim.name),
                            format!("for example `{}.{}(x:64)`", fname, prim.name),
                        );
                        continue;
                    };
                    let Some(d) = self.dim(id, &fdims) else { continue };
                    let Some(n) = self.int_arg(*v, *s, "an extent") else { continue };
                    // A dimension that an `rdot` of `f`'s computation contracts may be blocked to
                    // split it over a cluster (`cluster(k:N)`, checked once the schedule is read).
                    if is_block && !fdims.contains(&d) && !self.contracts(f, d) {
                        if self.computed_dims(f).contains(&d) {
                            self.err(
                                id.span,
                                format!("cannot block `{}`: `{fname}` reduces over it", id.name),
                                "only dimensions of the result can be blocked; tensorize a reduction dimension instead",
                            );
                        } else {
                            self.err(
                                id.span,
                                format!("`{}` is not a dimension of `{fname}`", id.name),
                                format!("dimensions of `{fname}` are: {}", self.dims_named(&fdims)),
                            );
                        }
                        continue;
                    }
                    if !is_block && !self.computed_dims(f).contains(&d) && !self.tainted(f) {
                        self.err(
                            id.span,
                            format!("`{}` is not a dimension of `{fname}`", id.name),
                            format!("dimensions of `{fname}` are: {}", self.dims_named(&fdims)),
                        );
                        continue;
                    }
                    if n == 0 {
                        self.err(
                            *s,
                            format!(
                                "a {} of 0 is not allowed",
                                match prim.name.as_str() {
                                    "block" => "block extent",
                                    "bound" => "bound",
                                    _ => "specialized size",
                                }
                            ),
                            "use a positive extent",
                        );
                        continue;
                    }
                    if out.iter().any(|(x, _)| *x == d) {
                        self.err(id.span, format!("`{}` is given twice", id.name), "name each dimension once");
                        continue;
                    }
                    out.push((d, n));
                }
                let sched = &mut self.prog.funcs[f.index()].schedule;
                if is_block {
                    sched.block = out.into_iter().map(|(d, n)| (d, n as u32)).collect();
                    self.sched_spans[f.index()].block = Some(span);
                    self.sched_spans[f.index()].placement.push(span);
                } else if prim.name == "bound" {
                    sched.bounds.extend(out);
                } else {
                    sched.specialize.extend(out);
                    self.sched_spans[f.index()].placement.push(span);
                }
            }
            "tensorize" => {
                let computed = self.computed_dims(f);
                for a in args {
                    let SchedArg::Extent(id, v, s) = a else {
                        self.err(a.span(), "`tensorize` takes `dimension:extent` pairs", format!("for example `{fname}.tensorize(y:64)`"));
                        continue;
                    };
                    let Some(d) = self.dim(id, &fdims) else { continue };
                    let Some(n) = self.int_arg(*v, *s, "a tile extent") else { continue };
                    if !computed.contains(&d) {
                        if !self.tainted(f) {
                            self.err(
                                id.span,
                                format!("`{}` is not a dimension of `{fname}` or of anything it computes", id.name),
                                format!("dimensions here are: {}", self.dims_named(&computed)),
                            );
                        }
                        continue;
                    }
                    if n != 0 && !n.is_power_of_two() {
                        self.err(
                            *s,
                            format!("tile extent {n} is not a power of two"),
                            format!("use {} or {}", n.next_power_of_two() / 2, n.next_power_of_two()),
                        );
                        continue;
                    }
                    if n > 1 << 20 {
                        self.err(*s, format!("tile extent {n} is too large"), "tiles hold at most 2^20 elements per dimension");
                        continue;
                    }
                    let sched = &mut self.prog.funcs[f.index()].schedule;
                    if let Some(slot) = sched.tensorize.iter_mut().find(|(x, _)| *x == d) {
                        slot.1 = n as u32;
                    } else {
                        sched.tensorize.push((d, n as u32));
                    }
                    self.sched_spans[f.index()].tensorize.push((d, n as u32, *s));
                }
            }
            "map" => self.map(f, args, span),
            "cluster" => self.cluster(f, args, span),
            "multicast" => self.multicast(f, args, span),
            "fuse_at" => self.fuse_at(f, args, span),
            _ => self.err(prim.span, format!("unknown schedule primitive `{}`", prim.name), format!("primitives are: {PRIMITIVES}")),
        }
    }

    fn map(&mut self, f: FuncId, args: &[SchedArg], span: Span) {
        let fname = self.prog.func(f).name.clone();
        self.sched_spans[f.index()].map = Some(span);
        self.sched_spans[f.index()].placement.push(span);
        if self.sched_spans[f.index()].block.is_none() {
            if self.complete {
                self.err(span, format!("`map` on `{fname}` needs `block`"), format!("map orders blocks: add `{fname}.block(...)` first"));
            }
            return;
        }
        let blocked: Vec<DimId> = self.prog.func(f).schedule.block.iter().map(|(d, _)| *d).collect();
        let mut entries = Vec::new();
        let mut pending_inner: Vec<(String, DimId, u32, Span)> = Vec::new();
        let mut seen = Vec::new();
        for a in args {
            match a {
                SchedArg::Name(id) => {
                    if let Some(pos) = pending_inner.iter().position(|(n, ..)| *n == id.name) {
                        let (name, dim, factor, _) = pending_inner.remove(pos);
                        entries.push(MapEntry::Inner { dim, factor, name });
                        continue;
                    }
                    let Some(d) = self.mapped_dim(id, &blocked, &fname) else { continue };
                    if seen.contains(&d) {
                        self.err(id.span, format!("`{}` appears twice in `map`", id.name), "each blocked dimension once");
                        continue;
                    }
                    seen.push(d);
                    entries.push(MapEntry::Whole(d));
                }
                SchedArg::Split { dim, inner, factor, factor_span } => {
                    let Some(d) = self.mapped_dim(dim, &blocked, &fname) else { continue };
                    let Some(n) = self.int_arg(*factor, *factor_span, "a split factor") else { continue };
                    if n == 0 {
                        self.err(*factor_span, "a split factor of 0 is not allowed", "use a positive factor such as 8");
                        continue;
                    }
                    if seen.contains(&d) {
                        self.err(dim.span, format!("`{}` appears twice in `map`", dim.name), "each blocked dimension once");
                        continue;
                    }
                    if self.lookup(&inner.name).is_some() {
                        self.err(
                            inner.span,
                            format!("`{}` is already declared", inner.name),
                            "the inner part of a split needs a fresh name",
                        );
                        continue;
                    }
                    seen.push(d);
                    entries.push(MapEntry::Outer { dim: d, factor: n as u32 });
                    pending_inner.push((inner.name.clone(), d, n as u32, inner.span));
                }
                other => self.err(other.span(), "`map` takes dimensions and splits", "for example `map(x:x1/8, y, x1)`"),
            }
        }
        for (name, _, _, s) in pending_inner {
            self.err(
                s,
                format!("the inner part `{name}` is never placed"),
                format!("list `{name}` after the split, e.g. `map(x:{name}/8, y, {name})`"),
            );
        }
        for d in &blocked {
            if !seen.contains(d) {
                self.err(
                    span,
                    format!("`map` does not place blocked dimension `{}`", self.prog.dim_name(*d)),
                    "list every blocked dimension once",
                );
            }
        }
        self.prog.funcs[f.index()].schedule.map = Some(entries);
    }

    /// Whether the computation of `f` (its definition, or a producer fused into it) contracts
    /// `d` with an `rdot`.
    fn contracts(&self, f: FuncId, d: DimId) -> bool {
        let mut found = false;
        for body in self.prog.kernel_bodies(f) {
            body.walk(&mut |e| found |= matches!(e, Expr::Dot { dim, .. } if *dim == d));
        }
        found
    }

    /// `cluster(y:N)`: `y` must be the kernel's blocked dimension that varies fastest with the
    /// program id (the last blocked one, no `map`), so that the `N` blocks of a row are
    /// consecutive programs, which is how a launch groups programs into clusters.
    fn cluster(&mut self, f: FuncId, args: &[SchedArg], span: Span) {
        let fname = self.prog.func(f).name.clone();
        self.sched_spans[f.index()].placement.push(span);
        if self.sched_spans[f.index()].cluster.replace(span).is_some() {
            self.err(span, format!("`{fname}` is clustered twice"), "a kernel has one `cluster`");
            return;
        }
        let [SchedArg::Extent(id, v, s)] = args else {
            self.err(span, "`cluster` takes one `dimension:programs` pair", format!("for example `{fname}.cluster(y:8)`"));
            return;
        };
        let fdims = self.prog.func(f).dims.clone();
        let Some(d) = self.dim(id, &fdims) else { return };
        let Some(n) = self.int_arg(*v, *s, "a cluster size") else { return };
        if !(2..=crate::signature::MAX_CLUSTER as u64).contains(&n) || !n.is_power_of_two() {
            self.err(*s, format!("a cluster of {n} programs is not supported"), "use 2, 4, 8 or 16 programs per cluster");
            return;
        }
        let sched = &self.prog.func(f).schedule;
        // A blocked contraction comes after the result's dimensions (see `lower::grid`).
        let contraction = sched.block.iter().find(|(x, _)| !fdims.contains(x)).map(|(x, _)| *x);
        let last_blocked = contraction.or_else(|| fdims.iter().rev().find(|x| sched.block_extent(**x).is_some()).copied());
        if sched.block_extent(d).is_none() {
            let label = format!("a cluster groups blocks: add `{}` to `{fname}.block(...)`", id.name);
            self.err(id.span, format!("`{}` is not a blocked dimension of `{fname}`", id.name), label);
            return;
        }
        if last_blocked != Some(d) {
            let other = last_blocked.map_or("?", |x| self.prog.dim_name(x)).to_string();
            self.err(
                id.span,
                format!("cannot cluster `{}`: `{other}` varies faster with the program id", id.name),
                "the programs of a cluster are consecutive: cluster the last blocked dimension",
            );
            return;
        }
        self.prog.funcs[f.index()].schedule.cluster = Some((d, n as u32));
    }

    /// `multicast(d:N)`: programs of `N` adjacent blocks of `d` form a cluster (see
    /// [`crate::schedule::Schedule::multicast`]). Their blocks are adjacent where `d` varies
    /// fastest with the program id: the last entry of the grid's order is `d`, or a split of `d`
    /// whose inner factor is a multiple of `N`.
    fn multicast(&mut self, f: FuncId, args: &[SchedArg], span: Span) {
        let fname = self.prog.func(f).name.clone();
        self.sched_spans[f.index()].placement.push(span);
        if self.sched_spans[f.index()].multicast.replace(span).is_some() {
            self.err(span, format!("`{fname}` is multicast twice"), "a kernel has one `multicast`");
            return;
        }
        let [SchedArg::Extent(id, v, s)] = args else {
            self.err(span, "`multicast` takes one `dimension:programs` pair", format!("for example `{fname}.multicast(y:2)`"));
            return;
        };
        let fdims = self.prog.func(f).dims.clone();
        let Some(d) = self.dim(id, &fdims) else { return };
        let Some(n) = self.int_arg(*v, *s, "a multicast size") else { return };
        if !matches!(n, 2 | 4) {
            self.err(*s, format!("a multicast over {n} programs is not supported"), "use 2 or 4 programs");
            return;
        }
        let sched = &self.prog.func(f).schedule;
        if sched.block_extent(d).is_none() {
            let label = format!("multicast groups adjacent blocks: add `{}` to `{fname}.block(...)`", id.name);
            self.err(id.span, format!("`{}` is not a blocked dimension of `{fname}`", id.name), label);
            return;
        }
        let last = match &sched.map {
            Some(m) => m.last().cloned(),
            None => fdims.iter().rev().find(|x| sched.block_extent(**x).is_some()).map(|x| MapEntry::Whole(*x)),
        };
        if !last.is_some_and(|e| e.runs_adjacent_blocks(d, n as u32)) {
            self.err(
                id.span,
                format!("cannot multicast along `{}`: its blocks are not adjacent in program order", id.name),
                format!(
                    "the programs of a cluster are consecutive: `{}` (or a split of it by a multiple of {n}) must vary fastest",
                    id.name
                ),
            );
            return;
        }
        self.prog.funcs[f.index()].schedule.multicast = Some((d, n as u32));
    }

    fn fuse_at(&mut self, p: FuncId, args: &[SchedArg], span: Span) {
        let pname = self.prog.func(p).name.clone();
        let [SchedArg::Name(cid), SchedArg::Name(did)] = args else {
            self.err(span, "`fuse_at` takes a consumer Func and one of its dimensions", format!("for example `{pname}.fuse_at(out, x)`"));
            return;
        };
        if self.sched_spans[p.index()].fuse_at.is_some() {
            self.err(span, format!("`{pname}` is placed twice"), "a Func has one `fuse_at`");
            return;
        }
        // Recorded even if the placement is wrong: `p` is not also "never placed".
        self.sched_spans[p.index()].fuse_at = Some(span);
        let c = match self.lookup(&cid.name) {
            Some(Entity::Func(c)) if self.defs[c.index()].is_some() => c,
            Some(Entity::Func(c)) if self.broken[c.index()] || !self.complete => return,
            _ => {
                self.err(cid.span, format!("`{}` is not a defined Func", cid.name), "fuse_at places a producer inside a consumer Func");
                return;
            }
        };
        if self.tainted(c) {
            return;
        }
        if !self.prog.producers(c).contains(&p) {
            let readers: Vec<&str> =
                self.prog.funcs.iter().filter(|g| g.body.reads().iter().any(|(r, _)| *r == p)).map(|g| g.name.as_str()).collect();
            let label = match readers.as_slice() {
                [] => format!("`{pname}` can only be fused into a Func that reads it, and none does"),
                _ => format!("`{pname}` can only be fused into a Func that reads it: {}", readers.join(", ")),
            };
            self.err(cid.span, format!("`{}` does not consume `{pname}`", cid.name), label);
            return;
        }
        let cdims = self.prog.func(c).dims.clone();
        let Some(d) = self.dim(did, &cdims) else { return };
        let Some(level) = cdims.iter().position(|x| *x == d) else {
            self.err(
                did.span,
                format!("`{}` is not a dimension of `{}`", did.name, cid.name),
                format!("dimensions of `{}` are: {}", cid.name, self.dims_named(&cdims)),
            );
            return;
        };
        let outer = &cdims[..=level];
        for (g, labels) in expanded_reads(&self.prog, c) {
            if g != p {
                continue;
            }
            if let Some(bad) = labels.iter().find(|l| !outer.contains(l)) {
                let bad_name = self.prog.dim_name(*bad).to_string();
                if labels.iter().all(|l| cdims.contains(l)) {
                    let level = innermost_read_level(&self.prog, c, p).map_or(bad_name.clone(), |d| self.prog.dim_name(d).to_string());
                    let label =
                        format!("`{pname}` is read at [{}]: write `{pname}.fuse_at({}, {level});`", self.dims_named(&labels), cid.name);
                    let msg = format!("`{pname}` cannot be computed at `{}`: it is read at `{bad_name}`, an inner loop", did.name);
                    self.err(did.span, msg, label);
                    return;
                }
                // Read inside reductions of the consumer: computed at this level for all of
                // them, where each is one whole tile (checked with the other primitives).
                let mut inner: Vec<DimId> = labels.iter().copied().filter(|l| !outer.contains(l) && !cdims.contains(l)).collect();
                if let Some((before, _)) = &self.sched_spans[p.index()].inner_reads {
                    for d in before {
                        if !inner.contains(d) {
                            inner.push(*d);
                        }
                    }
                }
                self.sched_spans[p.index()].inner_reads = Some((inner, did.span));
            }
        }
        self.prog.funcs[p.index()].schedule.fuse_at = Some((c, d));
    }

    /// Checks that need every primitive: placement rules, kernel-only primitives, `:0` extents.
    fn check_schedules(&mut self) {
        // Without any kernel, that is the one error to report; kernel-only primitives would
        // repeat it. Without every statement, the `compile()` may be in one that did not parse.
        let kernels_known = self.complete && !self.prog.kernels.is_empty();
        for i in 0..self.prog.funcs.len() {
            let f = FuncId(i as u32);
            let spans = self.sched_spans[i].clone();
            let sched = self.prog.funcs[i].schedule.clone();
            let name = self.prog.funcs[i].name.clone();
            if let (Some(_), Some(s)) = (sched.multicast, spans.multicast) {
                let refusal = if !sched.warp_specialize && !sched.wgmma {
                    Some((
                        "the programs of a multicast share their bulk copies",
                        format!("add `{name}.warp_specialize()` or `{name}.wgmma()`"),
                    ))
                } else if sched.cluster.is_some() {
                    Some(("a kernel has one cluster, and `cluster` makes another", "leave out `cluster` or `multicast`".to_string()))
                } else if sched.persistent {
                    Some(("the programs of a multicast take one block each", "leave out `persistent()`".to_string()))
                } else {
                    None
                };
                if let Some((msg, label)) = refusal {
                    self.err(s, format!("`{name}` cannot be multicast: {msg}"), label);
                }
            }
            if !sched.kernel && kernels_known {
                let label = match sched.fuse_at {
                    Some((c, _)) => {
                        format!("`{name}` is computed inside `{}`: schedule `{}` instead", self.prog.func(c).name, self.prog.func(c).name)
                    }
                    None => {
                        format!("this primitive applies to kernels: add `{name}.compile();`, or schedule the kernel that computes `{name}`")
                    }
                };
                for s in spans.placement.iter().chain(spans.dtypes.iter()) {
                    self.err(*s, format!("`{name}` is not a kernel"), label.clone());
                }
            }
            if sched.kernel && sched.fuse_at.is_some() {
                if let Some(s) = spans.fuse_at {
                    self.err(s, format!("`{name}` is a kernel and cannot be fused"), "a Func is either compiled or placed inside another");
                }
            }
            // A producer is placed in a kernel, or in a Func placed in turn (a chain that ends
            // in a kernel: `mm.fuse_at(e, l); e.fuse_at(attention, m);`).
            if let Some((c, _)) = sched.fuse_at {
                let end = self.kernel_of(c);
                if !self.prog.func(end).schedule.kernel && kernels_known {
                    if let Some(s) = spans.fuse_at {
                        let cname = self.prog.func(c).name.clone();
                        let (msg, label) = if end == c {
                            (format!("`{cname}` is not a kernel"), format!("fuse producers into a kernel, or into a Func placed in one: add `{cname}.compile();` or place `{cname}`"))
                        } else {
                            let ename = self.prog.func(end).name.clone();
                            (
                                format!("`{cname}` is placed in `{ename}`, which is not a kernel"),
                                format!("a chain of `fuse_at` ends in a kernel: add `{ename}.compile();`"),
                            )
                        };
                        self.err(s, msg, label);
                    }
                }
            }
            let contractions = sched.block.iter().filter(|(d, _)| !self.prog.funcs[i].dims.contains(d)).map(|(d, _)| *d);
            for d in contractions.collect::<Vec<_>>() {
                let Some(s) = spans.block else { break };
                if sched.cluster.is_none_or(|(c, _)| c != d) {
                    let dn = self.prog.dim_name(d).to_string();
                    let label = match sched.cluster {
                        Some((c, _)) => format!(
                            "a kernel has one cluster, along `{}` here: leave `{dn}` out of `block`",
                            self.prog.dim_name(c)
                        ),
                        None => format!(
                            "a contraction is blocked to split it over the programs of a cluster: add `{name}.cluster({dn}:2)` or leave `{dn}` out of `block`"
                        ),
                    };
                    self.err(s, format!("`{name}` blocks `{dn}`, which it reduces over, without a cluster"), label);
                }
            }
            if let (Some(_), Some(m)) = (sched.cluster, spans.map) {
                self.err(m, format!("`{name}` is clustered and mapped"), "a cluster needs the default order of blocks: remove `map`");
            }
            // A placement that failed leaves the kernel that computes `f` unknown.
            let placed = spans.fuse_at.is_none() || sched.fuse_at.is_some();
            for (d, n, s) in spans.tensorize.iter().filter(|_| placed) {
                let block = self.kernel_block_extent(f, *d);
                match (block, *n) {
                    (Some(b), n) if n > 0 && b % n != 0 => {
                        let dn = self.prog.dim_name(*d).to_string();
                        self.err(
                            *s,
                            format!("tile extent {n} does not divide the block extent {b} of `{dn}`"),
                            format!("a block extent must be a multiple of its tile extent; try {}", largest_pow2_divisor(b).min(n)),
                        );
                    }
                    // A whole tile of a dimension neither blocked nor bounded: the default bound.
                    (None, 0) if self.complete && self.bound_of(f, *d).is_none() => {
                        let kid = self.kernel_of(f);
                        let kernel = &mut self.prog.funcs[kid.index()].schedule;
                        kernel.bounds.push((*d, DEFAULT_WHOLE_BOUND));
                        if !kernel.default_bounds.contains(d) {
                            kernel.default_bounds.push(*d);
                        }
                    }
                    _ => {}
                }
            }
        }
        // Producers read inside reductions of their consumer: each of those is one whole tile.
        for i in 0..self.prog.funcs.len() {
            let Some((inner, span)) = self.sched_spans[i].inner_reads.clone() else { continue };
            let Some((c, _)) = self.prog.funcs[i].schedule.fuse_at else { continue };
            let kernel = self.kernel_of(c);
            for d in inner {
                let tile = self.prog.func(c).schedule.tile_extent(d).or_else(|| self.prog.func(kernel).schedule.tile_extent(d));
                if tile == Some(0) && self.prog.func(kernel).schedule.block_extent(d).is_none() {
                    continue;
                }
                let (pname, cname, kname) =
                    (self.prog.funcs[i].name.clone(), self.prog.func(c).name.clone(), self.prog.func(kernel).name.clone());
                let dn = self.prog.dim_name(d).to_string();
                self.err(
                    span,
                    format!("`{pname}` cannot be computed here for all of `{dn}`: `{cname}` reduces over `{dn}` in several steps"),
                    format!("`{pname}` is read inside the reduction over `{dn}`: make it one whole tile (`{kname}.tensorize({dn}:0)`), or remove this `fuse_at`"),
                );
            }
        }
        // Reductions read by a kernel must be placed in that kernel; kernels do not read kernels.
        for k in self.prog.kernels.clone() {
            for g in self.prog.producers(k) {
                let func = self.prog.func(g).clone();
                let kname = self.prog.func(k).name.clone();
                if func.schedule.kernel {
                    self.err(
                        func.span,
                        format!("kernel `{}` is read by kernel `{kname}`", func.name),
                        "a kernel cannot read another kernel's output; remove `compile()` from one of them",
                    );
                    continue;
                }
                match func.schedule.fuse_at {
                    Some((c, _)) if c != k && !self.prog.func(c).schedule.kernel => {}
                    Some((c, _)) if c != k => {
                        let cname = self.prog.func(c).name.clone();
                        self.err(
                            func.span,
                            format!("`{}` is read by kernel `{kname}` but placed in `{cname}`", func.name),
                            format!("place it in `{kname}` or do not read it there"),
                        );
                    }
                    Some(_) => {}
                    // A reduction read inside a reduction over one of its dimensions is inlined:
                    // computed per chunk of that loop. Read only at the kernel's own loops, it
                    // must be placed.
                    // A `fuse_at` that was rejected has been reported already.
                    None if self.sched_spans[g.index()].fuse_at.is_some() || !self.complete => {}
                    None if func.body.has_reduction() && reads_only_at_loops(&self.prog, k, g) => {
                        let d = innermost_read_level(&self.prog, k, g).map_or("x", |d| self.prog.dim_name(d)).to_string();
                        self.err(
                            func.span,
                            format!("`{}` computes a reduction and is never placed", func.name),
                            format!("place it inside the kernel that reads it: `{}.fuse_at({kname}, {d});`", func.name),
                        );
                    }
                    None => {}
                }
            }
        }
        if self.prog.kernels.is_empty() && self.complete {
            // Point at the last defined Func that no other Func reads: the likely output.
            let read: BTreeSet<FuncId> = self.prog.funcs.iter().flat_map(|f| f.body.reads()).map(|(g, _)| g).collect();
            let output = (0..self.prog.funcs.len()).rev().find(|&i| self.defs[i].is_some() && !read.contains(&FuncId(i as u32)));
            match output {
                Some(i) => {
                    let (name, span) = (self.prog.funcs[i].name.clone(), self.prog.funcs[i].span);
                    self.err(span, "no kernel in this file", format!("to compute `{name}` as a kernel, add `{name}.compile();`"));
                }
                None => {
                    let span = self.prog.funcs.first().map_or(Span::default(), |f| f.span);
                    self.err(span, "no kernel in this file", "define a Func and mark it as a kernel with `f.compile();`");
                }
            }
        }
    }

    /// Whether `f`'s definition, or that of a Func it reads, has an error: what it reads is then
    /// not fully known.
    fn tainted(&self, f: FuncId) -> bool {
        self.broken[f.index()] || self.prog.producers(f).iter().any(|g| self.broken[g.index()])
    }

    /// The kernel that computes `f`: itself, or the consumer it is fused into.
    fn kernel_of(&self, f: FuncId) -> FuncId {
        let mut cur = f;
        for _ in 0..self.prog.funcs.len() {
            match self.prog.func(cur).schedule.fuse_at {
                Some((c, _)) => cur = c,
                None => break,
            }
        }
        cur
    }

    fn kernel_block_extent(&self, f: FuncId, d: DimId) -> Option<u32> {
        self.prog.func(self.kernel_of(f)).schedule.block_extent(d)
    }

    fn bound_of(&self, f: FuncId, d: DimId) -> Option<u64> {
        self.prog.func(f).schedule.bound(d).or_else(|| self.prog.func(self.kernel_of(f)).schedule.bound(d))
    }
}

/// Whether every read of `g` while computing kernel `k` is at labels that are `k`'s dimensions.
fn reads_only_at_loops(p: &Program, k: FuncId, g: FuncId) -> bool {
    let kdims = &p.func(k).dims;
    expanded_reads(p, k).iter().filter(|(f, _)| *f == g).all(|(_, labels)| labels.iter().all(|l| kdims.contains(l)))
}

/// The innermost of kernel `k`'s dimensions at which `g` is read: the outermost loop level at
/// which `g` can be computed once for all its reads.
fn innermost_read_level(p: &Program, k: FuncId, g: FuncId) -> Option<DimId> {
    let kdims = &p.func(k).dims;
    let level = expanded_reads(p, k)
        .iter()
        .filter(|(f, _)| *f == g)
        .flat_map(|(_, labels)| labels.iter().filter_map(|l| kdims.iter().position(|d| d == l)))
        .max()
        .unwrap_or(kdims.len().saturating_sub(1));
    kdims.get(level).copied()
}

fn largest_pow2_divisor(b: u32) -> u32 {
    1 << b.trailing_zeros()
}
