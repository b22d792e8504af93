//! An interpreter of the kernel IR: runs every program of a kernel, one after another, exactly as
//! the IR says (tiles, masks, loops), so that the lowering can be tested without a compiler.

use crate::algo::DimId;
use crate::dtype::DType;
use crate::kir::*;
use crate::tensor::{strides, Bound, Tensor};

/// Settings of the interpreter.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Lanes per warp assumed by the run. Nothing in the kernel IR may depend on it: tests run
    /// with 32 (NVIDIA) and 64 (AMD wavefronts) and expect identical results.
    pub warp_size: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options { warp_size: 32 }
    }
}

/// Runs kernel `k` on bound arguments; returns the output.
pub fn run(k: &Kernel, args: &Bound, dtype: DType, opts: Options) -> Tensor {
    let _threads = k.num_warps * opts.warp_size;
    let mut out = Tensor::zeros(args.out_shape.clone());
    let programs = k.grid.programs(&args.sizes);
    for pid in 0..programs {
        let Some(blocks) = k.grid.unravel(pid, &args.sizes) else { continue };
        let mut m = Machine { k, args, dtype, out: &mut out, values: vec![Vec::new(); k.values.len()], vars: vec![Vec::new(); k.vars.len()], offsets: Vec::new(), blocks };
        m.stmts(&k.body);
    }
    out
}

struct Machine<'a> {
    k: &'a Kernel,
    args: &'a Bound<'a>,
    dtype: DType,
    out: &'a mut Tensor,
    values: Vec<Vec<f32>>,
    vars: Vec<Vec<f32>>,
    /// Enclosing loops: dimension and current offset, innermost last.
    offsets: Vec<(DimId, usize)>,
    /// This program's block index along each blocked dimension.
    blocks: Vec<(DimId, usize)>,
}

/// For each element of `to` (row-major), the index of the element of `from` it reads, where
/// `from`'s dimensions are a subset of `to`'s (missing ones broadcast).
fn broadcast_map(to: &Shape, from: &Shape) -> Vec<usize> {
    let n = to.elements();
    let mut out = vec![0usize; n];
    let ext: Vec<usize> = to.0.iter().map(|(_, e)| *e as usize).collect();
    let from_strides: Vec<usize> = to.0.iter().map(|(d, _)| from.stride(*d)).collect();
    let mut idx = vec![0usize; ext.len()];
    for slot in out.iter_mut() {
        *slot = idx.iter().zip(&from_strides).map(|(i, s)| i * s).sum();
        for a in (0..idx.len()).rev() {
            idx[a] += 1;
            if idx[a] < ext[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}

/// The lane along each dimension of `shape` for every element (row-major).
fn lanes(shape: &Shape) -> Vec<Vec<usize>> {
    let n = shape.elements();
    let st: Vec<usize> = shape.dims().map(|d| shape.stride(d)).collect();
    (0..n).map(|i| shape.0.iter().zip(&st).map(|((_, e), s)| (i / s) % *e as usize).collect()).collect()
}

impl Machine<'_> {
    fn offset(&self, d: DimId) -> usize {
        self.offsets.iter().rev().find(|(x, _)| *x == d).map_or(0, |(_, o)| *o)
    }

    fn size(&self, d: DimId) -> usize {
        self.args.size(d)
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::Let { value, op } => {
                    let v = self.op(*value, op);
                    self.values[value.0 as usize] = v;
                }
                Stmt::Init { var, value, .. } => {
                    self.vars[var.0 as usize] = vec![*value; self.k.var(*var).elements()];
                }
                Stmt::Update { var, combine, value } => {
                    let shape = self.k.var(*var).clone();
                    let map = broadcast_map(&shape, &self.k.value(*value).shape);
                    let src = &self.values[value.0 as usize];
                    let dst = &mut self.vars[var.0 as usize];
                    dst.resize(shape.elements(), 0.0);
                    for (i, m) in map.iter().enumerate() {
                        dst[i] = match combine {
                            Combine::Set => src[*m],
                            Combine::Reduce(op) => op.combine(dst[i], src[*m]),
                        };
                    }
                }
                Stmt::Loop(l) => {
                    let size = self.size(l.dim);
                    let (start, end) = match l.kind {
                        LoopKind::Block => {
                            let b = self.k.grid.block_extent(l.dim).unwrap_or(1) as usize;
                            let blk = self.blocks.iter().find(|(d, _)| *d == l.dim).map_or(0, |(_, i)| *i);
                            (blk * b, ((blk + 1) * b).min(size))
                        }
                        LoopKind::Whole | LoopKind::Reduction => (0, size),
                    };
                    let mut o = start;
                    while o < end {
                        self.offsets.push((l.dim, o));
                        self.stmts(&l.body);
                        self.offsets.pop();
                        o += l.step as usize;
                    }
                }
                Stmt::Store { value, tile } => self.store(*value, tile),
            }
        }
    }

    fn valid(&self, d: DimId, lane: usize) -> bool {
        self.offset(d) + lane < self.size(d)
    }

    fn op(&self, id: ValueId, op: &Op) -> Vec<f32> {
        let shape = &self.k.value(id).shape;
        let n = shape.elements();
        let val = |v: &ValueId| &self.values[v.0 as usize];
        let bmap = |v: &ValueId| broadcast_map(shape, &self.k.value(*v).shape);
        match op {
            Op::Const(c) => vec![*c; n],
            Op::Scalar(s) => vec![self.args.scalars[*s]; n],
            Op::Len(d) => vec![self.size(*d) as f32; n],
            Op::Index(d) => (0..n).map(|l| (self.offset(*d) + l) as f32).collect(),
            Op::Load { input, axes } => {
                let t = self.args.inputs[*input];
                let st = strides(&t.shape);
                lanes(shape)
                    .iter()
                    .map(|ls| {
                        let mut flat = 0;
                        for (axis, d) in axes.iter().enumerate() {
                            let li = shape.0.iter().position(|(x, _)| x == d).expect("load axis in shape");
                            if !self.valid(*d, ls[li]) {
                                return 0.0;
                            }
                            flat += (self.offset(*d) + ls[li]) * st[axis];
                        }
                        self.dtype.round(t.data[flat])
                    })
                    .collect()
            }
            Op::Unary(u, a) => bmap(a).iter().map(|i| u.apply(val(a)[*i])).collect(),
            Op::Binary(b, x, y) => {
                let (mx, my) = (bmap(x), bmap(y));
                (0..n).map(|i| b.apply(val(x)[mx[i]], val(y)[my[i]])).collect()
            }
            Op::Select(c, x, y) => {
                let (mc, mx, my) = (bmap(c), bmap(x), bmap(y));
                (0..n).map(|i| if val(c)[mc[i]] != 0.0 { val(x)[mx[i]] } else { val(y)[my[i]] }).collect()
            }
            Op::MaskFill { value, dim, fill } => {
                let li = shape.0.iter().position(|(x, _)| x == dim);
                let src = val(value);
                lanes(shape).iter().enumerate().map(|(i, ls)| if li.is_none_or(|li| self.valid(*dim, ls[li])) { src[i] } else { *fill }).collect()
            }
            Op::Reduce { op, value, dim } => {
                let from = &self.k.value(*value).shape;
                let ext = from.extent(*dim).unwrap_or(1) as usize;
                let step = from.stride(*dim);
                let base = broadcast_map(shape, from);
                base.iter().map(|b| (0..ext).fold(op.identity(), |acc, l| op.combine(acc, val(value)[b + l * step]))).collect()
            }
            Op::Dot { a, b, dim } => {
                let sa = &self.k.value(*a).shape;
                let sb = &self.k.value(*b).shape;
                let ext = sa.extent(*dim).unwrap_or(1) as usize;
                let (ma, mb) = (broadcast_map(shape, sa), broadcast_map(shape, sb));
                let (ta, tb) = (sa.stride(*dim), sb.stride(*dim));
                (0..n).map(|i| (0..ext).map(|l| val(a)[ma[i] + l * ta] * val(b)[mb[i] + l * tb]).sum()).collect()
            }
            Op::Var(v) => {
                let vs = self.k.var(*v);
                broadcast_map(shape, vs).iter().map(|i| self.vars[v.0 as usize][*i]).collect()
            }
        }
    }

    fn store(&mut self, value: ValueId, tile: &Shape) {
        // The output tile lists the output's dimensions in the kernel's order, which is the
        // output's own axis order.
        let out_dims: Vec<DimId> = tile.dims().collect();
        let map = broadcast_map(tile, &self.k.value(value).shape);
        let st = strides(&self.out.shape);
        for (i, ls) in lanes(tile).iter().enumerate() {
            if !out_dims.iter().enumerate().all(|(a, d)| self.valid(*d, ls[a])) {
                continue;
            }
            let flat: usize = out_dims.iter().enumerate().map(|(a, d)| (self.offset(*d) + ls[a]) * st[a]).sum();
            self.out.data[flat] = self.dtype.round(self.values[value.0 as usize][map[i]]);
        }
    }
}
