//! The argument block every generated kernel takes, on every backend: one plain struct, so that
//! a single launcher can call any kernel. The C text and the Rust mirror below describe the same
//! layout; a test compiles the C and compares sizes and offsets.

/// Most tensor inputs a kernel may have.
pub const MAX_INPUTS: usize = 8;
/// Most axes a tensor may have.
pub const MAX_RANK: usize = 8;
/// Most scalar inputs a kernel may have.
pub const MAX_SCALARS: usize = 8;
/// Most dimensions (size arguments) a kernel may have.
pub const MAX_DIMS: usize = 16;

/// Mirror of `dt_args` in [`C_DECL`]. Strides are in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DtArgs {
    pub inputs: [u64; MAX_INPUTS],
    pub input_strides: [[i64; MAX_RANK]; MAX_INPUTS],
    pub output: u64,
    pub output_strides: [i64; MAX_RANK],
    pub sizes: [i64; MAX_DIMS],
    pub scalars: [f32; MAX_SCALARS],
}

impl Default for DtArgs {
    fn default() -> Self {
        DtArgs {
            inputs: [0; MAX_INPUTS],
            input_strides: [[0; MAX_RANK]; MAX_INPUTS],
            output: 0,
            output_strides: [0; MAX_RANK],
            sizes: [0; MAX_DIMS],
            scalars: [0.0; MAX_SCALARS],
        }
    }
}

/// The C declaration of the argument block (pointers travel as 64-bit integers so that the same
/// struct is passed by value to GPU kernels).
pub const C_DECL: &str = "typedef struct dt_args {
    unsigned long long inputs[8];
    long long input_strides[8][8];
    unsigned long long output;
    long long output_strides[8];
    long long sizes[16];
    float scalars[8];
} dt_args;
";

// SAFETY: `DtArgs` is `repr(C)`, made of plain integers and floats, and has the layout of the
// `dt_args` parameter that generated GPU kernels take by value.
unsafe impl cudarc::driver::DeviceRepr for DtArgs {}
