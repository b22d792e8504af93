//! The HIP runtime, bound by bindgen from `hip_runtime_api.h` at build time (`OUT_DIR/hip_sys.rs`)
//! and loaded at run time with libloading, so that a binary built with the `hip` feature starts
//! on machines without ROCm and reports [`Error::Unavailable`] there.
//!
//! Architecture Invariant: the library is opened once per process and never closed (the handle
//! lives in a `static`), so every function pointer, module and buffer stays valid for as long as
//! anything may use it.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, clippy::all)]

use crate::error::{Error, Result};
use std::ffi::CStr;
use std::sync::OnceLock;

mod bindings {
    #![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/hip_sys.rs"));
}

pub(crate) use bindings::*;

/// The device properties struct of the headers the crate was built against (ROCm 6 renamed it,
/// keeping the old name for the old layout).
#[cfg(dt_hip_props_r0600)]
pub(crate) type DeviceProp = bindings::hipDeviceProp_tR0600;
#[cfg(not(dt_hip_props_r0600))]
pub(crate) type DeviceProp = bindings::hipDeviceProp_t;

impl HipLib {
    /// `hipGetDeviceProperties` under the name the headers gave it.
    ///
    /// # Safety
    /// `prop` must point to a writable `DeviceProp`.
    pub(crate) unsafe fn device_properties(&self, prop: *mut DeviceProp, device: i32) -> hipError_t {
        #[cfg(dt_hip_props_r0600)]
        return self.hipGetDevicePropertiesR0600(prop, device);
        #[cfg(not(dt_hip_props_r0600))]
        return self.hipGetDeviceProperties(prop, device);
    }
}

/// Where libamdhip64 is looked for: `DT_HIP_LIBRARY` if set, then the loader's search path
/// (plain and versioned names), then `$ROCM_PATH/lib` and `/opt/rocm/lib`.
fn candidates() -> Vec<String> {
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("DT_HIP_LIBRARY") {
        v.push(p.to_string_lossy().into_owned());
    }
    for name in ["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"] {
        v.push(name.to_string());
    }
    for root in std::env::var("ROCM_PATH").ok().into_iter().chain(["/opt/rocm".to_string()]) {
        v.push(format!("{root}/lib/libamdhip64.so"));
    }
    v
}

/// The HIP runtime, opened and initialized once per process.
pub(crate) fn lib() -> Result<&'static HipLib> {
    static LIB: OnceLock<std::result::Result<HipLib, String>> = OnceLock::new();
    LIB.get_or_init(open).as_ref().map_err(|msg| Error::Unavailable(msg.clone()))
}

fn open() -> std::result::Result<HipLib, String> {
    let mut tried = Vec::new();
    for path in candidates() {
        // SAFETY: loading libamdhip64 runs its initializers, which only set up the runtime; every
        // symbol the bindings use is resolved here (require_all), with the signatures of the
        // headers they were generated from.
        match unsafe { HipLib::new(path.as_str()) } {
            Ok(lib) => {
                // SAFETY: plain runtime call with a flag argument.
                let code = unsafe { lib.hipInit(0) };
                if code != hipSuccess {
                    return Err(format!("hipInit failed ({}) with {path}: no AMD GPU, or no access to /dev/kfd", error_text(&lib, code)));
                }
                let mut count = 0;
                // SAFETY: `count` is a valid out pointer.
                let code = unsafe { lib.hipGetDeviceCount(&mut count) };
                if code != hipSuccess || count <= 0 {
                    return Err(format!("no AMD GPU found by {path} ({})", error_text(&lib, code)));
                }
                return Ok(lib);
            }
            Err(e) => tried.push(format!("{path}: {e}")),
        }
    }
    Err(format!("the HIP runtime (libamdhip64) could not be loaded; install ROCm or set DT_HIP_LIBRARY. Tried: {}", tried.join("; ")))
}

/// `NAME: description` of a HIP error code.
pub(crate) fn error_text(lib: &HipLib, code: hipError_t) -> String {
    // SAFETY: both calls return pointers to static strings of the runtime (or null).
    let (name, msg) = unsafe { (lib.hipGetErrorName(code), lib.hipGetErrorString(code)) };
    let s = |p: *const std::os::raw::c_char| {
        if p.is_null() {
            String::from("?")
        } else {
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    format!("{}: {}", s(name), s(msg))
}

/// `Ok` for `hipSuccess`, else [`Error::Hip`] with `context`.
pub(crate) fn check(lib: &HipLib, code: hipError_t, context: impl FnOnce() -> String) -> Result<()> {
    if code == hipSuccess {
        return Ok(());
    }
    Err(Error::Hip { context: context(), code: code as i32, msg: error_text(lib, code) })
}
