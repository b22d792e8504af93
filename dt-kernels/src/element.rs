//! Element types of tensors: `f32`, [`half::f16`] and [`half::bf16`].

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use dt_core::DType;
use half::slice::HalfFloatSliceExt;
use half::vec::HalfBitsVecExt;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type the kernels are compiled for. Sealed: implemented for `f32`, [`half::f16`]
/// and [`half::bf16`] only.
pub trait Element: sealed::Sealed + Copy + Default + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    /// The DT element type.
    const DTYPE: DType;
    /// How the value is stored on the device: `f32` itself, or the 16 bits of a half type.
    type Storage: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + Unpin + std::fmt::Debug + 'static;
    fn to_f32(self) -> f32;
    /// Rounds to nearest, ties to even.
    fn from_f32(v: f32) -> Self;
    /// The same memory, seen as storage.
    fn as_storage(s: &[Self]) -> &[Self::Storage];
    /// The same memory, seen as elements.
    fn from_storage_vec(v: Vec<Self::Storage>) -> Vec<Self>;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    type Storage = f32;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
    fn as_storage(s: &[Self]) -> &[f32] {
        s
    }
    fn from_storage_vec(v: Vec<f32>) -> Vec<Self> {
        v
    }
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    type Storage = u16;
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
    fn as_storage(s: &[Self]) -> &[u16] {
        s.reinterpret_cast()
    }
    fn from_storage_vec(v: Vec<u16>) -> Vec<Self> {
        v.reinterpret_into()
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    type Storage = u16;
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
    fn as_storage(s: &[Self]) -> &[u16] {
        s.reinterpret_cast()
    }
    fn from_storage_vec(v: Vec<u16>) -> Vec<Self> {
        v.reinterpret_into()
    }
}
