//! The register plan (`super::layouts`) in its readable form (`dtc emit --target gpu-plan`).

use super::layouts::*;
use super::pipelines::stages_asked;
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;

/// The register plan `p` of kernel `k` in its readable form (`dtc emit --target gpu-plan`): the
/// tensor-core dots with their geometry, staging and pipelines, and how many values and
/// accumulators each layout holds.
pub(crate) fn print(k: &Kernel, dtype: DType, p: &Plan, out: &mut String) {
    use std::fmt::Write;
    let dim = |d: DimId| k.dim_name(d).to_string();
    for (id, d) in &p.dots {
        let t = d.tile;
        let (fm, fn_) = t.frags();
        let (fr, fc) = t.isa.fragment();
        let unit = if d.wgmma {
            "wgmma (the warp-specialized loop)".to_string()
        } else if d.warpgroup {
            format!("wgmma m64n{}k16 by {} warpgroups (wgmma()), the mma.sync layout", t.cols, t.wm / 4)
        } else {
            format!("{} m{fr}n{fc}k{}", t.isa.name(), t.isa.k_step())
        };
        let _ = writeln!(
            out,
            "  dot       %{} [{}:{}, {}:{}] over {}:{}{}: {unit}, {} x {} warps of {fm} x {fn_} fragments{}",
            id.0,
            dim(t.m),
            t.rows,
            dim(t.n),
            t.cols,
            dim(d.k),
            d.depth,
            if d.reach < d.depth { format!(" (products over the first {}, its bound)", d.reach) } else { String::new() },
            t.wm,
            t.wn,
            d.into.map_or(String::new(), |v| format!(", into $acc{}", v.0))
        );
        if d.wgmma {
            continue;
        }
        for (i, (name, v)) in [("A", d.a), ("B", d.b)].into_iter().enumerate() {
            let lines = match (d.trans(i), t.isa) {
                (true, _) if d.warpgroup => "[K][rows], MN-major descriptors",
                (false, _) if d.warpgroup => "[rows][K], K-major descriptors",
                (true, MatrixIsa::MmaSync) => "[K][rows], ldmatrix.trans",
                (false, MatrixIsa::MmaSync) => "[rows][K], ldmatrix",
                (true, _) => "[K][rows]",
                (false, _) => "[rows][K]",
            };
            if i == 0 && d.a_in_fragments {
                let _ =
                    writeln!(out, "    {name}      %{}: accumulator fragments repacked in registers (rounded to {})", v.0, dtype.name());
                continue;
            }
            let from = match &d.direct[i] {
                Some(l) => format!("{} copied from global memory", k.inputs[l.input].name),
                None if t.isa.is_fma() => "computed, from registers".to_string(),
                None => format!("computed, from registers (rounded to {})", dtype.name()),
            };
            let copies = |r: RingBuffers| match r.maps[i] {
                Some(m) => {
                    let spec = &p.tensor_maps[m];
                    let boxes: Vec<String> = spec.boxes.iter().map(|b| b.to_string()).collect();
                    let slice = match r.multicast.and_then(|mc| mc.slice_lines[i].map(|l| (l, mc.programs))) {
                        Some((lines, n)) => format!("; each of the cluster's {n} programs copies {lines} lines of it into all of them"),
                        None => String::new(),
                    };
                    format!("bulk tensor copies through map {m}, box [{}]{slice}", boxes.join(", "))
                }
                None => "cp.async".to_string(),
            };
            let ring = match d.ring {
                Some(r) if r.at[i].is_none() => ", in its slot at every step of the loop whose rings feed the dot".to_string(),
                Some(r) if d.direct[i].is_none() => {
                    format!(
                        ", held for the loop (one buffer of its rings, stored before it; {})",
                        stages_asked(k, *id, r.stages, &p.target)
                    )
                }
                Some(r) if r.held[i] => format!(", held for the loop (one buffer, copied before it, {})", copies(r)),
                Some(r) => format!(", a ring of {} buffers ({}, {})", r.stages, copies(r), stages_asked(k, *id, r.stages, &p.target)),
                None => String::new(),
            };
            let swizzled = if d.swizzled(i) { " (swizzled in 128-byte atoms)" } else { "" };
            let _ = writeln!(out, "    {name}      %{}: {from}, staged {lines}, lines of {} elements{swizzled}{ring}", v.0, d.pitch(i));
            if d.warpgroup {
                let _ = writeln!(out, "           {}", d.wgmma_descriptor(i).describe());
            }
        }
        if let Some(r) = d.ring.filter(|r| r.barriers.is_some()) {
            let refills = match r.done_counts {
                Some(at) => format!(
                    "the last warp done with a stage (counts of warps at word {at}) refills it with the step {} ahead; no block-wide barrier in the loop",
                    r.stages
                ),
                None => "thread 0 refills the stage the step before read, after the step's block-wide barrier".to_string(),
            };
            let refills = match r.multicast {
                Some(mc) => format!(
                    "{refills}, once every program of the cluster is done with it (barriers `empty` at word {}, {} arrivals)",
                    mc.empty, mc.programs
                ),
                None => refills,
            };
            let _ = writeln!(out, "    refills   {refills}");
            if r.overlapped {
                let _ = writeln!(
                    out,
                    "    overlap   each step issues its first dot with the previous step's last one (A fragments carried in registers), which runs while the step's statements use the first's result{}",
                    if r.turns { "; the two warpgroups take turns issuing them" } else { "" }
                );
            }
        }
        if d.stages > 1 {
            let _ =
                writeln!(out, "    pipeline  {} buffers per operand, cp.async ({})", d.stages, stages_asked(k, *id, d.stages, &p.target));
        }
    }
    // Of the values and accumulators the body has (the lowering leaves ids of dropped ones).
    let (mut lets, mut updates) = (Vec::new(), Vec::new());
    collect(&k.body, &mut lets, &mut updates);
    let values: Vec<RegLayout> = lets.iter().map(|(id, _)| p.values[id.0 as usize]).collect();
    let mut vars = dt_core::kir::written_vars(&k.body);
    vars.sort();
    vars.dedup();
    let vars: Vec<RegLayout> = vars.iter().map(|v| p.vars[v.0 as usize]).collect();
    let count = |ls: &[RegLayout]| {
        let mut n = [0usize; 5];
        for l in ls {
            match l {
                RegLayout::Blocked => n[0] += 1,
                RegLayout::Mma(_) => n[1] += 1,
                RegLayout::Replicated => n[2] += 1,
                RegLayout::Runs(_) => n[3] += 1,
                RegLayout::MmaRows(_) => n[4] += 1,
            }
        }
        let rows = if n[4] > 0 { format!(", {} in accumulator rows", n[4]) } else { String::new() };
        format!("{} blocked, {} in accumulator layout, {} replicated, {} in runs{rows}", n[0], n[1], n[2], n[3])
    };
    for v in &p.unit_rescales {
        let _ = writeln!(out, "  rescale   %{}: skipped where every factor a thread holds is 1", v.0);
    }
    let _ = writeln!(out, "  values    {}", count(&values));
    let _ = writeln!(out, "  accs      {}", count(&vars));
}
