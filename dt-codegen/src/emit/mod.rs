//! Emitters: kernel IR to source text. They only print; every decision was made by the lowering.

pub mod c;
pub mod expr;

use dt_core::kir::Kernel;
use dt_core::DType;
use std::fmt;

/// A kernel the emitter cannot print (an error, never a panic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmitError(pub String);

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EmitError {}

/// The symbol of kernel `k` instantiated for `dtype`.
pub fn symbol(k: &Kernel, dtype: DType) -> String {
    format!("dt_{}_{}", k.name, dtype.name())
}

/// Checks that a kernel fits the argument block of [`crate::abi`].
pub fn check_abi(k: &Kernel) -> Result<(), EmitError> {
    use crate::abi::*;
    let too_many = |what: &str, n: usize, max: usize| EmitError(format!("kernel `{}` has {n} {what}; at most {max} are supported", k.name));
    if k.inputs.len() > MAX_INPUTS {
        return Err(too_many("inputs", k.inputs.len(), MAX_INPUTS));
    }
    if k.scalars.len() > MAX_SCALARS {
        return Err(too_many("scalar inputs", k.scalars.len(), MAX_SCALARS));
    }
    if k.dims.len() > MAX_DIMS {
        return Err(too_many("dimensions", k.dims.len(), MAX_DIMS));
    }
    if let Some(t) = k.inputs.iter().chain([&k.output]).find(|t| t.dims.len() > MAX_RANK) {
        return Err(too_many(&format!("axes in `{}`", t.name), t.dims.len(), MAX_RANK));
    }
    Ok(())
}
