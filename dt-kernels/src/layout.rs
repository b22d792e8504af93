//! Shapes and strides: validation, contiguous strides, gathering a strided view.

use crate::error::{Error, Result};
use crate::registry::MAX_RANK;
use dt_core::tensor::MAX_ELEMENTS;

/// Row-major (contiguous) strides of `shape`, in elements. Exact for every shape of at most
/// `usize::MAX` elements; past that (a shape no tensor can have, refused where it is made) the
/// strides saturate rather than wrap.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// The number of elements of `shape`: 0 where an axis is 0, else the product, saturating at
/// `usize::MAX` (a shape of more is refused where a tensor is made, [`elements`]).
pub(crate) fn element_count(shape: &[usize]) -> usize {
    if shape.contains(&0) {
        return 0;
    }
    shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
}

/// The accessors that every tensor type (host, CUDA and HIP) has over its `shape` and `strides`
/// fields, written once: `view_accessors!();` inside the type's `impl`.
macro_rules! view_accessors {
    () => {
        pub fn shape(&self) -> &[usize] {
            &self.shape
        }

        pub fn strides(&self) -> &[usize] {
            &self.strides
        }

        /// The number of elements of the shape.
        pub fn len(&self) -> usize {
            $crate::layout::element_count(&self.shape)
        }

        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        pub fn is_contiguous(&self) -> bool {
            self.strides == $crate::layout::contiguous_strides(&self.shape)
        }
    };
}
pub(crate) use view_accessors;

/// The number of elements of `shape`, checked against the 2^31 limit of the kernels.
pub(crate) fn elements(what: &dyn Fn() -> String, shape: &[usize]) -> Result<usize> {
    // An axis of 0 makes the tensor empty, whatever the others (their product may overflow).
    let n = if shape.contains(&0) { 0 } else { shape.iter().try_fold(1u128, |acc, &d| acc.checked_mul(d as u128)).unwrap_or(u128::MAX) };
    if n > MAX_ELEMENTS as u128 {
        return Err(Error::TooLarge { what: what(), elements: n });
    }
    Ok(n as usize)
}

/// Checks that `shape` with `strides` only reaches elements `0..len` of its data; returns the
/// number of elements of the shape.
pub(crate) fn check(what: &dyn Fn() -> String, shape: &[usize], strides: &[usize], len: usize) -> Result<usize> {
    if shape.len() > MAX_RANK {
        return Err(Error::Stride { what: what(), msg: format!("{} axes; at most {MAX_RANK} are supported", shape.len()) });
    }
    if strides.len() != shape.len() {
        return Err(Error::Stride {
            what: what(),
            msg: format!("{} strides for a shape of {} axes ({shape:?})", strides.len(), shape.len()),
        });
    }
    let n = elements(what, shape)?;
    if n == 0 {
        return Ok(0);
    }
    let mut last: u128 = 0;
    for (&d, &s) in shape.iter().zip(strides) {
        if s as u128 > i64::MAX as u128 {
            return Err(Error::Stride { what: what(), msg: format!("stride {s} does not fit a 64-bit signed index") });
        }
        last += (d as u128 - 1) * s as u128;
    }
    if last >= len as u128 {
        return Err(Error::Stride {
            what: what(),
            msg: format!("shape {shape:?} with strides {strides:?} reaches element {last}, past the end of its {len} elements of data"),
        });
    }
    // The GPU kernels index elements with 32-bit offsets.
    if last >= MAX_ELEMENTS as u128 {
        return Err(Error::Stride {
            what: what(),
            msg: format!("shape {shape:?} with strides {strides:?} reaches element {last}; the kernels reach at most element 2^31 - 1"),
        });
    }
    Ok(n)
}

/// Checks that no two indices of `shape` reach one element through `strides`, as an output's
/// strides must (a kernel writing one element twice would race): with the axes sorted by
/// stride, each stride must step past the largest offset the smaller ones reach. That suffices
/// (each element then has one index) and takes every layout of a tensor's own buffer, padded,
/// permuted or sliced; strides that interleave axes otherwise are refused, with that rule.
pub(crate) fn check_no_overlap(what: &dyn Fn() -> String, shape: &[usize], strides: &[usize]) -> Result<()> {
    let mut axes: Vec<(usize, usize)> = shape.iter().copied().zip(strides.iter().copied()).filter(|&(n, _)| n > 1).collect();
    if shape.contains(&0) {
        return Ok(());
    }
    axes.sort_by_key(|&(_, s)| s);
    // One past the largest offset the axes so far reach.
    let mut reach: u128 = 1;
    for (n, s) in axes {
        if (s as u128) < reach {
            return Err(Error::Stride {
                what: what(),
                msg: format!(
                    "strides {strides:?} of shape {shape:?} may reach an element twice: sorted by stride, each must step past the \
                     largest offset the smaller ones reach ({} here, where a stride of {s} follows)",
                    reach - 1
                ),
            });
        }
        reach += (n as u128 - 1) * s as u128;
    }
    Ok(())
}

/// The row-major strides of a tensor of `shape` made from exactly `len` elements of data.
pub(crate) fn contiguous(what: &str, shape: &[usize], len: usize) -> Result<Vec<usize>> {
    let strides = contiguous_strides(shape);
    let needed = check(&|| what.to_string(), shape, &strides, usize::MAX)?;
    if needed != len {
        return Err(Error::DataLength { what: what.into(), shape: shape.to_vec(), needed, got: len });
    }
    Ok(strides)
}

/// The permutation of `rank` axes that swaps axes `a` and `b`.
pub(crate) fn swap_axes(what: &str, rank: usize, a: usize, b: usize) -> Result<Vec<usize>> {
    if a >= rank || b >= rank {
        return Err(Error::Stride { what: what.into(), msg: format!("cannot swap axes {a} and {b} of a tensor with {rank} axes") });
    }
    let mut axes: Vec<usize> = (0..rank).collect();
    axes.swap(a, b);
    Ok(axes)
}

/// The elements of a strided view in row-major order.
pub(crate) fn gather<T: Copy>(data: &[T], shape: &[usize], strides: &[usize]) -> Vec<T> {
    let n = element_count(shape);
    if n == 0 {
        return Vec::new();
    }
    if strides == contiguous_strides(shape).as_slice() {
        return data[..n].to_vec();
    }
    let mut out = Vec::with_capacity(n);
    let mut index = vec![0usize; shape.len()];
    let mut offset = 0usize;
    for _ in 0..n {
        out.push(data[offset]);
        for axis in (0..shape.len()).rev() {
            index[axis] += 1;
            offset += strides[axis];
            if index[axis] < shape[axis] {
                break;
            }
            offset -= strides[axis] * shape[axis];
            index[axis] = 0;
        }
    }
    out
}

/// `shape` and `strides` with their axes in the order `axes` (a permutation).
pub(crate) fn permute(what: &dyn Fn() -> String, shape: &[usize], strides: &[usize], axes: &[usize]) -> Result<(Vec<usize>, Vec<usize>)> {
    let mut seen = vec![false; shape.len()];
    let ok = axes.len() == shape.len() && axes.iter().all(|&a| a < shape.len() && !std::mem::replace(&mut seen[a], true));
    if !ok {
        return Err(Error::Stride { what: what(), msg: format!("{axes:?} is not a permutation of the {} axes", shape.len()) });
    }
    Ok((axes.iter().map(|&a| shape[a]).collect(), axes.iter().map(|&a| strides[a]).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_follows_strides() {
        // [[0 1 2] [3 4 5]] transposed: shape [3, 2], strides [1, 3].
        let data = [0, 1, 2, 3, 4, 5];
        assert_eq!(gather(&data, &[3, 2], &[1, 3]), vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(gather(&data, &[2, 3], &[3, 1]), data.to_vec());
        assert_eq!(gather(&data, &[2, 2], &[0, 2]), vec![0, 2, 0, 2]);
        assert_eq!(gather::<i32>(&[], &[0, 4], &[4, 1]), Vec::<i32>::new());
        assert_eq!(gather(&data, &[], &[]), vec![0]);
    }

    #[test]
    fn check_catches_strides_past_the_end() {
        let what = || "t".to_string();
        assert_eq!(check(&what, &[2, 3], &[3, 1], 6).unwrap(), 6);
        assert!(check(&what, &[2, 3], &[3, 1], 5).is_err());
        assert!(check(&what, &[2, 3], &[1], 6).is_err());
        assert_eq!(check(&what, &[0, 3], &[3, 1], 0).unwrap(), 0);
        assert!(check(&what, &[1 << 20, 1 << 12], &[1 << 12, 1], usize::MAX).is_err());
        // Within a buffer of more than 2^31 elements but past the kernels' 32-bit offsets.
        let err = check(&what, &[2], &[1 << 31], usize::MAX).unwrap_err().to_string();
        assert!(err.contains("reaches element 2147483648; the kernels reach at most element 2^31 - 1"), "{err}");
        assert_eq!(check(&what, &[2], &[(1 << 31) - 2], usize::MAX).unwrap(), 2);
        assert!(permute(&what, &[2, 3], &[3, 1], &[0, 0]).is_err());
        assert!(check_no_overlap(&what, &[2, 3], &[3, 1]).is_ok());
        assert!(check_no_overlap(&what, &[2, 3], &[1, 2]).is_ok());
        assert!(check_no_overlap(&what, &[2, 3], &[1, 1]).is_err());
        assert!(check_no_overlap(&what, &[2, 3], &[0, 1]).is_err());
        assert!(check_no_overlap(&what, &[1, 3], &[0, 1]).is_ok());
        // Offsets 0, 2, 3 and 5: each element once, though 3 is less than 2 x 2.
        assert!(check_no_overlap(&what, &[2, 2], &[3, 2]).is_ok());
        assert!(check_no_overlap(&what, &[2, 2, 3], &[7, 3, 1]).is_ok());
        let twice = check_no_overlap(&what, &[2, 2, 3], &[4, 3, 1]).unwrap_err().to_string();
        assert!(twice.contains("step past the largest offset the smaller ones reach (5 here, where a stride of 4 follows)"), "{twice}");
        assert_eq!(permute(&what, &[2, 3], &[3, 1], &[1, 0]).unwrap(), (vec![3, 2], vec![1, 3]));
    }
}
