//! The argument block of generated kernels ([`dt_core::abi`]): the C declaration that CPU kernels
//! take a pointer to, and the kernel argument a GPU launch passes.

pub use dt_core::abi::*;

/// The C declaration of [`DtArgs`] (pointers travel as 64-bit integers). A test compiles it and
/// compares its layout with `DtArgs`'s.
pub const C_DECL: &str = "typedef struct dt_args {
    unsigned long long inputs[8];
    long long input_strides[8][8];
    unsigned long long output;
    long long output_strides[8];
    long long sizes[16];
    float scalars[8];
} dt_args;
";
