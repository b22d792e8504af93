//! [`HipTensor`]: a buffer in AMD GPU memory, a shape and strides (in elements).

use super::sys::check;
use super::Hip;
use crate::element::Element;
use crate::error::Result;
use crate::layout::{self, contiguous_strides};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

/// Device memory from `hipMalloc`, freed on drop. Holds the handle, so the stream and modules
/// outlive every buffer.
pub(super) struct Buffer {
    pub hip: Hip,
    pub ptr: *mut c_void,
    pub bytes: usize,
}

// SAFETY: a device pointer is an address in the device's memory, usable from any thread.
unsafe impl Send for Buffer {}
// SAFETY: as above; `Buffer` has no interior mutability on the host.
unsafe impl Sync for Buffer {}

impl Drop for Buffer {
    fn drop(&mut self) {
        let lib = self.hip.shared.lib;
        // SAFETY: `ptr` came from `hipMalloc` and nothing else frees it; `hipFree` waits for the
        // device, so no enqueued kernel still uses it. Errors cannot be reported from a drop.
        unsafe {
            lib.hipSetDevice(self.hip.shared.device);
            lib.hipFree(self.ptr);
        }
    }
}

impl Buffer {
    /// `bytes` (at least 1) of uninitialized device memory.
    fn alloc(hip: &Hip, bytes: usize, what: impl FnOnce() -> String) -> Result<Buffer> {
        hip.make_current()?;
        let lib = hip.shared.lib;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out pointer; a zero-byte request is avoided.
        check(lib, unsafe { lib.hipMalloc(&mut ptr, bytes.max(1)) }, || format!("allocating {bytes} bytes for {}", what()))?;
        Ok(Buffer { hip: hip.clone(), ptr, bytes: bytes.max(1) })
    }
}

/// A tensor in AMD GPU memory: a buffer, a shape and strides (in elements). Views made by
/// [`HipTensor::transpose`] or [`HipTensor::permute`] share the buffer. Results of the ops are
/// contiguous.
pub struct HipTensor<T: Element> {
    pub(super) buf: Arc<Buffer>,
    shape: Vec<usize>,
    strides: Vec<usize>,
    _t: PhantomData<T>,
}

impl<T: Element> Clone for HipTensor<T> {
    /// Another view of the same buffer (no copy).
    fn clone(&self) -> Self {
        HipTensor { buf: self.buf.clone(), shape: self.shape.clone(), strides: self.strides.clone(), _t: PhantomData }
    }
}

impl<T: Element> std::fmt::Debug for HipTensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipTensor")
            .field("dtype", &T::DTYPE)
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .finish_non_exhaustive()
    }
}

impl<T: Element> HipTensor<T> {
    /// Uploads `data`, the row-major elements of `shape`.
    pub fn from_host(hip: &Hip, shape: impl Into<Vec<usize>>, data: &[T]) -> Result<Self> {
        let shape = shape.into();
        let strides = layout::contiguous("HIP tensor", &shape, data.len())?;
        Self::upload(hip, shape, strides, data)
    }

    /// Uploads `data` and views it with `shape` and `strides`; every element the view reaches
    /// must lie in `data`.
    pub fn from_host_strided(hip: &Hip, shape: impl Into<Vec<usize>>, strides: impl Into<Vec<usize>>, data: &[T]) -> Result<Self> {
        let (shape, strides) = (shape.into(), strides.into());
        layout::check(&|| "HIP tensor".to_string(), &shape, &strides, data.len())?;
        Self::upload(hip, shape, strides, data)
    }

    /// Uploads a host tensor, keeping its strides.
    pub fn from_host_tensor(hip: &Hip, t: &crate::HostTensor<T>) -> Result<Self> {
        Self::from_host_strided(hip, t.shape(), t.strides(), t.data())
    }

    /// A new contiguous tensor of zeros.
    pub fn zeros(hip: &Hip, shape: impl Into<Vec<usize>>) -> Result<Self> {
        let shape = shape.into();
        let strides = contiguous_strides(&shape);
        let n = layout::check(&|| "HIP tensor".to_string(), &shape, &strides, usize::MAX)?;
        let bytes = n * std::mem::size_of::<T::Storage>();
        let buf = Buffer::alloc(hip, bytes, || format!("a {} tensor of shape {shape:?}", T::DTYPE))?;
        let lib = hip.shared.lib;
        // SAFETY: `buf.ptr` holds `buf.bytes` bytes.
        check(lib, unsafe { lib.hipMemsetD8(buf.ptr, 0, buf.bytes) }, || format!("zeroing a {} tensor of shape {shape:?}", T::DTYPE))?;
        Ok(HipTensor { buf: Arc::new(buf), shape, strides, _t: PhantomData })
    }

    fn upload(hip: &Hip, shape: Vec<usize>, strides: Vec<usize>, data: &[T]) -> Result<Self> {
        let storage = T::as_storage(data);
        let bytes = std::mem::size_of_val(storage);
        let what = || format!("a {} tensor of shape {shape:?}", T::DTYPE);
        let buf = Buffer::alloc(hip, bytes, what)?;
        if bytes > 0 {
            let lib = hip.shared.lib;
            // SAFETY: `buf.ptr` holds at least `bytes` bytes and `storage` is `bytes` long; the copy
            // is synchronous (the runtime only reads `storage` during the call).
            let code = unsafe { lib.hipMemcpyHtoD(buf.ptr, storage.as_ptr() as *mut c_void, bytes) };
            check(lib, code, || format!("uploading {}", what()))?;
        }
        Ok(HipTensor { buf: Arc::new(buf), shape, strides, _t: PhantomData })
    }

    /// Downloads the elements in row-major order of the shape (waits for the handle's stream).
    pub fn to_host(&self) -> Result<Vec<T>> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        let hip = &self.buf.hip;
        hip.synchronize()?;
        let n = self.buf.bytes / std::mem::size_of::<T::Storage>();
        let mut raw: Vec<T::Storage> = vec![T::Storage::default(); n];
        let lib = hip.shared.lib;
        // SAFETY: `raw` holds `n * size_of::<Storage>() <= bytes` bytes, all of them in the buffer.
        let code = unsafe { lib.hipMemcpyDtoH(raw.as_mut_ptr() as *mut c_void, self.buf.ptr, n * std::mem::size_of::<T::Storage>()) };
        check(lib, code, || format!("downloading a {} tensor of shape {:?}", T::DTYPE, self.shape))?;
        Ok(layout::gather(&T::from_storage_vec(raw), &self.shape, &self.strides))
    }

    /// Downloads into a contiguous host tensor.
    pub fn to_host_tensor(&self) -> Result<crate::HostTensor<T>> {
        Ok(crate::HostTensor::from_parts(self.to_host()?, self.shape.clone()))
    }

    layout::view_accessors!();

    /// The device address of the buffer under the view.
    pub fn device_ptr(&self) -> u64 {
        self.buf.ptr as u64
    }

    /// A view with axes `a` and `b` swapped (no copy).
    pub fn transpose(&self, a: usize, b: usize) -> Result<Self> {
        let axes = layout::swap_axes("HIP tensor", self.shape.len(), a, b)?;
        self.permute(&axes)
    }

    /// A view with the axes reordered: axis `i` of the result is axis `axes[i]` of `self`.
    pub fn permute(&self, axes: &[usize]) -> Result<Self> {
        let (shape, strides) = layout::permute(&|| "HIP tensor".to_string(), &self.shape, &self.strides, axes)?;
        Ok(HipTensor { buf: self.buf.clone(), shape, strides, _t: PhantomData })
    }

    pub(super) fn new_uninit(hip: &Hip, shape: Vec<usize>, what: impl FnOnce() -> String) -> Result<Self> {
        let n = layout::element_count(&shape);
        let buf = Buffer::alloc(hip, n * std::mem::size_of::<T::Storage>(), what)?;
        Ok(HipTensor { buf: Arc::new(buf), strides: contiguous_strides(&shape), shape, _t: PhantomData })
    }
}
