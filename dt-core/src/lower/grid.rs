//! Pass 1: the launch grid from `block` and `map`.

use crate::algo::{FuncId, Program};
use crate::kir::Grid;
use crate::schedule::MapEntry;

/// Blocked dimensions in the order of `map`, or, without `map`, in the order of the Func's
/// dimensions with the last varying fastest (row-major over blocks).
pub fn build_grid(p: &Program, k: FuncId) -> Grid {
    let f = p.func(k);
    let s = &f.schedule;
    // Blocked dimensions in the Func's own order, so that printing is stable, then a contraction
    // blocked to split it over a cluster (`cluster(k:N)`), which varies fastest.
    let contraction = s.block.iter().filter(|(d, _)| !f.dims.contains(d)).copied();
    let blocked: Vec<_> = f.dims.iter().filter_map(|d| s.block_extent(*d).map(|b| (*d, b))).chain(contraction).collect();
    let order = match &s.map {
        Some(m) => m.clone(),
        None => blocked.iter().map(|(d, _)| MapEntry::Whole(*d)).collect(),
    };
    let mut origin = String::new();
    if !blocked.is_empty() {
        origin = format!("block({})", blocked.iter().map(|(d, b)| format!("{}:{b}", p.dim_name(*d))).collect::<Vec<_>>().join(", "));
    }
    if let Some(m) = &s.map {
        let entries: Vec<String> = m
            .iter()
            .map(|e| match e {
                MapEntry::Whole(d) => p.dim_name(*d).to_string(),
                MapEntry::Outer { dim, factor } => {
                    let inner = m.iter().find_map(|x| match x {
                        MapEntry::Inner { dim: d2, name, .. } if d2 == dim => Some(name.clone()),
                        _ => None,
                    });
                    format!("{}:{}/{factor}", p.dim_name(*dim), inner.unwrap_or_default())
                }
                MapEntry::Inner { name, .. } => name.clone(),
            })
            .collect();
        origin += &format!(" map({})", entries.join(", "));
    }
    Grid { blocked, order, cluster: s.cluster, multicast: s.multicast, descending: Vec::new(), origin }
}
