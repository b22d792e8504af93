//! Finding a compiler executable through the environment.

use std::path::{Path, PathBuf};

use crate::BuildEnv;

/// Where to look for one executable, in order.
#[derive(Debug, Clone)]
pub(crate) struct ToolSearch {
    /// File name without the platform's executable suffix, e.g. `nvcc`.
    pub exe: &'static str,
    /// Variable naming the executable itself, e.g. `NVCC`. A bare name (no directory) is
    /// looked up on `PATH`.
    pub exe_var: &'static str,
    /// Variables naming an installation root whose `bin/` holds the executable.
    pub root_vars: &'static [&'static str],
    /// Fixed installation roots tried after the variables.
    pub fixed_roots: Vec<PathBuf>,
}

impl ToolSearch {
    /// The first executable found: `exe_var`, each of `root_vars`, each of `fixed_roots`, then
    /// `PATH`. Every variable read is recorded in `env`; the search stops at the first hit, so
    /// later variables are neither read nor recorded (they cannot change the result).
    pub fn find(&self, env: &BuildEnv) -> Option<PathBuf> {
        let file_name = format!("{}{}", self.exe, std::env::consts::EXE_SUFFIX);
        if let Some(value) = env.var_os(self.exe_var) {
            let path = PathBuf::from(&value);
            if is_executable(&path) {
                return Some(path);
            }
            if path.components().count() == 1 {
                if let Some(found) = on_path(env, &path.to_string_lossy()) {
                    return Some(found);
                }
            }
        }
        for var in self.root_vars {
            if let Some(root) = env.var_os(var) {
                let path = Path::new(&root).join("bin").join(&file_name);
                if is_executable(&path) {
                    return Some(path);
                }
            }
        }
        for root in &self.fixed_roots {
            let path = root.join("bin").join(&file_name);
            if is_executable(&path) {
                return Some(path);
            }
        }
        on_path(env, &file_name)
    }
}

fn on_path(env: &BuildEnv, file_name: &str) -> Option<PathBuf> {
    let path = env.var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(file_name)).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = path.metadata() else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

#[cfg(all(test, unix))]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Writes an executable shell script `root/bin/name` and returns its path.
    pub(crate) fn fake_tool(root: &Path, name: &str, script: &str) -> PathBuf {
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn non_executable_files_and_directories_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("a/bin");
        std::fs::create_dir_all(bin.join("tool")).unwrap(); // a directory named like the tool
        let plain = dir.path().join("b/bin/tool");
        std::fs::create_dir_all(plain.parent().unwrap()).unwrap();
        std::fs::write(&plain, "not executable").unwrap();
        let good = fake_tool(&dir.path().join("c"), "tool", "exit 0");
        let search = ToolSearch { exe: "tool", exe_var: "TOOL", root_vars: &["ROOT_A", "ROOT_B", "ROOT_C"], fixed_roots: vec![] };
        let env =
            BuildEnv::from_pairs([("ROOT_A", dir.path().join("a")), ("ROOT_B", dir.path().join("b")), ("ROOT_C", dir.path().join("c"))]);
        assert_eq!(search.find(&env), Some(good));
    }
}
