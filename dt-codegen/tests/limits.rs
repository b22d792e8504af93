//! Specs at and past the compiler's limits: a chain of Funcs as long as the checker allows runs
//! through every stage on a test thread's stack, a longer one is a located error, and a graph
//! that reads its producer twice per level lowers once per level, not once per path.

use dt_core::tensor::{Args, Tensor};
use dt_core::DType;

/// `g0 = A`, each `gi = g(i-1) + 1`, the last compiled: `A + n`.
fn chain(n: usize) -> String {
    let mut s = format!("Func {};\nIn A;\nVar x;\ng0[x] = A[x];\n", (0..=n).map(|i| format!("g{i}")).collect::<Vec<_>>().join(", "));
    for i in 1..=n {
        s += &format!("g{i}[x] = g{}[x] + 1;\n", i - 1);
    }
    s + &format!("g{n}.compile();\n")
}

/// Each level reads the one before twice, under both orders of its labels.
fn diamond(levels: usize) -> String {
    let mut s = format!(
        "Func {};\nIn A;\nVar x, y;\nh0[x, y] = A[x, y] + len(y);\n",
        (0..=levels).map(|i| format!("h{i}")).collect::<Vec<_>>().join(", ")
    );
    for i in 1..=levels {
        s += &format!("h{i}[x, y] = h{0}[x, y] * 0.5 + h{0}[y, x] * 0.25;\n", i - 1);
    }
    s + &format!("h{levels}.compile();\n")
}

/// Runs the spec's kernel through the reference evaluator, the kernel-IR interpreter and the
/// generated C; returns the three results.
fn run_everywhere(src: &str, args: &Args) -> [Vec<f32>; 3] {
    let p = dt_core::compile_spec(src).expect("checks");
    let k = p.kernels[0];
    let kir = dt_core::lower::lower(&p, k).expect("lowers");
    let bound = dt_core::tensor::bind(&p, k, args).expect("binds");
    let eval = dt_core::eval::evaluate(&p, k, args, DType::F32).expect("evaluates");
    let interp = dt_core::interp::run(&kir, &bound, DType::F32);
    let symbol = dt_codegen::emit::symbol(&kir, DType::F32);
    let c = dt_codegen::emit::c::emit_file("limits", &[(&kir, DType::F32, symbol.clone())]).expect("emits");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("limits").join(format!("{}-{}", std::process::id(), kir.name));
    let lib = dt_codegen::host::compile_with(&c, &dir, "limits", "-O0").unwrap_or_else(|e| panic!("{e}"));
    let cpu = lib.run(&symbol, &kir, &bound, DType::F32).expect("runs");
    [eval.data, interp.data, cpu.data]
}

#[test]
fn a_chain_of_the_most_funcs_runs_everywhere_on_a_test_thread() {
    let n = dt_core::check::MAX_FUNC_CHAIN - 1;
    let a = Tensor::new(vec![5], vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    let want: Vec<f32> = a.data.iter().map(|v| v + n as f32).collect();
    for got in run_everywhere(&chain(n), &Args::default().input("A", a)) {
        assert_eq!(got, want);
    }
}

#[test]
fn a_longer_chain_is_a_located_error() {
    let n = dt_core::check::MAX_FUNC_CHAIN;
    let src = chain(n);
    let diags = dt_core::compile_spec(&src).expect_err("too long");
    let text = dt_core::SourceFile::new("chain.dt", &src).render_all(&diags);
    let line = 4 + dt_core::check::MAX_FUNC_CHAIN;
    assert!(
        text.contains(&format!("chain.dt:{line}:1: error: `g{}` is computed through a chain of 513 Funcs; at most 512 are supported", n)),
        "{text}"
    );
}

#[test]
fn a_graph_reading_its_producer_twice_per_level_lowers_once_per_level() {
    let a = Tensor::new(vec![3, 3], (0..9).map(|v| v as f32).collect());
    let [eval, interp, cpu] = run_everywhere(&diamond(24), &Args::default().input("A", a));
    assert!(eval.iter().all(|v| v.is_finite() && *v > 0.0), "{eval:?}");
    for got in [interp, cpu] {
        for (g, w) in got.iter().zip(&eval) {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{got:?} against {eval:?}");
        }
    }
    // Each level's value is computed once in the kernel IR: the statements grow with the levels.
    let p = dt_core::compile_spec(&diamond(24)).expect("checks");
    let kir = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
    assert!(kir.values.len() < 1000, "{} values for 24 levels", kir.values.len());
}

/// A CPU kernel whose tiles cannot be allocated reports it: the host gets an error saying so,
/// not an output of NaN (the value it starts as) passed off as a result.
#[test]
fn cpu_kernels_report_tiles_they_cannot_allocate() {
    let src = "Func f;\nIn A;\nVar x;\nf[x] = A[x] * 2;\nf.block(x:64);\nf.compile();\n";
    let p = dt_core::compile_spec(src).expect("checks");
    let kir = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
    let args = Args::default().input("A", Tensor::new(vec![3], vec![1.0, 2.0, 3.0]));
    let bound = dt_core::tensor::bind(&p, p.kernels[0], &args).expect("binds");
    let symbol = dt_codegen::emit::symbol(&kir, DType::F32);
    let c = dt_codegen::emit::c::emit_file("limits", &[(&kir, DType::F32, symbol.clone())]).expect("emits");
    // Every allocation of the kernel fails: `malloc` is redefined after the runtime's includes.
    let decl = dt_codegen::abi::C_DECL;
    assert!(c.contains(decl));
    let failing = c.replacen(decl, &format!("{decl}#define malloc(n) ((void)(n), (void*)0)\n"), 1);
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("limits").join(format!("{}-no-memory", std::process::id()));
    for (source, fails) in [(&c, false), (&failing, true)] {
        let lib = dt_codegen::host::compile_with(source, &dir, if fails { "no_memory" } else { "memory" }, "-O0")
            .unwrap_or_else(|e| panic!("{e}"));
        match lib.run(&symbol, &kir, &bound, DType::F32) {
            Ok(t) => assert!(!fails && t.data == [2.0, 4.0, 6.0], "{:?}", t.data),
            Err(e) => assert!(fails && e.to_string().contains("no host memory for the kernel's tiles"), "{e}"),
        }
    }
}
