//! How a compiled kernel's result is checked against the reference evaluator: element by
//! element, within the precision of the element type and of f32 sums, shared by the tests that
//! run generated code and by `cargo xtask explore`.

use dt_core::tensor::Tensor;
use dt_core::DType;

/// Relative precision of an element type.
pub fn ulp(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => f32::EPSILON,
        DType::F16 => 1.0 / 1024.0,
        DType::BF16 => 1.0 / 128.0,
    }
}

/// Whether the GPU build of `k` for `dtype` evaluates exp, tanh, division and the like with the
/// hardware's approximations, as the emitter decides ([`crate::emit::expr::Math::of_gpu_build`]).
pub fn approximate(k: &dt_core::kir::Kernel, dtype: DType) -> bool {
    crate::emit::expr::Math::of_gpu_build(k, dtype) == crate::emit::expr::Math::Fast
}

/// Compares `got` with `want` element by element: within one unit of the element type's
/// precision plus f32 rounding scaled by the largest value, and where `approx` (the kernel used
/// the approximate exp, tanh and division, see [`approximate`]) 2^-10 of the largest value.
/// Returns a description of the first mismatch.
pub fn compare(got: &Tensor, want: &Tensor, dtype: DType, reduction_len: usize, approx: bool) -> Result<(), String> {
    if got.shape != want.shape {
        return Err(format!("shape {:?}, expected {:?}", got.shape, want.shape));
    }
    let scale = want.data.iter().filter(|v| v.is_finite()).fold(0.0f32, |m, v| m.max(v.abs())) + 1.0;
    let approx = if approx { 1.0 / 1024.0 } else { 0.0 };
    let f32_err = (4.0 * f32::EPSILON * (reduction_len as f32 + 16.0) + approx) * scale;
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= 2.0 * ulp(dtype) * w.abs() + f32_err + ulp(dtype) * 1e-3
        };
        if !ok {
            return Err(format!("element {i} (of shape {:?}): got {g}, expected {w}", want.shape));
        }
    }
    Ok(())
}
