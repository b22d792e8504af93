//! Emitters: kernel IR to source text. They only print; every decision was made by the lowering.

pub mod c;
pub mod expr;
pub mod gpu;

use dt_core::kir::Kernel;
use dt_core::DType;
use std::fmt;

/// A kernel the emitter cannot print (an error, never a panic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmitError(pub String);

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EmitError {}

/// The symbol of kernel `k` instantiated for `dtype`.
pub fn symbol(k: &Kernel, dtype: DType) -> String {
    format!("dt_{}_{}", k.name, dtype.name())
}

/// Every kernel of `kernels` for each of its element types, with its symbol: what a file of them
/// all (`emit_file`) is printed from.
pub fn items(kernels: &[Kernel]) -> Vec<(&Kernel, DType, String)> {
    kernels.iter().flat_map(|k| k.dtypes.iter().map(move |d| (k, *d, symbol(k, *d)))).collect()
}

/// Checks that a kernel fits the argument block of [`crate::abi`].
pub fn check_abi(k: &dt_core::signature::Signature) -> Result<(), EmitError> {
    use crate::abi::*;
    let too_many = |what: &str, n: usize, max: usize| EmitError(format!("kernel `{}` has {n} {what}; at most {max} are supported", k.name));
    if k.inputs.len() > MAX_INPUTS {
        return Err(too_many("inputs", k.inputs.len(), MAX_INPUTS));
    }
    if k.scalars.len() > MAX_SCALARS {
        return Err(too_many("scalar inputs", k.scalars.len(), MAX_SCALARS));
    }
    if k.dims.len() > MAX_DIMS {
        return Err(too_many("dimensions", k.dims.len(), MAX_DIMS));
    }
    if let Some(t) = k.inputs.iter().chain([&k.output]).find(|t| t.dims.len() > MAX_RANK) {
        return Err(too_many(&format!("axes in `{}`", t.name), t.dims.len(), MAX_RANK));
    }
    Ok(())
}

/// Refuses a clustered kernel (`cluster(d:N)`) for a target without thread-block clusters:
/// only CUDA GPUs of sm_90 and newer have them.
pub fn check_no_cluster(k: &Kernel, target: &str) -> Result<(), EmitError> {
    match k.grid.cluster {
        Some((d, n)) => Err(EmitError(format!(
            "kernel `{}` is clustered (`cluster({}:{n})`), and {target} has no thread-block clusters (CUDA sm_90 and newer have)",
            k.name,
            k.dim_name(d)
        ))),
        None => Ok(()),
    }
}

/// Refuses a kernel built for CUDA only (`requires(cuda)`, `requires(sm_90)`) for another
/// target.
pub fn check_required_target(k: &Kernel, target: &str) -> Result<(), EmitError> {
    match k.requires {
        Some(r) => {
            Err(EmitError(format!("kernel `{}` is built for {} only (`requires({})`), not for {target}", k.name, r.name(), r.name())))
        }
        None => Ok(()),
    }
}

/// Refuses a warp-specialized kernel (`warp_specialize()`), or one whose dots run as `wgmma`
/// (`wgmma()`), for a target without tensor-memory copies and `wgmma`: only CUDA GPUs of sm_90
/// have them.
pub fn check_not_hopper_only(k: &Kernel, target: &str) -> Result<(), EmitError> {
    let how = if k.warp_specialize {
        "is warp-specialized (`warp_specialize()`)"
    } else if k.wgmma {
        "computes its dots with wgmma (`wgmma()`)"
    } else {
        return Ok(());
    };
    Err(EmitError(format!("kernel `{}` {how}, and {target} has no tensor-memory copies and wgmma (CUDA sm_90a has)", k.name)))
}

/// C statements that turn the program id `pid` into block indices `b<slot>` for every blocked
/// dimension, by the grid's one decoding rule ([`Grid::programs_under`]): each coordinate, outermost
/// first, is the quotient of what is left of `pid` by the programs under one of its values.
/// Shared by every C-family emitter.
///
/// `index` is the C type of the division: a GPU grid has fewer than 2^31 programs, so there
/// 32-bit `unsigned` division is exact and spares the 64-bit division routine; the CPU's program
/// loop uses `long long`. `past_grid`, where a grid may have more blocks than programs (HIP's
/// rows of blocks), is the statement that skips a program past the last. Only a multicast
/// dimension has blocks past the end (rounded up to whole clusters): there `idle`, in a
/// multicast kernel of bulk-copy rings (not warp-specialized), is the flag such a program sets,
/// taking its cluster's last block instead of skipping it, since the cluster's copies need it;
/// without `idle`, `skip` is its statement (`continue;` in a loop over programs).
///
/// [`Grid::programs_under`]: dt_core::kir::Grid::programs_under
pub fn program_coords(k: &Kernel, skip: &str, index: &str, past_grid: Option<&str>, idle: Option<&str>) -> Vec<String> {
    use dt_core::schedule::MapEntry;
    let counts = order_counts(k);
    // A grid of one program (nothing blocked) divides nothing; what is left of `pid` then
    // matters only where a grid may have more blocks than programs.
    let mut out: Vec<String> = past_grid.map(str::to_string).into_iter().collect();
    if counts.is_empty() {
        out.push("(void)pid;".to_string());
        return out;
    }
    out.push(format!("{index} rest = ({index})pid;"));
    let last = counts.len() - 1;
    for i in 0..last {
        let under = program_factors(k, &counts, Some(i), index);
        out.push(format!("const {index} under{i} = {under}; /* programs under one value of entry {i} */"));
        out.push(format!("const long long g{i} = rest / under{i}; rest %= under{i};"));
    }
    out.push(format!("const long long g{last} = rest;"));
    for (d, _) in &k.grid.blocked {
        let mut parts = Vec::new();
        for (i, m) in k.grid.order.iter().enumerate() {
            match m {
                // Last first (pass `heaviest_first`): block n - 1 - g.
                MapEntry::Whole(x) if x == d && k.grid.descending.contains(x) => {
                    parts.push(format!("((long long)({}) - 1 - g{i})", counts[i]))
                }
                MapEntry::Whole(x) if x == d => parts.push(format!("g{i}")),
                MapEntry::Outer { dim, factor } if dim == d => parts.push(format!("g{i} * {factor}")),
                MapEntry::Inner { dim, .. } if dim == d => parts.push(format!("g{i}")),
                _ => {}
            }
        }
        let slot = k.dim_slot(*d);
        let (g, count) = (parts.join(" + "), block_count(k, *d));
        if k.grid.multicast.is_none_or(|(m, _)| m != *d) {
            out.push(format!("const long long b{slot} = {g}; /* block index along {} */", k.dim_name(*d)));
            continue;
        }
        match idle {
            Some(flag) => {
                out.push(format!(
                    "const bool {flag} = {g} >= {count}; /* past the end: copies its slices for the cluster, stores nothing */"
                ));
                out.push(format!("const long long b{slot} = {flag} ? {count} - 1 : {g}; /* block index along {} */", k.dim_name(*d)));
            }
            None => {
                out.push(format!("const long long b{slot} = {g}; /* block index along {} */", k.dim_name(*d)));
                out.push(format!("if (b{slot} >= {count}) {skip} /* past the end of the multicast's last cluster */"));
            }
        }
    }
    out
}

/// The programs under one value of order entry `entry` (the whole grid, for `None`) as a C
/// product in type `index` ([`Grid::programs_under`]), over the entries' counts `counts` and the
/// coordinates `g<i>` decoded before it.
///
/// [`Grid::programs_under`]: dt_core::kir::Grid::programs_under
fn program_factors(k: &Kernel, counts: &[String], entry: Option<usize>, index: &str) -> String {
    use dt_core::kir::ProgramFactor;
    let factors: Vec<String> = k
        .grid
        .programs_under(entry)
        .iter()
        .map(|f| match *f {
            ProgramFactor::Entry(j) => format!("({index})({})", counts[j]),
            ProgramFactor::Blocks(d) => format!("({index})({})", block_count(k, d)),
            ProgramFactor::Group { dim, factor, outer } => {
                format!("({index})dt_min_ll({factor}, {} - {factor} * g{outer})", block_count(k, dim))
            }
        })
        .collect();
    if factors.is_empty() {
        format!("({index})1")
    } else {
        factors.join(" * ")
    }
}

/// The flag of a multicast's program past the end, which computes nothing it keeps.
pub(crate) const IDLE: &str = "dt_idle";

/// The blocks of blocked dimension `d`, as a C expression over its size variable `s<slot>`.
fn block_count(k: &Kernel, d: dt_core::algo::DimId) -> String {
    format!("dt_cdiv(s{}, {})", k.dim_slot(d), k.grid.block_extent(d).unwrap_or(1))
}

/// The programs along each entry of the grid's order, as C expressions ([`Grid::counts`] in C):
/// a clustered dimension's programs, a multicast dimension's blocks rounded up to whole
/// clusters (see [`dt_core::kir::Grid::multicast`]), the groups of a split, its factor.
///
/// [`Grid::counts`]: dt_core::kir::Grid::counts
fn order_counts(k: &Kernel) -> Vec<String> {
    use dt_core::schedule::MapEntry;
    k.grid
        .order
        .iter()
        .map(|m| match m {
            MapEntry::Whole(d) => match (k.grid.cluster_size(*d), k.grid.multicast) {
                (Some(n), _) => n.to_string(),
                (None, Some((m, n))) if m == *d => format!("dt_cdiv({}, {n}) * {n}", block_count(k, *d)),
                (None, _) => block_count(k, *d),
            },
            MapEntry::Outer { dim, factor } => format!("dt_cdiv({}, {factor})", block_count(k, *dim)),
            MapEntry::Inner { factor, .. } => factor.to_string(),
        })
        .collect()
}

/// The number of programs, as a C expression over the size variables `s<slot>`
/// ([`dt_core::kir::Grid::programs`]).
pub fn program_count(k: &Kernel) -> String {
    program_factors(k, &order_counts(k), None, "long long")
}

/// The lane variables of a loop over the elements of a tile: the C variable holding the lane
/// along each dimension.
pub(crate) struct Lanes(pub Vec<(dt_core::algo::DimId, String)>);

impl Lanes {
    /// The flat index into a tile of shape `s` at these lanes (dimensions `s` lacks broadcast).
    pub fn index(&self, s: &dt_core::kir::Shape) -> String {
        let terms: Vec<String> = self
            .0
            .iter()
            .filter(|(d, _)| s.extent(*d).is_some())
            .map(|(d, l)| match s.stride(*d) {
                1 => l.clone(),
                st => format!("{l} * {st}"),
            })
            .collect();
        if terms.is_empty() {
            "0".into()
        } else {
            terms.join(" + ")
        }
    }

    /// The same lanes with the lane along `d` advanced by `by`.
    pub fn shifted(&self, d: dt_core::algo::DimId, by: usize) -> Lanes {
        if by == 0 {
            Lanes(self.0.clone())
        } else {
            self.shifted_by(d, &by.to_string())
        }
    }

    /// The same lanes with the lane along `d` advanced by the C expression `by`.
    pub fn shifted_by(&self, d: dt_core::algo::DimId, by: &str) -> Lanes {
        Lanes(self.0.iter().map(|(x, l)| (*x, if *x == d { format!("({l} + {by})") } else { l.clone() })).collect())
    }

    pub fn lane(&self, d: dt_core::algo::DimId) -> &str {
        self.0.iter().find(|(x, _)| *x == d).map_or("0", |(_, l)| l.as_str())
    }
}

/// Where a tile over `d` sits when no loop over `d` encloses it: the start of this program's
/// block of `d` where `d` is blocked, else 0 (see [`dt_core::kir`]).
pub(crate) fn start_offset(k: &Kernel, d: dt_core::algo::DimId) -> String {
    match k.grid.block_extent(d) {
        Some(b) => format!("(b{} * {b})", k.dim_slot(d)),
        None => "0".into(),
    }
}

/// How many lanes of this program's block of blocked dimension `d` lie inside it, as a float
/// expression ([`dt_core::kir::Op::BlockLanes`]).
pub(crate) fn block_lanes(k: &Kernel, d: dt_core::algo::DimId) -> String {
    let b = k.grid.block_extent(d).expect("lanes of a blocked dimension");
    let slot = k.dim_slot(d);
    format!("(float)dt_max_ll(0, dt_min_ll({b}, s{slot} - b{slot} * {b}))")
}

/// The `for` line of a kernel-IR loop whose offset variable is `var`: a blocked dimension loops
/// over this program's block, any other over the whole dimension. Shared by every C emitter.
pub(crate) fn loop_header(k: &Kernel, l: &dt_core::kir::Loop, var: &str) -> String {
    let steps = LoopSteps::of(k, l);
    let advance = if steps.backward { "-=" } else { "+=" };
    format!("for (long long {var} = {}; {}; {var} {advance} {}) {{", steps.first(), steps.in_range(var), l.step)
}

/// Whether loop `l` runs over this program's block of a dimension no wider than its step: at
/// most one step (exactly one where the block starts inside the dimension).
pub(crate) fn at_most_one_step(k: &Kernel, l: &dt_core::kir::Loop) -> bool {
    l.kind == dt_core::kir::LoopKind::Block && k.grid.block_extent(l.dim).is_some_and(|b| b <= l.step)
}

/// The line that opens loop `l` as a block, its offset variable `var` a constant, where the loop
/// runs exactly once: over this program's block of a dimension no wider than its step, outside
/// a cluster (every other program's block starts inside its dimension, [`program_coords`]; a
/// cluster's programs run past the end too). Closed by `}` as the loop would be.
pub(crate) fn single_step_header(k: &Kernel, l: &dt_core::kir::Loop, var: &str) -> Option<String> {
    let once = at_most_one_step(k, l) && l.steps == dt_core::kir::Steps::All && k.grid.cluster_size(l.dim).is_none();
    once.then(|| format!("{{ const long long {var} = {}; /* the block's one step */", LoopSteps::of(k, l).first()))
}

/// How the offset variable of a kernel-IR loop runs, as C expressions: a blocked dimension over
/// this program's block, any other over the whole dimension; up from the start of that range by
/// the step, or (a `backward` loop) down from the offset of its last step to the start.
pub(crate) struct LoopSteps {
    /// The first offset of the range.
    start: String,
    /// The end of the range.
    end: String,
    /// The offset of the range's last step.
    last: String,
    step: u32,
    backward: bool,
}

impl LoopSteps {
    pub(crate) fn of(k: &Kernel, l: &dt_core::kir::Loop) -> Self {
        Self::over(k, l, l.steps)
    }

    /// The offsets of loop `l` as if it ran `steps` of its range.
    pub(crate) fn over(k: &Kernel, l: &dt_core::kir::Loop, steps: dt_core::kir::Steps) -> Self {
        use dt_core::kir::{LoopKind, Steps};
        let slot = k.dim_slot(l.dim);
        let (size, step) = (format!("s{slot}"), l.step);
        let (start, end, last) = match l.kind {
            LoopKind::Block => {
                let b = k.grid.block_extent(l.dim).unwrap_or(1);
                let start = format!("b{slot} * {b}");
                // The block's full steps end where the dimension's do, within the block.
                let full = format!("dt_max_ll({start}, dt_min_ll({start} + {b}, ({size} / {step}) * {step}))");
                let end = format!("dt_min_ll({start} + {b}, {size})");
                let (start, end) = match steps {
                    Steps::All => (start, end),
                    Steps::Full => (start, full),
                    // At most one step: its direction does not matter.
                    Steps::Partial => return LoopSteps { start: full.clone(), end, last: full, step, backward: false },
                };
                let last = format!("{start} + (dt_cdiv({end} - ({start}), {step}) - 1) * {step}");
                (start, end, last)
            }
            LoopKind::Whole | LoopKind::Reduction => {
                let full = format!("({size} / {step}) * {step}");
                // Up to the end of this program's block of `until`'s dimension (`Loop::until`).
                let size = match l.until {
                    Some(d) => {
                        let (b, by) = (k.grid.block_extent(d).unwrap_or(1), k.dim_slot(d));
                        format!("dt_min_ll({size}, b{by} * {b} + {b})")
                    }
                    None => size,
                };
                match steps {
                    Steps::All => ("0".into(), size.clone(), format!("(dt_cdiv({size}, {step}) - 1) * {step}")),
                    Steps::Full => ("0".into(), full.clone(), format!("{full} - {step}")),
                    // At most one step: its direction does not matter.
                    Steps::Partial => return LoopSteps { start: full.clone(), end: size, last: full, step, backward: false },
                }
            }
        };
        LoopSteps { start, end, last, step, backward: l.backward }
    }

    /// The end of the loop's range (its offsets stay below it).
    pub(crate) fn end(&self) -> &str {
        &self.end
    }

    /// The offset of the first iteration.
    pub(crate) fn first(&self) -> String {
        if self.backward {
            self.last.clone()
        } else {
            self.start.clone()
        }
    }

    /// Whether offset `var` is an iteration of the loop.
    pub(crate) fn in_range(&self, var: &str) -> String {
        if self.backward {
            format!("{var} >= {}", self.start)
        } else {
            format!("{var} < {}", self.end)
        }
    }

    /// The offset of the iteration after the one at `var`.
    pub(crate) fn next(&self, var: &str) -> String {
        let sign = if self.backward { '-' } else { '+' };
        format!("{var} {sign} {}", self.step)
    }
}

/// C type of index arithmetic in the CPU's C: 64-bit.
pub(crate) const CPU_INDEX: &str = "long long";
/// C type of bounds comparisons and element offsets on a GPU: 32-bit unsigned, half the
/// instructions of 64-bit arithmetic. A tensor has at most 2^31 elements
/// ([`dt_core::tensor::MAX_ELEMENTS`]), so every size, and every offset plus lane below a size
/// or up to a tile past it, is below 2^32; and every element a kernel reads or writes lies in a
/// buffer of at most 2^31 elements (the library checks that a view reaches no element past its
/// data), so its offset, the sum over axes of index times stride, is too. Offsets of lanes past
/// the end may wrap; they are never dereferenced.
pub(crate) const GPU_INDEX: &str = "unsigned";

/// The validity condition of lane `lane` past offset `offset` along a dimension of size
/// variable `size`, compared in C type `index`.
pub(crate) fn in_bounds(index: &str, offset: &str, lane: &str, size: &str) -> String {
    if index == CPU_INDEX {
        format!("{offset} + {lane} < {size}")
    } else {
        format!("({index})({offset} + {lane}) < ({index}){size}")
    }
}

/// The validity condition [`masked_address`] gives an access that needs no check.
pub(crate) const ALWAYS_VALID: &str = "1";

/// The validity condition and the element offset of a tensor access at the current lanes, both
/// in C type `index`: axis `a` is indexed along `dims[a]` at `offset(dim) + lane`, times
/// `stride(a)` (which the GPU emitter gives as `index` too). Dimensions in `inside` are known to
/// hold every lane (the full steps of a loop) and are not checked.
pub(crate) fn masked_address(
    index: &str,
    k: &Kernel,
    dims: &[dt_core::algo::DimId],
    lanes: &Lanes,
    offset: impl Fn(dt_core::algo::DimId) -> String,
    stride: impl Fn(usize) -> String,
    inside: &[dt_core::algo::DimId],
) -> (String, String) {
    let conds: Vec<String> = dims
        .iter()
        .filter(|d| !inside.contains(d))
        .map(|d| in_bounds(index, &offset(*d), lanes.lane(*d), &format!("s{}", k.dim_slot(*d))))
        .collect();
    let addr: Vec<String> = dims
        .iter()
        .enumerate()
        .map(|(a, d)| {
            if index == CPU_INDEX {
                format!("({} + {}) * {}", offset(*d), lanes.lane(*d), stride(a))
            } else {
                format!("({index})({} + {}) * {}", offset(*d), lanes.lane(*d), stride(a))
            }
        })
        .collect();
    let cond = if conds.is_empty() { ALWAYS_VALID.to_string() } else { conds.join(" && ") };
    let addr = if addr.is_empty() { "0".to_string() } else { addr.join(" + ") };
    (cond, addr)
}
