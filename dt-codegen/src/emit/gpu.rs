//! The GPU emitter, for CUDA C and HIP C (one emitter, a [`Dialect`]).
//!
//! A program is one thread block of `num_warps` warps (wavefronts on AMD). Every value has a
//! register layout, decided per kernel instance before printing ([`mma::plan`]). Most tiles
//! follow the blocked layout in its simplest form: element `e` of a tile of `N` elements
//! (row-major) lives in register slot `e / T` of thread `e % T`, `T` being the block's thread
//! count, so element-wise work between tiles of one shape needs no communication and loads and
//! stores are coalesced along the last dimension. On CUDA, f16 and bf16 dots that tensor cores
//! can compute, and what is computed from them element-wise, use the `mma.sync` accumulator
//! layout instead (see `gpu_mma.rs`). An operand read under another shape or another layout (a
//! broadcast, the input of a reduction, a dot operand) is first published to a shared-memory
//! slot with its producer's mapping; threads then read the elements they need from there. The
//! blocked layout depends on nothing but the thread count.

#[path = "gpu_mma.rs"]
mod mma;

use super::expr::{binary, combine, float_lit, unary};
use super::{check_abi, program_coords, EmitError, Lanes};
use crate::abi;
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;
use mma::{Plan, RegLayout};
use std::fmt::Write;

/// The device runtime every generated GPU file starts with.
pub const RUNTIME: &str = include_str!("../runtime/dt_gpu.h");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Cuda,
    Hip,
}

impl Dialect {
    /// Lanes per warp (NVIDIA) or wavefront (AMD CDNA).
    pub fn warp_size(self) -> u32 {
        match self {
            Dialect::Cuda => 32,
            Dialect::Hip => 64,
        }
    }
}

/// Launch parameters of one emitted kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchInfo {
    pub symbol: String,
    pub threads: u32,
    /// Dynamic shared memory per program, in bytes.
    pub shared_bytes: u32,
}

/// Most dynamic shared memory a program may ask for (bytes): what an sm_80 GPU and an MI200
/// offer, so a kernel runs on every supported GPU.
pub const MAX_SHARED_BYTES: u32 = 64 * 1024;

/// A whole file: the runtime, the argument block and every (kernel, dtype, symbol).
pub fn emit_file(header: &str, dialect: Dialect, kernels: &[(&Kernel, DType, String)]) -> Result<(String, Vec<LaunchInfo>), EmitError> {
    let mut out = String::new();
    for line in header.lines() {
        let _ = writeln!(out, "/* {line} */");
    }
    out += RUNTIME;
    out += "\n";
    out += abi::C_DECL;
    let mut infos = Vec::new();
    for (k, dtype, symbol) in kernels {
        let (text, info) = emit_kernel(k, *dtype, symbol, dialect)?;
        out += "\n";
        out += &text;
        infos.push(info);
    }
    Ok((out, infos))
}

fn c_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "dt_f16",
        DType::BF16 => "dt_bf16",
    }
}

/// Which operands of which statements go through shared memory, and the slots they use.
struct Publishing {
    /// (value, slot) pairs, by the statement that reads them.
    reads: Vec<(Reader, Vec<(ValueId, usize)>)>,
    /// Elements of each slot.
    slot_elements: Vec<usize>,
}

pub fn emit_kernel(k: &Kernel, dtype: DType, symbol: &str, dialect: Dialect) -> Result<(String, LaunchInfo), EmitError> {
    check_abi(k)?;
    let threads = k.num_warps * dialect.warp_size();
    let plan = mma::plan(k, dtype, dialect);
    let publishing = plan_publishing(k, &plan);
    let mut offsets = Vec::new();
    let mut total = 0usize;
    for n in &publishing.slot_elements {
        offsets.push(total);
        // Every slot starts 16-byte aligned, as `ldmatrix` rows must.
        total += n.next_multiple_of(4);
    }
    let shared_bytes = (total * 4) as u32;
    if shared_bytes > MAX_SHARED_BYTES {
        return Err(EmitError(format!(
            "kernel `{}` needs {shared_bytes} bytes of shared memory for its tiles (at most {MAX_SHARED_BYTES}); use smaller tiles",
            k.name
        )));
    }
    let mut e =
        Emitter { k, dtype, threads, out: String::new(), depth: 1, offsets: Vec::new(), next: 0, publishing, slot_offsets: offsets, plan };
    let t = c_type(dtype);
    let _ = writeln!(
        e.out,
        "/* kernel {} for {dtype}: grid {}; {threads} threads, {shared_bytes} bytes of shared memory */",
        k.name, k.grid.origin
    );
    let _ = writeln!(e.out, "extern \"C\" __global__ void __launch_bounds__({threads}) {symbol}(const dt_args args) {{");
    e.line("extern __shared__ float dt_smem[];");
    e.line("(void)dt_smem;");
    e.line("const int tid = (int)threadIdx.x;");
    for (slot, (_, name)) in k.dims.iter().enumerate() {
        e.line(&format!("const long long s{slot} = args.sizes[{slot}]; /* size of {name} */"));
    }
    for (i, input) in k.inputs.iter().enumerate() {
        e.line(&format!("const {t}* __restrict__ in{i} = (const {t}*)args.inputs[{i}]; /* {} */", input.name));
    }
    e.line(&format!("{t}* __restrict__ out = ({t}*)args.output; /* {} */", k.output.name));
    e.line("const long long pid = (long long)blockIdx.x;");
    for l in program_coords(k, "return;") {
        e.line(&l);
    }
    e.stmts(&k.body)?;
    e.out += "}\n";
    Ok((e.out, LaunchInfo { symbol: symbol.to_string(), threads, shared_bytes }))
}

/// Assigns a shared-memory slot to every operand read under a shape or a layout other than its
/// own.
fn plan_publishing(k: &Kernel, plan: &Plan) -> Publishing {
    let mut p = Publishing { reads: Vec::new(), slot_elements: Vec::new() };
    fn walk(k: &Kernel, plan: &Plan, stmts: &[Stmt], p: &mut Publishing) {
        let layout = |v: ValueId| plan.values[v.0 as usize];
        for s in stmts {
            // What the statement iterates over, and which operands it reads element-wise.
            let (reader, shape, iter_layout, operands): (Reader, Shape, RegLayout, Vec<ValueId>) = match s {
                Stmt::Let { value, op } => {
                    let shape = k.value(*value).shape.clone();
                    let ops = match op {
                        Op::Unary(..) | Op::MaskFill { .. } | Op::Binary(..) | Op::Select(..) => mma::operands(op),
                        // Reductions and dots read across threads: always published.
                        Op::Reduce { value: operand, .. } => {
                            add(p, Reader::Let(*value), k, vec![*operand]);
                            // Slot 1 receives the results of a cooperative reduction.
                            if p.slot_elements.len() < 2 {
                                p.slot_elements.push(0);
                            }
                            p.slot_elements[1] = p.slot_elements[1].max(shape.elements());
                            continue;
                        }
                        Op::Dot { a, b, .. } => {
                            match plan.dot(*value) {
                                // Staged as padded 16-bit rows by the tensor-core dot itself.
                                Some(d) => {
                                    for (slot, words) in [d.slot_words(0), d.slot_words(1)].into_iter().enumerate() {
                                        grow(p, slot, words);
                                    }
                                }
                                None => add(p, Reader::Let(*value), k, vec![*a, *b]),
                            }
                            continue;
                        }
                        _ => vec![],
                    };
                    (Reader::Let(*value), shape, layout(*value), ops)
                }
                Stmt::Update { var, value, .. } => {
                    (Reader::Update(*var, *value), k.var(*var).clone(), plan.vars[var.0 as usize], vec![*value])
                }
                Stmt::Store { value, tile } => {
                    let l = if k.value(*value).shape == *tile { layout(*value) } else { RegLayout::Blocked };
                    (Reader::Store(*value), tile.clone(), l, vec![*value])
                }
                Stmt::Loop(l) => {
                    walk(k, plan, &l.body, p);
                    continue;
                }
                Stmt::Init { .. } => continue,
            };
            let cross: Vec<ValueId> = operands.into_iter().filter(|o| k.value(*o).shape != shape || layout(*o) != iter_layout).collect();
            if !cross.is_empty() {
                add(p, reader, k, cross);
            }
        }
    }
    fn grow(p: &mut Publishing, slot: usize, n: usize) {
        if p.slot_elements.len() <= slot {
            p.slot_elements.resize(slot + 1, 0);
        }
        p.slot_elements[slot] = p.slot_elements[slot].max(n);
    }
    fn add(p: &mut Publishing, reader: Reader, k: &Kernel, ops: Vec<ValueId>) {
        let mut list = Vec::new();
        for (slot, o) in ops.into_iter().enumerate() {
            grow(p, slot, k.value(o).shape.elements());
            list.push((o, slot));
        }
        p.reads.push((reader, list));
    }
    walk(k, plan, &k.body, &mut p);
    p
}

/// A statement that reads operands element-wise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reader {
    Let(ValueId),
    Update(VarId, ValueId),
    Store(ValueId),
}

struct Emitter<'a> {
    k: &'a Kernel,
    dtype: DType,
    threads: u32,
    out: String,
    depth: usize,
    offsets: Vec<(DimId, String)>,
    next: usize,
    publishing: Publishing,
    slot_offsets: Vec<usize>,
    /// The register layout of every value and accumulator, and the tensor-core dots.
    plan: Plan,
}

/// Where an operand's elements are read from inside an element loop.
enum Source {
    /// The thread's own registers, same shape: `name[r]`.
    Own(String),
    /// A shared-memory slot holding the whole tile, indexed by the lanes.
    Shared(usize, Shape),
}

impl Emitter<'_> {
    fn line(&mut self, s: &str) {
        let _ = writeln!(self.out, "{}{s}", "    ".repeat(self.depth));
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    fn size(&self, d: DimId) -> String {
        format!("s{}", self.k.dim_slot(d))
    }

    fn offset(&self, d: DimId) -> String {
        self.offsets.iter().rev().find(|(x, _)| *x == d).map_or("0".into(), |(_, v)| v.clone())
    }

    fn valid(&self, d: DimId, lane: &str) -> String {
        format!("{} + {lane} < {}", self.offset(d), self.size(d))
    }

    fn regs(&self, n: usize) -> usize {
        n.div_ceil(self.threads as usize).max(1)
    }

    fn slot(&self, s: usize) -> String {
        format!("(dt_smem + {})", self.slot_offsets[s])
    }

    fn layout(&self, v: ValueId) -> RegLayout {
        self.plan.values[v.0 as usize]
    }

    /// Writes `v` (in registers) to shared-memory slot `s` as a row-major tile, between
    /// barriers: each thread writes the elements its layout gives it.
    fn publish(&mut self, v: ValueId, s: usize) {
        let shape = self.k.value(v).shape.clone();
        let n = shape.elements();
        let r = self.regs(n);
        let (t, slot) = (self.threads, self.slot(s));
        self.line("__syncthreads();");
        match self.layout(v) {
            RegLayout::Blocked => {
                self.line(unroll(r));
                self.line(&format!(
                    "for (int r = 0; r < {r}; r++) {{ const int e = tid + r * {t}; if (e < {n}) {slot}[e] = v{}[r]; }}",
                    v.0
                ));
            }
            layout => self.for_owned(&shape, layout, |e, _| e.line(&format!("{slot}[e] = v{}[r];", v.0))),
        }
        self.line("__syncthreads();");
    }

    /// Publishes what statement `reader` reads across threads or layouts; returns how each
    /// operand is read.
    fn sources(&mut self, reader: Reader, operands: &[ValueId]) -> Vec<Source> {
        let plan = self.publishing.reads.iter().find(|(r, _)| *r == reader).map(|(_, l)| l.clone()).unwrap_or_default();
        for (o, s) in &plan {
            self.publish(*o, *s);
        }
        operands
            .iter()
            .map(|o| match plan.iter().find(|(x, _)| x == o) {
                Some((_, s)) => Source::Shared(*s, self.k.value(*o).shape.clone()),
                None => Source::Own(format!("v{}", o.0)),
            })
            .collect()
    }

    fn read(&self, src: &Source, lanes: &Lanes) -> String {
        match src {
            Source::Own(name) => format!("{name}[r]"),
            Source::Shared(s, shape) => format!("{}[{}]", self.slot(*s), lanes.index(shape)),
        }
    }

    /// Loops over the elements of `shape` this thread owns under `layout`, with the lane along
    /// each dimension decoded (only the lanes the body uses are declared); `r` is the register
    /// slot and `e` the row-major index of the element.
    fn for_owned(&mut self, shape: &Shape, layout: RegLayout, body: impl FnOnce(&mut Self, &Lanes)) {
        match layout {
            RegLayout::Mma(t) => self.for_owned_mma(shape, t, body),
            RegLayout::Blocked => self.for_blocked(shape, unroll(self.regs(shape.elements())), body),
        }
    }

    /// [`Self::for_owned`] for the blocked layout, the loop preceded by `pragma`.
    fn for_blocked(&mut self, shape: &Shape, pragma: &str, body: impl FnOnce(&mut Self, &Lanes)) {
        let n = shape.elements();
        let r = self.regs(n);
        let t = self.threads;
        self.line(pragma);
        self.line(&format!("for (int r = 0; r < {r}; r++) {{"));
        self.depth += 1;
        self.line(&format!("const int e = tid + r * {t};"));
        self.line(&format!("if (e < {n}) {{"));
        self.depth += 1;
        let lanes = Lanes(shape.0.iter().map(|(d, _)| (*d, self.fresh("l"))).collect());
        let before = std::mem::take(&mut self.out);
        body(self, &lanes);
        let inner = std::mem::replace(&mut self.out, before);
        for ((d, ext), (_, l)) in shape.0.iter().zip(&lanes.0) {
            if mentions(&inner, l) {
                self.line(&format!("const int {l} = (e / {}) % {ext};", shape.stride(*d)));
            }
        }
        self.out += &inner;
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }

    /// [`Self::for_owned`] for the mma accumulator layout: always unrolled, so that the fragment
    /// registers stay registers (`mma.sync` needs them so), lanes computed from the thread and
    /// the register slot.
    fn for_owned_mma(&mut self, shape: &Shape, t: mma::MmaTile, body: impl FnOnce(&mut Self, &Lanes)) {
        let r = self.regs(shape.elements());
        self.line("#pragma unroll");
        self.line(&format!("for (int r = 0; r < {r}; r++) {{"));
        self.depth += 1;
        let lanes = Lanes(shape.0.iter().map(|(d, _)| (*d, self.fresh("l"))).collect());
        let before = std::mem::take(&mut self.out);
        body(self, &lanes);
        let inner = std::mem::replace(&mut self.out, before);
        let (row, col) = t.row_col("r");
        let e = if mentions(&inner, "e") { format!("const int e = {};", lanes.index(shape)) } else { String::new() };
        for (d, l) in &lanes.0 {
            if mentions(&inner, l) || mentions(&e, l) {
                let v = if *d == t.m {
                    row.as_str()
                } else if *d == t.n {
                    col.as_str()
                } else {
                    "0"
                };
                self.line(&format!("const int {l} = {v};"));
            }
        }
        if !e.is_empty() {
            self.line(&e);
        }
        self.out += &inner;
        self.depth -= 1;
        self.line("}");
    }

    /// A reduction by groups of `group` consecutive threads per result element: each thread
    /// combines a strided share of the reduced lanes (read from slot 0), the group combines
    /// through shuffles within `group` lanes, and its first thread writes the result to slot 1.
    fn cooperative_reduce(&mut self, op: dt_core::algo::RedOp, result: &Shape, input: &Shape, n: usize, st: usize, group: usize) {
        let (src, res, nres) = (self.slot(0), self.slot(1), result.elements());
        let ident = float_lit(op.identity());
        self.line(&format!("/* cooperative reduction: {group} threads per result */"));
        self.line("{");
        self.depth += 1;
        self.line(&format!("const int j = tid / {group};"));
        self.line(&format!("const int q = tid % {group};"));
        self.line(&format!("float p = {ident};"));
        self.line(&format!("if (j < {nres}) {{"));
        self.depth += 1;
        let lanes = Lanes(result.0.iter().map(|(d, _)| (*d, self.fresh("l"))).collect());
        let base = lanes.index(input);
        for ((d, ext), (_, l)) in result.0.iter().zip(&lanes.0) {
            if mentions(&base, l) {
                self.line(&format!("const int {l} = (j / {}) % {ext};", result.stride(*d)));
            }
        }
        self.line(&format!("for (int i = q; i < {n}; i += {group}) p = {};", combine(op, "p", &format!("{src}[{base} + i * {st}]"))));
        self.depth -= 1;
        self.line("}");
        self.line(&format!(
            "for (int m = {}; m > 0; m >>= 1) p = {};",
            group / 2,
            combine(op, "p", &format!("dt_shfl_xor(p, m, {group})"))
        ));
        self.line(&format!("if (q == 0 && j < {nres}) {res}[j] = p;"));
        self.depth -= 1;
        self.line("}");
        self.line("__syncthreads();");
    }

    fn declare(&mut self, name: &str, shape: &Shape) {
        let r = self.regs(shape.elements());
        self.line(&format!("float {name}[{r}];"));
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), EmitError> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), EmitError> {
        match s {
            Stmt::Let { value, op } => self.op(*value, op)?,
            Stmt::Init { var, value, origin } => {
                let shape = self.k.var(*var).clone();
                if !origin.is_empty() {
                    self.line(&format!("/* {origin} */"));
                }
                let name = format!("acc{}", var.0);
                self.declare(&name, &shape);
                let v = float_lit(*value);
                let layout = self.plan.vars[var.0 as usize];
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{name}[r] = {v};")));
            }
            Stmt::Update { var, value, .. } if self.plan.fused_update(*var, *value) => {
                self.line(&format!("/* acc{} += v{}: accumulated by the tensor-core dot above */", var.0, value.0));
            }
            Stmt::Update { var, combine: how, value } => {
                let shape = self.k.var(*var).clone();
                let src = self.sources(Reader::Update(*var, *value), &[*value]);
                let name = format!("acc{}", var.0);
                let layout = self.plan.vars[var.0 as usize];
                self.for_owned(&shape, layout, |e, l| {
                    let v = e.read(&src[0], l);
                    let rhs = match how {
                        Combine::Set => v,
                        Combine::Reduce(op) => combine(*op, &format!("{name}[r]"), &v),
                    };
                    e.line(&format!("{name}[r] = {rhs};"));
                });
            }
            Stmt::Loop(l) => {
                let o = self.fresh("o");
                if !l.origin.is_empty() {
                    self.line(&format!("/* {} */", l.origin));
                }
                self.line(&super::loop_header(self.k, l, &o));
                self.depth += 1;
                self.offsets.push((l.dim, o));
                self.stmts(&l.body)?;
                self.offsets.pop();
                self.depth -= 1;
                self.line("}");
            }
            Stmt::Store { value, tile } => {
                let src = self.sources(Reader::Store(*value), &[*value]);
                let out_dims = self.k.output.dims.clone();
                let store = format!("dt_store_{}", self.dtype.name());
                // A store of a whole tile runs in the tile's layout; a broadcast one, blocked.
                let layout = if self.k.value(*value).shape == *tile { self.layout(*value) } else { RegLayout::Blocked };
                self.for_owned(tile, layout, |e, l| {
                    let (cond, addr) = super::masked_address(e.k, &out_dims, l, |d| e.offset(d), |a| format!("args.output_strides[{a}]"));
                    let v = e.read(&src[0], l);
                    e.line(&format!("if ({cond}) out[{addr}] = {store}({v});"));
                });
            }
        }
        Ok(())
    }

    fn op(&mut self, id: ValueId, op: &Op) -> Result<(), EmitError> {
        let shape = self.k.value(id).shape.clone();
        let dst = format!("v{}", id.0);
        let layout = self.layout(id);
        match op {
            Op::Const(c) => {
                self.declare(&dst, &shape);
                let c = float_lit(*c);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {c};")));
            }
            Op::Scalar(i) => {
                self.declare(&dst, &shape);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = args.scalars[{i}];")));
            }
            Op::Len(d) => {
                self.declare(&dst, &shape);
                let s = self.size(*d);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = (float){s};")));
            }
            Op::Index(d) => {
                self.declare(&dst, &shape);
                let o = self.offset(*d);
                self.for_owned(&shape, layout, |e, l| e.line(&format!("{dst}[r] = (float)({o} + {});", l.lane(*d))));
            }
            Op::Load { .. } if self.plan.direct_load(id) => {
                self.line(&format!("/* v{}: loaded by the tensor-core dot that reads it */", id.0));
            }
            Op::Load { input, axes } => {
                self.declare(&dst, &shape);
                let load = format!("dt_load_{}", self.dtype.name());
                self.for_owned(&shape, layout, |e, l| {
                    let (cond, addr) =
                        super::masked_address(e.k, axes, l, |d| e.offset(d), |a| format!("args.input_strides[{input}][{a}]"));
                    e.line(&format!("{dst}[r] = ({cond}) ? {load}(in{input}[{addr}]) : 0.0f;"));
                });
            }
            Op::Unary(u, a) => {
                let src = self.sources(Reader::Let(id), &[*a]);
                self.declare(&dst, &shape);
                self.for_owned(&shape, layout, |e, l| {
                    let v = e.read(&src[0], l);
                    e.line(&format!("{dst}[r] = {};", unary(*u, &v)));
                });
            }
            Op::Binary(b, x, y) => {
                let src = self.sources(Reader::Let(id), &[*x, *y]);
                self.declare(&dst, &shape);
                self.for_owned(&shape, layout, |e, l| {
                    let (vx, vy) = (e.read(&src[0], l), e.read(&src[1], l));
                    e.line(&format!("{dst}[r] = {};", binary(*b, &vx, &vy)));
                });
            }
            Op::Select(c, x, y) => {
                let src = self.sources(Reader::Let(id), &[*c, *x, *y]);
                self.declare(&dst, &shape);
                self.for_owned(&shape, layout, |e, l| {
                    let (vc, vx, vy) = (e.read(&src[0], l), e.read(&src[1], l), e.read(&src[2], l));
                    e.line(&format!("{dst}[r] = {vc} != 0.0f ? {vx} : {vy};"));
                });
            }
            Op::MaskFill { value, dim, fill } => {
                let src = self.sources(Reader::Let(id), &[*value]);
                self.declare(&dst, &shape);
                let fill = float_lit(*fill);
                self.for_owned(&shape, layout, |e, l| {
                    let cond = if shape.extent(*dim).is_some() { e.valid(*dim, l.lane(*dim)) } else { "1".into() };
                    let v = e.read(&src[0], l);
                    e.line(&format!("{dst}[r] = ({cond}) ? {v} : {fill};"));
                });
            }
            Op::Reduce { op, value, dim } => {
                let sv = self.k.value(*value).shape.clone();
                self.sources(Reader::Let(id), &[*value]);
                let slot = self.slot(0);
                self.declare(&dst, &shape);
                let (n, st) = (sv.extent(*dim).unwrap_or(1) as usize, sv.stride(*dim));
                let ident = float_lit(op.identity());
                let group = reduce_group(self.threads as usize, shape.elements(), n);
                if group == 1 {
                    // One thread per result element, serially over the reduced lanes.
                    self.for_owned(&shape, layout, |e, l| {
                        let acc = e.fresh("a");
                        e.line(&format!("float {acc} = {ident};"));
                        e.line(&format!(
                            "for (int q = 0; q < {n}; q++) {acc} = {};",
                            combine(*op, &acc, &format!("{slot}[{} + q * {st}]", l.index(&sv)))
                        ));
                        e.line(&format!("{dst}[r] = {acc};"));
                    });
                } else {
                    self.cooperative_reduce(*op, &shape, &sv, n, st, group);
                    let res = self.slot(1);
                    self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {res}[e];")));
                }
            }
            Op::Dot { .. } if self.plan.dot(id).is_some() => {
                let d = self.plan.dot(id).expect("planned").clone();
                self.mma_dot(id, &d);
            }
            Op::Dot { a, b, dim } => {
                let (sa, sb) = (self.k.value(*a).shape.clone(), self.k.value(*b).shape.clone());
                self.sources(Reader::Let(id), &[*a, *b]);
                let (s0, s1) = (self.slot(0), self.slot(1));
                self.declare(&dst, &shape);
                let (n, ta, tb) = (sa.extent(*dim).unwrap_or(1), sa.stride(*dim), sb.stride(*dim));
                self.for_owned(&shape, layout, |e, l| {
                    let acc = e.fresh("a");
                    e.line(&format!("float {acc} = 0.0f;"));
                    e.line(&format!(
                        "for (int q = 0; q < {n}; q++) {acc} = fmaf({s0}[{} + q * {ta}], {s1}[{} + q * {tb}], {acc});",
                        l.index(&sa),
                        l.index(&sb)
                    ));
                    e.line(&format!("{dst}[r] = {acc};"));
                });
            }
            Op::Var(v) => {
                self.declare(&dst, &shape);
                let src = format!("acc{}", v.0);
                self.for_owned(&shape, layout, |e, _| e.line(&format!("{dst}[r] = {src}[r];")));
            }
        }
        Ok(())
    }
}

/// Whether `text` uses the identifier `name` (not merely a longer identifier that starts with it).
fn mentions(text: &str, name: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back().is_none_or(|c| !ident(c));
        let after = text[i + name.len()..].chars().next().is_none_or(|c| !ident(c));
        before && after
    })
}

/// Register slots per thread up to which element loops are unrolled (keeping the tile in
/// registers); larger tiles keep the loop, which bounds code size and compile time.
const UNROLL_LIMIT: usize = 16;

fn unroll(regs: usize) -> &'static str {
    if regs <= UNROLL_LIMIT {
        "#pragma unroll"
    } else {
        "#pragma unroll 1"
    }
}

/// Threads per result element of a reduction: a power of two, at most 32 (so the group lies in
/// one warp on NVIDIA and in one half-wavefront on AMD), no more than the threads allow per
/// result, and no more than the reduced lanes; 1 means one thread per result.
fn reduce_group(threads: usize, results: usize, lanes: usize) -> usize {
    let per_result = threads / results.max(1);
    let mut g = 1;
    while g * 2 <= per_result.min(32) && g * 2 <= lanes {
        g *= 2;
    }
    g
}
