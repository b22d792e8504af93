//! Typed Rust library of DT kernels.
//!
//! The kernels are compiled from `specs/*.dt` by the build script: CUDA C (a fatbin where nvcc
//! is installed, else compiled by NVRTC at first use) for the GPU, and CPU C linked into the
//! crate as the CPU fallback. Every op comes in two forms with the same argument checks:
//!
//! | op | GPU ([`Gpu`], [`DeviceTensor`]) | CPU ([`HostTensor`]) |
//! | --- | --- | --- |
//! | `a @ b` | [`matmul::matmul`] | [`cpu::matmul`] |
//! | `leaky_relu(a @ b)` | [`mm_leaky_relu::mm_leaky_relu`] | [`cpu::mm_leaky_relu`] |
//! | row softmax | [`softmax::softmax`] | [`cpu::softmax`] |
//! | layer norm | [`layernorm::layernorm`] | [`cpu::layernorm`] |
//! | dynamic tanh | [`dyt::dyt`] | [`cpu::dyt`] |
//! | attention | [`attention::attention`] | [`cpu::attention`] |
//!
//! The GPU ops are generic over the [`Backend`]: with the `hip` feature the same functions run
//! on AMD GPUs, given a `hip::Hip` and `hip::HipTensor`s (also re-exported as `hip::matmul` and
//! so on), from code objects compiled by hipcc at build time and the HIP runtime loaded at run
//! time.
//!
//! Elements are `f32`, [`half::f16`] or [`half::bf16`] ([`Element`]). Inputs may be strided
//! views (transposed, permuted, broadcast): the kernels index every input by its strides. Outputs
//! are new, contiguous tensors. A size of 0 gives an empty result and launches nothing. Bad
//! arguments are [`Error`]s, never panics.
//!
//! ```no_run
//! use dt_kernels::{matmul, Gpu};
//! # fn main() -> dt_kernels::Result<()> {
//! let gpu = Gpu::new()?;
//! let a = gpu.upload([2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let b = gpu.upload([2, 3], &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0])?;
//! let c = matmul::matmul(&gpu, &a, &b.transpose(0, 1)?)?; // a @ b^T, [2, 2]
//! assert_eq!(c.to_host()?, vec![1.0, 6.0, 4.0, 15.0]);
//! # Ok(())
//! # }
//! ```

pub mod attention;
mod backend;
pub mod cpu;
pub mod dyt;
mod element;
mod error;
mod fatbin;
mod gpu;
#[cfg(feature = "hip")]
pub mod hip;
mod host;
pub mod layernorm;
mod layout;
pub mod matmul;
pub mod mm_leaky_relu;
mod plan;
pub mod reference;
mod registry;
pub mod softmax;

pub use backend::Backend;
pub use dt_core::DType;
pub use element::Element;
pub use error::{Error, Result};
pub use gpu::{DeviceTensor, Gpu, ModuleSource};
pub use host::HostTensor;
pub use layout::contiguous_strides;
pub use registry::MAX_RANK;

/// Most elements of any tensor the kernels take or make: their indices are 32-bit.
pub const MAX_ELEMENTS: usize = dt_core::tensor::MAX_ELEMENTS;
