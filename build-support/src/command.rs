//! Running compilers: their version, shell quoting of command lines, error capture.

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use crate::CompileError;

/// The output of `program --version` (stdout, then stderr), to be part of a cache key so that
/// a new compiler rebuilds everything.
pub fn version(program: &Path) -> Result<String, CompileError> {
    let mut cmd = Command::new(program);
    cmd.arg("--version");
    let out = output(&mut cmd)?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(text)
}

/// `arg` quoted for a POSIX shell: unchanged when it has only safe characters, else in single
/// quotes. A path that is not UTF-8 is shown lossily.
pub fn quote(arg: &OsStr) -> String {
    let s = arg.to_string_lossy();
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-+=/.,:@%^".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The command line of `cmd` as one could paste it into a shell: variables it sets, the
/// program, then the arguments, each quoted with [`quote`].
pub fn command_line(cmd: &Command) -> String {
    let envs = cmd.get_envs().filter_map(|(k, v)| v.map(|v| format!("{}={}", k.to_string_lossy(), quote(v))));
    let words = std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(quote);
    envs.chain(words).collect::<Vec<_>>().join(" ")
}

/// Runs `cmd` to completion, capturing its output; a non-zero exit is a
/// [`CompileError::Failed`]. On success, what the program wrote to stderr (warnings) is passed
/// on to our stderr, which Cargo keeps in the build script's log.
pub(crate) fn run(cmd: &mut Command) -> Result<(), CompileError> {
    let out = output(cmd)?;
    if !out.stderr.is_empty() {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{}", command_line(cmd));
        let _ = err.write_all(&out.stderr);
    }
    Ok(())
}

/// Creates the directory `out` goes into.
pub(crate) fn create_parent(out: &Path) -> Result<(), CompileError> {
    match out.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            std::fs::create_dir_all(dir).map_err(|source| CompileError::Io { path: dir.to_owned(), source })
        }
        _ => Ok(()),
    }
}

fn output(cmd: &mut Command) -> Result<std::process::Output, CompileError> {
    let out = cmd.output().map_err(|source| CompileError::Spawn { command: command_line(cmd), source })?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(CompileError::Failed {
            command: command_line(cmd),
            status: out.status.to_string(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_what_needs_it() {
        assert_eq!(quote(OsStr::new("-gencode=arch=compute_90a,code=sm_90a")), "-gencode=arch=compute_90a,code=sm_90a");
        assert_eq!(quote(OsStr::new("/a b/k.cu")), "'/a b/k.cu'");
        assert_eq!(quote(OsStr::new("it's")), r"'it'\''s'");
        assert_eq!(quote(OsStr::new("")), "''");
        assert_eq!(quote(OsStr::new("$HOME")), "'$HOME'");
    }

    #[test]
    fn command_line_has_env_program_and_args() {
        let mut cmd = Command::new("/usr/bin/nvcc");
        cmd.env("A", "x y").args(["-O3", "-o", "out dir/k.cubin"]);
        assert_eq!(command_line(&cmd), "A='x y' /usr/bin/nvcc -O3 -o 'out dir/k.cubin'");
    }

    #[test]
    fn spawn_error_names_the_command() {
        let mut cmd = Command::new("/nonexistent/dt-build-support-test/nvcc");
        cmd.arg("--version");
        let err = run(&mut cmd).unwrap_err();
        assert!(matches!(err, CompileError::Spawn { .. }));
        assert!(err.to_string().starts_with("could not run /nonexistent/dt-build-support-test/nvcc --version\n"));
    }

    #[cfg(unix)]
    #[test]
    fn failure_carries_status_and_stderr() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 'k.cu(1): error: boom' >&2; exit 3"]);
        let err = run(&mut cmd).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("command failed (exit status: 3):\n  sh -c "), "{msg}");
        assert!(msg.ends_with("--- stderr ---\nk.cu(1): error: boom\n"), "{msg}");
    }
}
