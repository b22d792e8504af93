//! The CPU fallback: generated C compiled into a static library with the `cc` crate.
//!
//! OpenMP is left out on purpose. `-fopenmp` needs a runtime library whose name depends on the
//! compiler (libgomp for GCC, libomp for Clang, vcomp for MSVC, none by default on macOS), and
//! linking the wrong one fails only at the final link, far from its cause. The fallback exists
//! for correctness (CI and machines without a GPU), so it runs single-threaded; OpenMP pragmas
//! in the generated C are ignored, and `-Wunknown-pragmas` is turned off so they do not warn.

use std::path::Path;

use crate::CompileError;

/// A `cc::Build` set up for generated C: `-O2` in every profile, C11, `-Wall -Wextra`
/// (`/W4`-like on MSVC), no warnings about unknown pragmas. Add files and call
/// `compile`, or adjust it first.
pub fn c_build() -> cc::Build {
    let mut build = cc::Build::new();
    build.opt_level(2).std("c11").warnings(true).extra_warnings(true).flag_if_supported("-Wno-unknown-pragmas");
    build
}

/// Compiles `sources` (with `include_dirs`) into the static library `lib_name` in OUT_DIR and
/// prints the `cargo:rustc-link-*` lines that link it into the crate. For build scripts only:
/// it reads Cargo's `TARGET`, `HOST` and `OUT_DIR`.
pub fn compile_static_lib(lib_name: &str, sources: &[&Path], include_dirs: &[&Path]) -> Result<(), CompileError> {
    let mut build = c_build();
    build.files(sources).includes(include_dirs);
    build.try_compile(lib_name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host triple, as rustc reports it (tests do not get Cargo's `TARGET`).
    fn host_triple() -> String {
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let out = std::process::Command::new(rustc).arg("-vV").output().unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
            .expect("rustc -vV prints the host")
    }

    #[test]
    fn builds_a_static_library_and_reports_errors() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("k.c");
        std::fs::write(
            &src,
            "#include <stddef.h>\n\
             void dt_add1(float *x, size_t n) {\n\
             #pragma omp parallel for\n\
             for (size_t i = 0; i < n; i++) x[i] += 1.0f;\n}\n",
        )
        .unwrap();
        let host = host_triple();
        let mut build = c_build();
        build
            .file(&src)
            .target(&host)
            .host(&host)
            .out_dir(dir.path())
            .cargo_metadata(false)
            .cargo_warnings(false)
            .warnings_into_errors(true);
        build.try_compile("dt_test").unwrap_or_else(|e| panic!("{e}"));
        let lib = if cfg!(target_env = "msvc") { "dt_test.lib" } else { "libdt_test.a" };
        assert!(dir.path().join(lib).is_file());

        std::fs::write(&src, "void broken( {\n").unwrap();
        let err = CompileError::from(build.try_compile("dt_test").unwrap_err());
        assert!(!err.to_string().is_empty());
    }
}
