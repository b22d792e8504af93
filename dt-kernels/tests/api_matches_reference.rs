//! The library API, on the CPU fallback and on the GPU, agrees with the hand-written references
//! of `dt_kernels::reference` within the bound of `common`: one property test per op, element
//! type and backend.
//!
//! Sizes include 1, primes, and sizes just below and above every tile extent of the library
//! schedules (128 for matmul, 1024 for the row ops, 64 for attention); inputs are placed in
//! memory row-major, with the last two axes swapped (a transposed view) or with padded rows,
//! the padding NaN so that a kernel reading it shows. The GPU tests skip, saying so, where there
//! is no usable GPU; `DT_GPU_CASES` sets their number of cases (default 24). With the `hip`
//! feature the same tests run on an AMD GPU (`cargo test -p dt-kernels --features hip --test
//! api_matches_reference hip_`).

mod common;

use common::{spread, AttentionShape, Case, Placement};
use dt_kernels::{cpu, DeviceTensor, Element, Gpu, HostTensor};
use half::{bf16, f16};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug)]
enum Backend {
    Cpu,
    Gpu,
    #[cfg(feature = "hip")]
    Hip,
}

/// The AMD GPU shared by the tests, or why there is none.
#[cfg(feature = "hip")]
fn hip() -> Result<&'static dt_kernels::hip::Hip, &'static str> {
    static HIP: OnceLock<Result<dt_kernels::hip::Hip, String>> = OnceLock::new();
    HIP.get_or_init(|| dt_kernels::hip::Hip::new().map_err(|e| e.to_string())).as_ref().map_err(|e| e.as_str())
}

/// The GPU shared by the tests, or why there is none.
fn gpu() -> Result<&'static Gpu, &'static str> {
    static GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();
    GPU.get_or_init(|| Gpu::new().map_err(|e| e.to_string())).as_ref().map_err(|e| e.as_str())
}

/// Whether the test should run on `backend`; says why not when it should not.
fn available(backend: Backend, test: &str) -> bool {
    let missing = match backend {
        Backend::Cpu => None,
        Backend::Gpu => gpu().err(),
        #[cfg(feature = "hip")]
        Backend::Hip => hip().err(),
    };
    if let Some(why) = missing {
        eprintln!("skipping {test}: {why}");
    }
    missing.is_none()
}

/// `DT_GPU_CASES` sets the GPU backends' count apart from `PROPTEST_CASES`.
fn cases(backend: Backend) -> u32 {
    match backend {
        Backend::Cpu => common::cases(24),
        _ => std::env::var("DT_GPU_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| common::cases(24)),
    }
}

/// The case's inputs in their placements, as `T` values.
fn placed<T: Element>(case: &Case, placements: &[Placement]) -> Vec<(Vec<usize>, Vec<usize>, Vec<T>)> {
    case.inputs
        .iter()
        .zip(placements)
        .map(|(input, p)| {
            let (data, strides) = p.place(&input.shape, &input.values);
            (input.shape.clone(), strides, data.into_iter().map(T::from_f32).collect())
        })
        .collect()
}

fn scalar(case: &Case, name: &str) -> f32 {
    case.scalars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("case has no scalar `{name}`"))
}

/// Runs the case's op through the public API on `backend` and returns the result in f32.
fn run<T: Element>(backend: Backend, case: &Case, placements: &[Placement]) -> dt_kernels::Result<Vec<f32>> {
    let inputs = placed::<T>(case, placements);
    match backend {
        Backend::Cpu => {
            let t: Vec<HostTensor<T>> = inputs
                .into_iter()
                .map(|(shape, strides, data)| HostTensor::from_strided(shape, strides, data))
                .collect::<Result<_, _>>()?;
            let out = match case.op {
                "matmul" => cpu::matmul(&t[0], &t[1]),
                "mm_leaky_relu" => cpu::mm_leaky_relu(&t[0], &t[1]),
                "softmax" => cpu::softmax(&t[0]),
                "layernorm" => cpu::layernorm(&t[0], &t[1], &t[2], scalar(case, "eps")),
                "dyt" => cpu::dyt(&t[0], &t[1], &t[2], scalar(case, "alpha")),
                "attention" => cpu::attention(&t[0], &t[1], &t[2], false),
                "attention_causal" => cpu::attention(&t[0], &t[1], &t[2], true),
                other => panic!("no op {other}"),
            }?;
            Ok(out.to_f32_vec())
        }
        Backend::Gpu => {
            let gpu = gpu().expect("checked by `available`");
            let t: Vec<DeviceTensor<T>> = inputs
                .into_iter()
                .map(|(shape, strides, data)| DeviceTensor::from_host_strided(gpu, shape, strides, &data))
                .collect::<Result<_, _>>()?;
            let out = match case.op {
                "matmul" => dt_kernels::matmul::matmul(gpu, &t[0], &t[1]),
                "mm_leaky_relu" => dt_kernels::mm_leaky_relu::mm_leaky_relu(gpu, &t[0], &t[1]),
                "softmax" => dt_kernels::softmax::softmax(gpu, &t[0]),
                "layernorm" => dt_kernels::layernorm::layernorm(gpu, &t[0], &t[1], &t[2], scalar(case, "eps")),
                "dyt" => dt_kernels::dyt::dyt(gpu, &t[0], &t[1], &t[2], scalar(case, "alpha")),
                "attention" => dt_kernels::attention::attention(gpu, &t[0], &t[1], &t[2], false),
                "attention_causal" => dt_kernels::attention::attention(gpu, &t[0], &t[1], &t[2], true),
                other => panic!("no op {other}"),
            }?;
            Ok(out.to_host()?.into_iter().map(T::to_f32).collect())
        }
        #[cfg(feature = "hip")]
        Backend::Hip => {
            use dt_kernels::hip::{self as h, HipTensor};
            let hip = hip().expect("checked by `available`");
            let t: Vec<HipTensor<T>> = inputs
                .into_iter()
                .map(|(shape, strides, data)| HipTensor::from_host_strided(hip, shape, strides, &data))
                .collect::<Result<_, _>>()?;
            let out = match case.op {
                "matmul" => h::matmul(hip, &t[0], &t[1]),
                "mm_leaky_relu" => h::mm_leaky_relu(hip, &t[0], &t[1]),
                "softmax" => h::softmax(hip, &t[0]),
                "layernorm" => h::layernorm(hip, &t[0], &t[1], &t[2], scalar(case, "eps")),
                "dyt" => h::dyt(hip, &t[0], &t[1], &t[2], scalar(case, "alpha")),
                "attention" => h::attention(hip, &t[0], &t[1], &t[2], false),
                "attention_causal" => h::attention(hip, &t[0], &t[1], &t[2], true),
                other => panic!("no op {other}"),
            }?;
            Ok(out.to_host()?.into_iter().map(T::to_f32).collect())
        }
    }
}

fn check<T: Element>(backend: Backend, case: &Case, placements: &[Placement]) -> Result<(), TestCaseError> {
    let got = run::<T>(backend, case, placements).map_err(|e| TestCaseError::fail(format!("{case:?}: {e}")))?;
    case.check(&format!("{backend:?}"), &got)
}

/// Sizes around the matmul tile (128) and small awkward ones.
fn mm_size() -> impl Strategy<Value = usize> {
    prop_oneof![prop::sample::select(vec![1usize, 2, 3, 7, 31, 32, 33, 127, 128, 129, 257]), 1usize..=200]
}

/// Row lengths around the row ops' size classes (1024, 4096, 16384) and small awkward ones.
fn cols() -> impl Strategy<Value = usize> {
    prop_oneof![prop::sample::select(vec![1usize, 2, 3, 5, 31, 127, 1023, 1024, 1025, 2053, 4096, 4097, 16384, 16385, 20000]), 1usize..=300]
}

/// Row counts around the rows per program (4) and small awkward ones.
fn rows() -> impl Strategy<Value = usize> {
    prop_oneof![prop::sample::select(vec![1usize, 2, 3, 4, 5, 7, 13, 67]), 1usize..=40]
}

fn attention_shape() -> impl Strategy<Value = AttentionShape> {
    let seq = || prop_oneof![prop::sample::select(vec![1usize, 2, 31, 63, 64, 65, 129]), 1usize..=100];
    let head = || prop_oneof![prop::sample::select(vec![1usize, 3, 16, 31, 32, 33, 64, 80, 129]), 1usize..=40];
    (1usize..=2, 1usize..=3, seq(), seq(), head(), head())
}

fn placements(ranks: &'static [usize]) -> impl Strategy<Value = Vec<Placement>> {
    ranks.iter().map(|&r| Placement::strategy(r)).collect::<Vec<_>>()
}

fn dtype_of<T: Element>() -> dt_core::DType {
    T::DTYPE
}

/// One property test per op for element type `$t` on backend `$backend`.
macro_rules! api_tests {
    ($module:ident, $t:ty, $backend:expr) => {
        mod $module {
            use super::*;

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(cases($backend)))]

                #[test]
                fn matmul_matches_reference(m in mm_size(), n in mm_size(), k in mm_size(), std in spread(), seed in any::<u64>(), p in placements(&[2, 2])) {
                    if available($backend, "matmul") {
                        check::<$t>($backend, &common::matmul(m, n, k, dtype_of::<$t>(), std, seed), &p)?;
                    }
                }

                #[test]
                fn mm_leaky_relu_matches_reference(m in mm_size(), n in mm_size(), k in mm_size(), std in spread(), seed in any::<u64>(), p in placements(&[2, 2])) {
                    if available($backend, "mm_leaky_relu") {
                        check::<$t>($backend, &common::mm_leaky_relu(m, n, k, dtype_of::<$t>(), std, seed), &p)?;
                    }
                }

                #[test]
                fn softmax_matches_reference(r in rows(), c in cols(), std in spread(), seed in any::<u64>(), p in placements(&[2])) {
                    if available($backend, "softmax") {
                        check::<$t>($backend, &common::softmax(r, c, dtype_of::<$t>(), std, seed), &p)?;
                    }
                }

                #[test]
                fn layernorm_matches_reference(r in rows(), c in cols(), std in spread(), offset in prop::sample::select(vec![0.0f32, 2.0]), seed in any::<u64>(), p in placements(&[2, 1, 1])) {
                    if available($backend, "layernorm") {
                        check::<$t>($backend, &common::layernorm(r, c, dtype_of::<$t>(), std, offset, seed), &p)?;
                    }
                }

                #[test]
                fn dyt_matches_reference(r in rows(), c in cols(), std in spread(), alpha in prop::sample::select(vec![0.1f32, 0.5, 2.5]), seed in any::<u64>(), p in placements(&[2, 1, 1])) {
                    if available($backend, "dyt") {
                        check::<$t>($backend, &common::dyt(r, c, dtype_of::<$t>(), std, alpha, seed), &p)?;
                    }
                }

                #[test]
                fn attention_matches_reference(shape in attention_shape(), std in prop::sample::select(vec![0.5f32, 1.0, 2.0]), seed in any::<u64>(), p in placements(&[4, 4, 4])) {
                    if available($backend, "attention") {
                        check::<$t>($backend, &common::attention(shape, false, dtype_of::<$t>(), std, seed), &p)?;
                    }
                }

                #[test]
                fn attention_causal_matches_reference(shape in attention_shape(), std in prop::sample::select(vec![0.5f32, 1.0, 2.0]), seed in any::<u64>(), p in placements(&[4, 4, 4])) {
                    if available($backend, "attention_causal") {
                        check::<$t>($backend, &common::attention(shape, true, dtype_of::<$t>(), std, seed), &p)?;
                    }
                }
            }
        }
    };
}

api_tests!(cpu_f32, f32, Backend::Cpu);
api_tests!(cpu_f16, f16, Backend::Cpu);
api_tests!(cpu_bf16, bf16, Backend::Cpu);
api_tests!(gpu_f32, f32, Backend::Gpu);
api_tests!(gpu_f16, f16, Backend::Gpu);
api_tests!(gpu_bf16, bf16, Backend::Gpu);
#[cfg(feature = "hip")]
api_tests!(hip_f32, f32, Backend::Hip);
#[cfg(feature = "hip")]
api_tests!(hip_f16, f16, Backend::Hip);
#[cfg(feature = "hip")]
api_tests!(hip_bf16, bf16, Backend::Hip);

/// A row-major placement, one padded by one element per row (so that no row is 16-byte
/// aligned) and a transposed one (no 16-byte runs at all).
fn row_placements() -> (Placement, Placement, Placement) {
    (Placement::row_major(2), Placement { order: vec![0, 1], pad: 1 }, Placement { order: vec![1, 0], pad: 0 })
}

/// Softmax and layernorm of `rows x cols` inputs placed as given, on `backend` against the
/// reference, in every element type, with small and large spreads by turns.
fn rows_match_reference(test: &str, shapes: &[(usize, usize, &Placement)]) {
    fn rows<T: Element>(backend: Backend, shapes: &[(usize, usize, &Placement)]) -> Result<(), TestCaseError> {
        let dtype = dtype_of::<T>();
        let vector = Placement::row_major(1);
        for (seed, &(r, c, p)) in shapes.iter().enumerate() {
            let (seed, std) = (seed as u64, if seed % 2 == 0 { 1.0 } else { 8.0 });
            check::<T>(backend, &common::softmax(r, c, dtype, std, seed), std::slice::from_ref(p))?;
            check::<T>(backend, &common::layernorm(r, c, dtype, std, 2.0, seed), &[p.clone(), vector.clone(), vector.clone()])?;
        }
        Ok(())
    }
    for backend in [Backend::Cpu, Backend::Gpu] {
        if available(backend, test) {
            rows::<f32>(backend, shapes).unwrap();
            rows::<f16>(backend, shapes).unwrap();
            rows::<bf16>(backend, shapes).unwrap();
        }
    }
}

/// Rows longer than the property tests reach, for the classes of the longest rows (on a GPU
/// with thread-block clusters, the clustered ones: a row split over the programs of a cluster,
/// which in 16-bit softmax hold their blocks in shared memory; elsewhere the looped ones). Rows
/// that fill every program, that leave the last programs of a cluster nothing, that end inside a
/// program, padded rows and transposed inputs; each in every element type, with small and large
/// spreads, on the CPU and on the GPU.
#[test]
fn long_rows_match_reference() {
    let (flat, padded, transposed) = row_placements();
    rows_match_reference(
        "long_rows_match_reference",
        &[
            (3, 40000, &padded),
            (2, 65536, &flat),
            (5, 65537, &padded),
            (2, 262144, &flat),
            (3, 200001, &padded),
            (3, 250001, &padded),
            (2, 240000, &transposed),
            (3, 30000, &transposed),
        ],
    );
}

/// More rows than a class bounds (`layernorm_4k_f32` takes up to 16384 rows of up to 4096 in f32,
/// `layernorm_4k_f32_many` more): rows just past the bound, contiguous and padded, and as many
/// rows as the bound, transposed; each in every element type, on the CPU and on the GPU.
#[test]
fn many_rows_match_reference() {
    let (flat, padded, transposed) = row_placements();
    rows_match_reference("many_rows_match_reference", &[(16385, 1025, &flat), (16386, 1027, &padded), (16384, 1030, &transposed)]);
}

/// Rows of exactly the lengths that classes specialize (`specialize(y:1024)`, 4096, 16384,
/// 65536 and 262144), contiguous, which on the GPU run those twins (sizes and strides
/// constants); and the same lengths padded and transposed, which run the kernels for any
/// layout. Each in every element type, on the CPU and on the GPU.
#[test]
fn specialized_row_lengths_match_reference() {
    let (flat, padded, transposed) = row_placements();
    rows_match_reference(
        "specialized_row_lengths_match_reference",
        &[
            (7, 1024, &flat),
            (6, 4096, &flat),
            (5, 16384, &flat),
            (3, 65536, &flat),
            (2, 262144, &flat),
            (3, 1024, &padded),
            (3, 4096, &transposed),
            (2, 16384, &transposed),
            (2, 65536, &padded),
        ],
    );
}

/// The kernels of a spec compiled by NVRTC at run time (the path of a build without nvcc)
/// compute what the fatbin's do.
#[test]
fn nvrtc_path_matches_reference() {
    if !available(Backend::Gpu, "nvrtc_path_matches_reference") {
        return;
    }
    let nvrtc = Gpu::with_nvrtc().expect("a GPU is available");
    let case = common::matmul(67, 129, 45, dt_core::DType::F16, 1.0, 7);
    let t: Vec<DeviceTensor<f16>> = placed::<f16>(&case, &[Placement::row_major(2), Placement::row_major(2)])
        .into_iter()
        .map(|(shape, strides, data)| DeviceTensor::from_host_strided(&nvrtc, shape, strides, &data).unwrap())
        .collect();
    let out = dt_kernels::matmul::matmul(&nvrtc, &t[0], &t[1]).unwrap();
    assert_eq!(nvrtc.module_source("matmul").unwrap(), dt_kernels::ModuleSource::Nvrtc);
    let got: Vec<f32> = out.to_host().unwrap().into_iter().map(f16::to_f32).collect();
    case.check("NVRTC", &got).unwrap();
    if Gpu::fatbin_archs().is_some() {
        let fatbin = gpu().unwrap();
        assert_eq!(
            fatbin.module_source("matmul").unwrap(),
            dt_kernels::ModuleSource::Fatbin,
            "the fatbin built for {:?} did not load",
            Gpu::fatbin_archs()
        );
    }
}

/// `*_into` writes into a caller's tensor, here a transposed (column-major) one.
#[test]
fn into_variant_writes_a_strided_output() {
    if !available(Backend::Gpu, "into_variant_writes_a_strided_output") {
        return;
    }
    let gpu = gpu().unwrap();
    let case = common::softmax(5, 33, dt_core::DType::F32, 1.0, 3);
    let x = gpu.upload([5, 33], &case.input(0).values).unwrap();
    let stored = gpu.zeros::<f32>([33, 5]).unwrap();
    let mut out = stored.transpose(0, 1).unwrap();
    drop(stored);
    dt_kernels::softmax::softmax_into(gpu, &x, &mut out).unwrap();
    case.check("GPU into", &out.to_host().unwrap()).unwrap();
    let shared = out.clone();
    let err = dt_kernels::softmax::softmax_into(gpu, &x, &mut out).unwrap_err();
    assert!(err.to_string().contains("shares its buffer"), "{err}");
    drop(shared);
    let mut wrong = gpu.zeros::<f32>([5, 32]).unwrap();
    let err = dt_kernels::softmax::softmax_into(gpu, &x, &mut wrong).unwrap_err();
    assert!(err.to_string().contains("has shape [5, 32], but the result has shape [5, 33]"), "{err}");
}

/// `matmul_into` and `mm_leaky_relu_into` write outputs of any strides: a transposed one and
/// one of rows padded by 1 element, which no tensor map describes, run the class for any
/// layout (on sm_90 too), one of rows padded by 8 the warp-specialized class there.
#[test]
fn matmul_into_writes_outputs_of_any_strides() {
    if !available(Backend::Gpu, "matmul_into_writes_outputs_of_any_strides") {
        return;
    }
    let gpu = gpu().unwrap();
    let (m, n, k) = (300, 136, 64);
    for op in ["matmul", "mm_leaky_relu"] {
        let case = match op {
            "matmul" => common::matmul(m, n, k, dt_core::DType::F16, 1.0, 5),
            _ => common::mm_leaky_relu(m, n, k, dt_core::DType::F16, 1.0, 5),
        };
        let inputs: Vec<DeviceTensor<f16>> = placed::<f16>(&case, &[Placement::row_major(2), Placement::row_major(2)])
            .into_iter()
            .map(|(shape, strides, data)| DeviceTensor::from_host_strided(gpu, shape, strides, &data).unwrap())
            .collect();
        let transposed = || gpu.zeros::<f16>([n, m]).unwrap().transpose(0, 1).unwrap();
        let padded = |pad: usize| {
            let (data, strides) = Placement { order: vec![0, 1], pad }.place(&[m, n], &vec![0.0; m * n]);
            let data: Vec<f16> = data.into_iter().map(f16::from_f32).collect();
            DeviceTensor::from_host_strided(gpu, [m, n], strides, &data).unwrap()
        };
        for (name, mut out) in [("transposed", transposed()), ("rows padded by 1", padded(1)), ("rows padded by 8", padded(8))] {
            match op {
                "matmul" => dt_kernels::matmul::matmul_into(gpu, &inputs[0], &inputs[1], &mut out),
                _ => dt_kernels::mm_leaky_relu::mm_leaky_relu_into(gpu, &inputs[0], &inputs[1], &mut out),
            }
            .unwrap_or_else(|e| panic!("{op} into an output of {name}: {e}"));
            let got: Vec<f32> = out.to_host().unwrap().into_iter().map(f32::from).collect();
            case.check(&format!("{op} into an output of {name}"), &got).unwrap();
        }
    }
}

/// An input that is a view of the output's buffer is refused before anything runs (the kernel
/// would read what it overwrites), and the buffer keeps its contents.
#[test]
fn an_input_that_shares_the_outputs_buffer_is_refused() {
    if !available(Backend::Gpu, "an_input_that_shares_the_outputs_buffer_is_refused") {
        return;
    }
    let gpu = gpu().unwrap();
    let case = common::softmax(5, 33, dt_core::DType::F32, 1.0, 4);
    let values = &case.input(0).values;
    let mut out = gpu.upload([5, 33], values).unwrap();
    let x = out.clone();
    let err = dt_kernels::softmax::softmax_into(gpu, &x, &mut out).unwrap_err();
    assert!(matches!(err, dt_kernels::Error::SharedOutput { op: "softmax" }), "{err}");
    // A matmul whose A is the output.
    let mut square = gpu.upload([33, 33], &vec![0.5f32; 33 * 33]).unwrap();
    let a = square.clone();
    let b = gpu.upload([33, 33], &vec![1.0f32; 33 * 33]).unwrap();
    let err = dt_kernels::matmul::matmul_into(gpu, &a, &b, &mut square).unwrap_err();
    assert!(matches!(err, dt_kernels::Error::SharedOutput { op: "matmul" }), "{err}");
    drop((x, a));
    assert_eq!(&out.to_host().unwrap(), values, "a refused launch wrote its output");
    assert_eq!(square.to_host().unwrap(), vec![0.5f32; 33 * 33], "a refused launch wrote its output");
    // Alone again, the same tensors are valid outputs.
    let x = gpu.upload([5, 33], values).unwrap();
    dt_kernels::softmax::softmax_into(gpu, &x, &mut out).unwrap();
    case.check("GPU into a former view", &out.to_host().unwrap()).unwrap();
    dt_kernels::matmul::matmul_into(gpu, &b, &b, &mut square).unwrap();
    assert_eq!(square.to_host().unwrap(), vec![33.0f32; 33 * 33]);
}

/// A tensor on another GPU than the handle's is an error naming the argument and both devices
/// (needs two GPUs; says so and passes with one).
#[test]
fn a_tensor_on_another_gpu_is_refused() {
    if !available(Backend::Gpu, "a_tensor_on_another_gpu_is_refused") {
        return;
    }
    let gpu = gpu().unwrap();
    let other = match Gpu::with_ordinal(1) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("skipping a_tensor_on_another_gpu_is_refused: no second GPU ({e})");
            return;
        }
    };
    let case = common::softmax(5, 33, dt_core::DType::F32, 1.0, 5);
    let values = &case.input(0).values;
    let there = other.upload([5, 33], values).unwrap();
    let err = dt_kernels::softmax::softmax(gpu, &there).unwrap_err();
    assert!(err.to_string().contains("`x` lives on GPU 1, but the handle runs on GPU 0"), "{err}");
    let here = gpu.upload([5, 33], values).unwrap();
    let mut out_there = other.zeros::<f32>([5, 33]).unwrap();
    let err = dt_kernels::softmax::softmax_into(gpu, &here, &mut out_there).unwrap_err();
    assert!(err.to_string().contains("`out` lives on GPU 1"), "{err}");
    // Each handle runs its own tensors.
    case.check("GPU 1", &dt_kernels::softmax::softmax(&other, &there).unwrap().to_host().unwrap()).unwrap();
}

/// A grid of millions of programs (one per row of a few elements) covers every row: launches
/// are one-dimensional, up to 2^31 - 1 programs, which the plan checks.
#[test]
fn millions_of_programs_cover_every_row() {
    if !available(Backend::Gpu, "millions_of_programs_cover_every_row") {
        return;
    }
    let gpu = gpu().unwrap();
    let rows = (1 << 22) + 3;
    let case = common::softmax(rows, 3, dt_core::DType::F32, 1.0, 6);
    let x = gpu.upload([rows, 3], &case.input(0).values).unwrap();
    case.check("GPU, 2^22 + 3 rows", &dt_kernels::softmax::softmax(gpu, &x).unwrap().to_host().unwrap()).unwrap();
}

/// Whether the library runs the warp-specialized classes (`mm_90a`) on this GPU: sm_90, with
/// kernels built for sm_90a (the fatbin's default, or NVRTC).
fn runs_hopper_classes(gpu: &Gpu) -> bool {
    let sm90 = gpu.context().compute_capability().is_ok_and(|(major, _)| major == 9);
    let built = Gpu::fatbin_archs().is_none_or(|archs| archs.split(',').any(|a| a.trim().ends_with("90a")));
    sm90 && built
}

/// The GPU of a test of the Hopper classes and whether it runs them (saying so when it does
/// not), with the placements of rank `rank` those tests take: contiguous, rows padded by 8
/// elements (16 bytes in 16-bit types: tensor maps describe both), the last two axes
/// transposed (which tensor maps do not), and rows padded by 1 element (rows of no 16-byte
/// multiple, contiguous along the last axis). `None` (the test skips) without a GPU.
fn hopper_setup(test: &str, rank: usize) -> Option<(&'static Gpu, bool, [Placement; 4])> {
    if !available(Backend::Gpu, test) {
        return None;
    }
    let gpu = gpu().unwrap();
    let hopper = runs_hopper_classes(gpu);
    if !hopper {
        eprintln!("{test}: this GPU runs no Hopper class; checking the fallback");
    }
    let mut transposed = Placement::row_major(rank);
    transposed.order.swap(rank - 2, rank - 1);
    let odd = Placement { order: (0..rank).collect(), pad: 1 };
    Some((gpu, hopper, [Placement::row_major(rank), Placement { order: (0..rank).collect(), pad: 8 }, transposed, odd]))
}

/// The warp-specialized matmul classes (`mm_90a`, `out_90a`: TMA, wgmma) at sizes that are no
/// multiple of their tiles (128 x 256 x 64), inputs contiguous, padded by 8 elements (rows of
/// 16-byte multiples, which tensor maps describe), padded by 1 and of 77 columns (rows no map
/// describes, which the producer's threads copy), and transposed (which run the class for any
/// layout), as do outputs of rows no map describes (columns no multiple of 8); each op in f16
/// and bf16. On a GPU without sm_90 every case runs the other class.
#[test]
fn hopper_matmul_matches_reference() {
    let Some((gpu, hopper, [contiguous, padded, transposed, odd])) = hopper_setup("hopper_matmul_matches_reference", 2) else { return };
    // Classes by size: up to 16 rows (`mm_90a_m16`, which copies 16 rows of A's 64-row tile), up
    // to 64 (`mm_90a_m64`, split over a cluster where the contraction is 2049 to 4096), outputs up
    // to 512 x 512 (`mm_90a_512`, split where the contraction is 4097 to 8192) and 1024 x 1024
    // (`mm_90a_1k`), then few rows and many columns (`mm_90a_m128_split`, `mm_90a_m128`,
    // `mm_90a_m192`, `mm_90a_m256`, `mm_90a_m512`), any.
    let sizes = [
        (1, 8, 8),
        (9, 200, 1000),
        (15, 136, 2104),
        (16, 2056, 264),
        (17, 136, 520),
        (64, 1032, 72),
        (129, 264, 72),
        (300, 136, 8),
        (257, 520, 200),
        (77, 1000, 4104),
        (1000, 3000, 80),
        (1100, 1040, 200),
        (1000, 3000, 77),
        (45, 136, 77),
        (300, 520, 13),
        (20, 1001, 64),
        (40, 1032, 3000),
        (100, 1040, 2100),
        (120, 4104, 300),
        (168, 1160, 392),
        (200, 1100, 520),
        (300, 2056, 136),
        (136, 264, 4200),
    ];
    for (i, &(m, n, k)) in sizes.iter().enumerate() {
        for (name, placement, inputs_ok) in [
            ("contiguous", contiguous.clone(), true),
            ("padded", padded.clone(), true),
            ("transposed", transposed.clone(), false),
            ("padded by 1", odd.clone(), true),
        ] {
            for op in ["matmul", "mm_leaky_relu"] {
                let run = |dtype: dt_core::DType| {
                    let (what, symbol) = check_matmul(gpu, op, (m, n, k), dtype, i as u64, &placement, name);
                    // The output is contiguous: a map describes it where its rows are 16-byte multiples.
                    assert_eq!(symbol.contains("_90a_"), hopper && inputs_ok && n % 8 == 0, "{what}: ran `{symbol}`");
                };
                run(dt_core::DType::F16);
                run(dt_core::DType::BF16);
            }
        }
    }
}

/// A matmul over an empty contraction (k = 0) is zeros, on every backend and in every layout:
/// on sm_90 the warp-specialized classes take it, and a tensor map of an empty axis, which the
/// driver cannot encode, is left out (the producer's threads copy the nothing there is).
#[test]
fn empty_contractions_give_zeros() {
    let mut backends = vec![Backend::Cpu];
    if available(Backend::Gpu, "empty_contractions_give_zeros") {
        backends.push(Backend::Gpu);
    }
    #[cfg(feature = "hip")]
    if available(Backend::Hip, "empty_contractions_give_zeros") {
        backends.push(Backend::Hip);
    }
    let mut transposed = Placement::row_major(2);
    transposed.order.swap(0, 1);
    let layouts = [Placement::row_major(2), Placement { order: vec![0, 1], pad: 8 }, transposed, Placement { order: vec![0, 1], pad: 1 }];
    for backend in backends {
        for (i, &(m, n)) in [(1, 8), (16, 64), (300, 520), (1000, 3000)].iter().enumerate() {
            for placement in &layouts {
                let placements = [placement.clone(), placement.clone()];
                for dtype in [dt_core::DType::F16, dt_core::DType::BF16, dt_core::DType::F32] {
                    for case in [common::matmul(m, n, 0, dtype, 1.0, i as u64), common::mm_leaky_relu(m, n, 0, dtype, 1.0, i as u64)] {
                        let checked = match dtype {
                            dt_core::DType::F16 => check::<f16>(backend, &case, &placements),
                            dt_core::DType::BF16 => check::<bf16>(backend, &case, &placements),
                            dt_core::DType::F32 => check::<f32>(backend, &case, &placements),
                        };
                        checked.unwrap_or_else(|e| panic!("{} {m}x{n}x0 {dtype} {placement:?} on {backend:?}: {e}", case.op));
                    }
                }
            }
        }
    }
}

/// The classes that split the contraction over a cluster of 2 (`mm_90a_m16_split`,
/// `mm_16_f32_split` and mm_leaky_relu's: up to 16 rows, contractions of 2049 to 4096) at
/// contractions that end inside the second program's block, fill both, or just pass the first
/// (one of 2049), inputs contiguous, padded by 8 and by 1 (rows no tensor map describes, which
/// the producer's threads copy); f16, bf16 and f32. On a GPU without clusters every case runs
/// another class.
#[test]
fn split_contractions_match_reference() {
    let Some((gpu, hopper, [contiguous, padded, _, odd])) = hopper_setup("split_contractions_match_reference", 2) else { return };
    let clusters = gpu.context().compute_capability().is_ok_and(|(major, _)| major >= 9);
    for (i, &(m, n, k)) in [(1, 64, 2056), (13, 520, 3000), (16, 4096, 4096), (7, 136, 4088), (3, 100, 2049)].iter().enumerate() {
        for (name, placement) in [("contiguous", contiguous.clone()), ("padded", padded.clone()), ("padded by 1", odd.clone())] {
            for op in ["matmul", "mm_leaky_relu"] {
                for dtype in [dt_core::DType::F16, dt_core::DType::BF16, dt_core::DType::F32] {
                    let (what, symbol) = check_matmul(gpu, op, (m, n, k), dtype, i as u64, &placement, name);
                    // Inputs of any rows (the producer's threads copy those no tensor map
                    // describes); an output of 100 16-bit columns is no 16-byte multiple.
                    let split = if dtype == dt_core::DType::F32 { clusters } else { hopper && n % 8 == 0 };
                    assert_eq!(symbol.contains("_split"), split, "{what}: ran `{symbol}`");
                }
            }
        }
    }
}

/// Runs matmul or mm_leaky_relu (`op`) of sizes `(m, n, k)` in `dtype` on the GPU, both inputs
/// placed by `placement` (named `name`), and checks it against the reference; returns what the
/// case is and the kernel it ran.
fn check_matmul(
    gpu: &Gpu,
    op: &str,
    (m, n, k): (usize, usize, usize),
    dtype: dt_core::DType,
    seed: u64,
    placement: &Placement,
    name: &str,
) -> (String, String) {
    let case = match op {
        "matmul" => common::matmul(m, n, k, dtype, 1.0, seed),
        _ => common::mm_leaky_relu(m, n, k, dtype, 1.0, seed),
    };
    let placements = [placement.clone(), placement.clone()];
    let (got, symbol) = match dtype {
        dt_core::DType::BF16 => hopper_run::<bf16>(gpu, &case, &placements),
        dt_core::DType::F16 => hopper_run::<f16>(gpu, &case, &placements),
        _ => hopper_run::<f32>(gpu, &case, &placements),
    };
    let what = format!("{op} {m}x{n}x{k} {dtype} {name} ({symbol})");
    case.check(&what, &got).unwrap_or_else(|e| panic!("{what}: {e}"));
    (what, symbol)
}

/// Runs a matmul or mm_leaky_relu case on the GPU; returns the result and the kernel it ran.
fn hopper_run<T: Element>(gpu: &Gpu, case: &Case, placements: &[Placement]) -> (Vec<f32>, String) {
    let t: Vec<DeviceTensor<T>> = placed::<T>(case, placements)
        .into_iter()
        .map(|(shape, strides, data)| DeviceTensor::from_host_strided(gpu, shape, strides, &data).unwrap())
        .collect();
    let (out, symbol) = match case.op {
        "matmul" => (dt_kernels::matmul::matmul(gpu, &t[0], &t[1]), dt_kernels::matmul::matmul_kernel(gpu, &t[0], &t[1])),
        _ => (
            dt_kernels::mm_leaky_relu::mm_leaky_relu(gpu, &t[0], &t[1]),
            dt_kernels::mm_leaky_relu::mm_leaky_relu_kernel(gpu, &t[0], &t[1]),
        ),
    };
    (out.unwrap().to_host().unwrap().into_iter().map(T::to_f32).collect(), symbol.unwrap())
}

/// The wgmma attention classes (`attention_90a_64`, `_80`, `_128` and their causal twins: TMA
/// rings, wgmma) at head dimensions up to and at their bounds, query and key counts that are no
/// multiple of their blocks (128 queries; 64 keys, 128 in the non-causal `_128` class), keys of
/// more steps than the rings have stages, V wider and narrower than its block of columns,
/// contiguous and padded rows (which tensor maps describe: they run the wgmma class of the head
/// dimension on sm_90), transposed ones and rows padded by 1 (which run the class for any
/// layout); f16 and bf16. On a GPU without sm_90 every case runs the other classes.
#[test]
fn hopper_attention_matches_reference() {
    let Some((gpu, hopper, [contiguous, padded, transposed, odd])) = hopper_setup("hopper_attention_matches_reference", 4) else { return };
    // (batch, heads, seq_q, seq_k, d, e): the `_64` class up to 64, `_80` up to 80, `_128` above.
    let shapes: [AttentionShape; 10] = [
        (1, 2, 1, 1, 64, 64),
        (2, 3, 127, 65, 64, 64),
        (2, 2, 65, 300, 40, 24),
        (1, 2, 300, 200, 128, 128),
        (1, 1, 129, 257, 128, 128),
        (1, 2, 200, 130, 80, 80),
        (1, 1, 77, 300, 72, 168),
        (2, 1, 129, 129, 80, 40),
        (1, 1, 64, 190, 128, 64),
        // More steps than stages: every stage refilled more than once, its phase flipped.
        (1, 1, 130, 1000, 128, 128),
    ];
    let class = |d: usize| match d {
        0..=64 => "_90a_64",
        65..=80 => "_90a_80",
        _ => "_90a_128",
    };
    for (i, &shape) in shapes.iter().enumerate() {
        for (name, placement, tma) in [
            ("contiguous", contiguous.clone(), true),
            ("padded", padded.clone(), true),
            ("transposed", transposed.clone(), false),
            ("padded by 1", odd.clone(), false),
        ] {
            for causal in [false, true] {
                let run = |dtype: dt_core::DType| {
                    let case = common::attention(shape, causal, dtype, 1.0, i as u64);
                    let placements = [placement.clone(), placement.clone(), placement.clone()];
                    let (got, symbol) = match dtype {
                        dt_core::DType::BF16 => hopper_attention_run::<bf16>(gpu, &case, &placements, causal),
                        _ => hopper_attention_run::<f16>(gpu, &case, &placements, causal),
                    };
                    let what = format!("attention{} {shape:?} {dtype} {name} ({symbol})", if causal { " causal" } else { "" });
                    case.check(&what, &got).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(symbol.contains(class(shape.4)), hopper && tma, "{what}: ran `{symbol}`");
                };
                run(dt_core::DType::F16);
                run(dt_core::DType::BF16);
            }
        }
    }
}

/// Runs an attention case on the GPU; returns the result and the kernel it ran.
fn hopper_attention_run<T: Element>(gpu: &Gpu, case: &Case, placements: &[Placement], causal: bool) -> (Vec<f32>, String) {
    let t: Vec<DeviceTensor<T>> = placed::<T>(case, placements)
        .into_iter()
        .map(|(shape, strides, data)| DeviceTensor::from_host_strided(gpu, shape, strides, &data).unwrap())
        .collect();
    let out = dt_kernels::attention::attention(gpu, &t[0], &t[1], &t[2], causal);
    let symbol = dt_kernels::attention::attention_kernel(gpu, &t[0], &t[1], &t[2], causal);
    (out.unwrap().to_host().unwrap().into_iter().map(T::to_f32).collect(), symbol.unwrap())
}
