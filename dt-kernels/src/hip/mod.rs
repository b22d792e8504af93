//! The HIP side (feature `hip`): a [`Hip`] handle (device, stream, loaded modules),
//! [`HipTensor`], and the ops (`dt_kernels::hip::matmul`, ...), with the argument checks of the
//! CUDA and CPU ops (both go through `plan::plan`).
//!
//! The kernels are the code objects that the build script compiled with hipcc, one per
//! architecture of `HIP_ARCHS` (default gfx90a and gfx942) that the installed hipcc supports;
//! the handle picks the one whose architecture is the device's (`gcnArchName`). There is no
//! run-time compiler fallback (no hipRTC): a device whose architecture was not built is an error
//! naming the built ones. The HIP runtime (libamdhip64) is loaded at run time, so a binary built
//! with the feature starts anywhere and reports [`Error::Unavailable`] where there is no ROCm or
//! no AMD GPU.
//!
//! The ops are asynchronous: they enqueue on the handle's stream and return;
//! [`HipTensor::to_host`] and [`Hip::synchronize`] wait.

mod launch;
mod sys;
mod tensor;

/// The ops, the same functions as the CUDA ones (generic over [`crate::backend::Backend`]):
/// `hip::softmax(&hip, &x)` is `dt_kernels::softmax::softmax(&hip, &x)`.
pub use crate::attention::{attention, attention_into};
pub use crate::dyt::{dyt, dyt_into};
pub use crate::layernorm::{layernorm, layernorm_into};
pub use crate::matmul::{matmul, matmul_into};
pub use crate::mm_leaky_relu::{mm_leaky_relu, mm_leaky_relu_into};
pub use crate::registry::HipBuild;
pub use crate::softmax::{softmax, softmax_into};
pub use tensor::HipTensor;

use crate::error::{Error, Result};
use crate::registry::{SpecData, HIP_BUILD, SPECS};
use dt_core::manifest::LaunchInfo;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};
use sys::{check, HipLib};

/// What the build script did for HIP: the hipcc it used, the architectures asked for and built.
pub fn build_info() -> HipBuild {
    HIP_BUILD
}

/// The code object of spec `spec` (e.g. `"matmul"`) for architecture `arch` (as built, e.g.
/// `"gfx90a"`), if the build made one.
pub fn code_object(spec: &str, arch: &str) -> Option<&'static [u8]> {
    let spec = SPECS.iter().find(|s| s.name == spec)?;
    spec.hip_objects.iter().find(|(a, _)| *a == arch).map(|(_, bytes)| *bytes)
}

/// The built architecture whose code runs on a device reporting `device_arch` (`gcnArchName`,
/// e.g. `gfx90a:sramecc+:xnack-`): the same processor, with every target feature the build asked
/// for (`gfx90a:xnack+`) present on the device. An exact match wins.
pub fn select_arch<'a>(device_arch: &str, built: &[&'a str]) -> Option<&'a str> {
    if let Some(a) = built.iter().find(|a| **a == device_arch) {
        return Some(a);
    }
    let mut device = device_arch.split(':');
    let processor = device.next().unwrap_or("");
    let features: Vec<&str> = device.collect();
    built.iter().copied().find(|a| {
        let mut parts = a.split(':');
        parts.next() == Some(processor) && parts.all(|f| features.contains(&f))
    })
}

/// A HIP handle owns raw runtime handles; they may be used from any thread.
#[derive(Clone, Copy)]
struct Raw<T>(T);
// SAFETY: HIP streams, modules and functions are process-wide handles that the runtime lets any
// thread use; this crate never frees one while a `Shared` that holds it lives.
unsafe impl<T> Send for Raw<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Raw<T> {}

/// What the handles of one device share: the device, the loaded modules and functions.
struct Shared {
    lib: &'static HipLib,
    device: i32,
    arch: String,
    name: String,
    modules: Vec<OnceLock<std::result::Result<Raw<sys::hipModule_t>, String>>>,
    functions: Mutex<HashMap<&'static str, Raw<sys::hipFunction_t>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let lib = self.lib;
        // SAFETY: nothing else holds these modules: every handle, stream and tensor holds this
        // `Shared`, and it is being dropped. Errors cannot be reported from a drop.
        unsafe {
            lib.hipSetDevice(self.device);
            for m in self.modules.iter_mut().filter_map(|m| m.get_mut()).filter_map(|m| m.as_ref().ok()) {
                lib.hipModuleUnload(m.0);
            }
        }
    }
}

/// The stream a handle enqueues on; one this crate created is destroyed with its last handle.
struct Stream {
    shared: Arc<Shared>,
    raw: Raw<sys::hipStream_t>,
    owned: bool,
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let lib = self.shared.lib;
        // SAFETY: the stream was created by `Stream::create` and only this value destroys it;
        // every handle and tensor that enqueues on it holds this value. Errors cannot be
        // reported from a drop.
        unsafe {
            lib.hipSetDevice(self.shared.device);
            lib.hipStreamSynchronize(self.raw.0);
            lib.hipStreamDestroy(self.raw.0);
        }
    }
}

impl Stream {
    /// A new stream on the (current) device of `shared`.
    fn create(shared: &Arc<Shared>) -> Result<Arc<Stream>> {
        let (lib, device) = (shared.lib, shared.device);
        let mut stream = std::ptr::null_mut();
        // SAFETY: `stream` is a valid out pointer; the caller made the device current.
        check(lib, unsafe { lib.hipStreamCreate(&mut stream) }, || format!("creating a stream on device {device}"))?;
        Ok(Arc::new(Stream { shared: shared.clone(), raw: Raw(stream), owned: true }))
    }
}

/// An AMD GPU to run kernels on: the device, a stream the ops enqueue on, and the kernels loaded
/// for the device (each spec's module once, at first use). Cheap to clone (clones share the
/// stream and the modules); [`Hip::fork`] gives a handle on a new stream that shares the modules.
#[derive(Clone)]
pub struct Hip {
    shared: Arc<Shared>,
    stream: Arc<Stream>,
}

impl std::fmt::Debug for Hip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hip").field("device", &self.shared.device).field("arch", &self.shared.arch).finish_non_exhaustive()
    }
}

impl Hip {
    /// Device 0. Fails with [`Error::Unavailable`] (never panics) where the HIP runtime cannot be
    /// loaded or finds no AMD GPU.
    pub fn new() -> Result<Hip> {
        Hip::with_device(0)
    }

    /// Device `device` (HIP's ordinal).
    pub fn with_device(device: usize) -> Result<Hip> {
        let lib = sys::lib()?;
        let mut count = 0;
        // SAFETY: `count` is a valid out pointer.
        check(lib, unsafe { lib.hipGetDeviceCount(&mut count) }, || "counting the devices".into())?;
        if device >= count.max(0) as usize {
            return Err(Error::Unavailable(format!("AMD GPU {device} was asked for, but the HIP runtime sees {count}")));
        }
        let device = device as i32;
        // SAFETY: `device` is a valid ordinal.
        check(lib, unsafe { lib.hipSetDevice(device) }, || format!("selecting device {device}"))?;
        let mut prop = std::mem::MaybeUninit::<sys::DeviceProp>::zeroed();
        // SAFETY: `prop` points to a (zeroed) properties struct of the headers' layout.
        check(lib, unsafe { lib.device_properties(prop.as_mut_ptr(), device) }, || format!("reading the properties of device {device}"))?;
        // SAFETY: the call succeeded and filled the struct; the zeroed start is valid anyway.
        let prop = unsafe { prop.assume_init() };
        let text = |chars: &[std::os::raw::c_char]| {
            let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let (arch, name) = (text(&prop.gcnArchName), text(&prop.name));
        let shared = Arc::new(Shared {
            lib,
            device,
            arch,
            name,
            modules: SPECS.iter().map(|_| OnceLock::new()).collect(),
            functions: Mutex::new(HashMap::new()),
        });
        let stream = Stream::create(&shared)?;
        Ok(Hip { shared, stream })
    }

    /// A handle on the same device with a new stream; the loaded kernels are shared. Work on the
    /// two streams may overlap; order it with [`Hip::synchronize`].
    pub fn fork(&self) -> Result<Hip> {
        self.make_current()?;
        Ok(Hip { shared: self.shared.clone(), stream: Stream::create(&self.shared)? })
    }

    /// A handle on the same device that enqueues on `stream`, a stream of other code (e.g. a
    /// framework's current stream); the loaded kernels are shared, and the stream is not
    /// destroyed by this crate.
    ///
    /// # Safety
    /// `stream` must be a valid HIP stream of this handle's device, alive for as long as the
    /// returned handle, its clones or any tensor made with them.
    pub unsafe fn with_stream(&self, stream: *mut c_void) -> Hip {
        let stream = Stream { shared: self.shared.clone(), raw: Raw(stream as sys::hipStream_t), owned: false };
        Hip { shared: self.shared.clone(), stream: Arc::new(stream) }
    }

    /// The raw stream the handle enqueues on, for interoperation with other HIP code.
    pub fn raw_stream(&self) -> *mut c_void {
        self.stream.raw.0 as *mut c_void
    }

    /// The device's ordinal.
    pub fn device(&self) -> usize {
        self.shared.device as usize
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The device's architecture as the runtime reports it (`gcnArchName`, e.g.
    /// `gfx90a:sramecc+:xnack-`).
    pub fn arch(&self) -> &str {
        &self.shared.arch
    }

    /// Waits until everything enqueued on the stream has run; reports a failed kernel.
    pub fn synchronize(&self) -> Result<()> {
        self.make_current()?;
        let lib = self.shared.lib;
        // SAFETY: the stream lives as long as `self.stream`.
        check(lib, unsafe { lib.hipStreamSynchronize(self.stream.raw.0) }, || "waiting for the stream".into())
    }

    /// A new contiguous tensor of zeros, e.g. the output of an `*_into` op.
    pub fn zeros<T: crate::Element>(&self, shape: impl Into<Vec<usize>>) -> Result<HipTensor<T>> {
        HipTensor::zeros(self, shape)
    }

    /// Uploads a contiguous tensor (see [`HipTensor::from_host`]).
    pub fn upload<T: crate::Element>(&self, shape: impl Into<Vec<usize>>, data: &[T]) -> Result<HipTensor<T>> {
        HipTensor::from_host(self, shape, data)
    }

    /// Makes the handle's device current on this thread (HIP's current device is per thread).
    fn make_current(&self) -> Result<()> {
        let (lib, device) = (self.shared.lib, self.shared.device);
        // SAFETY: `device` was a valid ordinal when the handle was made.
        check(lib, unsafe { lib.hipSetDevice(device) }, || format!("selecting device {device}"))
    }

    fn same_device(&self, other: &Hip) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared) || self.shared.device == other.shared.device
    }

    fn same_stream(&self, other: &Hip) -> bool {
        Arc::ptr_eq(&self.stream, &other.stream) || self.stream.raw.0 == other.stream.raw.0
    }

    /// The module of spec `spec_index`, loaded at first use from the code object built for the
    /// device's architecture.
    fn module(&self, spec_index: usize) -> Result<sys::hipModule_t> {
        let spec: &'static SpecData = SPECS[spec_index];
        let cell = &self.shared.modules[spec_index];
        let loaded = cell.get_or_init(|| self.load(spec).map(Raw));
        loaded.as_ref().map(|m| m.0).map_err(|msg| Error::Compile { spec: spec.name, msg: msg.clone() })
    }

    fn load(&self, spec: &'static SpecData) -> std::result::Result<sys::hipModule_t, String> {
        let built: Vec<&str> = spec.hip_objects.iter().map(|(a, _)| *a).collect();
        let Some(arch) = select_arch(&self.shared.arch, &built) else {
            let processor = self.shared.arch.split(':').next().unwrap_or("");
            return Err(match HIP_BUILD.hipcc {
                None => "no HIP code objects were built (hipcc was not found when dt-kernels was built, or DT_KERNELS_NO_HIPCC was set); \
                         install ROCm, or set HIPCC, and rebuild"
                    .to_string(),
                Some(_) => format!(
                    "no HIP code object for this GPU's architecture {} (built for: {}); rebuild with HIP_ARCHS={processor}",
                    self.shared.arch,
                    if built.is_empty() { "none".to_string() } else { built.join(", ") }
                ),
            });
        };
        let image = spec.hip_objects.iter().find(|(a, _)| *a == arch).map(|(_, b)| *b).ok_or("code object vanished")?;
        let lib = self.shared.lib;
        let mut module = std::ptr::null_mut();
        // SAFETY: `image` is a complete code object (embedded, 64-byte aligned, 'static), and
        // `module` a valid out pointer; the device is current (the caller made it so).
        let code = unsafe { lib.hipModuleLoadData(&mut module, image.as_ptr() as *const c_void) };
        if code != sys::hipSuccess {
            return Err(format!("loading the code object for {arch}: {}", sys::error_text(lib, code)));
        }
        Ok(module)
    }

    /// The kernel `symbol` of spec `spec_index`, with its launch parameters.
    fn function(&self, spec_index: usize, symbol: &str) -> Result<(sys::hipFunction_t, &'static LaunchInfo)> {
        let spec: &'static SpecData = SPECS[spec_index];
        let row =
            spec.hip_launch_row(symbol).ok_or_else(|| Error::Internal(format!("no HIP kernel `{symbol}` in spec `{}`", spec.name)))?;
        if let Some(f) = self.shared.functions.lock().unwrap_or_else(|e| e.into_inner()).get(row.symbol.as_str()) {
            return Ok((f.0, row));
        }
        let module = self.module(spec_index)?;
        let lib = self.shared.lib;
        let name = CString::new(row.symbol.as_str()).map_err(|_| Error::Internal(format!("kernel symbol {:?} has a NUL", row.symbol)))?;
        let mut f = std::ptr::null_mut();
        // SAFETY: `module` is loaded and lives as long as `self.shared`; `name` is NUL-terminated.
        check(lib, unsafe { lib.hipModuleGetFunction(&mut f, module, name.as_ptr()) }, || format!("finding kernel `{}`", row.symbol))?;
        self.shared.functions.lock().unwrap_or_else(|e| e.into_inner()).insert(row.symbol.as_str(), Raw(f));
        Ok((f, row))
    }
}
