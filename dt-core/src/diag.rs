//! Diagnostics: what went wrong, where, and how to fix it.
//!
//! Passes collect [`Diagnostic`]s with spans; they are rendered to text only at the edge, in the
//! format of LANGUAGE.md section 6:
//!
//! ```text
//! specs/softmax.dt:7:22: error: `z` is not a declared dimension
//!    |
//!  7 | _sum[x] = rsum(exp(A[x, z]), y);
//!    |                      ^ declared dimensions here are: x, y
//! ```

use crate::span::Span;
use codespan_reporting::files::{Files, SimpleFile};

/// One error in a spec, or a warning: a request the compiler serves otherwise than asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub span: Span,
    /// The headline: what is wrong.
    pub message: String,
    /// Printed under the caret: a hint or the relevant context.
    pub label: String,
    pub severity: Severity,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The spec is refused.
    Error,
    /// The spec is served, but not as written (`num_stages` lowered to what fits, say).
    Warning,
}

impl Diagnostic {
    pub fn new(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic { span, message: message.into(), label: String::new(), severity: Severity::Error }
    }

    pub fn warning(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::new(span, message) }
    }

    pub fn with_label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = label.into();
        self
    }
}

/// A source file: its display name (as given on the command line) and text.
#[derive(Clone, Debug)]
pub struct SourceFile {
    file: SimpleFile<String, String>,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> SourceFile {
        SourceFile { file: SimpleFile::new(name.into(), text.into()) }
    }

    pub fn name(&self) -> &str {
        self.file.name()
    }

    pub fn text(&self) -> &str {
        self.file.source()
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text().len());
        let line = self.file.line_index((), offset).unwrap_or(0);
        let col = self.file.column_number((), line, offset).unwrap_or(1);
        (line + 1, col)
    }

    fn line_text(&self, line: usize) -> &str {
        match self.file.line_range((), line - 1) {
            Ok(range) => self.text()[range].trim_end_matches(['\n', '\r']),
            Err(_) => "",
        }
    }

    /// Renders one diagnostic in the format of LANGUAGE.md section 6.
    pub fn render(&self, d: &Diagnostic) -> String {
        let (line, col) = self.line_col(d.span.start as usize);
        let text = self.line_text(line);
        // Width of the caret run: the span's characters on its first line, at least one.
        let line_end = self.file.line_range((), line - 1).map(|r| r.end).unwrap_or(0);
        let end = (d.span.end as usize).min(line_end).max(d.span.start as usize);
        let carets = self.text().get(d.span.start as usize..end).map_or(0, |s| s.trim_end().chars().count()).max(1);
        let gutter = line.to_string().len();
        let pad = " ".repeat(gutter);
        let severity = match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut out = format!("{}:{}:{}: {severity}: {}\n", self.name(), line, col, d.message);
        out += &format!(" {pad} |\n");
        out += &format!(" {line} | {text}\n");
        let indent: String = text.chars().take(col - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
        let label = if d.label.is_empty() { String::new() } else { format!(" {}", d.label) };
        out += &format!(" {pad} | {indent}{}{label}\n", "^".repeat(carets));
        out
    }

    /// Renders several diagnostics, in source order, separated by blank lines.
    pub fn render_all(&self, diags: &[Diagnostic]) -> String {
        let mut sorted: Vec<&Diagnostic> = diags.iter().collect();
        sorted.sort_by_key(|d| (d.span.start, d.span.end));
        sorted.iter().map(|d| self.render(d)).collect::<Vec<_>>().join("\n")
    }
}
