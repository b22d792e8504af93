//! 16-byte loads and stores: runs of a tile read or written as one access where the tensor
//! allows, 16-bit elements kept packed in 32-bit words, and loads issued ahead of their use.

use super::*;
use crate::emit::Lanes;
use dt_core::algo::DimId;
use dt_core::DType;

impl Emitter<'_> {
    /// The run length for 16-byte accesses to a tensor indexed along `axes` by a tile of
    /// `shape`, if runs apply ([`Mapping::vector_run`]).
    pub(super) fn vector_run(&self, shape: &Shape, axes: &[DimId]) -> Option<usize> {
        self.mapping.vector_run(shape, axes)
    }

    /// Loops over the runs of `v` consecutive elements of `shape` this thread holds, with the
    /// lanes of each run's first element decoded; `body` gets the lanes and the C expression of
    /// the run's first register.
    pub(super) fn for_runs(&mut self, shape: &Shape, v: usize, body: impl FnOnce(&mut Self, &Lanes, String)) {
        let runs = self.regs(shape.elements()) / v;
        let t = self.threads;
        match self.run_window {
            Some((run, w)) if w == v => {
                self.line("{");
                self.line(&format!("    const int c = {run};"));
            }
            _ => {
                self.line(unroll(runs));
                self.line(&format!("for (int c = 0; c < {runs}; c++) {{"));
            }
        }
        self.depth += 1;
        let before = std::mem::take(&mut self.out);
        self.with_lanes(shape, |e, lanes| body(e, lanes, format!("c * {v}")));
        let inner = std::mem::replace(&mut self.out, before);
        // A run read whole from a staged buffer needs neither its element nor its lanes.
        if mentions(&inner, "e") {
            self.line(&format!("const int e = (c * {t} + tid) * {v};"));
        }
        self.out += &inner;
        self.depth -= 1;
        self.line("}");
    }

    /// The `v` values in the 16 bytes of `uint4 q`, as f32 expressions, in memory order.
    pub(super) fn unpack_words(&self, v: usize) -> Vec<String> {
        let word = |i: usize| ["q.x", "q.y", "q.z", "q.w"][i];
        match self.dtype {
            DType::F32 => (0..v).map(|j| format!("__uint_as_float({})", word(j))).collect(),
            DType::F16 | DType::BF16 => {
                let load = format!("dt_load_{}", self.dtype.name());
                (0..v)
                    .map(|j| {
                        if j % 2 == 0 {
                            format!("{load}((unsigned short)({} & 0xffffu))", word(j / 2))
                        } else {
                            format!("{load}((unsigned short)({} >> 16))", word(j / 2))
                        }
                    })
                    .collect()
            }
        }
    }

    /// The four 32-bit words holding registers `BASE ..` of `src` stored as the element type.
    pub(super) fn pack_words(&self, src: &str, v: usize) -> Vec<String> {
        match self.dtype {
            DType::F32 => (0..v).map(|j| format!("__float_as_uint({src}[BASE + {j}])")).collect(),
            DType::F16 | DType::BF16 => {
                let pack = format!("dt_pack2_{}", self.dtype.name());
                (0..v / 2).map(|w| format!("{pack}({src}[BASE + {}], {src}[BASE + {}])", 2 * w, 2 * w + 1)).collect()
            }
        }
    }

    /// A 16-byte load from `addr` (an element pointer) of an input indexed along `axes`. In a
    /// `backward` loop, an input indexed along every dimension of the output (the row, not
    /// layernorm's weights, which every row reads) is read for the last time.
    pub(super) fn vector_load(&self, addr: &str, axes: &[DimId]) -> String {
        if self.once && self.k.output.dims.iter().all(|d| axes.contains(d)) {
            format!("dt_load_once((const uint4*)({addr}))")
        } else {
            format!("*(const uint4*)({addr})")
        }
    }

    /// A 16-byte store of `word` to `addr` (an element pointer).
    pub(super) fn vector_store(&self, addr: &str, word: &str) -> String {
        if self.once {
            format!("dt_store_once((uint4*)({addr}), {word})")
        } else {
            format!("*(uint4*)({addr}) = {word}")
        }
    }

    /// Issues the 16-byte loads of a 16-bit tile of `input` read along `axes` at the current
    /// offsets into `q[c]`, with `fast[c]` saying which runs it loaded (the others are read one
    /// element at a time where they are unpacked).
    pub(super) fn issue_vector_loads(&mut self, shape: &Shape, input: usize, axes: &[DimId], q: &str, fast: &str) {
        let v = self.vector_run(shape, axes).unwrap_or(1);
        self.for_runs(shape, v, |e, lanes, _| {
            e.vector_access(input, axes, lanes, v, fast, true);
            e.line(&format!("if ({fast}[c]) {q}[c] = {};", e.vector_load(&format!("in{input} + a"), axes)));
        });
    }

    /// Prints, for the run at `lanes` of a load of input `input`, its element offset `a` (where
    /// the caller `reads_memory` there, or checks its alignment) and `fast[c]`: whether it is one
    /// 16-byte access (contiguous, inside the tensor, aligned; for whole runs, inside).
    pub(super) fn vector_access(&mut self, input: usize, axes: &[DimId], lanes: &Lanes, v: usize, fast: &str, reads_memory: bool) {
        let strides = self.input_strides(input);
        let stride = |a: usize| strides[a].clone();
        let last = axes.len() - 1;
        let (inside, addr) = self.address(axes, lanes, stride);
        if self.whole_runs {
            if reads_memory {
                self.line(&format!("const {} a = {addr};", crate::emit::GPU_INDEX));
            }
            self.line(&format!("{fast}[c] = {inside};"));
            return;
        }
        self.line(&format!("const {} a = {addr};", crate::emit::GPU_INDEX));
        let (end_ok, _) = self.address(axes, &lanes.shifted(axes[last], v - 1), stride);
        self.line(&format!("{fast}[c] = {} == 1 && {end_ok} && ((unsigned long long)(in{input} + a) & 15) == 0;", stride(last)));
    }

    /// Whether value `id` is a 16-bit load kept as loaded: in a 16-bit kernel, a tile read in
    /// 16-byte runs whose fill the element type holds exactly. Its registers hold the raw words
    /// (`dt_f16s<R>` / `dt_bf16s<R>` of the runtime), half the registers of the f32 values, and
    /// every read of an element widens it there (one instruction); so a row kept across the
    /// reductions of layernorm takes 8 registers per 16 elements, not 16.
    pub(super) fn packed(&self, id: ValueId) -> bool {
        self.dtype.size_bytes() == 2 && self.read_in_runs(id)
    }

    /// Whether value `id` is a load read in 16-byte runs that its element type holds as loaded
    /// (fill included): the loads a loop may issue ahead (`plan::staged_rows`).
    pub(super) fn read_in_runs(&self, id: ValueId) -> bool {
        crate::plan::staged_rows::read_in_runs(self.k, self.dtype, self.mapping, &self.plan, id)
    }

    /// The words and flags of load `id` where a loop issued its runs ahead ([`Self::prefetched`]).
    pub(super) fn prefetched_runs(&self, id: ValueId) -> Option<(String, String)> {
        self.prefetched.iter().find(|(x, ..)| *x == id).map(|(_, q, f)| (q.clone(), f.clone()))
    }

    /// A [`Self::packed`] load: its 16-byte runs (issued ahead by the block loop, or here), and
    /// element by element, as raw 16-bit values, the runs that are partly out of bounds,
    /// misaligned or strided (`fill` where out of bounds).
    pub(super) fn packed_load(&mut self, id: ValueId, input: usize, axes: &[DimId], fill: f32) {
        let shape = self.k.value(id).shape.clone();
        let v = self.vector_run(&shape, axes).unwrap_or(1);
        debug_assert_eq!(v, 8, "16-byte runs of 16-bit values");
        let runs = self.regs(shape.elements()) / v;
        let dst = format!("v{}", id.0);
        let strides = self.input_strides(input);
        let stride = |a: usize| strides[a].clone();
        let last = axes.len() - 1;
        let bits = match self.dtype {
            DType::BF16 => half::bf16::from_f32(fill).to_bits(),
            _ => half::f16::from_f32(fill).to_bits(),
        };
        self.line(&format!("dt_{}s<{}> {dst}; /* 16-bit values as loaded */", self.dtype.name(), runs * v));
        let (q, fast) = match self.prefetched_runs(id) {
            Some(names) => names,
            None => {
                let (q, fast) = (self.fresh("q"), self.fresh("f"));
                self.line(&format!("uint4 {q}[{runs}];"));
                self.line(&format!("bool {fast}[{runs}];"));
                self.issue_vector_loads(&shape, input, axes, &q, &fast);
                (q, fast)
            }
        };
        self.for_runs(&shape, v, |e, lanes, _| {
            let (_, addr) = e.address(axes, lanes, stride);
            e.line(&format!("if ({fast}[c]) {{"));
            e.line(&format!("    {dst}.w[c] = {q}[c];"));
            e.line("} else {");
            if e.whole_runs {
                let word = (bits as u32) | ((bits as u32) << 16);
                e.line(&format!("    {dst}.w[c] = make_uint4({word:#x}u, {word:#x}u, {word:#x}u, {word:#x}u);"));
                e.line("}");
                return;
            }
            e.line(&format!("    const {} a = {addr};", crate::emit::GPU_INDEX));
            e.line("    uint4 w = make_uint4(0u, 0u, 0u, 0u);");
            let (cond, _) = e.address(axes, &lanes.shifted_by(axes[last], "j"), stride);
            e.line("    #pragma unroll");
            e.line(&format!(
                "    for (int j = 0; j < {v}; j++) dt_shift_in8(w, ({cond}) ? (unsigned)in{input}[a + j * {}] : {bits:#06x}u);",
                stride(last)
            ));
            e.line(&format!("    {dst}.w[c] = w;"));
            e.line("}");
        });
    }
}
