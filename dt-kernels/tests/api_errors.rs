//! Bad arguments to the library API are `Err`s that say what and where, never panics; sizes of
//! 0 give empty (or, for an empty reduction, well-defined) results. Run on the CPU entry points,
//! which share the argument checks with the GPU ones.

use dt_kernels::{cpu, Error, HostTensor};
use half::f16;

fn t(shape: &[usize]) -> HostTensor<f32> {
    let n = shape.iter().product();
    HostTensor::new(shape.to_vec(), (0..n).map(|i| i as f32 * 0.25).collect()).unwrap()
}

fn message<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    r.expect_err("the call must fail").to_string()
}

#[test]
fn wrong_rank_names_the_argument_and_its_axes() {
    let m = message(cpu::matmul(&t(&[2, 3, 4]), &t(&[4, 5])));
    assert_eq!(m, "matmul: `a` has 3 axes (shape [2, 3, 4]), but matmul takes 2 (a: [m, k])");
    let m = message(cpu::layernorm(&t(&[2, 3]), &t(&[3, 1]), &t(&[3]), 1e-5));
    assert_eq!(m, "layernorm: `w` has 2 axes (shape [3, 1]), but layernorm takes 1 (w: [cols])");
}

#[test]
fn size_mismatch_names_both_sides() {
    let m = message(cpu::matmul(&t(&[2, 3]), &t(&[4, 5])));
    assert_eq!(m, "matmul: size mismatch for dimension `k`: 4 from axis 0 of `b`, but 3 from axis 1 of `a`");
    let m = message(cpu::attention(&t(&[1, 2, 3, 8]), &t(&[1, 2, 5, 8]), &t(&[1, 2, 6, 8]), false));
    assert!(m.contains("dimension `seq_k`: 6 from axis 2 of `v`, but 5 from axis 2 of `k`"), "{m}");
    let m = message(cpu::dyt(&t(&[2, 3]), &t(&[3]), &t(&[4]), 0.5));
    assert!(m.contains("dimension `cols`: 4 from axis 0 of `b`"), "{m}");
}

#[test]
fn bad_tensors_are_refused_when_made() {
    let m = message(HostTensor::<f32>::new([2, 2], vec![1.0; 3]));
    assert_eq!(m, "host tensor: shape [2, 2] needs 4 elements, but 3 were given");
    let m = message(HostTensor::<f32>::from_strided([2, 3], [3, 1], vec![1.0; 5]));
    assert!(m.contains("reaches element 5, past the end of its 5 elements"), "{m}");
    let m = message(HostTensor::<f32>::from_strided([2, 3], [1], vec![1.0; 6]));
    assert!(m.contains("1 strides for a shape of 2 axes"), "{m}");
    let m = message(t(&[2, 3]).permute(&[0, 0]));
    assert!(m.contains("is not a permutation"), "{m}");
    let m = message(t(&[2, 3]).transpose(0, 2));
    assert!(m.contains("cannot swap axes 0 and 2"), "{m}");
    let m = message(HostTensor::<f32>::from_strided(vec![1; 9], vec![0; 9], vec![1.0]));
    assert!(m.contains("9 axes; at most 8"), "{m}");
}

#[test]
fn more_than_2_pow_31_elements_is_an_error() {
    // A broadcast view: 2^32 elements over one stored value.
    let m = message(HostTensor::<f32>::from_strided([1 << 16, 1 << 16], [0, 0], vec![1.0]));
    assert_eq!(m, "host tensor has 4294967296 elements; at most 2^31 are supported");
    // Inputs within the limit whose result is not: [2^16, 1] @ [1, 2^16].
    let a = HostTensor::<f32>::from_strided([1 << 16, 1], [0, 0], vec![1.0]).unwrap();
    let b = HostTensor::<f32>::from_strided([1, 1 << 16], [0, 0], vec![1.0]).unwrap();
    let m = message(cpu::matmul(&a, &b));
    assert_eq!(m, "matmul: the output [65536, 65536] has 4294967296 elements; at most 2^31 are supported");
}

/// Shapes whose element count overflows 64 bits: an error where the tensor would hold them,
/// an empty tensor where another axis is 0; no size arithmetic overflows on the way (tests run
/// with overflow checks).
#[test]
fn shapes_past_64_bits_are_errors_or_empty() {
    let m = message(HostTensor::<f32>::new([2, 1 << 32, 1 << 32, 2], vec![]));
    assert!(m.contains("at most 2^31 are supported"), "{m}");
    let empty = HostTensor::<f32>::new([0, 1 << 40, 1 << 40], vec![]).unwrap();
    assert_eq!((empty.len(), empty.to_vec().len()), (0, 0));
    let empty = HostTensor::<f32>::from_strided([1 << 40, 1 << 40, 0], [0, 0, 0], vec![]).unwrap();
    assert!(empty.is_empty() && empty.to_vec().is_empty());
    let q = HostTensor::<f32>::new([0, 1 << 40, 1 << 40, 1], vec![]).unwrap();
    assert!(cpu::attention(&q, &q, &q, false).is_ok_and(|o| o.is_empty()));
    assert_eq!(dt_kernels::contiguous_strides(&[0, 1 << 40, 1 << 40]).len(), 3);
}

#[test]
fn zero_sizes_give_empty_or_defined_results() {
    let out = cpu::matmul(&t(&[0, 3]), &t(&[3, 4])).unwrap();
    assert_eq!((out.shape(), out.len()), (&[0, 4][..], 0));
    // An empty sum is 0.
    let out = cpu::matmul(&t(&[2, 0]), &t(&[0, 3])).unwrap();
    assert_eq!(out.to_vec(), vec![0.0; 6]);
    assert_eq!(cpu::softmax(&t(&[0, 7])).unwrap().len(), 0);
    assert_eq!(cpu::softmax(&t(&[7, 0])).unwrap().shape(), &[7, 0]);
    assert_eq!(cpu::layernorm(&t(&[0, 3]), &t(&[3]), &t(&[3]), 1e-5).unwrap().len(), 0);
    assert_eq!(cpu::dyt(&t(&[3, 0]), &t(&[0]), &t(&[0]), 0.5).unwrap().len(), 0);
    assert_eq!(cpu::attention(&t(&[1, 1, 0, 8]), &t(&[1, 1, 0, 8]), &t(&[1, 1, 0, 8]), true).unwrap().len(), 0);
    // A softmax over no keys has no value.
    let m = message(cpu::attention(&t(&[1, 1, 2, 8]), &t(&[1, 1, 0, 8]), &t(&[1, 1, 0, 8]), false));
    assert_eq!(m, "attention: dimension `seq_k` is 0, but a softmax over no keys is undefined");
}

#[test]
fn broadcast_and_transposed_inputs_are_read_by_their_strides() {
    // Every row of x is [0, 1, 2]: one stored row, row stride 0.
    let x = HostTensor::<f16>::from_strided([4, 3], [0, 1], [0.0f32, 1.0, 2.0].map(f16::from_f32).to_vec()).unwrap();
    let s = cpu::softmax(&x).unwrap().to_f32_vec();
    let e = [1.0f32, 1f32.exp(), 2f32.exp()];
    let sum: f32 = e.iter().sum();
    for (i, v) in s.iter().enumerate() {
        assert!((v - e[i % 3] / sum).abs() < 1e-3, "element {i}: {v}");
    }
    // a^T @ a for a = [[0, 0.25], [0.5, 0.75]].
    let a = t(&[2, 2]);
    let at = a.clone().transpose(0, 1).unwrap();
    assert_eq!(cpu::matmul(&at, &a).unwrap().to_vec(), vec![0.25, 0.375, 0.375, 0.625]);
}

/// Scalars must be finite, and layernorm's epsilon not negative: anything else is an error that
/// names the scalar, on the CPU and the GPU alike (they share the checks).
#[test]
fn non_finite_scalars_are_errors() {
    let m = message(cpu::layernorm(&t(&[2, 3]), &t(&[3]), &t(&[3]), f32::NAN));
    assert_eq!(m, "layernorm: scalar `eps` is NaN; it must be a finite number");
    let m = message(cpu::dyt(&t(&[2, 3]), &t(&[3]), &t(&[3]), f32::INFINITY));
    assert_eq!(m, "dyt: scalar `alpha` is inf; it must be a finite number");
    // A negative epsilon would take the square root of a negative number on a constant row;
    // 0 is allowed (rows that are not constant are well defined).
    let m = message(cpu::layernorm(&t(&[2, 3]), &t(&[3]), &t(&[3]), -1e-5));
    assert_eq!(m, "layernorm: scalar `eps` is -0.00001; it must be 0 or more");
    assert!(cpu::layernorm(&t(&[2, 3]), &t(&[3]), &t(&[3]), 0.0).is_ok());
}
