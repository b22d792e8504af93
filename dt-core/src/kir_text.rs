//! The kernel IR read back from its text form ([`crate::kir::print`], `dtc emit --target kir`),
//! so that a pass can be tested on IR written by hand or printed before it: IR in, IR out,
//! without a `.dt` spec. [`parse`] gives a kernel that prints the text it was read from.
//!
//! The text names dimensions, not their ids: the parsed kernel numbers them in the order of its
//! `sizes` line. A value id the text never defines (the lowering drops values it folds) is kept
//! as a scalar of the blocked layout, so that the ids the text gives stay those of the kernel.

use crate::algo::{BinOp, DimId, RedOp, UnOp};
use crate::dtype::DType;
use crate::kir::*;
use crate::schedule::MapEntry;
use crate::signature::Signature;

/// A line of kernel-IR text that does not read as the printer writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KirParseError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for KirParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for KirParseError {}

type Result<T> = std::result::Result<T, String>;

/// Reads a kernel from the text [`crate::kir::print`] writes.
pub fn parse(text: &str) -> std::result::Result<Kernel, KirParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut r = Reader { lines: &lines, at: 0, current: 0, k: empty_kernel(), strict: Vec::new() };
    r.header()
        .and_then(|()| {
            let body = r.stmts(2)?;
            r.k.body = body;
            r.current = r.at;
            match r.lines.get(r.at) {
                Some(l) if !l.trim().is_empty() => Err(format!("`{}` is not a statement of the program", l.trim())),
                _ => Ok(()),
            }
        })
        .map_err(|message| KirParseError { line: r.current + 1, message })?;
    r.k.num_stages = max_stages(&r.k.body).max(1);
    Ok(r.k)
}

fn empty_kernel() -> Kernel {
    Kernel {
        signature: Signature {
            name: String::new(),
            inputs: Vec::new(),
            scalars: Vec::new(),
            output: TensorParam { name: String::new(), dims: Vec::new() },
            dims: Vec::new(),
            bounds: Vec::new(),
            specialize: Vec::new(),
            dtypes: Vec::new(),
            grid: Grid {
                blocked: Vec::new(),
                order: Vec::new(),
                cluster: None,
                multicast: None,
                descending: Vec::new(),
                origin: String::new(),
            },
            warp_specialize: false,
            wgmma: false,
            persistent: false,
            requires: None,
            aligned: false,
        },
        num_warps: 1,
        num_stages: 1,
        max_registers: None,
        fast_math: false,
        fma_exp: None,
        values: Vec::new(),
        vars: Vec::new(),
        body: Vec::new(),
    }
}

fn max_stages(stmts: &[Stmt]) -> u32 {
    stmts.iter().map(|s| if let Stmt::Loop(l) = s { l.stages.max(max_stages(&l.body)) } else { 1 }).max().unwrap_or(1)
}

struct Reader<'a> {
    lines: &'a [&'a str],
    /// The next line to read.
    at: usize,
    /// The line being read, where an error is.
    current: usize,
    k: Kernel,
    /// The values read so far that compare strictly (`lt`, `gt`): a causal mask's condition
    /// leaves the diagonal out where its loop's guard names one of them ([`Diagonal::strict`]).
    strict: Vec<ValueId>,
}

/// Splits `s` at its trailing comment (`    # ...`): the code and the comment's text.
fn split_comment(s: &str) -> (&str, &str) {
    match s.find("    # ") {
        Some(i) => (&s[..i], &s[i + 6..]),
        None => (s, ""),
    }
}

/// `s` without `prefix`, or an error that says what was expected.
fn after<'s>(s: &'s str, prefix: &str) -> Result<&'s str> {
    s.strip_prefix(prefix).ok_or_else(|| format!("expected `{prefix}` at `{s}`"))
}

fn number<T: std::str::FromStr>(s: &str) -> Result<T> {
    s.trim().parse().map_err(|_| format!("`{s}` is not a number"))
}

/// A float as Rust prints an `f32` (`inf`, `-inf` and `NaN` included).
fn float(s: &str) -> Result<f32> {
    number(s)
}

/// Most value or accumulator ids a kernel read from text may have: each takes a slot of its
/// arena, so an id of a billion would take gigabytes.
const MAX_IDS: u32 = 1 << 20;

fn id(s: &str, prefix: &str) -> Result<u32> {
    let n: u32 = number(after(s.trim(), prefix)?)?;
    if n >= MAX_IDS {
        return Err(format!("`{s}`: ids go up to {}", MAX_IDS - 1));
    }
    Ok(n)
}

fn value_id(s: &str) -> Result<ValueId> {
    Ok(ValueId(id(s, "%")?))
}

fn var_id(s: &str) -> Result<VarId> {
    Ok(VarId(id(s, "$acc")?))
}

/// The part of `s` inside the brackets that open it and the rest after them.
fn bracketed(s: &str) -> Result<(&str, &str)> {
    let inner = after(s, "[")?;
    let end = inner.find(']').ok_or_else(|| format!("no `]` in `{s}`"))?;
    Ok((&inner[..end], &inner[end + 1..]))
}

fn list(s: &str) -> Vec<&str> {
    if s.trim().is_empty() {
        Vec::new()
    } else {
        s.split(", ").map(str::trim).collect()
    }
}

fn named<T: Copy>(all: &[T], name: impl Fn(T) -> &'static str, s: &str, what: &str) -> Result<T> {
    all.iter().copied().find(|x| name(*x) == s).ok_or_else(|| format!("`{s}` is no {what}"))
}

const UNARY: [UnOp; 9] = [UnOp::Neg, UnOp::Exp, UnOp::Exp2, UnOp::Log, UnOp::Sqrt, UnOp::Rsqrt, UnOp::Tanh, UnOp::Sigmoid, UnOp::Abs];
const BINARY: [BinOp; 12] = [
    BinOp::Add,
    BinOp::Sub,
    BinOp::Mul,
    BinOp::Div,
    BinOp::Max,
    BinOp::Min,
    BinOp::Lt,
    BinOp::Le,
    BinOp::Gt,
    BinOp::Ge,
    BinOp::Eq,
    BinOp::Ne,
];
const REDUCTIONS: [RedOp; 3] = [RedOp::Sum, RedOp::Max, RedOp::Min];
const PAIR_RULES: [PairRule; 2] = [PairRule::ExpScaled, PairRule::SquaredDeviation];

impl Reader<'_> {
    fn dim(&self, name: &str) -> Result<DimId> {
        let name = name.trim();
        self.k.dims.iter().find(|(_, n)| n == name).map(|(d, _)| *d).ok_or_else(|| format!("`{name}` is not in the sizes line"))
    }

    fn input(&self, name: &str) -> Result<usize> {
        self.k.inputs.iter().position(|t| t.name == name).ok_or_else(|| format!("`{name}` is no input"))
    }

    fn shape(&self, s: &str) -> Result<Shape> {
        let mut out = Vec::new();
        for e in list(s) {
            let (d, n) = e.split_once(':').ok_or_else(|| format!("`{e}` is not `dim:extent`"))?;
            out.push((self.dim(d)?, number(n)?));
        }
        Ok(Shape(out))
    }

    /// The first line and the kernel-wide lines up to `program:`.
    fn header(&mut self) -> Result<()> {
        let first = self.lines.first().ok_or("the text is empty")?;
        let sig = after(first, "kernel ")?;
        let (name, rest) = sig.split_once('(').ok_or("no `(` after the kernel's name")?;
        let (params, output) = rest.rsplit_once(") -> ").ok_or("no `) -> ` before the output")?;
        self.k.name = name.to_string();
        // Tensors name their dimensions before the sizes line gives them ids: keep the names.
        let tensor = |s: &str| -> Result<(String, Vec<String>)> {
            let (name, dims) = s.split_once('[').ok_or_else(|| format!("`{s}` is not a tensor"))?;
            let dims = dims.strip_suffix(']').ok_or_else(|| format!("`{s}` does not end in `]`"))?;
            Ok((name.to_string(), list(dims).into_iter().map(String::from).collect()))
        };
        let mut tensors = Vec::new();
        for p in split_params(params) {
            match p.strip_suffix(": f32") {
                Some(scalar) => self.k.scalars.push(scalar.to_string()),
                None => tensors.push(tensor(p)?),
            }
        }
        let output = tensor(output)?;
        self.at = 1;
        loop {
            self.current = self.at;
            let line = *self.lines.get(self.at).ok_or("no `program:` line")?;
            self.at += 1;
            let (code, note) = split_comment(line);
            let code = after(code, "  ")?;
            if code == "program:" {
                if self.k.dims.is_empty() {
                    return Err("no `sizes` line before `program:`".into());
                }
                break;
            }
            let (key, rest) = code.split_once(' ').ok_or_else(|| format!("`{code}` is no kernel line"))?;
            let rest = rest.trim_start();
            match key {
                "dtypes" => {
                    for d in list(rest) {
                        self.k.dtypes.push(DType::from_name(d).ok_or_else(|| format!("`{d}` is no element type"))?);
                    }
                }
                "sizes" => {
                    self.k.dims = list(rest).into_iter().enumerate().map(|(i, n)| (DimId(i as u32), n.to_string())).collect();
                    let ids = |names: &[String]| names.iter().map(|n| self.dim(n)).collect::<Result<Vec<_>>>();
                    let inputs = tensors.iter().map(|(n, d)| Ok(TensorParam { name: n.clone(), dims: ids(d)? })).collect::<Result<_>>()?;
                    let out = TensorParam { name: output.0.clone(), dims: ids(&output.1)? };
                    (self.k.inputs, self.k.output) = (inputs, out);
                }
                "bound" => {
                    let (d, n) = rest.split_once(" <= ").ok_or("a bound is `dim <= size`")?;
                    self.k.signature.bounds.push((self.dim(d)?, number(n)?));
                }
                "specialized" => {
                    let twin =
                        after(rest, "twin for ")?.strip_suffix(", contiguous tensors").ok_or("a twin ends in `, contiguous tensors`")?;
                    let (d, n) = twin.split_once(" = ").ok_or("a twin is `dim = size`")?;
                    self.k.signature.specialize.push((self.dim(d)?, number(n)?));
                }
                "grid" if rest.starts_with("persistent") => self.k.persistent = true,
                "tensors" => {
                    (rest == "aligned only").then_some(()).ok_or("a tensors line is `tensors aligned only`")?;
                    self.k.aligned = true;
                }
                "target" => {
                    let name = rest.strip_suffix(" only").ok_or("a target line is `target NAME only`")?;
                    self.k.requires = Some(crate::schedule::Requirement::from_name(name).ok_or("the targets are cuda and sm_90")?);
                }
                "grid" => {
                    let (entries, _) = bracketed(rest)?;
                    for e in list(entries) {
                        self.grid_entry(e)?;
                    }
                    self.k.grid.origin = note.to_string();
                }
                "cluster" => {
                    let (n, d) = rest.split_once(" programs along ").ok_or("a cluster is `N programs along dim`")?;
                    self.k.grid.cluster = Some((self.dim(d)?, number(n)?));
                }
                "multicast" => {
                    let (n, d) = rest.split_once(" programs along ").ok_or("a multicast is `N programs along dim`")?;
                    self.k.grid.multicast = Some((self.dim(d)?, number(n)?));
                }
                "block" => {
                    let (threads, _) = rest.split_once(" threads").ok_or("a block is `N threads`")?;
                    self.k.num_warps = number::<u32>(threads)? / 32;
                    self.k.warp_specialize = rest.contains("a producer warpgroup");
                }
                "regs" => {
                    let n = after(rest, "at most ")?.strip_suffix(" per thread").ok_or("registers are `at most N per thread`")?;
                    self.k.max_registers = Some(number(n)?);
                }
                "math" => self.k.fast_math = true,
                "exps" => {
                    let n =
                        after(rest, "one in ")?.strip_suffix(" on the FMA units").ok_or("exponentials are `one in N on the FMA units`")?;
                    self.k.fma_exp = Some(number(n)?);
                }
                "roles" => self.k.warp_specialize = true,
                "dots" => self.k.wgmma = true,
                _ => return Err(format!("`{key}` is no kernel line")),
            }
        }
        Ok(())
    }

    /// One entry of the grid line: `x/128`, `x/128 last first`, `x/128:outer/8` or
    /// `x1=x:inner/8`.
    fn grid_entry(&mut self, e: &str) -> Result<()> {
        if let Some((name, rest)) = e.split_once('=') {
            let (d, factor) = rest.split_once(":inner/").ok_or_else(|| format!("`{e}` is no inner entry"))?;
            let entry = MapEntry::Inner { dim: self.dim(d)?, factor: number(factor)?, name: name.to_string() };
            self.k.grid.order.push(entry);
            return Ok(());
        }
        let (d, rest) = e.split_once('/').ok_or_else(|| format!("`{e}` is no grid entry"))?;
        let dim = self.dim(d)?;
        let (extent, entry) = if let Some((extent, factor)) = rest.split_once(":outer/") {
            (extent, MapEntry::Outer { dim, factor: number(factor)? })
        } else if let Some(extent) = rest.strip_suffix(" last first") {
            self.k.grid.descending.push(dim);
            (extent, MapEntry::Whole(dim))
        } else {
            (rest, MapEntry::Whole(dim))
        };
        self.k.grid.blocked.push((dim, number(extent)?));
        self.k.grid.order.push(entry);
        Ok(())
    }

    /// The statements at `depth` (two spaces each) from the current line on, up to a line less
    /// indented or the end.
    fn stmts(&mut self, depth: usize) -> Result<Vec<Stmt>> {
        let pad = "  ".repeat(depth);
        let mut out = Vec::new();
        while let Some(line) = self.lines.get(self.at) {
            let Some(code) = line.strip_prefix(&pad).filter(|c| !c.starts_with(' ')) else { break };
            self.current = self.at;
            self.at += 1;
            let (code, note) = split_comment(code);
            out.push(self.stmt(code, note, depth)?);
        }
        Ok(out)
    }

    fn stmt(&mut self, code: &str, note: &str, depth: usize) -> Result<Stmt> {
        if let Some(rest) = code.strip_prefix("for ") {
            return self.loop_stmt(rest, note, depth);
        }
        if let Some(rest) = code.strip_prefix("store ") {
            let (out, rest) = rest.split_once('[').ok_or("a store is `store OUT[tile] = %v masked`")?;
            if out != self.k.output.name {
                return Err(format!("`{out}` is not the output"));
            }
            let (tile, rest) = rest.split_once(']').ok_or("a store's tile ends in `]`")?;
            let value = after(rest, " = ")?.strip_suffix(" masked").ok_or("a store ends in `masked`")?;
            return Ok(Stmt::Store { value: value_id(value)?, tile: self.shape(tile)? });
        }
        if code.starts_with("$acc") {
            let (var, rest) = code.split_once(' ').ok_or("an accumulator line")?;
            let var = var_id(var)?;
            if let Some(rest) = rest.strip_prefix(": f32") {
                let (shape, rest) = bracketed(rest)?;
                let shape = self.shape(shape)?;
                let slot = var.0 as usize;
                if self.k.vars.len() <= slot {
                    self.k.vars.resize(slot + 1, Shape::default());
                }
                self.k.vars[slot] = shape;
                return Ok(Stmt::Init { var, value: float(after(rest, " = ")?)?, origin: note.to_string() });
            }
            let rest = after(rest, "= ")?;
            let (how, args) = rest.split_once('(').ok_or("an update is `how($accN, %v)`")?;
            let (_, value) = args.strip_suffix(')').and_then(|a| a.split_once(", ")).ok_or("an update reads `($accN, %v)`")?;
            let combine = match how {
                "set" => Combine::Set,
                _ => Combine::Reduce(named(&REDUCTIONS, RedOp::name, &format!("r{how}"), "update")?),
            };
            return Ok(Stmt::Update { var, combine, value: value_id(value)? });
        }
        let (id, rest) = code.split_once(" : f32").ok_or_else(|| format!("`{code}` is no statement"))?;
        let value = value_id(id)?;
        let (shape, rest) = bracketed(rest)?;
        let shape = self.shape(shape)?;
        let (layout, op) = after(rest, " @")?.split_once(" = ").ok_or("a value is `%N : f32[...] @layout = op`")?;
        let layout = match layout {
            "blocked" => Layout::Blocked,
            "dot_a" => Layout::DotA,
            "dot_b" => Layout::DotB,
            "dot_acc" => Layout::DotAcc,
            _ => return Err(format!("`{layout}` is no layout")),
        };
        let op = self.op(op)?;
        let slot = value.0 as usize;
        if self.k.values.len() <= slot {
            self.k.values.resize(slot + 1, Value { shape: Shape::default(), layout: Layout::Blocked });
        }
        self.k.values[slot] = Value { shape, layout };
        if matches!(op, Op::Binary(BinOp::Lt | BinOp::Gt, ..)) {
            self.strict.push(value);
        }
        Ok(Stmt::Let { value, op })
    }

    fn op(&self, s: &str) -> Result<Op> {
        let (head, rest) = s.split_once(' ').unwrap_or((s, ""));
        let v = value_id;
        Ok(match head {
            "const" => Op::Const(float(rest)?),
            "scalar" => Op::Scalar(self.k.scalars.iter().position(|x| x == rest).ok_or_else(|| format!("`{rest}` is no scalar"))?),
            "index" => Op::Index(self.dim(rest)?),
            "len" => Op::Len(self.dim(rest)?),
            "lanes" => Op::BlockLanes(self.dim(after(rest, "of this block of ")?)?),
            "load" => {
                let (input, rest) = rest.split_once('[').ok_or("a load is `load IN[axes] masked else F`")?;
                let (axes, fill) = rest.split_once("] masked else ").ok_or("a load ends in `masked else F`")?;
                let axes = list(axes).into_iter().map(|a| self.dim(a)).collect::<Result<_>>()?;
                Op::Load { input: self.input(input)?, axes, fill: float(fill)? }
            }
            "select" => match list(rest)[..] {
                [c, x, y] => Op::Select(v(c)?, v(x)?, v(y)?),
                _ => return Err("a select takes three values".into()),
            },
            "mask" => {
                let (value, rest) = rest.split_once(" along ").ok_or("a mask is `mask %v along dim else F`")?;
                let (dim, fill) = rest.split_once(" else ").ok_or("a mask ends in `else F`")?;
                Op::MaskFill { value: v(value)?, dim: self.dim(dim)?, fill: float(fill)? }
            }
            "dot" => {
                let (ab, dim) = rest.split_once(" over ").ok_or("a dot is `dot %a, %b over dim`")?;
                let (a, b) = ab.split_once(", ").ok_or("a dot takes two values")?;
                Op::Dot { a: v(a)?, b: v(b)?, dim: self.dim(dim)? }
            }
            "read" => Op::Var(var_id(rest)?),
            _ if head.starts_with('r') && REDUCTIONS.iter().any(|r| r.name() == head) => self.reduction(head, rest)?,
            _ if s.starts_with("sum of ") => self.paired(s)?,
            _ => match list(rest)[..] {
                [a] => Op::Unary(named(&UNARY, UnOp::name, head, "operation")?, v(a)?),
                [x, y] => Op::Binary(named(&BINARY, BinOp::name, head, "operation")?, v(x)?, v(y)?),
                _ => return Err(format!("`{s}` is no operation")),
            },
        })
    }

    /// `rmax %v over dim[, one lane per run of R]`, `... over runs of R along dim` or `... over
    /// the cluster along dim`.
    fn reduction(&self, head: &str, rest: &str) -> Result<Op> {
        let op = named(&REDUCTIONS, RedOp::name, head, "reduction")?;
        let (value, over) = rest.split_once(" over ").ok_or("a reduction is `rOP %v over ...`")?;
        let value = value_id(value)?;
        if let Some(dim) = over.strip_prefix("the cluster along ") {
            return Ok(Op::ClusterReduce { op, value, dim: self.dim(dim)? });
        }
        if let Some(runs) = over.strip_prefix("runs of ") {
            let (run, dim) = runs.split_once(" along ").ok_or("runs are `runs of R along dim`")?;
            return Ok(Op::RunReduce { op, value, dim: self.dim(dim)?, run: number(run)? });
        }
        let (dim, run) = match over.split_once(", one lane per run of ") {
            Some((dim, run)) => (dim, number(run)?),
            None => (over, 1),
        };
        Ok(Op::Reduce { op, value, dim: self.dim(dim)?, run })
    }

    /// `RULE %v about %f[, counts %c] over the cluster along dim, at its meeting`.
    fn paired(&self, s: &str) -> Result<Op> {
        let rule = PAIR_RULES.iter().copied().find(|r| s.starts_with(r.name())).ok_or_else(|| format!("`{s}` is no pair rule"))?;
        let rest = s[rule.name().len()..].trim_start();
        let (value, rest) = rest.split_once(" about ").ok_or("a paired reduction reads `%v about %f`")?;
        let (operands, dim) = rest.split_once(" over the cluster along ").ok_or("a paired reduction is over the cluster")?;
        let dim = dim.strip_suffix(", at its meeting").ok_or("a paired reduction ends in `, at its meeting`")?;
        let (first, count) = match operands.split_once(", counts ") {
            Some((first, count)) => (first, Some(value_id(count)?)),
            None => (operands, None),
        };
        Ok(Op::ClusterPaired { rule, value: value_id(value)?, first: value_id(first)?, count, dim: self.dim(dim)? })
    }

    /// `DIM step N (KIND[, pipelined S][, backward][, full steps|, partial step][, until the
    /// end of the block of D][, %C true below the diagonal]):` and its body.
    fn loop_stmt(&mut self, rest: &str, note: &str, depth: usize) -> Result<Stmt> {
        let (dim, rest) = rest.split_once(" step ").ok_or("a loop is `for dim step N (...)`")?;
        let (step, rest) = rest.split_once(" (").ok_or("a loop's attributes are in parentheses")?;
        let attrs = rest.strip_suffix("):").ok_or("a loop line ends in `):`")?;
        let mut l = Loop {
            dim: self.dim(dim)?,
            kind: LoopKind::Block,
            step: number(step)?,
            stages: 1,
            backward: false,
            steps: Steps::All,
            until: None,
            diagonal: None,
            origin: note.to_string(),
            body: Vec::new(),
        };
        for (i, a) in list(attrs).into_iter().enumerate() {
            match a {
                "in block" if i == 0 => l.kind = LoopKind::Block,
                "whole" if i == 0 => l.kind = LoopKind::Whole,
                "reduce" if i == 0 => l.kind = LoopKind::Reduction,
                "backward" => l.backward = true,
                "full steps" => l.steps = Steps::Full,
                "partial step" => l.steps = Steps::Partial,
                _ if a.starts_with("pipelined ") => l.stages = number(&a["pipelined ".len()..])?,
                _ if a.starts_with("until the end of the block of ") => {
                    l.until = Some(self.dim(&a["until the end of the block of ".len()..])?);
                }
                _ if a.ends_with(" true below the diagonal") => {
                    let cond = value_id(a.trim_end_matches(" true below the diagonal"))?;
                    l.diagonal = Some(Diagonal { cond, strict: self.strict.contains(&cond) });
                }
                _ => return Err(format!("`{a}` is no loop attribute")),
            }
        }
        l.body = self.stmts(depth + 1)?;
        Ok(Stmt::Loop(l))
    }
}

/// The parameters of a kernel's first line, split at the commas between them (not those inside
/// a tensor's brackets).
fn split_params(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(s[start..].trim());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_malformed_line_is_an_error_with_its_line() {
        let text = "kernel k(A[x]) -> k[x]\n  dtypes f32\n  sizes  x\n  grid   [x/64]\n  block  128 threads\n  program:\n    %0 : f32[x:64] @blocked = frobnicate %1\n";
        let e = parse(text).unwrap_err();
        assert_eq!(e.line, 7, "{e}");
        assert!(e.message.contains("frobnicate"), "{e}");
    }
}
