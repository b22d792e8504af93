//! Register layouts of the GPU emitter, and `rdot` on matrix units: NVIDIA tensor cores
//! (`mma.sync`) and AMD matrix cores (MFMA).
//!
//! Before a kernel is printed, [`plan`] gives every value and accumulator a [`RegLayout`]: where
//! each element of the tile lives (which thread, which register slot). Most tiles are
//! [`RegLayout::Blocked`]. A dot that the matrix units can compute gets [`RegLayout::Mma`], the
//! accumulator layout of the dialect's matrix instruction ([`MatrixIsa`]: `mma.sync.m16n8k16` on
//! CUDA, `v_mfma_f32_16x16x16` on HIP), and so do the accumulators it is summed into and the
//! element-wise values computed only from such tiles, so that the epilogue (scaling, masking, the
//! store) runs on the fragments in place. Where two layouts meet, the value is published through
//! shared memory with its producer's mapping and read back under the reader's, as any tile read
//! under another shape is.
//!
//! A matrix-unit dot stages both operands in shared memory as 16-bit values, in lines padded so
//! that the eight line addresses of an `ldmatrix` fall in distinct banks: [rows][K], or
//! [K][rows] (read with `ldmatrix.trans`) for an operand whose input has the row dimension as
//! its last, contiguous axis, so that the copy from global memory is coalesced either way. An
//! operand loaded only for the dot is copied there straight from global memory, 16 bytes at a
//! time where the input allows. Each warp then walks the contraction in steps of 16, loading
//! fragments (with `ldmatrix` on CUDA; on HIP each lane reads its four consecutive elements along
//! K, 8 bytes at a time from [rows][K] lines) and accumulating in f32 (`mma.sync`,
//! `__builtin_amdgcn_mfma_f32_16x16x16f16` / `..bf16_1k`), into the registers of the accumulator
//! the dot is summed into. This applies to f16 and bf16 kernels, for tiles the warps divide into
//! whole fragments. Operands loaded from the inputs (possibly masked with a fill the type
//! represents) are exact in that type, so the result changes only by the order of f32
//! additions; an operand computed in the kernel (attention's probabilities) is rounded to the
//! kernel's type when staged, as FlashAttention and cuDNN do. The CUDA helpers need sm_80; the HIP helpers use MFMA where the architecture
//! has it (gfx908 for f16, gfx90a and the gfx94x for both) and an exchange of the operands by
//! shuffles within the wavefront elsewhere, which computes the same result.
//!
//! `num_stages(S)` with S >= 2 pipelines a reduction loop that does nothing but such a dot of
//! two operands it loads itself (a plain matmul's k loop), on CUDA: each operand gets S
//! shared-memory buffers, the copies for step i + S - 1 are started with `cp.async` before the
//! tensor cores work on step i, and one `__syncthreads` per step both publishes step i and frees
//! the buffer that step i + S - 1 overwrites (it was read in step i - 1). Any other loop, a dot
//! whose S buffers do not fit in shared memory, and HIP (no asynchronous copies to overlap)
//! run unpipelined (S lowered until they fit).

use super::{Dialect, Emitter, Lanes};
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;

/// Where the elements of a tile live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RegLayout {
    /// Element `e` (row-major) in register slot `e / T` of thread `e % T`.
    Blocked,
    /// The `mma.sync.m16n8k16` accumulator layout over a [rows, cols] tile.
    Mma(MmaTile),
    /// A one-element tile every thread holds in its register slot 0 (see `gpu_replicate.rs`).
    Replicated,
    /// A blocked tile whose lanes are equal in runs of `n` along the last dimension: register
    /// `q` holds the run of blocked register `q * n` (see `gpu_runs.rs`).
    Runs(u32),
}

/// The matrix instruction a tensor-core dot is built on: its fragment shape and which lane holds
/// which element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MatrixIsa {
    /// NVIDIA `mma.sync.m16n8k16` (sm_80 and newer), 32-lane warps: fragments of 16 x 8.
    /// Lane `l` holds rows `l / 4` and `l / 4 + 8`, columns `(l % 4) * 2` and `+ 1`; register
    /// `r` of a thread holds fragment `r / 4`, row `+ 8` when `r & 2`, column `+ 1` when `r & 1`.
    MmaSync,
    /// AMD `v_mfma_f32_16x16x16` (f16 on gfx908 and newer, bf16 on gfx90a and newer; a shuffle
    /// fallback elsewhere), 64-lane wavefronts: fragments of 16 x 16. Lane `l` holds column
    /// `l % 16`, rows `(l / 16) * 4 + q` for `q` in 0..4; register `r` holds fragment `r / 4`,
    /// `q = r % 4`. Its operands: lane `l` holds `A[l % 16][(l / 16) * 4 + q]` and
    /// `B[(l / 16) * 4 + q][l % 16]`.
    Mfma,
}

impl MatrixIsa {
    /// The ISA of a dialect's tensor-core dots.
    pub fn of(dialect: Dialect) -> MatrixIsa {
        match dialect {
            Dialect::Cuda => MatrixIsa::MmaSync,
            Dialect::Hip => MatrixIsa::Mfma,
        }
    }

    /// Rows and columns of one accumulator fragment.
    fn fragment(self) -> (u32, u32) {
        match self {
            MatrixIsa::MmaSync => (16, 8),
            MatrixIsa::Mfma => (16, 16),
        }
    }

    /// log2 of the lanes of a warp or wavefront.
    fn lane_bits(self) -> u32 {
        match self {
            MatrixIsa::MmaSync => 5,
            MatrixIsa::Mfma => 6,
        }
    }

    /// Rows of a fragment that one lane holds, and how many consecutive lanes share each of
    /// those rows (holding its other columns).
    fn rows_per_lane(self) -> (u32, u32) {
        match self {
            MatrixIsa::MmaSync => (2, 4),
            MatrixIsa::Mfma => (4, 16),
        }
    }
}

/// A [rows, cols] tile spread over `wm` x `wn` warps, each covering a (rows / wm) x (cols / wn)
/// sub-tile with fragments of `isa`, fragments of one warp row-major. Every other dimension of
/// the tile has extent 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MmaTile {
    pub isa: MatrixIsa,
    pub m: DimId,
    pub n: DimId,
    pub rows: u32,
    pub cols: u32,
    pub wm: u32,
    pub wn: u32,
}

impl MmaTile {
    /// Fragments per warp along the rows and the columns.
    fn frags(&self) -> (u32, u32) {
        let (fr, fc) = self.isa.fragment();
        (self.rows / self.wm / fr, self.cols / self.wn / fc)
    }

    /// C expressions of the row and the column of register `r` (a C expression) of thread `tid`.
    pub(super) fn row_col(&self, r: &str) -> (String, String) {
        let (_, fn_) = self.frags();
        let (wr, wc) = (self.rows / self.wm, self.cols / self.wn);
        let (fr, fc) = self.isa.fragment();
        let bits = self.isa.lane_bits();
        let lane = format!("(tid & {})", (1 << bits) - 1);
        let (in_row, in_col) = match self.isa {
            MatrixIsa::MmaSync => (format!("({lane} >> 2) + (({r} >> 1) & 1) * 8"), format!("(tid & 3) * 2 + ({r} & 1)")),
            MatrixIsa::Mfma => (format!("({lane} >> 4) * 4 + ({r} & 3)"), "(tid & 15)".to_string()),
        };
        let row = format!("(tid >> {bits}) / {} * {wr} + ({r} >> 2) / {fn_} * {fr} + {in_row}", self.wn);
        let col = format!("(tid >> {bits}) % {} * {wc} + ({r} >> 2) % {fn_} * {fc} + {in_col}", self.wn);
        (row, col)
    }
}

impl MmaTile {
    /// Which of this thread's rows (0 .. fragments along the rows x [`MatrixIsa::rows_per_lane`])
    /// register `r` (a C expression) holds.
    fn row_slot(&self, r: &str) -> String {
        let (_, fn_) = self.frags();
        match self.isa {
            MatrixIsa::MmaSync => format!("({r} >> 2) / {fn_} * 2 + (({r} >> 1) & 1)"),
            MatrixIsa::Mfma => format!("({r} >> 2) / {fn_} * 4 + ({r} & 3)"),
        }
    }

    /// The tile row of this thread's row slot `s` (a C expression), and the warp's position
    /// along the columns.
    fn slot_row(&self, s: &str) -> (String, String) {
        let bits = self.isa.lane_bits();
        let lane = format!("(tid & {})", (1 << bits) - 1);
        let base = format!("(tid >> {bits}) / {} * {}", self.wn, self.rows / self.wm);
        let row = match self.isa {
            MatrixIsa::MmaSync => format!("{base} + ({s} >> 1) * 16 + ({lane} >> 2) + ({s} & 1) * 8"),
            MatrixIsa::Mfma => format!("{base} + ({s} >> 2) * 16 + ({lane} >> 4) * 4 + ({s} & 3)"),
        };
        (row, format!("(tid >> {bits}) % {}", self.wn))
    }
}

/// A dot computed on tensor cores: `a` holds the rows (dimension `tile.m`) and `b` the columns
/// (`tile.n`), both over the contraction `k` of extent `depth`.
#[derive(Clone, Debug)]
pub(super) struct MmaDot {
    pub tile: MmaTile,
    pub a: ValueId,
    pub b: ValueId,
    pub k: DimId,
    pub depth: u32,
    /// The accumulator the dot is summed into right away: `mma.sync` accumulates into its
    /// registers directly and the [`Stmt::Update`] prints nothing.
    pub into: Option<VarId>,
    /// For `a` and `b`: the load that defines the operand, when the dot is its only reader and
    /// sits in the same statement list (so at the same tile offsets). The dot then copies it
    /// from global to shared memory itself, 16 bits as they are, threads along the input's
    /// last axis, and the load prints nothing. Inputs are read-only, so the later read sees
    /// the same data.
    pub direct: [Option<DirectLoad>; 2],
    /// Shared-memory buffers per operand: above 1 when the dot's reduction loop is pipelined
    /// (`num_stages`), see the module docs.
    pub stages: u32,
    /// Computed by `wgmma` in a warp-specialized loop (`gpu_hopper.rs`), from the ring its
    /// plan stages: the dot stages nothing itself and prints nothing where it stands.
    pub wgmma: bool,
}

/// A load of input `input`, axis `i` along `axes[i]`.
#[derive(Clone, Debug)]
pub(super) struct DirectLoad {
    pub input: usize,
    pub axes: Vec<DimId>,
}

impl MmaDot {
    /// The dimension along the rows of operand `i` (0: `a`, 1: `b`), and their number.
    fn rows(&self, i: usize) -> (DimId, u32) {
        if i == 0 {
            (self.tile.m, self.tile.rows)
        } else {
            (self.tile.n, self.tile.cols)
        }
    }

    /// Whether operand `i` is staged contraction-major, [K][rows], and read with
    /// `ldmatrix.trans`: when the dot loads it and its row dimension is the input's last axis
    /// (the contiguous one of a row-major input, as B of a plain matmul). Otherwise it is
    /// staged [rows][K], read with `ldmatrix`.
    pub fn trans(&self, i: usize) -> bool {
        self.direct[i].as_ref().is_some_and(|l| l.axes.last() == Some(&self.rows(i).0))
    }

    /// Elements per staged line of operand `i`: the line's length plus padding that makes the
    /// pitch an odd number of 16-byte units, so that the eight lines an `ldmatrix` reads at once
    /// fall in distinct banks (and every line starts 16-byte aligned, as `ldmatrix` needs).
    pub fn pitch(&self, i: usize) -> u32 {
        let len = if self.trans(i) { self.rows(i).1 } else { self.depth };
        if (len / 8) % 2 == 0 {
            len + 8
        } else {
            len + 16
        }
    }

    /// Shared memory (in 4-byte words) that one buffer of operand `i` takes: a multiple of 4,
    /// so that every buffer starts 16-byte aligned.
    pub fn buffer_words(&self, i: usize) -> usize {
        let lines = if self.trans(i) { self.depth } else { self.rows(i).1 };
        ((lines * self.pitch(i)).div_ceil(2) as usize).next_multiple_of(4)
    }

    /// Shared memory (in 4-byte words) that staging operand `i` takes: all its buffers.
    pub fn slot_words(&self, i: usize) -> usize {
        self.buffer_words(i) * self.stages as usize
    }
}

/// The layouts of one kernel instance.
pub(super) struct Plan {
    pub values: Vec<RegLayout>,
    pub vars: Vec<RegLayout>,
    pub dots: Vec<(ValueId, MmaDot)>,
}

impl Plan {
    pub fn dot(&self, v: ValueId) -> Option<&MmaDot> {
        self.dots.iter().find(|(x, _)| *x == v).map(|(_, d)| d)
    }

    /// Whether the update of `var` by `value` is done by the tensor-core dot itself.
    pub fn fused_update(&self, var: VarId, value: ValueId) -> bool {
        self.dot(value).is_some_and(|d| d.into == Some(var))
    }

    /// The tensor-core dot that loop `l` is pipelined around (see the module docs).
    pub fn pipelined(&self, l: &Loop) -> Option<(ValueId, &MmaDot)> {
        l.body.iter().find_map(|s| match s {
            Stmt::Let { value, op: Op::Dot { .. } } => self.dot(*value).filter(|d| d.stages > 1).map(|d| (*value, d)),
            _ => None,
        })
    }

    /// Whether load `v` is made by the tensor-core dot that reads it.
    pub fn direct_load(&self, v: ValueId) -> bool {
        self.dots.iter().any(|(_, d)| (d.direct[0].is_some() && d.a == v) || (d.direct[1].is_some() && d.b == v))
    }
}

/// Decides the layout of every value and accumulator of `k` instantiated for `dtype`. The dot
/// of a warp-specialized loop (`ws`) takes the layout of `wgmma`'s accumulator: a warp per 16
/// rows, all the columns, which is `mma.sync`'s fragments with one warp across.
pub(super) fn plan(k: &Kernel, dtype: DType, dialect: Dialect, ws: Option<&crate::plan::WarpSpecialized>) -> Plan {
    let mut p = Plan { values: vec![RegLayout::Blocked; k.values.len()], vars: vec![RegLayout::Blocked; k.vars.len()], dots: Vec::new() };
    let mut lets = Vec::new();
    let mut updates = Vec::new();
    collect(&k.body, &mut lets, &mut updates);
    let def = |v: ValueId| lets.iter().find(|(x, _)| *x == v).map(|(_, op)| *op);
    if matches!(dtype, DType::F16 | DType::BF16) {
        for (id, op) in &lets {
            if let Op::Dot { a, b, dim } = op {
                if let Some(w) = ws.filter(|w| w.dot == *id) {
                    let tile =
                        MmaTile { isa: MatrixIsa::MmaSync, m: w.m, n: w.n, rows: w.rows, cols: w.cols, wm: 4 * w.roles.consumers, wn: 1 };
                    let (ra, rb) = (w.operands[0].value, w.operands[1].value);
                    let d = MmaDot {
                        tile,
                        a: ra,
                        b: rb,
                        k: w.k,
                        depth: w.step,
                        into: Some(w.acc),
                        direct: [None, None],
                        stages: 1,
                        wgmma: true,
                    };
                    p.values[id.0 as usize] = RegLayout::Mma(tile);
                    p.dots.push((*id, d));
                    continue;
                }
                if stageable(dtype, *a, &def) && stageable(dtype, *b, &def) {
                    if let Some(d) = geometry(k, dialect, *id, *a, *b, *dim) {
                        p.values[id.0 as usize] = RegLayout::Mma(d.tile);
                        p.dots.push((*id, d));
                    }
                }
            }
        }
    }
    if p.dots.is_empty() {
        return p;
    }
    // Spread the accumulator layout forward until nothing changes. Layouts only ever turn from
    // blocked to mma, and each rule holds again once its inputs have turned, so this ends with
    // every rule satisfied.
    loop {
        let mut changed = false;
        for (id, op) in &lets {
            let shape = &k.value(*id).shape;
            let want = match op {
                Op::Var(var) => p.vars[var.0 as usize],
                Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::MaskFill { .. } => {
                    // Operands of another shape are broadcast through shared memory whatever the
                    // layouts; the ones of the same shape must all be in one mma layout.
                    let same: Vec<RegLayout> =
                        op.operands().into_iter().filter(|o| k.value(*o).shape == *shape).map(|o| p.values[o.0 as usize]).collect();
                    common(&same)
                }
                _ => continue,
            };
            if want != RegLayout::Blocked && p.values[id.0 as usize] != want {
                p.values[id.0 as usize] = want;
                changed = true;
            }
        }
        for var in 0..k.vars.len() {
            let shape = &k.vars[var];
            let from: Vec<RegLayout> = updates
                .iter()
                .filter(|(x, v)| x.0 as usize == var && !rescales(k, *v, *x, &def))
                .map(|(_, v)| if k.value(*v).shape == *shape { p.values[v.0 as usize] } else { RegLayout::Blocked })
                .collect();
            let want = common(&from);
            if want != RegLayout::Blocked && p.vars[var] != want {
                p.vars[var] = want;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // A dot whose only use is the sum into an accumulator of its layout, right after it,
    // accumulates into that accumulator's registers; a load only the dot reads is made by it.
    let mut fused = Vec::new();
    let mut direct = Vec::new();
    find_fusable(&k.body, &mut fused, &mut direct);
    let uses = k.use_counts();
    for (dot, var) in fused {
        let Some(i) = p.dots.iter().position(|(x, _)| *x == dot) else { continue };
        if uses[dot.0 as usize] == 1 && p.vars[var.0 as usize] == p.values[dot.0 as usize] && k.var(var) == &k.value(dot).shape {
            p.dots[i].1.into = Some(var);
        }
    }
    for (dot, operand, load) in direct {
        let Some((_, d)) = p.dots.iter_mut().find(|(x, _)| *x == dot) else { continue };
        if uses[operand.0 as usize] == 1 && !d.wgmma {
            let role = if d.a == operand { 0 } else { 1 };
            d.direct[role] = Some(load);
        }
    }
    pipeline(&k.body, &mut p);
    p
}

/// Gives every dot that is all its `num_stages` loop does (see the module docs) that many
/// buffers per operand, as many as fit in shared memory.
fn pipeline(stmts: &[Stmt], p: &mut Plan) {
    for s in stmts {
        let Stmt::Loop(l) = s else { continue };
        pipeline(&l.body, p);
        if l.stages < 2 || l.kind == LoopKind::Block {
            continue;
        }
        let dots: Vec<ValueId> =
            l.body.iter().filter_map(|s| if let Stmt::Let { value, op: Op::Dot { .. } } = s { Some(*value) } else { None }).collect();
        let [dot] = dots[..] else { continue };
        let Some((_, d)) = p.dots.iter_mut().find(|(x, _)| *x == dot) else { continue };
        if d.wgmma {
            continue;
        }
        let loaded_by_dot = |v: &ValueId| (d.direct[0].is_some() && d.a == *v) || (d.direct[1].is_some() && d.b == *v);
        let only_the_dot = l.body.iter().all(|s| match s {
            Stmt::Let { value, op: Op::Load { .. } } => loaded_by_dot(value),
            Stmt::Let { value, .. } => *value == dot,
            Stmt::Update { var, value, .. } => *value == dot && d.into == Some(*var),
            _ => false,
        });
        let sync = d.tile.isa == MatrixIsa::MmaSync;
        if !sync || !only_the_dot || d.direct.iter().any(Option::is_none) || d.k != l.dim || d.depth != l.step {
            continue;
        }
        let words = d.buffer_words(0) + d.buffer_words(1);
        let fit = (super::MAX_SHARED_BYTES as usize / 4 / words) as u32;
        d.stages = l.stages.min(fit).max(1);
    }
}

/// The one mma layout all of `ls` share, or blocked (also when `ls` is empty).
fn common(ls: &[RegLayout]) -> RegLayout {
    match ls.first() {
        Some(l @ RegLayout::Mma(_)) if ls.iter().all(|x| x == l) => *l,
        _ => RegLayout::Blocked,
    }
}

pub(super) fn collect<'a>(stmts: &'a [Stmt], lets: &mut Vec<(ValueId, &'a Op)>, updates: &mut Vec<(VarId, ValueId)>) {
    for s in stmts {
        match s {
            Stmt::Let { value, op } => lets.push((*value, op)),
            Stmt::Update { var, value, .. } => updates.push((*var, *value)),
            Stmt::Loop(l) => collect(&l.body, lets, updates),
            Stmt::Init { .. } | Stmt::Store { .. } => {}
        }
    }
}

/// (dot, accumulator) pairs where a dot is immediately summed into the accumulator, and
/// (dot, operand, load) where an operand is a load earlier in the dot's statement list.
fn find_fusable(stmts: &[Stmt], fused: &mut Vec<(ValueId, VarId)>, direct: &mut Vec<(ValueId, ValueId, DirectLoad)>) {
    for (i, s) in stmts.iter().enumerate() {
        match s {
            Stmt::Let { value, op: Op::Dot { a, b, .. } } => {
                if let Some(Stmt::Update { var, combine: Combine::Reduce(dt_core::algo::RedOp::Sum), value: v }) = stmts.get(i + 1) {
                    if v == value {
                        fused.push((*value, *var));
                    }
                }
                for o in [a, b] {
                    for earlier in &stmts[..i] {
                        // Staged straight from global memory, where invalid lanes read 0.
                        if let Stmt::Let { value: l, op: Op::Load { input, axes, fill } } = earlier {
                            if l == o && *fill == 0.0 {
                                direct.push((*value, *o, DirectLoad { input: *input, axes: axes.clone() }));
                            }
                        }
                    }
                }
            }
            Stmt::Loop(l) => find_fusable(&l.body, fused, direct),
            _ => {}
        }
    }
}

/// The accumulator tile whose columns reduction `Reduce { value, dim }` combines, when it
/// reduces a tile of that layout over its columns to its rows ([`Emitter::mma_row_reduce`]).
pub(super) fn row_reduced_tile(k: &Kernel, plan: &Plan, value: ValueId, dim: DimId, result: ValueId) -> Option<MmaTile> {
    let RegLayout::Mma(t) = plan.values[value.0 as usize] else { return None };
    let big: Vec<DimId> = k.value(result).shape.0.iter().filter(|(_, n)| *n > 1).map(|(d, _)| *d).collect();
    (dim == t.n && big == [t.m] && k.value(result).shape.extent(t.m) == Some(t.rows)).then_some(t)
}

/// Whether operand `v` may be staged as 16-bit `dtype` values. A load of `dtype` data loses
/// nothing (masked with a fill `dtype` represents); a value computed in the kernel (attention's
/// probabilities) is rounded to `dtype`, as FlashAttention and cuDNN round theirs before their
/// second dot (docs/language.md, "Precision of dots").
fn stageable<'a>(dtype: DType, v: ValueId, def: &impl Fn(ValueId) -> Option<&'a Op>) -> bool {
    match def(v) {
        Some(Op::Load { fill, .. }) => dtype.round(*fill) == *fill,
        Some(Op::MaskFill { value, fill, .. }) => dtype.round(*fill) == *fill && stageable(dtype, *value, def),
        Some(_) => true,
        None => false,
    }
}

/// Whether `v` is computed element-wise from reads of accumulator `var` alone (operands of
/// other shapes, broadcast, aside): an update by it only rescales `var` (the online form's
/// `$o = $o * scale`), so it follows `var`'s layout rather than deciding it.
fn rescales<'a>(k: &Kernel, v: ValueId, var: VarId, def: &impl Fn(ValueId) -> Option<&'a Op>) -> bool {
    match def(v) {
        Some(Op::Var(x)) => *x == var,
        Some(op @ (Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::MaskFill { .. })) => {
            let shape = &k.value(v).shape;
            let same: Vec<ValueId> = op.operands().into_iter().filter(|o| k.value(*o).shape == *shape).collect();
            !same.is_empty() && same.iter().all(|o| rescales(k, *o, var, def))
        }
        _ => false,
    }
}

/// The tensor-core form of `id = dot a, b over k`, when the tiles allow it: the result has two
/// dimensions of extent above 1, [M, N]; one operand spans exactly [M, K] and the other [N, K]
/// (dimensions of extent 1 aside); K is a multiple of 16; and some arrangement of the warps
/// gives each one whole m16n8 fragments. Among those arrangements, the one whose warps load
/// the fewest operand rows per step.
fn geometry(k: &Kernel, dialect: Dialect, id: ValueId, a: ValueId, b: ValueId, dim: DimId) -> Option<MmaDot> {
    let isa = MatrixIsa::of(dialect);
    let big = |v: ValueId| -> Vec<DimId> {
        let mut d: Vec<DimId> = k.value(v).shape.0.iter().filter(|(_, n)| *n > 1).map(|(d, _)| *d).collect();
        d.sort();
        d
    };
    let result = &k.value(id).shape;
    let free: Vec<(DimId, u32)> = result.0.iter().filter(|(_, n)| *n > 1).copied().collect();
    let [(m, rows), (n, cols)] = free[..] else { return None };
    let pair = |x: DimId, y: DimId| {
        let mut v = vec![x, y];
        v.sort();
        v
    };
    let (ra, rb) = if big(a) == pair(m, dim) && big(b) == pair(n, dim) {
        (a, b)
    } else if big(b) == pair(m, dim) && big(a) == pair(n, dim) {
        (b, a)
    } else {
        return None;
    };
    let depth = k.value(a).shape.extent(dim)?;
    if depth % 16 != 0 {
        return None;
    }
    let warps = dialect.warps(k.num_warps);
    let (fr, fc) = isa.fragment();
    let (wm, wn) = (1..=warps)
        .filter(|wm| warps.is_multiple_of(*wm))
        .map(|wm| (wm, warps / wm))
        .filter(|(wm, wn)| rows % (fr * wm) == 0 && cols % (fc * wn) == 0)
        .min_by_key(|(wm, wn)| (rows / wm + cols / wn, *wn))?;
    let tile = MmaTile { isa, m, n, rows, cols, wm, wn };
    Some(MmaDot { tile, a: ra, b: rb, k: dim, depth, into: None, direct: [None, None], stages: 1, wgmma: false })
}

impl Emitter<'_> {
    /// `id = dot` on tensor cores (see the module docs), into the accumulator it is fused with
    /// or into a fresh zeroed tile.
    pub(super) fn mma_dot(&mut self, id: ValueId, d: &MmaDot) {
        self.barrier();
        self.stage(d, 0, None);
        self.stage(d, 1, None);
        self.barrier();
        self.mma_compute(id, d, None);
    }

    /// A loop pipelined around tensor-core dot `id` (see the module docs): the copies of the
    /// first S - 1 steps start before it; step i waits for its own, starts those of step
    /// i + S - 1 and then computes.
    pub(super) fn pipelined_loop(&mut self, l: &Loop, id: ValueId, d: &MmaDot) -> Result<(), super::EmitError> {
        let (s, step, size) = (d.stages, l.step, self.size(l.dim));
        let o = self.fresh("o");
        let (rd, wr) = (self.fresh("rd"), self.fresh("wr"));
        if !l.origin.is_empty() {
            self.line(&format!("/* {} */", l.origin));
        }
        self.line(&format!(
            "/* num_stages({s}): the operands of the next {} steps are copied (cp.async) while the tensor cores work on this one */",
            s - 1
        ));
        self.line("{");
        self.depth += 1;
        self.barrier();
        self.line(&format!("int {rd} = 0, {wr} = {};", s - 1));
        self.line(&format!("for (int st = 0; st < {}; st++) {{", s - 1));
        self.depth += 1;
        self.line(&format!("const long long {o} = (long long)st * {step};"));
        self.staged_copy(d, l.dim, &o, &size, "st");
        self.depth -= 1;
        self.line("}");
        self.line(&super::super::loop_header(self.k, l, &o));
        self.depth += 1;
        self.offsets.push((l.dim, o.clone()));
        for stmt in &l.body {
            if !matches!(stmt, Stmt::Let { value, .. } if *value == id) {
                self.stmt(stmt)?;
                continue;
            }
            self.line(&format!(
                "/* wait for the copies of this step (buffer {rd}), then start those {} steps ahead (buffer {wr}) */",
                s - 1
            ));
            self.line(&format!("dt_cp_async_wait<{}>();", s - 2));
            self.barrier();
            let ahead = self.fresh("o");
            self.line(&format!("const long long {ahead} = {o} + {};", (s - 1) * step));
            self.staged_copy(d, l.dim, &ahead, &size, &wr);
            self.mma_compute(id, d, Some(&rd));
        }
        self.line(&format!("{rd} = {rd} + 1 == {s} ? 0 : {rd} + 1;"));
        self.line(&format!("{wr} = {wr} + 1 == {s} ? 0 : {wr} + 1;"));
        self.offsets.pop();
        self.depth -= 1;
        self.line("}");
        // Nothing is in flight past the end (those groups are empty), but the buffers may be
        // read as other slots next.
        self.line("dt_cp_async_wait<0>();");
        self.barrier();
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// Starts the copies of both operands of `d` at offset `at` along `dim` (when in range) into
    /// buffer `buf`, as one cp.async group.
    fn staged_copy(&mut self, d: &MmaDot, dim: DimId, at: &str, size: &str, buf: &str) {
        self.offsets.push((dim, at.to_string()));
        self.line(&format!("if ({at} < {size}) {{"));
        self.depth += 1;
        self.stage(d, 0, Some(buf));
        self.stage(d, 1, Some(buf));
        self.depth -= 1;
        self.line("}");
        self.line("dt_cp_async_commit();");
        self.offsets.pop();
    }

    /// Shared memory of operand `i` of `d`: its buffer `buf` (a C expression) when pipelined.
    fn buffer(&self, d: &MmaDot, i: usize, buf: Option<&str>) -> String {
        match buf {
            Some(b) => format!("({} + {b} * {})", self.slot(i), d.buffer_words(i)),
            None => self.slot(i),
        }
    }

    /// The matrix-unit work of `id = dot` on operands already staged (in buffer `buf`).
    fn mma_compute(&mut self, id: ValueId, d: &MmaDot, buf: Option<&str>) {
        let t = d.tile;
        let (fm, fn_) = t.frags();
        let (fr, fc) = t.isa.fragment();
        let (unit, warps) = match t.isa {
            MatrixIsa::MmaSync => ("tensor cores", "warps"),
            MatrixIsa::Mfma => ("matrix cores", "wavefronts"),
        };
        self.line(&format!(
            "/* rdot on {unit}: [{}:{}, {}:{}] over {}:{} by {} x {} {warps} of {fm} x {fn_} m{fr}n{fc}k16 fragments */",
            self.k.dim_name(t.m),
            t.rows,
            self.k.dim_name(t.n),
            t.cols,
            self.k.dim_name(d.k),
            d.depth,
            t.wm,
            t.wn
        ));
        let acc = match d.into {
            Some(var) => format!("acc{}", var.0),
            None => {
                let dst = format!("v{}", id.0);
                let shape = self.k.value(id).shape.clone();
                self.declare(&dst, &shape);
                self.for_owned(&shape, RegLayout::Mma(t), |e, _| e.line(&format!("{dst}[r] = 0.0f;")));
                dst
            }
        };
        match t.isa {
            MatrixIsa::MmaSync => self.mma_sync_steps(d, &acc, buf),
            MatrixIsa::Mfma => self.mfma_steps(d, &acc, buf),
        }
    }

    /// The contraction of a staged dot in steps of 16 on NVIDIA tensor cores: fragments loaded
    /// with `ldmatrix`, accumulated with `mma.sync` into `acc`.
    fn mma_sync_steps(&mut self, d: &MmaDot, acc: &str, buf: Option<&str>) {
        let t = d.tile;
        let (fm, fn_) = t.frags();
        let suffix = self.dtype.name();
        let (pa, pb) = (d.pitch(0), d.pitch(1));
        let (wrow, wcol) = (format!("(tid >> 5) / {} * {}", t.wn, t.rows / t.wm), format!("(tid >> 5) % {} * {}", t.wn, t.cols / t.wn));
        self.line("{");
        self.depth += 1;
        self.line("const int lane = tid & 31;");
        // Each lane gives the address of one 8-element line; lanes 8i..8i+7 those of matrix i,
        // which fills fragment registers in the order a0a1 (rows 0-7, k 0-7), a2a3 (rows 8-15),
        // a4a5 (k 8-15), a6a7 of A, and b0b1 (k 0-7), b2b3 (k 8-15) of two n8 fragments of B.
        // The .x2 form for a last odd B fragment uses the addresses of lanes 0-15 only.
        // `f?0` is the lane's address at fragment 0 and k 0; `(fstride, kstride)` the element
        // steps to the next fragment and along k.
        let (fa0, a_steps, a_trans) = if d.trans(0) {
            (format!("((lane & 7) + (lane >> 4) * 8) * {pa} + {wrow} + ((lane >> 3) & 1) * 8"), (16, pa), "_trans")
        } else {
            (format!("({wrow} + (lane & 15)) * {pa} + (lane >> 4) * 8"), (16 * pa, 1), "")
        };
        let (fb0, b_steps, b_trans) = if d.trans(1) {
            (format!("(lane & 15) * {pb} + {wcol} + (lane >> 4) * 8"), (8, pb), "_trans")
        } else {
            (format!("({wcol} + (lane & 7) + (lane >> 4) * 8) * {pb} + ((lane >> 3) & 1) * 8"), (8 * pb, 1), "")
        };
        let (sa, sb) = (self.buffer(d, 0, buf), self.buffer(d, 1, buf));
        self.line(&format!("const unsigned fa0 = dt_smem_u32({sa}) + ({fa0}) * 2;"));
        self.line(&format!("const unsigned fb0 = dt_smem_u32({sb}) + ({fb0}) * 2;"));
        let step = |f: &str, (fs, ks): (u32, u32)| {
            let k = if ks == 1 { "kk".to_string() } else { format!("kk * {ks}") };
            if f.is_empty() {
                format!("{k} * 2")
            } else {
                format!("({f} * {fs} + {k}) * 2")
            }
        };
        self.line("#pragma unroll");
        self.line(&format!("for (int kk = 0; kk < {}; kk += 16) {{", d.depth));
        self.depth += 1;
        self.line(&format!("unsigned fa[{fm}][4], fb[{fn_}][2];"));
        self.line("#pragma unroll");
        self.line(&format!(
            "for (int i = 0; i < {fm}; i++) dt_ldmatrix_x4{a_trans}(fa[i][0], fa[i][1], fa[i][2], fa[i][3], fa0 + {});",
            step("i", a_steps)
        ));
        if fn_ >= 2 {
            self.line("#pragma unroll");
            self.line(&format!(
                "for (int j = 0; j + 1 < {fn_}; j += 2) dt_ldmatrix_x4{b_trans}(fb[j][0], fb[j][1], fb[j + 1][0], fb[j + 1][1], fb0 + {});",
                step("j", b_steps)
            ));
        }
        if fn_ % 2 == 1 {
            let j = fn_ - 1;
            let at = if j == 0 { step("", b_steps) } else { step(&j.to_string(), b_steps) };
            self.line(&format!("dt_ldmatrix_x2{b_trans}(fb[{j}][0], fb[{j}][1], fb0 + {at});"));
        }
        self.fragment_products(&format!("dt_mma_m16n8k16_{suffix}"), acc, fm, fn_);
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }

    /// `acc` += the products of the `fm` A fragments `fa[i]` and the `fn_` B fragments `fb[j]`
    /// of one step, through the matrix instruction helper `mma` (4 accumulator registers per
    /// fragment, fragments row-major).
    fn fragment_products(&mut self, mma: &str, acc: &str, fm: u32, fn_: u32) {
        self.line("#pragma unroll");
        self.line(&format!("for (int i = 0; i < {fm}; i++) {{"));
        self.depth += 1;
        self.line("#pragma unroll");
        self.line(&format!("for (int j = 0; j < {fn_}; j++) {mma}(&{acc}[(i * {fn_} + j) * 4], fa[i], fb[j]);"));
        self.depth -= 1;
        self.line("}");
    }

    /// The contraction of a staged dot in steps of 16 on AMD matrix cores: each lane packs the
    /// four elements along K that `v_mfma_f32_16x16x16` wants from it (see [`MatrixIsa::Mfma`])
    /// in two 32-bit words, the first element in the low half, read 8 bytes at a time from an
    /// operand staged [rows][K] and element by element from one staged [K][rows].
    fn mfma_steps(&mut self, d: &MmaDot, acc: &str, buf: Option<&str>) {
        let t = d.tile;
        let (fm, fn_) = t.frags();
        let suffix = self.dtype.name();
        let (wrow, wcol) = (format!("(tid >> 6) / {} * {}", t.wn, t.rows / t.wm), format!("(tid >> 6) % {} * {}", t.wn, t.cols / t.wn));
        self.line("{");
        self.depth += 1;
        self.line("const int lane = tid & 63;");
        // Operand i's staged lines as 16-bit elements, at this lane's first element (row or
        // column `lane % 16` of fragment 0, k `(lane / 16) * 4`) and k 0; `(fstride, kstride)`
        // are the element steps to the next fragment and along k.
        let mut steps = Vec::new();
        for (i, (name, first_row)) in [("fa", wrow), ("fb", wcol)].into_iter().enumerate() {
            let p = d.pitch(i);
            let (at, st) = if d.trans(i) {
                (format!("((lane >> 4) * 4) * {p} + {first_row} + (lane & 15)"), (16, p))
            } else {
                (format!("({first_row} + (lane & 15)) * {p} + (lane >> 4) * 4"), (16 * p, 1))
            };
            let smem = self.buffer(d, i, buf);
            self.line(&format!("const unsigned short* {name}0 = (const unsigned short*){smem} + {at};"));
            steps.push(st);
        }
        self.line("#pragma unroll");
        self.line(&format!("for (int kk = 0; kk < {}; kk += 16) {{", d.depth));
        self.depth += 1;
        self.line(&format!("unsigned fa[{fm}][2], fb[{fn_}][2];"));
        for (i, (name, count)) in [("fa", fm), ("fb", fn_)].into_iter().enumerate() {
            let (fs, ks) = steps[i];
            let at = format!("{name}0 + {name}i * {fs} + kk * {ks}");
            self.line("#pragma unroll");
            if ks == 1 {
                // Four consecutive elements of one line: 8 bytes, aligned (pitches and the
                // lane's first k are multiples of 4 elements).
                self.line(&format!(
                    "for (int {name}i = 0; {name}i < {count}; {name}i++) {{ const uint2 w = *(const uint2*)({at}); {name}[{name}i][0] = w.x; {name}[{name}i][1] = w.y; }}"
                ));
            } else {
                self.line(&format!("for (int {name}i = 0; {name}i < {count}; {name}i++) {{"));
                self.depth += 1;
                self.line(&format!("const unsigned short* q = {at};"));
                self.line(&format!("{name}[{name}i][0] = (unsigned)q[0] | ((unsigned)q[{ks}] << 16);"));
                self.line(&format!("{name}[{name}i][1] = (unsigned)q[{}] | ((unsigned)q[{}] << 16);", 2 * ks, 3 * ks));
                self.depth -= 1;
                self.line("}");
            }
        }
        self.fragment_products(&format!("dt_mfma_16x16x16_{suffix}"), acc, fm, fn_);
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
    }

    /// `dst` = the reduction by `op` of `src`, an accumulator-layout tile `t`, over its columns:
    /// each thread combines its registers of each of its rows, the lanes sharing a row combine
    /// with shuffles, and the warps along the columns meet in slot 1 (`t.wn` partials per row),
    /// where the thread holding each result under `layout` combines them. The tile never goes
    /// through shared memory (softmax's row maximum and sum in attention's key loop).
    pub(super) fn mma_row_reduce(&mut self, op: dt_core::algo::RedOp, src: &str, t: MmaTile, dst: &str, result: &Shape, layout: RegLayout) {
        let (fm, fn_) = t.frags();
        let (per_lane, sharing) = t.isa.rows_per_lane();
        let slots = fm * per_lane;
        let regs = fm * fn_ * 4;
        let ident = crate::emit::expr::float_lit(op.identity());
        let red = self.slot(1);
        self.line(&format!(
            "/* row reduction of an accumulator tile: registers, shuffles in groups of {sharing} lanes, {} warps per row */",
            t.wn
        ));
        self.line("{");
        self.depth += 1;
        self.line(&format!("float p[{slots}];"));
        self.line("#pragma unroll");
        self.line(&format!("for (int s = 0; s < {slots}; s++) p[s] = {ident};"));
        self.line("#pragma unroll");
        self.line(&format!(
            "for (int r = 0; r < {regs}; r++) {{ const int s = {}; p[s] = {}; }}",
            t.row_slot("r"),
            crate::emit::expr::combine(op, "p[s]", &format!("{src}[r]"))
        ));
        self.line("#pragma unroll");
        self.line(&format!("for (int s = 0; s < {slots}; s++) {{"));
        self.depth += 1;
        self.line("#pragma unroll");
        self.line(&format!(
            "for (int m = 1; m < {sharing}; m <<= 1) p[s] = {};",
            crate::emit::expr::combine(op, "p[s]", &format!("dt_shfl_xor(p[s], m, {sharing})"))
        ));
        self.depth -= 1;
        self.line("}");
        self.barrier();
        let (row, warp_col) = t.slot_row("s");
        self.line(&format!("if ((tid & {}) == 0) {{", sharing - 1));
        self.depth += 1;
        self.line("#pragma unroll");
        self.line(&format!("for (int s = 0; s < {slots}; s++) {red}[{warp_col} * {} + {row}] = p[s];", t.rows));
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
        self.barrier();
        let m = t.m;
        self.for_owned(result, layout, |e, l| {
            let parts: Vec<String> = (0..t.wn).map(|w| format!("{red}[{} + {}]", w * t.rows, l.lane(m))).collect();
            let mut acc = parts[0].clone();
            for p in &parts[1..] {
                acc = crate::emit::expr::combine(op, &acc, p);
            }
            e.line(&format!("{dst}[r] = {acc};"));
        });
    }

    /// Writes operand `i` of `d` to shared-memory slot `i` as 16-bit values, in lines of
    /// [`MmaDot::pitch`] elements (row-major [rows][K] or, for [`MmaDot::trans`], [K][rows]),
    /// whatever the operand's own dimension order: from global memory when the dot makes the
    /// load, else from the operand's registers.
    /// Pipelined (`buf` given), into that buffer and with `cp.async`.
    fn stage(&mut self, d: &MmaDot, i: usize, buf: Option<&str>) {
        let v = if i == 0 { d.a } else { d.b };
        let (rows, k, pitch) = (d.rows(i).0, d.k, d.pitch(i));
        let at = move |l: &Lanes| {
            if d.trans(i) {
                format!("{} * {pitch} + {}", l.lane(k), l.lane(rows))
            } else {
                format!("{} * {pitch} + {}", l.lane(rows), l.lane(k))
            }
        };
        let shape = self.k.value(v).shape.clone();
        let dst = format!("((unsigned short*){})", self.buffer(d, i, buf));
        let Some(load) = &d.direct[i] else {
            let layout = self.plan.values[v.0 as usize];
            let cvt = format!("dt_f32_to_{}", self.dtype.name());
            self.for_owned(&shape, layout, |e, l| e.line(&format!("{dst}[{}] = {cvt}(v{}[r]);", at(l), v.0)));
            return;
        };
        // Threads along the input's last axis, so that they read consecutive addresses of a
        // row-major input; unrolled by 8 at most, so that loads are in flight together without
        // keeping so many addresses live that the accumulator spills (a full unroll of 32 does).
        let mut order = Shape::default();
        for a in &load.axes {
            if order.extent(*a).is_none() {
                order.0.push((*a, shape.extent(*a).unwrap_or(1)));
            }
        }
        let (input, axes) = (load.input, load.axes.clone());
        let name = self.k.inputs[input].name.clone();
        let copy = |e: &mut Self, l: &Lanes| {
            let (cond, addr) = e.address(&axes, l, |a| e.input_stride(input, a));
            e.line(&format!("{dst}[{}] = ({cond}) ? in{input}[{addr}] : (unsigned short)0;", at(l)));
        };
        // 16 bytes at a time where the input's last axis runs along the staged lines, in whole
        // groups of 8 elements: then a group is 8 consecutive elements in memory and in shared
        // memory. Whether the input is laid out for it (unit stride along that axis, 16-byte
        // alignment) is known at run time only; a group that is not, or that is partly out of
        // range, is copied element by element.
        let last = *load.axes.last().expect("a tile load has an axis");
        let inner = if d.trans(i) { rows } else { k };
        let distinct = order.0.len() == load.axes.len();
        if last != inner || !distinct || order.extent(last).unwrap_or(1) % 8 != 0 {
            let pragma = if self.regs(order.elements()) <= 8 { "#pragma unroll" } else { "#pragma unroll 8" };
            self.line(&format!("/* v{}: {name} copied as it is, along its last axis */", v.0));
            self.for_blocked(&order, pragma, copy);
            return;
        }
        let mut groups = order.clone();
        groups.0.last_mut().expect("an axis").1 /= 8;
        let pragma = if self.regs(groups.elements()) <= 8 { "#pragma unroll" } else { "#pragma unroll 8" };
        let n = load.axes.len();
        let mut aligned = vec![format!("(args.inputs[{input}] & 15) == 0"), format!("args.input_strides[{input}][{}] == 1", n - 1)];
        aligned.extend((0..n - 1).map(|a| format!("(args.input_strides[{input}][{a}] & 7) == 0")));
        let flag = self.fresh("vec");
        self.line(&format!("/* v{}: {name} copied as it is, along its last axis, 16 bytes at a time where it can be */", v.0));
        self.line("{");
        self.depth += 1;
        self.line(&format!("const bool {flag} = {};", aligned.join(" && ")));
        self.for_blocked(&groups, pragma, |e, l| {
            let at_lane = |off: &str| {
                Lanes(l.0.iter().map(|(x, name)| (*x, if *x == last { format!("({name} * 8{off})") } else { name.clone() })).collect())
            };
            let (whole, _) = e.address(&load.axes, &at_lane(" + 7"), |_| String::new());
            let first = at_lane("");
            let (_, addr) = e.address(&load.axes, &first, |a| e.input_stride(input, a));
            e.line(&format!("if ({flag} && {whole}) {{"));
            e.depth += 1;
            let copy16 = if buf.is_some() { "dt_cp_async16" } else { "dt_copy16_to_shared" };
            e.line(&format!("{copy16}(&{dst}[{}], &in{input}[{addr}]);", at(&first)));
            e.depth -= 1;
            e.line("} else {");
            e.depth += 1;
            e.line("#pragma unroll");
            e.line("for (int q = 0; q < 8; q++) {");
            e.depth += 1;
            copy(e, &at_lane(" + q"));
            e.depth -= 1;
            e.line("}");
            e.depth -= 1;
            e.line("}");
        });
        self.depth -= 1;
        self.line("}");
    }
}
