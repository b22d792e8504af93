//! Register layouts of the GPU emitter's older path, decided per kernel instance before printing:
//! where each element of each tile lives (which thread, which register), which `rdot`s run on
//! the matrix units (`mma.sync` on CUDA, MFMA on HIP) or, in f32, as staged fused multiply-adds
//! (`Fma`), with which operands staged how, and which loops pipeline them. `plan` decides the
//! accumulator layouts; `super::replicate` and
//! `super::runs` then turn what they can to replicated scalars and runs. The emitter
//! (`emit/gpu.rs`, `emit/gpu_mma.rs`) prints what this decides; the rules are in the module docs
//! of `emit/gpu_mma.rs`.

pub(crate) use super::mapping::Mapping;
use crate::emit::gpu::Dialect;
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;

/// Where the elements of a tile live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegLayout {
    /// Element `e` (row-major) in register slot `e / T` of thread `e % T`.
    Blocked,
    /// The `mma.sync.m16n8k16` accumulator layout over a [rows, cols] tile.
    Mma(MmaTile),
    /// A vector along the rows of an accumulator tile whose warps each hold whole rows: each
    /// thread holds the elements of its own rows of the tile, one register per row slot (see
    /// [`RowTile`]). A row statistic of the tile (attention's running maximum and sum) stays
    /// where the tile's elements are, and element-wise work between them needs no shared memory.
    MmaRows(RowTile),
    /// A one-element tile every thread holds in its register slot 0 (see `gpu_replicate.rs`).
    Replicated,
    /// A blocked tile whose lanes are equal in runs of `n` along the last dimension: register
    /// `q` holds the run of blocked register `q * n` (see `gpu_runs.rs`).
    Runs(u32),
}

/// The instruction a staged dot is built on: its fragment shape and which lane holds
/// which element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MatrixIsa {
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
    /// f32 on the CUDA cores (the vector ALUs on AMD): fused multiply-adds over f32 operands
    /// staged in shared memory, in fragments of 16 x (8 `cols`) per 32 lanes (half a wavefront
    /// on AMD), `cols` 4 or 2. Lane `l` holds rows `l / 8 + 4 q` for `q` in 0..4 and columns
    /// `(l % 8) * cols + c` for `c` in 0..cols; register `r` holds fragment `r / (4 cols)`,
    /// `q = (r / cols) % 4`, `c = r % cols`. The lanes reading at once (a quarter warp) share
    /// their rows and read 16 `cols` consecutive bytes of a [K][cols] operand line, and the four
    /// quarters' rows are consecutive lines, which the staging pitch puts in distinct banks.
    /// Fragments of 16 x 32 (`cols` 4) where the tile has enough of them for the warps, else of
    /// 16 x 16 (the talk's 2mm: 16 x 64 over four warps).
    Fma { cols: u32 },
}

impl MatrixIsa {
    /// The ISA of a dialect's dots over `dtype` operands: the tensor cores (matrix cores) for
    /// f16 and bf16, fused multiply-adds for f32.
    pub fn of(dialect: Dialect, dtype: DType) -> MatrixIsa {
        match (dialect, dtype) {
            (Dialect::Cuda, DType::F16 | DType::BF16) => MatrixIsa::MmaSync,
            (Dialect::Hip, DType::F16 | DType::BF16) => MatrixIsa::Mfma,
            (_, DType::F32) => MatrixIsa::Fma { cols: 4 },
        }
    }

    /// Rows and columns of one accumulator fragment.
    pub(crate) fn fragment(self) -> (u32, u32) {
        match self {
            MatrixIsa::MmaSync => (16, 8),
            MatrixIsa::Mfma => (16, 16),
            MatrixIsa::Fma { cols } => (16, 8 * cols),
        }
    }

    /// log2 of the lanes that share the ISA's fragments: a warp, a wavefront, or (`Fma`) 32
    /// lanes on either dialect.
    pub(crate) fn lane_bits(self) -> u32 {
        match self {
            MatrixIsa::MmaSync | MatrixIsa::Fma { .. } => 5,
            MatrixIsa::Mfma => 6,
        }
    }

    /// log2 of the registers one lane holds of a fragment.
    pub(crate) fn register_bits(self) -> u32 {
        match self {
            MatrixIsa::MmaSync | MatrixIsa::Mfma => 2,
            MatrixIsa::Fma { cols } => 2 + cols.trailing_zeros(),
        }
    }

    /// Rows of a fragment that one lane holds, and how many consecutive lanes share each of
    /// those rows (holding its other columns).
    pub(crate) fn rows_per_lane(self) -> (u32, u32) {
        match self {
            MatrixIsa::MmaSync => (2, 4),
            MatrixIsa::Mfma => (4, 16),
            MatrixIsa::Fma { .. } => (4, 8),
        }
    }

    /// The contraction one instruction step covers: the dot's depth is a multiple of it.
    pub(crate) fn k_step(self) -> u32 {
        match self {
            MatrixIsa::MmaSync | MatrixIsa::Mfma => 16,
            MatrixIsa::Fma { .. } => 4,
        }
    }

    /// Bytes of one staged operand element: the 16-bit types of the matrix units, f32 of `Fma`.
    pub(crate) fn operand_bytes(self) -> u32 {
        match self {
            MatrixIsa::MmaSync | MatrixIsa::Mfma => 2,
            MatrixIsa::Fma { .. } => 4,
        }
    }

    /// How many adjacent output columns a lane holds in consecutive registers of a fragment
    /// (stored together by one wider write): column pairs of `mma.sync`, runs of `cols` of `Fma`;
    /// an MFMA lane holds one column per fragment row.
    pub(crate) fn adjacent_columns(self) -> u32 {
        match self {
            MatrixIsa::MmaSync => 2,
            MatrixIsa::Mfma => 1,
            MatrixIsa::Fma { cols } => cols,
        }
    }

    /// Whether it is f32 `Fma`, of either fragment width.
    pub(crate) fn is_fma(self) -> bool {
        matches!(self, MatrixIsa::Fma { .. })
    }

    /// How the plan and the generated code's comments name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            MatrixIsa::MmaSync => "mma.sync",
            MatrixIsa::Mfma => "mfma",
            MatrixIsa::Fma { .. } => "fma",
        }
    }
}

/// A [rows, cols] tile spread over `wm` x `wn` warps, each covering a (rows / wm) x (cols / wn)
/// sub-tile with fragments of `isa`, fragments of one warp row-major. Every other dimension of
/// the tile has extent 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MmaTile {
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
    pub(crate) fn frags(&self) -> (u32, u32) {
        let (fr, fc) = self.isa.fragment();
        (self.rows / self.wm / fr, self.cols / self.wn / fc)
    }

    /// C expressions of the row and the column of register `r` (a C expression) of thread `tid`.
    pub(crate) fn row_col(&self, r: &str) -> (String, String) {
        let (_, fn_) = self.frags();
        let (fr, fc) = self.isa.fragment();
        let bits = self.isa.lane_bits();
        let lane = format!("(tid & {})", (1 << bits) - 1);
        let (in_row, in_col) = match self.isa {
            MatrixIsa::MmaSync => (format!("({lane} >> 2) + (({r} >> 1) & 1) * 8"), format!("(tid & 3) * 2 + ({r} & 1)")),
            MatrixIsa::Mfma => (format!("({lane} >> 4) * 4 + ({r} & 3)"), "(tid & 15)".to_string()),
            MatrixIsa::Fma { cols } => {
                let c = cols.trailing_zeros();
                (format!("({lane} >> 3) + (({r} >> {c}) & 3) * 4"), format!("(tid & 7) * {cols} + ({r} & {})", cols - 1))
            }
        };
        let f = self.isa.register_bits();
        let (warp_row, warp_col) = self.warp_origin(1);
        let row = format!("{warp_row} + ({r} >> {f}) / {fn_} * {fr} + {in_row}");
        let col = format!("{warp_col} + ({r} >> {f}) % {fn_} * {fc} + {in_col}");
        (row, col)
    }
}

impl MmaTile {
    /// C expressions of the first row and the first column of this thread's warp (wavefront,
    /// 32-lane group for `Fma`) in the tile, in units of `unit` elements (`unit` divides the
    /// warp's rows and columns).
    pub(crate) fn warp_origin(&self, unit: u32) -> (String, String) {
        let bits = self.isa.lane_bits();
        let (wr, wc) = (self.rows / self.wm, self.cols / self.wn);
        debug_assert!(wr.is_multiple_of(unit) && wc.is_multiple_of(unit));
        (format!("(tid >> {bits}) / {} * {}", self.wn, wr / unit), format!("(tid >> {bits}) % {} * {}", self.wn, wc / unit))
    }

    /// Which of this thread's rows (0 .. fragments along the rows x [`MatrixIsa::rows_per_lane`])
    /// register `r` (a C expression) holds.
    pub(crate) fn row_slot(&self, r: &str) -> String {
        let (_, fn_) = self.frags();
        match self.isa {
            MatrixIsa::MmaSync => format!("({r} >> 2) / {fn_} * 2 + (({r} >> 1) & 1)"),
            MatrixIsa::Mfma => format!("({r} >> 2) / {fn_} * 4 + ({r} & 3)"),
            MatrixIsa::Fma { cols } => {
                format!("({r} >> {}) / {fn_} * 4 + (({r} >> {}) & 3)", self.isa.register_bits(), cols.trailing_zeros())
            }
        }
    }

    /// The tile row of this thread's row slot `s` (a C expression), and the warp's position
    /// along the columns.
    pub(crate) fn slot_row(&self, s: &str) -> (String, String) {
        let bits = self.isa.lane_bits();
        let lane = format!("(tid & {})", (1 << bits) - 1);
        let (base, _) = self.warp_origin(1);
        let row = match self.isa {
            MatrixIsa::MmaSync => format!("{base} + ({s} >> 1) * 16 + ({lane} >> 2) + ({s} & 1) * 8"),
            MatrixIsa::Mfma => format!("{base} + ({s} >> 2) * 16 + ({lane} >> 4) * 4 + ({s} & 3)"),
            MatrixIsa::Fma { .. } => format!("{base} + ({s} >> 2) * 16 + ({lane} >> 3) + ({s} & 3) * 4"),
        };
        (row, format!("(tid >> {bits}) % {}", self.wn))
    }
}

impl MmaTile {
    /// The rows of this tile as a [`RowTile`], when each warp holds whole rows (`wn` = 1).
    pub(crate) fn row_tile(&self) -> Option<RowTile> {
        (self.wn == 1).then_some(RowTile { isa: self.isa, m: self.m, rows: self.rows, wm: self.wm })
    }
}

/// The rows of accumulator tiles over `rows` of dimension `m` spread over `wm` warps along the
/// rows and one along the columns (whatever the columns): thread `tid` holds the rows
/// [`MmaTile::slot_row`] gives, in register slots `0 .. slots()`; the lanes that share a row
/// (see [`MatrixIsa::rows_per_lane`]) hold the same value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowTile {
    pub isa: MatrixIsa,
    pub m: DimId,
    pub rows: u32,
    pub wm: u32,
}

impl RowTile {
    /// Row slots per thread.
    pub(crate) fn slots(&self) -> u32 {
        self.rows / self.wm / self.isa.fragment().0 * self.isa.rows_per_lane().0
    }

    /// The tile row of this thread's row slot `s` (a C expression).
    pub(crate) fn slot_row(&self, s: &str) -> String {
        let one_column = MmaTile { isa: self.isa, m: self.m, n: self.m, rows: self.rows, cols: self.isa.fragment().1, wm: self.wm, wn: 1 };
        one_column.slot_row(s).0
    }
}

/// A dot computed on staged operands (the matrix units, or f32 `Fma`): `a` holds the rows (dimension `tile.m`) and `b` the columns
/// (`tile.n`), both over the contraction `k` of extent `depth`.
#[derive(Clone, Debug)]
pub(crate) struct MmaDot {
    pub tile: MmaTile,
    pub a: ValueId,
    pub b: ValueId,
    pub k: DimId,
    pub depth: u32,
    /// The elements of `k` that the products cover: `depth`, or, for a warpgroup product whose
    /// kernel bounds `k` below its tile (a whole-extent tile is the bound rounded up to a power
    /// of two, `bound(d:80)` gives 128), the bound rounded up to a k16 step. A dot's operands
    /// are zero past the size of its contraction (their loads are masked else 0, computed
    /// ones masked), so the steps past the bound would only add zeros.
    pub reach: u32,
    /// The accumulator the dot is summed into right away: `mma.sync` accumulates into its
    /// registers directly and the [`Stmt::Update`] prints nothing.
    pub into: Option<VarId>,
    /// For `a` and `b`: the load that defines the operand, when the dot is its only reader and
    /// sits in the same statement list (so at the same tile offsets). The dot then copies it
    /// from global to shared memory itself, the elements as they are, threads along the input's
    /// last axis, and the load prints nothing. Inputs are read-only, so the later read sees
    /// the same data.
    pub direct: [Option<DirectLoad>; 2],
    /// Shared-memory buffers per operand: above 1 when the dot's reduction loop is pipelined
    /// (`num_stages`), see the module docs.
    pub stages: u32,
    /// Computed by `wgmma` in a warp-specialized loop (`gpu_hopper.rs`), from the ring its
    /// plan stages: the dot stages nothing itself and prints nothing where it stands.
    pub wgmma: bool,
    /// Operand `a` is an accumulator-layout tile whose warps hold exactly the rows and the
    /// contraction this dot's warps need (attention's probabilities before `P V`): its
    /// registers are repacked as `mma.sync` A fragments (rounded to the element type), and it
    /// is not staged in shared memory. The accumulator of `m16n8k16` holds, for two fragments
    /// side by side, the elements the A fragment of one k16 step wants in the same lanes.
    pub a_in_fragments: bool,
    /// Where the dot's loop feeds it, with its other dots, through rings of shared-memory stages
    /// (`super::dot_rings`): its operands' buffers there. `None`: staged where it stands (in
    /// slots 0 and 1), or pipelined alone (`stages`).
    pub ring: Option<RingBuffers>,
    /// For `a` and `b`: whether the operand's lines are swizzled rather than padded. 16-byte
    /// unit `u` of line `l` is stored at unit `u ^ (l % 8)`, so that the eight consecutive lines
    /// an `ldmatrix` reads at one unit fall in distinct banks without padding, and the lines
    /// take no more shared memory than their elements. Each fragment's XORed unit then takes a
    /// register where a padded address is a constant offset (attention at d = 64 spilled when
    /// swizzled), so `super::dot_rings` swizzles the `mma.sync` rings only where they do not fit
    /// padded (attention's Q, K and V at d = 128 in steps of 64 keys). A warpgroup dot's
    /// operands are always swizzled, their lines cut in the 128-byte swizzle atoms of `wgmma`
    /// ([`MmaDot::atom_pieces`]).
    pub swizzle: [bool; 2],
    /// Computed by `wgmma` (a `wgmma()` kernel, CUDA sm_90a): each warpgroup of four warps
    /// multiplies its 64 rows (16 per warp, the `mma.sync` accumulator layout of one warp across)
    /// by the whole of `b`, both operands read from their swizzled ring buffers through matrix
    /// descriptors, or `a` from its registers ([`MmaDot::a_in_fragments`]). See
    /// [`warpgroup_fits`] for what such a dot needs.
    pub warpgroup: bool,
}

/// The buffers of a dot's operands in the rings of its loop (`super::dot_rings`): for operand
/// `i`, the offset (in 4-byte words, from the start of the rings' region) of its first buffer,
/// and whether it is held (copied once, before the loop, one buffer) or one of `stages`
/// buffers per step. `None` for an operand that is not copied (read from fragments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingBuffers {
    pub at: [Option<usize>; 2],
    pub held: [bool; 2],
    pub stages: u32,
    /// In a `wgmma()` kernel, the loop's copies are bulk tensor copies (TMA) that its first
    /// thread issues: for operand `i`, its tensor map (an index into [`Plan::tensor_maps`]),
    /// one copy per 64-element piece of its lines (`MmaDot::atom_pieces`); and where the
    /// loop's `stages` barriers (8 bytes each, one per stage, completing when the stage's
    /// bytes have landed) start, in words from the rings' region. `None`: `cp.async` copies by
    /// every thread.
    pub maps: [Option<usize>; 2],
    pub barriers: Option<usize>,
    /// Where the loop's `stages` counts of warps done with each stage start (one word each,
    /// after the barriers), in a loop of bulk copies whose stages the last warp done with one
    /// refills ([`super::dot_rings`]); `None`: the first thread refills the stage that the
    /// step before read, after a block-wide barrier at every step.
    pub done_counts: Option<usize>,
    /// The loop issues each step's first dot together with the previous step's last one
    /// ([`super::dot_rings`]): the last dot's computed A fragments are carried into the next
    /// step, which issues them with its first products (as compiled, the step's statements run
    /// once both are done: `emit/gpu_overlap.rs`). The stage of the previous step is refilled
    /// once those products are done.
    pub overlapped: bool,
    /// In an overlapped loop of a kernel of two warpgroups, they take turns issuing a step's
    /// products (named barriers 2 and 3), the first first: one's softmax runs while the other's
    /// products are on the tensor cores.
    pub turns: bool,
    /// In a `multicast(d:N)` kernel, the loop's copies of the operands that do not vary along
    /// `d` are shared by the cluster's programs ([`RingMulticast`]).
    pub multicast: Option<RingMulticast>,
}

/// How the programs of a multicast's cluster share a ring loop's copies (`super::dot_rings`):
/// each of `programs` programs copies `slice_lines[i]` lines of every box of operand `i` (those
/// from line `rank * slice_lines[i]`) into the same place of every program's stage; an operand
/// with no slice is copied by each program alone. A stage is refilled once every program of the
/// cluster is done with it: each arrives on the stage's `empty` barrier (8 bytes, at word
/// `empty` of the rings' region, one per stage after the `full` ones) in every program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingMulticast {
    pub programs: u32,
    pub empty: usize,
    pub slice_lines: [Option<u32>; 2],
}

/// A load of input `input`, axis `i` along `axes[i]`.
#[derive(Clone, Debug)]
pub(crate) struct DirectLoad {
    pub input: usize,
    pub axes: Vec<DimId>,
}

impl MmaDot {
    /// The dot of tile `t` of `a` by `b` over `depth` of `k`, before the passes decide how it
    /// is fed: into a fresh tile, its operands loaded apart, unstaged, unswizzled, on `mma.sync`.
    pub(crate) fn new(tile: MmaTile, a: ValueId, b: ValueId, k: DimId, depth: u32) -> MmaDot {
        MmaDot {
            tile,
            a,
            b,
            k,
            depth,
            reach: depth,
            into: None,
            direct: [None, None],
            stages: 1,
            wgmma: false,
            a_in_fragments: false,
            ring: None,
            swizzle: [false, false],
            warpgroup: false,
        }
    }

    /// The dimension along the rows of operand `i` (0: `a`, 1: `b`), and their number.
    pub(crate) fn rows(&self, i: usize) -> (DimId, u32) {
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

    /// Elements per line of operand `i` as staged.
    fn line_len(&self, i: usize) -> u32 {
        if self.trans(i) {
            self.rows(i).1
        } else {
            self.depth
        }
    }

    /// Whether operand `i`'s lines are swizzled rather than padded (see [`MmaDot::swizzle`]).
    pub fn swizzled(&self, i: usize) -> bool {
        self.swizzle[i]
    }

    /// Whether operand `a` is computed and staged from registers (in slot 0) where the dot
    /// stands: neither copied from an input nor read from fragments.
    pub fn computed_a(&self) -> bool {
        self.direct[0].is_none() && !self.a_in_fragments
    }

    /// Whether the dot is fed by rings that do not hold its computed `a`: that is staged from
    /// registers into slot 0 at every step of the loop.
    pub fn a_in_slot_each_step(&self) -> bool {
        self.computed_a() && self.ring.is_some_and(|r| r.at[0].is_none())
    }

    /// Whether operand `i` can be swizzled: an `mma.sync` operand whose lines are whole
    /// multiples of 128 bytes (64 elements), the eight units that an XOR with `line % 8` permutes.
    pub fn can_swizzle(&self, i: usize) -> bool {
        self.tile.isa == MatrixIsa::MmaSync && self.line_len(i).is_multiple_of(64)
    }

    /// Whether operand `i` of a warpgroup product can lie in 128-byte swizzle atoms: an
    /// `mma.sync`-typed operand (16-bit elements) whose lines are whole 16-byte units. Lines
    /// that are not whole atoms are staged padded to them ([`Self::staged_len`]): the bulk
    /// copies fill the padding (with zeros past the input, else with elements no product reads).
    pub fn fits_atoms(&self, i: usize) -> bool {
        self.tile.isa == MatrixIsa::MmaSync && self.line_len(i).is_multiple_of(8)
    }

    /// Elements of operand `i`'s lines as staged: their length, rounded up to whole 64-element
    /// atoms where swizzled (the bulk copies fill the rest, which no product reads).
    fn staged_len(&self, i: usize) -> u32 {
        if self.swizzled(i) {
            self.line_len(i).next_multiple_of(64)
        } else {
            self.line_len(i)
        }
    }

    /// Elements per staged line of operand `i`: a swizzled line's length, or the length plus
    /// padding that makes the pitch an odd number of 16-byte units, so that the eight lines an
    /// `ldmatrix` reads at once (the four consecutive lines an `Fma` warp reads of an operand
    /// staged [rows][K]) fall in distinct banks; every line starts 16-byte aligned, as
    /// `ldmatrix` and 16-byte loads need. (An `Fma` B staged [rows][K], attention's K, reads
    /// lines 4 apart, with 4-way conflicts.)
    pub fn pitch(&self, i: usize) -> u32 {
        let len = self.staged_len(i);
        if self.swizzled(i) {
            return len;
        }
        let unit = 16 / self.tile.isa.operand_bytes();
        if (len / unit).is_multiple_of(2) {
            len + unit
        } else {
            len + 2 * unit
        }
    }

    /// How a warpgroup dot's operand `i` lies in its buffer: in how many pieces of 64 elements,
    /// how many bytes apart. `wgmma` reads 128-byte swizzle atoms (eight lines of 64 16-bit
    /// elements), so its lines are cut in pieces of 64 elements, piece `c` of every line in a
    /// block of its own (`c * lines * 128` bytes in, the lines 128 bytes apart in it), each
    /// swizzled as a line of 64 (16-byte unit `u` of line `l` at `u ^ (l % 8)`). The bulk
    /// copies write one box per piece; `ldmatrix` operands keep whole lines (cut so, `mma.sync`
    /// attention at d = 128 spilled 240 bytes).
    pub fn atom_pieces(&self, i: usize) -> (u32, u32) {
        (self.staged_len(i) / 64, self.lines(i) * 128)
    }

    /// The `wgmma` matrix descriptor of a warpgroup dot's operand `i` in its buffer (see
    /// [`Self::atom_pieces`]): lines of 128 bytes in groups of 8 (1024 bytes apart). An operand
    /// staged [rows][K] is K-major: 16 of `k` are 32 bytes further into a piece of 64, the
    /// pieces a block apart, and a warpgroup's 64 rows 64 lines on. One staged [K][rows] is
    /// MN-major, read transposed: 16 of `k` are 16 lines further, and its pieces of 64 rows are
    /// both the leading byte offset and a warpgroup's slice apart.
    pub fn wgmma_descriptor(&self, i: usize) -> crate::plan::warp_specialize::Descriptor {
        use crate::plan::warp_specialize::{Descriptor, ROW_BYTES};
        let (_, piece) = self.atom_pieces(i);
        if self.trans(i) {
            Descriptor { lbo: piece, sbo: 1024, k_step: 16 * ROW_BYTES, slice_step: piece, transposed: true, pieces: None }
        } else {
            Descriptor { lbo: 16, sbo: 1024, k_step: 32, slice_step: 64 * ROW_BYTES, transposed: false, pieces: Some((64, piece)) }
        }
    }

    /// Lines of one buffer of operand `i`: K of one staged [K][rows], else its rows.
    pub fn lines(&self, i: usize) -> u32 {
        if self.trans(i) {
            self.depth
        } else {
            self.rows(i).1
        }
    }

    /// Shared memory (in 4-byte words) that one buffer of operand `i` takes: a multiple of 4,
    /// so that every buffer starts 16-byte aligned.
    pub fn buffer_words(&self, i: usize) -> usize {
        ((self.lines(i) * self.pitch(i) * self.tile.isa.operand_bytes()).div_ceil(4) as usize).next_multiple_of(4)
    }

    /// Shared memory (in 4-byte words) that staging operand `i` takes: all its buffers.
    pub fn slot_words(&self, i: usize) -> usize {
        self.buffer_words(i) * self.stages as usize
    }
}

/// The layouts of one kernel instance.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub values: Vec<RegLayout>,
    pub vars: Vec<RegLayout>,
    pub dots: Vec<(ValueId, MmaDot)>,
    /// Shared memory (4-byte words) of the rings of `super::dot_rings`, after the slots.
    pub ring_words: usize,
    /// Whether the dialect copies to shared memory asynchronously (`cp.async`, CUDA): the
    /// pipelines and rings of `num_stages` need it.
    pub async_copies: bool,
    /// The tensor maps the kernel takes (ahead of its argument block), for the bulk tensor
    /// copies of its rings ([`RingBuffers::maps`]).
    pub tensor_maps: Vec<dt_core::abi::TensorMapSpec>,
    /// The GPUs the build runs on ([`crate::plan::Target::older`]), whose shared memory the
    /// pipelines, rings and slots keep within.
    pub target: crate::plan::Target,
    /// The loops (their dimension and `num_stages`) that would pipeline their dots (alone, or
    /// through the rings of `super::dot_rings`) but whose buffers of two stages do not fit:
    /// they run with one.
    pub unfitted_stages: Vec<(DimId, u32)>,
    /// Products `read $acc * f` set back into `$acc`, an accumulator in tensor-core fragments,
    /// `f` a factor held in its rows (`super::rows`): the online form's rescale of a dot's
    /// accumulator by `exp(old - new)`, which is exactly 1 in every step whose maximum leaves the
    /// running one where it was (pass `flash`). The printer skips their products where every
    /// factor a thread holds is 1.
    pub unit_rescales: Vec<ValueId>,
}

impl Plan {
    pub fn dot(&self, v: ValueId) -> Option<&MmaDot> {
        self.dots.iter().find(|(x, _)| *x == v).map(|(_, d)| d)
    }

    /// Whether the update of `var` by `value` is done by the staged dot itself.
    pub fn fused_update(&self, var: VarId, value: ValueId) -> bool {
        self.dot(value).is_some_and(|d| d.into == Some(var))
    }

    /// The dots that loop `l` copies steps ahead, in the order of its body: the one dot it is
    /// pipelined around (`stages`, see the module docs), or those it feeds through rings of
    /// shared-memory stages (`super::dot_rings`).
    pub fn staged_dots(&self, l: &Loop) -> Vec<(ValueId, MmaDot)> {
        l.body
            .iter()
            .filter_map(|s| match s {
                Stmt::Let { value, op: Op::Dot { .. } } => {
                    self.dot(*value).filter(|d| d.ring.is_some() || d.stages > 1).map(|d| (*value, d.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Whether the reduction of value `value` of kernel `k` over `dim` runs in registers
    /// (`mapping.register_reduce`): shuffles within groups of 32 lanes, then one partial per
    /// group through shared memory where there are several groups.
    pub(crate) fn reduces_in_registers(&self, k: &Kernel, mapping: Mapping, value: ValueId, dim: DimId) -> bool {
        matches!(self.values[value.0 as usize], RegLayout::Blocked | RegLayout::Runs(_))
            && mapping.register_reduce(&k.value(value).shape, dim).is_some()
    }

    /// The shapes of the kernel's warpgroup dots (`wgmma()`), each once, in the order of its
    /// dots: their columns, and whether A comes from fragments in registers. The printer
    /// defines one issuing helper per shape.
    pub(crate) fn wgmma_shapes(&self) -> Vec<(u32, bool)> {
        let mut out = Vec::new();
        for (_, d) in self.dots.iter().filter(|(_, d)| d.warpgroup) {
            if !out.contains(&(d.tile.cols, d.a_in_fragments)) {
                out.push((d.tile.cols, d.a_in_fragments));
            }
        }
        out
    }

    /// Whether load `v` is made by the staged dot that reads it.
    pub fn direct_load(&self, v: ValueId) -> bool {
        self.dots.iter().any(|(_, d)| (d.direct[0].is_some() && d.a == v) || (d.direct[1].is_some() && d.b == v))
    }
}

/// Decides the layout of every value and accumulator of `k` instantiated for `dtype`. The dot
/// of a warp-specialized loop (`ws`) takes the layout of `wgmma`'s accumulator: a warp per 16
/// rows, all the columns, which is `mma.sync`'s fragments with one warp across.
///
/// Where the kernel reduces a dot's tile over its columns (a row maximum or sum, as attention's
/// softmax does), or computes its dots with `wgmma()`, every dot gets warps that hold whole
/// rows, when the tiles allow it: the row
/// statistics then combine within warps and stay in the rows' registers (`super::rows`), and
/// the weights can feed the next dot from registers ([`MmaDot::a_in_fragments`]).
pub(crate) fn plan(k: &Kernel, dtype: DType, dialect: Dialect, ws: Option<&crate::plan::WarpSpecialized>) -> Plan {
    let p = plan_with(k, dtype, dialect, ws, false);
    // A `wgmma()` kernel's dots need warps that hold whole rows (warpgroup products).
    if (row_reductions(k, &p).is_empty() && !k.wgmma) || p.dots.iter().all(|(_, d)| d.tile.wn == 1) {
        return p;
    }
    let whole = plan_with(k, dtype, dialect, ws, true);
    if whole.dots.len() == p.dots.len() && whole.dots.iter().all(|(_, d)| d.tile.wn == 1) {
        whole
    } else {
        p
    }
}

/// The accumulator tiles that `k` reduces over their columns under plan `p`.
fn row_reductions(k: &Kernel, p: &Plan) -> Vec<MmaTile> {
    let mut lets = Vec::new();
    collect(&k.body, &mut lets, &mut Vec::new());
    lets.iter()
        .filter_map(|(id, op)| match op {
            Op::Reduce { value, dim, .. } => row_reduced_tile(k, p, *value, *dim, *id),
            _ => None,
        })
        .collect()
}

/// [`plan`], with every staged dot's warps holding whole rows when `whole_rows`.
fn plan_with(k: &Kernel, dtype: DType, dialect: Dialect, ws: Option<&crate::plan::WarpSpecialized>, whole_rows: bool) -> Plan {
    let mut p = Plan {
        values: vec![RegLayout::Blocked; k.values.len()],
        vars: vec![RegLayout::Blocked; k.vars.len()],
        dots: Vec::new(),
        ring_words: 0,
        async_copies: dialect == Dialect::Cuda,
        tensor_maps: Vec::new(),
        target: crate::plan::Target::older(k, dialect),
        unfitted_stages: Vec::new(),
        unit_rescales: Vec::new(),
    };
    let mut lets = Vec::new();
    let mut updates = Vec::new();
    collect(&k.body, &mut lets, &mut updates);
    let def = |v: ValueId| lets.iter().find(|(x, _)| *x == v).map(|(_, op)| *op);
    let isa = MatrixIsa::of(dialect, dtype);
    // The warps (wavefronts) of the ISA's lanes: `Fma` fragments are laid over 32-lane
    // groups on either dialect.
    let threads = dialect.warps(k.num_warps) * dialect.warp_size();
    let warps = threads >> isa.lane_bits();
    for (id, op) in &lets {
        if let Op::Dot { a, b, dim } = op {
            if let Some(w) = ws.filter(|w| w.dot == *id) {
                let tile =
                    MmaTile { isa: MatrixIsa::MmaSync, m: w.m, n: w.n, rows: w.rows, cols: w.cols, wm: 4 * w.roles.consumers, wn: 1 };
                let (ra, rb) = (w.operands[0].value, w.operands[1].value);
                let d = MmaDot { into: Some(w.acc), wgmma: true, ..MmaDot::new(tile, ra, rb, w.k, w.step) };
                p.values[id.0 as usize] = RegLayout::Mma(tile);
                p.dots.push((*id, d));
                continue;
            }
            if stageable(dtype, *a, &def) && stageable(dtype, *b, &def) {
                // `Fma` in pairs of columns where the tile has too few fragments of four.
                let narrow = isa.is_fma().then_some(MatrixIsa::Fma { cols: 2 });
                let found = geometry(k, isa, warps, *id, *a, *b, *dim, whole_rows)
                    .or_else(|| narrow.and_then(|isa| geometry(k, isa, warps, *id, *a, *b, *dim, whole_rows)));
                if let Some(d) = found {
                    p.values[id.0 as usize] = RegLayout::Mma(d.tile);
                    p.dots.push((*id, d));
                }
            }
        }
    }
    if p.dots.is_empty() {
        return p;
    }
    // Spread the accumulator layout forward until nothing changes. Layouts only ever turn from
    // blocked to mma, and each rule holds again once its inputs have turned, so this ends with
    // every rule satisfied. Values computed from indices alone (a causal mask) take the layout
    // of their readers afterwards, and do not decide it.
    let free = index_only(&lets);
    loop {
        let mut changed = false;
        for (id, op) in &lets {
            let shape = &k.value(*id).shape;
            let want = match op {
                Op::Var(var) => p.vars[var.0 as usize],
                // A cluster's sum of accumulator tiles (`cluster(k:N)`) stays in their layout.
                Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::MaskFill { .. } | Op::ClusterReduce { .. } if !free.contains(id) => {
                    // Operands of another shape are broadcast through shared memory whatever the
                    // layouts; the ones of the same shape must all be in one mma layout.
                    let same: Vec<RegLayout> = op
                        .operands()
                        .into_iter()
                        .filter(|o| same_layout(&k.value(*o).shape, shape) && !free.contains(o))
                        .map(|o| p.values[o.0 as usize])
                        .collect();
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
    // A value computed from indices alone is computed in the layout of its readers of its
    // shape, where they agree (its own broadcast operands are indices, which every layout
    // computes in place, `publishing`).
    for (id, _) in lets.iter().rev().filter(|(id, _)| free.contains(id)) {
        let shape = &k.value(*id).shape;
        let readers: Vec<RegLayout> = lets
            .iter()
            .filter(|(_, op)| op.operands().contains(id))
            .map(|(r, _)| (*r, k.value(*r).shape.clone()))
            .filter(|(_, rs)| same_layout(rs, shape))
            .map(|(r, _)| p.values[r.0 as usize])
            .collect();
        if let l @ RegLayout::Mma(_) = common(&readers) {
            p.values[id.0 as usize] = l;
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
    let values = p.values.clone();
    for (_, d) in &mut p.dots {
        d.a_in_fragments = fragments_fit(d, values[d.a.0 as usize]);
    }
    if k.wgmma {
        for (_, d) in &mut p.dots {
            d.warpgroup = warpgroup_fits(d);
        }
    }
    super::pipelines::pipeline(&k.body, &mut p);
    super::dot_rings::plan_rings(k, &k.body, &mut p);
    // A warpgroup dot reads its operands from a ring, swizzled as `wgmma` reads them, and
    // stops its products at the bound of its contraction.
    for (_, d) in &mut p.dots {
        let swizzled = (0..2).all(|i| d.direct[i].is_none() || d.swizzled(i));
        d.warpgroup &= d.ring.is_some() && swizzled;
        if d.warpgroup {
            d.reach = k.bound(d.k).map_or(d.depth, |n| d.depth.min((n as u32).next_multiple_of(16)));
        }
    }
    p
}

/// Whether dot `d` of a `wgmma()` kernel can be a warpgroup product ([`MmaDot::warpgroup`]):
/// a tensor-core dot whose warps each hold 16 whole rows, in warpgroups of four (64 rows each),
/// of at most 256 columns (`m64nNk16`, N a multiple of 8); `b` copied by the dot, `a` copied
/// too or read from fragments; every copied operand in lines of whole 16-byte units, staged in
/// whole 128-byte swizzle atoms (64 elements, [`MmaDot::fits_atoms`]). The rings then give it
/// its buffers (`super::dot_rings`).
pub(crate) fn warpgroup_fits(d: &MmaDot) -> bool {
    warpgroup_misfit(d).is_none()
}

/// Why dot `d` cannot be a warpgroup product (see [`warpgroup_fits`]), as the error of a
/// `wgmma()` kernel says it; `None` where it can, though the rings may still not serve it
/// ([`RINGS_MISFIT`]).
pub(crate) fn warpgroup_misfit(d: &MmaDot) -> Option<String> {
    let t = d.tile;
    if t.isa != MatrixIsa::MmaSync || d.wgmma {
        return Some("its element type has no wgmma here (f16 and bf16 have)".into());
    }
    if t.wn != 1 {
        return Some(format!("its {} x {} tile is not split over its rows alone by its warps", t.rows, t.cols));
    }
    if t.rows != 16 * t.wm || !t.wm.is_multiple_of(4) {
        return Some(format!("its {} rows are not 64 per warpgroup of 4 warps ({} warps over them)", t.rows, t.wm));
    }
    if !t.cols.is_multiple_of(8) || t.cols > 256 {
        return Some(format!("its {} columns are not a multiple of 8 up to 256", t.cols));
    }
    let copied = d.direct[1].is_some() && (d.direct[0].is_some() || d.a_in_fragments);
    if !copied || (0..2).any(|i| d.direct[i].is_some() && !d.fits_atoms(i)) {
        return Some(RINGS_MISFIT.into());
    }
    None
}

/// Why a dot that could be a warpgroup product is not one: its loop's rings do not feed it.
pub(crate) const RINGS_MISFIT: &str = "its operands are not copied through the rings of a reduction loop with num_stages(2) or more that does more than this dot (a loop of the dot alone, a matmul's, is warp_specialize()'s), or its staged lines are not whole 16-byte units";

/// Whether operand `a` of dot `d`, in `layout`, is held as `d`'s warps want their A fragments
/// (see [`MmaDot::a_in_fragments`]): `mma.sync` accumulator fragments over the dot's rows and
/// its whole contraction, the warps of both along the rows alone and alike.
fn fragments_fit(d: &MmaDot, layout: RegLayout) -> bool {
    let RegLayout::Mma(s) = layout else { return false };
    let t = d.tile;
    t.isa == MatrixIsa::MmaSync
        && s.isa == MatrixIsa::MmaSync
        && !d.wgmma
        && d.direct[0].is_none()
        && (t.wn, s.wn) == (1, 1)
        && (s.m, s.rows, s.wm) == (t.m, t.rows, t.wm)
        && (s.n, s.cols) == (d.k, d.depth)
}

/// The element-wise values of `lets` computed from indices alone (and constants), at any depth:
/// the same in every layout, they need not be computed in any one.
fn index_only(lets: &[(ValueId, &Op)]) -> std::collections::HashSet<ValueId> {
    let mut free = std::collections::HashSet::new();
    for (id, op) in lets {
        let pure = match op {
            Op::Index(_) | Op::Const(_) => true,
            Op::Unary(..) | Op::Binary(..) | Op::Select(..) => op.operands().iter().all(|o| free.contains(o)),
            _ => false,
        };
        if pure {
            free.insert(*id);
        }
    }
    free
}

/// The one mma layout all of `ls` share, or blocked (also when `ls` is empty).
fn common(ls: &[RegLayout]) -> RegLayout {
    match ls.first() {
        Some(l @ RegLayout::Mma(_)) if ls.iter().all(|x| x == l) => *l,
        _ => RegLayout::Blocked,
    }
}

pub(crate) fn collect<'a>(stmts: &'a [Stmt], lets: &mut Vec<(ValueId, &'a Op)>, updates: &mut Vec<(VarId, ValueId)>) {
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
/// reduces a tile of that layout over its columns to its rows (printed by the GPU emitter, `mma_row_reduce`).
pub(crate) fn row_reduced_tile(k: &Kernel, plan: &Plan, value: ValueId, dim: DimId, result: ValueId) -> Option<MmaTile> {
    let RegLayout::Mma(t) = plan.values[value.0 as usize] else { return None };
    let big: Vec<DimId> = k.value(result).shape.0.iter().filter(|(_, n)| *n > 1).map(|(d, _)| *d).collect();
    (dim == t.n && big == [t.m] && k.value(result).shape.extent(t.m) == Some(t.rows)).then_some(t)
}

/// Whether operand `v` may be staged as `dtype` values. A load of `dtype` data loses
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
    computed_from(k, v, var, &|_| false, def)
}

/// Whether `v` is computed element-wise (operands of other shapes, broadcast, aside) from reads
/// of accumulator `var` and values for which `given` holds, or is itself such a value.
pub(crate) fn computed_from<'a>(
    k: &Kernel,
    v: ValueId,
    var: VarId,
    given: &impl Fn(ValueId) -> bool,
    def: &impl Fn(ValueId) -> Option<&'a Op>,
) -> bool {
    if given(v) {
        return true;
    }
    match def(v) {
        Some(Op::Var(x)) => *x == var,
        Some(op) => elementwise_operands(k, v, op)
            .is_some_and(|same| !same.is_empty() && same.iter().all(|o| computed_from(k, *o, var, given, def))),
        None => false,
    }
}

/// Where `op`, defining value `v`, is element-wise (unary, binary, select, mask): its operands
/// of `v`'s shape, whose lanes `v`'s read one to one (the others are broadcast). None for any
/// other operation.
pub(crate) fn elementwise_operands(k: &Kernel, v: ValueId, op: &Op) -> Option<Vec<ValueId>> {
    match op {
        Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::MaskFill { .. } => {
            let shape = &k.value(v).shape;
            Some(op.operands().into_iter().filter(|o| k.value(*o).shape == *shape).collect())
        }
        _ => None,
    }
}

/// The fragment form of `id = dot a, b over k` on `isa` with `warps` warps, when the tiles allow
/// it: the result has two dimensions of extent above 1, [M, N]; one operand spans exactly
/// [M, K] and the other [N, K] (dimensions of extent 1 aside); K is a multiple of the ISA's
/// step; and some arrangement of the warps gives each one whole fragments. Among those
/// arrangements (with `whole_rows`, those with one warp along the columns), the one whose warps
/// load the fewest operand rows per step.
#[allow(clippy::too_many_arguments)]
fn geometry(k: &Kernel, isa: MatrixIsa, warps: u32, id: ValueId, a: ValueId, b: ValueId, dim: DimId, whole_rows: bool) -> Option<MmaDot> {
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
    if depth % isa.k_step() != 0 {
        return None;
    }
    let (fr, fc) = isa.fragment();
    let (wm, wn) = (1..=warps)
        .filter(|wm| warps.is_multiple_of(*wm))
        .map(|wm| (wm, warps / wm))
        .filter(|(wm, wn)| rows % (fr * wm) == 0 && cols % (fc * wn) == 0 && (!whole_rows || *wn == 1))
        .min_by_key(|(wm, wn)| (rows / wm + cols / wn, *wn))?;
    let tile = MmaTile { isa, m, n, rows, cols, wm, wn };
    Some(MmaDot::new(tile, ra, rb, dim, depth))
}

/// Whether tiles of shapes `a` and `b` put each element in the same register of the same thread:
/// the same dimensions and extents once dimensions of extent 1 (which do not change the
/// row-major index) are left out. Such an operand is read from the reader's own registers.
pub(crate) fn same_layout(a: &Shape, b: &Shape) -> bool {
    let wide = |s: &Shape| s.0.iter().filter(|(_, n)| *n > 1).copied().collect::<Vec<_>>();
    wide(a) == wide(b)
}
