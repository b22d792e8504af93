//! DT code generation: the emitters (CPU C, CUDA C, HIP C) from the kernel IR, the argument
//! block they share, and the pieces the `dtc` command-line compiler shares with build scripts.

pub mod abi;
pub mod cuda_run;
pub mod emit;
pub mod generate;
pub mod hip_cpu;
pub mod host;
pub mod npy;
pub mod plan;
pub mod reference;
