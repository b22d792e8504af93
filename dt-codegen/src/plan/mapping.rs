//! How the threads of a program hold a blocked tile (the older path's register mapping).

use crate::emit::gpu::Dialect;
use dt_core::algo::DimId;
use dt_core::kir::*;
use dt_core::DType;

/// Which thread holds which element of a tile. A tile of `n` elements whose count is a multiple
/// of `threads * vector` is dealt in runs of `vector` consecutive elements, so that a thread's run
/// along the last dimension is one 16-byte load or store: register `r` of thread `tid` holds
/// element `((r / vector) * threads + tid) * vector + r % vector`. Any other tile is dealt one
/// element at a time: element `tid + r * threads`. Either way consecutive threads hold
/// consecutive elements (coalesced), and two tiles of one size share the mapping, so element-wise
/// work between them needs no communication.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mapping {
    pub threads: usize,
    pub vector: usize,
}

impl Mapping {
    /// The mapping of kernel `k`'s program built for `dtype` in `dialect`: all its threads,
    /// 16-byte runs.
    pub(crate) fn of(k: &Kernel, dtype: DType, dialect: Dialect) -> Mapping {
        let threads = dialect.warps(k.num_warps) * dialect.warp_size();
        Mapping { threads: threads as usize, vector: crate::emit::gpu::VECTOR_BYTES / dtype.size_bytes() }
    }

    /// Consecutive elements per run for a tile of `n` elements.
    pub(crate) fn width(&self, n: usize) -> usize {
        if self.vector > 1 && n.is_multiple_of(self.threads * self.vector) {
            self.vector
        } else {
            1
        }
    }

    /// The registers each thread takes for a tile of `n` elements.
    pub(crate) fn regs(&self, n: usize) -> usize {
        n.div_ceil(self.threads).max(1)
    }

    /// The run length for 16-byte accesses to a tensor indexed along `axes` by a tile of
    /// `shape`, if runs apply: the tile is dealt in runs ([`Self::width`]) and a run lies along
    /// the tensor's last axis, within one row of the tile.
    pub(crate) fn vector_run(&self, shape: &Shape, axes: &[DimId]) -> Option<usize> {
        let v = self.width(shape.elements());
        let (last, ext) = *shape.0.last()?;
        (v > 1 && axes.last() == Some(&last) && (ext as usize).is_multiple_of(v)).then_some(v)
    }

    /// The element register `r` of thread `tid` holds, as a C expression.
    pub(crate) fn element(&self, n: usize, r: &str) -> String {
        match self.width(n) {
            1 => self.run_start(n, r),
            v => format!("{} + {r} % {v}", self.run_start(n, r)),
        }
    }

    /// The first element of the run that register `r` of thread `tid` holds an element of, as a
    /// C expression that is the same for every register of the run (a run of one element where
    /// the tile is dealt one element at a time).
    pub(crate) fn run_start(&self, n: usize, r: &str) -> String {
        let (t, v) = (self.threads, self.width(n));
        if v == 1 {
            format!("tid + {r} * {t}")
        } else {
            format!("(({r} / {v}) * {t} + tid) * {v}")
        }
    }

    /// Whether a reduction of `shape` over `dim` can combine each thread's own registers first:
    /// `dim` is the last dimension and each of its rows is dealt evenly over all threads, so that
    /// registers `i * n / threads ..` of every thread hold row `i`. Returns the number of rows
    /// (at most 32, each kept in a register of every thread).
    pub(crate) fn register_reduce(&self, shape: &Shape, dim: DimId) -> Option<usize> {
        let n = shape.extent(dim)? as usize;
        let last = shape.0.last().map(|(d, _)| *d);
        let rows = shape.elements() / n.max(1);
        let ok = last == Some(dim) && n.is_multiple_of(self.threads * self.width(shape.elements())) && rows <= 32;
        ok.then_some(rows)
    }
}
