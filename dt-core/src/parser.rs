//! The parser: tokens to an [`ast::File`]. It never fails: a statement that does not parse
//! becomes a diagnostic and parsing resumes after the next `;`, so one run reports several errors.
//! A statement whose `;` is missing at the end of a line is kept (with an error), so that one
//! forgotten `;` does not also swallow the next statement. A statement with a lexical error gets
//! no syntax error besides: the second is a consequence of the first.

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lexer::{lex, Tok, Token};
use crate::span::{Ident, Span};

/// Parses a whole file. The tree holds every statement that parsed; `diags` gets the rest.
pub fn parse(src: &str, diags: &mut Vec<Diagnostic>) -> File {
    let lex_start = diags.len();
    let toks = lex(src, diags);
    let lex_errors: Vec<u32> = diags[lex_start..].iter().map(|d| d.span.start).collect();
    let mut p = Parser { src, toks, pos: 0, depth: 0, diags: Vec::new(), lex_errors };
    let mut file = File::default();
    while !p.at(&Tok::Eof) {
        file.items.extend(p.statement(false));
    }
    diags.append(&mut p.diags);
    file
}

type PResult<T> = Result<T, Diagnostic>;

/// Deepest nesting of parentheses and brackets accepted; deeper input is an error, not a stack
/// overflow.
const MAX_DEPTH: u32 = 200;

struct Parser<'s> {
    src: &'s str,
    toks: Vec<Token>,
    pos: usize,
    depth: u32,
    /// Errors in statements that were kept nonetheless.
    diags: Vec<Diagnostic>,
    /// Where the lexer found errors: a statement with one gets no syntax error besides.
    lex_errors: Vec<u32>,
}

impl Parser<'_> {
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

    /// `line:column` of a byte offset, for pointing at another place in a message.
    fn line_col(&self, offset: u32) -> String {
        let before = &self.src[..(offset as usize).min(self.src.len())];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        format!("{}:{}", before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
    }

    /// Expects the closing `close` of the `open` token at `open_span`.
    fn expect_close(&mut self, close: Tok, wanted: &str, open: &str, open_span: Span) -> PResult<Span> {
        if self.at(&close) {
            return Ok(self.bump().span);
        }
        let t = self.peek();
        Err(Diagnostic::new(t.span, format!("expected {wanted}, found {}", t.tok.describe()))
            .with_label(format!("to close the `{open}` at {}", self.line_col(open_span.start))))
    }

    /// The `;` that ends a statement. When it is missing and the next token starts another line
    /// (or the file ends), the statement is kept, and the error points where the `;` belongs.
    fn end_statement(&mut self, wanted: &str) -> PResult<Span> {
        if self.at(&Tok::Semi) {
            return Ok(self.bump().span);
        }
        let prev = self.toks[self.pos.saturating_sub(1)].span;
        let next = self.peek().span;
        let gap = self.src.get(prev.end as usize..next.start as usize).unwrap_or("");
        if self.pos > 0 && (self.at(&Tok::Eof) || gap.contains('\n')) {
            let here = Span { start: prev.end, end: prev.end };
            self.diags.push(Diagnostic::new(here, "missing `;` at the end of the statement").with_label("add `;` here"));
            return Ok(prev);
        }
        Err(self.unexpected(wanted))
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

    /// One statement; where it does not parse, its error (none besides a lexical error in it)
    /// and the tokens up to just after the next `;` skipped, always making progress but, within
    /// a schedule block, never past its `}`.
    fn statement(&mut self, in_block: bool) -> Option<Item> {
        let start = self.pos;
        let d = match self.item() {
            Ok(item) => return Some(item),
            Err(d) => d,
        };
        let from = self.toks[start].span.start;
        if !self.lex_errors.iter().any(|&o| from <= o && o <= d.span.start) {
            self.diags.push(d);
        }
        let stop = |p: &Self| p.at(&Tok::Eof) || (in_block && p.at(&Tok::RBrace));
        if self.pos == start && !stop(self) {
            self.bump();
        }
        while !stop(self) {
            if self.bump().tok == Tok::Semi {
                break;
            }
        }
        None
    }

    /// `schedule name { statements }`, at the `schedule`; the statements that do not parse
    /// are reported and skipped.
    fn block(&mut self) -> PResult<Item> {
        let keyword = self.bump().span;
        let name = self.ident("the name of the size class")?;
        let open = self.expect(Tok::LBrace, "`{`")?;
        let mut items = Vec::new();
        loop {
            if self.at(&Tok::RBrace) {
                self.bump();
                return Ok(Item::Block { name, items, span: keyword.to(open) });
            }
            if self.at(&Tok::Eof) {
                return Err(
                    Diagnostic::new(open, format!("the schedule block `{}` is not closed", name.name)).with_label("close it with `}`")
                );
            }
            items.extend(self.statement(true));
        }
    }

    fn item(&mut self) -> PResult<Item> {
        if matches!(&self.peek().tok, Tok::Ident(k) if k == "schedule")
            && matches!(self.peek_at(1), Tok::Ident(_))
            && self.peek_at(2) == &Tok::LBrace
        {
            return self.block();
        }
        let first = self.ident("a declaration, a definition `f[x] = ...;` or a schedule `f.block(...);`")?;
        let kind = [DeclKind::Func, DeclKind::In, DeclKind::SIn, DeclKind::Var, DeclKind::RVar].into_iter().find(|k| {
            k.keyword() == first.name || (k.keyword().eq_ignore_ascii_case(&first.name) && matches!(self.peek().tok, Tok::Ident(_)))
        });
        if let Some(k) = kind.filter(|k| k.keyword() != first.name) {
            // A keyword in the wrong case: reported, and the declaration is kept.
            self.diags.push(
                Diagnostic::new(first.span, format!("`{}` is not a keyword", first.name))
                    .with_label(format!("keywords are case-sensitive: write `{}`", k.keyword())),
            );
        }
        if let Some(kind) = kind {
            let mut names = vec![self.ident("a name")?];
            while self.eat(&Tok::Comma) {
                names.push(self.ident("a name")?);
            }
            let end = self.end_statement("`,` or `;`")?;
            return Ok(Item::Decl { kind, names, span: first.span.to(end) });
        }
        match self.peek().tok {
            Tok::LBracket => {
                let open = self.bump().span;
                let mut dims = vec![self.ident("a dimension name")?];
                while self.eat(&Tok::Comma) {
                    dims.push(self.ident("a dimension name")?);
                }
                self.expect_close(Tok::RBracket, "`,` or `]`", "[", open)?;
                self.expect(Tok::Assign, "`=`")?;
                let body = self.expr()?;
                let end = self.end_statement("an operator or `;`")?;
                Ok(Item::Def { func: first.clone(), dims, body, span: first.span.to(end) })
            }
            Tok::Dot => {
                self.bump();
                let prim = self.ident("a schedule primitive such as `block`")?;
                let open = self.expect(Tok::LParen, "`(`")?;
                let mut args = Vec::new();
                if !self.at(&Tok::RParen) {
                    args.push(self.sched_arg()?);
                    while self.eat(&Tok::Comma) {
                        args.push(self.sched_arg()?);
                    }
                }
                self.expect_close(Tok::RParen, "`,` or `)`", "(", open)?;
                let end = self.end_statement("`;`")?;
                Ok(Item::Sched { func: first.clone(), prim, args, span: first.span.to(end) })
            }
            Tok::Ident(_) => Err(Diagnostic::new(first.span, format!("`{}` does not start a statement", first.name))
                .with_label("a statement is a declaration (`Func`, `In`, `SIn`, `Var`, `RVar`), a definition `f[x] = ...;` or a schedule `f.compile();`")),
            Tok::Assign => Err(Diagnostic::new(self.peek().span, format!("expected `[` after `{}`, found `=`", first.name))
                .with_label(format!("a definition lists the dimensions of the Func: `{}[x, y] = ...;`", first.name))),
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

    /// Enters one more level of the expression tree: a parenthesis, a call, an index or an
    /// operator of a chain such as `a + b + c` (which nests to the left).
    fn deeper(&mut self, at: Span) -> PResult<()> {
        if self.depth >= MAX_DEPTH {
            return Err(Diagnostic::new(at, "expression nested too deeply").with_label(format!(
                "at most {MAX_DEPTH} levels of parentheses, calls and operators; compute parts of it in other Funcs"
            )));
        }
        self.depth += 1;
        Ok(())
    }

    fn expr(&mut self) -> PResult<Expr> {
        self.deeper(self.peek().span)?;
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
        let depth = self.depth;
        let r = self.additive_chain();
        self.depth = depth;
        r
    }

    fn additive_chain(&mut self) -> PResult<Expr> {
        let mut lhs = self.multiplicative()?;
        loop {
            let op = match self.peek().tok {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => return Ok(lhs),
            };
            let at = self.bump().span;
            self.deeper(at)?;
            let rhs = self.multiplicative()?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span };
        }
    }

    fn multiplicative(&mut self) -> PResult<Expr> {
        let depth = self.depth;
        let r = self.multiplicative_chain();
        self.depth = depth;
        r
    }

    fn multiplicative_chain(&mut self) -> PResult<Expr> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek().tok {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                _ => return Ok(lhs),
            };
            let at = self.bump().span;
            self.deeper(at)?;
            let rhs = self.unary()?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span };
        }
    }

    fn unary(&mut self) -> PResult<Expr> {
        if self.at(&Tok::Minus) {
            let start = self.bump().span;
            self.deeper(start)?;
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
                let open = self.bump().span;
                let e = self.expr()?;
                self.expect_close(Tok::RParen, "an operator or `)`", "(", open)?;
                Ok(e)
            }
            Tok::Ident(_) => {
                let name = self.ident("a name")?;
                match self.peek_at(0) {
                    Tok::LBracket => {
                        let open = self.bump().span;
                        let index = self.list(Tok::RBracket, "`,` or `]`")?;
                        let end = self.expect_close(Tok::RBracket, "`,` or `]`", "[", open)?;
                        Ok(Expr { span: name.span.to(end), kind: ExprKind::Access { name, index } })
                    }
                    Tok::LParen => {
                        let open = self.bump().span;
                        let args = self.list(Tok::RParen, "`,` or `)`")?;
                        let end = self.expect_close(Tok::RParen, "`,` or `)`", "(", open)?;
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
