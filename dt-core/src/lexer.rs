//! The lexer: source text to tokens. Never fails: unknown characters become diagnostics and are
//! skipped.

use crate::diag::Diagnostic;
use crate::span::Span;

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    Number(f64),
    LBracket,
    RBracket,
    LParen,
    RParen,
    LBrace,
    RBrace,
    Comma,
    Semi,
    Colon,
    Dot,
    Assign,
    Plus,
    Minus,
    Star,
    Slash,
    Lt,
    Le,
    Gt,
    Ge,
    EqEq,
    Ne,
    Eof,
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Number(n) => format!("number `{n}`"),
            Tok::Eof => "end of file".into(),
            other => format!("`{}`", other.text()),
        }
    }

    fn text(&self) -> &'static str {
        match self {
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::Comma => ",",
            Tok::Semi => ";",
            Tok::Colon => ":",
            Tok::Dot => ".",
            Tok::Assign => "=",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::EqEq => "==",
            Tok::Ne => "!=",
            Tok::Ident(_) | Tok::Number(_) | Tok::Eof => "",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// Splits `src` into tokens, ending with [`Tok::Eof`].
pub fn lex(src: &str, diags: &mut Vec<Diagnostic>) -> Vec<Token> {
    let bytes = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'#' {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            toks.push(Token { tok: Tok::Ident(src[start..i].to_string()), span: Span::new(start, i) });
            continue;
        }
        if c.is_ascii_digit() || (c == b'.' && bytes.get(i + 1).is_some_and(|b| b.is_ascii_digit())) {
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
                i += 1;
            }
            if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
                let mut j = i + 1;
                if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
                    j += 1;
                }
                if j < bytes.len() && bytes[j].is_ascii_digit() {
                    i = j;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let text = &src[start..i];
            let span = Span::new(start, i);
            match text.parse::<f64>() {
                Ok(v) => toks.push(Token { tok: Tok::Number(v), span }),
                Err(_) => {
                    diags.push(Diagnostic::new(span, format!("`{text}` is not a number")).with_label("numbers look like 12, 0.5 or 1e-5"));
                    toks.push(Token { tok: Tok::Number(0.0), span });
                }
            }
            continue;
        }
        let two = |b: u8| bytes.get(i + 1) == Some(&b);
        let (tok, len) = match c {
            b'[' => (Tok::LBracket, 1),
            b']' => (Tok::RBracket, 1),
            b'(' => (Tok::LParen, 1),
            b')' => (Tok::RParen, 1),
            b'{' => (Tok::LBrace, 1),
            b'}' => (Tok::RBrace, 1),
            b',' => (Tok::Comma, 1),
            b';' => (Tok::Semi, 1),
            b':' => (Tok::Colon, 1),
            b'.' => (Tok::Dot, 1),
            b'+' => (Tok::Plus, 1),
            b'-' => (Tok::Minus, 1),
            b'*' => (Tok::Star, 1),
            b'/' => (Tok::Slash, 1),
            b'<' if two(b'=') => (Tok::Le, 2),
            b'<' => (Tok::Lt, 1),
            b'>' if two(b'=') => (Tok::Ge, 2),
            b'>' => (Tok::Gt, 1),
            b'=' if two(b'=') => (Tok::EqEq, 2),
            b'=' => (Tok::Assign, 1),
            b'!' if two(b'=') => (Tok::Ne, 2),
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                let len = ch.len_utf8();
                diags.push(
                    Diagnostic::new(Span::new(i, i + len), format!("unexpected character `{}`", ch.escape_debug()))
                        .with_label("not part of the DT language"),
                );
                i += len;
                continue;
            }
        };
        i += len;
        toks.push(Token { tok, span: Span::new(start, i) });
    }
    toks.push(Token { tok: Tok::Eof, span: Span::new(bytes.len(), bytes.len()) });
    toks
}
