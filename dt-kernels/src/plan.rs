//! Matching the arguments of one call to a generated kernel: ranks, shared sizes, limits, the
//! dtype, and the argument block (everything but the pointers). Both backends go through here,
//! so a shape error reads the same on the CPU and on the GPU.
//!
//! The types here are `pub` in a private module: nameable in the crate only, and so usable in
//! the hidden methods of the public [`crate::Backend`] trait.

use crate::error::{Error, Result};
use crate::layout::{contiguous_strides, elements};
use crate::registry::{spec_index, DtArgs, SpecData, MAX_DIMS, MAX_INPUTS, MAX_SCALARS, SPECS};
use dt_core::signature::Signature;
use dt_core::DType;

/// One tensor argument of an op.
pub struct InputDesc {
    /// The input's name in the spec (`A`).
    pub param: &'static str,
    /// The argument's name in the Rust API (`a`).
    pub arg: &'static str,
    /// The name of each axis, as the API documents it (`["m", "k"]`).
    pub axes: &'static [&'static str],
}

/// A library op: which kernel of which spec it runs, and how its arguments are named.
pub struct OpDesc {
    pub op: &'static str,
    pub spec: &'static str,
    pub kernel: &'static str,
    pub inputs: &'static [InputDesc],
    /// The spec's names of the scalar arguments, in the order the op passes them.
    pub scalars: &'static [&'static str],
    /// Axes (by API name) that must not be 0 when the output is not empty, and why.
    pub nonempty: &'static [(&'static str, &'static str)],
    /// Scalars that must not be negative (layernorm's `eps`: below 0 a constant row's variance
    /// plus `eps` has no square root).
    pub nonnegative: &'static [&'static str],
}

/// A call matched to its kernel.
pub struct Plan {
    pub spec_index: usize,
    pub spec: &'static SpecData,
    pub kernel: &'static Signature,
    /// The symbol of the kernel built for any layout ([`Plan::launch_symbol`] picks the one to
    /// run).
    pub symbol: String,
    /// For each input slot of the kernel, the index of the op's argument that fills it.
    pub slots: Vec<usize>,
    pub out_shape: Vec<usize>,
    pub out_elements: usize,
    /// The argument block without pointers.
    pub args: DtArgs,
    /// Programs to launch (0 when the output is empty).
    pub programs: usize,
}

/// What the device a plan is for offers beyond what every backend has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device {
    /// Clusters (`cluster(y:N)` kernels of up to `max_cluster` programs run) and Hopper's
    /// copies and tensor cores (warp-specialized kernels run).
    pub features: dt_core::signature::GpuFeatures,
}

impl Device {
    /// The CPU, HIP, and CUDA GPUs before sm_90.
    pub const PLAIN: Device = Device { features: dt_core::signature::GpuFeatures::NONE };
}

/// Matches `shapes` (one `(shape, strides)` per input of `op`, in `op.inputs` order) and
/// `scalars` (in `op.scalars` order) to `op`'s kernel instantiated for `dtype`, among those that
/// `device` can run, writing a new contiguous output.
pub(crate) fn plan(op: &OpDesc, dtype: DType, shapes: &[(&[usize], &[usize])], scalars: &[f32], device: Device) -> Result<Plan> {
    plan_into(op, dtype, shapes, scalars, device, None)
}

/// [`plan`] writing an output of strides `out_strides` (a caller's tensor, `*_into`), where given
/// and of the output's rank: the classes are chosen for the tensor the kernel writes (a class
/// that stores through a tensor map takes only outputs a map describes).
pub(crate) fn plan_into(
    op: &OpDesc,
    dtype: DType,
    shapes: &[(&[usize], &[usize])],
    scalars: &[f32],
    device: Device,
    out_strides: Option<&[usize]>,
) -> Result<Plan> {
    let spec: &'static SpecData = SPECS[spec_index(op.spec)?];
    // The size-class variants of the op's kernel, in the spec's order: the first built for the
    // dtype whose bounds admit the sizes runs (a class may be scheduled for some dtypes only, and
    // another class of the same bounds for the others), among those the device runs and whose
    // tensor needs the arguments meet (`dt_core::select::choose_class`).
    // Where none runs: the error of the last variant built for the dtype (its bounds), else
    // that of the first whose tensor needs the arguments do not meet, else that of the first
    // (not built for it).
    let (mut bound, mut not_built, mut refused) = (None, None, None);
    let chosen = dt_core::select::choose_class(
        &spec.manifest()?.kernels,
        op.kernel,
        device.features,
        |kernel| match plan_kernel(op, kernel, dtype, shapes, scalars, out_strides) {
            Err(e @ Error::BoundExceeded { .. }) => {
                bound = Some(e);
                None
            }
            Err(e @ Error::DTypeNotBuilt { .. }) => {
                not_built.get_or_insert(e);
                None
            }
            Err(e) => Some(Err(e)),
            // A kernel that reads through tensor maps, or that `requires(aligned)`, runs where
            // the tensors suit it (of the library's buffers, every address is aligned; `launch`
            // checks it again).
            Ok(planned)
                if !kernel.admits_tensors(
                    dtype.size_bytes(),
                    &planned.args.sizes,
                    &dt_core::select::launch_tensors(kernel, &planned.args),
                ) =>
            {
                refused.get_or_insert_with(|| Error::TensorsNotAdmitted {
                    op: op.op,
                    kernel: kernel.name.clone(),
                    why: not_admitted_why(kernel),
                });
                None
            }
            Ok(planned) => Some(Ok(planned)),
        },
        |made, d| made.as_ref().map_or(usize::MAX, |p| p.args.sizes[p.kernel.dim_slot(d)] as usize),
    );
    match chosen {
        Some((_, planned)) => planned,
        None => Err(bound
            .or(refused)
            .or(not_built)
            .unwrap_or_else(|| Error::Internal(format!("spec `{}` has no kernel `{}`", spec.name, op.kernel)))),
    }
}

/// What kernel `k` needs of the tensors it takes ([`Signature::admits_tensors`]), for the
/// error of a launch whose tensors it does not take.
pub(crate) fn not_admitted_why(k: &Signature) -> String {
    use dt_core::select::{TENSOR_MAP_NEED, WHOLE_RUNS_NEED};
    if k.aligned {
        format!("it requires whole 16-byte runs (`requires(aligned)`: {WHOLE_RUNS_NEED})")
    } else {
        format!("it reads or writes through tensor maps, which need {TENSOR_MAP_NEED}")
    }
}

/// [`plan`] for one kernel.
fn plan_kernel(
    op: &OpDesc,
    kernel: &'static Signature,
    dtype: DType,
    shapes: &[(&[usize], &[usize])],
    scalars: &[f32],
    out_strides: Option<&[usize]>,
) -> Result<Plan> {
    for (name, &value) in op.scalars.iter().zip(scalars) {
        if !value.is_finite() {
            return Err(Error::InvalidScalar { op: op.op, name, value, why: "it must be a finite number" });
        }
        if value < 0.0 && op.nonnegative.contains(name) {
            return Err(Error::InvalidScalar { op: op.op, name, value, why: "it must be 0 or more" });
        }
    }
    if shapes.len() != op.inputs.len() || scalars.len() != op.scalars.len() {
        return Err(Error::Internal(format!(
            "{}: {} inputs and {} scalars passed to a kernel of {} and {}",
            op.op,
            shapes.len(),
            scalars.len(),
            op.inputs.len(),
            op.scalars.len()
        )));
    }
    // Ranks and sizes, by the API's axis names.
    let mut sizes: Vec<(&'static str, usize, &'static str, usize)> = Vec::new(); // (axis name, size, arg, axis)
    for (desc, (shape, _)) in op.inputs.iter().zip(shapes) {
        if shape.len() != desc.axes.len() {
            return Err(Error::Rank { op: op.op, arg: desc.arg, shape: shape.to_vec(), axes: desc.axes });
        }
        elements(&|| format!("{}: `{}`", op.op, desc.arg), shape)?;
        for (axis, (&name, &n)) in desc.axes.iter().zip(shape.iter()).enumerate() {
            match sizes.iter().find(|(d, ..)| *d == name) {
                Some(&(_, m, first_arg, first_axis)) if m != n => {
                    return Err(Error::ShapeMismatch {
                        op: op.op,
                        dim: name,
                        arg: desc.arg,
                        axis,
                        got: n,
                        first_arg,
                        first_axis,
                        expected: m,
                    });
                }
                Some(_) => {}
                None => sizes.push((name, n, desc.arg, axis)),
            }
        }
    }
    let spec_index = spec_index(op.spec)?;
    let spec: &'static SpecData = SPECS[spec_index];
    let internal = |msg: String| Error::Internal(format!("{}: kernel `{}` of spec `{}`: {msg}", op.op, kernel.name, spec.name));
    if !kernel.dtypes.contains(&dtype) {
        let built = kernel.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ");
        return Err(Error::DTypeNotBuilt { op: op.op, kernel: kernel.name.clone(), dtype, built });
    }
    let symbol = format!("dt_{}_{}", kernel.name, dtype.name());
    if spec.launch_row(&symbol).is_none() || (!kernel.cuda_only() && spec.cpu_fn(&symbol).is_none()) {
        return Err(Error::DTypeNotBuilt { op: op.op, kernel: kernel.name.clone(), dtype, built: "none".into() });
    }
    if kernel.inputs.len() > MAX_INPUTS || kernel.scalars.len() > MAX_SCALARS || kernel.dims.len() > MAX_DIMS {
        return Err(internal("more arguments than the argument block holds".into()));
    }

    // Sizes by the kernel's dimensions.
    let n_dims = kernel
        .dims
        .iter()
        .map(|(d, _)| d.index() + 1)
        .chain(kernel.inputs.iter().chain([&kernel.output]).flat_map(|t| t.dims.iter().map(|d| d.index() + 1)))
        .max()
        .unwrap_or(0);
    let mut by_dim: Vec<Option<usize>> = vec![None; n_dims];
    let mut slots = Vec::with_capacity(kernel.inputs.len());
    let mut args = DtArgs::default();
    for (slot, param) in kernel.inputs.iter().enumerate() {
        let j = op
            .inputs
            .iter()
            .position(|d| d.param == param.name)
            .ok_or_else(|| internal(format!("input `{}` is not an argument of the op", param.name)))?;
        let (shape, strides) = shapes[j];
        if param.dims.len() != shape.len() {
            return Err(internal(format!("input `{}` has {} axes in the kernel, {} in the op", param.name, param.dims.len(), shape.len())));
        }
        for (axis, d) in param.dims.iter().enumerate() {
            match by_dim[d.index()] {
                Some(m) if m != shape[axis] => {
                    return Err(internal(format!("dimension `{}` is {m} and {} at once", kernel.dim_name(*d), shape[axis])))
                }
                _ => by_dim[d.index()] = Some(shape[axis]),
            }
            args.input_strides[slot][axis] = strides[axis] as i64;
        }
        slots.push(j);
    }
    for (slot, (d, name)) in kernel.dims.iter().enumerate() {
        let n = by_dim[d.index()].ok_or_else(|| internal(format!("no input fixes the size of dimension `{name}`")))?;
        args.sizes[slot] = n as i64;
    }
    for (d, bound) in &kernel.bounds {
        let n = by_dim[d.index()].unwrap_or(0);
        if n as u64 > *bound {
            return Err(Error::BoundExceeded {
                op: op.op,
                kernel: kernel.name.clone(),
                dim: kernel.dim_name(*d).to_string(),
                size: n,
                bound: *bound,
            });
        }
    }
    let out_shape: Vec<usize> = kernel
        .output
        .dims
        .iter()
        .map(|d| by_dim[d.index()].ok_or_else(|| internal(format!("no input fixes output dimension `{}`", kernel.dim_name(*d)))))
        .collect::<Result<_>>()?;
    let out_elements = elements(&|| format!("{}: the output {out_shape:?}", op.op), &out_shape)?;
    let out_strides = match out_strides {
        Some(strides) if strides.len() == out_shape.len() => strides.to_vec(),
        _ => contiguous_strides(&out_shape),
    };
    for (axis, s) in out_strides.iter().enumerate() {
        args.output_strides[axis] = *s as i64;
    }
    for (i, name) in kernel.scalars.iter().enumerate() {
        let j =
            op.scalars.iter().position(|s| s == name).ok_or_else(|| internal(format!("scalar `{name}` is not an argument of the op")))?;
        args.scalars[i] = scalars[j];
    }
    if out_elements > 0 {
        for (axis, why) in op.nonempty {
            if sizes.iter().any(|(d, n, ..)| d == axis && *n == 0) {
                return Err(Error::EmptyDimension { op: op.op, dim: axis, why });
            }
        }
    }
    let programs = if out_elements == 0 { 0 } else { programs(kernel, &by_dim) };
    if programs > i32::MAX as usize {
        return Err(Error::TooLarge {
            what: format!("{}: the launch grid of kernel `{}`", op.op, kernel.name),
            elements: programs as u128,
        });
    }
    Ok(Plan { spec_index, spec, kernel, symbol, slots, out_shape, out_elements, args, programs })
}

impl Plan {
    /// The kernel to launch with argument block `args` (addresses and strides filled in), of
    /// those the backend has (`built`): the most specific twin the launch's layouts admit
    /// ([`dt_core::select::Layouts::launch_symbol`]), the one for its specialized sizes, for whole
    /// 16-byte runs, or for any layout.
    pub(crate) fn launch_symbol(&self, args: &DtArgs, dtype: DType, built: impl Fn(&str) -> bool) -> String {
        let tensors = dt_core::select::launch_tensors(self.kernel, args);
        dt_core::select::Layouts::of_launch(self.kernel, dtype.size_bytes(), |slot| args.sizes[slot], &tensors)
            .launch_symbol(&self.symbol, built)
    }

    /// Refuses a launch whose tensors the kernel does not take (addresses known only now: a
    /// `requires(aligned)` class needs whole 16-byte runs, a Hopper one tensor maps), which
    /// would otherwise read or write out of its runs; `symbol` names it in the error.
    pub(crate) fn check_admits(&self, op: &OpDesc, args: &DtArgs, dtype: DType, symbol: &str) -> Result<()> {
        let tensors = dt_core::select::launch_tensors(self.kernel, args);
        if self.kernel.admits_tensors(dtype.size_bytes(), &args.sizes, &tensors) {
            Ok(())
        } else {
            Err(Error::TensorsNotAdmitted { op: op.op, kernel: symbol.to_string(), why: not_admitted_why(self.kernel) })
        }
    }
}

fn programs(kernel: &Signature, by_dim: &[Option<usize>]) -> usize {
    let sizes: Vec<usize> = by_dim.iter().map(|n| n.unwrap_or(0)).collect();
    kernel.grid.programs(&sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU with clusters of up to 16 programs and Hopper's copies and tensor cores.
    const HOPPER: Device = Device { features: dt_core::signature::GpuFeatures { cuda: true, max_cluster: 16, hopper: true } };

    /// The kernel a matmul of contiguous A (`m` x `k`) and B (`k` x `n`) in `dtype` runs on `device`.
    fn contiguous_matmul(dtype: DType, (m, n, k): (usize, usize, usize), device: Device) -> String {
        let (a, b) = ([m, k], [k, n]);
        let shapes: [(&[usize], &[usize]); 2] = [(&a, &[k, 1]), (&b, &[n, 1])];
        plan(&crate::matmul::OP, dtype, &shapes, &[], device).map(|p| p.symbol).unwrap()
    }

    /// Layernorm of 1000 columns: the 16-bit types run the class scheduled for them, f32 the class
    /// after it; 5000 columns pass both by for the next size class, again one for f32 and one
    /// for the 16-bit types.
    #[test]
    fn the_first_variant_built_for_the_dtype_runs() {
        let symbol = |dtype: DType, cols: usize| {
            let (x, w) = ([8, cols], [cols]);
            let shapes: [(&[usize], &[usize]); 3] = [(&x, &[cols, 1]), (&w, &[1]), (&w, &[1])];
            plan(&crate::layernorm::OP, dtype, &shapes, &[1e-5], Device::PLAIN).map(|p| p.symbol)
        };
        assert_eq!(symbol(DType::F16, 1000).unwrap(), "dt_layernorm_1k_16bit_f16");
        assert_eq!(symbol(DType::BF16, 1000).unwrap(), "dt_layernorm_1k_16bit_bf16");
        assert_eq!(symbol(DType::F32, 1000).unwrap(), "dt_layernorm_1k_f32");
        assert_eq!(symbol(DType::F16, 5000).unwrap(), "dt_layernorm_16k_f16");
        assert_eq!(symbol(DType::F32, 5000).unwrap(), "dt_layernorm_16k_f32_f32");
    }

    /// f32 rows of 1025 to 4096 columns: up to 16384 rows run `layernorm_4k_f32`, whose bounds
    /// include the rows, more rows the class after it; the 16-bit types one class for any count.
    #[test]
    fn a_bound_on_the_rows_passes_more_rows_to_the_next_class() {
        let symbol = |dtype: DType, rows: usize| {
            let (x, w) = ([rows, 2000], [2000]);
            let shapes: [(&[usize], &[usize]); 3] = [(&x, &[2000, 1]), (&w, &[1]), (&w, &[1])];
            plan(&crate::layernorm::OP, dtype, &shapes, &[1e-5], Device::PLAIN).map(|p| p.symbol)
        };
        assert_eq!(symbol(DType::F32, 16384).unwrap(), "dt_layernorm_4k_f32_f32");
        assert_eq!(symbol(DType::F32, 16385).unwrap(), "dt_layernorm_4k_f32_many_f32");
        assert_eq!(symbol(DType::F32, 65536).unwrap(), "dt_layernorm_4k_f32_many_f32");
        assert_eq!(symbol(DType::F16, 65536).unwrap(), "dt_layernorm_4k_f16");
    }

    /// On a GPU with Hopper's copies and tensor cores, 16-bit matmuls (of 1000 rows and 3000
    /// columns) whose output a tensor map describes (16-byte aligned rows) and whose inputs are
    /// contiguous along their last axis run the warp-specialized class `mm_90a` (inputs of rows
    /// such as 77 elements, 154 bytes, copied by its producer's threads); a transposed input, an
    /// output of rows no map describes, or a GPU without them, the class `mm`; f32 the classes of
    /// fused multiply-adds, by rows.
    #[test]
    fn hopper_runs_the_warp_specialized_class_where_tensor_maps_describe_the_output() {
        let symbol = |dtype: DType, k: usize, a_strides: [usize; 2], device: Device| {
            let (a, b) = ([1000, k], [k, 3000]);
            let shapes: [(&[usize], &[usize]); 2] = [(&a, &a_strides), (&b, &[3000, 1])];
            plan(&crate::matmul::OP, dtype, &shapes, &[], device).map(|p| p.symbol).unwrap()
        };
        assert_eq!(symbol(DType::F16, 80, [80, 1], HOPPER), "dt_mm_90a_f16");
        assert_eq!(symbol(DType::BF16, 80, [88, 1], HOPPER), "dt_mm_90a_bf16");
        assert_eq!(symbol(DType::F16, 77, [77, 1], HOPPER), "dt_mm_90a_f16");
        let odd_output = |n: usize| contiguous_matmul(DType::F16, (100, n, 64), HOPPER);
        assert_eq!(odd_output(3001), "dt_mm_f16", "output rows of 3001 16-bit elements: no tensor map");
        // Into a caller's output (`matmul_into`): one a tensor map describes (rows padded by 8
        // elements) runs the warp-specialized class, a transposed one or one of rows padded by
        // 1 element the class `mm`.
        let into = |out_strides: [usize; 2]| {
            let (a, b) = ([1000, 64], [64, 3000]);
            let shapes: [(&[usize], &[usize]); 2] = [(&a, &[64, 1]), (&b, &[3000, 1])];
            plan_into(&crate::matmul::OP, DType::F16, &shapes, &[], HOPPER, Some(&out_strides)).map(|p| p.symbol).unwrap()
        };
        assert_eq!(into([3008, 1]), "dt_mm_90a_f16");
        assert_eq!(into([1, 1000]), "dt_mm_f16");
        assert_eq!(into([3001, 1]), "dt_mm_f16");
        assert_eq!(symbol(DType::F16, 80, [1, 1000], HOPPER), "dt_mm_f16");
        assert_eq!(symbol(DType::F32, 80, [80, 1], HOPPER), "dt_mm_1k_f32_f32");
        assert_eq!(symbol(DType::F16, 80, [80, 1], Device::PLAIN), "dt_mm_f16");
        // Smaller outputs run the classes of smaller tiles.
        let small = |m: usize, n: usize| contiguous_matmul(DType::F16, (m, n, 64), HOPPER);
        assert_eq!(small(16, 4096), "dt_mm_90a_m16_f16");
        assert_eq!(small(17, 4096), "dt_mm_90a_m64_f16");
        // Up to 16 rows, contractions of 2049 to 4096 split over a cluster of 2; shorter ones
        // would leave the second program nothing.
        let split = |dtype: DType, m: usize, k: usize, device: Device| contiguous_matmul(dtype, (m, 64, k), device);
        assert_eq!(split(DType::F16, 1, 2056, HOPPER), "dt_mm_90a_m16_split_f16");
        assert_eq!(split(DType::F16, 1, 2049, HOPPER), "dt_mm_90a_m16_split_f16", "rows of 2049 16-bit elements, copied by threads");
        assert_eq!(split(DType::F16, 16, 4096, HOPPER), "dt_mm_90a_m16_split_f16");
        assert_eq!(split(DType::F16, 16, 2048, HOPPER), "dt_mm_90a_m16_f16");
        assert_eq!(split(DType::F16, 16, 4104, HOPPER), "dt_mm_90a_m16_f16");
        assert_eq!(split(DType::F32, 16, 4096, HOPPER), "dt_mm_16_f32_split_f32");
        assert_eq!(split(DType::F32, 16, 4096, Device::PLAIN), "dt_mm_16_f32_f32");
        assert_eq!(small(512, 512), "dt_mm_90a_512_f16");
        assert_eq!(small(513, 512), "dt_mm_90a_1k_f16");
        assert_eq!(small(1024, 1024), "dt_mm_90a_1k_f16");
        assert_eq!(small(1025, 1024), "dt_mm_90a_f16");
        let f32_rows = |m: usize| contiguous_matmul(DType::F32, (m, 64, 64), Device::PLAIN);
        assert_eq!(f32_rows(17), "dt_mm_512_f32_f32");
        assert_eq!(f32_rows(512), "dt_mm_512_f32_f32");
        assert_eq!(f32_rows(513), "dt_mm_1k_f32_f32");
        assert_eq!(f32_rows(1024), "dt_mm_1k_f32_f32");
        assert_eq!(f32_rows(1025), "dt_mm_128_f32_f32");
    }

    /// Few rows and many columns on Hopper (decision 0044): classes whose tiles number about one
    /// wave of the GPU, by rows, columns and, for the splits, the contraction.
    #[test]
    fn few_rows_and_many_columns_run_classes_whose_tiles_fill_the_gpu() {
        let class = |m: usize, n: usize, k: usize| contiguous_matmul(DType::F16, (m, n, k), HOPPER);
        assert_eq!(class(64, 4096, 4096), "dt_mm_90a_m64_split_f16");
        assert_eq!(class(64, 4096, 2048), "dt_mm_90a_m64_f16", "a contraction the split would leave half idle");
        assert_eq!(class(64, 4104, 4096), "dt_mm_90a_m64_f16");
        assert_eq!(class(128, 4096, 4096), "dt_mm_90a_m128_split_f16");
        assert_eq!(class(128, 4096, 8192), "dt_mm_90a_m128_f16");
        assert_eq!(class(128, 11008, 4096), "dt_mm_90a_m128_f16");
        assert_eq!(class(128, 16392, 4096), "dt_mm_90a_f16");
        assert_eq!(class(192, 4096, 4096), "dt_mm_90a_m192_f16");
        assert_eq!(class(193, 4096, 4096), "dt_mm_90a_m256_f16");
        assert_eq!(class(256, 4096, 4096), "dt_mm_90a_m256_f16");
        assert_eq!(class(256, 11008, 4096), "dt_mm_90a_f16");
        assert_eq!(class(512, 4096, 4096), "dt_mm_90a_m512_f16");
        assert_eq!(class(1024, 4096, 4096), "dt_mm_90a_f16");
        // Outputs up to 512 x 512 and 1024 x 1024 keep their classes; up to 512 x 512 with
        // contractions of 4097 to 8192, the split one (decision 0045).
        assert_eq!(class(128, 512, 4096), "dt_mm_90a_512_f16");
        assert_eq!(class(512, 512, 8192), "dt_mm_90a_512_split_f16");
        assert_eq!(class(512, 512, 8200), "dt_mm_90a_512_f16");
        assert_eq!(class(128, 1024, 4096), "dt_mm_90a_1k_f16");
    }

    /// Tensors whose 16-byte runs are whole run the kernel built for them; an address one
    /// element off, a row stride or a row length that is no multiple of the run, the kernel for
    /// any layout.
    #[test]
    fn whole_runs_run_the_kernel_built_for_them() {
        let launched = |cols: usize, row_stride: usize, x_addr: u64| {
            let (x, w) = ([8, cols], [cols]);
            let shapes: [(&[usize], &[usize]); 3] = [(&x, &[row_stride, 1]), (&w, &[1]), (&w, &[1])];
            let p = plan(&crate::layernorm::OP, DType::F16, &shapes, &[1e-5], Device::PLAIN).expect("plans");
            let mut args = p.args;
            args.inputs[..3].copy_from_slice(&[x_addr, 0x20000, 0x30000]);
            args.output = 0x40000;
            p.launch_symbol(&args, DType::F16, |s| p.spec.launch_row(s).is_some())
        };
        assert_eq!(launched(1000, 1000, 0x10000), "dt_layernorm_1k_16bit_f16_whole");
        assert_eq!(launched(1000, 1000, 0x10002), "dt_layernorm_1k_16bit_f16");
        assert_eq!(launched(1000, 1004, 0x10000), "dt_layernorm_1k_16bit_f16");
        assert_eq!(launched(1001, 1008, 0x10000), "dt_layernorm_1k_16bit_f16");
        assert_eq!(launched(1000, 1008, 0x10000), "dt_layernorm_1k_16bit_f16_whole");
    }

    /// A launch refuses tensors its kernel does not take, on either backend: a warp-specialized
    /// matmul class stores through a tensor map, which needs a 16-byte aligned address (its
    /// producer's threads copy inputs that no map describes).
    #[test]
    fn launches_refuse_addresses_their_kernel_cannot_take() {
        let (a, b) = ([256, 256], [256, 256]);
        let shapes: [(&[usize], &[usize]); 2] = [(&a, &[256, 1]), (&b, &[256, 1])];
        let p = plan(&crate::matmul::OP, DType::F16, &shapes, &[], HOPPER).expect("plans");
        let check = |out_addr: u64| {
            let mut args = p.args;
            args.inputs[..2].copy_from_slice(&[0x100002, 0x200000]);
            args.output = out_addr;
            let symbol = p.launch_symbol(&args, DType::F16, |s| p.spec.launch_row(s).is_some());
            p.check_admits(&crate::matmul::OP, &args, DType::F16, &symbol).map(|()| symbol)
        };
        assert_eq!(check(0x400000).expect("aligned"), "dt_mm_90a_512_f16");
        let e = check(0x400002).expect_err("2 bytes off").to_string();
        assert!(e.contains("does not take these tensors") && e.contains("dt_mm_90a_512_f16"), "{e}");
    }

    /// Rows of exactly the length a class specializes, all tensors contiguous, run its
    /// specialized twin; a row stride longer than the row, a misaligned address or another
    /// length, the kernel for whole runs or for any layout.
    #[test]
    fn specialized_sizes_run_the_twin_built_for_them() {
        let launched = |cols: usize, row_stride: usize, x_addr: u64| {
            let (x, w) = ([8, cols], [cols]);
            let shapes: [(&[usize], &[usize]); 3] = [(&x, &[row_stride, 1]), (&w, &[1]), (&w, &[1])];
            let p = plan(&crate::layernorm::OP, DType::F32, &shapes, &[1e-5], Device::PLAIN).expect("plans");
            let mut args = p.args;
            args.inputs[..3].copy_from_slice(&[x_addr, 0x100000, 0x200000]);
            args.output = 0x400000;
            p.launch_symbol(&args, DType::F32, |s| p.spec.launch_row(s).is_some())
        };
        assert_eq!(launched(16384, 16384, 0x10000), "dt_layernorm_16k_f32_f32_exact");
        assert_eq!(launched(16384, 16392, 0x10000), "dt_layernorm_16k_f32_f32_whole");
        assert_eq!(launched(16384, 16384, 0x10004), "dt_layernorm_16k_f32_f32");
        assert_eq!(launched(16380, 16380, 0x10000), "dt_layernorm_16k_f32_f32_whole");
        assert_eq!(launched(1024, 1024, 0x10000), "dt_layernorm_1k_f32_exact");
    }
}
