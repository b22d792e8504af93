//! Errors.

use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;

/// A compile (or a step around it) that failed. Shown in a build log, it says what to run again
/// by hand: every variant that ran a program carries its exact command line, shell-quoted.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The program could not be started (not found, not executable, ...).
    #[error("could not run {command}\n  {source}")]
    Spawn {
        /// The command line, shell-quoted.
        command: String,
        /// Why it could not be started.
        #[source]
        source: io::Error,
    },
    /// The program ran and failed.
    #[error("{}", failed_message(command, status, stdout, stderr))]
    Failed {
        /// The command line, shell-quoted.
        command: String,
        /// How it ended, e.g. `exit status: 1`.
        status: String,
        /// What it wrote to stdout.
        stdout: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// The program succeeded but did not write the file it was asked for.
    #[error("{command}\n  succeeded but did not write {}", path.display())]
    MissingOutput {
        /// The command line, shell-quoted, or a description of the step.
        command: String,
        /// The file that should exist.
        path: PathBuf,
    },
    /// A file system operation on `path` failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The arguments cannot make a valid compile (e.g. no target architecture).
    #[error("{0}")]
    InvalidInput(String),
    /// The `cc` crate failed; `cc` has already printed the command and the compiler's output.
    #[error(transparent)]
    Cc(#[from] cc::Error),
}

fn failed_message(command: &str, status: &str, stdout: &str, stderr: &str) -> String {
    let mut msg = format!("command failed ({status}):\n  {command}\n");
    for (name, text) in [("stdout", stdout), ("stderr", stderr)] {
        let text = text.trim_end();
        if !text.is_empty() {
            let _ = write!(msg, "--- {name} ---\n{text}\n");
        }
    }
    if stdout.trim().is_empty() && stderr.trim().is_empty() {
        msg.push_str("(no output)\n");
    }
    msg
}

/// A target architecture that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid architecture {value:?}{}: expected {expected}", var.as_ref().map(|v| format!(" in {v}")).unwrap_or_default())]
pub struct ArchParseError {
    /// The entry as written.
    pub value: String,
    /// The environment variable it came from, if any.
    pub var: Option<String>,
    /// What a valid entry looks like.
    pub expected: &'static str,
}

impl ArchParseError {
    pub(crate) fn in_var(mut self, var: &str) -> Self {
        self.var = Some(var.to_owned());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_display_shows_command_and_stderr() {
        let e = CompileError::Failed {
            command: "nvcc --cubin -o 'out dir/k.cubin' k.cu".into(),
            status: "exit status: 2".into(),
            stdout: String::new(),
            stderr: "k.cu(3): error: identifier \"x\" is undefined\n".into(),
        };
        assert_eq!(
            e.to_string(),
            "command failed (exit status: 2):\n  nvcc --cubin -o 'out dir/k.cubin' k.cu\n\
             --- stderr ---\nk.cu(3): error: identifier \"x\" is undefined\n"
        );
    }

    #[test]
    fn failed_display_shows_stdout_and_notes_silence() {
        let e = CompileError::Failed {
            command: "cl k.c".into(),
            status: "exit status: 1".into(),
            stdout: "k.c: error C2065".into(),
            stderr: String::new(),
        };
        assert!(e.to_string().contains("--- stdout ---\nk.c: error C2065\n"));
        let silent = CompileError::Failed { command: "x".into(), status: "signal: 9".into(), stdout: String::new(), stderr: " \n".into() };
        assert_eq!(silent.to_string(), "command failed (signal: 9):\n  x\n(no output)\n");
    }

    #[test]
    fn spawn_and_arch_display() {
        let e = CompileError::Spawn {
            command: "/no/nvcc --version".into(),
            source: io::Error::new(io::ErrorKind::NotFound, "No such file or directory"),
        };
        assert_eq!(e.to_string(), "could not run /no/nvcc --version\n  No such file or directory");
        let a = ArchParseError { value: "sm_8x".into(), var: None, expected: "e.g. 80" };
        assert_eq!(a.to_string(), "invalid architecture \"sm_8x\": expected e.g. 80");
        assert_eq!(a.in_var("CUDA_COMPUTE_CAPS").to_string(), "invalid architecture \"sm_8x\" in CUDA_COMPUTE_CAPS: expected e.g. 80");
    }
}
