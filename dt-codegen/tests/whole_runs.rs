//! Kernels built for whole 16-byte runs (`Layouts::WholeRuns`): beside each kernel whose tiles
//! are read or written in 16-byte runs, the emitted file holds one (`_whole`) for tensors whose
//! runs are all aligned and either inside or outside the tensor, which checks a run's first
//! element only and never goes element by element. That both compute what the reference does
//! is checked by `hip_cpu_matches_reference` (here, on the CPU) and `gpu_matches_reference`.
//! Rows taken one per step are not bounds-checked at all.

mod common;

use common::{emitted, kernel_text};
use dt_codegen::emit::gpu::{self, Layouts};
use dt_core::DType;

const SOFTMAX: &str = "Func m, s, out; In A; Var x; RVar y;
    m[x] = rmax(A[x, y], y);
    s[x] = rsum(exp(A[x, y] - m[x]), y);
    out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
    out.block(x:1); out.tensorize(x:0, y:0); out.bound(y:1024); out.num_warps(2);
    m.fuse_at(out, x); s.fuse_at(out, x);
    out.dtypes(f16, f32); out.compile();";

#[test]
fn kernels_for_whole_runs_check_each_run_once_and_never_go_element_by_element() {
    for (dtype, run) in [(DType::F16, 8), (DType::F32, 4)] {
        let (file, kernels) = emitted(SOFTMAX, dtype);
        let any = format!("dt_out_{}", dtype.name());
        let whole = gpu::whole_runs_symbol(&any);
        assert_eq!(kernels, vec![(any.clone(), Layouts::Any), (whole.clone(), Layouts::WholeRuns)]);
        let (any, whole) = (kernel_text(&file, &any), kernel_text(&file, &whole));
        // Any layout: alignment and contiguity checked per run, the last element's bounds too,
        // and a fallback element by element.
        assert!(any.contains("& 15) == 0") && any.contains(&format!("+ {})", run - 1)), "{any}");
        // Whole runs: none of that.
        assert!(!whole.contains("& 15) == 0") && !whole.contains(&format!("+ {})", run - 1)), "{whole}");
        assert!(!whole.contains("dt_shift_in8") && !whole.contains("in0[a + 1 *") && !whole.contains("out[a + 1 *"), "{whole}");
    }
}

#[test]
fn kernels_for_whole_runs_mask_each_run_once() {
    // Softmax's exponentials are masked with the sum's 0 along the row. Where runs are whole, a
    // run is valid or not as a whole: the test reads the run's first lane, the same expression
    // for every register of the run, so the compiler makes one comparison of it per run.
    for (dtype, run) in [(DType::F16, 8), (DType::F32, 4)] {
        let (file, _) = emitted(SOFTMAX, dtype);
        let any = format!("dt_out_{}", dtype.name());
        let whole = gpu::whole_runs_symbol(&any);
        let (any, whole) = (kernel_text(&file, &any), kernel_text(&file, &whole));
        fn masks(text: &str) -> Vec<&str> {
            text.lines().filter(|l| l.contains(": 0e0f;") && l.contains("< (unsigned)s1")).map(str::trim).collect()
        }
        let first_lane = format!("(int)((unsigned)(((r / {run}) * 64 + tid) * {run}) / 1u % 1024u)");
        let (m_any, m_whole) = (masks(any), masks(whole));
        assert!(!m_any.is_empty() && m_any.iter().all(|l| !l.contains(&first_lane)), "{any}");
        assert!(!m_whole.is_empty() && m_whole.iter().all(|l| l.contains(&first_lane)), "{whole}");
    }
}

#[test]
fn kernels_without_runs_have_no_kernel_for_whole_runs() {
    // Tiles of one element per thread read nothing in 16-byte runs.
    let scalar = "Func out; In A; Var x; out[x] = A[x] * 2; out.block(x:32); out.tensorize(x:32); out.num_warps(1); out.compile();";
    let (_, kernels) = emitted(scalar, DType::F16);
    assert_eq!(kernels, vec![("dt_out_f16".to_string(), Layouts::Any)]);
}

#[test]
fn rows_taken_one_per_step_are_never_bounds_checked() {
    // A loop of step 1 keeps its offset, its one lane, below the number of rows (`s0`): a row
    // guard on its loads and stores would always hold, and is left out, in both kernels. With
    // two rows per step the second may lie past the end, and is checked.
    let (file, kernels) = emitted(SOFTMAX, DType::F32);
    for (symbol, _) in &kernels {
        let text = kernel_text(&file, symbol);
        assert!(text.contains("in0 + a") && !text.contains("< (unsigned)s0"), "{text}");
    }
    let two_rows = SOFTMAX.replace("out.block(x:1); out.tensorize(x:0, y:0);", "out.block(x:2); out.tensorize(x:2, y:0);");
    let (file, kernels) = emitted(&two_rows, DType::F32);
    for (symbol, _) in &kernels {
        let text = kernel_text(&file, symbol);
        assert!(text.contains("< (unsigned)s0"), "{text}");
    }
}

/// The plan builds a kernel's twin for whole runs (`plan::twins`) exactly where its code differs
/// from the kernel for any layout: over every library and test spec and schedules drawn at random
/// from each, in both dialects and every element type the kernel is built for.
#[test]
fn the_twin_for_whole_runs_is_built_exactly_where_its_code_differs() {
    use dt_codegen::emit::gpu::Dialect;
    let mut rng = dt_core::explore::Rng::new(0x7A1);
    let opts = dt_core::explore::Options { max_size: 2048, max_tile_elements: 1 << 13, max_cluster: 0 };
    let mut checked = 0;
    for rel in common::SPECS {
        let src = common::read_spec(rel);
        let base = dt_core::compile_spec(&src).expect("spec checks");
        let algorithm = dt_core::explore::algorithm_text(&src).expect("spec parses");
        let mut specs = vec![src.clone()];
        specs.extend((0..common::cases(24)).map(|_| dt_core::explore::random_spec(&algorithm, &base, &mut rng, &opts)));
        for spec in &specs {
            let p = dt_core::compile_spec(spec).expect("schedule checks");
            for k in dt_core::lower::lower_all(&p).expect("lowers") {
                for dtype in &k.dtypes {
                    for dialect in [Dialect::Cuda, Dialect::Hip] {
                        let symbol = dt_codegen::emit::symbol(&k, *dtype);
                        let Ok((any, _)) = gpu::emit_kernel(&k, *dtype, &symbol, dialect, Layouts::Any) else { continue };
                        let whole = gpu::whole_runs_symbol(&symbol);
                        let (text, _) = gpu::emit_kernel(&k, *dtype, &whole, dialect, Layouts::WholeRuns).expect("the twin emits");
                        let differs = text.replace(&whole, &symbol) != any && !k.warp_specialize;
                        let twins = dt_codegen::plan::twins(&k, *dtype, dialect).expect("plans");
                        assert_eq!(
                            twins.contains(&Layouts::WholeRuns),
                            differs,
                            "{rel}, kernel {} {dtype} {dialect:?}:\n{}",
                            k.name,
                            dt_core::kir::print(&k)
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 200, "{checked} kernel instances");
}
