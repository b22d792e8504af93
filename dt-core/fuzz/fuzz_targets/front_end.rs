//! Any input, as UTF-8 (lossily): the front end returns, with at least one diagnostic when it
//! fails, and the diagnostics render.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    if let Err(diags) = dt_core::compile_spec(&src) {
        assert!(!diags.is_empty(), "compile_spec failed without a diagnostic");
        let text = dt_core::SourceFile::new("fuzz.dt", src.as_ref()).render_all(&diags);
        assert!(text.starts_with("fuzz.dt:"));
    }
});
