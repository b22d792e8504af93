//! Helpers shared by the integration tests: spec discovery, random inputs, tolerant comparison.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use dt_codegen::reference::{approximate, compare, compare_within, rounding_slack, ulp};
#[allow(unused_imports)]
pub use dt_core::explore::{random_args, random_values};
use dt_core::DType;
use std::path::PathBuf;

/// Every library spec and test spec, as paths from the workspace root: what the tests that run
/// generated code (on a GPU, or the HIP C on the CPU) cover.
pub const SPECS: &[&str] = &[
    "dt-kernels/specs/matmul.dt",
    "dt-kernels/specs/mm_leaky_relu.dt",
    "dt-kernels/specs/softmax.dt",
    "dt-kernels/specs/layernorm.dt",
    "dt-kernels/specs/dyt.dt",
    "dt-kernels/specs/attention.dt",
    "dt-codegen/tests/specs/vadd.dt",
    "dt-codegen/tests/specs/softmax_fused.dt",
    "dt-codegen/tests/specs/matmul_grouped.dt",
    "dt-codegen/tests/specs/swish.dt",
    "dt-codegen/tests/specs/matmul_mma.dt",
    "dt-codegen/tests/specs/row_stats.dt",
    // A size class for tensors of whole 16-byte runs only (`requires(aligned)`).
    "dt-codegen/tests/specs/aligned_rows.dt",
    // The talk's two-matmul listing as the talk gives it: `mm` computed for all of `l` at `m`.
    "dt-codegen/tests/specs/talk_2mm.dt",
    // The same on the tensor cores (f16, bf16): a ring over the loop across the result's columns.
    "dt-codegen/tests/specs/talk_2mm_f16.dt",
    // The talk's attention listing: a chain of `fuse_at` (`mm` in `e`, `e` in `attention`).
    "dt-codegen/tests/specs/talk_attention.dt",
    // Row statistics in steps of 256 computed inside a loop over the row in steps of one.
    "dt-codegen/tests/specs/rows_in_steps_of_one.dt",
    // Exponentials split between the special-function unit and the FMA units (`fma_exp`).
    "dt-codegen/tests/specs/exps_on_fma.dt",
];

/// The workspace root: where this test was built, or, when the binary runs elsewhere (copied
/// to a GPU machine), the current directory.
pub fn workspace() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf();
    if built.exists() {
        built
    } else {
        std::env::current_dir().expect("current directory")
    }
}

/// A spec's path relative to the workspace, and its text.
pub fn read_spec(rel: &str) -> String {
    std::fs::read_to_string(workspace().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The item of an emitted file's `items` that launch parameters `info` belong to (`symbol` gives
/// an item's symbol): the item of that symbol (the kernel, built for any layout or, where it
/// `requires(aligned)`, for whole runs), or the one whose kernel for whole runs or whose
/// specialized twin it is.
pub fn item_of<'a, T>(items: &'a [T], symbol: impl Fn(&T) -> &str, info: &dt_codegen::emit::gpu::LaunchInfo) -> &'a T {
    items
        .iter()
        .find(|i| symbol(i) == info.symbol || info.layouts.symbol(symbol(i)) == info.symbol)
        .unwrap_or_else(|| panic!("no kernel for symbol `{}`", info.symbol))
}

/// Sizes drawn for any layout, made to fit the kernel of `info`: for the kernel for whole runs,
/// [`whole_run_sizes`]; for the specialized twin, also the sizes it is specialized for.
pub fn sizes_for(sizes: &mut [usize], k: &dt_core::kir::Kernel, info: &dt_codegen::emit::gpu::LaunchInfo) {
    use dt_codegen::emit::gpu::Layouts;
    if info.layouts == Layouts::Specialized {
        for (d, n) in &k.specialize {
            sizes[d.index()] = *n as usize;
        }
        // Few elements besides: the other dimensions halve until the launch has at most 2^16.
        let fixed = |i: usize| k.specialize.iter().any(|(d, _)| d.index() == i);
        while sizes.iter().product::<usize>() > 1 << 16 {
            let Some(i) = (0..sizes.len()).filter(|&i| !fixed(i) && sizes[i] > 1).max_by_key(|&i| sizes[i]) else { break };
            sizes[i] = sizes[i].div_ceil(2);
        }
    }
    // A kernel for whole runs needs them; one that reads through tensor maps, rows of 16-byte
    // multiples, which whole runs give; a warp-specialized one only of its output (its
    // producer's threads copy inputs of other rows).
    if info.layouts != Layouts::Any || !info.tensor_maps.is_empty() && !k.warp_specialize {
        whole_run_sizes(sizes, k);
    } else if !info.tensor_maps.is_empty() {
        whole_run_size(sizes, k, &k.output);
    }
}

/// Rounds the sizes of the dimensions along which `k` reads or writes a tensor's last axis up
/// to multiples of 8 (down where a bound of `k` caps them), so that the runs of every tensor are
/// whole and the kernel built for them runs.
pub fn whole_run_sizes(sizes: &mut [usize], k: &dt_core::kir::Kernel) {
    for t in k.inputs.iter().chain([&k.output]) {
        whole_run_size(sizes, k, t);
    }
}

/// Rounds the size of the dimension along which `k` reads or writes tensor `t`'s last axis as
/// [`whole_run_sizes`] does.
pub fn whole_run_size(sizes: &mut [usize], k: &dt_core::kir::Kernel, t: &dt_core::kir::TensorParam) {
    let Some(d) = t.dims.last() else { return };
    let cap = k.bounds.iter().find(|(b, _)| b == d).map_or(usize::MAX, |(_, b)| (*b as usize / 8 * 8).max(8));
    let n = &mut sizes[d.index()];
    *n = n.next_multiple_of(8).min(cap);
}

/// The emitted CUDA file of `src` for `dtype`, and the symbols and layouts of its kernels.
pub fn emitted(src: &str, dtype: DType) -> (String, Vec<(String, dt_codegen::emit::gpu::Layouts)>) {
    use dt_codegen::emit::gpu;
    let p = dt_core::compile_spec(src).expect("spec checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let items: Vec<(&dt_core::kir::Kernel, DType, String)> =
        kernels.iter().map(|k| (k, dtype, dt_codegen::emit::symbol(k, dtype))).collect();
    let (text, infos) = gpu::emit_file("test", gpu::Dialect::Cuda, &items).expect("emits");
    (text, infos.into_iter().map(|i| (i.symbol, i.layouts)).collect())
}

/// The text of kernel `symbol` in an emitted file.
pub fn kernel_text<'a>(file: &'a str, symbol: &str) -> &'a str {
    let start = file.find(&format!(" {symbol}(")).unwrap_or_else(|| panic!("no kernel {symbol}"));
    let end = file[start..].find("\n}\n").map_or(file.len(), |e| start + e);
    &file[start..end]
}

/// `.npy` bytes of f32 `values` under a header written by hand, so that a test can make it lie:
/// element type `descr` (`<f4`), Fortran order or not, and the shape as Python writes it
/// (`(4,)`, `(2, 3)`).
pub fn npy_bytes(descr: &str, fortran: bool, shape: &str, values: &[f32]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}", if fortran { "True" } else { "False" });
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    values.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
    bytes
}

/// The case count of a property test: `PROPTEST_CASES` where set (proptest's own variable, for
/// a longer or a quicker run), else the test's `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}
