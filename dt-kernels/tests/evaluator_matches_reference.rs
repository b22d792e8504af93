//! The reference evaluator of dt-core, run on each library spec, agrees with the hand-written
//! naive references of `dt_kernels::reference`, within the bound of `common` (the evaluator
//! computes in f32 and rounds its output to the element type).
//!
//! Shapes are drawn from sizes that tiles like (powers of two), sizes that they do not (1, primes,
//! one past a power of two) and plain random sizes; inputs are normal with a random spread (and,
//! for the normalizations, a random offset); each case picks f32, f16 or bf16.

mod common;

use common::{dtype, size, spread, AttentionShape, Case};
use dt_core::algo::Program;
use dt_core::eval::evaluate;
use dt_core::tensor::{Args, Tensor};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

fn spec(src: &str) -> Program {
    match dt_core::compile_spec(src) {
        Ok(p) => p,
        Err(diags) => panic!("library spec does not compile: {diags:?}"),
    }
}

/// Runs kernel `kernel` of `src` on the case's inputs with the reference evaluator and checks
/// the result.
fn check(src: &str, kernel: &str, case: &Case) -> Result<(), TestCaseError> {
    let program = spec(src);
    let mut args = Args::default();
    for i in &case.inputs {
        args = args.input(i.name, Tensor::new(i.shape.clone(), i.values.clone()));
    }
    for (name, v) in &case.scalars {
        args = args.scalar(name, *v);
    }
    let k = program.kernel_by_name(kernel).unwrap_or_else(|| panic!("no kernel `{kernel}`"));
    let got = evaluate(&program, k, &args, case.dtype).unwrap_or_else(|e| panic!("evaluating `{kernel}`: {e}")).data;
    case.check("evaluator", &got)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(64)))]

    #[test]
    fn evaluator_matches_naive_matmul(m in size(), n in size(), k in size(), dt in dtype(), std in spread(), seed in any::<u64>()) {
        check(include_str!("../specs/matmul.dt"), "mm", &common::matmul(m, n, k, dt, std, seed))?;
    }

    #[test]
    fn evaluator_matches_naive_mm_leaky_relu(m in size(), n in size(), k in size(), dt in dtype(), std in spread(), seed in any::<u64>()) {
        check(include_str!("../specs/mm_leaky_relu.dt"), "out", &common::mm_leaky_relu(m, n, k, dt, std, seed))?;
    }

    #[test]
    fn evaluator_matches_naive_softmax(rows in size(), cols in size(), dt in dtype(), std in spread(), seed in any::<u64>()) {
        check(include_str!("../specs/softmax.dt"), "softmax", &common::softmax(rows, cols, dt, std, seed))?;
    }

    #[test]
    fn evaluator_matches_naive_layernorm(
        rows in size(), cols in size(), dt in dtype(), std in spread(),
        offset in prop::sample::select(vec![0.0f32, 2.0]), seed in any::<u64>(),
    ) {
        check(include_str!("../specs/layernorm.dt"), "layernorm", &common::layernorm(rows, cols, dt, std, offset, seed))?;
    }

    #[test]
    fn evaluator_matches_naive_dyt(
        rows in size(), cols in size(), dt in dtype(), std in spread(),
        alpha in prop::sample::select(vec![0.1f32, 0.5, 1.0, 2.5]), seed in any::<u64>(),
    ) {
        check(include_str!("../specs/dyt.dt"), "dyt", &common::dyt(rows, cols, dt, std, alpha, seed))?;
    }
}

fn attention_shape() -> impl Strategy<Value = AttentionShape> {
    let seq = || prop_oneof![prop::sample::select(vec![1usize, 2, 3, 17, 31, 32, 33]), 1usize..=33];
    let head = || prop_oneof![prop::sample::select(vec![1usize, 2, 3, 7, 16]), 1usize..=20];
    (1usize..=2, 1usize..=2, seq(), seq(), head(), head())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(32)))]

    #[test]
    fn evaluator_matches_naive_attention(shape in attention_shape(), dt in dtype(), std in prop::sample::select(vec![0.5f32, 1.0, 2.0]), seed in any::<u64>()) {
        check(include_str!("../specs/attention.dt"), "attention", &common::attention(shape, false, dt, std, seed))?;
    }

    #[test]
    fn evaluator_matches_naive_attention_causal(shape in attention_shape(), dt in dtype(), std in prop::sample::select(vec![0.5f32, 1.0, 2.0]), seed in any::<u64>()) {
        check(include_str!("../specs/attention.dt"), "attention_causal", &common::attention(shape, true, dt, std, seed))?;
    }
}
