//! Launching a kernel that DT generated on a CUDA GPU, through cudarc. The library
//! (`dt-kernels`) and the compiler's runner (`dt_codegen::cuda_run`, behind `dtc run --backend
//! cuda`, the GPU tests and the bench) launch alike through here: the kernel's one parameter (its
//! argument block, behind its tensor maps where it takes them), its function attributes, its
//! grid, and the architecture NVRTC compiles for.

use cudarc::driver::{sys, CudaContext, CudaFunction, DeviceRepr, DriverError, LaunchArgs, PushKernelArg};
use dt_core::abi::{DtArgs, GpuArgs, PackedArgs, PackedTmaArgs, TensorMapParams, TensorMapSpec, TENSOR_MAP_BYTES};
use dt_core::signature::Signature;
use dt_core::DType;

/// The argument block of a kernel that takes no tensor maps (`dt_args_t`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct ArgsParam(PackedArgs);

/// Tensor maps, then the argument block (`dt_tma_args_t`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct MapsParam(PackedTmaArgs);

// SAFETY: both are plain bytes, aligned as the kernels' parameters (8 and 64 bytes), at least as
// long as the parameter of any generated kernel, packed in its layout by `GpuArgs`.
unsafe impl DeviceRepr for ArgsParam {}
unsafe impl DeviceRepr for MapsParam {}

/// The one parameter of a launch, which the driver copies, its size taken from the kernel.
#[derive(Clone, Debug)]
pub enum KernelParam {
    Args(Box<ArgsParam>),
    Maps(Box<MapsParam>),
}

impl KernelParam {
    /// The parameter of a launch of `k` with argument block `a` on `dtype` elements: the block
    /// packed for `k`, behind the encoded `maps` where the kernel takes tensor maps. An error
    /// names the map the launch's tensors cannot give.
    pub fn new(k: &Signature, a: &DtArgs, dtype: DType, maps: &[TensorMapSpec]) -> Result<KernelParam, String> {
        let block = GpuArgs::of(k);
        if maps.is_empty() {
            return Ok(KernelParam::Args(Box::new(ArgsParam(block.pack(a)))));
        }
        // A tensor the kernel copies by threads where no map describes it gets none (the
        // argument block's bits of encoded maps tell the kernel).
        let encoded: Vec<Option<[u8; TENSOR_MAP_BYTES]>> = maps
            .iter()
            .map(|m| match dt_core::abi::tensor_map_params(k, a, dtype.size_bytes(), m) {
                Ok(p) => encode_tensor_map(&p, dtype).map(Some),
                Err(_) if k.copies_without_map(m.tensor) => Ok(None),
                Err(e) => Err(e),
            })
            .collect::<Result<_, _>>()
            .map_err(|e| format!("kernel `{}`: {e}", k.name))?;
        Ok(KernelParam::Maps(Box::new(MapsParam(block.pack_with_maps(&encoded, a)))))
    }

    /// Adds the parameter to a launch.
    pub fn push<'a>(&'a self, launch: &mut LaunchArgs<'a>) {
        match self {
            KernelParam::Args(p) => launch.arg(&**p),
            KernelParam::Maps(p) => launch.arg(&**p),
        };
    }
}

/// Encodes a tensor map (CUDA's `cuTensorMapEncodeTiled`): 16-bit or f32 elements, 128-byte
/// or no swizzle, zeros outside the tensor, lines promoted to L2 in 256 bytes.
pub fn encode_tensor_map(p: &TensorMapParams, dtype: DType) -> Result<[u8; TENSOR_MAP_BYTES], String> {
    use sys::CUtensorMapDataType_enum as T;
    use sys::CUtensorMapSwizzle_enum as S;
    let data = match dtype {
        DType::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::BF16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    let swizzle = match p.swizzle {
        0 => S::CU_TENSOR_MAP_SWIZZLE_NONE,
        128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
        other => return Err(format!("a swizzle of {other} bytes is not one a tensor map has")),
    };
    let element_strides = vec![1u32; p.dims.len()];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: the arrays hold one entry per axis (`strides` one fewer), as the rank says, and
    // live across the call; `map` is 64-byte aligned storage the call fills.
    let result = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data,
            p.dims.len() as u32,
            p.address as *mut std::ffi::c_void,
            p.dims.as_ptr(),
            p.strides.as_ptr(),
            p.boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave_enum::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion_enum::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill_enum::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if result != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("the driver refused the tensor map ({result:?}) of {p:?}"));
    }
    // SAFETY: the call succeeded and filled the map.
    let map = unsafe { map.assume_init() };
    let mut out = [0u8; TENSOR_MAP_BYTES];
    for (i, w) in map.opaque.iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&w.to_ne_bytes());
    }
    Ok(out)
}

/// Gives function `f` the attributes its launch needs: dynamic shared memory above what a launch
/// gets unasked (48 KiB less the function's static shared memory: a cluster reduction's slots
/// are static, 32 KiB for 512 threads), and clusters above the portable size.
pub fn configure(f: &CudaFunction, shared_bytes: u32, cluster: u32) -> Result<(), DriverError> {
    let static_bytes = f.shared_size_bytes()?.max(0) as u32;
    if shared_bytes + static_bytes > 48 * 1024 {
        f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes as i32)?;
    }
    if cluster > dt_core::signature::MAX_PORTABLE_CLUSTER {
        f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)?;
    }
    Ok(())
}

/// The programs to launch for a grid of `programs`: all of them, or, for a persistent kernel
/// (one program per multiprocessor, each taking blocks in turn), at most one per
/// multiprocessor of the context's GPU.
pub fn grid(ctx: &CudaContext, programs: usize, persistent: bool) -> Result<u32, DriverError> {
    let programs = programs.min(i32::MAX as usize) as u32;
    if !persistent {
        return Ok(programs);
    }
    let sms = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    Ok(programs.min(sms.max(1) as u32))
}

/// The virtual architecture NVRTC compiles for on a GPU of compute capability `major.minor`:
/// `compute_XY`, and `compute_90a` on sm_90, whose warp-specialized kernels need its
/// architecture-specific instructions (wgmma, setmaxnreg).
pub fn nvrtc_arch(major: i32, minor: i32) -> String {
    match (major, minor) {
        (9, 0) => "compute_90a".to_string(),
        _ => format!("compute_{major}{minor}"),
    }
}

/// What the GPU of `ctx` offers the kernels' schedules.
pub fn features(ctx: &CudaContext) -> dt_core::signature::GpuFeatures {
    ctx.compute_capability().map_or(dt_core::signature::GpuFeatures::NONE, |(major, _)| dt_core::signature::GpuFeatures::cuda(major))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_builds_sm90_for_its_own_instructions() {
        assert_eq!(nvrtc_arch(9, 0), "compute_90a");
        assert_eq!(nvrtc_arch(8, 0), "compute_80");
        assert_eq!(nvrtc_arch(12, 0), "compute_120");
    }
}
