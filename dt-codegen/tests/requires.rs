//! `requires(cuda)` and `requires(sm_90)`: a size class built for one target only. The CPU and
//! HIP files go without it, and there the library runs the next class; on the target it runs.
//! `requires(aligned)`: a size class for tensors of whole 16-byte runs only, whose kernel is
//! built for them; the library runs the next class on any other tensors.

use dt_codegen::generate::generate;
use dt_core::signature::GpuFeatures;
use dt_core::DType;

/// Rows of up to 1024 in one step, for `requirement` only; any length in steps of 256 elsewhere;
/// f16 and f32.
fn spec(requirement: &str) -> String {
    format!(
        "Func out; In A; Var x, y;\nout[x, y] = A[x, y] * 2.0;\n\
         schedule out_1k {{ out.block(x:1); out.tensorize(x:1, y:0); out.bound(y:1024); out.requires({requirement}); out.dtypes(f16, f32); out.compile(); }}\n\
         out.block(x:1); out.tensorize(x:1, y:256); out.dtypes(f16, f32); out.compile();\n"
    )
}

/// The class a run of 8 rows of 1000 runs on a GPU offering `features`.
fn chosen(src: &str, features: GpuFeatures) -> String {
    chosen_for(src, 1000, DType::F32, features)
}

/// The class a run of 8 rows of `cols` in `dtype` runs on a GPU offering `features`.
fn chosen_for(src: &str, cols: usize, dtype: DType, features: GpuFeatures) -> String {
    let p = dt_core::compile_spec(src).expect("checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let args = dt_core::tensor::Args::default().input("A", dt_core::tensor::Tensor { shape: vec![8, cols], data: vec![0.0; 8 * cols] });
    let (k, _) = dt_codegen::host::choose_size_class(&p, &kernels, "out", &args, dtype, features).expect("a class runs");
    k.name.clone()
}

#[test]
fn a_class_that_requires_cuda_is_built_and_chosen_for_cuda_only() {
    let src = spec("cuda");
    let out = generate("req", "req.dt", &src).expect("generates");
    assert!(out.manifest.cuda_launch("dt_out_1k_f32").is_some(), "built for CUDA");
    assert!(out.manifest.hip_launch("dt_out_1k_f32").is_none() && !out.manifest.cpu.contains(&"dt_out_1k_f32".to_string()));
    assert!(!out.c.contains("dt_out_1k_f32") && !out.hip.contains("dt_out_1k_f32"), "the C and HIP files go without it");
    assert!(out.kir.contains("target cuda only"), "{}", out.kir);
    assert_eq!(chosen(&src, GpuFeatures::cuda(8)), "out_1k");
    assert_eq!(chosen(&src, GpuFeatures::cuda(9)), "out_1k");
    assert_eq!(chosen(&src, GpuFeatures::NONE), "out", "the CPU and HIP run the next class");
    let k = out.kernels.iter().find(|k| k.name == "out_1k").expect("the class");
    assert!(dt_codegen::plan::print_cuda(k).expect("plans").contains("on sm_80 and newer"));
}

#[test]
fn a_class_that_requires_sm_90_is_planned_for_sm_90a_and_chosen_there_only() {
    let src = spec("sm_90");
    let out = generate("req", "req.dt", &src).expect("generates");
    assert!(out.manifest.cuda_launch("dt_out_1k_f32").is_some() && out.manifest.hip_launch("dt_out_1k_f32").is_none());
    assert_eq!(chosen(&src, GpuFeatures::cuda(9)), "out_1k");
    assert_eq!(chosen(&src, GpuFeatures::cuda(8)), "out", "an A100 runs the next class");
    assert_eq!(chosen(&src, GpuFeatures::NONE), "out");
    let k = out.kernels.iter().find(|k| k.name == "out_1k").expect("the class");
    assert!(dt_codegen::plan::print_cuda(k).expect("plans").contains("on sm_90a"));
    // The kernel IR reads back with its target.
    let text = dt_core::kir::print(k);
    assert_eq!(dt_core::kir::print(&dt_core::kir_text::parse(&text).expect("parses")), text);
}

#[test]
fn an_unknown_target_is_a_located_error() {
    let src = spec("rocm");
    let diags = dt_core::compile_spec(&src).expect_err("refused");
    let text = dt_core::SourceFile::new("req.dt", &src).render_all(&diags);
    assert!(text.contains("`rocm` is neither a target nor `aligned`") && text.contains("req.dt:3:"), "{text}");
}

#[test]
fn requires_on_a_func_that_is_not_a_kernel_is_a_located_error() {
    let src = "Func m, out; In A; Var x; RVar y;\nm[x] = rmax(A[x, y], y);\nout[x, y] = A[x, y] - m[x];\n\
               out.block(x:1); out.tensorize(x:1, y:0); out.bound(y:1024);\nm.fuse_at(out, x);\nm.requires(aligned);\nout.compile();\n";
    let diags = dt_core::compile_spec(src).expect_err("refused");
    let text = dt_core::SourceFile::new("req.dt", src).render_all(&diags);
    assert!(text.contains("req.dt:6:1: error: `m` is not a kernel"), "{text}");
}

#[test]
fn a_second_target_or_a_repeated_requirement_is_a_located_error() {
    for (requirement, message) in [("cuda, sm_90", "`sm_90` is a second target"), ("aligned, aligned", "`aligned` is required twice")] {
        let src = spec(requirement);
        let diags = dt_core::compile_spec(&src).expect_err("refused");
        let text = dt_core::SourceFile::new("req.dt", &src).render_all(&diags);
        assert!(text.contains(message) && text.contains("req.dt:3:"), "{text}");
    }
    // A target and `aligned` together are one class's guards.
    let p = dt_core::compile_spec(&spec("sm_90, aligned")).expect("checks");
    let k = dt_core::lower::lower_all(&p).expect("lowers").into_iter().find(|k| k.name == "out_1k").expect("the class");
    assert!(k.aligned && k.requires == Some(dt_core::schedule::Requirement::Sm90));
}

#[test]
fn a_class_that_requires_aligned_tensors_is_built_for_whole_runs_and_chosen_for_them_only() {
    use dt_codegen::emit::gpu::Layouts;
    let src = spec("aligned");
    let out = generate("req", "req.dt", &src).expect("generates");
    // The class's kernel is built for whole runs under its own symbol, with no kernel for any
    // layout and no twin; the next class's kernel is for any layout. CUDA and HIP alike; the C
    // file (which any layout suits) has it too.
    type Launch = fn(&dt_core::manifest::Manifest, &str) -> Option<Layouts>;
    let launches: [Launch; 2] = [|m, s| m.cuda_launch(s).map(|i| i.layouts), |m, s| m.hip_launch(s).map(|i| i.layouts)];
    for launch in launches {
        assert_eq!(launch(&out.manifest, "dt_out_1k_f32"), Some(Layouts::WholeRuns));
        assert_eq!(launch(&out.manifest, "dt_out_1k_f32_whole"), None);
        assert_eq!(launch(&out.manifest, "dt_out_f32"), Some(Layouts::Any));
    }
    assert!(out.c.contains("dt_out_1k_f32"));
    // The manifest carries the guard (and only where a class has it), and reads back.
    let json = out.manifest.to_json();
    assert_eq!(json.matches("\"aligned\":true").count(), 1, "{json}");
    assert!(!json.contains("\"aligned\":false"), "{json}");
    let read = dt_core::manifest::Manifest::from_json(&json).expect("reads");
    assert!(read.kernel("out_1k").expect("the class").aligned && !read.kernel("out").expect("the next").aligned);
    // Rows of 1000 f32 or f16 elements are whole 16-byte runs; of 1002, not (f32 runs are 4
    // elements, f16 runs 8); on every backend.
    for features in [GpuFeatures::cuda(9), GpuFeatures::NONE] {
        assert_eq!(chosen_for(&src, 1000, DType::F32, features), "out_1k");
        assert_eq!(chosen_for(&src, 1000, DType::F16, features), "out_1k");
        assert_eq!(chosen_for(&src, 1002, DType::F32, features), "out", "the next class takes partial runs");
        assert_eq!(chosen_for(&src, 1004, DType::F16, features), "out");
    }
    // A launch that reaches the kernel on partial runs anyway is refused, not run.
    let info = out.manifest.cuda_launch("dt_out_1k_f32").expect("built");
    let refused = dt_codegen::host::check_layouts(info, Layouts::Any).expect_err("refused");
    assert!(refused.0.contains("whole 16-byte runs"), "{}", refused.0);
    // The kernel IR and the plan say so; the IR reads back with it.
    let k = out.kernels.iter().find(|k| k.name == "out_1k").expect("the class");
    let text = dt_core::kir::print(k);
    assert!(text.contains("tensors aligned only"), "{text}");
    assert_eq!(dt_core::kir::print(&dt_core::kir_text::parse(&text).expect("parses")), text);
    let plan = dt_codegen::plan::print_cuda(k).expect("plans");
    assert!(plan.contains("whole runs only") && plan.contains("twins     none"), "{plan}");
}
