//! Host tensors: what the CPU entry points ([`crate::cpu`]) take and return.

use crate::element::Element;
use crate::error::Result;
use crate::layout::{self, contiguous_strides};

/// A tensor in host memory: its data, shape and strides (in elements). Any strides are accepted
/// as long as they stay inside the data, so a transposed view is just other strides over the
/// same data. Results of the CPU entry points are contiguous (row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor<T: Element> {
    data: Vec<T>,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

impl<T: Element> HostTensor<T> {
    /// A contiguous (row-major) tensor; `data` must have exactly the elements of `shape`.
    pub fn new(shape: impl Into<Vec<usize>>, data: Vec<T>) -> Result<Self> {
        let shape = shape.into();
        let strides = layout::contiguous("host tensor", &shape, data.len())?;
        Ok(HostTensor { data, shape, strides })
    }

    /// A view of `data` with explicit `strides`; every element it reaches must lie in `data`.
    pub fn from_strided(shape: impl Into<Vec<usize>>, strides: impl Into<Vec<usize>>, data: Vec<T>) -> Result<Self> {
        let (shape, strides) = (shape.into(), strides.into());
        layout::check(&|| "host tensor".to_string(), &shape, &strides, data.len())?;
        Ok(HostTensor { data, shape, strides })
    }

    /// A contiguous tensor from f32 values, each rounded to `T`.
    pub fn from_f32(shape: impl Into<Vec<usize>>, values: &[f32]) -> Result<Self> {
        Self::new(shape, values.iter().map(|&v| T::from_f32(v)).collect())
    }

    /// From a host tensor of dt-core (f32 values, rounded to `T`).
    pub fn from_tensor(t: &dt_core::tensor::Tensor) -> Result<Self> {
        Self::from_f32(t.shape.clone(), &t.data)
    }

    /// A dt-core host tensor of the values, widened to f32.
    pub fn to_tensor(&self) -> dt_core::tensor::Tensor {
        dt_core::tensor::Tensor { shape: self.shape.clone(), data: self.to_f32_vec() }
    }

    layout::view_accessors!();

    /// The underlying data, in memory order (a strided view may skip or repeat elements of it).
    pub fn data(&self) -> &[T] {
        &self.data
    }

    /// The elements in row-major order of the shape.
    pub fn to_vec(&self) -> Vec<T> {
        layout::gather(&self.data, &self.shape, &self.strides)
    }

    /// The elements in row-major order, widened to f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        self.to_vec().into_iter().map(T::to_f32).collect()
    }

    /// The same data with axes `a` and `b` swapped (no copy).
    pub fn transpose(self, a: usize, b: usize) -> Result<Self> {
        let axes = layout::swap_axes("host tensor", self.shape.len(), a, b)?;
        self.permute(&axes)
    }

    /// The same data with its axes reordered: axis `i` of the result is axis `axes[i]` of `self`.
    pub fn permute(self, axes: &[usize]) -> Result<Self> {
        let (shape, strides) = layout::permute(&|| "host tensor".to_string(), &self.shape, &self.strides, axes)?;
        Ok(HostTensor { data: self.data, shape, strides })
    }

    /// A contiguous copy.
    pub fn contiguous(&self) -> Self {
        HostTensor { data: self.to_vec(), shape: self.shape.clone(), strides: contiguous_strides(&self.shape) }
    }

    pub(crate) fn from_parts(data: Vec<T>, shape: Vec<usize>) -> Self {
        let strides = contiguous_strides(&shape);
        HostTensor { data, shape, strides }
    }
}
