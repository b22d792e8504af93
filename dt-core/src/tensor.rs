//! Host tensors and the binding of launch arguments (inputs, scalars, sizes) to a kernel.
//!
//! Every backend (reference evaluator, kernel-IR interpreter, CPU C, GPU) binds arguments here,
//! so shape errors read the same everywhere.

use crate::algo::{DimId, FuncId, Program};
use std::fmt;

/// A dense row-major tensor of f32 values (f16/bf16 data is held widened).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Tensor {
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Tensor {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "tensor data does not match its shape");
        Tensor { shape, data }
    }

    pub fn zeros(shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        Tensor { shape, data: vec![0.0; n] }
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Arguments of one launch, by name.
#[derive(Clone, Debug, Default)]
pub struct Args {
    pub inputs: Vec<(String, Tensor)>,
    pub scalars: Vec<(String, f32)>,
    /// Sizes of dimensions that no input fixes.
    pub sizes: Vec<(String, usize)>,
}

impl Args {
    pub fn input(mut self, name: &str, t: Tensor) -> Args {
        self.inputs.push((name.into(), t));
        self
    }
    pub fn scalar(mut self, name: &str, v: f32) -> Args {
        self.scalars.push((name.into(), v));
        self
    }
    pub fn size(mut self, name: &str, n: usize) -> Args {
        self.sizes.push((name.into(), n));
        self
    }
}

/// A launch argument that does not fit the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError(pub String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArgError {}

/// Largest number of elements of any tensor: indices are 32-bit on the GPU.
pub const MAX_ELEMENTS: usize = 1 << 31;

/// Arguments matched to a kernel's parameters.
#[derive(Clone, Debug)]
pub struct Bound<'a> {
    /// Size of each dimension, indexed by [`DimId`]; 0 for dimensions the kernel does not use.
    pub sizes: Vec<usize>,
    /// One tensor per input the kernel reads, in [`Program::kernel_inputs`] order.
    pub inputs: Vec<&'a Tensor>,
    /// One value per scalar the kernel reads, in [`Program::kernel_scalars`] order.
    pub scalars: Vec<f32>,
    pub out_shape: Vec<usize>,
}

impl Bound<'_> {
    pub fn size(&self, d: DimId) -> usize {
        self.sizes[d.index()]
    }
}

/// Matches `args` to kernel `k`: every input and scalar present, shapes consistent, every size
/// known and within limits.
pub fn bind<'a>(p: &Program, k: FuncId, args: &'a Args) -> Result<Bound<'a>, ArgError> {
    let kname = &p.func(k).name;
    let inputs = p.kernel_inputs(k);
    let mut sizes: Vec<Option<(usize, String)>> = vec![None; p.dims.len()];
    for (name, _) in &args.inputs {
        if !inputs.iter().any(|i| &p.input(*i).name == name) {
            return Err(ArgError(format!(
                "kernel `{kname}` has no input `{name}` (inputs: {})",
                names(inputs.iter().map(|i| p.input(*i).name.as_str()))
            )));
        }
    }
    let mut bound_inputs = Vec::new();
    let loads = p.kernel_loads(k);
    for i in &inputs {
        let input = p.input(*i);
        let Some((_, t)) = args.inputs.iter().find(|(n, _)| *n == input.name) else {
            return Err(ArgError(format!("missing input `{}` of kernel `{kname}`", input.name)));
        };
        if t.shape.len() != input.rank() {
            return Err(ArgError(format!(
                "input `{}` has {} dimensions, but `{kname}` reads it with {} ([{}])",
                input.name,
                t.shape.len(),
                input.rank(),
                names(input.dims().iter().map(|d| p.dim_name(*d)))
            )));
        }
        if t.len() > MAX_ELEMENTS {
            return Err(ArgError(format!("input `{}` has {} elements; at most 2^31 are supported", input.name, t.len())));
        }
        let needed = t.shape.iter().try_fold(1usize, |acc, n| acc.checked_mul(*n));
        if needed != Some(t.len()) {
            return Err(ArgError(format!(
                "input `{}` holds {} values but its shape {:?} needs {}",
                input.name,
                t.len(),
                t.shape,
                needed.map_or("more than 2^64".to_string(), |n| n.to_string())
            )));
        }
        for (_, labels) in loads.iter().filter(|(x, _)| x == i) {
            for (axis, d) in labels.iter().enumerate() {
                let n = t.shape[axis];
                let here = format!("axis {axis} of `{}`", input.name);
                match &sizes[d.index()] {
                    Some((m, from)) if *m != n => {
                        return Err(ArgError(format!(
                            "size mismatch for dimension `{}`: {n} from {here} but {m} from {from}",
                            p.dim_name(*d)
                        )));
                    }
                    Some(_) => {}
                    None => sizes[d.index()] = Some((n, here)),
                }
            }
        }
        bound_inputs.push(t);
    }
    for (name, n) in &args.sizes {
        let Some(d) = p.dims.iter().position(|d| &d.name == name) else {
            return Err(ArgError(format!("`{name}` is not a dimension of this spec")));
        };
        if *n > MAX_ELEMENTS {
            return Err(ArgError(format!("size {n} given for `{name}`; at most 2^31 is supported")));
        }
        match &sizes[d] {
            Some((m, from)) if m != n => return Err(ArgError(format!("size {n} given for `{name}`, but {from} makes it {m}"))),
            Some(_) => {}
            None => sizes[d] = Some((*n, "the given sizes".into())),
        }
    }
    let mut out = vec![0; p.dims.len()];
    for d in p.kernel_dims(k) {
        match &sizes[d.index()] {
            Some((n, _)) => out[d.index()] = *n,
            None => {
                return Err(ArgError(format!(
                    "the size of dimension `{}` is not fixed by any input; give it (e.g. --size {}=N)",
                    p.dim_name(d),
                    p.dim_name(d)
                )))
            }
        }
    }
    let kernel_scalars = p.kernel_scalars(k);
    for (name, _) in &args.scalars {
        if !kernel_scalars.iter().any(|s| &p.scalars[s.index()].name == name) {
            return Err(ArgError(format!(
                "kernel `{kname}` has no scalar `{name}` (scalars: {})",
                names(kernel_scalars.iter().map(|s| p.scalars[s.index()].name.as_str()))
            )));
        }
    }
    let mut scalars = Vec::new();
    for s in kernel_scalars {
        let name = &p.scalars[s.index()].name;
        match args.scalars.iter().find(|(n, _)| n == name) {
            Some((_, v)) => scalars.push(*v),
            None => return Err(ArgError(format!("missing scalar `{name}` of kernel `{kname}`"))),
        }
    }
    let out_shape: Vec<usize> = p.func(k).dims.iter().map(|d| out[d.index()]).collect();
    let count = out_shape.iter().try_fold(1usize, |acc, n| acc.checked_mul(*n));
    if count.is_none_or(|c| c > MAX_ELEMENTS) {
        return Err(ArgError(format!("the output of `{kname}` would have more than 2^31 elements ({out_shape:?})")));
    }
    Ok(Bound { sizes: out, inputs: bound_inputs, scalars, out_shape })
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    it.collect::<Vec<_>>().join(", ")
}

/// Row-major strides of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}
