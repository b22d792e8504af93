//! Golden diagnostics: every `tests/err/<name>.dt` is an invalid spec whose rendered errors must
//! match `tests/err/<name>.stderr` exactly.
//!
//! Run with `DT_BLESS=1` to (re)write the `.stderr` files from the current output; review the
//! diff before committing it.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn err_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("err")
}

/// Compiles one spec and renders its diagnostics as `dtc` would print them.
fn render(name: &str, src: &str) -> Result<String, String> {
    match dt_core::compile_spec(src) {
        Ok(_) => Err("compiled without errors, but every spec in tests/err must fail".into()),
        Err(diags) if diags.is_empty() => Err("failed with an empty list of diagnostics".into()),
        Err(diags) => Ok(dt_core::SourceFile::new(format!("tests/err/{name}.dt"), src).render_all(&diags)),
    }
}

/// A line diff: lines only in `expected` as `-`, lines only in `actual` as `+`, shared lines with
/// two spaces (longest common subsequence, which is plenty for files of a few dozen lines).
fn diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            let _ = writeln!(out, "  {}", a[i]);
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            let _ = writeln!(out, "+ {}", b[j]);
            j += 1;
        } else {
            let _ = writeln!(out, "- {}", a[i]);
            i += 1;
        }
    }
    out
}

#[test]
fn golden_diagnostics_match_stderr_files() {
    let bless = std::env::var_os("DT_BLESS").is_some_and(|v| v != "0" && !v.is_empty());
    let mut specs: Vec<PathBuf> = fs::read_dir(err_dir())
        .expect("tests/err exists")
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "dt"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 30, "expected at least 30 specs in tests/err, found {}", specs.len());

    let mut failures = Vec::new();
    for path in &specs {
        let name = path.file_stem().and_then(|s| s.to_str()).expect("UTF-8 file name");
        let src = fs::read_to_string(path).expect("readable spec");
        let actual = match render(name, &src) {
            Ok(text) => text,
            Err(why) => {
                failures.push(format!("tests/err/{name}.dt: {why}"));
                continue;
            }
        };
        let stderr = path.with_extension("stderr");
        if bless {
            fs::write(&stderr, &actual).expect("writable .stderr file");
            continue;
        }
        match fs::read_to_string(&stderr) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "tests/err/{name}.dt: diagnostics differ from tests/err/{name}.stderr (- expected, + actual):\n{}",
                diff(&expected, &actual)
            )),
            Err(_) => failures.push(format!("tests/err/{name}.dt: missing tests/err/{name}.stderr; its output is:\n{actual}")),
        }
    }
    // Every `.stderr` belongs to a spec.
    for entry in fs::read_dir(err_dir()).expect("tests/err exists") {
        let path = entry.expect("readable directory entry").path();
        if path.extension().is_some_and(|x| x == "stderr") && !path.with_extension("dt").exists() {
            failures.push(format!("{}: no matching .dt file", path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden diagnostics failed (run with DT_BLESS=1 to accept the new output):\n\n{}",
        failures.len(),
        specs.len(),
        failures.join("\n")
    );
}
