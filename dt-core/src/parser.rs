//! The parser: tokens to an [`ast::File`]. It never fails: a statement that does not parse
//! becomes a diagnostic and parsing resumes after the next `;`, so one run reports several errors.

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lexer::{lex, Tok, Token};
use crate::span::{Ident, Span};

/// Parses a whole file. The tree holds every statement that parsed; `diags` gets the rest.
pub fn parse(src: &str, diags: &mut Vec<Diagnostic>) -> File {
    let toks = lex(src, diags);
    let mut p = Parser { toks, pos: 0, depth: 0 };
    let mut file = File::default();
    while !p.at(&Tok::Eof) {
        let start = p.pos;
        match p.item() {
            Ok(item) => file.items.push(item),
            Err(d) => {
                diags.push(d);
                p.recover(start);
            }
        }
    }
    file
}

type PResult<T> = Result<T, Diagnostic>;

/// Deepest nesting of parentheses and brackets accepted; deeper input is an error, not a stack
/// overflow.
const MAX_DEPTH: u32 = 200;

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    depth: u32,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    fn peek_at(&self, n: usize) -> &Tok {
        &self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }

    fn at(&self, t: &Tok) -> bool {
        &self.peek().tok == t
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.at(t) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn unexpected(&self, wanted: &str) -> Diagnostic {
        let t = self.peek();
        Diagnostic::new(t.span, format!("expected {wanted}, found {}", t.tok.describe())).with_label(format!("expected {wanted} here"))
    }

    fn expect(&mut self, t: Tok, wanted: &str) -> PResult<Span> {
        if self.at(&t) {
            Ok(self.bump().span)
        } else {
            Err(self.unexpected(wanted))
        }
    }

    fn ident(&mut self, wanted: &str) -> PResult<Ident> {
        match &self.peek().tok {
            Tok::Ident(name) => {
                let name = name.clone();
                let span = self.bump().span;
                Ok(Ident { name, span })
            }
            _ => Err(self.unexpected(wanted)),
        }
    }

    /// Skips to just after the next `;` (always making progress).
    fn recover(&mut self, start: usize) {
        if self.pos == start {
            self.bump();
        }
        while !self.at(&Tok::Eof) {
            if self.bump().tok == Tok::Semi {
                break;
            }
        }
    }

    fn item(&mut self) -> PResult<Item> {
        let first = self.ident("a declaration, a definition `f[x] = ...;` or a schedule `f.block(...);`")?;
        let kind = match first.name.as_str() {
            "Func" => Some(DeclKind::Func),
            "In" => Some(DeclKind::In),
            "SIn" => Some(DeclKind::SIn),
            "Var" => Some(DeclKind::Var),
            "RVar" => Some(DeclKind::RVar),
            _ => None,
        };
        if let Some(kind) = kind {
            let mut names = vec![self.ident("a name")?];
            while self.eat(&Tok::Comma) {
                names.push(self.ident("a name")?);
            }
            let end = self.expect(Tok::Semi, "`,` or `;`")?;
            return Ok(Item::Decl { kind, names, span: first.span.to(end) });
        }
        match self.peek().tok {
            Tok::LBracket => {
                self.bump();
                let mut dims = vec![self.ident("a dimension name")?];
                while self.eat(&Tok::Comma) {
                    dims.push(self.ident("a dimension name")?);
                }
                self.expect(Tok::RBracket, "`,` or `]`")?;
                self.expect(Tok::Assign, "`=`")?;
                let body = self.expr()?;
                let end = self.expect(Tok::Semi, "an operator or `;`")?;
                Ok(Item::Def { func: first.clone(), dims, body, span: first.span.to(end) })
            }
            Tok::Dot => {
                self.bump();
                let prim = self.ident("a schedule primitive such as `block`")?;
                self.expect(Tok::LParen, "`(`")?;
                let mut args = Vec::new();
                if !self.at(&Tok::RParen) {
                    args.push(self.sched_arg()?);
                    while self.eat(&Tok::Comma) {
                        args.push(self.sched_arg()?);
                    }
                }
                self.expect(Tok::RParen, "`,` or `)`")?;
                let end = self.expect(Tok::Semi, "`;`")?;
                Ok(Item::Sched { func: first.clone(), prim, args, span: first.span.to(end) })
            }
            _ => Err(self.unexpected("`[` (a definition) or `.` (a schedule primitive)")),
        }
    }

    fn number(&mut self) -> PResult<(f64, Span)> {
        match self.peek().tok {
            Tok::Number(v) => {
                let s = self.bump().span;
                Ok((v, s))
            }
            _ => Err(self.unexpected("a number")),
        }
    }

    fn sched_arg(&mut self) -> PResult<SchedArg> {
        if let Tok::Number(_) = self.peek().tok {
            let (v, s) = self.number()?;
            return Ok(SchedArg::Number(v, s));
        }
        let name = self.ident("a dimension, a number or a name")?;
        if !self.eat(&Tok::Colon) {
            return Ok(SchedArg::Name(name));
        }
        if let Tok::Ident(_) = self.peek().tok {
            let inner = self.ident("the name of the inner part")?;
            self.expect(Tok::Slash, "`/` (a split such as `x:x1/8`)")?;
            let (factor, factor_span) = self.number()?;
            return Ok(SchedArg::Split { dim: name, inner, factor, factor_span });
        }
        let (v, s) = self.number()?;
        Ok(SchedArg::Extent(name, v, s))
    }

    fn expr(&mut self) -> PResult<Expr> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let d = Diagnostic::new(self.peek().span, "expression nested too deeply").with_label(format!("at most {MAX_DEPTH} levels"));
            self.depth -= 1;
            return Err(d);
        }
        let r = self.comparison();
        self.depth -= 1;
        r
    }

    fn comparison(&mut self) -> PResult<Expr> {
        let lhs = self.additive()?;
        let op = match self.peek().tok {
            Tok::Lt => BinOp::Lt,
            Tok::Le => BinOp::Le,
            Tok::Gt => BinOp::Gt,
            Tok::Ge => BinOp::Ge,
            Tok::EqEq => BinOp::Eq,
            Tok::Ne => BinOp::Ne,
            _ => return Ok(lhs),
        };
        self.bump();
        let rhs = self.additive()?;
        let span = lhs.span.to(rhs.span);
        Ok(Expr { kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span })
    }

    fn additive(&mut self) -> PResult<Expr> {
        let mut lhs = self.multiplicative()?;
        loop {
            let op = match self.peek().tok {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => return Ok(lhs),
            };
            self.bump();
            let rhs = self.multiplicative()?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span };
        }
    }

    fn multiplicative(&mut self) -> PResult<Expr> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek().tok {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                _ => return Ok(lhs),
            };
            self.bump();
            let rhs = self.unary()?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span };
        }
    }

    fn unary(&mut self) -> PResult<Expr> {
        if self.at(&Tok::Minus) {
            let start = self.bump().span;
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                self.depth -= 1;
                return Err(Diagnostic::new(start, "expression nested too deeply").with_label(format!("at most {MAX_DEPTH} levels")));
            }
            let inner = self.unary();
            self.depth -= 1;
            let inner = inner?;
            let span = start.to(inner.span);
            return Ok(Expr { kind: ExprKind::Neg(Box::new(inner)), span });
        }
        self.primary()
    }

    fn primary(&mut self) -> PResult<Expr> {
        match self.peek().tok.clone() {
            Tok::Number(v) => {
                let span = self.bump().span;
                Ok(Expr { kind: ExprKind::Number(v), span })
            }
            Tok::LParen => {
                self.bump();
                let e = self.expr()?;
                self.expect(Tok::RParen, "`)`")?;
                Ok(e)
            }
            Tok::Ident(_) => {
                let name = self.ident("a name")?;
                match self.peek_at(0) {
                    Tok::LBracket => {
                        self.bump();
                        let index = self.list(Tok::RBracket, "`,` or `]`")?;
                        let end = self.expect(Tok::RBracket, "`,` or `]`")?;
                        Ok(Expr { span: name.span.to(end), kind: ExprKind::Access { name, index } })
                    }
                    Tok::LParen => {
                        self.bump();
                        let args = self.list(Tok::RParen, "`,` or `)`")?;
                        let end = self.expect(Tok::RParen, "`,` or `)`")?;
                        Ok(Expr { span: name.span.to(end), kind: ExprKind::Call { name, args } })
                    }
                    _ => Ok(Expr { span: name.span, kind: ExprKind::Name(name) }),
                }
            }
            _ => Err(self.unexpected("an expression")),
        }
    }

    fn list(&mut self, close: Tok, _wanted: &str) -> PResult<Vec<Expr>> {
        let mut out = Vec::new();
        if self.at(&close) {
            return Ok(out);
        }
        out.push(self.expr()?);
        while self.eat(&Tok::Comma) {
            out.push(self.expr()?);
        }
        Ok(out)
    }
}
