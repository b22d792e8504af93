//! The kernel IR: one program instance's work, as tiles, loops, masks and stores.
//!
//! A [`Kernel`] is launched as a 1-D grid of programs; each program finds its block coordinates
//! by unravelling its id through the [`Grid`], then runs [`Kernel::body`]. Values are tiles: a
//! [`Shape`] (an ordered list of dimensions with their tile extents), an element type of f32, and
//! a [`Layout`] for the GPU emitters. A tile over dimension `d` always sits at the offset of the
//! innermost enclosing [`Loop`] over `d` (with none, at the start of this program's block of `d`
//! when `d` is blocked, else at 0); lane `l` along `d` is valid when that offset plus `l` is
//! below the size of `d`. Loads fill invalid lanes with 0, stores skip them, and reductions see
//! them only after a [`Op::MaskFill`] with the reduction's identity.
//!
//! Architecture Invariant: every value is defined (by [`Stmt::Let`]) before use in the same or an
//! enclosing statement list; every dimension of a value's shape has an enclosing loop; operand
//! shapes of element-wise ops are subsets of the result shape (broadcast by name).

use crate::algo::{BinOp, DimId, RedOp, UnOp};
use crate::schedule::MapEntry;
use crate::signature::Signature;
use std::fmt::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

/// Dimensions of a tile with their extents, in the kernel's dimension order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Shape(pub Vec<(DimId, u32)>);

impl Shape {
    pub fn elements(&self) -> usize {
        self.0.iter().map(|(_, n)| *n as usize).product()
    }
    pub fn extent(&self, d: DimId) -> Option<u32> {
        self.0.iter().find(|(x, _)| *x == d).map(|(_, n)| *n)
    }
    pub fn dims(&self) -> impl Iterator<Item = DimId> + '_ {
        self.0.iter().map(|(d, _)| *d)
    }
    /// Row-major stride of dimension `d` within this tile, or 0 when the tile does not have it
    /// (so that broadcasting is indexing with stride 0).
    pub fn stride(&self, d: DimId) -> usize {
        match self.0.iter().position(|(x, _)| *x == d) {
            Some(i) => self.0[i + 1..].iter().map(|(_, n)| *n as usize).product(),
            None => 0,
        }
    }
}

/// How a tile is spread over the threads of a program (read by the GPU emitters only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Element-wise and reduction work: the last dimension across lanes, vectorized.
    Blocked,
    /// Operand A (rows x contraction) of a tensor-core dot.
    DotA,
    /// Operand B (contraction x columns) of a tensor-core dot.
    DotB,
    /// Accumulator of a tensor-core dot.
    DotAcc,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub shape: Shape,
    pub layout: Layout,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Const(f32),
    /// Scalar argument number `n` of the kernel.
    Scalar(usize),
    /// The index of each lane along a dimension (offset + lane).
    Index(DimId),
    /// The size of a dimension.
    Len(DimId),
    /// How many lanes of this program's block of a blocked dimension lie inside the dimension:
    /// the block's extent, fewer in a block that reaches past the end, 0 in one past it.
    BlockLanes(DimId),
    /// Input number `input`, its axis `i` indexed along dimension `axes[i]`, read at the tile's
    /// offsets; invalid lanes read `fill` (0 as built, see `lower/masks.rs`).
    Load {
        input: usize,
        axes: Vec<DimId>,
        fill: f32,
    },
    Unary(UnOp, ValueId),
    Binary(BinOp, ValueId, ValueId),
    Select(ValueId, ValueId, ValueId),
    /// `value` with the invalid lanes along `dim` replaced by `fill`.
    MaskFill {
        value: ValueId,
        dim: DimId,
        fill: f32,
    },
    /// Combines the lanes of `value` along `dim`: all of them where `run` is 1, else the first
    /// lane of each run of `run` lanes, `value` being uniform in its runs (see
    /// [`Op::RunReduce`]).
    Reduce {
        op: RedOp,
        value: ValueId,
        dim: DimId,
        run: u32,
    },
    /// Every lane gets the combination of the lanes of its run along `dim`: runs of `run`
    /// consecutive lanes from the start of the tile. A target may split the runs finer, down to
    /// single lanes (where this is a copy), where its threads do not hold whole runs; it then
    /// reads the runs of a [`Op::Reduce`] alike. What pass `online` builds on runs computes
    /// the same statistics under any split, up to the order of additions.
    RunReduce {
        op: RedOp,
        value: ValueId,
        dim: DimId,
        run: u32,
    },
    /// `value` combined over the programs of this program's cluster (`cluster(dim:N)`): each
    /// holds its partial over its own block of `dim`, and every program gets the combination of
    /// all of them, in the order of their blocks.
    ClusterReduce {
        op: RedOp,
        value: ValueId,
        dim: DimId,
    },
    /// The second statistic of a row split over a cluster, combined over the cluster at the
    /// meeting of the first: the [`Op::ClusterReduce`] of `first` is the statement before this
    /// one, and a target makes one exchange of both. Each program holds `first` (its partial of
    /// the first statistic), `value` (its share of the second, taken about its own `first`, not
    /// the row's) and, for [`PairRule::SquaredDeviation`], `count` (the lanes of its block);
    /// every program gets the row's second statistic.
    ClusterPaired {
        rule: PairRule,
        value: ValueId,
        first: ValueId,
        count: Option<ValueId>,
        dim: DimId,
    },
    /// Contraction of `a` and `b` over `dim`.
    Dot {
        a: ValueId,
        b: ValueId,
        dim: DimId,
    },
    /// The current value of an accumulator.
    Var(VarId),
}

impl Op {
    /// The operation with each operand `v` replaced by `f(v)`.
    pub fn renamed(self, f: impl Fn(ValueId) -> ValueId) -> Op {
        match self {
            Op::Unary(u, a) => Op::Unary(u, f(a)),
            Op::Binary(b, x, y) => Op::Binary(b, f(x), f(y)),
            Op::Select(c, x, y) => Op::Select(f(c), f(x), f(y)),
            Op::MaskFill { value, dim, fill } => Op::MaskFill { value: f(value), dim, fill },
            Op::Reduce { op, value, dim, run } => Op::Reduce { op, value: f(value), dim, run },
            Op::RunReduce { op, value, dim, run } => Op::RunReduce { op, value: f(value), dim, run },
            Op::ClusterReduce { op, value, dim } => Op::ClusterReduce { op, value: f(value), dim },
            Op::ClusterPaired { rule, value, first, count, dim } => {
                Op::ClusterPaired { rule, value: f(value), first: f(first), count: count.map(&f), dim }
            }
            Op::Dot { a, b, dim } => Op::Dot { a: f(a), b: f(b), dim },
            leaf @ (Op::Const(_) | Op::Scalar(_) | Op::Index(_) | Op::Len(_) | Op::BlockLanes(_) | Op::Load { .. } | Op::Var(_)) => leaf,
        }
    }

    /// The values the operation reads.
    pub fn operands(&self) -> Vec<ValueId> {
        match self {
            Op::Unary(_, a)
            | Op::MaskFill { value: a, .. }
            | Op::Reduce { value: a, .. }
            | Op::RunReduce { value: a, .. }
            | Op::ClusterReduce { value: a, .. } => {
                vec![*a]
            }
            Op::ClusterPaired { value, first, count, .. } => [Some(*first), Some(*value), *count].into_iter().flatten().collect(),
            Op::Binary(_, a, b) | Op::Dot { a, b, .. } => vec![*a, *b],
            Op::Select(c, a, b) => vec![*c, *a, *b],
            Op::Const(_) | Op::Scalar(_) | Op::Index(_) | Op::Len(_) | Op::BlockLanes(_) | Op::Load { .. } | Op::Var(_) => vec![],
        }
    }
}

/// How [`Op::ClusterPaired`] combines the programs' shares of a second statistic, each taken
/// about the program's own first statistic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairRule {
    /// Sums of `exp(z - m)`, `m` a program's maximum (`first`): the row's is the sum of each
    /// program's times `exp(first - max of first)`, a program whose maximum is -inf (it saw no
    /// lane) adding 0.
    ExpScaled,
    /// Sums of squared deviations from a program's mean (`first / count`, `first` its sum): the
    /// row's is the sum of each program's plus `count (first / count - row mean)^2`, the row
    /// mean being the sum of `first` over the sum of `count`; a program of no lanes adds 0.
    SquaredDeviation,
}

impl PairRule {
    /// Combines the programs' `(first, value, count)` in rank order, as every target does.
    pub fn combine(self, shares: &[(f32, f32, f32)]) -> f32 {
        match self {
            PairRule::ExpScaled => {
                let m = shares.iter().fold(f32::NEG_INFINITY, |a, s| a.max(s.0));
                shares.iter().filter(|s| s.0 != f32::NEG_INFINITY).map(|s| s.1 * (s.0 - m).exp()).sum()
            }
            PairRule::SquaredDeviation => {
                let (sum, n) = shares.iter().fold((0.0f32, 0.0f32), |a, s| (a.0 + s.0, a.1 + s.2));
                let mean = sum / n.max(1.0);
                shares
                    .iter()
                    .filter(|s| s.2 > 0.0)
                    .map(|s| {
                        let d = s.0 / s.2 - mean;
                        s.1 + s.2 * d * d
                    })
                    .sum()
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PairRule::ExpScaled => "sum of exp-scaled sums",
            PairRule::SquaredDeviation => "sum of squared deviations",
        }
    }
}

/// How [`Stmt::Update`] changes an accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    Reduce(RedOp),
    Set,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopKind {
    /// Over the tiles of a blocked dimension within this program's block.
    Block,
    /// Over the whole extent of a dimension the program covers whole.
    Whole,
    /// Over chunks of a reduction.
    Reduction,
}

/// Which steps of a `whole` or `reduce` loop over a dimension of size `n` run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steps {
    /// Every step: offsets `0, step, ..` below `n`.
    All,
    /// The steps whose tile lies wholly inside the dimension: offsets below `n - n % step`.
    /// Every lane along the loop's dimension is valid there.
    Full,
    /// The step whose tile reaches past the end, if any: offset `n - n % step` where `n % step`
    /// is not 0.
    Partial,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    pub dim: DimId,
    pub kind: LoopKind,
    /// Tile extent: the loop advances by this much.
    pub step: u32,
    /// Software pipeline depth for the loads in this loop (1: none).
    pub stages: u32,
    /// Runs from its last step to its first (pass `reverse`).
    pub backward: bool,
    /// Which of its steps the loop runs (pass `full_steps`).
    pub steps: Steps,
    /// A loop over the whole dimension that stops at the end of this program's block of the
    /// given (blocked) dimension: its later steps are known to change nothing (pass `flash`: keys
    /// past the last query of a causal block). The interpreter, the C emitter and the GPU
    /// emitter's older path stop there; a warp-specialized loop (whose producer and consumers
    /// agree on their own bounds) runs every step.
    pub until: Option<DimId>,
    /// With `until`: the causal mask that stops the loop, which holds in every lane of the
    /// steps below the diagonal (see [`Diagonal`]); a target may run those without it.
    pub diagonal: Option<Diagonal>,
    /// The schedule primitives that made this loop.
    pub origin: String,
    pub body: Vec<Stmt>,
}

/// The condition `j <= i` (or `j < i`, `strict`) of a causal mask, `j` the dimension of a loop
/// that stops at the end of this program's block of `i` ([`Loop::until`]): it holds in every
/// lane of a step whose last lane `o + step - 1` lies at or before (before, where strict) the
/// block's first lane along `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Diagonal {
    pub cond: ValueId,
    pub strict: bool,
}

impl Loop {
    /// Whether every lane along the loop's dimension is valid in every step it runs: in its full
    /// steps, and in any loop of step 1, whose one lane is its offset, which the loop keeps below
    /// the end (a row per step, as softmax and layernorm take them).
    pub fn lanes_all_valid(&self) -> bool {
        self.steps == Steps::Full || self.step == 1
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let {
        value: ValueId,
        op: Op,
    },
    /// Sets every lane of an accumulator to `value`.
    Init {
        var: VarId,
        value: f32,
        origin: String,
    },
    Update {
        var: VarId,
        combine: Combine,
        value: ValueId,
    },
    Loop(Loop),
    /// Writes `value`, broadcast to the output tile `tile`, to the output, masked.
    Store {
        value: ValueId,
        tile: Shape,
    },
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TensorParam {
    pub name: String,
    /// The dimension of each axis.
    pub dims: Vec<DimId>,
}

/// The launch grid: blocked dimensions and the order in which program ids visit their blocks.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Grid {
    /// Each blocked dimension with its block extent.
    pub blocked: Vec<(DimId, u32)>,
    /// Outermost first; the last entry varies fastest with the program id.
    pub order: Vec<MapEntry>,
    /// `cluster(d:N)`: the blocks of `d` (the last entry of `order`) always number `N`, and each
    /// run of `N` consecutive programs is one cluster. Programs whose block of `d` starts past
    /// the end still run (with every lane masked), since the cluster's reductions need them.
    pub cluster: Option<(DimId, u32)>,
    /// `multicast(d:N)`: each run of `N` consecutive programs is one cluster, whose blocks of
    /// `d` are adjacent (`d`, or a split of it by a multiple of `N`, is the last entry of
    /// `order`); their producers share the copies of the operand that does not vary along `d`.
    /// Where `d` is the last entry its blocks are rounded up to a multiple of `N`: a program past
    /// the end still copies its share for the others and stores nothing.
    pub multicast: Option<(DimId, u32)>,
    /// Dimensions whose blocks the programs take last first (pass `heaviest_first`), so that the
    /// longest programs start first: block `n - 1 - g` at coordinate `g`. Each has a grid entry of
    /// its own ([`Grid::has_own_entry`]).
    pub descending: Vec<DimId>,
    /// The schedule primitives behind the grid.
    pub origin: String,
}

impl Grid {
    pub fn block_extent(&self, d: DimId) -> Option<u32> {
        self.blocked.iter().find(|(x, _)| *x == d).map(|(_, b)| *b)
    }

    /// Whether loop `l` goes over this program's block of its dimension in more than one step
    /// and no more steps than its stages: a target may stage the whole block at once (the GPU
    /// emitter holds it in shared memory for the loops after it).
    pub fn block_fits_stages(&self, l: &Loop) -> bool {
        l.kind == LoopKind::Block && self.block_extent(l.dim).is_some_and(|b| b > l.step && b.div_ceil(l.step) <= l.stages)
    }

    /// Whether a GPU whose clusters hold up to `max_cluster` programs (0: none) runs this grid.
    pub fn runs_with_clusters_of(&self, max_cluster: u32) -> bool {
        self.cluster_programs() <= max_cluster.max(1)
    }

    /// Programs per thread-block cluster, by `cluster` or `multicast` (1: not clustered).
    pub fn cluster_programs(&self) -> u32 {
        self.cluster.or(self.multicast).map_or(1, |(_, n)| n)
    }

    /// The blocks of the order entry `d` (its count of blocks `blocks`), rounded up to whole
    /// clusters where `d` is multicast.
    fn rounded_to_clusters(&self, d: DimId, blocks: usize) -> usize {
        match self.multicast {
            Some((m, n)) if m == d => blocks.next_multiple_of(n as usize),
            _ => blocks,
        }
    }

    /// Whether loop `l` reduces over this program's block of the clustered dimension (the
    /// cluster combines the blocks' partials after it): a row split over a cluster, or a
    /// contraction (`block(k:B)` with `cluster(k:N)`).
    pub fn reduces_a_cluster_share(&self, l: &Loop) -> bool {
        l.kind == LoopKind::Block && self.cluster_size(l.dim).is_some()
    }

    /// Whether the blocks of `d` are one grid entry of their own: not split by `map`, not
    /// clustered (so the program's coordinate there is its block of `d`).
    pub fn has_own_entry(&self, d: DimId) -> bool {
        self.order.contains(&MapEntry::Whole(d)) && self.cluster_size(d).is_none()
    }

    /// The programs per cluster when `d` is the clustered dimension (its number of blocks).
    pub fn cluster_size(&self, d: DimId) -> Option<u32> {
        self.cluster.filter(|(c, _)| *c == d).map(|(_, n)| n)
    }

    /// The blocks of dimension `d` (one where it is not blocked), given the dimension sizes
    /// (indexed by DimId).
    fn blocks(&self, d: DimId, sizes: &[usize]) -> usize {
        sizes[d.index()].div_ceil(self.block_extent(d).unwrap_or(1) as usize)
    }

    /// Number of blocks of each order entry, given the dimension sizes (indexed by DimId).
    pub fn counts(&self, sizes: &[usize]) -> Vec<usize> {
        let nblocks = |d: DimId| self.blocks(d, sizes);
        self.order
            .iter()
            .map(|e| match e {
                MapEntry::Whole(d) => self.cluster_size(*d).map_or_else(|| self.rounded_to_clusters(*d, nblocks(*d)), |n| n as usize),
                MapEntry::Outer { dim, factor } => nblocks(*dim).div_ceil(*factor as usize),
                MapEntry::Inner { factor, .. } => *factor as usize,
            })
            .collect()
    }

    /// Whether some program of each cluster would get no columns of the clustered dimension,
    /// whose size `size_of` gives: at most N - 1 blocks, for a cluster of N (never, unclustered).
    /// Such a program still runs and the others wait for it at every cluster reduction, so the
    /// library prefers a later size class where one admits the sizes.
    pub fn cluster_leaves_programs_idle(&self, size_of: impl Fn(DimId) -> usize) -> bool {
        let Some((d, programs)) = self.cluster else { return false };
        size_of(d) <= (programs as usize - 1) * self.block_extent(d).unwrap_or(1) as usize
    }

    /// Number of programs to launch: one per block, but where a multicast dimension rounds up
    /// to whole clusters ([`Grid::programs_under`] over every entry).
    pub fn programs(&self, sizes: &[usize]) -> usize {
        let counts = self.counts(sizes);
        self.programs_under(None).iter().map(|f| self.factor_value(f, sizes, &counts, &[])).product()
    }

    /// Whether the blocks of a split of `d` are packed: its last group holds only the blocks
    /// there are. A multicast dimension's groups stay whole, since its clusters are runs of
    /// adjacent blocks (a program past the end still copies its share).
    fn packs(&self, d: DimId) -> bool {
        self.multicast.is_none_or(|(m, _)| m != d) && self.cluster_size(d).is_none()
    }

    /// The programs under one value of the coordinate of order entry `entry` (under the whole
    /// grid, for `None`), as a product of factors: a program id is unravelled outermost entry
    /// first, each coordinate the quotient of what is left by this product. The one decoding
    /// rule of the interpreter ([`Grid::unravel`]), the launch ([`Grid::programs`]) and the
    /// C-family emitters.
    pub fn programs_under(&self, entry: Option<usize>) -> Vec<ProgramFactor> {
        let under = |j: usize| entry.is_none_or(|i| j > i);
        let outer_of = |d: DimId| self.order.iter().position(|e| matches!(e, MapEntry::Outer { dim, .. } if *dim == d));
        let mut out = Vec::new();
        for (j, e) in self.order.iter().enumerate().filter(|(j, _)| under(*j)) {
            match e {
                MapEntry::Outer { dim, .. } if self.packs(*dim) => out.push(ProgramFactor::Blocks(*dim)),
                MapEntry::Inner { dim, factor, .. } if self.packs(*dim) => match outer_of(*dim) {
                    // Both parts are under `entry`: counted as the dimension's blocks above.
                    Some(o) if under(o) => {}
                    // The split's own entry: its groups before the last are whole, so the
                    // quotient by a whole group is the group.
                    Some(o) if Some(o) == entry => out.push(ProgramFactor::Entry(j)),
                    Some(o) => out.push(ProgramFactor::Group { dim: *dim, factor: *factor, outer: o }),
                    None => out.push(ProgramFactor::Entry(j)),
                },
                _ => out.push(ProgramFactor::Entry(j)),
            }
        }
        out
    }

    /// The value of a factor of [`Grid::programs_under`], given the entries' counts and the
    /// coordinates decoded so far (outermost first).
    fn factor_value(&self, f: &ProgramFactor, sizes: &[usize], counts: &[usize], coords: &[usize]) -> usize {
        match *f {
            ProgramFactor::Entry(j) => counts[j],
            ProgramFactor::Blocks(d) => self.blocks(d, sizes),
            ProgramFactor::Group { dim, factor, outer } => (factor as usize).min(self.blocks(dim, sizes) - factor as usize * coords[outer]),
        }
    }

    /// The block index of each blocked dimension for program `pid` (below
    /// [`Grid::programs`]), or `None` for a multicast's program past the end, which computes
    /// nothing it keeps.
    pub fn unravel(&self, pid: usize, sizes: &[usize]) -> Option<Vec<(DimId, usize)>> {
        let counts = self.counts(sizes);
        let mut rest = pid;
        let mut coords = Vec::with_capacity(self.order.len());
        for i in 0..self.order.len() {
            let under: usize = self.programs_under(Some(i)).iter().map(|f| self.factor_value(f, sizes, &counts, &coords)).product();
            coords.push(rest / under.max(1));
            rest %= under.max(1);
        }
        let mut out: Vec<(DimId, usize)> = Vec::new();
        for (i, e) in self.order.iter().enumerate() {
            match e {
                MapEntry::Whole(d) => out.push((*d, coords[i])),
                MapEntry::Outer { dim, factor } => out.push((*dim, coords[i] * *factor as usize)),
                MapEntry::Inner { dim, .. } => {
                    if let Some(slot) = out.iter_mut().find(|(d, _)| d == dim) {
                        slot.1 += coords[i];
                    }
                }
            }
        }
        for (d, b) in &out {
            if self.cluster_size(*d).is_none() && *b >= self.blocks(*d, sizes) {
                return None;
            }
        }
        Some(out)
    }
}

/// A factor of the programs under one coordinate of a grid's order ([`Grid::programs_under`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramFactor {
    /// Every value of order entry `j` ([`Grid::counts`]).
    Entry(usize),
    /// Every block of a split dimension: both its parts.
    Blocks(DimId),
    /// The blocks in the group of a split of `dim` (by `factor`) that the coordinate of its
    /// outer entry (order index `outer`) names: `factor`, or fewer in the last group.
    Group { dim: DimId, factor: u32, outer: usize },
}

/// A kernel: its [`Signature`] (what choosing and launching it needs, [`Kernel::signature`]),
/// how it is built, and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub signature: Signature,
    pub num_warps: u32,
    pub num_stages: u32,
    /// At most this many registers per thread (`max_registers`), on CUDA.
    pub max_registers: Option<u32>,
    /// The GPU's approximations of `exp`, `log`, `tanh`, `sigmoid`, `rsqrt` and division in
    /// every element type (`fast_math`), not only where the kernel stores 16-bit results.
    pub fast_math: bool,
    /// One in every this many of a thread's `exp2`s (its own, and the row differences'
    /// exponentials of pass `exp_as_exp2`) on the FMA units (`fma_exp`), where its builds
    /// approximate `exp`.
    pub fma_exp: Option<u32>,
    pub values: Vec<Value>,
    pub vars: Vec<Shape>,
    pub body: Vec<Stmt>,
}

/// A kernel reads as its signature (`k.name`, `k.grid`, `k.needs_sm90()`): the passes and
/// printers use both halves alike, and only the signature goes into the manifest.
impl std::ops::Deref for Kernel {
    type Target = Signature;
    fn deref(&self) -> &Signature {
        &self.signature
    }
}

impl AsRef<Signature> for Kernel {
    fn as_ref(&self) -> &Signature {
        &self.signature
    }
}

impl std::ops::DerefMut for Kernel {
    fn deref_mut(&mut self) -> &mut Signature {
        &mut self.signature
    }
}

impl Kernel {
    pub fn value(&self, v: ValueId) -> &Value {
        &self.values[v.0 as usize]
    }
    /// Whether every build of the kernel evaluates `exp` with the GPU's approximation (16-bit
    /// element types, or `fast_math()`): passes that change results only by roundings below that
    /// approximation's error (`exp2`, the running maximum's margin of `flash`) run only then.
    pub fn approximates(&self) -> bool {
        self.fast_math || (!self.dtypes.is_empty() && self.dtypes.iter().all(|t| t.size_bytes() == 2))
    }
    /// The operation that defines value `v`, at any depth of the body.
    pub fn def_of(&self, v: ValueId) -> Option<&Op> {
        fn find(stmts: &[Stmt], v: ValueId) -> Option<&Op> {
            stmts.iter().find_map(|s| match s {
                Stmt::Let { value, op } if *value == v => Some(op),
                Stmt::Loop(l) => find(&l.body, v),
                _ => None,
            })
        }
        find(&self.body, v)
    }
    pub fn var(&self, v: VarId) -> &Shape {
        &self.vars[v.0 as usize]
    }
    /// Adds value `v` to the kernel's values and returns its id.
    pub fn push_value(&mut self, v: Value) -> ValueId {
        self.values.push(v);
        ValueId(self.values.len() as u32 - 1)
    }
    /// Every `let` of the body, nested loops included, in program order.
    pub fn lets(&self) -> Vec<(ValueId, &Op)> {
        fn walk<'a>(stmts: &'a [Stmt], out: &mut Vec<(ValueId, &'a Op)>) {
            for s in stmts {
                match s {
                    Stmt::Let { value, op } => out.push((*value, op)),
                    Stmt::Loop(l) => walk(&l.body, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.body, &mut out);
        out
    }

    /// How many times each value is read (by operations, updates and stores), by value id.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut n = vec![0; self.values.len()];
        count_uses(&self.body, &mut n);
        n
    }
    /// Largest number of elements of any tile: what a program holds at once per value.
    pub fn max_tile_elements(&self) -> usize {
        self.values.iter().map(|v| v.shape.elements()).chain(self.vars.iter().map(|s| s.elements())).max().unwrap_or(1)
    }
}

/// Adds to `n[v]` the reads of each value `v` in `stmts` (nested loops included).
pub fn count_uses(stmts: &[Stmt], n: &mut [usize]) {
    for s in stmts {
        match s {
            Stmt::Let { op, .. } => op.operands().into_iter().for_each(|o| n[o.0 as usize] += 1),
            Stmt::Update { value, .. } | Stmt::Store { value, .. } => n[value.0 as usize] += 1,
            Stmt::Loop(l) => count_uses(&l.body, n),
            Stmt::Init { .. } => {}
        }
    }
}

/// The accumulators that `stmts` write, nested loops included: one entry per statement that
/// initializes or updates one.
pub fn written_vars(stmts: &[Stmt]) -> Vec<VarId> {
    let mut out = Vec::new();
    fn walk(stmts: &[Stmt], out: &mut Vec<VarId>) {
        for s in stmts {
            match s {
                Stmt::Init { var, .. } | Stmt::Update { var, .. } => out.push(*var),
                Stmt::Loop(l) => walk(&l.body, out),
                Stmt::Let { .. } | Stmt::Store { .. } => {}
            }
        }
    }
    walk(stmts, &mut out);
    out
}

/// Whether anything in `stmts`, nested loops included, reads accumulator `v`.
pub fn reads_var(stmts: &[Stmt], v: VarId) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Let { op: Op::Var(x), .. } => *x == v,
        Stmt::Loop(l) => reads_var(&l.body, v),
        _ => false,
    })
}

// ---- text form -------------------------------------------------------------------------------

/// Prints a kernel in the readable form of `dtc emit --target kir`.
pub fn print(k: &Kernel) -> String {
    let mut out = String::new();
    let tensor = |t: &TensorParam| format!("{}[{}]", t.name, t.dims.iter().map(|d| k.dim_name(*d)).collect::<Vec<_>>().join(", "));
    let ins: Vec<String> = k.inputs.iter().map(tensor).chain(k.scalars.iter().map(|s| format!("{s}: f32"))).collect();
    let _ = writeln!(out, "kernel {}({}) -> {}", k.name, ins.join(", "), tensor(&k.output));
    let _ = writeln!(out, "  dtypes {}", k.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "));
    let _ = writeln!(out, "  sizes  {}", k.dims.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>().join(", "));
    for (d, b) in &k.bounds {
        let _ = writeln!(out, "  bound  {} <= {b}", k.dim_name(*d));
    }
    for (d, n) in &k.specialize {
        let _ = writeln!(out, "  specialized twin for {} = {n}, contiguous tensors", k.dim_name(*d));
    }
    let order: Vec<String> = k
        .grid
        .order
        .iter()
        .map(|e| match e {
            MapEntry::Whole(d) => {
                let last_first = if k.grid.descending.contains(d) { " last first" } else { "" };
                format!("{}/{}{last_first}", k.dim_name(*d), k.grid.block_extent(*d).unwrap_or(1))
            }
            MapEntry::Outer { dim, factor } => format!("{}/{}:outer/{factor}", k.dim_name(*dim), k.grid.block_extent(*dim).unwrap_or(1)),
            MapEntry::Inner { dim, factor, name } => format!("{name}={}:inner/{factor}", k.dim_name(*dim)),
        })
        .collect();
    let _ = writeln!(out, "  grid   [{}]{}", order.join(", "), comment(&k.grid.origin));
    if let Some((d, n)) = k.grid.cluster {
        let _ = writeln!(out, "  cluster {n} programs along {}{}", k.dim_name(d), comment(&format!("cluster({}:{n})", k.dim_name(d))));
    }
    if let Some((d, n)) = k.grid.multicast {
        let _ = writeln!(out, "  multicast {n} programs along {}{}", k.dim_name(d), comment(&format!("multicast({}:{n})", k.dim_name(d))));
    }
    let producer = if k.warp_specialize { " + a producer warpgroup of 128" } else { "" };
    let _ = writeln!(out, "  block  {} threads{producer}{}", 32 * k.num_warps, comment(&format!("num_warps({})", k.num_warps)));
    if let Some(n) = k.max_registers {
        let _ = writeln!(out, "  regs   at most {n} per thread{}", comment(&format!("max_registers({n})")));
    }
    if k.fast_math {
        let _ = writeln!(out, "  math   approximate in every element type{}", comment("fast_math()"));
    }
    if let Some(n) = k.fma_exp {
        let _ = writeln!(out, "  exps   one in {n} on the FMA units{}", comment(&format!("fma_exp({n})")));
    }
    if k.warp_specialize {
        let _ =
            writeln!(out, "  roles  the producer copies the rdot loop's operands, the other warps compute{}", comment("warp_specialize()"));
    }
    if k.wgmma {
        let _ = writeln!(out, "  dots   wgmma by warpgroups of 4 warps, 64 rows each{}", comment("wgmma()"));
    }
    if k.persistent {
        let _ =
            writeln!(out, "  grid   persistent: as many programs as run at once, each taking blocks in order{}", comment("persistent()"));
    }
    if let Some(r) = k.requires {
        let _ = writeln!(out, "  target {} only{}", r.name(), comment(&format!("requires({})", r.name())));
    }
    if k.aligned {
        let _ = writeln!(out, "  tensors aligned only{}", comment("requires(aligned)"));
    }
    let _ = writeln!(out, "  program:");
    print_stmts(k, &k.body, 2, &mut out);
    out
}

fn comment(s: &str) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!("    # {s}")
    }
}

fn shape_text(k: &Kernel, s: &Shape) -> String {
    format!("[{}]", s.0.iter().map(|(d, n)| format!("{}:{n}", k.dim_name(*d))).collect::<Vec<_>>().join(", "))
}

fn layout_text(l: Layout) -> &'static str {
    match l {
        Layout::Blocked => "blocked",
        Layout::DotA => "dot_a",
        Layout::DotB => "dot_b",
        Layout::DotAcc => "dot_acc",
    }
}

fn op_text(k: &Kernel, op: &Op) -> String {
    let v = |v: &ValueId| format!("%{}", v.0);
    match op {
        Op::Const(c) => format!("const {c}"),
        Op::Scalar(i) => format!("scalar {}", k.scalars[*i]),
        Op::Index(d) => format!("index {}", k.dim_name(*d)),
        Op::Len(d) => format!("len {}", k.dim_name(*d)),
        Op::BlockLanes(d) => format!("lanes of this block of {}", k.dim_name(*d)),
        Op::Load { input, axes, fill } => {
            let axes = axes.iter().map(|d| k.dim_name(*d)).collect::<Vec<_>>().join(", ");
            format!("load {}[{axes}] masked else {fill}", k.inputs[*input].name)
        }
        Op::Unary(u, a) => format!("{} {}", u.name(), v(a)),
        Op::Binary(b, x, y) => format!("{} {}, {}", b.name(), v(x), v(y)),
        Op::Select(c, x, y) => format!("select {}, {}, {}", v(c), v(x), v(y)),
        Op::MaskFill { value, dim, fill } => format!("mask {} along {} else {fill}", v(value), k.dim_name(*dim)),
        Op::Reduce { op, value, dim, run: 1 } => format!("{} {} over {}", op.name(), v(value), k.dim_name(*dim)),
        Op::Reduce { op, value, dim, run } => format!("{} {} over {}, one lane per run of {run}", op.name(), v(value), k.dim_name(*dim)),
        Op::RunReduce { op, value, dim, run } => format!("{} {} over runs of {run} along {}", op.name(), v(value), k.dim_name(*dim)),
        Op::ClusterReduce { op, value, dim } => format!("{} {} over the cluster along {}", op.name(), v(value), k.dim_name(*dim)),
        Op::ClusterPaired { rule, value, first, count, dim } => {
            let count = count.map(|c| format!(", counts {}", v(&c))).unwrap_or_default();
            format!("{} {} about {}{count} over the cluster along {}, at its meeting", rule.name(), v(value), v(first), k.dim_name(*dim))
        }
        Op::Dot { a, b, dim } => format!("dot {}, {} over {}", v(a), v(b), k.dim_name(*dim)),
        Op::Var(var) => format!("read $acc{}", var.0),
    }
}

fn print_stmts(k: &Kernel, stmts: &[Stmt], depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    for s in stmts {
        match s {
            Stmt::Let { value, op } => {
                let val = k.value(*value);
                let _ =
                    writeln!(out, "{pad}%{} : f32{} @{} = {}", value.0, shape_text(k, &val.shape), layout_text(val.layout), op_text(k, op));
            }
            Stmt::Init { var, value, origin } => {
                let _ = writeln!(out, "{pad}$acc{} : f32{} = {value}{}", var.0, shape_text(k, k.var(*var)), comment(origin));
            }
            Stmt::Update { var, combine, value } => {
                let how = match combine {
                    Combine::Reduce(op) => op.name().trim_start_matches('r').to_string(),
                    Combine::Set => "set".into(),
                };
                let _ = writeln!(out, "{pad}$acc{} = {how}($acc{}, %{})", var.0, var.0, value.0);
            }
            Stmt::Loop(l) => {
                let kind = match l.kind {
                    LoopKind::Block => "in block",
                    LoopKind::Whole => "whole",
                    LoopKind::Reduction => "reduce",
                };
                let stages = if l.stages > 1 { format!(", pipelined {}", l.stages) } else { String::new() };
                let backward = if l.backward { ", backward" } else { "" };
                let steps = match l.steps {
                    Steps::All => "",
                    Steps::Full => ", full steps",
                    Steps::Partial => ", partial step",
                };
                let until = l.until.map_or(String::new(), |d| format!(", until the end of the block of {}", k.dim_name(d)));
                let until = match l.diagonal {
                    Some(g) => format!("{until}, %{} true below the diagonal", g.cond.0),
                    None => until,
                };
                let _ = writeln!(
                    out,
                    "{pad}for {} step {} ({kind}{stages}{backward}{steps}{until}):{}",
                    k.dim_name(l.dim),
                    l.step,
                    comment(&l.origin)
                );
                print_stmts(k, &l.body, depth + 1, out);
            }
            Stmt::Store { value, tile } => {
                let _ = writeln!(out, "{pad}store {}{} = %{} masked", k.output.name, shape_text(k, tile), value.0);
            }
        }
    }
}

/// Bytes of one vector access: GPU kernels read and write runs of this many bytes of
/// consecutive elements along a tensor's last axis.
pub const RUN_BYTES: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(order: Vec<MapEntry>, multicast: Option<(DimId, u32)>) -> Grid {
        let (x, y, z) = (DimId(0), DimId(1), DimId(2));
        Grid { blocked: vec![(x, 16), (y, 32), (z, 8)], order, cluster: None, multicast, descending: vec![], origin: String::new() }
    }

    /// Every program id below `programs` names a distinct block, every block has one; returns the
    /// blocks in program order and how many programs fell past the end.
    fn visits(g: &Grid, sizes: &[usize]) -> (Vec<Vec<(DimId, usize)>>, usize) {
        let blocks: usize = g.blocked.iter().map(|(d, b)| sizes[d.index()].div_ceil(*b as usize)).product();
        let mut seen = std::collections::HashSet::new();
        let (mut order, mut past) = (Vec::new(), 0);
        for pid in 0..g.programs(sizes) {
            match g.unravel(pid, sizes) {
                Some(b) => {
                    assert!(seen.insert(b.clone()), "{b:?} visited twice (pid {pid}, sizes {sizes:?}, {:?})", g.order);
                    order.push(b);
                }
                None => past += 1,
            }
        }
        assert_eq!(seen.len(), blocks, "blocks missed at sizes {sizes:?}, order {:?}", g.order);
        (order, past)
    }

    #[test]
    fn grouped_order_visits_every_block_once_and_packs_short_groups() {
        let (x, y, z) = (DimId(0), DimId(1), DimId(2));
        let inner = |dim, factor| MapEntry::Inner { dim, factor, name: "x1".into() };
        let outer = |dim, factor| MapEntry::Outer { dim, factor };
        // Block counts of x: 1, 3, 8, 11, 16, 17 (sizes 16 apart, and not multiples of the block).
        for xs in [1usize, 40, 128, 170, 256, 257] {
            for ys in [1usize, 32, 100] {
                let sizes = [xs, ys, 20];
                let (bx, by, bz) = (xs.div_ceil(16), ys.div_ceil(32), 20usize.div_ceil(8));
                for f in [1u32, 3, 8] {
                    let orders = [
                        vec![outer(x, f), MapEntry::Whole(y), inner(x, f), MapEntry::Whole(z)],
                        vec![MapEntry::Whole(z), outer(x, f), inner(x, f), MapEntry::Whole(y)],
                        vec![outer(x, f), MapEntry::Whole(z), MapEntry::Whole(y), inner(x, f)],
                    ];
                    for order in orders {
                        let g = grid(order, None);
                        assert_eq!(g.programs(&sizes), bx * by * bz, "one program per block: {:?}", g.order);
                        let (_, past) = visits(&g, &sizes);
                        assert_eq!(past, 0);
                    }
                    // Triton's grouped order: group `pid / (f * by)` of f rows (fewer in the
                    // last), row fastest within it.
                    let g = grid(vec![outer(x, f), MapEntry::Whole(y), inner(x, f)], None);
                    let g = Grid { blocked: vec![(x, 16), (y, 32)], ..g };
                    let (order, _) = visits(&g, &sizes);
                    for (pid, b) in order.iter().enumerate() {
                        let f = f as usize;
                        let group = pid / (f * by);
                        let rows = f.min(bx - group * f);
                        let within = pid - group * f * by;
                        assert_eq!(b, &vec![(x, group * f + within % rows), (y, within / rows)], "pid {pid}, bx {bx}, by {by}, f {f}");
                    }
                }
                // A multicast split keeps whole groups: its programs past the end copy for their
                // cluster and keep nothing.
                let g = grid(vec![MapEntry::Whole(y), MapEntry::Whole(z), outer(x, 4), inner(x, 4)], Some((x, 2)));
                let (_, past) = visits(&g, &sizes);
                assert_eq!(g.programs(&sizes), bx.div_ceil(4) * 4 * by * bz);
                assert_eq!(past, (bx.div_ceil(4) * 4 - bx) * by * bz);
            }
        }
    }
}
