//! `cargo xtask variants`: every library and test spec, reduced to each of its kernels, and
//! schedules near each kernel's own (`dt_core::explore::nearby_spec`), written as `.dt` files.
//! `scripts/compare_compilers.sh` emits them with two `dtc` builds and lists every difference:
//! how a change of the compiler that should print the same code is checked beyond the library's
//! generated sources.

use dt_core::explore::{kernel_spec, nearby_spec, Rng};
use std::path::Path;

/// The folders of specs the variants are made from.
const SPEC_DIRS: [&str; 3] = ["dt-kernels/specs", "dt-codegen/tests/specs", "dt-codegen/tests/cluster"];

/// Writes `<spec>__<kernel>__0.dt` (the kernel's own schedule) and up to `per_kernel` variants
/// `__1.dt`, ... that check, under `out`; returns how many files it wrote.
pub fn run(out: &Path, per_kernel: u64) -> Result<usize, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut written = 0;
    for dir in SPEC_DIRS {
        let mut paths: Vec<_> = std::fs::read_dir(root.join(dir))
            .map_err(|e| format!("{dir}: {e}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "dt"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            // Specs that do not check (the tests' error cases) have no kernels to vary.
            let Ok(flat) = dt_core::blocks::flat_text(&text) else { continue };
            let Ok(p) = dt_core::compile_spec(&flat) else { continue };
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            for k in &p.kernels {
                let name = &p.func(*k).name;
                let Ok(spec) = kernel_spec(&flat, name) else { continue };
                let write = |i: u64, text: &str| -> Result<(), String> {
                    let file = out.join(format!("{stem}__{name}__{i}.dt"));
                    std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))
                };
                write(0, &spec)?;
                written += 1;
                for i in 1..=per_kernel {
                    let mut rng = Rng::new(i * 7919 + written as u64);
                    match nearby_spec(&spec, name, &mut rng) {
                        Ok(v) if dt_core::compile_spec(&v).is_ok() => {
                            write(i, &v)?;
                            written += 1;
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(written)
}
