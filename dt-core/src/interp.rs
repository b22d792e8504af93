//! An interpreter of the kernel IR: runs every program of a kernel, one after another, exactly as
//! the IR says (tiles, masks, loops), so that the lowering can be tested without a compiler.

use crate::algo::DimId;
use crate::dtype::DType;
use crate::kir::*;
use crate::tensor::{strides, Bound, Tensor};
use std::sync::{Condvar, Mutex};

/// Runs kernel `k` on bound arguments; returns the output. The kernel IR has no notion of
/// threads or lanes (layouts over threads are the GPU emitter's), so neither has this run: the
/// 64-lane wavefronts of HIP are exercised by executing the HIP C itself
/// (`dt-codegen/tests/hip_cpu_matches_reference.rs`). The programs of a cluster run at once, one
/// thread each, and meet at each [`Op::ClusterReduce`] as a GPU's cluster does; programs that
/// meet unevenly (a lowering bug, which would hang a GPU) panic rather than wait forever.
pub fn run(k: &Kernel, args: &Bound, dtype: DType) -> Tensor {
    let out = Mutex::new(Tensor::zeros(args.out_shape.clone()));
    let programs = k.grid.programs(&args.sizes);
    let ranks = k.grid.cluster.map_or(1, |(_, n)| n as usize);
    for first in (0..programs).step_by(ranks) {
        if ranks == 1 {
            run_program(k, args, dtype, &out, first, None);
            continue;
        }
        let exchange = Exchange { meet: Meeting::new(ranks), partials: Mutex::new(vec![Vec::new(); ranks]) };
        std::thread::scope(|s| {
            for rank in 0..ranks {
                let (out, exchange) = (&out, &exchange);
                s.spawn(move || run_program(k, args, dtype, out, first + rank, Some((exchange, rank))));
            }
        });
    }
    out.into_inner().unwrap_or_else(|e| e.into_inner())
}

fn run_program(k: &Kernel, args: &Bound, dtype: DType, out: &Mutex<Tensor>, pid: usize, cluster: Option<(&Exchange, usize)>) {
    // However the program ends (returning, or a panic unwinding), the others stop waiting for it.
    struct Leaves<'a>(Option<&'a Meeting>);
    impl Drop for Leaves<'_> {
        fn drop(&mut self) {
            if let Some(m) = self.0 {
                m.leave();
            }
        }
    }
    let _leaves = Leaves(cluster.map(|(e, _)| &e.meet));
    let Some(blocks) = k.grid.unravel(pid, &args.sizes) else { return };
    let mut m = Machine {
        k,
        args,
        dtype,
        out,
        values: vec![Vec::new(); k.values.len()],
        vars: vec![Vec::new(); k.vars.len()],
        offsets: Vec::new(),
        blocks,
        cluster,
    };
    m.stmts(&k.body);
}

/// Where the programs of one cluster meet: each puts its partial in its slot, all wait, each
/// combines every slot in rank order, all wait again (before the slots are reused).
struct Exchange {
    meet: Meeting,
    partials: Mutex<Vec<Vec<f32>>>,
}

/// A barrier of a cluster's programs that knows when one of them has ended: every program must
/// reach each meeting, so one that ended while others wait means the kernel meets unevenly.
struct Meeting {
    ranks: usize,
    state: Mutex<MeetingState>,
    changed: Condvar,
}

#[derive(Default)]
struct MeetingState {
    /// Programs at the current meeting.
    arrived: usize,
    /// Meetings completed.
    met: u64,
    /// Programs ended.
    ended: usize,
}

impl Meeting {
    fn new(ranks: usize) -> Meeting {
        Meeting { ranks, state: Mutex::new(MeetingState::default()), changed: Condvar::new() }
    }

    fn wait(&self) {
        let uneven = "internal error: the programs of a cluster meet unevenly (one ended while others wait at a meeting)";
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        assert!(s.ended == 0, "{uneven}");
        s.arrived += 1;
        if s.arrived == self.ranks {
            s.arrived = 0;
            s.met += 1;
            self.changed.notify_all();
            return;
        }
        let meeting = s.met;
        while s.met == meeting {
            assert!(s.ended == 0, "{uneven}");
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn leave(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).ended += 1;
        self.changed.notify_all();
    }
}

struct Machine<'a> {
    k: &'a Kernel,
    args: &'a Bound<'a>,
    dtype: DType,
    out: &'a Mutex<Tensor>,
    values: Vec<Vec<f32>>,
    vars: Vec<Vec<f32>>,
    /// Enclosing loops: dimension and current offset, innermost last.
    offsets: Vec<(DimId, usize)>,
    /// This program's block index along each blocked dimension.
    blocks: Vec<(DimId, usize)>,
    /// The cluster's meeting place and this program's rank in it, for a clustered kernel.
    cluster: Option<(&'a Exchange, usize)>,
}

/// Where each element of a tile of shape `to` (row-major) reads from a value of shape `from`,
/// whose dimensions are a subset of `to`'s (missing ones broadcast). Computed per element rather
/// than tabulated: tiles reach 2^16 elements and most operands have the tile's own shape.
enum Broadcast {
    /// `from` is `to`: element `i` reads element `i`.
    Same,
    /// Per dimension of `to`: its stride in `to`, its extent, its stride in `from` (0 when
    /// `from` lacks it).
    Strided(Vec<(usize, usize, usize)>),
}

impl Broadcast {
    fn new(to: &Shape, from: &Shape) -> Self {
        if to == from {
            return Broadcast::Same;
        }
        Broadcast::Strided(to.0.iter().map(|(d, e)| (to.stride(*d), *e as usize, from.stride(*d))).filter(|(_, _, f)| *f != 0).collect())
    }

    fn at(&self, i: usize) -> usize {
        match self {
            Broadcast::Same => i,
            Broadcast::Strided(dims) => dims.iter().map(|&(s, e, f)| (i / s) % e * f).sum(),
        }
    }
}

/// Per dimension of a tile: its stride within the tile and its extent, to decode the lane of
/// element `i` along it as `(i / stride) % extent`.
fn decoders(shape: &Shape) -> Vec<(usize, usize)> {
    shape.0.iter().map(|(d, e)| (shape.stride(*d), *e as usize)).collect()
}

impl Machine<'_> {
    fn offset(&self, d: DimId) -> usize {
        match self.offsets.iter().rev().find(|(x, _)| *x == d) {
            Some((_, o)) => *o,
            None => self.block_start(d),
        }
    }

    /// Where this program's block of `d` starts (0 when `d` is not blocked).
    fn block_start(&self, d: DimId) -> usize {
        let b = self.k.grid.block_extent(d).unwrap_or(1) as usize;
        self.blocks.iter().find(|(x, _)| *x == d).map_or(0, |(_, i)| *i * b)
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
                    let map = Broadcast::new(&shape, &self.k.value(*value).shape);
                    let src = &self.values[value.0 as usize];
                    let dst = &mut self.vars[var.0 as usize];
                    dst.resize(shape.elements(), 0.0);
                    for (i, d) in dst.iter_mut().enumerate() {
                        let v = src[map.at(i)];
                        *d = match combine {
                            Combine::Set => v,
                            Combine::Reduce(op) => op.combine(*d, v),
                        };
                    }
                }
                Stmt::Loop(l) => {
                    let size = self.size(l.dim);
                    let (start, end) = match l.kind {
                        LoopKind::Block => {
                            let (start, b) = (self.block_start(l.dim), self.k.grid.block_extent(l.dim).unwrap_or(1) as usize);
                            let full = (size - size % l.step as usize).clamp(start, start + b);
                            match l.steps {
                                Steps::All => (start, (start + b).min(size)),
                                Steps::Full => (start, full),
                                Steps::Partial => (full, (start + b).min(size)),
                            }
                        }
                        LoopKind::Whole | LoopKind::Reduction => {
                            let full = size - size % l.step as usize;
                            // Up to the end of a block, where the loop says its later steps change nothing.
                            let size = match l.until {
                                Some(d) => size.min(self.block_start(d) + self.k.grid.block_extent(d).unwrap_or(1) as usize),
                                None => size,
                            };
                            match l.steps {
                                Steps::All => (0, size),
                                Steps::Full => (0, full),
                                Steps::Partial => (full, size),
                            }
                        }
                    };
                    let offsets = (start..end).step_by(l.step as usize);
                    let offsets: Vec<usize> = if l.backward { offsets.rev().collect() } else { offsets.collect() };
                    for o in offsets {
                        self.offsets.push((l.dim, o));
                        self.stmts(&l.body);
                        self.offsets.pop();
                    }
                }
                Stmt::Store { value, tile } => self.store(*value, tile),
            }
        }
    }

    fn op(&self, id: ValueId, op: &Op) -> Vec<f32> {
        let shape = &self.k.value(id).shape;
        let n = shape.elements();
        let val = |v: &ValueId| &self.values[v.0 as usize];
        let bmap = |v: &ValueId| Broadcast::new(shape, &self.k.value(*v).shape);
        match op {
            Op::Const(c) => vec![*c; n],
            Op::Scalar(s) => vec![self.args.scalars[*s]; n],
            Op::Len(d) => vec![self.size(*d) as f32; n],
            Op::BlockLanes(d) => {
                let extent = self.k.grid.block_extent(*d).expect("lanes of a blocked dimension") as usize;
                vec![self.size(*d).saturating_sub(self.block_start(*d)).min(extent) as f32; n]
            }
            Op::Index(d) => (0..n).map(|l| (self.offset(*d) + l) as f32).collect(),
            Op::Load { input, axes, fill } => {
                let t = self.args.inputs[*input];
                let st = strides(&t.shape);
                // Per tile dimension: decoder, offset, size, and the input stride of its axis.
                let dims: Vec<(usize, usize, usize, usize, usize)> = shape
                    .0
                    .iter()
                    .zip(decoders(shape))
                    .map(|((d, _), (s, e))| {
                        let axis = axes.iter().position(|x| x == d).expect("load axis in shape");
                        (s, e, self.offset(*d), self.size(*d), st[axis])
                    })
                    .collect();
                (0..n)
                    .map(|i| {
                        let mut flat = 0;
                        for &(s, e, off, size, stride) in &dims {
                            let pos = off + (i / s) % e;
                            if pos >= size {
                                return *fill;
                            }
                            flat += pos * stride;
                        }
                        self.dtype.round(t.data[flat])
                    })
                    .collect()
            }
            Op::Unary(u, a) => {
                let (ma, a) = (bmap(a), val(a));
                (0..n).map(|i| u.apply(a[ma.at(i)])).collect()
            }
            Op::Binary(b, x, y) => {
                let (mx, my, x, y) = (bmap(x), bmap(y), val(x), val(y));
                (0..n).map(|i| b.apply(x[mx.at(i)], y[my.at(i)])).collect()
            }
            Op::Select(c, x, y) => {
                let (mc, mx, my, c, x, y) = (bmap(c), bmap(x), bmap(y), val(c), val(x), val(y));
                (0..n).map(|i| if c[mc.at(i)] != 0.0 { x[mx.at(i)] } else { y[my.at(i)] }).collect()
            }
            Op::MaskFill { value, dim, fill } => {
                let src = val(value);
                match shape.extent(*dim) {
                    None => src.clone(),
                    Some(e) => {
                        let (s, e) = (shape.stride(*dim), e as usize);
                        let (off, size) = (self.offset(*dim), self.size(*dim));
                        (0..n).map(|i| if off + (i / s) % e < size { src[i] } else { *fill }).collect()
                    }
                }
            }
            Op::Reduce { op, value, dim, run } => {
                let from = &self.k.value(*value).shape;
                let ext = from.extent(*dim).unwrap_or(1) as usize;
                let step = from.stride(*dim);
                let (base, src) = (Broadcast::new(shape, from), val(value));
                let lanes = || (0..ext).step_by(*run as usize);
                (0..n)
                    .map(|i| {
                        let b = base.at(i);
                        lanes().fold(op.identity(), |acc, l| op.combine(acc, src[b + l * step]))
                    })
                    .collect()
            }
            Op::RunReduce { op, value, dim, run } => {
                let (src, run) = (val(value), *run as usize);
                match shape.extent(*dim) {
                    None => src.clone(),
                    Some(e) => {
                        let (s, e) = (shape.stride(*dim), e as usize);
                        (0..n)
                            .map(|i| {
                                let lane = (i / s) % e;
                                let first = i - (lane % run) * s;
                                (0..run.min(e - (lane - lane % run))).fold(op.identity(), |acc, j| op.combine(acc, src[first + j * s]))
                            })
                            .collect()
                    }
                }
            }
            Op::ClusterReduce { op, value, .. } => {
                let (exchange, rank) = self.cluster.expect("a cluster reduction runs in a clustered kernel");
                exchange.partials.lock().unwrap_or_else(|e| e.into_inner())[rank] = val(value).clone();
                exchange.meet.wait();
                let all = exchange.partials.lock().unwrap_or_else(|e| e.into_inner()).clone();
                exchange.meet.wait();
                (0..n).map(|i| all.iter().fold(op.identity(), |acc, p| op.combine(acc, p[i]))).collect()
            }
            Op::ClusterPaired { rule, value, first, count, .. } => {
                // Its own meeting here, with the same result as a target's shared one.
                let (exchange, rank) = self.cluster.expect("a cluster reduction runs in a clustered kernel");
                let counts = count.map(|c| val(&c).clone()).unwrap_or_else(|| vec![0.0; n]);
                let shares: Vec<f32> = (0..n).flat_map(|i| [val(first)[i], val(value)[i], counts[i]]).collect();
                exchange.partials.lock().unwrap_or_else(|e| e.into_inner())[rank] = shares;
                exchange.meet.wait();
                let all = exchange.partials.lock().unwrap_or_else(|e| e.into_inner()).clone();
                exchange.meet.wait();
                (0..n).map(|i| rule.combine(&all.iter().map(|p| (p[3 * i], p[3 * i + 1], p[3 * i + 2])).collect::<Vec<_>>())).collect()
            }
            Op::Dot { a, b, dim } => {
                let sa = &self.k.value(*a).shape;
                let sb = &self.k.value(*b).shape;
                let ext = sa.extent(*dim).unwrap_or(1) as usize;
                let (ma, mb) = (Broadcast::new(shape, sa), Broadcast::new(shape, sb));
                let (ta, tb) = (sa.stride(*dim), sb.stride(*dim));
                let (a, b) = (val(a), val(b));
                (0..n)
                    .map(|i| {
                        let (ia, ib) = (ma.at(i), mb.at(i));
                        (0..ext).map(|l| a[ia + l * ta] * b[ib + l * tb]).sum()
                    })
                    .collect()
            }
            Op::Var(v) => {
                let (map, var) = (Broadcast::new(shape, self.k.var(*v)), &self.vars[v.0 as usize]);
                (0..n).map(|i| var[map.at(i)]).collect()
            }
        }
    }

    fn store(&mut self, value: ValueId, tile: &Shape) {
        // The output tile lists the output's dimensions in the kernel's order, which is the
        // output's own axis order.
        let map = Broadcast::new(tile, &self.k.value(value).shape);
        let src = &self.values[value.0 as usize];
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let st = strides(&out.shape);
        let dims: Vec<(usize, usize, usize, usize, usize)> = tile
            .0
            .iter()
            .zip(decoders(tile))
            .enumerate()
            .map(|(a, ((d, _), (s, e)))| (s, e, self.offset(*d), self.size(*d), st[a]))
            .collect();
        'element: for i in 0..tile.elements() {
            let mut flat = 0;
            for &(s, e, off, size, stride) in &dims {
                let pos = off + (i / s) % e;
                if pos >= size {
                    continue 'element;
                }
                flat += pos * stride;
            }
            out.data[flat] = self.dtype.round(src[map.at(i)]);
        }
    }
}
