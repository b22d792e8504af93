//! The plan's verifier: the rules every [`GpuPlan`] keeps, checked after each plan pass, so that
//! a pass that breaks one fails where it breaks it rather than as a wrong result or a hung
//! kernel on the GPU.

use super::warp_specialize::{Major, StagedStore, WarpSpecialized, ROWS_PER_CONSUMER, ROW_BYTES, STORE_BUFFERS, STORE_COLS};
use super::GpuPlan;
use dt_core::kir::{Kernel, Op};

/// Checks `p` against kernel `k`; an error names the first broken rule.
pub fn verify(k: &Kernel, p: &GpuPlan) -> Result<(), String> {
    if let Some(w) = &p.warp_specialized {
        warp_specialized(k, p, w)?;
    }
    Ok(())
}

fn warp_specialized(k: &Kernel, p: &GpuPlan, w: &WarpSpecialized) -> Result<(), String> {
    let t = &p.target;
    // Shared memory: the stages, then both barrier rings, within the target.
    if w.stage_bytes != w.operands.iter().map(|o| o.bytes()).sum::<u32>() {
        return Err("a stage is not exactly its two operand tiles".into());
    }
    for o in &w.operands {
        // The 128-byte swizzle repeats every 1024 bytes, and descriptors assume it starts there.
        if !o.offset.is_multiple_of(1024) || !o.copy_bytes.is_multiple_of(1024) || !w.stage_bytes.is_multiple_of(1024) {
            return Err(format!("operand tile of input {} is not 1024-byte aligned within its stage", o.input));
        }
        if o.offset + o.bytes() > w.stage_bytes {
            return Err(format!("operand tile of input {} runs past its stage", o.input));
        }
        // A copy's box: 128-byte rows along the contiguous axis, every extent at most 256.
        let inner = o.boxes[o.contiguous_axis()];
        if inner * 2 != ROW_BYTES || o.boxes.iter().any(|b| *b == 0 || *b > 256) {
            return Err(format!("the box of input {}'s copies is not 128-byte rows of at most 256", o.input));
        }
        // A multicast operand's box is one program's slice; the cluster's slices make a copy.
        let slices = o.multicast.map_or(1, |m| m.programs);
        if o.boxes.iter().product::<u32>() * 2 * slices != o.copy_bytes {
            return Err(format!("the copies of input {} do not move their box's bytes", o.input));
        }
        if let Some(m) = o.multicast {
            if o.boxes.get(m.axis) != Some(&m.extent) || m.bytes != m.extent * ROW_BYTES || !m.bytes.is_multiple_of(1024) {
                return Err(format!("the multicast slices of input {} are not whole groups of 8 lines of its box", o.input));
            }
            if k.grid.multicast.is_none_or(|(d, n)| n != m.programs || o.axes.contains(&d)) {
                return Err(format!("input {} is sliced for a multicast it is not shared by", o.input));
            }
        }
        let expected_copies = match o.major {
            Major::K => 1,
            Major::Mn => o.rows / 64,
        };
        if o.copies != expected_copies || o.copies * o.copy_bytes != o.copied_rows * w.step * 2 {
            return Err(format!("the copies of input {} do not fill its tile", o.input));
        }
        // Rows copied short of the tile are read from what follows them in the stage.
        if o.copied_rows > o.rows || (o.copied_rows < o.rows && o.offset + o.rows * ROW_BYTES > w.stage_bytes) {
            return Err(format!("the rows of input {} that wgmma reads run past its stage", o.input));
        }
        if !matches!(k.inputs.get(o.input), Some(t) if t.dims == o.axes) {
            return Err(format!("operand {} does not read input {} along its axes", o.map, o.input));
        }
    }
    // A product's descriptor is the stage's plus its offset in units of 16 bytes.
    if w.operands.iter().any(|o| !o.desc.k_step.is_multiple_of(16) || o.desc.pieces.is_some()) {
        return Err("an operand's step along the contraction is not whole 16-byte units of one piece".into());
    }
    if w.full.offset != w.stages * w.stage_bytes || w.empty.offset != w.full.offset + 8 * w.stages {
        return Err("the barrier rings do not follow the stages".into());
    }
    if w.shared_bytes < 1024 + w.empty.offset + 8 * w.stages || w.shared_bytes > t.shared_bytes_per_block {
        return Err(format!(
            "{} bytes of shared memory: not the ring's, or above the {} of {}",
            w.shared_bytes, t.shared_bytes_per_block, t.name
        ));
    }
    // Barriers: a full stage is the producer's one arrival and both tiles' bytes; an empty one,
    // an arrival per consumer warpgroup (of every program of a multicast's cluster).
    let programs = k.grid.multicast.map_or(1, |(_, n)| n);
    if w.full.arrivals != 1 || w.full.tx_bytes != w.stage_bytes || w.empty.arrivals != w.roles.consumers * programs || w.empty.tx_bytes != 0
    {
        return Err("the barriers' counts do not match the producer's copies and the consumers' releases".into());
    }
    // Roles: a warpgroup of 64 rows per consumer; registers within the multiprocessor.
    let r = &w.roles;
    if w.rows != ROWS_PER_CONSUMER * r.consumers || k.num_warps != 4 * r.consumers {
        return Err("the consumer warpgroups do not cover the tile's rows".into());
    }
    if !(2..16).contains(&r.producer_barrier) || r.producer_barrier < 2 + r.consumers {
        return Err("the producer's barrier is not a named barrier after the consumers', below 16".into());
    }
    let regs = [r.producer_registers, r.consumer_registers, r.entry_registers];
    if regs.iter().any(|n| !n.is_multiple_of(8) || !(24..=256).contains(n)) {
        return Err("a register budget is not a multiple of 8 from 24 to 256".into());
    }
    if r.pool() > t.registers_per_sm {
        return Err(format!("the program starts with more than the {} registers of a multiprocessor", t.registers_per_sm));
    }
    if !r.fit_the_pool() {
        return Err(format!("the roles take more than the {} registers the program starts with", r.pool()));
    }
    // wgmma: N a multiple of 8 up to 256, the step whole instructions of k16.
    if !w.wgmma_n.is_multiple_of(8) || w.wgmma_n > 256 || w.wgmma_n != w.cols || w.wgmma_per_stage * 16 != w.step {
        return Err("the wgmma instructions do not cover the tile".into());
    }
    // The plan names the loop's dot, its accumulator and its loads.
    let lets = k.lets();
    let is = |v, pred: &dyn Fn(&Op) -> bool| lets.iter().any(|(x, op)| *x == v && pred(op));
    if !is(w.dot, &|op| matches!(op, Op::Dot { dim, .. } if *dim == w.k)) {
        return Err("the planned dot is not a dot over the loop's dimension".into());
    }
    for o in &w.operands {
        if !is(o.value, &|op| matches!(op, Op::Load { input, .. } if *input == o.input)) {
            return Err(format!("the copies of input {} replace no load of it", o.input));
        }
    }
    if k.var(w.acc) != &k.value(w.dot).shape {
        return Err("the accumulator is not the dot's shape".into());
    }
    if let Some(s) = &w.store {
        staged_store(k, w, s)?;
    }
    Ok(())
}

/// The epilogue's store through shared memory: buffers of 1024-byte-aligned 128-byte rows after
/// the barriers and within the plan's shared memory, a box of 64 rows by one such row, the map
/// after the operands', chunks that cover the tile's columns, barriers after the consumers'.
fn staged_store(k: &Kernel, w: &WarpSpecialized, s: &StagedStore) -> Result<(), String> {
    let consumers = w.roles.consumers;
    if !s.offset.is_multiple_of(1024) || s.offset < w.empty.offset + 8 * w.stages || !s.buffer_bytes.is_multiple_of(1024) {
        return Err("the staging buffers are not 1024-byte aligned after the barriers".into());
    }
    if 1024 + s.offset + consumers * STORE_BUFFERS * s.buffer_bytes != w.shared_bytes {
        return Err("the staging buffers are not the end of the plan's shared memory".into());
    }
    if s.boxes != [ROWS_PER_CONSUMER, STORE_COLS] || STORE_COLS * 2 != ROW_BYTES || s.buffer_bytes != ROWS_PER_CONSUMER * ROW_BYTES {
        return Err("a staged store's box is not a consumer's 64 rows by one 128-byte row".into());
    }
    if s.map != w.operands.len() || k.output.dims != [w.m, w.n] {
        return Err("the staged store's map is not the output's, after the operands'".into());
    }
    // A warp's fragments of 8 columns, 4 registers each, the columns in order.
    if s.chunks * STORE_COLS != w.cols || s.registers_per_chunk != STORE_COLS / 8 * 4 {
        return Err("the staged store's chunks do not cover the tile's columns".into());
    }
    if s.first_barrier < 2 || s.first_barrier + consumers > w.roles.producer_barrier {
        return Err("the consumer warpgroups' barriers are not among named barriers 2 to 15, before the producer's".into());
    }
    Ok(())
}

/// Checks the older path's register plan `p` of kernel `k` (see [`super::register_layouts`]):
/// every accumulator-layout tile is its dot's [rows, cols] (other dimensions of one lane; the
/// other way round for a swapped warp-specialized tile) and the
/// warps divide it into whole fragments; a dot accumulates only into an accumulator of its own
/// layout, and stages directly only loads; an operand it reads from fragments is held as its A
/// fragments; only an `mma.sync` operand it copies into a ring is swizzled; a `wgmma` dot
/// (`wgmma()`) is a warpgroup product whose copied operands are swizzled in a ring; its pipeline buffers
/// fit the older path's shared memory; a replicated tile has
/// one element, a tile in accumulator rows is those rows.
pub(crate) fn verify_registers(k: &Kernel, p: &super::layouts::Plan) -> Result<(), String> {
    use super::layouts::RegLayout;
    let check = |what: String, shape: &dt_core::kir::Shape, layout: RegLayout| -> Result<(), String> {
        match layout {
            RegLayout::Blocked => Ok(()),
            RegLayout::Mma(t) => {
                let wide: Vec<_> = shape.0.iter().filter(|(_, n)| *n > 1).copied().collect();
                let (fr, fc) = t.isa.fragment();
                let whole = t.rows % (t.wm * fr) == 0 && t.cols % (t.wn * fc) == 0;
                // A swapped warp-specialized tile lays out the value's second dimension as its rows.
                let swapped = k.warp_specialize && wide == [(t.n, t.cols), (t.m, t.rows)];
                let tile = wide == [(t.m, t.rows), (t.n, t.cols)] || swapped;
                if !tile || !whole {
                    return Err(format!("{what} {:?} is not the accumulator tile [{} x {}] it is laid out as", shape.0, t.rows, t.cols));
                }
                Ok(())
            }
            RegLayout::MmaRows(r) => {
                let wide: Vec<_> = shape.0.iter().filter(|(_, n)| *n > 1).copied().collect();
                if wide != [(r.m, r.rows)] || r.rows % (r.wm * r.isa.fragment().0) != 0 {
                    return Err(format!("{what} {:?} is not the {} rows it is laid out as", shape.0, r.rows));
                }
                Ok(())
            }
            RegLayout::Replicated if shape.elements() != 1 => Err(format!("{what} is replicated but has {} elements", shape.elements())),
            RegLayout::Replicated => Ok(()),
            RegLayout::Runs(0) => Err(format!("{what} is in runs of no lanes")),
            // A tile in runs may be narrower than a run (a statistic per row that only reads
            // from runs); what `runs` allows is its own business.
            RegLayout::Runs(_) => Ok(()),
        }
    };
    for (i, v) in k.values.iter().enumerate() {
        check(format!("%{i}"), &v.shape, p.values[i])?;
    }
    for (i, s) in k.vars.iter().enumerate() {
        check(format!("$acc{i}"), s, p.vars[i])?;
    }
    let mut lets = Vec::new();
    let mut updates = Vec::new();
    super::layouts::collect(&k.body, &mut lets, &mut updates);
    for (id, d) in &p.dots {
        if let Some(var) = d.into {
            if p.vars[var.0 as usize] != p.values[id.0 as usize] {
                return Err(format!("dot %{} accumulates into $acc{} of another layout", id.0, var.0));
            }
        }
        if d.a_in_fragments {
            let RegLayout::Mma(s) = p.values[d.a.0 as usize] else {
                return Err(format!("dot %{} reads operand %{} from accumulator fragments it is not in", id.0, d.a.0));
            };
            if (s.wn, d.tile.wn, s.wm, s.rows, s.cols) != (1, 1, d.tile.wm, d.tile.rows, d.depth) {
                return Err(format!("dot %{}'s operand %{} is not held as its A fragments", id.0, d.a.0));
            }
        }
        for (operand, direct) in [(d.a, &d.direct[0]), (d.b, &d.direct[1])] {
            let is_load = lets.iter().any(|(v, op)| *v == operand && matches!(op, Op::Load { .. }));
            if direct.is_some() && !is_load {
                return Err(format!("dot %{} copies operand %{} from global memory, but it is no load", id.0, operand.0));
            }
        }
        if d.reach > d.depth || !d.reach.is_multiple_of(d.tile.isa.k_step()) || (d.reach < d.depth && !d.warpgroup) {
            return Err(format!(
                "dot %{}'s products cover {} of its {} elements of the contraction: only a warpgroup product stops short, at a k step",
                id.0, d.reach, d.depth
            ));
        }
        for i in 0..2 {
            let atoms = d.can_swizzle(i) || (d.warpgroup && d.fits_atoms(i));
            if d.swizzled(i) && !(atoms && d.ring.is_some() && d.direct[i].is_some()) {
                return Err(format!(
                    "dot %{}'s operand {i} is swizzled, but only an mma.sync operand it copies into a ring, in lines of 64 elements (of whole 16-byte units for a warpgroup product), can be",
                    id.0
                ));
            }
        }
        if d.warpgroup {
            let staged_swizzled = (0..2).all(|i| d.direct[i].is_none() || d.swizzled(i));
            if !super::layouts::warpgroup_fits(d) || d.ring.is_none() || !staged_swizzled {
                return Err(format!(
                    "dot %{} runs on wgmma, but its tile, operands or rings are not those of a warpgroup product (64 rows per 4 warps, operands swizzled in a ring)",
                    id.0
                ));
            }
        }
        if let Some(r) = d.ring {
            let mapped = r.maps.iter().flatten().all(|m| *m < p.tensor_maps.len());
            let copied = (0..2).all(|i| r.maps[i].is_none() || d.direct[i].is_some());
            if r.maps.iter().any(Option::is_some) && (!d.warpgroup || r.barriers.is_none() || !mapped || !copied) {
                return Err(format!(
                    "dot %{}'s ring takes bulk tensor copies, but only a warpgroup dot's copied operands, with the loop's barriers and a map each, can",
                    id.0
                ));
            }
            // The stages' counts of warps done follow the barriers, in the rings' words.
            let counted = r
                .barriers
                .is_some_and(|b| r.done_counts.is_none_or(|c| c == b + 2 * r.stages as usize && c + r.stages as usize <= p.ring_words));
            if r.overlapped && (r.done_counts.is_none() || r.stages < 3 || !d.warpgroup) {
                return Err(format!(
                    "dot %{}'s loop overlaps its steps, but only warpgroup dots whose stages, three or more, the last warp done with them refills can",
                    id.0
                ));
            }
            if r.turns && (!r.overlapped || k.num_warps != 8) {
                return Err(format!("dot %{}'s warpgroups take turns, but only an overlapped loop's two warpgroups can", id.0));
            }
            if r.done_counts.is_some() && !counted {
                return Err(format!(
                    "dot %{}'s stages are refilled by the last warp done with them, but their counts are not one word per stage right after the loop's barriers, within the rings",
                    id.0
                ));
            }
        }
        let words = (d.buffer_words(0) + d.buffer_words(1)) * d.stages as usize;
        if d.stages > 1 && words * 4 > p.target.shared_bytes_per_block as usize {
            return Err(format!(
                "dot %{}'s {} pipeline buffers take {} bytes of shared memory, more than {} gives a block",
                id.0,
                d.stages,
                words * 4,
                p.target.name
            ));
        }
    }
    Ok(())
}

/// Checks where an older plan's shared memory lies: each slot 16-byte aligned and holding its
/// elements, after the warp-specialized loop's ring (`ws_words`) and before the next slot; the
/// rings of several dots after the slots, the staged rows' rings after those; and all of it
/// within the shared memory a block of the target has.
pub(crate) fn verify_shared(
    k: &Kernel,
    target: &super::Target,
    shared: &super::shared::SharedLayout,
    slot_elements: &[usize],
    ring_words: usize,
    ws_words: usize,
    staged_words: usize,
) -> Result<(), String> {
    if shared.slot_offsets.len() != slot_elements.len() {
        return Err(format!("{} slots placed for {} slots", shared.slot_offsets.len(), slot_elements.len()));
    }
    let mut end = ws_words;
    for (i, (at, n)) in shared.slot_offsets.iter().zip(slot_elements).enumerate() {
        if at % 4 != 0 || *at < end {
            return Err(format!("slot {i} at word {at}: not 16-byte aligned, or before the end of what comes before it (word {end})"));
        }
        end = at + n;
    }
    if shared.dot_rings < end || shared.staged_rings < shared.dot_rings + ring_words {
        return Err(format!(
            "the rings of several dots (word {}, {ring_words} words) and the staged rows' rings (word {}) overlap what comes before them (to word {end})",
            shared.dot_rings, shared.staged_rings
        ));
    }
    let bytes = shared.bytes as usize + staged_words * 4;
    if bytes > target.shared_bytes_per_block as usize {
        return Err(format!(
            "kernel `{}` takes {bytes} bytes of shared memory, more than {} on {}",
            k.name, target.shared_bytes_per_block, target.name
        ));
    }
    Ok(())
}

/// The rules of the staged rows' plan of kernel `k`, whose rings start at word `base`: each ring
/// lies in the words the plan asks for and fits the kernel's GPUs, its buffers hold its loads,
/// and a loop reads a held block only from a ring that holds it, planned before it.
pub(crate) fn verify_staged_rows(
    k: &Kernel,
    target: &super::Target,
    rows: &super::staged_rows::StagedRows,
    base: usize,
) -> Result<(), String> {
    use super::staged_rows::RowLoads;
    let mut holding = Vec::new();
    for (l, form) in &rows.loops {
        let at = format!("the loop over {} ({})", k.dim_name(l.dim), l.origin);
        match form {
            RowLoads::Staged(r) => {
                if r.offset < base || r.offset + r.words > base + rows.ring_words {
                    return Err(format!(
                        "{at}: its ring at word {} of {} words lies outside the rings' {} words from {base}",
                        r.offset, r.words, rows.ring_words
                    ));
                }
                if !super::shared::staged_ring_fits(k, target, r.offset + r.words) {
                    return Err(format!("{at}: its ring ends at word {}, past the shared memory of its GPUs", r.offset + r.words));
                }
                let moving = r.loads.iter().filter(|p| p.axes.contains(&l.dim)).count();
                let words: usize = r.rings.iter().map(|(_, runs)| runs * 4 * r.buffers).sum();
                if r.rings.len() != moving || r.rings.iter().any(|(_, runs)| *runs == 0) || words > r.words {
                    return Err(format!("{at}: its ring's buffers ({:?}) do not hold its {moving} moving loads", r.rings));
                }
                if r.holds {
                    holding.push(r.offset);
                }
            }
            RowLoads::Held(held) => {
                if let Some((p, h)) = held.iter().find(|(_, h)| !holding.contains(&h.offset)) {
                    return Err(format!("{at}: v{} reads a held block at word {} that no loop before it holds", p.value.0, h.offset));
                }
            }
            RowLoads::Registers(loads) if loads.is_empty() => return Err(format!("{at}: issues no loads ahead")),
            RowLoads::Registers(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::verify_registers;
    use crate::emit::gpu::Dialect;
    use crate::plan::layouts::{Mapping, RegLayout};
    use dt_core::DType;

    /// Every kernel of the library's spec `name`, lowered.
    fn library_kernels(name: &str) -> Vec<dt_core::kir::Kernel> {
        let path = format!("{}/../dt-kernels/specs/{name}.dt", env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(&path).expect("spec");
        let p = dt_core::compile_spec(&src).expect("checks");
        dt_core::lower::lower_all(&p).expect("lowers")
    }

    fn matmul() -> dt_core::kir::Kernel {
        library_kernels("matmul").into_iter().find(|k| k.name == "mm").expect("the sm_80 class")
    }

    /// The matmul class's slots as `shared::lay_out` places them pass; a slot moved onto the one
    /// before it, or a layout past the target's shared memory, is caught.
    #[test]
    fn shared_memory_overlapping_or_past_the_target_is_caught() {
        use super::verify_shared;
        let k = matmul();
        let older = crate::plan::plan_older(&k, DType::F16, Dialect::Cuda, None).expect("plans");
        let (target, slots) = (older.registers.target, &older.publishing.slot_elements);
        let check = |shared: &crate::plan::shared::SharedLayout| {
            verify_shared(&k, &target, shared, slots, older.registers.ring_words, 0, older.rows.ring_words)
        };
        check(&older.shared).expect("the planned layout is valid");
        assert!(older.shared.slot_offsets.len() >= 2, "{:?}", older.shared);
        let mut overlapping = older.shared.clone();
        overlapping.slot_offsets[1] = overlapping.slot_offsets[0];
        assert!(check(&overlapping).expect_err("overlapping slots").contains("slot 1"));
        let mut large = older.shared.clone();
        large.bytes = target.shared_bytes_per_block + 4;
        assert!(check(&large).expect_err("too large").contains("more than"));
    }

    #[test]
    fn attention_keeps_its_row_statistics_in_the_rows_and_breaking_them_is_caught() {
        let k = library_kernels("attention").into_iter().find(|k| k.name == "attention").expect("attention");
        let mapping = Mapping::of(&k, DType::F16, Dialect::Cuda);
        let plan = crate::plan::register_layouts(&k, DType::F16, Dialect::Cuda, None, mapping);
        verify_registers(&k, &plan).unwrap();
        let rows: Vec<usize> = (0..k.vars.len()).filter(|v| matches!(plan.vars[*v], RegLayout::MmaRows(_))).collect();
        assert_eq!(rows.len(), 2, "the running maximum and sum are held in the rows");
        let pv = plan.dots.iter().find(|(_, d)| d.a_in_fragments).expect("P V reads P from the scores' fragments");

        // A row vector said to be a tile's rows when it is a whole tile.
        let mut broken = plan.clone();
        let tile = k.values.iter().position(|v| v.shape.0.iter().filter(|(_, n)| *n > 1).count() == 2).expect("a tile");
        let RegLayout::MmaRows(r) = plan.vars[rows[0]] else { unreachable!() };
        broken.values[tile] = RegLayout::MmaRows(r);
        assert!(verify_registers(&k, &broken).unwrap_err().contains("rows"));

        // Fragments read from an operand that is not in the accumulator layout.
        let mut broken = plan.clone();
        broken.values[pv.1.a.0 as usize] = RegLayout::Blocked;
        assert!(verify_registers(&k, &broken).unwrap_err().contains("fragments"));
    }

    /// The `wgmma()` classes of attention plan both dots as warpgroup products fed by rings of
    /// swizzled buffers, and a warpgroup dot whose operands are padded is caught.
    #[test]
    fn hopper_attention_runs_both_dots_on_wgmma_and_padding_them_is_caught() {
        let kernels = library_kernels("attention");
        for name in ["attention_90a_64", "attention_90a_80", "attention_90a_128", "attention_causal_90a_80", "attention_causal_90a_128"] {
            let k = kernels.iter().find(|k| k.name == name).expect("the class");
            let mapping = Mapping::of(k, DType::BF16, Dialect::Cuda);
            let plan = crate::plan::register_layouts(k, DType::BF16, Dialect::Cuda, None, mapping);
            verify_registers(k, &plan).unwrap();
            assert_eq!(plan.dots.len(), 2, "{name}: Q K^T and P V");
            assert!(plan.dots.iter().all(|(_, d)| d.warpgroup && d.ring.is_some()), "{name}: both on wgmma, from rings");
            assert_eq!(plan.tensor_maps.len(), 3, "{name}: Q, K and V by bulk tensor copies");
            let mut broken = plan.clone();
            broken.dots[0].1.swizzle = [false, false];
            assert!(verify_registers(k, &broken).unwrap_err().contains("warpgroup"), "{name}");
            let mut broken = plan.clone();
            broken.dots[1].1.ring.as_mut().expect("a ring").barriers = None;
            assert!(verify_registers(k, &broken).unwrap_err().contains("bulk tensor copies"), "{name}");
        }
    }

    /// A `wgmma()` class whose rings leave room for a second program on a multiprocessor keeps
    /// the step's barrier; one whose rings fill it has its stages refilled by the last warp done
    /// with them, and counts placed anywhere but right after the barriers are caught.
    #[test]
    fn the_last_warp_refills_where_one_program_fills_a_multiprocessor() {
        let kernels = library_kernels("attention");
        for (name, by_last_warp) in
            [("attention_90a_64", false), ("attention_90a_80", false), ("attention_90a_128", true), ("attention_causal_90a_128", false)]
        {
            let k = kernels.iter().find(|k| k.name == name).expect("the class");
            let mapping = Mapping::of(k, DType::F16, Dialect::Cuda);
            let plan = crate::plan::register_layouts(k, DType::F16, Dialect::Cuda, None, mapping);
            let rings: Vec<_> = plan.dots.iter().map(|(_, d)| d.ring.expect("a ring")).collect();
            assert!(rings.iter().all(|r| r.done_counts.is_some() == by_last_warp), "{name}: {rings:?}");
            let bytes = plan.ring_words * 4;
            assert_eq!(2 * (bytes + crate::plan::dot_rings::SLOTS_RESERVE) > 228 * 1024, by_last_warp, "{name}: {bytes} bytes of rings");
            if by_last_warp {
                let mut broken = plan.clone();
                broken.dots[0].1.ring.as_mut().expect("a ring").done_counts = rings[0].barriers;
                assert!(verify_registers(k, &broken).unwrap_err().contains("last warp"), "{name}");
            }
        }
    }

    /// Only the class whose last warp refills three stages or more overlaps its steps (the next
    /// step's scores issued with this step's `P V`), both its dots, its two warpgroups taking
    /// turns; an overlap without the counts and turns without an overlap are caught.
    #[test]
    fn steps_overlap_only_where_the_last_warp_refills_three_stages() {
        let kernels = library_kernels("attention");
        for (name, overlapped) in [
            ("attention_90a_64", false),
            ("attention_causal_90a_64", false),
            ("attention_90a_80", false),
            ("attention_causal_90a_80", false),
            ("attention_90a_128", true),
            ("attention_causal_90a_128", false),
        ] {
            let k = kernels.iter().find(|k| k.name == name).expect("the class");
            let mapping = Mapping::of(k, DType::F16, Dialect::Cuda);
            let plan = crate::plan::register_layouts(k, DType::F16, Dialect::Cuda, None, mapping);
            let rings: Vec<_> = plan.dots.iter().map(|(_, d)| d.ring.expect("a ring")).collect();
            assert!(
                rings.iter().all(|r| r.overlapped == overlapped && r.turns == overlapped && (!overlapped || r.stages >= 3)),
                "{name}: {rings:?}"
            );
            if overlapped {
                let mut broken = plan.clone();
                broken.dots[0].1.ring.as_mut().expect("a ring").done_counts = None;
                assert!(verify_registers(k, &broken).unwrap_err().contains("overlaps its steps"), "{name}");
                let mut broken = plan.clone();
                broken.dots[0].1.ring.as_mut().expect("a ring").overlapped = false;
                assert!(verify_registers(k, &broken).unwrap_err().contains("take turns"), "{name}");
            }
        }
    }

    /// Under `bound(d:80)` the head dimension's whole tile is 128: the scores' products stop at
    /// the bound (five k16 steps of eight), V's lines of 80 columns are staged padded to two
    /// swizzle atoms, and products that stop off a k16 step are caught.
    #[test]
    fn warpgroup_products_stop_at_their_contraction_bound() {
        let kernels = library_kernels("attention");
        for (name, reach) in [("attention_90a_80", 80), ("attention_90a_128", 128)] {
            let k = kernels.iter().find(|k| k.name == name).expect("the class");
            let mapping = Mapping::of(k, DType::F16, Dialect::Cuda);
            let plan = crate::plan::register_layouts(k, DType::F16, Dialect::Cuda, None, mapping);
            verify_registers(k, &plan).unwrap();
            let (scores, pv) = (&plan.dots[0].1, &plan.dots[1].1);
            assert_eq!((scores.depth, scores.reach), (128, reach), "{name}: Q K^T over the head dimension");
            assert_eq!(pv.reach, pv.depth, "{name}: P V over every key of the step");
            assert_eq!((pv.tile.cols, pv.pitch(1), pv.atom_pieces(1).0), (reach, 128, 2), "{name}: V's lines in two atoms");
            let mut broken = plan.clone();
            broken.dots[0].1.reach = 72;
            assert!(verify_registers(k, &broken).unwrap_err().contains("products cover"), "{name}");
        }
    }

    #[test]
    fn a_register_plan_verifies_and_breaking_it_is_caught() {
        let k = matmul();
        let mapping = Mapping::of(&k, DType::F16, Dialect::Cuda);
        let plan = crate::plan::register_layouts(&k, DType::F16, Dialect::Cuda, None, mapping);
        verify_registers(&k, &plan).unwrap();
        assert!(!plan.dots.is_empty(), "the matmul's dot runs on tensor cores");

        // A tile of many elements said to be in every thread's one register.
        let mut broken = plan.clone();
        let wide = k.values.iter().position(|v| v.shape.elements() > 1).expect("a tile");
        broken.values[wide] = RegLayout::Replicated;
        assert!(verify_registers(&k, &broken).unwrap_err().contains("replicated"));

        // A dot accumulating into an accumulator of another layout.
        let mut broken = plan.clone();
        let into = broken.dots[0].1.into.expect("the dot accumulates in place");
        broken.vars[into.0 as usize] = RegLayout::Blocked;
        assert!(verify_registers(&k, &broken).unwrap_err().contains("another layout"));
    }
}
