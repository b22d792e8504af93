//! The front end never panics, never overflows its stack and never fails silently, whatever the
//! input: random bytes, random sequences of DT tokens, mutations of the library specs, and
//! pathologically deep or long expressions. (The `cargo fuzz` target in `dt-core/fuzz` runs the
//! same check without a case limit.)

use dt_core::lexer::{lex, Tok};
use dt_core::{compile_spec, SourceFile};
use proptest::prelude::*;
use std::path::Path;

/// Compiles `src` and renders its diagnostics, checking what holds for every input: a failure
/// carries at least one diagnostic, and each renders as `name:line:col: error: ...`.
fn front_end(src: &str) {
    if let Err(diags) = compile_spec(src) {
        assert!(!diags.is_empty(), "compile_spec failed without a diagnostic on {src:?}");
        let text = SourceFile::new("fuzz.dt", src).render_all(&diags);
        let headers = text.lines().filter(|l| l.starts_with("fuzz.dt:")).count();
        assert_eq!(headers, diags.len(), "one header per diagnostic in:\n{text}");
        for d in &diags {
            assert!(!d.message.is_empty(), "a diagnostic without a message on {src:?}");
        }
    }
}

/// The library specs, as (file name, text).
fn library_specs() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dt-kernels/specs");
    let mut specs: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "dt"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).expect("readable spec")))
        .collect();
    specs.sort();
    assert!(!specs.is_empty(), "no specs in {}", dir.display());
    specs
}

/// The source text of each token of a spec, in order (comments and layout dropped).
fn tokens_of(src: &str) -> Vec<String> {
    let mut diags = Vec::new();
    lex(src, &mut diags)
        .into_iter()
        .filter(|t| t.tok != Tok::Eof)
        .map(|t| src[t.span.start as usize..t.span.end as usize].to_string())
        .collect()
}

/// Keywords, names of every kind, builtins, primitives, numbers good and bad, punctuation, and
/// characters that are not DT.
const VOCABULARY: &[&str] = &[
    "Func",
    "In",
    "SIn",
    "Var",
    "RVar",
    "func",
    "f",
    "g",
    "mm",
    "out",
    "A",
    "B",
    "alpha",
    "x",
    "y",
    "k",
    "x1",
    "z",
    "exp",
    "exp2",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "abs",
    "max",
    "min",
    "where",
    "len",
    "rsum",
    "rmax",
    "rmin",
    "rdot",
    "reshape",
    "inf",
    "block",
    "tensorize",
    "map",
    "fuse_at",
    "num_warps",
    "num_stages",
    "dtypes",
    "bound",
    "specialize",
    "cluster",
    "max_registers",
    "fast_math",
    "warp_specialize",
    "wgmma",
    "persistent",
    "requires",
    "aligned",
    "cuda",
    "sm_90",
    "compile",
    "schedule",
    "{",
    "}",
    "compile_to_kernel",
    "f16",
    "bf16",
    "f32",
    "f64",
    "0",
    "1",
    "2",
    "3",
    "8",
    "32",
    "64",
    "128",
    "0.5",
    "1e-5",
    "1e",
    "1.2.3",
    "99999999999999999999",
    "[",
    "]",
    "(",
    ")",
    ",",
    ";",
    ":",
    ".",
    "=",
    "+",
    "-",
    "*",
    "/",
    "<",
    "<=",
    ">",
    ">=",
    "==",
    "!=",
    "!",
    "#",
    "$",
    "@",
    "\u{e9}",
    "\n",
    "\t",
];

fn token_sequence() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(VOCABULARY), 0..96).prop_map(|toks| toks.join(" "))
}

#[derive(Clone, Debug)]
enum Mutation {
    Delete(usize),
    Duplicate(usize),
    Swap(usize, usize),
    Replace(usize, &'static str),
    Insert(usize, &'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Duplicate),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        (any::<usize>(), prop::sample::select(VOCABULARY)).prop_map(|(a, t)| Mutation::Replace(a, t)),
        (any::<usize>(), prop::sample::select(VOCABULARY)).prop_map(|(a, t)| Mutation::Insert(a, t)),
    ]
}

fn mutate(mut toks: Vec<String>, mutations: &[Mutation]) -> String {
    for m in mutations {
        if toks.is_empty() {
            break;
        }
        let n = toks.len();
        match *m {
            Mutation::Delete(i) => {
                toks.remove(i % n);
            }
            Mutation::Duplicate(i) => {
                let t = toks[i % n].clone();
                toks.insert(i % n, t);
            }
            Mutation::Swap(i, j) => toks.swap(i % n, j % n),
            Mutation::Replace(i, t) => toks[i % n] = t.to_string(),
            Mutation::Insert(i, t) => toks.insert(i % (n + 1), t.to_string()),
        }
    }
    // A newline after each `;` keeps the spec's layout, which the parser's recovery looks at.
    toks.iter().map(|t| if t == ";" { ";\n".to_string() } else { format!("{t} ") }).collect()
}

/// 1024 cases each by default; `PROPTEST_CASES=1000000` for a longer run.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(1024);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn front_end_never_panics_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        front_end(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn front_end_never_panics_on_random_text(src in "\\PC{0,200}") {
        front_end(&src);
    }

    #[test]
    fn front_end_never_panics_on_random_token_sequences(src in token_sequence()) {
        front_end(&src);
    }

    #[test]
    fn front_end_never_panics_on_mutated_library_specs(
        which in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let specs = library_specs();
        let (_, src) = &specs[which.index(specs.len())];
        front_end(&mutate(tokens_of(src), &mutations));
    }

    #[test]
    fn front_end_never_panics_on_truncated_library_specs(which in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>()) {
        let specs = library_specs();
        let (_, src) = &specs[which.index(specs.len())];
        let mut end = cut.index(src.len() + 1);
        while !src.is_char_boundary(end) {
            end -= 1;
        }
        front_end(&src[..end]);
    }
}

/// The mutation harness starts from valid input: the library specs, re-laid out from their
/// tokens, compile.
#[test]
fn library_specs_compile_from_their_tokens() {
    for (name, src) in library_specs() {
        let relaid = mutate(tokens_of(&src), &[]);
        if let Err(diags) = compile_spec(&relaid) {
            panic!("{name}:\n{}", SourceFile::new(name.clone(), relaid).render_all(&diags));
        }
    }
}

/// Wraps `inner` as the body of an otherwise valid kernel.
fn kernel_with_body(body: &str) -> String {
    format!("Func f;\nIn A;\nVar x;\nf[x] = {body};\nf.compile();\n")
}

/// Whether compiling `src` fails with an error that mentions `needle`.
fn fails_with(src: &str, needle: &str) -> bool {
    front_end(src);
    match compile_spec(src) {
        Ok(_) => false,
        Err(diags) => diags.iter().any(|d| d.message.contains(needle)),
    }
}

#[test]
fn front_end_rejects_deep_nesting_without_overflow() {
    let n = 10_000;
    let deep = [
        kernel_with_body(&format!("{}A[x]{}", "(".repeat(n), ")".repeat(n))),
        kernel_with_body(&format!("{}A[x]", "-".repeat(n))),
        kernel_with_body(&format!("{}A[x]{}", "exp(".repeat(n), ")".repeat(n))),
        kernel_with_body(&format!("{}x{}", "A[".repeat(n), "]".repeat(n))),
        kernel_with_body(&vec!["A[x]"; n].join(" + ")),
        kernel_with_body(&vec!["A[x]"; n].join(" * ")),
        kernel_with_body(&vec!["A[x]"; n].join(" - 2 / ")),
    ];
    for src in &deep {
        assert!(fails_with(src, "nested too deeply"), "not rejected as too deep: {}...", &src[..80]);
    }
    // Unclosed, and nothing else in the file.
    front_end(&"(".repeat(n));
    front_end(&"[".repeat(n));
    front_end(&format!("f[x] = {}", "(".repeat(n)));
    front_end(&format!("f[x] = {}", "rsum(".repeat(n)));
}

#[test]
fn front_end_accepts_moderate_nesting() {
    let n = 50;
    let ok = [
        kernel_with_body(&format!("{}A[x]{}", "(".repeat(n), ")".repeat(n))),
        kernel_with_body(&format!("{}A[x]{}", "exp(".repeat(n), ")".repeat(n))),
        kernel_with_body(&vec!["A[x]"; n].join(" + ")),
    ];
    for src in &ok {
        if let Err(diags) = compile_spec(src) {
            panic!("{}", SourceFile::new("nested.dt", src.as_str()).render_all(&diags));
        }
    }
}

#[test]
fn front_end_survives_long_and_many_statements() {
    // Many Funcs in a chain, each reading the previous one.
    let n = 2_000;
    let mut src = String::from("In A;\nVar x;\n");
    src += &(0..n).map(|i| format!("Func f{i};\n")).collect::<String>();
    src += "f0[x] = A[x];\n";
    src += &(1..n).map(|i| format!("f{i}[x] = f{}[x] + 1;\n", i - 1)).collect::<String>();
    src += &format!("f{}.compile();\n", n - 1);
    front_end(&src);
    // A long cycle.
    let mut cyc = String::from("In A;\nVar x;\n");
    cyc += &(0..n).map(|i| format!("Func c{i};\nc{i}[x] = c{}[x];\n", (i + 1) % n)).collect::<String>();
    cyc += "c0.compile();\n";
    assert!(fails_with(&cyc, "depends on itself"));
    // Thousands of errors.
    front_end(&"f[x] = $;\n".repeat(n));
    front_end(&";".repeat(n));
}
