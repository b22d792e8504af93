//! The GPU side: a [`Gpu`] handle (context, stream, loaded modules) and [`DeviceTensor`].
//!
//! Kernels come from the fatbin that the build script compiled with nvcc, where it found nvcc;
//! otherwise (or when the fatbin has no code for the GPU, or with [`Gpu::with_nvrtc`] or
//! `DT_FORCE_NVRTC=1`) from the embedded CUDA C, compiled with NVRTC. Each spec's module is
//! loaded once per context and kept for as long as a handle on that context lives.

use crate::element::Element;
use crate::error::{Error, Result};
use crate::layout::{self, contiguous_strides};
use crate::plan::{plan, Device, OpDesc, Plan};
use crate::registry::{SpecData, NVCC_ARCHS, SPECS};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use dt_core::manifest::LaunchInfo;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Where the kernels of a spec were loaded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// The fatbin compiled by nvcc at build time.
    Fatbin,
    /// The embedded CUDA C, compiled by NVRTC at run time.
    Nvrtc,
}

struct Loaded {
    module: Arc<CudaModule>,
    source: ModuleSource,
}

/// What every handle on one context shares: the loaded modules and functions.
struct Shared {
    ctx: Arc<CudaContext>,
    nvrtc_only: bool,
    /// What the GPU offers the kernels' schedules: clusters, and Hopper's copies and tensor
    /// cores where the kernels are built for them.
    features: dt_core::signature::GpuFeatures,
    modules: Vec<OnceLock<std::result::Result<Loaded, String>>>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
}

/// Live [`Shared`] per (context, NVRTC only).
static REGISTRY: Mutex<Vec<(usize, bool, Weak<Shared>)>> = Mutex::new(Vec::new());

fn shared_for(ctx: &Arc<CudaContext>, nvrtc_only: bool) -> Arc<Shared> {
    let key = ctx.cu_ctx() as usize;
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    reg.retain(|(_, _, w)| w.strong_count() > 0);
    if let Some(s) = reg.iter().find(|(k, n, _)| *k == key && *n == nvrtc_only).and_then(|(_, _, w)| w.upgrade()) {
        return s;
    }
    let s = Arc::new(Shared {
        ctx: ctx.clone(),
        nvrtc_only,
        features: features(ctx, nvrtc_only),
        modules: SPECS.iter().map(|_| OnceLock::new()).collect(),
        functions: Mutex::new(HashMap::new()),
    });
    reg.push((key, nvrtc_only, Arc::downgrade(&s)));
    s
}

/// What the GPU of `ctx` offers the kernels: its features, as far as the code it runs has them
/// (NVRTC compiles for the GPU's own architecture, `compute_90a` on sm_90): Hopper's only where
/// that is sm_90a code, clusters only where it is built for sm_90 or newer
/// ([`crate::fatbin::code_arch`]: a default build runs its compute_80 PTX on Blackwell GPUs).
fn features(ctx: &Arc<CudaContext>, nvrtc_only: bool) -> dt_core::signature::GpuFeatures {
    let mut f = dt_cuda::features(ctx);
    if nvrtc_only || NVCC_ARCHS.is_empty() {
        return f;
    }
    let code = ctx.compute_capability().ok().and_then(|(major, minor)| crate::fatbin::code_arch(NVCC_ARCHS, major as u32, minor as u32));
    f.hopper &= code.is_some_and(crate::fatbin::Arch::is_sm90a);
    if !code.is_some_and(crate::fatbin::Arch::has_clusters) {
        f.max_cluster = 0;
    }
    f
}

fn force_nvrtc_from_env() -> bool {
    std::env::var("DT_FORCE_NVRTC").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A GPU to run kernels on: a CUDA context, a stream the ops enqueue on, and the kernels loaded
/// into the context. Cheap to clone (clones share the stream); [`Gpu::fork`] makes a handle with
/// its own stream that shares the loaded kernels.
///
/// The ops are asynchronous: they enqueue on the stream and return; [`DeviceTensor::to_host`] or
/// [`Gpu::synchronize`] waits.
#[derive(Clone)]
pub struct Gpu {
    shared: Arc<Shared>,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.shared.ctx.ordinal())
            .field("nvrtc_only", &self.shared.nvrtc_only)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// GPU 0, its default stream. `DT_FORCE_NVRTC=1` makes it compile the kernels with NVRTC
    /// even where a fatbin was built. Fails (never panics) where there is no driver or no GPU.
    pub fn new() -> Result<Gpu> {
        Gpu::open(0, force_nvrtc_from_env())
    }

    /// GPU `ordinal`, its default stream (honours `DT_FORCE_NVRTC` as [`Gpu::new`]).
    pub fn with_ordinal(ordinal: usize) -> Result<Gpu> {
        Gpu::open(ordinal, force_nvrtc_from_env())
    }

    /// GPU 0, compiling every kernel from the embedded CUDA C with NVRTC, never from the fatbin.
    pub fn with_nvrtc() -> Result<Gpu> {
        Gpu::open(0, true)
    }

    /// A handle that enqueues on `stream` (of any context), e.g. one shared with other code.
    pub fn from_stream(stream: Arc<CudaStream>) -> Gpu {
        Gpu { shared: shared_for(stream.context(), force_nvrtc_from_env()), stream }
    }

    fn open(ordinal: usize, nvrtc_only: bool) -> Result<Gpu> {
        // SAFETY: only tries to open the driver library.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(Error::Unavailable("the CUDA driver library (libcuda) was not found".into()));
        }
        let ctx = catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| Error::Unavailable("the CUDA driver library could not be loaded".into()))?
            .map_err(Error::driver(format!("opening GPU {ordinal}")))?;
        let stream = ctx.default_stream();
        Ok(Gpu { shared: shared_for(&ctx, nvrtc_only), stream })
    }

    /// A handle on the same context with a new stream; the loaded kernels are shared.
    pub fn fork(&self) -> Result<Gpu> {
        let stream = self.shared.ctx.new_stream().map_err(Error::driver("creating a stream"))?;
        Ok(Gpu { shared: self.shared.clone(), stream })
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.shared.ctx
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.shared.ctx.ordinal()
    }

    /// The device's name.
    pub fn name(&self) -> Result<String> {
        self.shared.ctx.name().map_err(Error::driver("reading the device name"))
    }

    /// Waits until everything enqueued on the stream has run; reports a failed kernel.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(Error::driver("waiting for the stream"))
    }

    /// What the GPU offers that the kernels may use.
    pub(crate) fn device(&self) -> Device {
        Device { features: self.shared.features }
    }

    /// Whether the fatbin was built (nvcc found at build time), and for which architectures.
    pub fn fatbin_archs() -> Option<&'static str> {
        Some(NVCC_ARCHS).filter(|a| !a.is_empty())
    }

    /// Loads the kernels of `spec` (e.g. `"matmul"`) if they are not yet loaded, and says from
    /// where they came.
    pub fn module_source(&self, spec: &str) -> Result<ModuleSource> {
        let i = crate::registry::spec_index(spec)?;
        Ok(self.loaded(i)?.source)
    }

    /// A new contiguous tensor of zeros, e.g. the output of an `*_into` op.
    pub fn zeros<T: Element>(&self, shape: impl Into<Vec<usize>>) -> Result<DeviceTensor<T>> {
        let shape = shape.into();
        let strides = contiguous_strides(&shape);
        let n = layout::check(&|| "device tensor".to_string(), &shape, &strides, usize::MAX)?;
        let buf = self
            .stream
            .alloc_zeros::<T::Storage>(n.max(1))
            .map_err(Error::driver(format!("allocating a {} tensor of shape {shape:?}", T::DTYPE)))?;
        Ok(DeviceTensor { buf: Arc::new(buf), shape, strides, _t: PhantomData })
    }

    /// Uploads a contiguous tensor (see [`DeviceTensor::from_host`]).
    pub fn upload<T: Element>(&self, shape: impl Into<Vec<usize>>, data: &[T]) -> Result<DeviceTensor<T>> {
        DeviceTensor::from_host(self, shape, data)
    }

    fn loaded(&self, spec_index: usize) -> Result<&Loaded> {
        let spec: &'static SpecData = SPECS[spec_index];
        let cell = &self.shared.modules[spec_index];
        cell.get_or_init(|| self.shared.load(spec)).as_ref().map_err(|msg| Error::Compile { spec: spec.name, msg: msg.clone() })
    }

    /// The kernel function `symbol` of spec `spec_index`, with its launch parameters.
    fn function(&self, spec_index: usize, symbol: &str) -> Result<(CudaFunction, &'static LaunchInfo)> {
        let spec: &'static SpecData = SPECS[spec_index];
        let row = spec.launch_row(symbol).ok_or_else(|| Error::Internal(format!("no CUDA kernel `{symbol}` in spec `{}`", spec.name)))?;
        if let Some(f) = self.shared.functions.lock().unwrap_or_else(|e| e.into_inner()).get(row.symbol.as_str()) {
            return Ok((f.clone(), row));
        }
        let module = &self.loaded(spec_index)?.module;
        let f = module.load_function(&row.symbol).map_err(Error::driver(format!("finding kernel `{}`", row.symbol)))?;
        dt_cuda::configure(&f, row.shared_bytes, row.cluster).map_err(Error::driver(format!(
            "allowing kernel `{}` {} bytes of shared memory and clusters of {}",
            row.symbol, row.shared_bytes, row.cluster
        )))?;
        self.shared.functions.lock().unwrap_or_else(|e| e.into_inner()).insert(row.symbol.as_str(), f.clone());
        Ok((f, row))
    }
}

impl Shared {
    /// Loads the kernels of `spec`: the fatbin if there is one (and NVRTC is not forced), else
    /// (or if the fatbin does not load, e.g. no code for this GPU) the CUDA C through NVRTC.
    fn load(&self, spec: &'static SpecData) -> std::result::Result<Loaded, String> {
        let mut note = String::new();
        if !self.nvrtc_only {
            if let Some(image) = spec.fatbin {
                match self.ctx.load_module(cudarc::nvrtc::Ptx::from_binary(image.to_vec())) {
                    Ok(module) => return Ok(Loaded { module, source: ModuleSource::Fatbin }),
                    Err(e) => note = format!("the fatbin built for {NVCC_ARCHS} did not load ({e}); "),
                }
            }
        }
        let (major, minor) = self.ctx.compute_capability().map_err(|e| format!("{note}reading the compute capability: {e}"))?;
        // SAFETY: only tries to open the NVRTC library.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(format!("{note}the NVRTC library (libnvrtc) was not found, and it is needed to compile the kernels (or build with nvcc installed to embed a fatbin)"));
        }
        let opts = cudarc::nvrtc::CompileOptions {
            arch: Some(arch_name(&dt_cuda::nvrtc_arch(major, minor))),
            options: vec!["--std=c++17".into()],
            name: Some(format!("{}.cu", spec.name)),
            ..Default::default()
        };
        let ptx = catch_unwind(AssertUnwindSafe(|| cudarc::nvrtc::compile_ptx_with_opts(spec.cuda, opts)))
            .map_err(|_| format!("{note}the NVRTC library could not be loaded"))?
            .map_err(|e| format!("{note}{}", nvrtc_message(&e)))?;
        let module = self.ctx.load_module(ptx).map_err(|e| format!("{note}loading the NVRTC output: {e}"))?;
        Ok(Loaded { module, source: ModuleSource::Nvrtc })
    }
}

fn nvrtc_message(e: &cudarc::nvrtc::CompileError) -> String {
    match e {
        cudarc::nvrtc::CompileError::CompileError { nvrtc, options, log } => {
            format!("NVRTC failed ({nvrtc:?}) with options {options:?}:\n{}", log.to_string_lossy())
        }
        other => format!("NVRTC: {other:?}"),
    }
}

/// An architecture name for NVRTC, interned.
fn arch_name(name: &str) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.push(n);
    n
}

/// A tensor in GPU memory: a buffer, a shape and strides (in elements). Views made by
/// [`DeviceTensor::transpose`] or [`DeviceTensor::permute`] share the buffer. Results of the ops
/// are contiguous.
pub struct DeviceTensor<T: Element> {
    buf: Arc<CudaSlice<T::Storage>>,
    shape: Vec<usize>,
    strides: Vec<usize>,
    _t: PhantomData<T>,
}

impl<T: Element> Clone for DeviceTensor<T> {
    /// Another view of the same buffer (no copy).
    fn clone(&self) -> Self {
        DeviceTensor { buf: self.buf.clone(), shape: self.shape.clone(), strides: self.strides.clone(), _t: PhantomData }
    }
}

impl<T: Element> std::fmt::Debug for DeviceTensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceTensor")
            .field("dtype", &T::DTYPE)
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .finish_non_exhaustive()
    }
}

impl<T: Element> DeviceTensor<T> {
    /// Uploads `data`, the row-major elements of `shape`, on `gpu`'s stream.
    pub fn from_host(gpu: &Gpu, shape: impl Into<Vec<usize>>, data: &[T]) -> Result<Self> {
        let shape = shape.into();
        let strides = layout::contiguous("device tensor", &shape, data.len())?;
        Self::upload(gpu, shape, strides, data)
    }

    /// Uploads `data` and views it with `shape` and `strides`; every element the view reaches
    /// must lie in `data`.
    pub fn from_host_strided(gpu: &Gpu, shape: impl Into<Vec<usize>>, strides: impl Into<Vec<usize>>, data: &[T]) -> Result<Self> {
        let (shape, strides) = (shape.into(), strides.into());
        layout::check(&|| "device tensor".to_string(), &shape, &strides, data.len())?;
        Self::upload(gpu, shape, strides, data)
    }

    /// Uploads a host tensor, keeping its strides.
    pub fn from_host_tensor(gpu: &Gpu, t: &crate::HostTensor<T>) -> Result<Self> {
        Self::from_host_strided(gpu, t.shape(), t.strides(), t.data())
    }

    fn upload(gpu: &Gpu, shape: Vec<usize>, strides: Vec<usize>, data: &[T]) -> Result<Self> {
        let buf = if data.is_empty() {
            // A zero-byte allocation is an error for the driver; keep one element instead.
            gpu.stream.alloc_zeros::<T::Storage>(1)
        } else {
            gpu.stream.clone_htod(T::as_storage(data))
        }
        .map_err(Error::driver(format!("uploading a {} tensor of shape {shape:?}", T::DTYPE)))?;
        Ok(DeviceTensor { buf: Arc::new(buf), shape, strides, _t: PhantomData })
    }

    /// Downloads the elements in row-major order of the shape (waits for the stream that made
    /// the buffer).
    pub fn to_host(&self) -> Result<Vec<T>> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        let raw = self.buf.stream().clone_dtoh(&*self.buf).map_err(Error::driver(format!(
            "downloading a {} tensor of shape {:?}",
            T::DTYPE,
            self.shape
        )))?;
        Ok(layout::gather(&T::from_storage_vec(raw), &self.shape, &self.strides))
    }

    /// Downloads into a contiguous host tensor.
    pub fn to_host_tensor(&self) -> Result<crate::HostTensor<T>> {
        Ok(crate::HostTensor::from_parts(self.to_host()?, self.shape.clone()))
    }

    layout::view_accessors!();

    /// The buffer under the view.
    pub fn buffer(&self) -> &CudaSlice<T::Storage> {
        &self.buf
    }

    /// A view with axes `a` and `b` swapped (no copy): `a.transpose(0, 1)` of a `[m, k]` matrix
    /// is its `[k, m]` transpose.
    pub fn transpose(&self, a: usize, b: usize) -> Result<Self> {
        let axes = layout::swap_axes("device tensor", self.shape.len(), a, b)?;
        self.permute(&axes)
    }

    /// A view with the axes reordered: axis `i` of the result is axis `axes[i]` of `self`.
    pub fn permute(&self, axes: &[usize]) -> Result<Self> {
        let (shape, strides) = layout::permute(&|| "device tensor".to_string(), &self.shape, &self.strides, axes)?;
        Ok(DeviceTensor { buf: self.buf.clone(), shape, strides, _t: PhantomData })
    }
}

impl crate::backend::sealed::Sealed for Gpu {}

impl crate::backend::Backend for Gpu {
    type Tensor<T: Element> = DeviceTensor<T>;

    fn view<T: Element>(t: &DeviceTensor<T>) -> (&[usize], &[usize]) {
        (&t.shape, &t.strides)
    }

    fn device(&self) -> Device {
        Gpu::device(self)
    }

    fn new_output<T: Element>(&self, op: &OpDesc, shape: &[usize]) -> Result<DeviceTensor<T>> {
        let n = layout::element_count(shape);
        // SAFETY: the kernel writes every element of the output before anything reads it; an
        // empty output is never read.
        let buf = unsafe { self.stream.alloc::<T::Storage>(n.max(1)) }
            .map_err(Error::driver(format!("{}: allocating the output {shape:?}", op.op)))?;
        Ok(DeviceTensor { buf: Arc::new(buf), strides: contiguous_strides(shape), shape: shape.to_vec(), _t: PhantomData })
    }

    fn owns_buffer<T: Element>(t: &mut DeviceTensor<T>) -> bool {
        Arc::get_mut(&mut t.buf).is_some()
    }

    fn launch<T: Element>(&self, op: &OpDesc, inputs: &[&DeviceTensor<T>], plan: Plan, out: &mut DeviceTensor<T>) -> Result<()> {
        launch(self, op, inputs, plan, out)
    }
}

/// The symbol of the kernel that `op` on `inputs` and `scalars` launches on `gpu` (its
/// size class and twin, e.g. `dt_mm_90a_f16` on an H100), without launching it.
pub(crate) fn launch_symbol<T: Element>(gpu: &Gpu, op: &OpDesc, inputs: &[&DeviceTensor<T>], scalars: &[f32]) -> Result<String> {
    let shapes: Vec<(&[usize], &[usize])> = inputs.iter().map(|t| (t.shape(), t.strides())).collect();
    let plan = plan(op, T::DTYPE, &shapes, scalars, gpu.device())?;
    let mut args = plan.args;
    for (slot, &j) in plan.slots.iter().enumerate() {
        args.inputs[slot] = inputs[j].buf.device_ptr(&gpu.stream).0;
    }
    // A new output is a fresh allocation: aligned as every buffer is.
    args.output = args.inputs[0] & !255;
    Ok(plan.launch_symbol(&args, T::DTYPE, |s| plan.spec.launch_row(s).is_some()))
}

/// Checks that every tensor lives on `gpu`'s context and launches the planned kernel into `out`
/// (nothing when the output is empty).
fn launch<T: Element>(gpu: &Gpu, op: &OpDesc, inputs: &[&DeviceTensor<T>], plan: Plan, out: &mut DeviceTensor<T>) -> Result<()> {
    let ctx = gpu.shared.ctx.cu_ctx();
    let args = inputs.iter().zip(op.inputs).map(|(t, desc)| (*t, desc.arg)).chain([(&*out, "out")]);
    for (t, arg) in args {
        let theirs = t.buf.stream().context();
        if theirs.cu_ctx() != ctx {
            return Err(Error::WrongDevice { op: op.op, arg, tensor_device: theirs.ordinal(), gpu_device: gpu.ordinal() });
        }
    }
    if plan.programs == 0 {
        return Ok(());
    }
    let align = std::mem::align_of::<T::Storage>();
    let mut args = plan.args;
    // The guards make the stream wait for pending writes of the inputs and record this launch
    // as a read of them (and a write of the output) when dropped after the launch, so that
    // buffers used on other streams are not freed or overwritten too early.
    let mut guards = Vec::with_capacity(plan.slots.len());
    for (slot, &j) in plan.slots.iter().enumerate() {
        let (ptr, guard) = inputs[j].buf.device_ptr(&gpu.stream);
        if !(ptr as usize).is_multiple_of(align) {
            return Err(Error::Misaligned { op: op.op, arg: op.inputs[j].arg, addr: ptr, align });
        }
        args.inputs[slot] = ptr;
        guards.push(guard);
    }
    let buf = Arc::get_mut(&mut out.buf).ok_or(Error::SharedOutput { op: op.op })?;
    let (out_ptr, out_guard) = buf.device_ptr_mut(&gpu.stream);
    args.output = out_ptr;
    let symbol = plan.launch_symbol(&args, T::DTYPE, |s| plan.spec.launch_row(s).is_some());
    let (f, row) = gpu.function(plan.spec_index, &symbol)?;
    plan.check_admits(op, &args, T::DTYPE, &symbol)?;
    let param = dt_cuda::KernelParam::new(plan.kernel, &args, T::DTYPE, &row.tensor_maps).map_err(Error::Internal)?;
    let grid = dt_cuda::grid(&gpu.shared.ctx, plan.programs, row.persistent).map_err(Error::driver("reading the multiprocessor count"))?;
    let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (row.threads, 1, 1), shared_mem_bytes: row.shared_bytes };
    let mut launch = gpu.stream.launch_builder(&f);
    param.push(&mut launch);
    // SAFETY: the kernel takes one parameter, `dt_args_t` (or `dt_tma_args_t` behind the tensor
    // maps of its launch row), in the layout `param` was packed in for it (`GpuArgs::of` the
    // kernel it was built from; each map encoded from the same arguments). Every input pointer refers to the live
    // buffer of a `DeviceTensor` whose shape and strides reach only elements inside it (checked
    // when it was made), and the kernel reads inputs only at the sizes and strides in `args`,
    // which `plan` took from those tensors. The output pointer is the buffer of `out`, whose
    // shape is the result's and whose strides (in `args`) reach only elements inside it, each
    // once. Grid, block and shared memory are what the emitter computed for this kernel.
    unsafe { launch.launch(cfg) }.map_err(Error::driver(format!("{}: launching `{symbol}` on {} programs", op.op, plan.programs)))?;
    drop(out_guard);
    drop(guards);
    Ok(())
}
