//! The errors of every entry point: returned, never panicked, each saying what is wrong and where.

use dt_core::DType;

/// What can go wrong when building a tensor or running a kernel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument has the wrong number of axes.
    #[error("{op}: `{arg}` has {} axes (shape {shape:?}), but {op} takes {} ({arg}: [{}])", shape.len(), axes.len(), axes.join(", "))]
    Rank {
        op: &'static str,
        arg: &'static str,
        shape: Vec<usize>,
        /// The axes the argument must have, by name.
        axes: &'static [&'static str],
    },
    /// Two arguments disagree on the size of a dimension they share.
    #[error("{op}: size mismatch for dimension `{dim}`: {got} from axis {axis} of `{arg}`, but {expected} from axis {first_axis} of `{first_arg}`")]
    ShapeMismatch {
        op: &'static str,
        dim: &'static str,
        arg: &'static str,
        axis: usize,
        got: usize,
        first_arg: &'static str,
        first_axis: usize,
        expected: usize,
    },
    /// The data of a tensor does not match its shape.
    #[error("{what}: shape {shape:?} needs {needed} elements, but {got} were given")]
    DataLength { what: String, shape: Vec<usize>, needed: usize, got: usize },
    /// Strides that do not fit the shape or the data (wrong count, past the end of the data).
    #[error("{what}: {msg}")]
    Stride { what: String, msg: String },
    /// A tensor (argument or result) with more elements than the kernels index.
    #[error("{what} has {elements} elements; at most 2^31 are supported")]
    TooLarge { what: String, elements: u128 },
    /// An output passed to an `*_into` op whose shape is not the result's.
    #[error("{op}: the output has shape {got:?}, but the result has shape {expected:?}")]
    OutputShape { op: &'static str, expected: Vec<usize>, got: Vec<usize> },
    /// An output passed to an `*_into` op whose buffer another view (a clone, a transpose)
    /// shares: writing it would change that view behind its back.
    #[error("{op}: the output shares its buffer with another view; drop the other views or write into a tensor of its own")]
    SharedOutput { op: &'static str },
    /// A size of 0 where the result would be undefined (e.g. attention over no keys).
    #[error("{op}: dimension `{dim}` is 0, but {why}")]
    EmptyDimension { op: &'static str, dim: &'static str, why: &'static str },
    /// A size above the bound a kernel was compiled for.
    #[error("{op}: dimension `{dim}` is {size}, above the bound {bound} that kernel `{kernel}` was compiled for")]
    BoundExceeded { op: &'static str, kernel: String, dim: String, size: usize, bound: u64 },
    /// A scalar argument out of its range (not finite, or negative where it must not be).
    #[error("{op}: scalar `{name}` is {value}; {why}")]
    InvalidScalar { op: &'static str, name: &'static str, value: f32, why: &'static str },
    /// The kernel was not compiled for this element type (`dtypes(...)` in its spec).
    #[error("{op}: kernel `{kernel}` was not built for {dtype} (built for: {built})")]
    DTypeNotBuilt { op: &'static str, kernel: String, dtype: DType, built: String },
    /// Tensors that no size class of the op takes: `kernel`, the first class that refused them,
    /// needs whole 16-byte runs (`requires(aligned)`) or tensor maps, as `why` says.
    #[error("{op}: kernel `{kernel}` does not take these tensors: {why}")]
    TensorsNotAdmitted { op: &'static str, kernel: String, why: String },
    /// A device pointer not aligned for its element type.
    #[error("{op}: `{arg}` starts at address {addr:#x}, which is not aligned to {align} bytes")]
    Misaligned { op: &'static str, arg: &'static str, addr: u64, align: usize },
    /// A tensor that lives on another device (or context) than the [`crate::Gpu`] handle.
    #[error("{op}: `{arg}` lives on GPU {tensor_device}, but the handle runs on GPU {gpu_device} (or another context)")]
    WrongDevice { op: &'static str, arg: &'static str, tensor_device: usize, gpu_device: usize },
    /// No usable GPU: no CUDA driver or GPU (the CUDA ops), no HIP runtime or AMD GPU (the
    /// `hip` ops).
    #[error("no usable GPU: {0}")]
    Unavailable(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver error while {context}: {source}")]
    Driver {
        context: String,
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// A HIP runtime call failed (the `hip` feature).
    #[error("HIP error while {context}: {msg} (code {code})")]
    Hip { context: String, code: i32, msg: String },
    /// The GPU code of a spec could not be loaded or compiled (fatbin and NVRTC both failed).
    #[error("loading the GPU kernels of spec `{spec}`: {msg}")]
    Compile { spec: &'static str, msg: String },
    /// A CPU kernel that could not run (no host memory for its tiles).
    #[error("{op}: CPU kernel `{kernel}`: {msg}")]
    CpuKernel { op: &'static str, kernel: String, msg: String },
    /// The spec metadata embedded at build time is missing or inconsistent (a bug of this crate).
    #[error("internal error: {0}")]
    Internal(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn driver(context: impl Into<String>) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
        let context = context.into();
        move |source| Error::Driver { context, source }
    }
}
