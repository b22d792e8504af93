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
    compare_within(got, want, dtype, reduction_len, approx, None)
}

/// [`compare`], each element allowed `slack` more where given ([`rounding_slack`]).
pub fn compare_within(
    got: &Tensor,
    want: &Tensor,
    dtype: DType,
    reduction_len: usize,
    approx: bool,
    slack: Option<&Tensor>,
) -> Result<(), String> {
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
            let extra = slack.map_or(0.0, |t| t.data[i]);
            (g - w).abs() <= 2.0 * ulp(dtype) * w.abs() + f32_err + ulp(dtype) * 1e-3 + extra
        };
        if !ok {
            return Err(format!("element {i} (of shape {:?}): got {g}, expected {w}", want.shape));
        }
    }
    Ok(())
}

/// What the documented precision of dots (docs/language.md, section 5) allows a 16-bit GPU
/// build of kernel `k` beyond [`compare`]'s bound, element by element: where a dot contracts an
/// operand computed in the kernel (the talk's 2mm: the product A B), the matrix units read it
/// rounded to `dtype`, half an ulp of relative error per term, which the reference (f32
/// throughout) does not make. The sum of the terms' magnitudes is bounded by the kernel's result
/// on the inputs' magnitudes, where every operation of the kernel keeps that bound (loads,
/// sums, products, dots, masks, constants not below 0): then the slack is half an ulp of
/// that, twice over (the rounded operand and the result of the dot it feeds, in a chain). `None` elsewhere: f32, no
/// computed operand, or an operation the bound does not pass through (exp, division, ...).
pub fn rounding_slack(
    p: &dt_core::algo::Program,
    fid: dt_core::algo::FuncId,
    k: &dt_core::kir::Kernel,
    args: &dt_core::tensor::Args,
    dtype: DType,
) -> Option<Tensor> {
    use dt_core::kir::Op;
    if dtype == DType::F32 {
        return None;
    }
    let lets = k.lets();
    let def = |v: dt_core::kir::ValueId| lets.iter().find(|(x, _)| *x == v).map(|(_, op)| *op);
    let copied = |v| match def(v) {
        Some(Op::Load { .. }) => true,
        Some(Op::MaskFill { value, .. }) => matches!(def(*value), Some(Op::Load { .. })),
        _ => false,
    };
    let computed_operand = lets.iter().any(|(_, op)| matches!(op, Op::Dot { a, b, .. } if !copied(*a) || !copied(*b)));
    let keeps_bound = lets.iter().all(|(_, op)| match op {
        Op::Binary(b, ..) => matches!(b, dt_core::algo::BinOp::Add | dt_core::algo::BinOp::Mul),
        Op::Reduce { op, .. } | Op::RunReduce { op, .. } => *op == dt_core::algo::RedOp::Sum,
        Op::Const(c) => *c >= 0.0,
        Op::Len(_) | Op::Load { .. } | Op::MaskFill { .. } | Op::Dot { .. } | Op::Var(_) => true,
        _ => false,
    });
    if !computed_operand || !keeps_bound {
        return None;
    }
    let mut magnitudes = args.clone();
    for (_, t) in &mut magnitudes.inputs {
        t.data.iter_mut().for_each(|v| *v = v.abs());
    }
    let mut bound = dt_core::eval::evaluate(p, fid, &magnitudes, DType::F32).ok()?;
    bound.data.iter_mut().for_each(|v| *v *= ulp(dtype));
    Some(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slack_of(spec: &str, dtype: DType, sizes: &[usize]) -> Option<Tensor> {
        let p = dt_core::compile_spec(spec).expect("checks");
        let fid = *p.kernels.last().expect("a kernel");
        let k = dt_core::lower::lower(&p, fid).expect("lowers");
        let args = dt_core::explore::random_args(&p, fid, sizes, dtype, &mut dt_core::explore::Rng::new(7));
        rounding_slack(&p, fid, &k, &args, dtype)
    }

    /// The talk's 2mm in 16-bit types contracts its computed product A B: each output element
    /// is allowed an ulp of the sum of its terms' magnitudes, at least its own magnitude's; in
    /// f32, in a kernel with no computed operand, or through an exponential, nothing.
    #[test]
    fn rounding_slack_is_allowed_where_a_dot_reads_a_computed_operand() {
        let two = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/specs/talk_2mm_f16.dt")).expect("spec");
        let sizes = [32, 33, 63, 37];
        let slack = slack_of(&two, DType::BF16, &sizes).expect("a computed operand in bf16");
        let p = dt_core::compile_spec(&two).expect("checks");
        let fid = *p.kernels.last().expect("a kernel");
        let args = dt_core::explore::random_args(&p, fid, &sizes, DType::BF16, &mut dt_core::explore::Rng::new(7));
        let want = dt_core::eval::evaluate(&p, fid, &args, DType::F32).expect("evaluates");
        assert!(slack.data.iter().zip(&want.data).all(|(s, w)| *s >= ulp(DType::BF16) * w.abs() * 0.999));
        assert!(slack.data.iter().any(|s| *s > 0.0));
        assert!(slack_of(&two, DType::F32, &sizes).is_none());
        let one = "Func mm; In A, B; Var m, n; RVar k; mm[m, n] = rdot(A[m, k], B[k, n], k); mm.block(m:64, n:64); mm.tensorize(m:64, n:64, k:32); mm.dtypes(bf16); mm.compile();\n";
        assert!(slack_of(one, DType::BF16, &[64, 64, 64]).is_none());
        let exp = "Func y; In A, B; Var m, n; RVar k; y[m, n] = rdot(exp(A[m, k]), B[k, n], k); y.block(m:64, n:64); y.tensorize(m:64, n:64, k:32); y.dtypes(bf16); y.compile();\n";
        assert!(slack_of(exp, DType::BF16, &[64, 64, 64]).is_none());
    }
}
