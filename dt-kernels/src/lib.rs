//! Typed Rust library of DT kernels.

pub mod reference;
