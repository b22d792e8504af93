//! Plan tests as text: each file of `tests/plan_passes/` gives a kernel's IR (as `dtc emit
//! --target kir` prints it) and the GPU plan its passes make of it for CUDA, as `dtc emit
//! --target gpu-plan` prints it. The test parses the IR (`dt_core::kir_text`), runs the plan
//! passes (`dt_codegen::plan::print_cuda`, the verifiers after them in tests) and compares the
//! printed plan with the expected one, so a plan pass is tested without a `.dt` spec.
//! `DT_BLESS=1` rewrites the expected plans instead.
//!
//! ```text
//! # any lines of description
//! kernel ...
//! # expect
//! plan ...
//! ```

use dt_codegen::plan::print_cuda;
use dt_core::kir_text::parse;

const EXPECT: &str = "# expect\n";

#[test]
fn every_plan_test_gives_its_expected_plan() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plan_passes");
    let mut files: Vec<_> = std::fs::read_dir(dir).expect("tests/plan_passes").map(|e| e.expect("an entry").path()).collect();
    files.sort();
    let bless = std::env::var_os("DT_BLESS").is_some_and(|v| v != "0" && !v.is_empty());
    let mut failures = Vec::new();
    let tests: Vec<_> = files.iter().filter(|f| f.extension().is_some_and(|e| e == "kir")).collect();
    for f in &tests {
        let text = std::fs::read_to_string(f).expect("a plan test");
        let at = text.find(EXPECT).unwrap_or_else(|| panic!("{}: no `# expect` line", f.display()));
        let (head, expected) = (&text[..at], &text[at + EXPECT.len()..]);
        let input = &head[head.find("kernel ").unwrap_or_else(|| panic!("{}: no kernel IR", f.display()))..];
        let k = parse(input).unwrap_or_else(|e| panic!("{}: the input IR: {e}", f.display()));
        let got = print_cuda(&k).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if bless {
            std::fs::write(f, format!("{head}{EXPECT}{got}")).expect("writes the plan test");
        } else if got != expected {
            failures.push(format!("{}: the plan is\n{got}", f.display()));
        }
    }
    assert!(tests.len() >= 3, "the plan tests are missing");
    assert!(
        failures.is_empty(),
        "{} of {} plan tests differ (DT_BLESS=1 re-blesses them):\n{}",
        failures.len(),
        tests.len(),
        failures.join("\n")
    );
}

/// The plan of a kernel read back from its text is the plan of the kernel lowered from the
/// spec: the tests above test the passes, not the parser.
#[test]
fn a_parsed_kernel_plans_as_the_lowered_one() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../dt-kernels/specs/layernorm.dt")).expect("spec");
    let p = dt_core::compile_spec(&src).expect("checks");
    for k in dt_core::lower::lower_all(&p).expect("lowers") {
        let parsed = parse(&dt_core::kir::print(&k)).expect("parses");
        assert_eq!(print_cuda(&parsed).expect("plans"), print_cuda(&k).expect("plans"), "{}", k.name);
    }
}
