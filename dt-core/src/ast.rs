//! The syntax tree of a `.dt` file, as written, with spans. Nothing here is checked yet.

use crate::span::{Ident, Span};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeclKind {
    Func,
    In,
    SIn,
    Var,
    RVar,
}

impl DeclKind {
    pub fn keyword(self) -> &'static str {
        match self {
            DeclKind::Func => "Func",
            DeclKind::In => "In",
            DeclKind::SIn => "SIn",
            DeclKind::Var => "Var",
            DeclKind::RVar => "RVar",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Number(f64),
    /// A bare name: a scalar input, a dimension (its index), or a builtin constant such as `inf`.
    Name(Ident),
    /// `A[x, k]`: an input or a Func read at the given labels; `1` is allowed only in `reshape`.
    Access {
        name: Ident,
        index: Vec<Expr>,
    },
    /// `f(args)`: a builtin function.
    Call {
        name: Ident,
        args: Vec<Expr>,
    },
    Neg(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// One argument of a schedule primitive: `x`, `x:128`, `x:x1/8`, `128` or `f16`.
#[derive(Clone, Debug, PartialEq)]
pub enum SchedArg {
    Name(Ident),
    Number(f64, Span),
    /// `x:128`
    Extent(Ident, f64, Span),
    /// `x:x1/8`: split `x`, naming the inner part `x1` of 8 blocks.
    Split {
        dim: Ident,
        inner: Ident,
        factor: f64,
        factor_span: Span,
    },
}

impl SchedArg {
    pub fn span(&self) -> Span {
        match self {
            SchedArg::Name(id) => id.span,
            SchedArg::Number(_, s) => *s,
            SchedArg::Extent(id, _, s) => id.span.to(*s),
            SchedArg::Split { dim, factor_span, .. } => dim.span.to(*factor_span),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Decl {
        kind: DeclKind,
        names: Vec<Ident>,
        span: Span,
    },
    /// `f[d1, ..., dn] = expr;`
    Def {
        func: Ident,
        dims: Vec<Ident>,
        body: Expr,
        span: Span,
    },
    /// `f.primitive(args);`
    Sched {
        func: Ident,
        prim: Ident,
        args: Vec<SchedArg>,
        span: Span,
    },
    /// `schedule f_1k { f.block(...); ... f.compile(); }`: a size class of `f` with its own
    /// schedule, over copies of the algorithm (`crate::blocks`); `span` is its header.
    Block {
        name: Ident,
        items: Vec<Item>,
        span: Span,
    },
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct File {
    pub items: Vec<Item>,
}
