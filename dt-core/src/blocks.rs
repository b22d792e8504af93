//! Schedule blocks: `schedule softmax_1k { ... }` names a size class of the Func it compiles
//! (`softmax`) and holds that class's schedule, so that a spec writes its algorithm once.
//!
//! Before checking, each block becomes the statements a spec would otherwise repeat: copies of
//! the compiled Func and of every Func it reads (transitively), under the block's suffix (`_1k`:
//! `row_max` becomes `row_max_1k`), declared, defined with the copies reading each other, and
//! scheduled by the block's statements, which name the originals. Statements outside blocks
//! schedule the originals, and a copy of a Func the block does not schedule (a producer placed
//! alike in every class) is scheduled as its original is. The copies keep the originals' spans,
//! so that a diagnostic in a copy points at the one definition; [`flat_text`] writes the result
//! as a spec's text, for tools that work on text (the explorer).

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::span::{Ident, Span};
use std::collections::HashSet;

/// One statement of the expanded file and how its text is written.
#[derive(Clone)]
pub struct Expanded {
    pub item: Item,
    pub text: Text,
    /// For a statement of a class that `crate::whole_classes` added: that class's kernel.
    pub class: Option<String>,
}

#[derive(Clone)]
pub enum Text {
    /// The source at `span`, the identifiers at `renames` replaced by their new names.
    Source { span: Span, renames: Vec<(Span, String)> },
    /// A declaration the expansion adds.
    Added(String),
}

/// The statements of `file` with every schedule block expanded (see the module docs), in order;
/// a block that cannot be expanded is reported in `diags` and left out.
pub fn expand(file: &File, diags: &mut Vec<Diagnostic>) -> Vec<Expanded> {
    let defs: Vec<(&Ident, &Item)> = file
        .items
        .iter()
        .filter_map(|item| match item {
            Item::Def { func, .. } => Some((func, item)),
            _ => None,
        })
        .collect();
    let mut taken: HashSet<String> = HashSet::new();
    for item in &file.items {
        match item {
            Item::Decl { names, .. } => taken.extend(names.iter().map(|n| n.name.clone())),
            Item::Def { func, .. } => _ = taken.insert(func.name.clone()),
            _ => {}
        }
    }
    let top: Vec<&Item> = file.items.iter().filter(|i| matches!(i, Item::Sched { .. })).collect();
    let mut out = Vec::new();
    for item in &file.items {
        match item {
            Item::Block { name, items, span } => expand_block(name, items, *span, (&defs, &top), &mut taken, &mut out, diags),
            other => {
                out.push(Expanded { item: other.clone(), text: Text::Source { span: item_span(other), renames: Vec::new() }, class: None })
            }
        }
    }
    out
}

/// The spec `src` with its schedule blocks expanded and the classes of its whole tiles added
/// (`crate::whole_classes`), as text: each statement on a line of its own.
pub fn flat_text(src: &str) -> Result<String, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let file = crate::parser::parse(src, &mut diags);
    let expanded = expand(&file, &mut diags);
    if !diags.is_empty() {
        return Err(diags);
    }
    let (expanded, _) = crate::whole_classes::with_classes(expanded, &mut Vec::new());
    Ok(expanded.iter().map(|e| text_of(src, e) + "\n").collect())
}

/// The text of one expanded statement.
pub fn text_of(src: &str, e: &Expanded) -> String {
    match &e.text {
        Text::Added(t) => t.clone(),
        Text::Source { span, renames } => {
            let mut renames: Vec<&(Span, String)> = renames.iter().collect();
            renames.sort_by_key(|(s, _)| s.start);
            let mut out = String::new();
            let mut at = span.start as usize;
            for (s, name) in renames {
                out += &src[at..s.start as usize];
                out += name;
                at = s.end as usize;
            }
            out += &src[at..span.end as usize];
            out
        }
    }
}

/// Schedule statements of kernel `kernel` as a written-out spec names them (`row_max_1k.fuse_at(
/// softmax_1k, x);`, one per line), rewritten as the block that gives them in `src`, where `src`
/// schedules `kernel` in a block: the copies named as their originals, inside `schedule kernel
/// { ... }`. `None` where `src` has no such block.
pub fn as_block(src: &str, kernel: &str, lines: &str) -> Option<String> {
    let mut diags = Vec::new();
    let file = crate::parser::parse(src, &mut diags);
    let defined: HashSet<&str> =
        file.items.iter().filter_map(|i| if let Item::Def { func, .. } = i { Some(func.name.as_str()) } else { None }).collect();
    let root = file.items.iter().find_map(|i| match i {
        Item::Block { name, items, .. } if name.name == kernel => items.iter().find_map(|s| match s {
            Item::Sched { func, prim, .. } if prim.name == "compile" || prim.name == "compile_to_kernel" => Some(func.name.as_str()),
            _ => None,
        }),
        _ => None,
    })?;
    let suffix = kernel.strip_prefix(root)?;
    // Identifiers one by one: a copy's name (a defined Func's and the suffix) back to its
    // original's.
    let mut out = format!("schedule {kernel} {{\n");
    for line in lines.lines() {
        let mut word = String::new();
        out += "  ";
        for c in line.chars().chain(['\n']) {
            if c.is_ascii_alphanumeric() || c == '_' {
                word.push(c);
                continue;
            }
            out += word.strip_suffix(suffix).filter(|original| defined.contains(original)).unwrap_or(&word);
            out.push(c);
            word.clear();
        }
    }
    Some(out + "}")
}

fn item_span(item: &Item) -> Span {
    match item {
        Item::Decl { span, .. } | Item::Def { span, .. } | Item::Sched { span, .. } | Item::Block { span, .. } => *span,
    }
}

#[allow(clippy::too_many_arguments)]
fn expand_block(
    name: &Ident,
    items: &[Item],
    header: Span,
    (defs, top): (&[(&Ident, &Item)], &[&Item]),
    taken: &mut HashSet<String>,
    out: &mut Vec<Expanded>,
    diags: &mut Vec<Diagnostic>,
) {
    let mut scheds = Vec::new();
    for item in items {
        match item {
            Item::Sched { .. } => scheds.push(item),
            other => diags.push(
                Diagnostic::new(item_span(other), "a schedule block holds schedule statements only")
                    .with_label("declarations and definitions go outside it, once for every class"),
            ),
        }
    }
    let compiled: Vec<&Ident> = scheds
        .iter()
        .filter_map(|s| match s {
            Item::Sched { func, prim, .. } if prim.name == "compile" || prim.name == "compile_to_kernel" => Some(func),
            _ => None,
        })
        .collect();
    let Some(root) = compiled.first() else {
        diags.push(
            Diagnostic::new(name.span, format!("the schedule block `{}` compiles no Func", name.name))
                .with_label("end it with `f.compile();`"),
        );
        return;
    };
    if let Some(second) = compiled.get(1) {
        diags.push(
            Diagnostic::new(second.span, "a schedule block compiles one Func").with_label(format!("this block compiles `{}`", root.name)),
        );
        return;
    }
    let suffix = match name.name.strip_prefix(&root.name).and_then(|s| s.strip_prefix('_')) {
        Some(s) if !s.is_empty() => s,
        _ => {
            diags.push(
                Diagnostic::new(
                    name.span,
                    format!("the block `{}` does not name a class of `{}`, the Func it compiles", name.name, root.name),
                )
                .with_label(format!("call it `{}_` and the class, such as `{}_1k`", root.name, root.name)),
            );
            return;
        }
    };
    if !defs.iter().any(|(f, _)| f.name == root.name) {
        diags.push(
            Diagnostic::new(root.span, format!("`{}` has no definition for the block to copy", root.name))
                .with_label("define it outside the block"),
        );
        return;
    }
    let closure = closure(&root.name, defs);
    let copied = |n: &str| closure.contains(&n).then(|| format!("{n}_{suffix}"));
    for f in &closure {
        let new = format!("{f}_{suffix}");
        if taken.contains(&new) {
            diags.push(
                Diagnostic::new(name.span, format!("`{new}` exists already; the block `{}` would copy `{f}` under that name", name.name))
                    .with_label("rename the block or the Func"),
            );
            return;
        }
    }
    let in_order: Vec<&(&Ident, &Item)> = defs.iter().filter(|(f, _)| closure.contains(&f.name.as_str())).collect();
    let names: Vec<Ident> = in_order.iter().filter_map(|(f, _)| copied(&f.name)).map(|n| Ident { name: n, span: name.span }).collect();
    taken.extend(names.iter().map(|n| n.name.clone()));
    let decl = format!("Func {};", names.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", "));
    out.push(Expanded { item: Item::Decl { kind: DeclKind::Func, names, span: header }, text: Text::Added(decl), class: None });
    for (func, item) in in_order {
        let Item::Def { dims, body, span, .. } = item else { continue };
        let new = format!("{}_{suffix}", func.name);
        let mut renames = vec![(func.span, new.clone())];
        let body = renamed_expr(body, &copied, &mut renames);
        let func = Ident { name: new, span: func.span };
        out.push(Expanded {
            item: Item::Def { func, dims: dims.clone(), body, span: *span },
            text: Text::Source { span: *span, renames },
            class: None,
        });
    }
    // A Func the kernel reads that the block does not schedule is scheduled as outside the
    // blocks (placed alike in every class).
    let own: Vec<&str> =
        scheds.iter().filter_map(|s| if let Item::Sched { func, .. } = s { Some(func.name.as_str()) } else { None }).collect();
    let inherited = top.iter().copied().filter(|s| {
        matches!(s, Item::Sched { func, .. } if func.name != root.name && closure.contains(&func.name.as_str()) && !own.contains(&func.name.as_str()))
    });
    let scheds: Vec<&Item> = scheds.iter().copied().chain(inherited).collect();
    for item in scheds {
        let Item::Sched { func, prim, args, span } = item else { continue };
        let Some(new) = copied(&func.name) else {
            diags.push(
                Diagnostic::new(func.span, format!("`{}` is not read by `{}`, the Func this block compiles", func.name, root.name))
                    .with_label(format!("a schedule block schedules `{}` and the Funcs it reads", root.name)),
            );
            continue;
        };
        let mut renames = vec![(func.span, new.clone())];
        let args = renamed_args(args, &copied, &mut renames);
        let item = Item::Sched { func: Ident { name: new, span: func.span }, prim: prim.clone(), args, span: *span };
        out.push(Expanded { item, text: Text::Source { span: *span, renames }, class: None });
    }
}

/// Schedule arguments with the names of copied Funcs (`fuse_at(softmax, x)`) naming their
/// copies (each replacement in `renames`).
pub(crate) fn renamed_args(
    args: &[SchedArg],
    copied: &impl Fn(&str) -> Option<String>,
    renames: &mut Vec<(Span, String)>,
) -> Vec<SchedArg> {
    args.iter()
        .map(|a| match a {
            SchedArg::Name(id) => match copied(&id.name) {
                Some(n) => {
                    renames.push((id.span, n.clone()));
                    SchedArg::Name(Ident { name: n, span: id.span })
                }
                None => a.clone(),
            },
            other => other.clone(),
        })
        .collect()
}

/// The Func `root` and every Func it reads, transitively (`defs`: the definitions by name).
pub(crate) fn closure<'a>(root: &'a str, defs: &[(&'a Ident, &'a Item)]) -> Vec<&'a str> {
    let mut closure: Vec<&str> = vec![root];
    let mut next = 0;
    while next < closure.len() {
        if let Some((_, Item::Def { body, .. })) = defs.iter().find(|(f, _)| f.name == closure[next]) {
            let mut reads = Vec::new();
            accesses(body, &mut reads);
            for r in reads {
                if defs.iter().any(|(f, _)| f.name == r.name) && !closure.contains(&r.name.as_str()) {
                    closure.push(&r.name);
                }
            }
        }
        next += 1;
    }
    closure
}

/// The Func or input reads (`name[...]`) in `e`.
fn accesses<'a>(e: &'a Expr, out: &mut Vec<&'a Ident>) {
    match &e.kind {
        ExprKind::Access { name, index } => {
            out.push(name);
            index.iter().for_each(|i| accesses(i, out));
        }
        ExprKind::Call { args, .. } => args.iter().for_each(|a| accesses(a, out)),
        ExprKind::Neg(a) => accesses(a, out),
        ExprKind::Binary(_, a, b) => {
            accesses(a, out);
            accesses(b, out);
        }
        ExprKind::Number(_) | ExprKind::Name(_) => {}
    }
}

/// `e` with the reads of copied Funcs reading their copies (each replacement in `renames`).
pub(crate) fn renamed_expr(e: &Expr, copied: &impl Fn(&str) -> Option<String>, renames: &mut Vec<(Span, String)>) -> Expr {
    let kind = match &e.kind {
        ExprKind::Access { name, index } => {
            let index = index.iter().map(|i| renamed_expr(i, copied, renames)).collect();
            let name = match copied(&name.name) {
                Some(n) => {
                    renames.push((name.span, n.clone()));
                    Ident { name: n, span: name.span }
                }
                None => name.clone(),
            };
            ExprKind::Access { name, index }
        }
        ExprKind::Call { name, args } => {
            ExprKind::Call { name: name.clone(), args: args.iter().map(|a| renamed_expr(a, copied, renames)).collect() }
        }
        ExprKind::Neg(a) => ExprKind::Neg(Box::new(renamed_expr(a, copied, renames))),
        ExprKind::Binary(op, a, b) => {
            ExprKind::Binary(*op, Box::new(renamed_expr(a, copied, renames)), Box::new(renamed_expr(b, copied, renames)))
        }
        other => other.clone(),
    };
    Expr { kind, span: e.span }
}

#[cfg(test)]
mod tests {
    use super::flat_text;

    const BLOCKS: &str = "Func row_max, softmax;\nIn A;\nVar x;\nRVar y;\n\
        row_max[x] = rmax(A[x, y], y);\nsoftmax[x, y] = exp(A[x, y] - row_max[x]);\n\
        schedule softmax_1k {\n  softmax.bound(y:1024);\n  softmax.block(x:1);\n  softmax.tensorize(x:0, y:0);\n  \
        row_max.fuse_at(softmax, x);\n  softmax.compile();\n}\n\
        softmax.block(x:1);\nsoftmax.tensorize(x:1, y:1024);\nrow_max.fuse_at(softmax, x);\nsoftmax.compile();\n";

    /// A block writes out as the copies a spec without blocks repeats: declared, defined reading
    /// each other, scheduled under their names, in the block's place.
    #[test]
    fn a_block_writes_out_as_copies_of_the_algorithm() {
        let flat = flat_text(BLOCKS).unwrap();
        let want = "Func row_max_1k, softmax_1k;\nrow_max_1k[x] = rmax(A[x, y], y);\n\
            softmax_1k[x, y] = exp(A[x, y] - row_max_1k[x]);\nsoftmax_1k.bound(y:1024);\nsoftmax_1k.block(x:1);\n\
            softmax_1k.tensorize(x:0, y:0);\nrow_max_1k.fuse_at(softmax_1k, x);\nsoftmax_1k.compile();\nsoftmax.block(x:1);\n";
        assert!(flat.contains(want), "{flat}");
    }

    /// A producer placed outside the blocks is placed alike in each class that does not
    /// schedule it; one the block schedules takes the block's statements only.
    #[test]
    fn blocks_inherit_the_placements_they_do_not_give() {
        let inherits = BLOCKS.replace("  row_max.fuse_at(softmax, x);\n", "");
        let flat = flat_text(&inherits).unwrap();
        assert_eq!(flat.matches("row_max_1k.fuse_at(softmax_1k, x);").count(), 1, "{flat}");
        let own = BLOCKS.replace("  row_max.fuse_at(softmax, x);\n", "  row_max.fuse_at(softmax, x);\n  row_max.tensorize(y:512);\n");
        let flat = flat_text(&own).unwrap();
        assert_eq!(flat.matches("row_max_1k.fuse_at(softmax_1k, x);").count(), 1, "{flat}");
        assert!(flat.contains("row_max_1k.tensorize(y:512);\n") && !flat.contains("row_max.tensorize"), "{flat}");
    }

    /// A class's schedule statements, as the explorer prints them, go back into their block.
    #[test]
    fn a_classs_statements_go_back_into_its_block() {
        let lines = "softmax_1k.bound(y:2048);\nrow_max_1k.fuse_at(softmax_1k, x);\nsoftmax_1k.compile();";
        let block = super::as_block(BLOCKS, "softmax_1k", lines).unwrap();
        assert_eq!(block, "schedule softmax_1k {\n  softmax.bound(y:2048);\n  row_max.fuse_at(softmax, x);\n  softmax.compile();\n}");
        assert_eq!(super::as_block(BLOCKS, "softmax", "softmax.compile();"), None);
    }

    /// The spec in blocks and the spec written out lower to the same kernels.
    #[test]
    fn blocks_preserve_the_kernels() {
        let lowered = |src: &str| {
            let p = crate::compile_spec(src).unwrap();
            p.kernels.iter().map(|k| crate::kir::print(&crate::lower::lower(&p, *k).unwrap())).collect::<Vec<_>>()
        };
        let (blocks, flat) = (lowered(BLOCKS), lowered(&flat_text(BLOCKS).unwrap()));
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks, flat);
        assert!(blocks[0].contains("kernel softmax_1k("), "{}", blocks[0]);
    }
}
