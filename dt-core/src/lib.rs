//! The core of DT: the front end (lexer, parser, checker), the algorithm IR with schedules, the
//! reference evaluator that defines what a spec means, and (in later modules) the lowering to the
//! kernel IR and its interpreter. Nothing here knows about CUDA, HIP, files or processes.

pub mod abi;
pub mod algo;
pub mod ast;
pub mod blocks;
pub mod check;
pub mod diag;
pub mod dtype;
pub mod eval;
pub mod explore;
pub mod interp;
pub mod kir;
pub mod kir_text;
pub mod lexer;
pub mod lower;
pub mod manifest;
pub mod parser;
pub mod schedule;
pub mod select;
pub mod signature;
pub mod span;
pub mod tensor;
pub mod whole_classes;

pub use diag::{Diagnostic, SourceFile};
pub use dtype::DType;

/// Parses and checks a spec. On failure, every diagnostic found, in source order.
pub fn compile_spec(src: &str) -> Result<algo::Program, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let file = parser::parse(src, &mut diags);
    let items = blocks::expand(&file, &mut diags);
    let (_, program) = whole_classes::with_classes(items, &mut diags);
    match program {
        Some(p) if diags.is_empty() => Ok(p),
        _ => {
            diags.sort_by_key(|d| (d.span.start, d.span.end));
            diags.dedup();
            Err(diags)
        }
    }
}
