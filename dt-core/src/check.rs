//! The semantic checker: an [`ast::File`] to a valid [`Program`] (the algorithm IR with its
//! schedules), or diagnostics. Every independent error is reported; nothing panics. Declarations
//! and the algorithm are checked here, the schedule in `check_schedule.rs`.

use crate::algo::*;
use crate::ast::{self, DeclKind, ExprKind, Item, SchedArg};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::schedule::{MapEntry, Schedule};
use crate::span::{Ident, Span};
use std::collections::{BTreeSet, HashMap};

#[path = "check_schedule.rs"]
mod schedule;

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
    "block, tensorize, map, cluster, multicast, fuse_at, num_warps, num_stages, max_registers, fast_math, fma_exp, warp_specialize, wgmma, persistent, requires, dtypes, bound, specialize, compile";

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
    multicast: Option<Span>,
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
                            class_of: None,
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
