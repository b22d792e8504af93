//! The GPU plan (`dt_codegen::plan`) as text: the plan of every library spec (every kernel and
//! element type, the older path's register layouts and dots included) must match its
//! golden file `tests/plan/<spec>.plan` (what `dtc emit --target gpu-plan` prints), and the
//! schedules the plan cannot serve fail with errors that say why.
//!
//! Run with `DT_BLESS=1` to (re)write the golden files from the current output; review the diff
//! before committing it.

mod common;

use common::workspace;
use dt_codegen::plan::{plan, print_cuda, Target};
use dt_core::DType;

fn plan_text(src: &str) -> Result<String, String> {
    let p = dt_core::compile_spec(src).map_err(|d| format!("{d:?}"))?;
    let kernels = dt_core::lower::lower_all(&p).map_err(|e| e.0)?;
    kernels.iter().map(|k| print_cuda(k).map_err(|e| e.0)).collect::<Result<Vec<_>, _>>().map(|t| t.join("\n"))
}

#[test]
fn library_plans_match_golden_files() {
    let bless = std::env::var_os("DT_BLESS").is_some_and(|v| v != "0" && !v.is_empty());
    let dir = workspace().join("dt-codegen/tests/plan");
    let mut failures = Vec::new();
    for spec in ["matmul", "mm_leaky_relu", "softmax", "layernorm", "dyt", "attention"] {
        let src = std::fs::read_to_string(workspace().join(format!("dt-kernels/specs/{spec}.dt"))).expect("spec");
        let text = plan_text(&src).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let golden = dir.join(format!("{spec}.plan"));
        if bless {
            std::fs::create_dir_all(&dir).expect("plan dir");
            std::fs::write(&golden, &text).expect("writes");
            continue;
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        if want != text {
            failures.push(format!("{spec}: the plan differs from {} (DT_BLESS=1 rewrites it):\n{text}", golden.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A warp-specialized matmul with `schedule` (the primitives of kernel `mm` after its block).
fn matmul(schedule: &str, dtypes: &str) -> String {
    format!(
        "Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n{schedule}\nmm.warp_specialize(); mm.dtypes({dtypes}); mm.compile();\n"
    )
}

/// The kernel IR and the f16 plan for sm_90a of a warp-specialized matmul scheduled by `schedule`.
fn planned(schedule: &str) -> (dt_core::kir::Kernel, dt_codegen::plan::GpuPlan) {
    let p = dt_core::compile_spec(&matmul(schedule, "f16")).expect("checks");
    let k = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
    let gp = plan(&k, DType::F16, &Target::SM90A).expect("plans");
    (k, gp)
}

fn plan_error(src: &str, dtype: DType) -> String {
    let p = dt_core::compile_spec(src).expect("checks");
    let k = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
    plan(&k, dtype, &Target::SM90A).expect_err("the plan refuses it").0
}

#[test]
fn schedules_the_plan_cannot_serve_say_why() {
    let good = "mm.block(x:128, y:256); mm.tensorize(x:128, y:256, k:64); mm.num_warps(8); mm.num_stages(4);";
    assert!(plan_text(&matmul(good, "f16")).is_ok());
    let cases = [
        (
            "mm.block(x:128, y:256); mm.tensorize(x:128, y:256, k:32); mm.num_warps(8); mm.num_stages(4);",
            "f16",
            "contraction step is 32; it must be 64",
        ),
        (
            "mm.block(x:128, y:256); mm.tensorize(x:128, y:256, k:64); mm.num_warps(8); mm.num_stages(5);",
            "f16",
            "above the 232448 of sm_90a; lower num_stages",
        ),
        (
            "mm.block(x:128, y:256); mm.tensorize(x:128, y:256, k:64); mm.num_warps(4); mm.num_stages(4);",
            "f16",
            "not one warpgroup (4 warps) per 64 rows",
        ),
        (
            "mm.block(x:128, y:32); mm.tensorize(x:128, y:32, k:64); mm.num_warps(8); mm.num_stages(4);",
            "f16",
            "32 columns; wgmma takes a multiple of 64 up to 256 here",
        ),
        (
            "mm.block(x:128, y:512); mm.tensorize(x:128, y:512, k:64); mm.num_warps(8); mm.num_stages(2);",
            "f16",
            "512 columns; wgmma takes a multiple of 64 up to 256 here",
        ),
        (
            "mm.block(x:128, y:256); mm.tensorize(x:64, y:256, k:64); mm.num_warps(8); mm.num_stages(4);",
            "f16",
            "inside a loop of several steps",
        ),
        (
            "mm.block(x:128, y:256); mm.tensorize(x:128, y:256, k:64); mm.num_warps(8); mm.num_stages(1);",
            "f16",
            "give it num_stages(2) or more",
        ),
        (good, "f32", "its f32 build has no 16-bit operands"),
    ];
    for (schedule, dtypes, want) in cases {
        let dtype = DType::from_name(dtypes).expect("dtype");
        let err = plan_error(&matmul(schedule, dtypes), dtype);
        assert!(err.contains("kernel `mm` is scheduled with warp_specialize()") && err.contains(want), "{schedule} {dtypes}: {err}");
    }
}

/// The verifier refuses a plan that breaks its rules: here a barrier ring that expects fewer
/// bytes than a stage's copies bring, a ring that no longer fits the target, and an operand
/// whose products do not start on 16-byte units.
#[test]
fn the_verifier_catches_a_broken_plan() {
    let src = matmul("mm.block(x:128, y:256); mm.tensorize(x:128, y:256, k:64); mm.num_warps(8); mm.num_stages(4);", "f16");
    let p = dt_core::compile_spec(&src).expect("checks");
    let k = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
    let good = plan(&k, DType::F16, &Target::SM90A).expect("plans");
    assert_eq!(dt_codegen::plan::verify::verify(&k, &good), Ok(()));
    let mut bad = good.clone();
    bad.warp_specialized.as_mut().expect("warp-specialized").full.tx_bytes -= 1024;
    assert!(dt_codegen::plan::verify::verify(&k, &bad).unwrap_err().contains("barriers' counts"));
    let mut small = good.clone();
    small.target.shared_bytes_per_block = 96 * 1024;
    assert!(dt_codegen::plan::verify::verify(&k, &small).unwrap_err().contains("bytes of shared memory"));
    // Each product's descriptor adds its offset in 16-byte units to the stage's.
    let mut unaligned = good.clone();
    unaligned.warp_specialized.as_mut().expect("warp-specialized").operands[0].desc.k_step = 24;
    assert!(dt_codegen::plan::verify::verify(&k, &unaligned).unwrap_err().contains("16-byte units"));
}

/// A bound on A's rows below the tile's shortens the copies of A: a stage copies the bounded
/// rows (rounded up to 8) and B's tile follows them, which `wgmma` reads as A's remaining rows;
/// two warpgroups' 128 rows would read past the stage, so there the copies shorten only as far
/// as B's lines reach. The verifier refuses rows that run past the stage.
#[test]
fn a_bound_on_the_rows_shortens_the_copies_of_a() {
    let (k, short) = planned("mm.bound(x:13); mm.block(x:64, y:64); mm.tensorize(x:64, y:64, k:64); mm.num_warps(4); mm.num_stages(16);");
    let w = short.warp_specialized.as_ref().expect("warp-specialized");
    let [a, b] = &w.operands;
    assert_eq!((a.copied_rows, a.boxes.clone(), a.copy_bytes), (16, vec![16, 64], 2048));
    assert_eq!((b.offset, w.stage_bytes, w.stages), (2048, 10240, 16));
    let (_, two) = planned("mm.bound(x:16); mm.block(x:128, y:64); mm.tensorize(x:128, y:64, k:64); mm.num_warps(8); mm.num_stages(4);");
    let a2 = &two.warp_specialized.as_ref().expect("warp-specialized").operands[0];
    assert_eq!(a2.copied_rows, 64, "128 rows read from 64 copied and B's 64 lines");
    let mut past = short.clone();
    let ws = past.warp_specialized.as_mut().expect("warp-specialized");
    ws.operands[1].offset = 0;
    ws.operands[0].offset = 8192;
    assert!(dt_codegen::plan::verify::verify(&k, &past).unwrap_err().contains("past its stage"));
}

/// The epilogue stores through shared memory where the ring leaves room for the staging buffers
/// (a 128 x 256 tile in 4 stages), and from the fragments where it does not (128 x 128 in 7
/// stages); the verifier refuses staging buffers that overlap the barriers or a box that is not
/// a warpgroup's rows.
#[test]
fn the_epilogue_stores_through_shared_memory_where_there_is_room() {
    let (k, roomy) = planned("mm.block(x:128, y:256); mm.tensorize(x:128, y:256, k:64); mm.num_warps(8); mm.num_stages(4);");
    let w = roomy.warp_specialized.as_ref().expect("warp-specialized");
    let s = w.store.as_ref().expect("a staged store");
    assert_eq!((s.chunks, s.map, w.tensor_maps().len()), (4, 2, 3));
    assert!(w.shared_bytes <= Target::SM90A.shared_bytes_per_block);
    let (_, full) = planned("mm.block(x:128, y:128); mm.tensorize(x:128, y:128, k:64); mm.num_warps(8); mm.num_stages(7);");
    let w_full = full.warp_specialized.as_ref().expect("warp-specialized");
    assert!(w_full.store.is_none() && w_full.tensor_maps().len() == 2, "7 stages of 128 x 128 leave no room for staging");
    let mut overlapping = roomy.clone();
    overlapping.warp_specialized.as_mut().and_then(|w| w.store.as_mut()).expect("staged").offset -= 1024;
    assert!(dt_codegen::plan::verify::verify(&k, &overlapping).unwrap_err().contains("staging buffers"));
    let mut wide = roomy.clone();
    wide.warp_specialized.as_mut().and_then(|w| w.store.as_mut()).expect("staged").boxes[1] = 128;
    assert!(dt_codegen::plan::verify::verify(&k, &wide).unwrap_err().contains("box"));
}

/// A `wgmma()` kernel whose dots cannot all be warpgroup products is refused by the CUDA
/// printer with the reason, and refused by HIP.
#[test]
fn wgmma_kernels_whose_dots_cannot_run_on_it_say_why() {
    use dt_codegen::emit::gpu::{emit_kernel, Dialect, Layouts};
    let attention = |schedule: &str, dtype: &str| {
        format!(
            "Func s, m, l, o; In Q, K, V; Var i, j, e; RVar d;\n\
             s[i, j] = rdot(Q[i, d], K[j, d], d);\nm[i] = rmax(s[i, j], j);\n\
             l[i] = rsum(exp(s[i, j] - m[i]), j);\no[i, e] = rdot(exp(s[i, j] - m[i]), V[j, e], j) / l[i];\n\
             o.block(i:128, e:64); o.tensorize(i:0, e:0, j:64, d:0); o.bound(d:64);\n{schedule}\n\
             o.wgmma(); o.dtypes({dtype}); m.fuse_at(o, i); l.fuse_at(o, i); o.compile();\n"
        )
    };
    let emit = |src: &str, dtype: DType, dialect: Dialect| {
        let p = dt_core::compile_spec(src).expect("checks");
        let k = dt_core::lower::lower(&p, p.kernels[0]).expect("lowers");
        emit_kernel(&k, dtype, "k", dialect, Layouts::Any).map(|_| ()).map_err(|e| e.0)
    };
    let good = attention("o.num_warps(8); o.num_stages(2);", "f16");
    emit(&good, DType::F16, Dialect::Cuda).expect("two warpgroups of 64 rows, fed by a ring");
    let cases = [
        (attention("o.num_warps(4); o.num_stages(2);", "f16"), DType::F16, "are not 64 per warpgroup of 4 warps"),
        (
            attention("o.num_warps(8); o.num_stages(1);", "f16"),
            DType::F16,
            "not copied through the rings of a reduction loop with num_stages(2)",
        ),
        (attention("o.num_warps(8); o.num_stages(2);", "f32"), DType::F32, "its element type has no wgmma here"),
    ];
    for (src, dtype, want) in cases {
        let err = emit(&src, dtype, Dialect::Cuda).expect_err("refused");
        assert!(err.contains("asks for wgmma()") && err.contains(want), "{err}");
    }
    let err = emit(&good, DType::F16, Dialect::Hip).expect_err("HIP has no wgmma");
    assert!(err.contains("computes its dots with wgmma"), "{err}");
    let no_dot = "Func y; In A; Var i, j; y[i, j] = A[i, j] * 2.0; y.block(i:64, j:64); y.wgmma(); y.dtypes(f16); y.compile();\n";
    let err = emit(no_dot, DType::F16, Dialect::Cuda).expect_err("nothing for wgmma to do");
    assert!(err.contains("none of its rdots runs on the tensor cores"), "{err}");
}

/// Stages the older path lowers where more do not fit its target are shown in the printed plan:
/// the talk's two-matmul listing gets the `num_stages(4)` it asks for in sm_80's 99 KiB; asking
/// for 8, it gets 5.
#[test]
fn stages_the_plan_lowers_are_shown() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/specs/talk_2mm.dt")).expect("spec");
    let plan = |src: &str| {
        let p = dt_core::compile_spec(src).expect("checks");
        let k = dt_core::lower::lower(&p, p.kernel_by_name("_2mm").expect("the listing's kernel")).expect("lowers");
        dt_codegen::plan::print_cuda(&k).expect("plans")
    };
    let text = plan(&src);
    assert!(text.contains("4 buffers per operand") && !text.contains("lowered"), "{text}");
    let text = plan(&src.replace("num_stages(4)", "num_stages(8)"));
    assert!(text.contains("num_stages(8) lowered to 5"), "{text}");
}

/// A `num_stages` loop over a result dimension copies its dots' operands ahead through rings:
/// the talk's 2mm in f16 holds the product A B (computed before the loop over n, where the
/// mask along `l` moved) in one buffer and takes C's tiles through a ring. A loop whose steps
/// meet the cluster keeps its plain form, waiting for each meeting at the end of its step.
#[test]
fn loops_across_result_tiles_copy_ahead_unless_they_meet_the_cluster() {
    let read = |rel: &str| std::fs::read_to_string(format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))).expect("spec");
    // The kernel the listing names (a spec's last: classes for whole tiles come before it).
    let plan = |src: &str| {
        let p = dt_core::compile_spec(src).expect("checks");
        let k = dt_core::lower::lower(&p, *p.kernels.last().expect("a kernel")).expect("lowers");
        dt_codegen::plan::print_cuda(&k).expect("plans")
    };
    let text = plan(&read("tests/specs/talk_2mm_f16.dt"));
    assert!(
        text.contains("computed, from registers (rounded to f16), staged [rows][K], ldmatrix, lines of 136 elements, held for the loop"),
        "{text}"
    );
    assert!(text.contains("C copied from global memory") && text.contains("a ring of 3 buffers"), "{text}");
    let text = plan(&read("tests/cluster/meeting_in_result_loop.dt"));
    assert!(text.contains("waits at the end of the loop of y.tensorize(n:64)") && !text.contains("ring"), "{text}");
}

/// The buffers of a kernel's cluster meetings are static shared memory, which the block's
/// limit counts with the tiles: a contraction split over a cluster whose 256 x 256 tile the
/// cluster sums (256 KiB of f32) is refused by the plan, not by the driver at launch.
#[test]
fn cluster_meetings_count_against_the_shared_memory_limit() {
    let src = "Func y; In A, C; Var m, n; RVar k; y[m, n] = rdot(A[m, k], C[k, n], k); y.block(m:256, n:256, k:64); y.cluster(k:2); y.tensorize(m:256, n:256, k:16); y.num_warps(16); y.dtypes(f16); y.compile();\n";
    let err = plan_text(src).expect_err("the plan refuses it");
    assert!(err.contains("needs 282880 bytes of shared memory for its tiles and its cluster meetings (at most 232448 on sm_90a)"), "{err}");
    let fits = src
        .replace("m:256, n:256, k:64", "m:128, n:256, k:64")
        .replace("tensorize(m:256", "tensorize(m:128")
        .replace("num_warps(16)", "num_warps(8)");
    assert!(plan_text(&fits).is_ok());
}

/// A `multicast(i:2)` attention's ring loop shares K and V over the cluster: each program
/// copies half the lines of each box (32 of 64 keys) into both programs' stages, refilled once
/// both are done with them; Q, whose rows differ along `i`, stays each program's own. A
/// `wgmma()` kernel whose loops share nothing this way (a matmul's single pipelined dot) is
/// refused with why, not built without its cluster's copies; so is one whose ring loop lies in
/// a loop over the queries that runs fewer times in a last, partial block than in the others
/// (the programs of a cluster would not meet at every step).
#[test]
fn multicast_ring_loops_share_the_operands_that_do_not_vary_along_the_cluster() {
    let src = std::fs::read_to_string(format!("{}/tests/cluster/attention_multicast.dt", env!("CARGO_MANIFEST_DIR"))).expect("spec");
    let text = plan_text(&src).expect("plans");
    let shared = "box [1, 1, 32, 64]; each of the cluster's 2 programs copies 32 lines of it into all of them";
    assert!(text.contains(&format!("K copied from global memory, staged [rows][K], K-major descriptors, lines of 64 elements (swizzled in 128-byte atoms), a ring of 2 buffers (bulk tensor copies through map 1, {shared}")), "{text}");
    assert!(text.contains(&format!("V copied from global memory, staged [K][rows], MN-major descriptors, lines of 64 elements (swizzled in 128-byte atoms), a ring of 2 buffers (bulk tensor copies through map 2, {shared}")), "{text}");
    assert!(
        text.contains("held for the loop (one buffer, copied before it, bulk tensor copies through map 0, box [1, 1, 64, 64])"),
        "{text}"
    );
    assert!(text.contains("once every program of the cluster is done with it (barriers `empty` at word"), "{text}");
    let single = "Func mm; In A, B; Var x, y; RVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\nmm.block(x:128, y:128); mm.tensorize(x:128, y:128, k:64); mm.multicast(y:2); mm.num_warps(8); mm.num_stages(3); mm.wgmma(); mm.dtypes(f16); mm.compile();\n";
    let err = plan_text(single).expect_err("refused");
    assert!(
        err.contains("kernel `mm` is multicast along `y`, but no loop of its bulk copies has an operand that its 2 programs could share"),
        "{err}"
    );
    let tiled = src
        .replace("attention.block(b:1, h:1, i:64, e:64);", "attention.block(b:1, h:1, i:128, e:64);")
        .replace("attention.tensorize(i:0, e:0, j:64, d:0);", "attention.tensorize(i:64, e:0, j:64, d:0);");
    let err = plan_text(&tiled).expect_err("refused");
    assert!(err.contains("kernel `attention` is multicast along `i`, but no loop of its bulk copies has an operand"), "{err}");
}
