//! The reference evaluator: the meaning of a spec.
//!
//! It computes every element of a kernel's output straight from the algorithm, ignoring the
//! schedule: inputs are widened to f32, arithmetic is f32, reductions accumulate in f32 in index
//! order, and the result is rounded to the element type once, at the store. Funcs that the kernel
//! reads are computed whole, once, and kept in f32. Kept simple on purpose: every other backend is
//! tested against it.

use crate::algo::{Expr, FuncId, Program};
use crate::dtype::DType;
use crate::tensor::{bind, strides, ArgError, Args, Bound, Tensor};

/// Evaluates kernel `k` on `args`, for element type `dtype`.
pub fn evaluate(p: &Program, k: FuncId, args: &Args, dtype: DType) -> Result<Tensor, ArgError> {
    let bound = bind(p, k, args)?;
    check_reads(p, k, &bound)?;
    let mut ev = Evaluator { p, bound: &bound, dtype, memo: Vec::new(), input_of: input_slots(p, k), scalar_of: scalar_slots(p, k) };
    let f = p.func(k);
    let mut out = Tensor::zeros(bound.out_shape.clone());
    let mut env = vec![0usize; p.dims.len()];
    for (flat, point) in points(&bound.out_shape).enumerate() {
        for (axis, d) in f.dims.iter().enumerate() {
            env[d.index()] = point[axis];
        }
        out.data[flat] = dtype.round(ev.eval(&f.body, &mut env));
    }
    Ok(out)
}

/// Refuses sizes under which a Func the kernel reads would hold more than 2^31 elements: the
/// evaluator computes each whole, at every point of the labels it is read under.
fn check_reads(p: &Program, k: FuncId, bound: &Bound) -> Result<(), ArgError> {
    for f in std::iter::once(k).chain(p.producers(k)) {
        for (g, labels) in p.func(f).body.reads() {
            let count = labels.iter().try_fold(1usize, |n, d| n.checked_mul(bound.size(*d)));
            if count.is_none_or(|c| c > crate::tensor::MAX_ELEMENTS) {
                let sizes: Vec<usize> = labels.iter().map(|d| bound.size(*d)).collect();
                return Err(ArgError(format!(
                    "`{}`, which the evaluator computes whole for `{}`, would have more than 2^31 elements ({sizes:?})",
                    p.func(g).name,
                    p.func(k).name
                )));
            }
        }
    }
    Ok(())
}

/// For each input of the program, its position among the kernel's bound inputs.
fn input_slots(p: &Program, k: FuncId) -> Vec<Option<usize>> {
    let used = p.kernel_inputs(k);
    (0..p.inputs.len()).map(|i| used.iter().position(|u| u.index() == i)).collect()
}

/// For each scalar of the program, its position among the kernel's bound scalars.
fn scalar_slots(p: &Program, k: FuncId) -> Vec<Option<usize>> {
    let used = p.kernel_scalars(k);
    (0..p.scalars.len()).map(|i| used.iter().position(|u| u.index() == i)).collect()
}

/// Every index tuple of a shape, in row-major order.
pub fn points(shape: &[usize]) -> impl Iterator<Item = Vec<usize>> + '_ {
    let total: usize = shape.iter().product();
    let st = strides(shape);
    (0..total).map(move |flat| shape.iter().zip(&st).map(|(n, s)| (flat / s) % n).collect())
}

struct Evaluator<'a> {
    p: &'a Program,
    bound: &'a Bound<'a>,
    dtype: DType,
    /// Funcs read by the kernel, computed whole over the labels they are read under, with the
    /// strides of the result.
    memo: Vec<(FuncId, Vec<crate::algo::DimId>, Tensor, Vec<usize>)>,
    input_of: Vec<Option<usize>>,
    scalar_of: Vec<Option<usize>>,
}

impl Evaluator<'_> {
    fn eval(&mut self, e: &Expr, env: &mut Vec<usize>) -> f32 {
        match e {
            Expr::Const(v) => *v as f32,
            Expr::Scalar(s) => self.bound.scalars[self.scalar_of[s.index()].expect("kernel scalar is bound")],
            Expr::Index(d) => env[d.index()] as f32,
            Expr::Len(d) => self.bound.size(*d) as f32,
            Expr::Load { input, index } => {
                let t = self.bound.inputs[self.input_of[input.index()].expect("kernel input is bound")];
                let st = strides(&t.shape);
                let flat: usize = index.iter().zip(&st).map(|(d, s)| env[d.index()] * s).sum();
                self.dtype.round(t.data[flat])
            }
            Expr::Read { func, index } => {
                let slot = match self.memo.iter().position(|(f, l, _, _)| f == func && l == index) {
                    Some(slot) => slot,
                    None => {
                        let t = self.materialize(*func, index);
                        let st = strides(&t.shape);
                        self.memo.push((*func, index.clone(), t, st));
                        self.memo.len() - 1
                    }
                };
                let (_, _, t, st) = &self.memo[slot];
                let flat: usize = index.iter().zip(st).map(|(d, s)| env[d.index()] * s).sum();
                t.data[flat]
            }
            Expr::Unary(op, a) => op.apply(self.eval(a, env)),
            Expr::Binary(op, a, b) => {
                let a = self.eval(a, env);
                op.apply(a, self.eval(b, env))
            }
            Expr::Select(c, a, b) => {
                if self.eval(c, env) != 0.0 {
                    self.eval(a, env)
                } else {
                    self.eval(b, env)
                }
            }
            Expr::Reduce { op, dim, body } => {
                let mut acc = op.identity();
                for i in 0..self.bound.size(*dim) {
                    env[dim.index()] = i;
                    acc = op.combine(acc, self.eval(body, env));
                }
                acc
            }
            Expr::Dot { dim, a, b } => {
                let mut acc = 0.0f32;
                for i in 0..self.bound.size(*dim) {
                    env[dim.index()] = i;
                    let x = self.eval(a, env);
                    acc += x * self.eval(b, env);
                }
                acc
            }
        }
    }

    /// Computes Func `g`, read under `labels`, at every point of those labels, in f32.
    fn materialize(&mut self, g: FuncId, labels: &[crate::algo::DimId]) -> Tensor {
        let body = self.p.renamed_body(g, labels);
        let shape: Vec<usize> = labels.iter().map(|d| self.bound.size(*d)).collect();
        let mut t = Tensor::zeros(shape.clone());
        let mut env = vec![0usize; self.p.dims.len()];
        for (flat, point) in points(&shape).enumerate() {
            for (axis, d) in labels.iter().enumerate() {
                env[d.index()] = point[axis];
            }
            t.data[flat] = self.eval(&body, &mut env);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An intermediate Func of more than 2^31 elements (each size within the limit, their product
    /// past it, or past `usize`) is an error that names it, not a panic or an allocation abort.
    #[test]
    fn an_intermediate_past_the_element_limit_is_an_error() {
        let src = "Func t, out; Var x; RVar k, j;\nt[x, k, j] = len(x);\nout[x] = rsum(rsum(t[x, k, j], k), j);\nout.compile();";
        let p = crate::compile_spec(src).expect("spec checks");
        let k = p.kernel_by_name("out").expect("kernel");
        for (x, n) in [(4, 1usize << 31), (1, 1 << 31), (1, 1 << 16)] {
            let args = Args::default().size("x", x).size("k", n).size("j", n);
            let e = evaluate(&p, k, &args, DType::F32).expect_err("past the limit");
            assert!(e.0.contains("`t`, which the evaluator computes whole for `out`, would have more than 2^31"), "{e:?}");
        }
        let small = Args::default().size("x", 2).size("k", 3).size("j", 4);
        assert_eq!(evaluate(&p, k, &small, DType::F32).expect("evaluates").data, vec![24.0, 24.0]);
    }
}
