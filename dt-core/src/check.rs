//! The semantic checker: an [`ast::File`] to a valid [`Program`] (the algorithm IR with its
//! schedules), or diagnostics. Every independent error is reported; nothing panics.

use crate::algo::*;
use crate::ast::{self, DeclKind, ExprKind, Item, SchedArg};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::schedule::{MapEntry, Schedule};
use crate::span::{Ident, Span};
use std::collections::{BTreeSet, HashMap};

/// Names that mean something without a declaration.
const BUILTIN_CONSTANTS: &[&str] = &["inf"];
const UNARY_FUNCS: &[(&str, UnOp)] = &[
    ("exp", UnOp::Exp),
    ("exp2", UnOp::Exp2),
    ("log", UnOp::Log),
    ("sqrt", UnOp::Sqrt),
    ("rsqrt", UnOp::Rsqrt),
    ("tanh", UnOp::Tanh),
    ("sigmoid", UnOp::Sigmoid),
    ("abs", UnOp::Abs),
];
const BUILTIN_FUNCS: &str = "exp, exp2, log, sqrt, rsqrt, tanh, sigmoid, abs, max, min, where, len, rsum, rmax, rmin, rdot, reshape";
/// Most Funcs a chain of reads may go through (a Func reading one that reads another ...).
pub const MAX_FUNC_CHAIN: usize = 512;
const PRIMITIVES: &str =
    "block, tensorize, map, cluster, fuse_at, num_warps, num_stages, max_registers, fast_math, warp_specialize, persistent, dtypes, bound, specialize, compile";

#[derive(Clone, Copy, Debug)]
enum Entity {
    Func(FuncId),
    Input(InputId),
    Scalar(ScalarId),
    Dim(DimId),
}

/// Checks a parsed file. Returns the program when there were no errors (in `diags`, which may
/// already hold the parser's).
pub fn check(file: &ast::File, diags: &mut Vec<Diagnostic>) -> Option<Program> {
    let errors_before = diags.len();
    let complete = errors_before == 0;
    let mut cx = Checker {
        prog: Program::default(),
        names: HashMap::new(),
        diags,
        defs: Vec::new(),
        broken: Vec::new(),
        sched_spans: Vec::new(),
        complete,
    };
    cx.declare(file);
    cx.define(file);
    // Schedules are checked on acyclic programs only: their rules follow reads transitively.
    if cx.check_cycles() {
        cx.schedule(file);
    }
    if cx.diags.len() > errors_before {
        return None;
    }
    Some(cx.prog)
}

struct Def<'a> {
    dims: Vec<DimId>,
    body: &'a ast::Expr,
    span: Span,
}

/// The bound a whole tile (`d:0`) of a dimension neither blocked nor bounded takes: a launch
/// with more is refused, naming it (docs/language.md, `tensorize`).
pub const DEFAULT_WHOLE_BOUND: u64 = 128;

/// Where each schedule primitive of a Func was written, for errors found after all are read.
#[derive(Default, Clone)]
struct SchedSpans {
    block: Option<Span>,
    map: Option<Span>,
    cluster: Option<Span>,
    placement: Vec<Span>,
    fuse_at: Option<Span>,
    tensorize: Vec<(DimId, u32, Span)>,
    dtypes: Option<Span>,
    /// A `fuse_at` whose producer is read inside reductions of the consumer (these dimensions):
    /// valid when each of them is one whole tile there, which is known once every primitive is
    /// (`check_schedules`); the span of the level named.
    inner_reads: Option<(Vec<DimId>, Span)>,
}

struct Checker<'a, 'd> {
    prog: Program,
    names: HashMap<String, (Entity, Span)>,
    diags: &'d mut Vec<Diagnostic>,
    defs: Vec<Option<Def<'a>>>,
    /// Funcs whose definition has an error. Checks that depend on what a Func reads are skipped
    /// for them, so that one mistake is not reported again as its consequences.
    broken: Vec<bool>,
    sched_spans: Vec<SchedSpans>,
    /// Whether every statement parsed. If not, errors about something missing (a definition, a
    /// `compile()`, a `block`, a `fuse_at`) are not reported: it may be in the broken statement.
    complete: bool,
}

/// `1 dimension`, `2 dimensions`, `1 index`, `3 indices`.
fn count(n: usize, noun: &str) -> String {
    match (n, noun) {
        (1, _) => format!("1 {noun}"),
        (_, "index") => format!("{n} indices"),
        _ => format!("{n} {noun}s"),
    }
}

fn list(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let v: Vec<String> = names.into_iter().map(|s| s.as_ref().to_string()).collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

impl<'a, 'd> Checker<'a, 'd> {
    fn err(&mut self, span: Span, msg: impl Into<String>, label: impl Into<String>) {
        self.diags.push(Diagnostic::new(span, msg).with_label(label));
    }

    fn dims_named(&self, ds: &[DimId]) -> String {
        list(ds.iter().map(|d| self.prog.dim_name(*d)))
    }

    fn declared_dims(&self) -> String {
        list(self.prog.dims.iter().map(|d| d.name.as_str()))
    }

    // ---- declarations ------------------------------------------------------------------------

    fn declare(&mut self, file: &ast::File) {
        for item in &file.items {
            let Item::Decl { kind, names, .. } = item else { continue };
            for id in names {
                if let Some((prev, _)) = self.names.get(&id.name) {
                    let label = format!(
                        "already declared as {}; each name is declared once, and all names share one namespace",
                        Self::kind_word(*prev)
                    );
                    self.err(id.span, format!("`{}` is declared twice", id.name), label);
                    continue;
                }
                // Reported, then declared all the same, so that its uses are not errors too.
                if BUILTIN_CONSTANTS.contains(&id.name.as_str()) {
                    self.err(id.span, format!("`{}` is a reserved name", id.name), "it is a builtin constant; choose another name");
                } else if DType::from_name(&id.name).is_some() {
                    self.err(id.span, format!("`{}` is a reserved name", id.name), "it names an element type; choose another name");
                }
                let entity = match kind {
                    DeclKind::Func => {
                        self.prog.funcs.push(Func {
                            name: id.name.clone(),
                            span: id.span,
                            dims: vec![],
                            body: Expr::Const(0.0),
                            schedule: Schedule::default(),
                        });
                        self.defs.push(None);
                        self.broken.push(false);
                        self.sched_spans.push(SchedSpans::default());
                        Entity::Func(FuncId(self.prog.funcs.len() as u32 - 1))
                    }
                    DeclKind::In => {
                        self.prog.inputs.push(Input { name: id.name.clone(), span: id.span, labellings: vec![] });
                        Entity::Input(InputId(self.prog.inputs.len() as u32 - 1))
                    }
                    DeclKind::SIn => {
                        self.prog.scalars.push(Scalar { name: id.name.clone(), span: id.span });
                        Entity::Scalar(ScalarId(self.prog.scalars.len() as u32 - 1))
                    }
                    DeclKind::Var | DeclKind::RVar => {
                        self.prog.dims.push(Dim { name: id.name.clone(), span: id.span, declared_reduction: *kind == DeclKind::RVar });
                        Entity::Dim(DimId(self.prog.dims.len() as u32 - 1))
                    }
                };
                self.names.insert(id.name.clone(), (entity, id.span));
            }
        }
    }

    fn lookup(&self, name: &str) -> Option<Entity> {
        self.names.get(name).map(|(e, _)| *e)
    }

    fn kind_word(e: Entity) -> &'static str {
        match e {
            Entity::Func(_) => "a Func",
            Entity::Input(_) => "an input",
            Entity::Scalar(_) => "a scalar input",
            Entity::Dim(_) => "a dimension",
        }
    }

    /// Resolves a dimension label; reports undeclared labels with the dimensions in `scope`.
    fn dim(&mut self, id: &Ident, scope: &[DimId]) -> Option<DimId> {
        match self.lookup(&id.name) {
            Some(Entity::Dim(d)) => Some(d),
            Some(e) => {
                self.err(
                    id.span,
                    format!("`{}` is {}, not a dimension", id.name, Self::kind_word(e)),
                    format!("dimensions here are: {}", self.dims_named(scope)),
                );
                None
            }
            None => {
                let label = if scope.is_empty() {
                    format!("declared dimensions are: {}", self.declared_dims())
                } else {
                    format!("declared dimensions here are: {}", self.dims_named(scope))
                };
                self.err(id.span, format!("`{}` is not a declared dimension", id.name), label);
                None
            }
        }
    }

    // ---- definitions -------------------------------------------------------------------------

    fn define(&mut self, file: &'a ast::File) {
        // Left-hand sides first, so reads can be checked against any Func's arity.
        for item in &file.items {
            let Item::Def { func, dims, body, span } = item else { continue };
            let f = match self.lookup(&func.name) {
                Some(Entity::Func(f)) => f,
                Some(e) => {
                    self.err(
                        func.span,
                        format!("`{}` is {}; only a Func can be defined", func.name, Self::kind_word(e)),
                        "declare it with `Func`",
                    );
                    continue;
                }
                None => {
                    self.err(func.span, format!("`{}` is not declared", func.name), format!("add `Func {};`", func.name));
                    continue;
                }
            };
            if self.defs[f.index()].is_some() {
                self.err(func.span, format!("`{}` is defined twice", func.name), "a Func has one definition");
                continue;
            }
            let mut ds = Vec::new();
            let mut ok = true;
            for d in dims {
                match self.dim(d, &[]) {
                    Some(id) if ds.contains(&id) => {
                        self.err(d.span, format!("`{}` appears twice on the left-hand side", d.name), "dimensions of a Func are distinct");
                        ok = false;
                    }
                    Some(id) => ds.push(id),
                    None => ok = false,
                }
            }
            if ok {
                self.defs[f.index()] = Some(Def { dims: ds.clone(), body, span: *span });
                self.prog.funcs[f.index()].dims = ds;
                self.prog.funcs[f.index()].span = func.span;
            } else {
                self.broken[f.index()] = true;
            }
        }
        for i in 0..self.defs.len() {
            let Some(def) = self.defs[i].as_ref() else { continue };
            let (dims, body) = (def.dims.clone(), def.body);
            let name = self.prog.funcs[i].name.clone();
            match self.expr(body, &name, &dims) {
                Some(e) => self.prog.funcs[i].body = e,
                None => self.broken[i] = true,
            }
        }
    }

    fn expr(&mut self, e: &ast::Expr, func: &str, scope: &[DimId]) -> Option<Expr> {
        match &e.kind {
            ExprKind::Number(v) => Some(Expr::Const(*v)),
            ExprKind::Neg(a) => Some(Expr::Unary(UnOp::Neg, Box::new(self.expr(a, func, scope)?))),
            ExprKind::Binary(op, a, b) => {
                let a = self.expr(a, func, scope);
                let b = self.expr(b, func, scope);
                let op = match op {
                    ast::BinOp::Add => BinOp::Add,
                    ast::BinOp::Sub => BinOp::Sub,
                    ast::BinOp::Mul => BinOp::Mul,
                    ast::BinOp::Div => BinOp::Div,
                    ast::BinOp::Lt => BinOp::Lt,
                    ast::BinOp::Le => BinOp::Le,
                    ast::BinOp::Gt => BinOp::Gt,
                    ast::BinOp::Ge => BinOp::Ge,
                    ast::BinOp::Eq => BinOp::Eq,
                    ast::BinOp::Ne => BinOp::Ne,
                };
                Some(Expr::Binary(op, Box::new(a?), Box::new(b?)))
            }
            ExprKind::Name(id) => match self.lookup(&id.name) {
                Some(Entity::Scalar(s)) => Some(Expr::Scalar(s)),
                Some(Entity::Dim(d)) => {
                    if scope.contains(&d) {
                        Some(Expr::Index(d))
                    } else {
                        self.not_in_scope(id, func, scope);
                        None
                    }
                }
                Some(Entity::Input(_)) | Some(Entity::Func(_)) => {
                    self.err(
                        id.span,
                        format!("`{}` is a tensor and needs an index", id.name),
                        format!("write `{}[...]` with its dimensions", id.name),
                    );
                    None
                }
                None if BUILTIN_CONSTANTS.contains(&id.name.as_str()) => Some(Expr::Const(f64::INFINITY)),
                None => {
                    self.err(id.span, format!("`{}` is not declared", id.name), "declare it with `In`, `SIn`, `Var` or `Func`");
                    None
                }
            },
            ExprKind::Access { name, index } => self.access(name, index, func, scope),
            ExprKind::Call { name, args } => self.call(e.span, name, args, func, scope),
        }
    }

    fn not_in_scope(&mut self, id: &Ident, func: &str, scope: &[DimId]) {
        self.err(
            id.span,
            format!("`{}` is not a dimension of `{func}` here", id.name),
            format!(
                "dimensions here are: {}; reduce over `{}` (rsum, rmax, rmin, rdot) or add it to `{func}[...]`",
                self.dims_named(scope),
                id.name
            ),
        );
    }

    /// Labels of an access, each a declared dimension in scope, distinct.
    fn labels(&mut self, index: &[ast::Expr], func: &str, scope: &[DimId]) -> Option<Vec<DimId>> {
        let mut out = Vec::new();
        let mut ok = true;
        for ix in index {
            let ExprKind::Name(id) = &ix.kind else {
                self.err(
                    ix.span,
                    "an index must be a dimension name",
                    "indices are labels such as `x`; arithmetic on indices is not supported",
                );
                ok = false;
                continue;
            };
            match self.dim(id, scope) {
                Some(d) if !scope.contains(&d) => {
                    self.not_in_scope(id, func, scope);
                    ok = false;
                }
                Some(d) if out.contains(&d) => {
                    self.err(id.span, format!("`{}` is used twice in one index", id.name), "each axis needs its own dimension");
                    ok = false;
                }
                Some(d) => out.push(d),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn access(&mut self, name: &Ident, index: &[ast::Expr], func: &str, scope: &[DimId]) -> Option<Expr> {
        match self.lookup(&name.name) {
            Some(Entity::Input(i)) => {
                let labels = self.labels(index, func, scope)?;
                let input = &mut self.prog.inputs[i.index()];
                if let Some(first) = input.labellings.first() {
                    if first.len() != labels.len() {
                        let n = first.len();
                        let msg = format!("`{}` is read with {} here but with {n} elsewhere", name.name, count(labels.len(), "index"));
                        self.err(
                            name.span,
                            msg,
                            format!("an input has one rank: every read of `{}` needs {n} indices, as its first read has", name.name),
                        );
                        return None;
                    }
                }
                if !input.labellings.contains(&labels) {
                    input.labellings.push(labels.clone());
                }
                Some(Expr::Load { input: i, index: labels })
            }
            Some(Entity::Func(g)) => {
                let labels = self.labels(index, func, scope)?;
                let Some(def) = self.defs[g.index()].as_ref() else {
                    // A definition with errors, or one in a statement that did not parse, has
                    // been reported already.
                    if self.complete && !self.broken[g.index()] {
                        self.err(
                            name.span,
                            format!("`{}` is used but never defined", name.name),
                            format!("define it: `{}[...] = ...;`", name.name),
                        );
                    }
                    return None;
                };
                if def.dims.len() != labels.len() {
                    let dims = def.dims.clone();
                    let msg = format!("`{}` has {} but is read with {}", name.name, count(dims.len(), "dimension"), labels.len());
                    self.err(name.span, msg, format!("`{}` is defined as `{}[{}]`", name.name, name.name, self.dims_named(&dims)));
                    return None;
                }
                Some(Expr::Read { func: g, index: labels })
            }
            Some(e) => {
                self.err(
                    name.span,
                    format!("`{}` is {}, not a tensor", name.name, Self::kind_word(e)),
                    "only inputs and Funcs can be indexed",
                );
                None
            }
            None => {
                self.err(name.span, format!("`{}` is not declared", name.name), "declare it with `In` or `Func`");
                None
            }
        }
    }

    fn arity(&mut self, span: Span, name: &str, args: &[ast::Expr], n: usize, form: &str) -> bool {
        if args.len() != n {
            self.err(
                span,
                format!("`{name}` takes {n} argument{} but was given {}", if n == 1 { "" } else { "s" }, args.len()),
                format!("write `{form}`"),
            );
            return false;
        }
        true
    }

    /// The dimension named by a reduction's last argument.
    fn reduced_dim(&mut self, arg: &ast::Expr, scope: &[DimId]) -> Option<DimId> {
        let ExprKind::Name(id) = &arg.kind else {
            self.err(arg.span, "expected the dimension to reduce over", "a dimension name such as `k`");
            return None;
        };
        let d = self.dim(id, scope)?;
        if scope.contains(&d) {
            self.err(
                id.span,
                format!("cannot reduce over `{}`: it is already a dimension here", id.name),
                "reduce over a dimension the result does not have",
            );
            return None;
        }
        Some(d)
    }

    fn call(&mut self, span: Span, name: &Ident, args: &[ast::Expr], func: &str, scope: &[DimId]) -> Option<Expr> {
        let n = name.name.as_str();
        if let Some((_, op)) = UNARY_FUNCS.iter().find(|(f, _)| *f == n) {
            if !self.arity(name.span, n, args, 1, &format!("{n}(e)")) {
                return None;
            }
            return Some(Expr::Unary(*op, Box::new(self.expr(&args[0], func, scope)?)));
        }
        match n {
            "max" | "min" => {
                if !self.arity(name.span, n, args, 2, &format!("{n}(a, b)")) {
                    return None;
                }
                let a = self.expr(&args[0], func, scope);
                let b = self.expr(&args[1], func, scope);
                let op = if n == "max" { BinOp::Max } else { BinOp::Min };
                Some(Expr::Binary(op, Box::new(a?), Box::new(b?)))
            }
            "where" => {
                if !self.arity(name.span, n, args, 3, "where(condition, a, b)") {
                    return None;
                }
                let c = self.expr(&args[0], func, scope);
                let a = self.expr(&args[1], func, scope);
                let b = self.expr(&args[2], func, scope);
                Some(Expr::Select(Box::new(c?), Box::new(a?), Box::new(b?)))
            }
            "len" => {
                if !self.arity(name.span, n, args, 1, "len(d)") {
                    return None;
                }
                let ExprKind::Name(id) = &args[0].kind else {
                    self.err(args[0].span, "`len` takes a dimension name", "write `len(d)`");
                    return None;
                };
                Some(Expr::Len(self.dim(id, scope)?))
            }
            "rsum" | "rmax" | "rmin" => {
                if !self.arity(name.span, n, args, 2, &format!("{n}(e, d)")) {
                    return None;
                }
                let dim = self.reduced_dim(&args[1], scope)?;
                let inner: Vec<DimId> = scope.iter().copied().chain([dim]).collect();
                let body = self.expr(&args[0], func, &inner)?;
                if !body.free_dims().contains(&dim) {
                    let dn = self.prog.dim_name(dim).to_string();
                    let label = format!(
                        "it varies over: {}; reduce over one of these, or index the operand by `{dn}`",
                        self.dims_named(&body.free_dims().into_iter().collect::<Vec<_>>())
                    );
                    self.err(args[0].span, format!("the operand of `{n}` does not vary over `{dn}`"), label);
                    return None;
                }
                let op = match n {
                    "rsum" => RedOp::Sum,
                    "rmax" => RedOp::Max,
                    _ => RedOp::Min,
                };
                Some(Expr::Reduce { op, dim, body: Box::new(body) })
            }
            "rdot" => {
                if !self.arity(name.span, n, args, 3, "rdot(a, b, k)") {
                    return None;
                }
                let dim = self.reduced_dim(&args[2], scope)?;
                let inner: Vec<DimId> = scope.iter().copied().chain([dim]).collect();
                let a = self.expr(&args[0], func, &inner);
                let b = self.expr(&args[1], func, &inner);
                let (a, b) = (a?, b?);
                for (arg, e) in [(&args[0], &a), (&args[1], &b)] {
                    if !e.free_dims().contains(&dim) {
                        self.err(
                            arg.span,
                            format!("this operand of `rdot` does not vary over `{}`", self.prog.dim_name(dim)),
                            "both operands of a contraction must have the contracted dimension",
                        );
                        return None;
                    }
                }
                Some(Expr::Dot { dim, a: Box::new(a), b: Box::new(b) })
            }
            "reshape" => {
                if args.len() < 2 {
                    self.err(name.span, "`reshape` needs an expression and its dimensions", "write `reshape(e, x, 1)`");
                    return None;
                }
                let e = self.expr(&args[0], func, scope)?;
                let mut listed = BTreeSet::new();
                for a in &args[1..] {
                    match &a.kind {
                        ExprKind::Number(v) if *v == 1.0 => {}
                        ExprKind::Name(id) => {
                            let d = self.dim(id, scope)?;
                            if !listed.insert(d) {
                                self.err(id.span, format!("`{}` is listed twice", id.name), "each dimension once");
                                return None;
                            }
                        }
                        _ => {
                            self.err(a.span, "`reshape` takes dimension names and `1`", "write `reshape(e, x, 1)`");
                            return None;
                        }
                    }
                }
                let free = e.free_dims();
                if listed != free {
                    let label = format!(
                        "the operand varies over: {}, but the list names: {}",
                        self.dims_named(&free.into_iter().collect::<Vec<_>>()),
                        self.dims_named(&listed.into_iter().collect::<Vec<_>>())
                    );
                    self.err(span, "`reshape` must list exactly the dimensions of its operand", label);
                    return None;
                }
                Some(e)
            }
            _ => {
                let what = match self.lookup(n) {
                    Some(e) => format!("`{n}` is {}, not a function", Self::kind_word(e)),
                    None => format!("`{n}` is not a function"),
                };
                self.err(name.span, what, format!("functions are: {BUILTIN_FUNCS}"));
                None
            }
        }
    }

    /// Reports Funcs that depend on themselves; returns whether there were none.
    fn check_cycles(&mut self) -> bool {
        // Colour-marking depth-first search over Func reads, with its own stack (a chain of
        // many Funcs would overflow the thread's); on the way back, each Func's chain length.
        let n = self.prog.funcs.len();
        let reads: Vec<Vec<usize>> =
            (0..n).map(|f| self.prog.funcs[f].body.reads().into_iter().map(|(g, _)| g.index()).collect()).collect();
        let mut state = vec![0u8; n];
        let mut chain = vec![1usize; n];
        let mut reported = vec![false; n];
        let mut cycles = Vec::new();
        for root in 0..n {
            if state[root] != 0 {
                continue;
            }
            state[root] = 1;
            let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
            while let Some(top) = stack.last_mut() {
                let (f, next) = *top;
                let Some(&g) = reads[f].get(next) else {
                    state[f] = 2;
                    chain[f] = 1 + reads[f].iter().map(|&g| if state[g] == 2 { chain[g] } else { 0 }).max().unwrap_or(0);
                    stack.pop();
                    continue;
                };
                top.1 += 1;
                if state[g] == 1 {
                    let path: Vec<usize> = stack.iter().map(|(x, _)| *x).collect();
                    let start = path.iter().position(|&x| x == g).unwrap_or(0);
                    cycles.push(path[start..].to_vec());
                } else if state[g] == 0 {
                    state[g] = 1;
                    stack.push((g, 0));
                }
            }
        }
        // Later passes walk chains recursively: a located limit instead of a stack overflow.
        if cycles.is_empty() {
            if let Some(f) = (0..n).find(|&f| chain[f] > MAX_FUNC_CHAIN) {
                let span = self.defs[f].as_ref().map_or(self.prog.funcs[f].span, |d| d.span);
                let msg = format!(
                    "`{}` is computed through a chain of {} Funcs; at most {MAX_FUNC_CHAIN} are supported",
                    self.prog.funcs[f].name, chain[f]
                );
                self.err(span, msg, "compute part of the chain in another kernel");
                return false;
            }
        }
        for cyc in cycles {
            if cyc.iter().any(|&f| reported[f]) {
                continue;
            }
            cyc.iter().for_each(|&f| reported[f] = true);
            let names: Vec<&str> = cyc.iter().chain([&cyc[0]]).map(|&f| self.prog.funcs[f].name.as_str()).collect();
            let span = self.defs[cyc[0]].as_ref().map_or(self.prog.funcs[cyc[0]].span, |d| d.span);
            let msg = format!("`{}` depends on itself", names[0]);
            self.err(span, msg, format!("cycle: {}", names.join(" -> ")));
        }
        // Reads that would capture a reduction label of the Func read.
        for f in 0..n {
            for (g, labels) in self.prog.funcs[f].body.reads() {
                let mut reduced = BTreeSet::new();
                self.prog.func(g).body.walk(&mut |e| {
                    if let Expr::Reduce { dim, .. } | Expr::Dot { dim, .. } = e {
                        reduced.insert(*dim);
                    }
                });
                if let Some(d) = labels.iter().find(|d| reduced.contains(d)) {
                    let span = self.defs[f].as_ref().map_or(self.prog.funcs[f].span, |d| d.span);
                    let msg = format!(
                        "`{}` is read under `{}`, which `{}` reduces over",
                        self.prog.func(g).name,
                        self.prog.dim_name(*d),
                        self.prog.func(g).name
                    );
                    self.err(span, msg, "use another label for this read");
                }
            }
        }
        !reported.contains(&true)
    }

    // ---- schedules ---------------------------------------------------------------------------

    fn schedule(&mut self, file: &ast::File) {
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
                "tensorize" | "map" | "cluster" | "fuse_at" => deferred.push((f, prim, args, *span)),
                _ => self.primitive(f, prim, args, *span),
            }
        }
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
                    self.prog.kernels.push(f);
                }
            }
            "num_warps" => {
                if let Some((n, s)) = self.one_number(prim, args) {
                    if !(1..=32).contains(&n) || !n.is_power_of_two() {
                        self.err(s, format!("num_warps({n}) is not supported"), "use 1, 2, 4, 8, 16 or 32");
                    } else {
                        self.prog.funcs[f.index()].schedule.num_warps = n as u32;
                    }
                    self.sched_spans[f.index()].placement.push(span);
                }
            }
            "num_stages" => {
                if let Some((n, s)) = self.one_number(prim, args) {
                    if !(1..=8).contains(&n) {
                        self.err(s, format!("num_stages({n}) is not supported"), "the pipeline depth is 1 (no pipelining) to 8");
                    } else {
                        self.prog.funcs[f.index()].schedule.num_stages = n as u32;
                    }
                    self.sched_spans[f.index()].placement.push(span);
                }
            }
            "max_registers" => {
                if let Some((n, s)) = self.one_number(prim, args) {
                    if !(32..=255).contains(&n) {
                        self.err(s, format!("max_registers({n}) is not supported"), "registers per thread: 32 to 255");
                    } else {
                        self.prog.funcs[f.index()].schedule.max_registers = Some(n as u32);
                    }
                    self.sched_spans[f.index()].placement.push(span);
                }
            }
            "fast_math" | "warp_specialize" | "persistent" => {
                if self.no_args(prim, args) {
                    let sched = &mut self.prog.funcs[f.index()].schedule;
                    match prim.name.as_str() {
                        "fast_math" => sched.fast_math = true,
                        "warp_specialize" => sched.warp_specialize = true,
                        _ => sched.persistent = true,
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
                    if is_block && !fdims.contains(&d) {
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
                    let Some(d) = self.dim(id, &blocked) else { continue };
                    if !blocked.contains(&d) {
                        let label = format!(
                            "blocked dimensions are: {}; add `{}` to `{fname}.block(...)` or leave it out of `map`",
                            self.dims_named(&blocked),
                            id.name
                        );
                        self.err(id.span, format!("`{}` is not a blocked dimension of `{fname}`", id.name), label);
                        continue;
                    }
                    if seen.contains(&d) {
                        self.err(id.span, format!("`{}` appears twice in `map`", id.name), "each blocked dimension once");
                        continue;
                    }
                    seen.push(d);
                    entries.push(MapEntry::Whole(d));
                }
                SchedArg::Split { dim, inner, factor, factor_span } => {
                    let Some(d) = self.dim(dim, &blocked) else { continue };
                    if !blocked.contains(&d) {
                        let label = format!(
                            "blocked dimensions are: {}; add `{}` to `{fname}.block(...)` or leave it out of `map`",
                            self.dims_named(&blocked),
                            dim.name
                        );
                        self.err(dim.span, format!("`{}` is not a blocked dimension of `{fname}`", dim.name), label);
                        continue;
                    }
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
        if !(2..=crate::kir::MAX_CLUSTER as u64).contains(&n) || !n.is_power_of_two() {
            self.err(*s, format!("a cluster of {n} programs is not supported"), "use 2, 4, 8 or 16 programs per cluster");
            return;
        }
        let sched = &self.prog.func(f).schedule;
        let last_blocked = fdims.iter().rev().find(|x| sched.block_extent(**x).is_some()).copied();
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
                        let kernel = self.kernel_of(f);
                        self.prog.funcs[kernel.index()].schedule.bounds.push((*d, DEFAULT_WHOLE_BOUND));
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

/// Every Func read while computing `c`, with the labels it is read under as seen from `c`
/// (reads through other Funcs are followed and renamed).
///
/// Each distinct read is listed once, in the order a depth-first walk first meets it, and its
/// Func's body is walked once: what a Func reads under given labels does not depend on the path
/// that reached it (the read graph is acyclic), so a graph that reads a producer twice per level
/// costs a walk per distinct read, not per path. The walk keeps its own stack.
pub fn expanded_reads(p: &Program, c: FuncId) -> Vec<(FuncId, Vec<DimId>)> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // The reads of each body being walked, and the next of them to visit.
    type Walk = (Vec<(FuncId, Vec<DimId>)>, usize);
    let mut stack: Vec<Walk> = vec![(p.func(c).body.reads(), 0)];
    while let Some((reads, next)) = stack.last_mut() {
        let Some((g, labels)) = reads.get(*next).cloned() else {
            stack.pop();
            continue;
        };
        *next += 1;
        if seen.insert((g, labels.clone())) {
            let body = p.renamed_body(g, &labels);
            out.push((g, labels));
            stack.push((body.reads(), 0));
        }
    }
    out
}
