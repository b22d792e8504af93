//! Random valid schedules for a spec: the raw material of schedule search, and of the property
//! test that every schedule keeps the meaning of its algorithm.
//!
//! A schedule is produced as source text (`f.block(...); ...`) appended to the spec's algorithm,
//! so that it goes through the same checker as a hand-written one and a failing case can be
//! printed as a spec that reproduces it.

use crate::algo::{DimId, FuncId, Program};
use crate::ast::{Item, SchedArg};
use crate::blocks::Expanded;
use crate::check::expanded_reads;
use crate::diag::Diagnostic;
use crate::schedule::MapEntry;
use crate::tensor::{Args, Tensor};
use crate::DType;

/// A small deterministic random source (xorshift64*), so a schedule is reproducible from its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Limits on the schedules drawn.
#[derive(Clone, Debug)]
pub struct Options {
    /// Sizes the schedule must accept: the bound given to `d:0` tiles of unblocked dimensions.
    pub max_size: u64,
    /// Largest tile (elements) of any value.
    pub max_tile_elements: usize,
    /// Largest thread-block cluster the target runs (0: none, as on the CPU and HIP): below 2
    /// no `cluster` is drawn.
    pub max_cluster: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options { max_size: 300, max_tile_elements: 1 << 14, max_cluster: 0 }
    }
}

/// The spec without its schedule statements (declarations and definitions, one per line), and
/// without the classes of whole tiles (a schedule drawn for it has its own).
pub fn algorithm_text(src: &str) -> Result<String, Vec<Diagnostic>> {
    items_text(src, |e| e.class.is_none() && !matches!(e.item, Item::Sched { .. }))
}

/// The statements of spec `src` that `keep` accepts, one per line, in their order.
/// Schedule blocks are expanded first (`crate::blocks`) and the classes of whole tiles added
/// (`crate::whole_classes`): the result names each class's copies.
fn items_text(src: &str, keep: impl Fn(&Expanded) -> bool) -> Result<String, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let file = crate::parser::parse(src, &mut diags);
    let expanded = crate::blocks::expand(&file, &mut diags);
    if !diags.is_empty() {
        return Err(diags);
    }
    let (expanded, _) = crate::whole_classes::with_classes(expanded, &mut Vec::new());
    let mut out = String::new();
    for e in expanded.iter().filter(|e| keep(e)) {
        out += &crate::blocks::text_of(src, e);
        out.push('\n');
    }
    Ok(out)
}

/// The spec `src` reduced to kernel `kernel`: its algorithm (every declaration and definition,
/// those of the classes of whole tiles only where `kernel` is one) with the schedule statements
/// of `kernel` and of the Funcs placed in it (`g.fuse_at(kernel, ..)`), the other kernels'
/// statements left out, so that their Funcs are plain definitions.
pub fn kernel_spec(src: &str, kernel: &str) -> Result<String, Vec<Diagnostic>> {
    items_text(src, |e| match &e.item {
        Item::Sched { func, prim, args, .. } => {
            func.name == kernel || (prim.name == "fuse_at" && matches!(args.first(), Some(SchedArg::Name(c)) if c.name == kernel))
        }
        _ => e.class.as_ref().is_none_or(|c| c == kernel),
    })
}

/// A schedule near the spec's own: `spec` (from [`kernel_spec`]) with some of the numbers of
/// `kernel`'s `block`, `tensorize`, `map` (its groups), `num_warps`, `num_stages` and
/// `max_registers` statements halved or doubled (at least one; a whole tile, `d:0`, stays
/// whole; a tile as wide as its block follows the block, a narrower one stays within it), every
/// other statement as written. A warp-specialized kernel's numbers move together
/// ([`WarpSpecialized`]; its `persistent()` is sometimes flipped), and so do a cluster's programs
/// and its dimension's block ([`Cluster`]). It may not check (fewer warps than a tile needs,
/// say): the checker says.
pub fn nearby_spec(spec: &str, kernel: &str, rng: &mut Rng) -> Result<String, Vec<Diagnostic>> {
    // A change can cancel out (a tile that follows its block): draw again, a few times.
    for _ in 0..16 {
        let drawn = nearby_once(spec, kernel, rng)?;
        if drawn != spec {
            return Ok(drawn);
        }
    }
    nearby_once(spec, kernel, rng)
}

fn nearby_once(spec: &str, kernel: &str, rng: &mut Rng) -> Result<String, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let file = crate::parser::parse(spec, &mut diags);
    if !diags.is_empty() {
        return Err(diags);
    }
    const NEAR: &[&str] = &["block", "tensorize", "map", "num_warps", "num_stages", "max_registers"];
    let ws = WarpSpecialized::of(&file, kernel);
    let cluster = Cluster::of(&file, kernel);
    let numbers = |item: &Item| match item {
        Item::Sched { func, prim, args, .. } if func.name == kernel && NEAR.contains(&prim.name.as_str()) => args
            .iter()
            .filter(|a| matches!(a, SchedArg::Number(v, _) | SchedArg::Extent(_, v, _) | SchedArg::Split { factor: v, .. } if *v >= 1.0))
            .filter(|a| ws.as_ref().is_none_or(|w| w.draws(&prim.name, a)))
            .filter(|a| cluster.as_ref().is_none_or(|c| !c.sets(&prim.name, a)))
            .count(),
        _ => 0,
    };
    // The cluster, where there is one, is drawn as one more number (the last).
    let total: usize = file.items.iter().map(numbers).sum::<usize>() + usize::from(cluster.is_some());
    if total == 0 {
        return Ok(spec.to_string());
    }
    // Which numbers change: each with some chance, and one for certain.
    let certain = rng.below(total as u64) as usize;
    // The cluster's dimension with its programs and block, moved or as written.
    let cluster_edit = cluster.as_ref().map(|c| {
        let moved = if certain == total - 1 || rng.chance(25) { c.moved(rng) } else { None };
        let (programs, block) = moved.unwrap_or((c.programs, c.block));
        (c.dim.as_str(), programs, block)
    });
    let is_cluster_statement = |func: &str, prim: &str| func == kernel && cluster.is_some() && (prim == "cluster" || prim == "block");
    let mut index = 0;
    let mut step = |v: f64, rng: &mut Rng| {
        let change = index == certain || rng.chance(25);
        index += 1;
        if !change || v < 1.0 {
            v
        } else if v >= 2.0 && rng.chance(50) {
            (v / 2.0).floor()
        } else {
            v * 2.0
        }
    };
    let is_kernel_statement = |item: &Item, names: &[&str]| matches!(item, Item::Sched { func, prim, .. } if func.name == kernel && names.contains(&prim.name.as_str()));
    // A multicast keeps its programs and the grid order that makes their blocks adjacent, and
    // is never persistent.
    let multicast = file.items.iter().any(|i| is_kernel_statement(i, &["multicast"]));
    // A warp-specialized kernel whose contraction no cluster splits is sometimes drawn with
    // `persistent()` flipped: left out where the spec has it, added before `compile()` where not.
    let flip_persistent = ws.is_some() && cluster.is_none() && !multicast && rng.chance(15);
    let persistent = file.items.iter().any(|i| is_kernel_statement(i, &["persistent"]));
    // A tile as wide as its block follows the block; a narrower one stays within it.
    let mut blocks: Vec<(String, f64, f64)> = Vec::new();
    let mut out = String::new();
    for item in &file.items {
        if flip_persistent && persistent && is_kernel_statement(item, &["persistent"]) {
            continue;
        }
        if flip_persistent && !persistent && is_kernel_statement(item, &["compile", "compile_to_kernel"]) {
            out += &format!("{kernel}.persistent();\n");
        }
        let span = match item {
            Item::Decl { span, .. } | Item::Def { span, .. } | Item::Sched { span, .. } | Item::Block { span, .. } => span,
        };
        match item {
            _ if multicast && is_kernel_statement(item, &["multicast", "map"]) => out += &spec[span.start as usize..span.end as usize],
            // A warp-specialized kernel's tile and warps follow its block, drawn or not.
            Item::Sched { func, prim, args, .. }
                if numbers(item) > 0
                    || (func.name == kernel && ws.is_some() && ["tensorize", "num_warps"].contains(&prim.name.as_str()))
                    || is_cluster_statement(&func.name, &prim.name) =>
            {
                // A warp-specialized block's rows are drawn first, whatever the order of its
                // arguments: the columns a swapped tile may have follow from them.
                let rows = match (&ws, prim.name.as_str()) {
                    (Some(w), "block") => args.iter().find_map(|a| match a {
                        SchedArg::Extent(d, v, _) if d.name == w.rows => Some(w.rows_of(step(*v, rng))),
                        _ => None,
                    }),
                    _ => None,
                };
                let text: Vec<String> = args
                    .iter()
                    .map(|a| match a {
                        // A cluster's programs, and its dimension's block, as the cluster's draw has them.
                        SchedArg::Extent(d, v, _)
                            if is_cluster_statement(&func.name, &prim.name) && cluster_edit.is_some_and(|(dim, ..)| d.name == dim) =>
                        {
                            let (_, programs, block) = cluster_edit.expect("matched");
                            if prim.name == "cluster" {
                                format!("{}:{programs}", d.name)
                            } else {
                                blocks.push((d.name.clone(), *v, block));
                                format!("{}:{block}", d.name)
                            }
                        }
                        // A warp-specialized kernel's warps follow its rows; its stages stay 2 or more.
                        SchedArg::Number(_, _) if prim.name == "num_warps" && ws.is_some() => {
                            let w = ws.as_ref().expect("matched");
                            let drawn = |dim: &str| blocks.iter().find(|(b, ..)| *b == dim).map_or(64.0, |b| b.2);
                            format!("{}", w.consumer_rows(drawn(&w.rows), drawn(&w.cols)) / 16.0)
                        }
                        SchedArg::Number(v, _) if prim.name == "num_stages" && ws.is_some() => {
                            let moved = step(*v, rng);
                            format!("{}", ws.as_ref().map_or(moved, |w| w.stages(*v, moved, &blocks)))
                        }
                        SchedArg::Number(v, _) => format!("{}", step(*v, rng)),
                        SchedArg::Extent(d, v, _) if prim.name == "block" => {
                            let new = match &ws {
                                Some(w) if d.name == w.rows => rows.expect("drawn above"),
                                Some(w) if d.name == w.cols => w.cols_of(step(*v, rng), rows),
                                Some(_) => *v,
                                None => step(*v, rng),
                            };
                            blocks.push((d.name.clone(), *v, new));
                            format!("{}:{new}", d.name)
                        }
                        SchedArg::Extent(d, v, _) if prim.name == "tensorize" => {
                            let tile = match blocks.iter().find(|(b, ..)| *b == d.name) {
                                // A warp-specialized tile is its block, its step along the contraction fixed.
                                Some((_, _, new)) if ws.as_ref().is_some_and(|w| d.name == w.rows || d.name == w.cols) => *new,
                                _ if ws.is_some() => *v,
                                Some((_, old, new)) if v == old => *new,
                                Some((_, _, new)) => step(*v, rng).min(*new),
                                None => step(*v, rng),
                            };
                            format!("{}:{tile}", d.name)
                        }
                        SchedArg::Extent(d, v, _) => format!("{}:{}", d.name, step(*v, rng)),
                        SchedArg::Split { dim, inner, factor, .. } => format!("{}:{}/{}", dim.name, inner.name, step(*factor, rng)),
                        other => spec[other.span().start as usize..other.span().end as usize].to_string(),
                    })
                    .collect();
                out += &format!("{}.{}({});", func.name, prim.name, text.join(", "));
            }
            _ => out += &spec[span.start as usize..span.end as usize],
        }
        out.push('\n');
    }
    Ok(out)
}

/// A kernel's `cluster(d:N)` and the extent its `block` gives `d`: a cluster's N programs cover
/// N blocks of `d` (the contraction, or a row, split over them: an implied bound), so
/// [`nearby_spec`] moves N and the block together, keeping the extent they cover.
struct Cluster {
    dim: String,
    programs: f64,
    block: f64,
}

impl Cluster {
    /// Kernel `kernel`'s cluster in `file`, where it has one and blocks its dimension.
    fn of(file: &crate::ast::File, kernel: &str) -> Option<Self> {
        let extent_of = |name: &str| {
            file.items.iter().find_map(|i| match i {
                Item::Sched { func, prim, args, .. } if func.name == kernel && prim.name == name => Some(args),
                _ => None,
            })
        };
        let (dim, programs) = match extent_of("cluster")?.first()? {
            SchedArg::Extent(d, v, _) => (d.name.clone(), *v),
            _ => return None,
        };
        let block = extent_of("block")?.iter().find_map(|a| match a {
            SchedArg::Extent(d, v, _) if d.name == dim => Some(*v),
            _ => None,
        })?;
        Some(Cluster { dim, programs, block })
    }

    /// Whether argument `a` of primitive `prim` is set by the cluster's draw (the block of its
    /// dimension) rather than drawn alone.
    fn sets(&self, prim: &str, a: &SchedArg) -> bool {
        prim == "block" && matches!(a, SchedArg::Extent(d, ..) if d.name == self.dim)
    }

    /// The programs halved or doubled, within the 2 to 8 that every GPU with clusters allows,
    /// and the block scaled the other way; `None` where that block would not be whole.
    fn moved(&self, rng: &mut Rng) -> Option<(f64, f64)> {
        let programs =
            if self.programs >= 8.0 || (self.programs >= 4.0 && rng.chance(50)) { self.programs / 2.0 } else { self.programs * 2.0 };
        let block = self.block * self.programs / programs;
        (block >= 1.0 && block.fract() == 0.0).then_some((programs, block))
    }
}

/// The coupled numbers of a kernel scheduled with `warp_specialize()` (docs/language.md): its
/// tile is its block, whose rows are 64 per consumer warpgroup of 4 warps (`num_warps` is the
/// rows over 16) and whose columns a multiple of 64 up to 256, or, swapped, 16 or 32 rows and
/// 64 per warpgroup of columns; its step along the contraction is 64. [`nearby_spec`] draws the rows, the columns, the stages
/// ([`Self::stages`]) and the map, and sets the rest from them.
struct WarpSpecialized {
    /// The names of the output's row and column dimensions.
    rows: String,
    cols: String,
}

impl WarpSpecialized {
    /// Kernel `kernel` of `file`, if it is warp-specialized and its output is a matrix.
    fn of(file: &crate::ast::File, kernel: &str) -> Option<Self> {
        let ws =
            file.items.iter().any(|i| matches!(i, Item::Sched { func, prim, .. } if func.name == kernel && prim.name == "warp_specialize"));
        let dims = file.items.iter().find_map(|i| match i {
            Item::Def { func, dims, .. } if func.name == kernel => Some(dims),
            _ => None,
        })?;
        match &dims[..] {
            [rows, cols] if ws => Some(WarpSpecialized { rows: rows.name.clone(), cols: cols.name.clone() }),
            _ => None,
        }
    }

    /// Whether argument `a` of primitive `prim` is drawn (rather than set from the others).
    fn draws(&self, prim: &str, a: &SchedArg) -> bool {
        match (prim, a) {
            ("tensorize" | "num_warps", _) => false,
            ("block", SchedArg::Extent(d, ..)) => d.name == self.rows || d.name == self.cols,
            _ => true,
        }
    }

    /// The stages near `v` where the draw moved them to `moved`: a quarter more or less (a ring
    /// twice as deep seldom fits), and fewer where the block grew (`blocks`: each dimension's
    /// extent before and after), so that the ring's bytes, which grow with the rows and the
    /// columns, stay about the same; 2 to 16 (`num_stages`' range).
    fn stages(&self, v: f64, moved: f64, blocks: &[(String, f64, f64)]) -> f64 {
        let by = (v / 4.0).round().max(1.0);
        let near = if moved > v {
            v + by
        } else if moved < v {
            v - by
        } else {
            v
        };
        let edges = |after: bool| -> f64 {
            blocks.iter().filter(|(d, ..)| *d == self.rows || *d == self.cols).map(|(_, old, new)| if after { *new } else { *old }).sum()
        };
        let grown = if edges(false) > 0.0 { edges(true) / edges(false) } else { 1.0 };
        if grown > 1.0 { (near / grown).floor() } else { near }.clamp(2.0, 16.0)
    }

    /// The rows a block may have nearest `v`: one consumer warpgroup's 64 or two's 128, or 16
    /// or 32, which the plan runs swapped (the columns are then the warpgroups' rows).
    fn rows_of(&self, v: f64) -> f64 {
        [16.0, 32.0, 64.0, 128.0]
            .into_iter()
            .min_by(|a: &f64, b: &f64| (a.ln() - v.ln()).abs().total_cmp(&(b.ln() - v.ln()).abs()))
            .expect("four")
    }

    /// The columns a block may have nearest `v`: a multiple of 64 from 64 to 256, or, where the
    /// block's drawn `rows` are fewer than 64, 64 or 128 (a swapped tile's consumer rows).
    fn cols_of(&self, v: f64, rows: Option<f64>) -> f64 {
        let most = if rows.is_some_and(|r| r < 64.0) { 128.0 } else { 256.0 };
        ((v / 64.0).round() * 64.0).clamp(64.0, most)
    }

    /// The rows the consumer warpgroups compute for a block of `rows` by `cols`: the columns of a
    /// swapped tile (fewer than 64 rows), else the rows.
    fn consumer_rows(&self, rows: f64, cols: f64) -> f64 {
        if rows < 64.0 {
            cols
        } else {
            rows
        }
    }
}

/// Normal-ish values (sum of uniforms), never all zero.
pub fn random_values(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u: f32 = (0..4).map(|_| (rng.below(1 << 24) as f32) / (1u32 << 24) as f32).sum();
            (u - 2.0) * 1.7 * scale
        })
        .collect()
}

/// Arguments for kernel `k` with the given size of every dimension (indexed by DimId), inputs
/// rounded to `dtype`.
pub fn random_args(p: &Program, k: FuncId, sizes: &[usize], dtype: DType, rng: &mut Rng) -> Args {
    let mut args = Args::default();
    for i in p.kernel_inputs(k) {
        let input = p.input(i);
        let shape: Vec<usize> = input.dims().iter().map(|d| sizes[d.index()]).collect();
        let n = shape.iter().product();
        let data = random_values(rng, n, 1.0).into_iter().map(|v| dtype.round(v)).collect();
        args.inputs.push((input.name.clone(), Tensor::new(shape, data)));
    }
    for s in p.kernel_scalars(k) {
        let v = 0.5 + (rng.below(1000) as f32) / 1000.0;
        args.scalars.push((p.scalars[s.index()].name.clone(), v));
    }
    for d in p.kernel_dims(k) {
        args.sizes.push((p.dim_name(d).to_string(), sizes[d.index()]));
    }
    args
}

/// A random valid schedule for every kernel of `p`, appended to `algorithm` (the spec without
/// its schedule, from [`algorithm_text`]): a complete spec. Which Funcs are kernels and their
/// element types stay as in `p`. Draws until every tile fits `opts.max_tile_elements`, falling
/// back to tiles of one element.
pub fn random_spec(algorithm: &str, p: &Program, rng: &mut Rng, opts: &Options) -> String {
    // Not the classes `p` has for whole tiles (`crate::whole_classes`): a drawn schedule bounds
    // its whole tiles. `algorithm_text` leaves out those the compiler adds; those a spec writes
    // out stay in the algorithm, as Funcs that no drawn schedule compiles.
    let kernels: Vec<FuncId> = p.kernels.iter().copied().filter(|k| p.func(*k).class_of.is_none()).collect();
    for _ in 0..64 {
        let mut text = algorithm.to_string();
        for &k in &kernels {
            text += &draw(p, k, rng, opts);
        }
        if fits(&text, opts) {
            return text;
        }
    }
    let mut text = algorithm.to_string();
    for &k in &kernels {
        text += &draw_minimal(p, k, rng);
    }
    text
}

/// Whether a spec checks, lowers, and keeps every tile under the limit.
fn fits(spec: &str, opts: &Options) -> bool {
    let Ok(p) = crate::compile_spec(spec) else { return false };
    p.kernels.iter().all(|&k| crate::lower::lower(&p, k).is_ok_and(|kir| kir.max_tile_elements() <= opts.max_tile_elements))
}

/// The statements every schedule of kernel `k` keeps: its element types and `compile()`.
fn kernel_marks(p: &Program, k: FuncId) -> Vec<String> {
    let f = p.func(k);
    let types: Vec<&str> = f.schedule.dtypes.iter().map(|d| d.name()).collect();
    vec![format!("{}.dtypes({});", f.name, types.join(", ")), format!("{}.compile();", f.name)]
}

const BLOCKS: &[u32] = &[1, 2, 3, 4, 5, 8, 12, 16, 32, 64, 100, 128];
const TILES: &[u32] = &[1, 2, 4, 8, 16, 32, 64, 128, 256];

fn name(p: &Program, d: DimId) -> &str {
    p.dim_name(d)
}

fn draw(p: &Program, k: FuncId, rng: &mut Rng, opts: &Options) -> String {
    let f = p.func(k);
    let kname = &f.name;
    let mut lines = Vec::new();
    let mut budget = opts.max_tile_elements as u64;
    // block: each dimension blocked with some chance.
    let mut blocked: Vec<(DimId, u32)> = Vec::new();
    for &d in &f.dims {
        if rng.chance(70) {
            blocked.push((d, rng.pick(BLOCKS)));
        }
    }
    let cluster = draw_cluster(p, k, &mut blocked, rng, opts);
    if !blocked.is_empty() {
        lines.push(format!(
            "{kname}.block({});",
            blocked.iter().map(|(d, b)| format!("{}:{b}", name(p, *d))).collect::<Vec<_>>().join(", ")
        ));
    }
    // tensorize: every dimension the kernel computes over, within the element budget.
    let mut tiles = Vec::new();
    let mut bounds = Vec::new();
    let mut dims: Vec<DimId> = f.dims.clone();
    dims.extend(p.kernel_dims(k).into_iter().filter(|d| !f.dims.contains(d)));
    let whole = whole_dims(p, k);
    for d in dims {
        if whole.contains(&d) {
            // Computed for all of it by a placed producer: one whole tile, a random bound.
            let n = rng.pick(WHOLE_BOUNDS);
            budget = (budget / n as u64).max(1);
            tiles.push(format!("{}:0", name(p, d)));
            lines.push(format!("{kname}.bound({}:{n});", name(p, d)));
            continue;
        }
        let block = blocked.iter().find(|(x, _)| *x == d).map(|(_, b)| *b);
        let choice = match block {
            Some(b) => {
                let divisors: Vec<u32> = TILES.iter().copied().filter(|t| b % t == 0).collect();
                let t = if rng.chance(25) { 0 } else { rng.pick(&divisors) };
                (t, if t == 0 { b } else { t })
            }
            None => {
                if rng.chance(15) {
                    bounds.push(d);
                    (0, (opts.max_size as u32).next_power_of_two())
                } else {
                    let t = rng.pick(TILES);
                    (t, t)
                }
            }
        };
        let (written, extent) = if choice.1 as u64 > budget { (1, 1) } else { choice };
        if written == 0 && block.is_none() && extent == 1 {
            bounds.retain(|x| *x != d);
        }
        budget /= extent.max(1) as u64;
        budget = budget.max(1);
        if written != 1 || rng.chance(30) {
            tiles.push(format!("{}:{written}", name(p, d)));
        }
    }
    if !tiles.is_empty() {
        lines.push(format!("{kname}.tensorize({});", tiles.join(", ")));
    }
    bounds.retain(|d| !whole.contains(d) && tiles.iter().any(|t| t == &format!("{}:0", name(p, *d))));
    if !bounds.is_empty() {
        lines.push(format!(
            "{kname}.bound({});",
            bounds.iter().map(|d| format!("{}:{}", name(p, *d), opts.max_size)).collect::<Vec<_>>().join(", ")
        ));
    }
    if let Some((d, n)) = cluster {
        lines.push(format!("{kname}.cluster({}:{n});", name(p, d)));
    }
    // map: a random order of the blocked dimensions, sometimes with one split (a cluster needs
    // the default order).
    if cluster.is_none() && !blocked.is_empty() && rng.chance(60) {
        let mut order: Vec<DimId> = blocked.iter().map(|(d, _)| *d).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut entries: Vec<MapEntry> = order.iter().map(|d| MapEntry::Whole(*d)).collect();
        if rng.chance(50) {
            let i = rng.below(entries.len() as u64) as usize;
            let d = order[i];
            let factor = rng.pick(&[1u32, 2, 3, 8]);
            entries[i] = MapEntry::Outer { dim: d, factor };
            let at = i + 1 + rng.below((entries.len() - i) as u64) as usize;
            entries.insert(at, MapEntry::Inner { dim: d, factor, name: "g1".into() });
        }
        let text: Vec<String> = entries
            .iter()
            .map(|e| match e {
                MapEntry::Whole(d) => name(p, *d).to_string(),
                MapEntry::Outer { dim, factor } => format!("{}:g1/{factor}", name(p, *dim)),
                MapEntry::Inner { name, .. } => name.clone(),
            })
            .collect();
        lines.push(format!("{kname}.map({});", text.join(", ")));
    }
    lines.push(format!("{kname}.num_warps({});", rng.pick(&[1, 2, 4, 8, 16, 32])));
    lines.push(format!("{kname}.num_stages({});", rng.pick(&[1, 2, 3, 4])));
    if rng.chance(30) {
        lines.push(format!("{kname}.max_registers({});", rng.pick(&[32, 64, 128])));
    }
    if rng.chance(25) {
        lines.push(format!("{kname}.fast_math();"));
    }
    lines.extend(placements(p, k, rng));
    lines.extend(kernel_marks(p, k));
    lines.join("\n") + "\n"
}

/// Sometimes, where the target has clusters, `cluster(d:N)`: `d` the last of the kernel's blocked
/// dimensions, or a contraction of its `rdot` blocked for it (the contraction split over the
/// cluster). The block of `d` is set so that the N blocks of a cluster cover `max_size` (a
/// clustered dimension holds at most N blocks).
fn draw_cluster(p: &Program, k: FuncId, blocked: &mut Vec<(DimId, u32)>, rng: &mut Rng, opts: &Options) -> Option<(DimId, u32)> {
    let sizes: Vec<u32> = [2, 4, 8, 16].into_iter().filter(|n| *n <= opts.max_cluster).collect();
    if sizes.is_empty() || !rng.chance(20) {
        return None;
    }
    let n = rng.pick(&sizes);
    let block = (opts.max_size.div_ceil(n as u64).next_power_of_two()).min(1 << 20) as u32;
    let f = p.func(k);
    let mut contractions = Vec::new();
    for body in p.kernel_bodies(k) {
        body.walk(&mut |e| {
            if let crate::algo::Expr::Dot { dim, .. } = e {
                if !f.dims.contains(dim) && !contractions.contains(dim) {
                    contractions.push(*dim);
                }
            }
        });
    }
    let whole = whole_dims(p, k);
    contractions.retain(|d| !whole.contains(d));
    let d = if !contractions.is_empty() && rng.chance(50) {
        let d = rng.pick(&contractions);
        blocked.push((d, block));
        d
    } else {
        let d = *f.dims.iter().rev().find(|d| blocked.iter().any(|(x, _)| x == *d))?;
        blocked.iter_mut().filter(|(x, _)| *x == d).for_each(|(_, b)| *b = block);
        d
    };
    Some((d, n))
}

/// `fuse_at` for every producer the kernel places, at a random valid level: at or inside the
/// innermost loop it is read at, and at or inside the levels of the placed Funcs it reads; a
/// producer placed in another placed Func stays where the spec puts it.
fn placements(p: &Program, k: FuncId, rng: &mut Rng) -> Vec<String> {
    let kdims = &p.func(k).dims;
    let reads = expanded_reads(p, k);
    let mut levels: Vec<(FuncId, usize)> = Vec::new();
    let mut out = Vec::new();
    for g in p.producers(k) {
        let Some((c, d)) = p.func(g).schedule.fuse_at else { continue };
        if c != k {
            // Placed in a Func placed in turn (a chain): kept as written.
            out.push(format!("{}.fuse_at({}, {});", p.func(g).name, p.func(c).name, p.dim_name(d)));
            continue;
        }
        let mut lo = 0;
        for (f, labels) in &reads {
            if *f == g {
                for l in labels {
                    if let Some(pos) = kdims.iter().position(|x| x == l) {
                        lo = lo.max(pos);
                    }
                }
            }
        }
        for (f, _) in expanded_reads(p, g) {
            if let Some((_, lvl)) = levels.iter().find(|(x, _)| *x == f) {
                lo = lo.max(*lvl);
            }
        }
        let level = lo + rng.below((kdims.len() - lo) as u64) as usize;
        levels.push((g, level));
        out.push(format!("{}.fuse_at({}, {});", p.func(g).name, p.func(k).name, p.dim_name(kdims[level])));
    }
    out
}

/// Bounds drawn for a whole tile that a placed producer is computed over.
const WHOLE_BOUNDS: &[u32] = &[16, 33, 64, 100];

/// The dimensions over which kernel `k` reduces while reading a producer it places: the producer
/// is computed for all of each at its level, so each must be one whole tile (`d:0`).
fn whole_dims(p: &Program, k: FuncId) -> Vec<DimId> {
    let kdims = &p.func(k).dims;
    let mut out = Vec::new();
    for (g, labels) in expanded_reads(p, k) {
        if p.func(g).schedule.fuse_at.is_none() {
            continue;
        }
        for l in labels {
            if !kdims.contains(&l) && !out.contains(&l) {
                out.push(l);
            }
        }
    }
    out
}

fn draw_minimal(p: &Program, k: FuncId, rng: &mut Rng) -> String {
    let whole = whole_dims(p, k);
    let mut lines = Vec::new();
    if !whole.is_empty() {
        let kname = &p.func(k).name;
        let tiles: Vec<String> = whole.iter().map(|d| format!("{}:0", name(p, *d))).collect();
        lines.push(format!("{kname}.tensorize({});", tiles.join(", ")));
        lines.push(format!("{kname}.bound({});", whole.iter().map(|d| format!("{}:64", name(p, *d))).collect::<Vec<_>>().join(", ")));
    }
    lines.extend(placements(p, k, rng));
    lines.extend(kernel_marks(p, k));
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drawn anywhere for matmul and a row sum: no `cluster` where the target has none; where
    /// it has clusters of up to 8, some draws cluster a result dimension and some split the
    /// contraction over the cluster, every one of at most 8 programs, and every drawn spec
    /// checks and lowers (the draw retries those that do not).
    #[test]
    fn anywhere_draws_clusters_only_where_the_target_has_them() {
        let mm = "Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\nmm.compile();\n";
        let rows = "Func s; In A; Var x; RVar y;\ns[x] = rsum(A[x, y], y);\ns.compile();\n";
        let mut rng = Rng::new(5);
        let (mut split, mut result) = (0, 0);
        for (src, max_cluster) in [(mm, 0), (rows, 0), (mm, 8), (rows, 8)] {
            let p = crate::compile_spec(src).unwrap();
            let algorithm = algorithm_text(src).unwrap();
            let opts = Options { max_size: 1000, max_tile_elements: 1 << 12, max_cluster };
            for _ in 0..150 {
                let text = random_spec(&algorithm, &p, &mut rng, &opts);
                assert!(fits(&text, &opts) || !text.contains(".block("), "{text}");
                let Some(line) = text.lines().find(|l| l.contains(".cluster(")) else { continue };
                assert!(max_cluster > 0, "{text}");
                let n: u32 = line.trim_end_matches(");").rsplit(':').next().unwrap().parse().unwrap();
                assert!((2..=max_cluster).contains(&n), "{text}");
                if line.contains("(k:") {
                    split += 1;
                } else {
                    result += 1;
                }
            }
        }
        assert!(split > 0 && result > 0, "{split} contraction splits, {result} result clusters");
    }

    /// Drawn near matmul's `mm`: every draw changes a number and keeps the statements; some
    /// change the group of its `map`, and most check.
    #[test]
    fn nearby_spec_changes_numbers_of_the_kernel_only() {
        let src = "Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\nmm.block(x:128, y:128);\nmm.tensorize(x:128, y:128, k:32);\nmm.map(x:x1/8, y, x1);\nmm.num_warps(4);\nmm.num_stages(3);\nmm.dtypes(f16);\nmm.compile();\n";
        let own = kernel_spec(src, "mm").unwrap();
        let mut rng = Rng::new(9);
        let drawn: Vec<String> = (0..40).map(|_| nearby_spec(&own, "mm", &mut rng).unwrap()).collect();
        assert!(drawn.iter().all(|d| d != &own && d.lines().count() == own.lines().count()));
        assert!(drawn.iter().all(|d| d.contains("mm.dtypes(f16);") && d.contains("mm.compile();")));
        assert!(drawn.iter().any(|d| !d.contains("x:x1/8")), "the map's group changes in some draw");
        let errs: Vec<String> = drawn
            .iter()
            .filter_map(|d| {
                crate::compile_spec(d).err().map(|e| format!("{}: {}", e[0].message, d.lines().skip(2).collect::<Vec<_>>().join(" ")))
            })
            .collect();
        assert!(errs.len() <= 10, "{}", errs.join("\n"));
    }

    /// Near a warp-specialized kernel, the tile is the block, the warps are the rows over 16, the
    /// rows 64 or 128, the columns a multiple of 64 up to 256, the step along the contraction 64,
    /// and the stages 2 or more; every draw checks.
    #[test]
    fn nearby_warp_specialized_numbers_move_together() {
        let src = "Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\nmm.block(x:128, y:256);\nmm.tensorize(x:128, y:256, k:64);\nmm.map(x:x1/8, y, x1);\nmm.num_warps(8);\nmm.num_stages(4);\nmm.warp_specialize();\nmm.dtypes(f16);\nmm.compile();\n";
        let own = kernel_spec(src, "mm").unwrap();
        let mut rng = Rng::new(3);
        for _ in 0..40 {
            let d = nearby_spec(&own, "mm", &mut rng).unwrap();
            let line = |prim: &str| line_numbers(&d, prim);
            let (block, tile, warps, stages) = (line("block"), line("tensorize"), line("num_warps"), line("num_stages"));
            assert!(crate::compile_spec(&d).is_ok(), "{d}");
            assert_eq!(tile, [block[0], block[1], 64], "{d}");
            assert!([16, 32, 64, 128].contains(&block[0]) && block[1] % 64 == 0 && (64..=256).contains(&block[1]), "{d}");
            // Fewer than 64 rows: a swapped tile, whose columns are the warpgroups' rows.
            let consumer_rows = if block[0] < 64 { block[1] } else { block[0] };
            assert!(consumer_rows <= 128 || block[0] >= 64, "{d}");
            assert_eq!(warps, [consumer_rows / 16], "{d}");
            assert!(stages[0] >= 2, "{d}");
        }
    }

    /// The numbers of `d`'s statement `mm.<prim>(...)`.
    fn line_numbers(d: &str, prim: &str) -> Vec<u32> {
        let line = d.lines().find(|l| l.starts_with(&format!("mm.{prim}("))).expect(prim);
        line.split(|c: char| !c.is_ascii_digit()).filter_map(|t| t.parse().ok()).collect()
    }

    /// The extent `d`'s statement `mm.block(...)` gives dimension `name`, wherever it stands.
    fn block_extent(d: &str, name: &str) -> u32 {
        let line = d.lines().find(|l| l.starts_with("mm.block(")).expect("block");
        let after = line.split_once(&format!("{name}:")).expect(name).1;
        after.split(|c: char| !c.is_ascii_digit()).next().and_then(|t| t.parse().ok()).expect(name)
    }

    /// Near a swapped warp-specialized tile (16 rows, 64 columns over one warpgroup), the rows
    /// stay 16 or 32 or grow to 64, the columns of a swapped tile stay 64 or 128, and the warps
    /// follow the warpgroups' rows; every draw checks.
    #[test]
    fn nearby_swapped_tiles_keep_their_columns_the_warpgroups_rows() {
        let src = "Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\nmm.bound(x:16);\nmm.block(x:16, y:64);\nmm.tensorize(x:16, y:64, k:64);\nmm.num_warps(4);\nmm.num_stages(16);\nmm.warp_specialize();\nmm.dtypes(f16);\nmm.compile();\n";
        let own = kernel_spec(src, "mm").unwrap();
        let mut rng = Rng::new(21);
        let mut swapped = 0;
        for _ in 0..40 {
            let d = nearby_spec(&own, "mm", &mut rng).unwrap();
            let (block, warps) = (line_numbers(&d, "block"), line_numbers(&d, "num_warps"));
            assert!(crate::compile_spec(&d).is_ok(), "{d}");
            if block[0] < 64 {
                swapped += 1;
                assert!([16, 32].contains(&block[0]) && [64, 128].contains(&block[1]) && warps == [block[1] / 16], "{d}");
            } else {
                assert_eq!(warps, [block[0] / 16], "{d}");
            }
        }
        assert!(swapped > 0, "no draw kept a swapped tile");
        // The same with the block's columns written first: the rows are drawn first all the same.
        let own = kernel_spec(&src.replace("block(x:16, y:64)", "block(y:64, x:16)"), "mm").unwrap();
        for _ in 0..40 {
            let d = nearby_spec(&own, "mm", &mut rng).unwrap();
            let (rows, cols, warps) = (block_extent(&d, "x"), block_extent(&d, "y"), line_numbers(&d, "num_warps"));
            assert!(crate::compile_spec(&d).is_ok(), "{d}");
            assert!(rows >= 64 || ([64, 128].contains(&cols) && warps == [cols / 16]), "{d}");
        }
    }

    /// Near a warp-specialized kernel, some draws leave out its `persistent()` and the others
    /// keep it; near one without it, some add it. Every draw checks.
    #[test]
    fn nearby_warp_specialized_kernels_flip_persistence_in_some_draws() {
        let spec = |persistent: &str| {
            format!("Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\nmm.block(x:128, y:256);\nmm.tensorize(x:128, y:256, k:64);\nmm.num_warps(8);\nmm.num_stages(4);\nmm.warp_specialize();\n{persistent}mm.dtypes(f16);\nmm.compile();\n")
        };
        for (seed, own_persistent) in [(11, true), (12, false)] {
            let own = kernel_spec(&spec(if own_persistent { "mm.persistent();\n" } else { "" }), "mm").unwrap();
            let mut rng = Rng::new(seed);
            let drawn: Vec<String> = (0..60).map(|_| nearby_spec(&own, "mm", &mut rng).unwrap()).collect();
            let flipped = drawn.iter().filter(|d| d.contains("mm.persistent();") != own_persistent).count();
            assert!(flipped > 0 && flipped < drawn.len(), "{flipped} of {} draws flip persistent()", drawn.len());
            for d in &drawn {
                assert!(crate::compile_spec(d).is_ok(), "{d}");
                assert!(d.matches("persistent").count() <= 1 && d.trim_end().ends_with("mm.compile();"), "{d}");
            }
        }
    }

    /// Near a multicast kernel, every draw keeps its programs and the grid order that makes
    /// their blocks adjacent, and none makes it persistent: every draw checks.
    #[test]
    fn nearby_multicast_keeps_its_programs_and_order() {
        let spec = "Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\nmm.block(x:64, y:128);\nmm.tensorize(x:64, y:128, k:64);\nmm.map(x:x1/4, y, x1);\nmm.multicast(x:4);\nmm.num_warps(4);\nmm.num_stages(4);\nmm.warp_specialize();\nmm.dtypes(f16);\nmm.compile();\n";
        let own = kernel_spec(spec, "mm").unwrap();
        let mut rng = Rng::new(13);
        for _ in 0..60 {
            let d = nearby_spec(&own, "mm", &mut rng).unwrap();
            assert!(crate::compile_spec(&d).is_ok(), "{d}");
            assert!(d.contains("mm.multicast(x:4);") && d.contains("mm.map(x:x1/4, y, x1);") && !d.contains("persistent"), "{d}");
        }
    }

    /// Near a kernel whose contraction is split over a cluster, the cluster's programs (2 to 8)
    /// and its dimension's block move together, so that they cover the same contraction; the
    /// cluster moves in some draws, and every draw checks.
    #[test]
    fn nearby_cluster_keeps_the_extent_it_covers() {
        let split = |marks: &str| {
            format!("Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\nmm.bound(x:16);\n{marks}mm.dtypes(f16);\nmm.compile();\n")
        };
        let warp_specialized = split("mm.block(x:64, y:64, k:2048);\nmm.tensorize(x:64, y:64, k:64);\nmm.cluster(k:2);\nmm.num_warps(4);\nmm.num_stages(16);\nmm.warp_specialize();\n");
        let mma = split(
            "mm.block(x:16, y:64, k:2048);\nmm.tensorize(x:16, y:64, k:32);\nmm.cluster(k:2);\nmm.num_warps(2);\nmm.num_stages(4);\n",
        );
        let extent = |d: &str, prim: &str| -> u32 {
            let line = d.lines().find(|l| l.starts_with(&format!("mm.{prim}("))).expect(prim);
            line.split_once("k:").expect(prim).1.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
        };
        for (seed, src) in [(5, warp_specialized), (6, mma)] {
            let own = kernel_spec(&src, "mm").unwrap();
            let mut rng = Rng::new(seed);
            let mut moved = 0;
            for _ in 0..60 {
                let d = nearby_spec(&own, "mm", &mut rng).unwrap();
                let (programs, block) = (extent(&d, "cluster"), extent(&d, "block"));
                assert!([2, 4, 8].contains(&programs), "{d}");
                assert_eq!(programs * block, 4096, "{d}");
                moved += usize::from(programs != 2);
                assert!(crate::compile_spec(&d).is_ok(), "{d}\n{:?}", crate::compile_spec(&d).err().map(|e| e[0].message.clone()));
            }
            assert!(moved > 0, "the cluster moves in some draw");
        }
    }
}
