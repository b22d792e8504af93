//! Artifacts named by a content hash of their inputs, so that nothing rebuilds when nothing
//! changed.
//!
//! The key is what the caller passes: typically the source and every header it includes, the
//! flags, the architectures and [`crate::command::version`] of the compiler. Old artifacts of
//! the same name stay in the directory: OUT_DIR, or the one [`shared_dir`] names for artifacts
//! that every profile and feature set of a build compiles alike (both are under the target
//! directory, which `cargo clean` removes).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::CompileError;

/// 128 bits of SHA-256 over `inputs`, as 32 hex digits. Each input is length-prefixed, so
/// `["ab", "c"]` and `["a", "bc"]` differ.
pub fn content_hash(inputs: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for input in inputs {
        hasher.update((input.len() as u64).to_le_bytes());
        hasher.update(input);
    }
    hasher.finalize()[..16].iter().fold(String::with_capacity(32), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A directory for artifacts that do not depend on the Cargo profile or features (GPU code
/// objects, keyed by source, compiler and flags), shared by every build script run of the
/// target directory, so that `cargo build`, `cargo test` and `cargo build --release` compile a
/// kernel once between them: `DT_BUILD_CACHE_DIR` if set, else `dt-build-cache` in the target
/// directory that holds `out_dir` (`<target>/<profile>/build/<package>-<hash>/out`), else
/// `out_dir/cache` where `out_dir` is laid out otherwise.
pub fn shared_dir(env: &crate::BuildEnv, out_dir: &Path) -> PathBuf {
    if let Some(dir) = env.var_os("DT_BUILD_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let build = out_dir.parent().and_then(Path::parent);
    match build.filter(|b| b.file_name().is_some_and(|n| n == "build")).and_then(Path::parent).and_then(Path::parent) {
        Some(target) => target.join("dt-build-cache"),
        None => out_dir.join("cache"),
    }
}

/// The artifact `name` (a file name such as `matmul.fatbin`) for `key_inputs`, in `out_dir`,
/// as `matmul-<hash>.fatbin`. If that file exists it is returned as is; else `produce` is
/// called with a temporary path in `out_dir` to write it to, and the file is renamed into
/// place only when `produce` succeeded, so a failed or interrupted compile never leaves an
/// artifact that a later build would take for finished.
pub fn cached(
    out_dir: &Path,
    name: &str,
    key_inputs: &[&[u8]],
    produce: impl FnOnce(&Path) -> Result<(), CompileError>,
) -> Result<PathBuf, CompileError> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        return Err(CompileError::InvalidInput(format!("cache artifact name {name:?} must be a plain file name")));
    }
    let hash = content_hash(key_inputs);
    let (stem, ext) = match name.rsplit_once('.') {
        Some((stem, ext)) => (stem, format!(".{ext}")),
        None => (name, String::new()),
    };
    let path = out_dir.join(format!("{stem}-{hash}{ext}"));
    if path.is_file() {
        return Ok(path);
    }
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| CompileError::Io { path, source }
    };
    std::fs::create_dir_all(out_dir).map_err(io_err(out_dir))?;
    let tmp = out_dir.join(format!("{stem}-{hash}.partial-{}{ext}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    if let Err(e) = produce(&tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if !tmp.is_file() {
        return Err(CompileError::MissingOutput { command: format!("producing {name}"), path: tmp });
    }
    std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn shared_dir_is_the_target_directorys_unless_set() {
        let env = crate::BuildEnv::from_fn(|_| None);
        let out = Path::new("/w/target/debug/build/dt-kernels-0123/out");
        assert_eq!(shared_dir(&env, out), Path::new("/w/target/dt-build-cache"));
        let out = Path::new("/w/target/x86_64-unknown-linux-gnu/release/build/dt-kernels-0123/out");
        assert_eq!(shared_dir(&env, out), Path::new("/w/target/x86_64-unknown-linux-gnu/dt-build-cache"));
        assert_eq!(shared_dir(&env, Path::new("/elsewhere/out")), Path::new("/elsewhere/out/cache"));
        let env = crate::BuildEnv::from_fn(|n| (n == "DT_BUILD_CACHE_DIR").then(|| "/c".into()));
        assert_eq!(shared_dir(&env, out), Path::new("/c"));
        assert_eq!(env.vars_read(), ["DT_BUILD_CACHE_DIR"]);
    }

    #[test]
    fn hash_is_stable_and_length_prefixed() {
        assert_eq!(content_hash(&[b"ab", b"c"]).len(), 32);
        assert_ne!(content_hash(&[b"ab", b"c"]), content_hash(&[b"a", b"bc"]));
        assert_ne!(content_hash(&[b"ab"]), content_hash(&[b"ab", b""]));
        assert_eq!(content_hash(&[b"x"]), content_hash(&[b"x"]));
        // Fixed, so artifacts keep their names across builds of this crate.
        assert_eq!(content_hash(&[]), "e3b0c44298fc1c149afbf4c8996fb924");
    }

    #[test]
    fn hit_miss_and_failure() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let calls = Cell::new(0);
        let produce = |p: &Path| {
            calls.set(calls.get() + 1);
            std::fs::write(p, b"artifact").map_err(|source| CompileError::Io { path: p.into(), source })
        };

        let a = cached(&out, "k.fatbin", &[b"src", b"sm_80"], produce).unwrap();
        assert_eq!(calls.get(), 1);
        assert_eq!(a.parent(), Some(out.as_path()));
        let file = a.file_name().unwrap().to_str().unwrap();
        assert!(file.starts_with("k-") && file.ends_with(".fatbin") && file.len() == 2 + 32 + 7, "{file}");
        assert_eq!(std::fs::read(&a).unwrap(), b"artifact");

        // Same inputs: hit, no compile.
        assert_eq!(cached(&out, "k.fatbin", &[b"src", b"sm_80"], produce).unwrap(), a);
        assert_eq!(calls.get(), 1);

        // Any changed input: miss.
        let b = cached(&out, "k.fatbin", &[b"src", b"sm_90a"], produce).unwrap();
        assert_ne!(a, b);
        assert_eq!(calls.get(), 2);

        // A failed produce leaves nothing behind and is retried next time.
        let err = cached(&out, "k.fatbin", &[b"new"], |p| {
            std::fs::write(p, b"half").unwrap();
            Err(CompileError::InvalidInput("boom".into()))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "boom");
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 2);
        cached(&out, "k.fatbin", &[b"new"], produce).unwrap();
        assert_eq!(calls.get(), 3);

        // A produce that writes nothing is an error.
        let err = cached(&out, "none", &[], |_| Ok(())).unwrap_err();
        assert!(matches!(err, CompileError::MissingOutput { .. }));

        assert!(cached(&out, "../k.fatbin", &[], produce).is_err());
    }
}
