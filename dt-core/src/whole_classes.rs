//! Size classes the compiler adds for whole tiles. A tile of the whole of a dimension that is
//! neither blocked nor bounded (`tensorize(l:0)` in the talk's two matmuls) is built for the
//! default bound, 128 ([`crate::check::DEFAULT_WHOLE_BOUND`]), so a launch with `l` = 32 would
//! spend three quarters of its work on masked elements. Each kernel with such tiles therefore
//! also gets classes bounded to [`WHOLE_TILE_CLASSES`] along those dimensions, written before it,
//! which a launch takes first where they admit its sizes ([`crate::select::choose_class`]):
//! `_2mm_32l`, `_2mm_64l`, then `_2mm` up to 128. With several such dimensions, every
//! combination (`f_32x_64y`, ..., `f_32y` with `x` up to 128), the smaller bounds first; of more
//! than [`MAX_CLASSED_DIMENSIONS`], the first that many.
//!
//! The dimensions are those the checker gave the default bound (`Schedule::default_bounds`), so
//! classes are added to a spec that checks, and checked again. A class is a copy of the kernel
//! and of every Func it reads, as a schedule block makes ([`crate::blocks`]), with every schedule
//! statement of the originals and one `bound` per dimension. A spec written out by
//! [`crate::blocks::flat_text`] holds its classes: a class there already, bounds and all, is not
//! added again.

use crate::algo::{FuncId, Program};
use crate::ast::*;
use crate::blocks::{closure, renamed_args, renamed_expr, Expanded, Text};
use crate::diag::Diagnostic;
use crate::span::{Ident, Span};
use std::collections::HashSet;

/// The bounds of the added classes, below the default bound of 128
/// ([`crate::check::DEFAULT_WHOLE_BOUND`]).
pub const WHOLE_TILE_CLASSES: [u64; 2] = [32, 64];

/// The most whole dimensions of a kernel that get classes (the first its schedule names):
/// classes of every combination number 3^d, so a kernel with more keeps the default bound on the
/// others (9 kernels at most, not 27 or 81).
pub const MAX_CLASSED_DIMENSIONS: usize = 2;

/// `items` (a spec's statements, schedule blocks expanded) checked, the checker's diagnostics
/// added to `diags` (those found before, which the checker reads: it reports less after a parse
/// error); and where they check and have whole tiles of unbounded dimensions, with their classes
/// added and checked again. Where the classes do not check, the spec as written: they are an
/// addition, never a new error.
pub fn with_classes(items: Vec<Expanded>, diags: &mut Vec<Diagnostic>) -> (Vec<Expanded>, Option<Program>) {
    let file = |items: &[Expanded]| File { items: items.iter().map(|e| e.item.clone()).collect() };
    let checked = crate::check::check(&file(&items), diags);
    let Some(p) = checked.as_ref().filter(|_| diags.is_empty()) else { return (items, checked) };
    let mut with = items.clone();
    let classes = add(&mut with, p);
    if classes.is_empty() {
        return (items, checked);
    }
    let mut again = Vec::new();
    match crate::check::check(&file(&with), &mut again) {
        Some(mut q) if again.is_empty() => {
            for (class, origin) in classes {
                if let (Some(c), Some(o)) = (q.kernel_by_name(&class), q.kernel_by_name(&origin)) {
                    q.funcs[c.index()].class_of = Some(o);
                }
            }
            (with, Some(q))
        }
        _ => (items, checked),
    }
}

/// Adds to `items`, which check to `p`, the classes of every kernel of `p` with whole tiles of
/// unbounded dimensions, each group before its kernel's `compile`; the name of each class's
/// kernel with that of the kernel it copies (a class written out already counts too: a spec
/// from [`crate::blocks::flat_text`] has them).
fn add(items: &mut Vec<Expanded>, p: &Program) -> Vec<(String, String)> {
    let mut taken: HashSet<String> = HashSet::new();
    for e in items.iter() {
        match &e.item {
            Item::Decl { names, .. } => taken.extend(names.iter().map(|n| n.name.clone())),
            Item::Def { func, .. } => _ = taken.insert(func.name.clone()),
            _ => {}
        }
    }
    let mut groups: Vec<(usize, Vec<Expanded>)> = Vec::new();
    let mut classes = Vec::new();
    for k in &p.kernels {
        let root = &p.func(*k).name;
        let compile = |e: &Expanded| {
            matches!(&e.item, Item::Sched { func, prim, .. }
                if func.name == *root && (prim.name == "compile" || prim.name == "compile_to_kernel"))
        };
        let Some(at) = items.iter().position(compile) else { continue };
        let group = classes_of(items, p, *k, &mut taken, &mut classes);
        if !group.is_empty() {
            groups.push((at, group));
        }
    }
    for (at, group) in groups.into_iter().rev() {
        items.splice(at..at, group);
    }
    classes
}

/// The added classes of kernel `k` of `p` (written as `items`), in the order a launch tries
/// them, their names added to `taken` and each class's kernel, with `k`'s name, to `classes`
/// (one written out already too); none where it has no whole tile of an unbounded dimension.
/// For each of the first [`MAX_CLASSED_DIMENSIONS`] dimensions whose bound the checker set to
/// the default, a class per bound of [`WHOLE_TILE_CLASSES`] below the bound the kernel has there
/// (a producer's may be lower), and every combination of them.
fn classes_of(
    items: &[Expanded],
    p: &Program,
    k: FuncId,
    taken: &mut HashSet<String>,
    classes: &mut Vec<(String, String)>,
) -> Vec<Expanded> {
    let kdims = p.kernel_dims(k);
    let bounds = crate::lower::bounds(p, k);
    // Each dimension: its name, its choices (a class bound, or none: the kernel's own) and the
    // kernel's own bound there.
    let dims: Vec<(&str, Vec<Option<u64>>, u64)> = p
        .func(k)
        .schedule
        .default_bounds
        .iter()
        .filter(|d| kdims.contains(d))
        .enumerate()
        .map(|(i, d)| {
            let bound = bounds.iter().find(|(x, _)| x == d).map_or(crate::check::DEFAULT_WHOLE_BOUND, |(_, n)| *n);
            // Past the first few, only the kernel's own bound (which each class then states).
            let classed = i < MAX_CLASSED_DIMENSIONS;
            let below = WHOLE_TILE_CLASSES.iter().filter(|n| classed && **n < bound).map(|n| Some(*n));
            (p.dim_name(*d), below.chain([None]).collect(), bound)
        })
        .collect();
    let root = p.func(k).name.as_str();
    let defs: Vec<(&Ident, &Item)> = items
        .iter()
        .filter_map(|e| match &e.item {
            Item::Def { func, .. } => Some((func, &e.item)),
            _ => None,
        })
        .collect();
    let closure = closure(root, &defs);
    let scheds: Vec<&Expanded> =
        items.iter().filter(|e| matches!(&e.item, Item::Sched { func, .. } if closure.contains(&func.name.as_str()))).collect();
    let at = p.func(k).schedule.compile_span.unwrap_or_default();
    let mut out = Vec::new();
    // Every combination of a choice per dimension (a bound, or none: the kernel's own), the
    // smaller first; the last, all none, is the kernel itself.
    let count: usize = dims.iter().map(|(_, c, _)| c.len()).product();
    for c in 0..count.saturating_sub(1) {
        let mut rest = c;
        let mut picks: Vec<(&str, Option<u64>, u64)> = Vec::new();
        for (d, choices, own) in dims.iter().rev() {
            picks.push((d, choices[rest % choices.len()], *own));
            rest /= choices.len();
        }
        picks.reverse();
        let base = picks.iter().filter_map(|(d, n, _)| Some(format!("{}{d}", (*n)?))).collect::<Vec<_>>().join("_");
        // A dimension left at the kernel's bound is bounded to it in so many words, so that the
        // class has no whole tile of an unbounded dimension in turn.
        let class_bounds: Vec<(&str, u64)> = picks.iter().map(|(d, n, own)| (*d, n.unwrap_or(*own))).collect();
        // The class's name: `_2mm_32l`, or where a Func of a copy's name is there already (the
        // copies of another kernel's class that reads the same producer), `_2mm_32l_2`, ...; a
        // class of that name there with these bounds (a spec written out) is not added again.
        for suffix in std::iter::once(base.clone()).chain((2..).map(|i| format!("{base}_{i}"))) {
            let copied = |n: &str| closure.contains(&n).then(|| format!("{n}_{suffix}"));
            let kernel = format!("{root}_{suffix}");
            if has_class(items, &kernel, &class_bounds) {
                classes.push((kernel, root.to_string()));
                break;
            }
            let names: Vec<String> = closure.iter().filter_map(|f| copied(f)).collect();
            if names.iter().any(|n| taken.contains(n)) {
                continue;
            }
            taken.extend(names.iter().cloned());
            classes.push((kernel, root.to_string()));
            out.extend(class(items, (&defs, &scheds), &copied, root, (&class_bounds, at)));
            break;
        }
    }
    out
}

/// Whether `items` bound kernel `kernel` to `bounds` (a class added before).
fn has_class(items: &[Expanded], kernel: &str, bounds: &[(&str, u64)]) -> bool {
    bounds.iter().all(|(d, n)| {
        items.iter().any(|e| {
            matches!(&e.item, Item::Sched { func, prim, args, .. } if func.name == kernel && prim.name == "bound"
                && matches!(args.as_slice(), [SchedArg::Extent(x, v, _)] if x.name == *d && *v == *n as f64))
        })
    })
}

/// One class: the copies (`copied` names them) declared, defined and scheduled as their
/// originals, with `bounds` on the kernel's copy before its `compile`.
fn class(
    items: &[Expanded],
    (defs, scheds): (&[(&Ident, &Item)], &[&Expanded]),
    copied: &impl Fn(&str) -> Option<String>,
    root: &str,
    (bounds, span): (&[(&str, u64)], Span),
) -> Vec<Expanded> {
    let kernel = copied(root).unwrap_or_default();
    let at = defs.iter().find(|(f, _)| f.name == root).map_or(Span::default(), |(f, _)| f.span);
    let names: Vec<Ident> = defs.iter().filter_map(|(f, _)| copied(&f.name)).map(|name| Ident { name, span: at }).collect();
    let decl = format!("Func {};", names.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", "));
    let mut out = vec![Expanded { item: Item::Decl { kind: DeclKind::Func, names, span: at }, text: Text::Added(decl), class: None }];
    for e in items {
        let Item::Def { func, dims, body, span } = &e.item else { continue };
        let Some(new) = copied(&func.name) else { continue };
        let mut renames = vec![(func.span, new.clone())];
        let body = renamed_expr(body, copied, &mut renames);
        let item = Item::Def { func: Ident { name: new, span: func.span }, dims: dims.clone(), body, span: *span };
        out.push(Expanded { item, text: retext(&e.text, renames), class: None });
    }
    let mut compile = Vec::new();
    for e in scheds {
        let Item::Sched { func, prim, args, span } = &e.item else { continue };
        let Some(new) = copied(&func.name) else { continue };
        // A size specialized above the class's bound is never launched there.
        let above = |a: &SchedArg| matches!(a, SchedArg::Extent(d, v, _) if bounds.iter().any(|(x, n)| d.name == *x && *v > *n as f64));
        if prim.name == "specialize" && args.iter().any(above) {
            continue;
        }
        let mut renames = vec![(func.span, new.clone())];
        let args = renamed_args(args, copied, &mut renames);
        let item = Item::Sched { func: Ident { name: new, span: func.span }, prim: prim.clone(), args, span: *span };
        let is_compile = func.name == root && (prim.name == "compile" || prim.name == "compile_to_kernel");
        let copy = Expanded { item, text: retext(&e.text, renames), class: None };
        if is_compile {
            compile.push(copy)
        } else {
            out.push(copy)
        }
    }
    for (d, n) in bounds {
        let item = Item::Sched {
            func: Ident { name: kernel.clone(), span },
            prim: Ident { name: "bound".into(), span },
            args: vec![SchedArg::Extent(Ident { name: d.to_string(), span }, *n as f64, span)],
            span,
        };
        out.push(Expanded { item, text: Text::Added(format!("{kernel}.bound({d}:{n});")), class: None });
    }
    out.extend(compile);
    for e in &mut out {
        e.class = Some(kernel.clone());
    }
    out
}

/// The text of a copy of a statement written as `text`: its renames, with `renames` replacing
/// those at the same place.
fn retext(text: &Text, renames: Vec<(Span, String)>) -> Text {
    match text {
        Text::Source { span, renames: old } => {
            let mut all: Vec<(Span, String)> = old.iter().filter(|(s, _)| !renames.iter().any(|(n, _)| n == s)).cloned().collect();
            all.extend(renames);
            Text::Source { span: *span, renames: all }
        }
        Text::Added(t) => Text::Added(t.clone()),
    }
}

#[cfg(test)]
mod tests {
    /// Two whole dimensions: every combination of their bounds, the smaller first, each kernel
    /// of a block (`_1k`) named after its class; a spec written out adds nothing again.
    #[test]
    fn classes_combine_the_bounds_of_every_whole_dimension() {
        let src = "Func f;\nIn A;\nVar x, y;\nf[x, y] = A[x, y] * 2;\n\
            schedule f_1k {\n  f.tensorize(x:0, y:0);\n  f.compile();\n}\n";
        let p = crate::compile_spec(src).unwrap();
        let names: Vec<&str> = p.kernels.iter().map(|k| p.func(*k).name.as_str()).collect();
        assert_eq!(
            names,
            ["f_1k_32x_32y", "f_1k_32x_64y", "f_1k_32x", "f_1k_64x_32y", "f_1k_64x_64y", "f_1k_64x", "f_1k_32y", "f_1k_64y", "f_1k"]
        );
        assert!(names.iter().all(|n| crate::select::is_variant_of(n, "f")));
        let flat = crate::blocks::flat_text(src).unwrap();
        assert_eq!(crate::blocks::flat_text(&flat).unwrap(), flat);
        // Each class names the kernel it copies, in the spec as written and written out.
        for p in [p, crate::compile_spec(&flat).unwrap()] {
            let origin = p.kernel_by_name("f_1k");
            for k in &p.kernels {
                let f = p.func(*k);
                assert_eq!(f.class_of, if f.name == "f_1k" { None } else { origin }, "{}", f.name);
            }
        }
        // Three whole dimensions: classes along the first two (9 kernels, not 27), each bounding
        // the third to the kernel's own bound in so many words.
        let three = "Func f;\nIn A;\nVar x, y, z;\nf[x, y, z] = A[x, y, z] * 2;\nf.tensorize(x:0, y:0, z:0);\nf.compile();\n";
        let q = crate::compile_spec(three).unwrap();
        let names: Vec<&str> = q.kernels.iter().map(|k| q.func(*k).name.as_str()).collect();
        assert_eq!(names, ["f_32x_32y", "f_32x_64y", "f_32x", "f_64x_32y", "f_64x_64y", "f_64x", "f_32y", "f_64y", "f"]);
        let flat_three = crate::blocks::flat_text(three).unwrap();
        assert_eq!(flat_three.matches(".bound(z:128);").count(), 8, "{flat_three}");
        assert_eq!(crate::blocks::flat_text(&flat_three).unwrap(), flat_three);
    }
}
