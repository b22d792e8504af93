//! The algorithm IR: what a spec computes, checked and resolved.
//!
//! Every name is resolved to a typed index into one of the arenas of [`Program`]. Dimensions are
//! global labels: a label has one size per launch, taken from the input tensors that use it.
//!
//! Architecture Invariant: a [`Program`] built by [`crate::check`] is valid. Every index points
//! into its arena, every Func is defined, Func reads are acyclic, every [`Expr`]'s free dimensions
//! are dimensions of the Func that holds it, and every schedule has been validated. Later passes
//! index without checking.

use crate::dtype::DType;
use crate::schedule::Schedule;
use crate::span::Span;
use std::collections::BTreeSet;

macro_rules! id_type {
    ($name:ident) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        pub struct $name(pub u32);
        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}
id_type!(DimId);
id_type!(InputId);
id_type!(ScalarId);
id_type!(FuncId);

#[derive(Clone, Debug)]
pub struct Dim {
    pub name: String,
    pub span: Span,
    /// Declared with `RVar` (documentation only: any dimension may be reduced).
    pub declared_reduction: bool,
}

#[derive(Clone, Debug)]
pub struct Input {
    pub name: String,
    pub span: Span,
    /// Labels of each axis, one list per distinct way the input is read. The first is the
    /// input's own labelling; axes read under several labels tie those labels' sizes together.
    pub labellings: Vec<Vec<DimId>>,
}

impl Input {
    pub fn rank(&self) -> usize {
        self.labellings.first().map_or(0, |l| l.len())
    }
    pub fn dims(&self) -> &[DimId] {
        self.labellings.first().map_or(&[], |l| l)
    }
}

#[derive(Clone, Debug)]
pub struct Scalar {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Exp,
    Exp2,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Abs,
}

impl UnOp {
    pub fn name(self) -> &'static str {
        match self {
            UnOp::Neg => "neg",
            UnOp::Exp => "exp",
            UnOp::Exp2 => "exp2",
            UnOp::Log => "log",
            UnOp::Sqrt => "sqrt",
            UnOp::Rsqrt => "rsqrt",
            UnOp::Tanh => "tanh",
            UnOp::Sigmoid => "sigmoid",
            UnOp::Abs => "abs",
        }
    }

    /// The meaning of the operation, in f32.
    pub fn apply(self, a: f32) -> f32 {
        match self {
            UnOp::Neg => -a,
            UnOp::Exp => a.exp(),
            UnOp::Exp2 => a.exp2(),
            UnOp::Log => a.ln(),
            UnOp::Sqrt => a.sqrt(),
            UnOp::Rsqrt => 1.0 / a.sqrt(),
            UnOp::Tanh => a.tanh(),
            UnOp::Sigmoid => 1.0 / (1.0 + (-a).exp()),
            UnOp::Abs => a.abs(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl BinOp {
    pub fn name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::Max => "max",
            BinOp::Min => "min",
            BinOp::Lt => "lt",
            BinOp::Le => "le",
            BinOp::Gt => "gt",
            BinOp::Ge => "ge",
            BinOp::Eq => "eq",
            BinOp::Ne => "ne",
        }
    }

    /// The meaning of the operation, in f32; comparisons give 1 or 0.
    pub fn apply(self, a: f32, b: f32) -> f32 {
        let t = |c: bool| if c { 1.0 } else { 0.0 };
        match self {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            BinOp::Div => a / b,
            BinOp::Max => a.max(b),
            BinOp::Min => a.min(b),
            BinOp::Lt => t(a < b),
            BinOp::Le => t(a <= b),
            BinOp::Gt => t(a > b),
            BinOp::Ge => t(a >= b),
            BinOp::Eq => t(a == b),
            BinOp::Ne => t(a != b),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedOp {
    Sum,
    Max,
    Min,
}

impl RedOp {
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "rsum",
            RedOp::Max => "rmax",
            RedOp::Min => "rmin",
        }
    }

    /// The value that masked lanes hold: combining it changes nothing.
    pub fn identity(self) -> f32 {
        match self {
            RedOp::Sum => 0.0,
            RedOp::Max => f32::NEG_INFINITY,
            RedOp::Min => f32::INFINITY,
        }
    }

    pub fn combine(self, acc: f32, v: f32) -> f32 {
        match self {
            RedOp::Sum => acc + v,
            RedOp::Max => acc.max(v),
            RedOp::Min => acc.min(v),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Const(f64),
    Scalar(ScalarId),
    /// The index along a dimension, as f32.
    Index(DimId),
    /// The size of a dimension, as f32.
    Len(DimId),
    /// `A[x, k]`: axis i of the input is read at label `index[i]`.
    Load {
        input: InputId,
        index: Vec<DimId>,
    },
    /// `g[a, b]`: Func `g` with its i-th dimension renamed to `index[i]`.
    Read {
        func: FuncId,
        index: Vec<DimId>,
    },
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `where(c, a, b)`: `a` where `c` is not 0, else `b`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    Reduce {
        op: RedOp,
        dim: DimId,
        body: Box<Expr>,
    },
    /// `rdot(a, b, dim)`: the sum over `dim` of `a * b`, marked as a contraction.
    Dot {
        dim: DimId,
        a: Box<Expr>,
        b: Box<Expr>,
    },
}

impl Expr {
    /// Calls `f` on every sub-expression, this one first.
    pub fn walk(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Const(_) | Expr::Scalar(_) | Expr::Index(_) | Expr::Len(_) | Expr::Load { .. } | Expr::Read { .. } => {}
            Expr::Unary(_, a) => a.walk(f),
            Expr::Binary(_, a, b) | Expr::Dot { a, b, .. } => {
                a.walk(f);
                b.walk(f);
            }
            Expr::Select(c, a, b) => {
                c.walk(f);
                a.walk(f);
                b.walk(f);
            }
            Expr::Reduce { body, .. } => body.walk(f),
        }
    }

    /// The dimensions this expression varies over (those of its reads, less what it reduces).
    pub fn free_dims(&self) -> BTreeSet<DimId> {
        match self {
            Expr::Const(_) | Expr::Scalar(_) | Expr::Len(_) => BTreeSet::new(),
            Expr::Index(d) => [*d].into(),
            Expr::Load { index, .. } | Expr::Read { index, .. } => index.iter().copied().collect(),
            Expr::Unary(_, a) => a.free_dims(),
            Expr::Binary(_, a, b) => &a.free_dims() | &b.free_dims(),
            Expr::Select(c, a, b) => &(&c.free_dims() | &a.free_dims()) | &b.free_dims(),
            Expr::Reduce { dim, body, .. } => {
                let mut s = body.free_dims();
                s.remove(dim);
                s
            }
            Expr::Dot { dim, a, b } => {
                let mut s = &a.free_dims() | &b.free_dims();
                s.remove(dim);
                s
            }
        }
    }

    /// Whether the expression itself (not counting Funcs it reads) reduces.
    pub fn has_reduction(&self) -> bool {
        let mut found = false;
        self.walk(&mut |e| found |= matches!(e, Expr::Reduce { .. } | Expr::Dot { .. }));
        found
    }

    /// Funcs read directly by this expression.
    pub fn reads(&self) -> Vec<(FuncId, Vec<DimId>)> {
        let mut out = Vec::new();
        self.walk(&mut |e| {
            if let Expr::Read { func, index } = e {
                out.push((*func, index.clone()));
            }
        });
        out
    }
}

#[derive(Clone, Debug)]
pub struct Func {
    pub name: String,
    pub span: Span,
    /// Its dimensions, in the order of its definition's left-hand side.
    pub dims: Vec<DimId>,
    pub body: Expr,
    pub schedule: Schedule,
    /// For a kernel that `crate::whole_classes` added (a size class for whole tiles): the
    /// kernel it is a copy of.
    pub class_of: Option<FuncId>,
}

#[derive(Clone, Debug, Default)]
pub struct Program {
    pub dims: Vec<Dim>,
    pub inputs: Vec<Input>,
    pub scalars: Vec<Scalar>,
    pub funcs: Vec<Func>,
    /// Funcs marked with `compile()`, in the order they were marked.
    pub kernels: Vec<FuncId>,
}

impl Program {
    pub fn dim(&self, d: DimId) -> &Dim {
        &self.dims[d.index()]
    }
    pub fn func(&self, f: FuncId) -> &Func {
        &self.funcs[f.index()]
    }
    pub fn input(&self, i: InputId) -> &Input {
        &self.inputs[i.index()]
    }
    pub fn dim_name(&self, d: DimId) -> &str {
        &self.dims[d.index()].name
    }
    pub fn func_by_name(&self, name: &str) -> Option<FuncId> {
        self.funcs.iter().position(|f| f.name == name).map(|i| FuncId(i as u32))
    }
    pub fn kernel_by_name(&self, name: &str) -> Option<FuncId> {
        self.kernels.iter().copied().find(|&k| self.func(k).name == name)
    }

    /// `f`'s body with the dimensions of `f` renamed to `labels` (how a read `f[labels]` sees it).
    pub fn renamed_body(&self, f: FuncId, labels: &[DimId]) -> Expr {
        let func = self.func(f);
        let map: Vec<(DimId, DimId)> = func.dims.iter().copied().zip(labels.iter().copied()).collect();
        rename(&func.body, &map)
    }

    /// Every Func that `f` reads, directly or through others, once each, producers first.
    pub fn producers(&self, f: FuncId) -> Vec<FuncId> {
        fn visit(p: &Program, f: FuncId, seen: &mut Vec<FuncId>) {
            for (g, _) in p.func(f).body.reads() {
                if !seen.contains(&g) {
                    visit(p, g, seen);
                    seen.push(g);
                }
            }
        }
        let mut seen = Vec::new();
        visit(self, f, &mut seen);
        seen
    }

    /// What running kernel `k` computes: its own body and, for every Func it reads (through any
    /// chain of reads), that Func's body renamed to the labels it is read under. Dimensions,
    /// inputs and scalars of a kernel are those of these bodies.
    pub fn kernel_bodies(&self, k: FuncId) -> Vec<Expr> {
        let mut out = vec![self.func(k).body.clone()];
        out.extend(crate::check::expanded_reads(self, k).iter().map(|(g, labels)| self.renamed_body(*g, labels)));
        out
    }

    /// Every input read by kernel `k`, with the labels of each axis, once per distinct labelling.
    pub fn kernel_loads(&self, k: FuncId) -> Vec<(InputId, Vec<DimId>)> {
        let mut out: Vec<(InputId, Vec<DimId>)> = Vec::new();
        for body in self.kernel_bodies(k) {
            body.walk(&mut |e| {
                if let Expr::Load { input, index } = e {
                    if !out.iter().any(|(i, l)| i == input && l == index) {
                        out.push((*input, index.clone()));
                    }
                }
            });
        }
        out
    }

    /// Inputs that kernel `k` reads, in declaration order.
    pub fn kernel_inputs(&self, k: FuncId) -> Vec<InputId> {
        let used: BTreeSet<InputId> = self.kernel_loads(k).into_iter().map(|(i, _)| i).collect();
        used.into_iter().collect()
    }

    /// Scalar inputs that kernel `k` reads, in declaration order.
    pub fn kernel_scalars(&self, k: FuncId) -> Vec<ScalarId> {
        let mut used = BTreeSet::new();
        for body in self.kernel_bodies(k) {
            body.walk(&mut |e| {
                if let Expr::Scalar(s) = e {
                    used.insert(*s);
                }
            });
        }
        used.into_iter().collect()
    }

    /// Every dimension kernel `k` needs the size of, in declaration order.
    pub fn kernel_dims(&self, k: FuncId) -> Vec<DimId> {
        let mut used: BTreeSet<DimId> = self.func(k).dims.iter().copied().collect();
        for body in self.kernel_bodies(k) {
            body.walk(&mut |e| match e {
                Expr::Index(d) | Expr::Len(d) | Expr::Reduce { dim: d, .. } | Expr::Dot { dim: d, .. } => {
                    used.insert(*d);
                }
                Expr::Load { index, .. } | Expr::Read { index, .. } => used.extend(index.iter().copied()),
                _ => {}
            });
        }
        used.into_iter().collect()
    }

    /// The element types kernel `k` is built for.
    pub fn kernel_dtypes(&self, k: FuncId) -> Vec<DType> {
        self.func(k).schedule.dtypes.clone()
    }
}

/// Renames dimension labels throughout an expression. Reduction dimensions that a renaming would
/// capture do not occur: checked programs reduce only over labels not among the Func's dimensions.
pub fn rename(e: &Expr, map: &[(DimId, DimId)]) -> Expr {
    let r = |d: DimId| map.iter().find(|(from, _)| *from == d).map_or(d, |(_, to)| *to);
    match e {
        Expr::Const(_) | Expr::Scalar(_) => e.clone(),
        Expr::Index(d) => Expr::Index(r(*d)),
        Expr::Len(d) => Expr::Len(r(*d)),
        Expr::Load { input, index } => Expr::Load { input: *input, index: index.iter().map(|d| r(*d)).collect() },
        Expr::Read { func, index } => Expr::Read { func: *func, index: index.iter().map(|d| r(*d)).collect() },
        Expr::Unary(op, a) => Expr::Unary(*op, Box::new(rename(a, map))),
        Expr::Binary(op, a, b) => Expr::Binary(*op, Box::new(rename(a, map)), Box::new(rename(b, map))),
        Expr::Select(c, a, b) => Expr::Select(Box::new(rename(c, map)), Box::new(rename(a, map)), Box::new(rename(b, map))),
        Expr::Reduce { op, dim, body } => Expr::Reduce { op: *op, dim: r(*dim), body: Box::new(rename(body, map)) },
        Expr::Dot { dim, a, b } => Expr::Dot { dim: r(*dim), a: Box::new(rename(a, map)), b: Box::new(rename(b, map)) },
    }
}
