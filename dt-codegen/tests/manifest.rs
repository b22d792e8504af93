//! The manifest the compiler publishes per spec: it reads back as written, it carries each
//! kernel's signature and launch (threads, cluster), and a malformed one is an error, not a panic.

use dt_codegen::generate::generate;
use dt_core::manifest::Manifest;
use std::path::Path;

/// `(name, label, text)` of every spec of the library and of the tests.
fn every_spec() -> Vec<(String, String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for dir in ["dt-kernels/specs", "dt-codegen/tests/specs", "dt-codegen/tests/cluster"] {
        let mut paths: Vec<_> = std::fs::read_dir(root.join(dir)).expect("spec folder").map(|e| e.expect("entry").path()).collect();
        paths.sort();
        for path in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == "dt")) {
            let name = path.file_stem().expect("stem").to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).expect("spec reads");
            out.push((name.clone(), format!("{dir}/{name}.dt"), text));
        }
    }
    out
}

#[test]
fn manifest_reads_back_as_written() {
    for (name, label, text) in every_spec() {
        let Ok(out) = generate(&name, &label, &text) else { continue };
        let read = Manifest::from_json(&out.manifest_json).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(read, out.manifest, "{label}");
        let signatures: Vec<_> = out.kernels.iter().map(|k| &k.signature).collect();
        assert_eq!(read.kernels.iter().collect::<Vec<_>>(), signatures, "{label}: one signature per kernel, in order");
        for k in &out.kernels {
            for dtype in &k.dtypes {
                let symbol = dt_codegen::emit::symbol(k, *dtype);
                let launch = read.cuda_launch(&symbol).unwrap_or_else(|| panic!("{label}: no launch for {symbol}"));
                assert_eq!(launch.threads % 32, 0, "{label}: {symbol} launches whole warps");
                // The launcher opts a kernel into clusters above the portable size by this row.
                assert_eq!(launch.cluster, k.grid.cluster.or(k.grid.multicast).map_or(1, |(_, n)| n), "{label}: cluster of {symbol}");
                assert_eq!(read.hip_launch(&symbol).is_some(), !k.cuda_only(), "{label}: HIP launch of {symbol}");
            }
        }
    }
}

#[test]
fn a_malformed_manifest_is_an_error() {
    for text in ["", "{", "{\"spec\": 1}", "[]", "{\"spec\": \"x\", \"kernels\": [{}], \"cuda\": [], \"hip\": [], \"cpu\": []}"] {
        let e = Manifest::from_json(text).expect_err(text);
        assert!(e.starts_with("the manifest does not read"), "{text}: {e}");
    }
}
