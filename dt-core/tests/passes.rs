//! Pass tests as text: each file of `tests/passes/` names a kernel-IR pass, gives the IR it
//! takes (as `dtc emit --target kir` prints it) and the IR the pass gives back. The test parses
//! the first, runs the pass alone (`dt_core::lower::run_pass`, the verifier after it) and
//! compares what it prints with the second. `DT_BLESS=1` rewrites the expected IR instead.
//!
//! ```text
//! # pass: hoist
//! # any lines of description
//! kernel ...
//! # expect
//! kernel ...
//! ```

use dt_core::kir::print;
use dt_core::kir_text::parse;

const EXPECT: &str = "# expect\n";

/// The pass, the description and input, and the expected output of a pass test's text.
fn split(text: &str) -> (&str, &str, &str) {
    let pass = text.strip_prefix("# pass: ").and_then(|t| t.lines().next()).expect("a pass test starts with `# pass: NAME`");
    let at = text.find(EXPECT).expect("a pass test has a `# expect` line");
    (pass.trim(), &text[..at], &text[at + EXPECT.len()..])
}

#[test]
fn every_pass_test_gives_its_expected_ir() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/passes");
    let mut files: Vec<_> = std::fs::read_dir(dir).expect("tests/passes").map(|e| e.expect("an entry").path()).collect();
    files.sort();
    let bless = std::env::var_os("DT_BLESS").is_some();
    let mut failures = Vec::new();
    for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "kir")) {
        let text = std::fs::read_to_string(f).expect("a pass test");
        let (pass, head, expected) = split(&text);
        let input = &head[head.find("kernel ").expect("the input IR")..];
        let mut k = parse(input).unwrap_or_else(|e| panic!("{}: the input IR: {e}", f.display()));
        dt_core::lower::run_pass(pass, &mut k).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let got = print(&k);
        if bless {
            std::fs::write(f, format!("{head}{EXPECT}{got}")).expect("writes the pass test");
        } else if got != expected {
            failures.push(format!("{}: pass `{pass}` gave\n{got}", f.display()));
        }
    }
    assert!(files.len() >= 3, "the pass tests are missing");
    assert!(
        failures.is_empty(),
        "{} of {} pass tests differ (DT_BLESS=1 re-blesses them):\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

/// A pass test whose pass is unknown, or whose output differs, fails.
#[test]
fn an_unknown_pass_or_another_output_is_caught() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/passes/dead.kir")).expect("dead.kir");
    let (_, head, expected) = split(&text);
    let mut k = parse(&head[head.find("kernel ").expect("IR")..]).expect("parses");
    assert!(dt_core::lower::run_pass("no_such_pass", &mut k).unwrap_err().0.contains("no kernel-IR pass"));
    dt_core::lower::run_pass("hoist", &mut k).expect("runs");
    assert_ne!(print(&k), expected, "another pass gives other IR");
}
