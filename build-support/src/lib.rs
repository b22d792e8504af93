//! What a `build.rs` needs to compile DT kernels.
//!
//! - [`env`](mod@env): [`BuildEnv`], the environment as a build script reads it; it remembers every
//!   variable it was asked for and prints the `cargo:rerun-if-env-changed` lines for them.
//! - [`cuda`]: find `nvcc`, read the target architectures, compile fatbins, cubins and PTX.
//! - [`hip`]: find `hipcc`, read the target architectures, compile code objects, probe which
//!   architectures the installed compiler supports.
//! - [`cpu`]: compile the CPU C fallback into a static library with the `cc` crate.
//! - [`cache`]: name artifacts by a content hash of their inputs and skip unchanged compiles.
//! - [`embed`]: write the Rust items that embed the artifacts into the crate.
//! - [`command`]: the compiler's version (for cache keys) and shell quoting.
//!
//! Every failed compile is a [`CompileError`] whose `Display` shows the exact command line and
//! the compiler's output.
//!
//! # A build script
//!
//! ```no_run
//! use build_support::{cache, cuda, embed::EmbedModule, BuildEnv};
//! use std::path::{Path, PathBuf};
//!
//! let env = BuildEnv::from_process();
//! let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
//! let src = Path::new("generated/matmul.cu");
//! println!("cargo:rerun-if-changed={}", src.display());
//!
//! let mut module = EmbedModule::new();
//! let archs = cuda::compute_caps(&env).unwrap_or_else(|e| panic!("{e}"));
//! if let Some(nvcc) = cuda::find_nvcc(&env) {
//!     let version = build_support::command::version(&nvcc).unwrap_or_else(|e| panic!("{e}"));
//!     let source = std::fs::read(src).unwrap();
//!     let arch_list: Vec<String> = archs.iter().map(|a| a.to_string()).collect();
//!     let fatbin = cache::cached(
//!         &out_dir,
//!         "matmul.fatbin",
//!         &[&source, arch_list.join(",").as_bytes(), version.as_bytes()],
//!         |tmp| cuda::compile_fatbin(&nvcc, src, tmp, &archs, &[]),
//!     )
//!     .unwrap_or_else(|e| panic!("{e}"));
//!     module.bytes("MATMUL_FATBIN", &fatbin).unwrap();
//! }
//! module.write(&out_dir.join("kernels.rs")).unwrap();
//! env.emit_rerun_if_env_changed();
//! ```
//!
//! The crate then has `include!(concat!(env!("OUT_DIR"), "/kernels.rs"));`.

#![warn(missing_docs)]

pub mod cache;
pub mod command;
pub mod cpu;
pub mod cuda;
pub mod embed;
pub mod env;
mod error;
pub mod hip;
mod search;

pub use env::BuildEnv;
pub use error::{ArchParseError, CompileError};
