//! `requires(cuda)` and `requires(sm_90)`: a size class built for one target only. The CPU and
//! HIP files go without it, and there the library runs the next class; on the target it runs.

use dt_codegen::generate::generate;
use dt_core::signature::GpuFeatures;
use dt_core::DType;

/// Rows of up to 1024 in one step, for `requirement` only; any length in steps of 256 elsewhere.
fn spec(requirement: &str) -> String {
    format!(
        "Func out; In A; Var x, y;\nout[x, y] = A[x, y] * 2.0;\n\
         schedule out_1k {{ out.block(x:1); out.tensorize(x:1, y:0); out.bound(y:1024); out.requires({requirement}); out.compile(); }}\n\
         out.block(x:1); out.tensorize(x:1, y:256); out.compile();\n"
    )
}

/// The class a run of 8 rows of 1000 runs on a GPU offering `features`.
fn chosen(src: &str, features: GpuFeatures) -> String {
    let p = dt_core::compile_spec(src).expect("checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let args = dt_core::tensor::Args::default().input("A", dt_core::tensor::Tensor { shape: vec![8, 1000], data: vec![0.0; 8000] });
    let (k, _) = dt_codegen::host::choose_size_class(&p, &kernels, "out", &args, DType::F32, features).expect("a class runs");
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
    assert!(text.contains("`rocm` is not a target") && text.contains("req.dt:3:"), "{text}");
}
