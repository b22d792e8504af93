//! Runs generated CUDA kernels on an NVIDIA GPU through cudarc: compiles the source with NVRTC
//! (once per source), uploads host tensors, launches, and reads the output back. The engine
//! behind `dtc run --backend cuda` and the GPU tests. Needs a driver at run time only.

use crate::abi::DtArgs;
use crate::emit::gpu::LaunchInfo;
use crate::host::{check_bounds, fill_args};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig};
use dt_core::kir::Kernel;
use dt_core::tensor::{Bound, Tensor};
use dt_core::DType;
use std::sync::Arc;

#[derive(Debug)]
pub struct GpuError(pub String);

impl std::fmt::Display for GpuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GpuError {}

fn err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> GpuError + '_ {
    move |e| GpuError(format!("{what}: {e}"))
}

/// A CUDA context and stream on one GPU.
pub struct CudaRunner {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
}

/// Device memory of one tensor in an element type.
enum DeviceBuf {
    F32(CudaSlice<f32>),
    Half(CudaSlice<u16>),
}

impl CudaRunner {
    /// Opens GPU `ordinal`; fails (without panicking) where there is no driver or GPU.
    pub fn new(ordinal: usize) -> Result<CudaRunner, GpuError> {
        // SAFETY: only tries to open the driver library; without it cudarc would panic (and the
        // panic hook print it) on first use.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(GpuError("the CUDA driver library (libcuda) was not found".into()));
        }
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| GpuError("the CUDA driver library could not be loaded".into()))?
            .map_err(err("no CUDA GPU"))?;
        let stream = ctx.default_stream();
        Ok(CudaRunner { ctx, stream })
    }

    /// The architecture NVRTC compiles for on this GPU ([`dt_cuda::nvrtc_arch`]).
    pub fn arch(&self) -> Result<&'static str, GpuError> {
        let (major, minor) = self.ctx.compute_capability().map_err(err("compute capability"))?;
        Ok(Box::leak(dt_cuda::nvrtc_arch(major, minor).into_boxed_str()))
    }

    /// The most programs of a thread-block cluster on this GPU (0: none before sm_90), which
    /// clustered kernels (`cluster(y:N)`) need.
    pub fn max_cluster(&self) -> u32 {
        self.features().max_cluster
    }

    /// What this GPU offers the kernels' schedules (clusters, Hopper's copies and tensor cores).
    pub fn features(&self) -> dt_core::signature::GpuFeatures {
        dt_cuda::features(&self.ctx)
    }

    /// Compiles CUDA C with NVRTC for this GPU and loads it.
    pub fn compile(&self, source: &str) -> Result<Arc<CudaModule>, GpuError> {
        self.load(compile_ptx(self.arch()?, source)?)
    }

    /// Loads what [`compile_ptx`] made.
    pub fn load(&self, ptx: cudarc::nvrtc::Ptx) -> Result<Arc<CudaModule>, GpuError> {
        self.ctx.load_module(ptx).map_err(err("loading the module"))
    }

    /// Loads a fatbin, cubin or PTX image made by nvcc.
    pub fn load_image(&self, image: &[u8]) -> Result<Arc<CudaModule>, GpuError> {
        let ptx = cudarc::nvrtc::Ptx::from_binary(image.to_vec());
        self.ctx.load_module(ptx).map_err(err("loading the module"))
    }

    fn upload(&self, t: &Tensor, dtype: DType) -> Result<DeviceBuf, GpuError> {
        Ok(match dtype {
            DType::F32 => DeviceBuf::F32(self.stream.clone_htod(&t.data).map_err(err("upload"))?),
            DType::F16 => DeviceBuf::Half(
                self.stream
                    .clone_htod(&t.data.iter().map(|v| half::f16::from_f32(*v).to_bits()).collect::<Vec<_>>())
                    .map_err(err("upload"))?,
            ),
            DType::BF16 => DeviceBuf::Half(
                self.stream
                    .clone_htod(&t.data.iter().map(|v| half::bf16::from_f32(*v).to_bits()).collect::<Vec<_>>())
                    .map_err(err("upload"))?,
            ),
        })
    }

    fn addr(&self, b: &DeviceBuf) -> u64 {
        match b {
            DeviceBuf::F32(s) => s.device_ptr(&self.stream).0,
            DeviceBuf::Half(s) => s.device_ptr(&self.stream).0,
        }
    }

    /// Uploads the arguments of one launch of kernel `k`; the output starts as NaN, so an
    /// element the kernel fails to write shows.
    pub fn stage(&self, k: &Kernel, bound: &Bound, dtype: DType) -> Result<Staged, GpuError> {
        check_bounds(k, bound).map_err(|e| GpuError(e.0))?;
        let inputs: Vec<DeviceBuf> = bound.inputs.iter().map(|t| self.upload(t, dtype)).collect::<Result<_, _>>()?;
        let n: usize = bound.out_shape.iter().product();
        let out = self.upload(&Tensor { shape: vec![n], data: vec![f32::NAN; n] }, dtype)?;
        let addrs: Vec<u64> = inputs.iter().map(|b| self.addr(b)).collect();
        let args = fill_args(k, bound, &addrs, self.addr(&out));
        let programs = k.grid.programs(&bound.sizes);
        if programs > i32::MAX as usize {
            return Err(GpuError(format!("kernel `{}` would need {programs} programs; at most 2^31-1 fit a grid", k.name)));
        }
        let layouts = crate::host::launch_layouts(k, dtype, &args);
        let tma = k.admits_tensors(dtype.size_bytes(), &args.sizes, &dt_core::select::launch_tensors(k, &args));
        Ok(Staged { _inputs: inputs, out, args, programs, out_shape: bound.out_shape.clone(), dtype, layouts, tma, kernel: k.clone() })
    }

    /// The kernel function of `info` in `module`, allowed the shared memory it needs.
    pub fn function(&self, module: &Arc<CudaModule>, info: &LaunchInfo) -> Result<CudaFunction, GpuError> {
        let f = module.load_function(&info.symbol).map_err(err("kernel symbol"))?;
        dt_cuda::configure(&f, info.shared_bytes, info.cluster).map_err(err("the kernel's shared memory and cluster attributes"))?;
        Ok(f)
    }

    /// Queues one launch on the stream (nothing when there is no work).
    pub fn launch(&self, f: &CudaFunction, info: &LaunchInfo, staged: &Staged) -> Result<(), GpuError> {
        if staged.programs == 0 || staged.out_shape.iter().product::<usize>() == 0 {
            return Ok(());
        }
        crate::host::check_layouts(info, staged.layouts).map_err(|e| GpuError(e.0))?;
        if !info.tensor_maps.is_empty() && !staged.tma {
            return Err(GpuError(format!(
                "kernel `{}` reads or writes through tensor maps, and a tensor of this launch that needs one is not as they need ({})",
                info.symbol,
                dt_core::select::TENSOR_MAP_NEED
            )));
        }
        let param = dt_cuda::KernelParam::new(&staged.kernel, &staged.args, staged.dtype, &info.tensor_maps).map_err(GpuError)?;
        let grid = dt_cuda::grid(&self.ctx, staged.programs, info.persistent).map_err(err("the multiprocessors"))?;
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (info.threads, 1, 1), shared_mem_bytes: info.shared_bytes };
        let mut launch = self.stream.launch_builder(f);
        param.push(&mut launch);
        // SAFETY: the kernel takes one parameter, `dt_args_t` (or `dt_tma_args_t` behind its
        // tensor maps), in the layout `param` was packed in for it (`GpuArgs::of` its kernel);
        // every pointer in it, and every tensor map, refers to a live device buffer of `staged`,
        // sized for the shapes the kernel reads and writes.
        unsafe { launch.launch(cfg) }.map_err(err("launch"))?;
        Ok(())
    }

    /// Waits for the stream and reads the output back.
    pub fn download(&self, staged: &Staged) -> Result<Tensor, GpuError> {
        self.stream.synchronize().map_err(err("kernel execution"))?;
        let data = match (&staged.out, staged.dtype) {
            (DeviceBuf::F32(s), _) => self.stream.clone_dtoh(s).map_err(err("download"))?,
            (DeviceBuf::Half(s), DType::BF16) => {
                self.stream.clone_dtoh(s).map_err(err("download"))?.into_iter().map(|b| half::bf16::from_bits(b).to_f32()).collect()
            }
            (DeviceBuf::Half(s), _) => {
                self.stream.clone_dtoh(s).map_err(err("download"))?.into_iter().map(|b| half::f16::from_bits(b).to_f32()).collect()
            }
        };
        Ok(Tensor { shape: staged.out_shape.clone(), data })
    }

    /// Runs kernel `k` (emitted with launch parameters `info`) from `module` on bound host
    /// arguments and returns its output.
    pub fn run(&self, module: &Arc<CudaModule>, info: &LaunchInfo, k: &Kernel, bound: &Bound, dtype: DType) -> Result<Tensor, GpuError> {
        let staged = self.stage(k, bound, dtype)?;
        let f = self.function(module, info)?;
        self.launch(&f, info, &staged)?;
        self.download(&staged)
    }
}

/// Compiles CUDA C with NVRTC for architecture `arch` ([`CudaRunner::arch`]), touching no GPU:
/// several threads may compile at once, and [`CudaRunner::load`] loads the results.
pub fn compile_ptx(arch: &'static str, source: &str) -> Result<cudarc::nvrtc::Ptx, GpuError> {
    let opts = cudarc::nvrtc::CompileOptions { arch: Some(arch), options: vec!["--std=c++17".into()], ..Default::default() };
    std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(source, opts))
        .map_err(|_| GpuError("the NVRTC library could not be loaded".into()))?
        .map_err(|e| GpuError(format!("NVRTC: {e}")))
}

impl Staged {
    /// The launch parameters, among `infos`, of the kernel a launch of these tensors runs for the
    /// kernel of `symbol`, as the library chooses it: its twin for specialized sizes or whole runs
    /// where the tensors have them, else the kernel itself.
    pub fn launch_info<'a>(&self, symbol: &str, infos: &'a [LaunchInfo]) -> Option<&'a LaunchInfo> {
        let launched = self.layouts.launch_symbol(symbol, |s| infos.iter().any(|i| i.symbol == s));
        infos.iter().find(|i| i.symbol == launched)
    }
}

/// Device buffers and the argument block of one launch.
pub struct Staged {
    _inputs: Vec<DeviceBuf>,
    out: DeviceBuf,
    pub args: DtArgs,
    pub programs: usize,
    pub out_shape: Vec<usize>,
    dtype: DType,
    /// The most specific layouts the tensors have ([`crate::host::launch_layouts`]): which of the
    /// kernel's twins may run them.
    pub layouts: crate::emit::gpu::Layouts,
    /// Whether the kernel admits the tensors ([`dt_core::signature::Signature::admits_tensors`]): those it reads or
    /// writes through tensor maps are ones a map describes.
    pub tma: bool,
    /// The kernel launched, whose argument block and tensor maps the launch packs.
    kernel: Kernel,
}
