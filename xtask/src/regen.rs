//! `cargo xtask regen`: the generated sources of every library spec, checked in so that each
//! compiler change shows as a diff; `--check` fails when they are stale.

use std::path::{Path, PathBuf};

pub fn workspace() -> PathBuf {
    // A checkout in the current directory comes first: the xtask binary may run outside cargo
    // (e.g. copied to a GPU machine), on specs other than those it was built from.
    if Path::new("dt-kernels/specs").is_dir() {
        return PathBuf::from(".");
    }
    match option_env!("CARGO_MANIFEST_DIR") {
        Some(dir) if Path::new(dir).exists() => Path::new(dir).parent().map(Path::to_path_buf).unwrap_or_default(),
        _ => PathBuf::from("."),
    }
}

/// Every library spec: (name, path), sorted by name.
pub fn library_specs(root: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let dir = root.join("dt-kernels/specs");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "dt") {
            let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            out.push((name, path));
        }
    }
    out.sort();
    Ok(out)
}

pub fn run(check: bool) -> Result<(), String> {
    let root = workspace();
    let out_dir = root.join("dt-kernels/generated");
    let mut expected = Vec::new();
    for (name, path) in library_specs(&root)? {
        let src = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let outputs = dt_codegen::generate::generate(&name, &format!("dt-kernels/specs/{name}.dt"), &src)?;
        for (file, contents) in outputs.files() {
            expected.push((file, contents.to_string()));
        }
    }
    let mut stale = Vec::new();
    for (file, contents) in &expected {
        let path = out_dir.join(file);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(contents.as_str()) {
            stale.push(file.clone());
        }
    }
    // Files no spec produces any more.
    if let Ok(entries) = std::fs::read_dir(&out_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !expected.iter().any(|(f, _)| *f == name) {
                stale.push(name);
            }
        }
    }
    if check {
        if stale.is_empty() {
            return Ok(());
        }
        return Err(format!("generated sources are stale (run `cargo xtask regen`):\n  {}", stale.join("\n  ")));
    }
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    for name in &stale {
        let path = out_dir.join(name);
        match expected.iter().find(|(f, _)| f == name) {
            Some((_, contents)) => std::fs::write(&path, contents).map_err(|e| format!("{}: {e}", path.display()))?,
            None => std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?,
        }
        println!("wrote {}", path.display());
    }
    Ok(())
}
