//! The environment as a build script reads it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;

type Lookup = dyn Fn(&str) -> Option<OsString>;

/// Looks up environment variables and remembers every name it was asked for, so that a build
/// script can declare exactly the variables its result depends on with
/// `cargo:rerun-if-env-changed`.
///
/// A variable set to the empty string counts as unset (`CUDA_HOME=` does not mean `/bin/nvcc`).
///
/// The lookup is a closure, so tests can pass a fixed map instead of the process environment.
pub struct BuildEnv {
    lookup: Box<Lookup>,
    read: RefCell<Vec<String>>,
}

impl BuildEnv {
    /// Reads the process environment.
    pub fn from_process() -> Self {
        Self::from_fn(|name| std::env::var_os(name))
    }

    /// Reads variables through `lookup`.
    pub fn from_fn(lookup: impl Fn(&str) -> Option<OsString> + 'static) -> Self {
        BuildEnv { lookup: Box::new(lookup), read: RefCell::new(Vec::new()) }
    }

    /// Reads variables from a fixed list of pairs; every other variable is unset.
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<OsString>,
    {
        let map: HashMap<String, OsString> = pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        Self::from_fn(move |name| map.get(name).cloned())
    }

    /// The value of `name`, or `None` when it is unset or empty. Records `name`.
    pub fn var_os(&self, name: &str) -> Option<OsString> {
        {
            let mut read = self.read.borrow_mut();
            if !read.iter().any(|n| n == name) {
                read.push(name.to_owned());
            }
        }
        (self.lookup)(name).filter(|v| !v.is_empty())
    }

    /// Like [`BuildEnv::var_os`], for a value that must be UTF-8; a value that is not reads as
    /// unset.
    pub fn var(&self, name: &str) -> Option<String> {
        self.var_os(name).and_then(|v| v.into_string().ok())
    }

    /// The names read so far, in the order of their first read.
    pub fn vars_read(&self) -> Vec<String> {
        self.read.borrow().clone()
    }

    /// One `cargo:rerun-if-env-changed=NAME` line (with its newline) per variable read so far.
    pub fn rerun_if_env_changed_lines(&self) -> String {
        self.read.borrow().iter().map(|name| format!("cargo:rerun-if-env-changed={name}\n")).collect()
    }

    /// Prints [`BuildEnv::rerun_if_env_changed_lines`] to stdout, where Cargo reads them.
    /// Call it after the last lookup.
    pub fn emit_rerun_if_env_changed(&self) {
        print!("{}", self.rerun_if_env_changed_lines());
    }
}

impl Default for BuildEnv {
    fn default() -> Self {
        Self::from_process()
    }
}

impl fmt::Debug for BuildEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuildEnv").field("vars_read", &self.read.borrow()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_each_name_once_in_order_and_treats_empty_as_unset() {
        let env = BuildEnv::from_pairs([("A", "1"), ("EMPTY", "")]);
        assert_eq!(env.var("B"), None);
        assert_eq!(env.var("A").as_deref(), Some("1"));
        assert_eq!(env.var("EMPTY"), None);
        assert_eq!(env.var("B"), None);
        assert_eq!(env.vars_read(), ["B", "A", "EMPTY"]);
        assert_eq!(
            env.rerun_if_env_changed_lines(),
            "cargo:rerun-if-env-changed=B\n\
             cargo:rerun-if-env-changed=A\n\
             cargo:rerun-if-env-changed=EMPTY\n"
        );
    }
}
