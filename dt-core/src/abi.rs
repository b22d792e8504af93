//! The arguments of a generated kernel, as the host fills them and as each backend takes them.
//!
//! The host fills one [`DtArgs`] per launch: every tensor's address and strides, the sizes of the
//! kernel's dimensions and its scalars, in arrays of the most any kernel may have. CPU kernels
//! take a pointer to it (`dt_args` of the generated C). A GPU kernel takes its arguments by value
//! in a block sized for it ([`GpuArgs`], `dt_args_t<N, R, S, C>` of the generated CUDA and HIP):
//! a program reads its parameters from the constant bank when it starts, and there the fields a
//! kernel reads lie within 72 to 216 bytes instead of across the 808 of `dt_args`. On the H100
//! the kernels of 1024-column rows ran faster so (docs/decisions/0015-argument-blocks.md). The
//! generated code declares the block `__grid_constant__` (`DT_GRID_CONSTANT` of the device
//! runtime) so that nvcc reads each field where it is used.

use crate::signature::Signature;

/// Most tensor inputs a kernel may have.
pub const MAX_INPUTS: usize = 8;
/// Most axes a tensor may have.
pub const MAX_RANK: usize = 8;
/// Most scalar inputs a kernel may have.
pub const MAX_SCALARS: usize = 8;
/// Most dimensions (size arguments) a kernel may have.
pub const MAX_DIMS: usize = 16;

/// What a CPU kernel returns when it could not allocate its tiles (one heap arena per call):
/// it then wrote nothing, and the caller reports the failure. It returns 0 when it ran.
pub const CPU_ARENA_FAILED: i32 = 1;

/// The signature of a generated CPU kernel: the argument block and the programs `first..last`
/// to run (clamped to the grid); 0 when they ran, [`CPU_ARENA_FAILED`] when they could not.
pub type CpuKernelFn = unsafe extern "C" fn(*const DtArgs, i64, i64) -> i32;

/// What a CPU kernel's nonzero return value means, for an error message.
pub fn cpu_failure(status: i32) -> String {
    match status {
        CPU_ARENA_FAILED => "no host memory for the kernel's tiles; nothing was computed".to_string(),
        other => format!("the kernel returned {other}, which no generated kernel returns"),
    }
}

/// The arguments of one launch (`dt_args` of the generated C). Pointers are 64-bit integers,
/// strides are in elements, sizes follow the kernel's `dims` order and scalars its `scalars`
/// order.
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

/// The C++ declaration of the GPU argument block: `N` inputs whose strides take `R` slots each,
/// the output (`R` slots of strides), `S` sizes and `C` scalars, each count at least 1.
pub const GPU_DECL: &str = "template <int N, int R, int S, int C>
struct dt_args_t {
    unsigned long long inputs[N];
    long long input_strides[N][R];
    unsigned long long output;
    long long output_strides[R];
    long long sizes[S];
    float scalars[C];
};
";

/// The shape of a kernel's GPU argument block ([`GPU_DECL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuArgs {
    /// Tensor inputs (`N`).
    pub inputs: usize,
    /// Stride slots per tensor (`R`): the most axes of any input or the output.
    pub rank: usize,
    /// Sizes (`S`): the kernel's dimensions.
    pub sizes: usize,
    /// Scalars (`C`).
    pub scalars: usize,
}

/// The largest GPU argument block, in bytes: that of a kernel with the most of everything, which
/// is `DtArgs`'s size.
pub const MAX_GPU_ARGS_BYTES: usize = std::mem::size_of::<DtArgs>();

/// A packed GPU argument block, in a buffer of the largest size: the kernel reads the first
/// [`GpuArgs::bytes`] of it.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug)]
pub struct PackedArgs {
    pub bytes: [u8; MAX_GPU_ARGS_BYTES],
}

/// Most tensor maps a GPU kernel takes ([`TensorMapSpec`]).
pub const MAX_TENSOR_MAPS: usize = 4;
/// Bytes of one tensor map (CUDA's `CUtensorMap`, 64-byte aligned).
pub const TENSOR_MAP_BYTES: usize = 128;

/// A tensor map that a GPU kernel takes ahead of its argument block: CUDA's descriptor (TMA) of
/// one tensor of the launch, through which the kernel's bulk copies move boxes of it between
/// global and shared memory, zero-filling what lies outside the tensor. The kernel fixes the box
/// and the swizzle; the host encodes the rest per launch from the argument block
/// ([`tensor_map_params`]). Such a kernel takes `dt_tma_args_t<M, dt_args_t<..>>`: its `M` maps,
/// then its argument block ([`GpuArgs::pack_with_maps`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TensorMapSpec {
    /// The tensor: input `i`, or the output (`None`).
    pub tensor: Option<usize>,
    /// The box a copy moves, per axis of the tensor (in its axis order).
    pub boxes: std::borrow::Cow<'static, [u32]>,
    /// The swizzle of the box's rows in shared memory, in bytes: 128 (each 16-byte unit of a
    /// 128-byte row XOR-ed by the row's index within 8), or 0 (none).
    pub swizzle: u32,
}

/// What CUDA's `cuTensorMapEncodeTiled` takes for one map, axes innermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapParams {
    pub address: u64,
    /// Elements along each axis, innermost (the contiguous one) first.
    pub dims: Vec<u64>,
    /// Bytes between consecutive elements of each axis but the innermost.
    pub strides: Vec<u64>,
    pub boxes: Vec<u32>,
    pub swizzle: u32,
}

/// The parameters of tensor map `map` of a launch of `k` with argument block `a` on elements of
/// `elem_bytes` bytes; an error says which rule the launch breaks (the library chooses kernels
/// that take maps only for launches that keep them, `select::tma_describable`).
pub fn tensor_map_params(k: &Signature, a: &DtArgs, elem_bytes: usize, map: &TensorMapSpec) -> Result<TensorMapParams, String> {
    let TensorMapSpec { tensor, boxes, swizzle } = map;
    let (tensor, swizzle) = (*tensor, *swizzle);
    let (name, dims, address, strides) = match tensor {
        Some(i) => (&k.inputs[i].name, &k.inputs[i].dims, a.inputs[i], &a.input_strides[i][..]),
        None => (&k.output.name, &k.output.dims, a.output, &a.output_strides[..]),
    };
    let n = dims.len();
    if !(1..=5).contains(&n) || boxes.len() != n {
        return Err(format!("`{name}` has {n} axes; a tensor map takes 1 to 5, one box extent each"));
    }
    if !address.is_multiple_of(16) || strides[n - 1] != 1 {
        return Err(format!("`{name}` is not 16-byte aligned with a contiguous last axis, as a tensor map needs"));
    }
    let mut out = TensorMapParams { address, dims: Vec::new(), strides: Vec::new(), boxes: Vec::new(), swizzle };
    for axis in (0..n).rev() {
        let size = a.sizes[k.dim_slot(dims[axis])];
        // `cuTensorMapEncodeTiled` takes only positive sizes: an empty axis (a matmul's empty
        // contraction) gets no map, and a warp-specialized kernel's producer threads copy that
        // input (nothing) instead (`Signature::copies_without_map`).
        if size <= 0 {
            return Err(format!("axis {axis} of `{name}` has a size of {size}; a tensor map needs every size positive"));
        }
        out.dims.push(size as u64);
        out.boxes.push(boxes[axis]);
        if axis < n - 1 {
            let bytes = strides[axis] as u64 * elem_bytes as u64;
            if strides[axis] <= 0 || !bytes.is_multiple_of(16) || bytes >= 1 << 40 {
                return Err(format!(
                    "axis {axis} of `{name}` has a stride of {} elements; a tensor map needs a positive multiple of 16 bytes",
                    strides[axis]
                ));
            }
            out.strides.push(bytes);
        }
    }
    Ok(out)
}

/// A packed argument block behind the tensor maps of a kernel that takes them
/// (`dt_tma_args_t`): the kernel reads its maps, then its [`GpuArgs::bytes`] of block, then a
/// word whose bit `i` says that map `i` was encoded (a warp-specialized kernel's producer copies
/// an input whose map was not, `Signature::copies_without_map`).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct PackedTmaArgs {
    pub bytes: [u8; TENSOR_MAP_BYTES * MAX_TENSOR_MAPS + MAX_GPU_ARGS_BYTES + 8],
}

impl GpuArgs {
    /// The block of kernel `k` (its counts within the `MAX_*` limits, which the emitters check).
    pub fn of(k: &Signature) -> GpuArgs {
        let rank = k.inputs.iter().chain([&k.output]).map(|t| t.dims.len()).max().unwrap_or(0);
        GpuArgs { inputs: k.inputs.len().max(1), rank: rank.max(1), sizes: k.dims.len().max(1), scalars: k.scalars.len().max(1) }
    }

    /// Its C++ type.
    pub fn c_type(&self) -> String {
        format!("dt_args_t<{}, {}, {}, {}>", self.inputs, self.rank, self.sizes, self.scalars)
    }

    /// Byte offsets of `input_strides`, `output`, `output_strides`, `sizes` and `scalars` (the
    /// `inputs` start at 0), and the block's size: the C layout of [`GPU_DECL`], every field
    /// 8-byte aligned but the scalars, the size a multiple of 8.
    pub fn offsets(&self) -> [usize; 6] {
        let strides = 8 * self.inputs;
        let output = strides + 8 * self.inputs * self.rank;
        let output_strides = output + 8;
        let sizes = output_strides + 8 * self.rank;
        let scalars = sizes + 8 * self.sizes;
        let end = (scalars + 4 * self.scalars).next_multiple_of(8);
        [strides, output, output_strides, sizes, scalars, end]
    }

    /// Size of the block in bytes.
    pub fn bytes(&self) -> usize {
        self.offsets()[5]
    }

    /// `a` in this block's layout. Entries past the counts (unused by the kernel) are dropped.
    pub fn pack(&self, a: &DtArgs) -> PackedArgs {
        let [strides, output, output_strides, sizes, scalars, _] = self.offsets();
        let mut p = PackedArgs { bytes: [0; MAX_GPU_ARGS_BYTES] };
        let mut put = |at: usize, b: &[u8]| p.bytes[at..at + b.len()].copy_from_slice(b);
        for i in 0..self.inputs.min(MAX_INPUTS) {
            put(8 * i, &a.inputs[i].to_ne_bytes());
            for axis in 0..self.rank.min(MAX_RANK) {
                put(strides + 8 * (i * self.rank + axis), &a.input_strides[i][axis].to_ne_bytes());
            }
        }
        put(output, &a.output.to_ne_bytes());
        for axis in 0..self.rank.min(MAX_RANK) {
            put(output_strides + 8 * axis, &a.output_strides[axis].to_ne_bytes());
        }
        for s in 0..self.sizes.min(MAX_DIMS) {
            put(sizes + 8 * s, &a.sizes[s].to_ne_bytes());
        }
        for c in 0..self.scalars.min(MAX_SCALARS) {
            put(scalars + 4 * c, &a.scalars[c].to_ne_bytes());
        }
        p
    }

    /// `maps` (tensor maps, at most [`MAX_TENSOR_MAPS`]: the encoded ones, `None` for those a
    /// kernel goes without), then `a` in this block's layout, then the bits of the encoded maps:
    /// the `dt_tma_args_t<maps.len(), ..>` of a kernel that takes tensor maps.
    pub fn pack_with_maps(&self, maps: &[Option<[u8; TENSOR_MAP_BYTES]>], a: &DtArgs) -> PackedTmaArgs {
        let mut p = PackedTmaArgs { bytes: [0; TENSOR_MAP_BYTES * MAX_TENSOR_MAPS + MAX_GPU_ARGS_BYTES + 8] };
        let mut mapped = 0u64;
        for (i, m) in maps.iter().take(MAX_TENSOR_MAPS).enumerate() {
            if let Some(m) = m {
                p.bytes[i * TENSOR_MAP_BYTES..(i + 1) * TENSOR_MAP_BYTES].copy_from_slice(m);
                mapped |= 1 << i;
            }
        }
        let at = maps.len().min(MAX_TENSOR_MAPS) * TENSOR_MAP_BYTES;
        p.bytes[at..at + MAX_GPU_ARGS_BYTES].copy_from_slice(&self.pack(a).bytes);
        let at = at + self.bytes();
        p.bytes[at..at + 8].copy_from_slice(&mapped.to_ne_bytes());
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_block_is_dt_args() {
        let g = GpuArgs { inputs: MAX_INPUTS, rank: MAX_RANK, sizes: MAX_DIMS, scalars: MAX_SCALARS };
        let a = DtArgs::default();
        let base = &a as *const DtArgs as usize;
        let at = |p: *const u8| p as usize - base;
        let expected = [
            at(a.input_strides.as_ptr().cast()),
            at((&a.output as *const u64).cast()),
            at(a.output_strides.as_ptr().cast()),
            at(a.sizes.as_ptr().cast()),
            at(a.scalars.as_ptr().cast()),
            std::mem::size_of::<DtArgs>(),
        ];
        assert_eq!(g.offsets(), expected);
    }

    #[test]
    fn packing_puts_each_field_at_its_offset() {
        let mut a = DtArgs::default();
        a.inputs[1] = 0x1111;
        a.input_strides[1][1] = -3;
        a.output = 0x2222;
        a.output_strides[1] = 7;
        a.sizes[2] = 1000;
        a.scalars[0] = 0.5;
        let g = GpuArgs { inputs: 3, rank: 2, sizes: 3, scalars: 1 };
        let p = g.pack(&a);
        let word = |at: usize| i64::from_ne_bytes(p.bytes[at..at + 8].try_into().unwrap());
        let [strides, output, output_strides, sizes, scalars, end] = g.offsets();
        assert_eq!(word(8), 0x1111);
        assert_eq!(word(strides + 8 * 3), -3);
        assert_eq!(word(output), 0x2222);
        assert_eq!(word(output_strides + 8), 7);
        assert_eq!(word(sizes + 16), 1000);
        assert_eq!(f32::from_ne_bytes(p.bytes[scalars..scalars + 4].try_into().unwrap()), 0.5);
        assert_eq!((scalars, end), (8 * (3 + 6 + 1 + 2 + 3), 8 * 15 + 8));
    }

    /// A tensor map needs every size positive (the driver refuses a size of 0): the map of an
    /// input whose contraction is empty is refused, and the warp-specialized kernel copies that
    /// input by its producer's threads instead, so that the launch gives zeros.
    #[test]
    fn a_tensor_map_of_an_empty_axis_is_refused() {
        let src = "Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\nmm.block(x:128, y:128);\nmm.tensorize(x:128, y:128, k:64);\nmm.num_warps(8);\nmm.num_stages(4);\nmm.warp_specialize();\nmm.dtypes(f16);\nmm.compile();\n";
        let kernel = crate::lower::lower_all(&crate::compile_spec(src).expect("checks")).expect("lowers").remove(0);
        let map = TensorMapSpec { tensor: Some(1), boxes: vec![64, 64].into(), swizzle: 128 };
        let params = |k_size: i64| {
            let mut a = DtArgs::default();
            a.inputs[1] = 0x1000;
            a.input_strides[1][..2].copy_from_slice(&[64, 1]);
            for (slot, (_, name)) in kernel.dims.iter().enumerate() {
                a.sizes[slot] = match name.as_str() {
                    "x" => 16,
                    "y" => 64,
                    _ => k_size,
                };
            }
            tensor_map_params(&kernel, &a, 2, &map)
        };
        assert_eq!(params(64).map(|p| p.dims), Ok(vec![64, 64]));
        let refused = params(0).expect_err("a size of 0");
        assert!(refused.contains("axis 0 of `B` has a size of 0"), "{refused}");
        assert!(kernel.copies_without_map(Some(1)));
    }

    /// `dt_tma_args_t<M, A>`: the maps, the block, then the bits of the maps encoded.
    #[test]
    fn packing_with_maps_puts_the_bits_of_the_encoded_maps_after_the_block() {
        let mut a = DtArgs::default();
        a.sizes[0] = 77;
        let g = GpuArgs { inputs: 2, rank: 2, sizes: 3, scalars: 1 };
        let p = g.pack_with_maps(&[None, Some([7; TENSOR_MAP_BYTES]), Some([9; TENSOR_MAP_BYTES])], &a);
        let word = |at: usize| u64::from_ne_bytes(p.bytes[at..at + 8].try_into().unwrap());
        let block = 3 * TENSOR_MAP_BYTES;
        assert_eq!((p.bytes[0], p.bytes[TENSOR_MAP_BYTES], p.bytes[2 * TENSOR_MAP_BYTES]), (0, 7, 9));
        assert_eq!(word(block + g.offsets()[3]), 77);
        assert_eq!(word(block + g.bytes()), 0b110);
    }
}
