//! The CPU C emitter: one C function per kernel and element type,
//! `void SYMBOL(const dt_args* args, long long first, long long last)`, that runs the programs
//! `first..last` of the grid (clamped to the grid) in turn; programs write disjoint parts of the
//! output, so callers may run ranges on several threads. Tiles are arrays (in one heap arena per call);
//! each tile operation is a loop nest over the tile's lanes; masks compare offset + lane with the
//! dimension's size. Compiles warning-free with `-O2 -Wall -Wextra` under gcc and clang.

use super::expr::{binary, combine, float_lit, unary};
use super::{check_abi, EmitError, Lanes};
use crate::abi;
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;
use std::fmt::Write;

/// The runtime every generated CPU file starts with.
pub const RUNTIME: &str = include_str!("../runtime/dt_cpu.h");

/// A whole C file: the runtime, the argument block, and one function per (kernel, dtype, symbol).
pub fn emit_file(header: &str, kernels: &[(&Kernel, DType, String)]) -> Result<String, EmitError> {
    let mut out = String::new();
    for line in header.lines() {
        let _ = writeln!(out, "/* {line} */");
    }
    out += RUNTIME;
    out += "\n";
    out += abi::C_DECL;
    for (k, dtype, symbol) in kernels {
        out += "\n";
        out += &emit_kernel(k, *dtype, symbol)?;
    }
    Ok(out)
}

fn c_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "dt_f16",
        DType::BF16 => "dt_bf16",
    }
}

/// One kernel for one element type, as a C function named `symbol`.
pub fn emit_kernel(k: &Kernel, dtype: DType, symbol: &str) -> Result<String, EmitError> {
    check_abi(k)?;
    super::check_no_cluster(k, "the CPU")?;
    super::check_required_target(k, "the CPU")?;
    let mut e = Emitter { k, dtype, out: String::new(), depth: 1, offsets: Vec::new(), next: 0, slots: Vec::new(), var_slots: Vec::new() };
    let mut arena = 0usize;
    for v in &k.values {
        e.slots.push(arena);
        arena += v.shape.elements();
    }
    for s in &k.vars {
        e.var_slots.push(arena);
        arena += s.elements();
    }
    let t = c_type(dtype);
    let _ = writeln!(e.out, "/* kernel {} for {}: grid {} */", k.name, dtype, k.grid.origin);
    let _ = writeln!(e.out, "int {symbol}(const dt_args* args, long long first, long long last) {{");
    for (slot, (_, name)) in k.dims.iter().enumerate() {
        e.line(&format!("const long long s{slot} = args->sizes[{slot}]; /* size of {name} */"));
    }
    for (i, input) in k.inputs.iter().enumerate() {
        e.line(&format!("const {t}* in{i} = (const {t}*)(uintptr_t)args->inputs[{i}]; /* {} */", input.name));
    }
    e.line(&format!("{t}* out = ({t}*)(uintptr_t)args->output; /* {} */", k.output.name));
    e.line(&format!("float* arena = (float*)malloc(sizeof(float) * {arena});"));
    e.line(&format!("if (!arena) return {}; /* no memory for the tiles: nothing ran */", abi::CPU_ARENA_FAILED));
    // Program ids: unravel through the grid's order, the last entry fastest.
    e.line(&format!("const long long programs = {};", super::program_count(k)));
    e.line("for (long long pid = first; pid < last && pid < programs; pid++) {");
    e.depth += 1;
    for l in super::program_coords(k, "continue;", super::CPU_INDEX, None, None) {
        e.line(&l);
    }
    e.stmts(&k.body)?;
    e.depth -= 1;
    e.line("}");
    e.line("free(arena);");
    e.line("return 0;");
    e.out += "}\n";
    Ok(e.out)
}

struct Emitter<'a> {
    k: &'a Kernel,
    dtype: DType,
    out: String,
    depth: usize,
    /// Enclosing loops: dimension and the C variable holding its offset.
    offsets: Vec<(DimId, String)>,
    next: usize,
    slots: Vec<usize>,
    var_slots: Vec<usize>,
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
        self.offsets.iter().rev().find(|(x, _)| *x == d).map_or_else(|| super::start_offset(self.k, d), |(_, v)| v.clone())
    }

    fn val(&self, v: ValueId) -> String {
        format!("(arena + {})", self.slots[v.0 as usize])
    }

    fn var(&self, v: VarId) -> String {
        format!("(arena + {})", self.var_slots[v.0 as usize])
    }

    fn valid(&self, d: DimId, lane: &str) -> String {
        format!("{} + {lane} < {}", self.offset(d), self.size(d))
    }

    /// Opens one loop per dimension of `shape`, runs `body` inside, closes them.
    fn for_lanes(&mut self, shape: &Shape, body: impl FnOnce(&mut Self, &Lanes)) {
        let mut lanes = Vec::new();
        for (d, n) in &shape.0 {
            let l = self.fresh("l");
            self.line(&format!("for (long long {l} = 0; {l} < {n}; {l}++) {{"));
            self.depth += 1;
            lanes.push((*d, l));
        }
        let lanes = Lanes(lanes);
        body(self, &lanes);
        for _ in &shape.0 {
            self.depth -= 1;
            self.line("}");
        }
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
                let (dst, v) = (self.var(*var), float_lit(*value));
                self.for_lanes(&shape, |e, l| e.line(&format!("{dst}[{}] = {v};", l.index(&shape))));
            }
            Stmt::Update { var, combine: how, value } => {
                let shape = self.k.var(*var).clone();
                let vshape = self.k.value(*value).shape.clone();
                let (dst, src) = (self.var(*var), self.val(*value));
                self.for_lanes(&shape, |e, l| {
                    let (i, j) = (l.index(&shape), l.index(&vshape));
                    let rhs = match how {
                        Combine::Set => format!("{src}[{j}]"),
                        Combine::Reduce(op) => combine(*op, &format!("{dst}[{i}]"), &format!("{src}[{j}]")),
                    };
                    e.line(&format!("{dst}[{i}] = {rhs};"));
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
                let vshape = self.k.value(*value).shape.clone();
                let src = self.val(*value);
                let out_dims = self.k.output.dims.clone();
                let store = format!("dt_store_{}", self.dtype.name());
                self.for_lanes(tile, |e, l| {
                    let (cond, addr) = super::masked_address(
                        super::CPU_INDEX,
                        e.k,
                        &out_dims,
                        l,
                        |d| e.offset(d),
                        |a| format!("args->output_strides[{a}]"),
                        &[],
                    );
                    e.line(&format!("if ({cond}) out[{addr}] = {store}({src}[{}]);", l.index(&vshape)));
                });
            }
        }
        Ok(())
    }

    fn op(&mut self, id: ValueId, op: &Op) -> Result<(), EmitError> {
        let shape = self.k.value(id).shape.clone();
        let dst = self.val(id);
        let shape_of = |v: &ValueId| self.k.value(*v).shape.clone();
        match op {
            Op::ClusterReduce { .. } | Op::ClusterPaired { .. } => return super::check_no_cluster(self.k, "the CPU"),
            Op::Const(c) => {
                let c = float_lit(*c);
                self.for_lanes(&shape, |e, l| e.line(&format!("{dst}[{}] = {c};", l.index(&shape))));
            }
            Op::Scalar(i) => self.for_lanes(&shape, |e, l| e.line(&format!("{dst}[{}] = args->scalars[{i}];", l.index(&shape)))),
            Op::Len(d) => {
                let s = self.size(*d);
                self.for_lanes(&shape, |e, l| e.line(&format!("{dst}[{}] = (float){s};", l.index(&shape))));
            }
            Op::BlockLanes(d) => {
                let n = super::block_lanes(self.k, *d);
                self.for_lanes(&shape, |e, l| e.line(&format!("{dst}[{}] = {n};", l.index(&shape))));
            }
            Op::Index(d) => {
                let o = self.offset(*d);
                self.for_lanes(&shape, |e, l| e.line(&format!("{dst}[{}] = (float)({o} + {});", l.index(&shape), l.lane(*d))));
            }
            Op::Load { input, axes, fill } => {
                let load = format!("dt_load_{}", self.dtype.name());
                let fill = float_lit(*fill);
                self.for_lanes(&shape, |e, l| {
                    let (cond, addr) = super::masked_address(
                        super::CPU_INDEX,
                        e.k,
                        axes,
                        l,
                        |d| e.offset(d),
                        |a| format!("args->input_strides[{input}][{a}]"),
                        &[],
                    );
                    e.line(&format!("{dst}[{}] = ({cond}) ? {load}(in{input}[{addr}]) : {fill};", l.index(&shape)));
                });
            }
            Op::Unary(u, a) => {
                let (sa, src) = (shape_of(a), self.val(*a));
                self.for_lanes(&shape, |e, l| {
                    e.line(&format!("{dst}[{}] = {};", l.index(&shape), unary(*u, &format!("{src}[{}]", l.index(&sa)))))
                });
            }
            Op::Binary(b, x, y) => {
                let (sx, sy, vx, vy) = (shape_of(x), shape_of(y), self.val(*x), self.val(*y));
                self.for_lanes(&shape, |e, l| {
                    let rhs = binary(*b, &format!("{vx}[{}]", l.index(&sx)), &format!("{vy}[{}]", l.index(&sy)));
                    e.line(&format!("{dst}[{}] = {rhs};", l.index(&shape)));
                });
            }
            Op::Select(c, x, y) => {
                let (sc, sx, sy) = (shape_of(c), shape_of(x), shape_of(y));
                let (vc, vx, vy) = (self.val(*c), self.val(*x), self.val(*y));
                self.for_lanes(&shape, |e, l| {
                    e.line(&format!(
                        "{dst}[{}] = {vc}[{}] != 0.0f ? {vx}[{}] : {vy}[{}];",
                        l.index(&shape),
                        l.index(&sc),
                        l.index(&sx),
                        l.index(&sy)
                    ));
                });
            }
            Op::MaskFill { value, dim, fill } => {
                let (sv, src, fill) = (shape_of(value), self.val(*value), float_lit(*fill));
                self.for_lanes(&shape, |e, l| {
                    let cond = if shape.extent(*dim).is_some() { e.valid(*dim, l.lane(*dim)) } else { super::ALWAYS_VALID.into() };
                    e.line(&format!("{dst}[{}] = ({cond}) ? {src}[{}] : {fill};", l.index(&shape), l.index(&sv)));
                });
            }
            Op::Reduce { op, value, dim, run } => {
                let sv = shape_of(value);
                let (src, n, st) = (self.val(*value), sv.extent(*dim).unwrap_or(1), sv.stride(*dim));
                let id_lit = float_lit(op.identity());
                self.for_lanes(&shape, |e, l| {
                    let r = e.fresh("r");
                    let acc = e.fresh("a");
                    e.line(&format!("float {acc} = {id_lit};"));
                    e.line(&format!(
                        "for (long long {r} = 0; {r} < {n}; {r} += {run}) {acc} = {};",
                        combine(*op, &acc, &format!("{src}[{} + {r} * {st}]", l.index(&sv)))
                    ));
                    e.line(&format!("{dst}[{}] = {acc};", l.index(&shape)));
                });
            }
            Op::RunReduce { op, value, dim, run } => {
                let (src, n, st) = (self.val(*value), shape.extent(*dim).unwrap_or(1), shape.stride(*dim));
                let id_lit = float_lit(op.identity());
                self.for_lanes(&shape, |e, l| {
                    let (r, acc, first) = (e.fresh("r"), e.fresh("a"), e.fresh("f"));
                    let lane = l.lane(*dim);
                    e.line(&format!("const long long {first} = {lane} - {lane} % {run};"));
                    e.line(&format!("float {acc} = {id_lit};"));
                    e.line(&format!(
                        "for (long long {r} = {first}; {r} < {first} + {run} && {r} < {n}; {r}++) {acc} = {};",
                        combine(*op, &acc, &format!("{src}[{} + ({r} - {lane}) * {st}]", l.index(&shape)))
                    ));
                    e.line(&format!("{dst}[{}] = {acc};", l.index(&shape)));
                });
            }
            Op::Dot { a, b, dim } => {
                let (sa, sb) = (shape_of(a), shape_of(b));
                let (va, vb) = (self.val(*a), self.val(*b));
                let (n, ta, tb) = (sa.extent(*dim).unwrap_or(1), sa.stride(*dim), sb.stride(*dim));
                self.for_lanes(&shape, |e, l| {
                    let r = e.fresh("r");
                    let acc = e.fresh("a");
                    e.line(&format!("float {acc} = 0.0f;"));
                    e.line(&format!(
                        "for (long long {r} = 0; {r} < {n}; {r}++) {acc} += {va}[{} + {r} * {ta}] * {vb}[{} + {r} * {tb}];",
                        l.index(&sa),
                        l.index(&sb)
                    ));
                    e.line(&format!("{dst}[{}] = {acc};", l.index(&shape)));
                });
            }
            Op::Var(v) => {
                let (sv, src) = (self.k.var(*v).clone(), self.var(*v));
                self.for_lanes(&shape, |e, l| e.line(&format!("{dst}[{}] = {src}[{}];", l.index(&shape), l.index(&sv))));
            }
        }
        Ok(())
    }
}
