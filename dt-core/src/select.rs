//! Which kernel a launch runs: the size class of a kernel family ([`choose_class`], one rule for
//! the library, the bench and `dtc`), and of a kernel, the twin its tensors admit ([`Layouts`]).
//! Everything here reads a kernel's [`Signature`] only.

use crate::algo::DimId;
use crate::kir::RUN_BYTES;
use crate::signature::{GpuFeatures, Signature};
use serde::{Deserialize, Serialize};

/// One tensor of a launch as the kernel sees it: its address and its strides (in elements) by
/// axis.
#[derive(Clone, Copy, Debug)]
pub struct LaunchTensor<'a> {
    pub addr: u64,
    pub strides: &'a [i64],
}

/// The tensors of a launch of `k` with argument block `a`: its inputs in order, then its output.
pub fn launch_tensors<'a>(k: &Signature, a: &'a crate::abi::DtArgs) -> Vec<LaunchTensor<'a>> {
    let inputs = (0..k.inputs.len()).map(|i| LaunchTensor { addr: a.inputs[i], strides: &a.input_strides[i][..] });
    inputs.chain([LaunchTensor { addr: a.output, strides: &a.output_strides[..] }]).collect()
}

/// Whether a launch of `k` on elements of `elem_bytes` bytes may run the kernel built for whole
/// runs (`_whole`): every 16-byte run of every tensor is one aligned access, entirely inside or
/// entirely outside it. So for each tensor (`tensors`: the inputs in order, then the output;
/// `size(slot)` the size of the dimension in slot `slot`): its address is 16-byte aligned, its
/// last axis has stride 1 and a length that is a multiple of the run (8 elements of 2 bytes, 4 of
/// 4), and every other stride is a multiple of the run. The kernel built for any layout checks
/// this per run instead.
pub fn runs_are_whole(k: &Signature, elem_bytes: usize, size: impl Fn(usize) -> i64, tensors: &[LaunchTensor<'_>]) -> bool {
    let run = (RUN_BYTES / elem_bytes) as i64;
    let params = k.inputs.iter().chain([&k.output]);
    tensors.len() == k.inputs.len() + 1
        && params.zip(tensors).all(|(p, t)| {
            let Some((last, outer)) = p.dims.split_last() else { return true };
            let n = p.dims.len();
            t.addr.is_multiple_of(RUN_BYTES as u64)
                && t.strides.len() >= n
                && t.strides[n - 1] == 1
                && size(k.dim_slot(*last)) % run == 0
                && t.strides[..outer.len()].iter().all(|s| s % run == 0)
        })
}

/// What [`runs_are_whole`] needs of a launch's tensors, in words for its errors.
pub const WHOLE_RUNS_NEED: &str =
    "16-byte aligned tensors, contiguous along the last axis, its length and the other strides multiples of 16 bytes";

/// What [`tma_describes`] needs of a tensor, in words for errors.
pub const TENSOR_MAP_NEED: &str = "16-byte aligned tensors, contiguous along the last axis, the other strides multiples of 16 bytes";

/// Whether a tensor map (CUDA's TMA descriptor) describes every tensor of a launch of `k` on
/// elements of `elem_bytes` bytes (`tensors`: the inputs in order, then the output; see
/// [`tma_describes`]).
pub fn tma_describable(k: &Signature, elem_bytes: usize, tensors: &[LaunchTensor<'_>]) -> bool {
    let params = k.inputs.iter().chain([&k.output]);
    tensors.len() == k.inputs.len() + 1 && params.zip(tensors).all(|(p, t)| tma_describes(p.dims.len(), elem_bytes, t))
}

/// Whether a tensor map describes tensor `t` of `n` axes on elements of `elem_bytes` bytes:
/// at most 5 axes, a 16-byte aligned address, stride 1 along its last axis, and every other
/// stride a positive multiple of 16 bytes below 2^40 (the length of the last axis may be
/// anything).
pub fn tma_describes(n: usize, elem_bytes: usize, t: &LaunchTensor<'_>) -> bool {
    (1..=5).contains(&n)
        && t.addr.is_multiple_of(16)
        && t.strides.len() >= n
        && t.strides[n - 1] == 1
        && t.strides[..n - 1]
            .iter()
            .all(|s| *s > 0 && (*s as u64 * elem_bytes as u64).is_multiple_of(16) && (*s as u64 * elem_bytes as u64) < 1 << 40)
}

/// The symbol of the twin of GPU kernel `symbol` built for whole runs (see [`runs_are_whole`]).
pub fn whole_runs_symbol(symbol: &str) -> String {
    format!("{symbol}_whole")
}

/// Whether a launch of `k` may run the twin built for its specialized sizes (`specialize`,
/// symbol [`specialized_symbol`]): its runs are whole ([`runs_are_whole`]), each specialized
/// dimension has the size given, and every tensor is contiguous (row-major, each stride the
/// product of the sizes of the axes after it), as that twin takes those sizes and strides for
/// constants.
pub fn launch_is_specialized(k: &Signature, elem_bytes: usize, size: impl Fn(usize) -> i64, tensors: &[LaunchTensor<'_>]) -> bool {
    let params = k.inputs.iter().chain([&k.output]);
    !k.specialize.is_empty()
        && k.specialize.iter().all(|(d, n)| size(k.dim_slot(*d)) == *n as i64)
        && runs_are_whole(k, elem_bytes, &size, tensors)
        && params.zip(tensors).all(|(p, t)| {
            let mut stride = 1i64;
            p.dims.iter().enumerate().rev().all(|(a, d)| {
                let ok = t.strides.get(a) == Some(&stride);
                stride *= size(k.dim_slot(*d));
                ok
            })
        })
}

/// The symbol of the twin of GPU kernel `symbol` built for its specialized sizes (see
/// [`launch_is_specialized`]).
pub fn specialized_symbol(symbol: &str) -> String {
    format!("{symbol}_exact")
}

/// The tensor layouts a GPU kernel or one of its twins is built for, from the most general to
/// the most specific: each admits every launch the next one does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Layouts {
    /// Any strides and addresses: each 16-byte run checks that it is contiguous, aligned and
    /// inside its tensor, and otherwise goes element by element.
    Any,
    /// Layouts where every 16-byte run is whole ([`runs_are_whole`]): a run needs the bounds of
    /// its first element only (symbol [`whole_runs_symbol`]).
    WholeRuns,
    /// Whole runs, contiguous tensors, and the sizes the kernel is specialized for
    /// ([`launch_is_specialized`]), which it takes for constants (symbol [`specialized_symbol`]).
    Specialized,
}

impl Layouts {
    /// The most specific layouts a launch of `k` has (`tensors`, `size(slot)` as for
    /// [`runs_are_whole`]).
    pub fn of_launch(k: &Signature, elem_bytes: usize, size: impl Fn(usize) -> i64, tensors: &[LaunchTensor<'_>]) -> Layouts {
        if launch_is_specialized(k, elem_bytes, &size, tensors) {
            Layouts::Specialized
        } else if runs_are_whole(k, elem_bytes, &size, tensors) {
            Layouts::WholeRuns
        } else {
            Layouts::Any
        }
    }

    /// The symbol of the twin of GPU kernel `symbol` built for these layouts.
    pub fn symbol(self, symbol: &str) -> String {
        match self {
            Layouts::Any => symbol.to_string(),
            Layouts::WholeRuns => whole_runs_symbol(symbol),
            Layouts::Specialized => specialized_symbol(symbol),
        }
    }

    /// The kernel a launch with these layouts runs, of kernel `symbol` and the twins of it that
    /// are built (`built`): the most specific one the launch admits. The library, the bench and
    /// the test runners choose alike through it.
    pub fn launch_symbol(self, symbol: &str, built: impl Fn(&str) -> bool) -> String {
        [Layouts::Specialized, Layouts::WholeRuns]
            .into_iter()
            .filter(|l| *l <= self)
            .map(|l| l.symbol(symbol))
            .find(|s| built(s))
            .unwrap_or_else(|| symbol.to_string())
    }
}

/// Whether kernel `name` is a size-class variant of the kernel `family`: the family's name
/// itself, or that name followed by `_` and a class starting with a digit (`softmax_16k`). A
/// library op runs the first variant, in the order of the spec, built for the element type
/// whose bounds admit the sizes.
pub fn is_variant_of(name: &str, family: &str) -> bool {
    name == family
        || name
            .strip_prefix(family)
            .and_then(|rest| rest.strip_prefix('_'))
            .is_some_and(|class| class.starts_with(|c: char| c.is_ascii_digit()))
}

/// The family kernel `name` is a size-class variant of ([`is_variant_of`]): the name up to its
/// first `_` followed by a digit (`softmax` of `softmax_16k`), or the whole name where that would
/// leave nothing.
pub fn family_of(name: &str) -> &str {
    let class = name.match_indices('_').map(|(i, _)| i).find(|&i| i > 0 && name[i + 1..].starts_with(|c: char| c.is_ascii_digit()));
    class.map_or(name, |i| &name[..i])
}

/// The size class of kernel `family` that a launch runs: one rule for the library, the bench and
/// `dtc`. Among the variants of `family` ([`is_variant_of`]) in the spec's order that a GPU
/// offering `features` runs ([`Signature::runs_on`]), the first that `attempt` accepts (the
/// caller's checks of the element type, the bounds and the tensors, [`Signature::admits_tensors`]),
/// with what `attempt` made of it; but a clustered class whose sizes (`size(made, dimension)`)
/// would leave a program of each cluster without columns only where no later class is accepted.
pub fn choose_class<'a, K: AsRef<Signature>, R>(
    kernels: &'a [K],
    family: &str,
    features: GpuFeatures,
    mut attempt: impl FnMut(&'a K) -> Option<R>,
    size: impl Fn(&R, DimId) -> usize,
) -> Option<(&'a K, R)> {
    let mut idle = None;
    for k in kernels.iter().filter(|k| is_variant_of(&k.as_ref().name, family) && k.as_ref().runs_on(features)) {
        let Some(made) = attempt(k) else { continue };
        if k.as_ref().grid.cluster_leaves_programs_idle(|d| size(&made, d)) {
            idle.get_or_insert((k, made));
            continue;
        }
        return Some((k, made));
    }
    idle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_is_a_variant_of_the_family_its_name_gives() {
        for (name, family) in [
            ("softmax_16k", "softmax"),
            ("mm_128_f32", "mm"),
            ("attention_90a_128", "attention"),
            ("out", "out"),
            ("_2mm", "_2mm"),
            ("row_max", "row_max"),
        ] {
            assert_eq!(family_of(name), family);
            assert!(is_variant_of(name, family_of(name)), "{name}");
        }
    }
}
