//! DT code generation: the emitters (CPU C, CUDA C, HIP C) from the kernel IR, and the pieces the
//! `dtc` command-line compiler shares with build scripts.

pub mod npy;
