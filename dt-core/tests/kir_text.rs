//! The kernel IR's text form reads back (`dt_core::kir_text::parse`): every kernel of the
//! library's specs, the documentation's examples and the code generator's test specs, and
//! kernels of random schedules, print the text they were parsed from.

mod common;

use dt_core::explore::{algorithm_text, random_spec, Options, Rng};
use dt_core::kir::{print, Kernel, Shape, Stmt};
use dt_core::kir_text::parse;
use proptest::prelude::*;

const SPEC_DIRS: [&str; 4] = ["../dt-kernels/specs", "../docs/examples", "../dt-codegen/tests/specs", "../dt-codegen/tests/cluster"];

/// Every `.dt` file of the spec directories, with its text.
fn specs() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in SPEC_DIRS {
        let dir = format!("{}/{dir}", env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<_> = std::fs::read_dir(&dir).expect("a spec directory").map(|e| e.expect("an entry").path()).collect();
        files.sort();
        for f in files.into_iter().filter(|f| f.extension().is_some_and(|e| e == "dt")) {
            out.push((f.display().to_string(), std::fs::read_to_string(&f).expect("a spec")));
        }
    }
    out
}

fn kernels(src: &str) -> Vec<Kernel> {
    let p = dt_core::compile_spec(src).expect("the spec checks");
    dt_core::lower::lower_all(&p).expect("the spec lowers")
}

/// Parses the text of `k` and prints the result: the same text, or a message that shows where
/// it differs.
fn round_trip(k: &Kernel) -> Result<(), String> {
    let text = print(k);
    let parsed = parse(&text).map_err(|e| format!("kernel `{}`: {e}\n{text}", k.name))?;
    let again = print(&parsed);
    match text.lines().zip(again.lines()).position(|(a, b)| a != b) {
        None if text == again => Ok(()),
        at => {
            let at = at.unwrap_or(text.lines().count().min(again.lines().count()));
            Err(format!(
                "kernel `{}` prints differently after parsing, at line {}:\n  was: {}\n  now: {}",
                k.name,
                at + 1,
                text.lines().nth(at).unwrap_or("(end)"),
                again.lines().nth(at).unwrap_or("(end)")
            ))
        }
    }
}

#[test]
fn every_spec_kernel_text_reads_back() {
    let mut count = 0;
    for (path, src) in specs() {
        for k in kernels(&src) {
            round_trip(&k).unwrap_or_else(|e| panic!("{path}: {e}"));
            count += 1;
        }
    }
    assert!(count > 50, "only {count} kernels read");
}

/// A parsed kernel holds the lowered kernel's statements, and the values and accumulators they
/// define, up to the ids of its dimensions (numbered in the order of its sizes, named alike).
#[test]
fn a_parsed_kernel_has_the_lowered_kernels_statements() {
    let src = std::fs::read_to_string(format!("{}/../dt-kernels/specs/attention.dt", env!("CARGO_MANIFEST_DIR"))).expect("spec");
    for k in kernels(&src) {
        let parsed = parse(&print(&k)).expect("parses");
        let named = |kernel: &Kernel, s: &Shape| s.0.iter().map(|(d, n)| (kernel.dim_name(*d).to_string(), *n)).collect::<Vec<_>>();
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        walk(&k.body, &mut mine);
        walk(&parsed.body, &mut theirs);
        assert_eq!(mine.len(), theirs.len(), "{}: statements", k.name);
        for (a, b) in mine.iter().zip(&theirs) {
            match (a, b) {
                (Stmt::Let { value: x, op: p }, Stmt::Let { value: y, op: q }) => {
                    assert_eq!(x, y, "{}", k.name);
                    assert_eq!(std::mem::discriminant(p), std::mem::discriminant(q), "{}: %{}", k.name, x.0);
                    let (v, w) = (k.value(*x), parsed.value(*y));
                    assert_eq!((named(&k, &v.shape), v.layout), (named(&parsed, &w.shape), w.layout), "{}: %{}", k.name, x.0);
                }
                (Stmt::Init { var: x, value: p, .. }, Stmt::Init { var: y, value: q, .. }) => {
                    assert_eq!((x, p.to_bits()), (y, q.to_bits()), "{}", k.name);
                    assert_eq!(named(&k, k.var(*x)), named(&parsed, parsed.var(*y)), "{}: $acc{}", k.name, x.0);
                }
                (Stmt::Loop(x), Stmt::Loop(y)) => {
                    assert_eq!((x.kind, x.step, x.stages, x.diagonal), (y.kind, y.step, y.stages, y.diagonal), "{}", k.name);
                }
                _ => assert_eq!(std::mem::discriminant(*a), std::mem::discriminant(*b), "{}", k.name),
            }
        }
        assert_eq!(parsed.grid.order.len(), k.grid.order.len(), "{}", k.name);
        assert_eq!((parsed.num_warps, parsed.wgmma, parsed.max_registers), (k.num_warps, k.wgmma, k.max_registers), "{}", k.name);
    }
}

/// Every statement of `stmts`, loops before their bodies.
fn walk<'a>(stmts: &'a [Stmt], out: &mut Vec<&'a Stmt>) {
    for s in stmts {
        out.push(s);
        if let Stmt::Loop(l) = s {
            walk(&l.body, out);
        }
    }
}

proptest! {
    #![proptest_config(common::proptest_config(64))]
    /// Kernels of schedules drawn as the property tests draw them read back too.
    #[test]
    fn random_schedule_kernel_text_reads_back(seed in any::<u64>(), which in 0usize..6) {
        let library = specs().into_iter().filter(|(p, _)| p.contains("dt-kernels/specs")).collect::<Vec<_>>();
        let (path, src) = &library[which % library.len()];
        let algorithm = algorithm_text(src).expect("an algorithm");
        let p = dt_core::compile_spec(src).expect("the spec checks");
        let spec = random_spec(&algorithm, &p, &mut Rng::new(seed), &Options::default());
        let lowered = dt_core::compile_spec(&spec).ok().and_then(|program| dt_core::lower::lower_all(&program).ok());
        prop_assume!(lowered.is_some(), "the drawn schedule does not lower");
        let kernels = lowered.expect("lowered");
        for k in kernels {
            prop_assert!(round_trip(&k).is_ok(), "{path}, seed {seed}: {}\n{spec}", round_trip(&k).unwrap_err());
        }
    }

    /// Text that is not what the printer writes (a printed kernel with characters cut out or
    /// replaced) is an error or a kernel, never a panic.
    #[test]
    fn damaged_kernel_text_never_panics(cuts in prop::collection::vec((any::<prop::sample::Index>(), 0usize..4, any::<char>()), 1..6)) {
        let src = std::fs::read_to_string(format!("{}/../dt-kernels/specs/softmax.dt", env!("CARGO_MANIFEST_DIR"))).expect("spec");
        let mut text: Vec<char> = print(&kernels(&src)[0]).chars().collect();
        for (at, len, c) in cuts {
            let i = at.index(text.len());
            let end = (i + len).min(text.len());
            text.splice(i..end, [c]);
        }
        let _ = parse(&text.into_iter().collect::<String>());
    }
}
