//! `num_stages(S)` above 2 on a looped row: on CUDA, where the S buffers fit in shared memory,
//! the loads of the next S - 1 steps are copied there asynchronously (`dt_cp_async16`) and the
//! kernel asks for the ring's shared memory; otherwise (HIP, or a ring too large) the loads go
//! one step ahead in registers. That the staged code computes what the reference does is checked
//! on the GPU by `gpu_matches_reference` (random schedules draw `num_stages` up to 4). A loop
//! over a block of no more steps than stages holds the block there for the loops after it
//! (`dt-codegen/tests/cluster/held_rows_cluster.dt` runs such kernels on the GPU).

use dt_codegen::emit::gpu::{self, Dialect, LaunchInfo};
use dt_codegen::plan::Target;
use dt_core::DType;

/// A looped row mean in f16 with steps of `step` columns over 32 warps and `stages` stages.
fn row_mean(step: u32, stages: u32) -> String {
    format!(
        "Func out; In A; Var x; RVar y;
        out[x] = rsum(A[x, y], y) / len(y);
        out.block(x:1); out.tensorize(x:0, y:{step}); out.num_warps(32); out.num_stages({stages});
        out.dtypes(f16); out.compile();"
    )
}

/// The f16 kernel of spec `src` built for any layout (its first kernel).
fn emitted(src: &str, dialect: Dialect) -> (String, LaunchInfo) {
    emitted_as(src, dialect, DType::F16)
}

/// The `dtype` kernel of spec `src` built for any layout (its first kernel).
fn emitted_as(src: &str, dialect: Dialect, dtype: DType) -> (String, LaunchInfo) {
    let p = dt_core::compile_spec(src).expect("spec checks");
    let kernels = dt_core::lower::lower_all(&p).expect("lowers");
    let k = &kernels[0];
    gpu::emit_kernel(k, dtype, &dt_codegen::emit::symbol(k, dtype), dialect, gpu::Layouts::Any).expect("emits")
}

#[test]
fn staged_loads_take_shared_memory_where_they_fit() {
    // 8192 columns per step: 16 KiB per stage, 4 stages.
    let (cuda, info) = emitted(&row_mean(8192, 4), Dialect::Cuda);
    assert!(cuda.contains("loads 3 steps ahead, staged in shared memory") && cuda.contains("dt_cp_async_wait<3>()"), "{cuda}");
    assert!(info.shared_bytes >= 4 * 16 * 1024 && info.shared_bytes <= Target::SM80.shared_bytes_per_block, "{}", info.shared_bytes);
    // Two stages: one step ahead in registers, as before.
    let (cuda, info) = emitted(&row_mean(8192, 2), Dialect::Cuda);
    assert!(!cuda.contains("dt_cp_async16(ring") && cuda.contains("loads one step ahead"), "{cuda}");
    assert!(info.shared_bytes < 16 * 1024, "{}", info.shared_bytes);
}

#[test]
fn loads_that_cannot_be_staged_go_one_step_ahead_in_registers() {
    // 32768 columns per step: 64 KiB per stage, 4 stages do not fit.
    let (cuda, info) = emitted(&row_mean(32768, 4), Dialect::Cuda);
    assert!(!cuda.contains("dt_cp_async16(ring") && cuda.contains("loads one step ahead"), "{cuda}");
    assert!(info.shared_bytes <= Target::SM80.shared_bytes_per_block, "{}", info.shared_bytes);
    // HIP has no asynchronous copies to shared memory.
    let (hip, _) = emitted(&row_mean(8192, 4), Dialect::Hip);
    assert!(!hip.contains("dt_cp_async16(ring") && hip.contains("loads one step ahead"), "{hip}");
}

/// Two staged loops, one inside the other (four rows per program, each row's second reduction
/// looped): each has a ring of its own, the inner one after the outer one, and the kernel asks
/// for both.
#[test]
fn nested_staged_loops_take_rings_of_their_own() {
    let src = "Func s1, s2, out; In A, B; Var x; RVar y, k;
        s1[x] = rsum(A[x, y], y);
        s2[x] = rsum(B[x, k], k);
        out[x] = s1[x] + s2[x];
        out.block(x:4); out.tensorize(x:1, y:0, k:1024); out.num_warps(4); out.num_stages(4); out.bound(y:1024);
        s1.fuse_at(out, x); s2.fuse_at(out, x);
        out.dtypes(f16); out.compile();";
    let (cuda, info) = emitted(src, Dialect::Cuda);
    let offsets: Vec<usize> = cuda
        .lines()
        .filter_map(|l| l.split("(uint4*)(dt_smem + ").nth(1))
        .map(|rest| rest.trim_end_matches(");").parse().expect("a ring's offset"))
        .collect();
    assert_eq!(offsets.len(), 2, "{cuda}");
    // 4 stages of one 16-byte run per thread, 128 threads: 2048 words per ring.
    assert_eq!(offsets[1], offsets[0] + 2048, "{cuda}");
    assert!(info.shared_bytes as usize >= (offsets[1] + 2048) * 4, "{}", info.shared_bytes);
}

/// A softmax in f16 whose rows are split over a cluster of 4, each program looping over its
/// block of 2048 columns in steps of 256 with `stages` stages.
fn clustered_softmax(stages: u32) -> String {
    format!(
        "Func m, s, out; In A; Var x; RVar y;
        m[x] = rmax(A[x, y], y);
        s[x] = rsum(exp(A[x, y] - m[x]), y);
        out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
        out.block(x:1, y:2048); out.tensorize(x:0, y:256); out.cluster(y:4); out.num_warps(1);
        out.num_stages({stages}); m.fuse_at(out, x); s.fuse_at(out, x);
        out.dtypes(f16, f32); out.compile();"
    )
}

/// A block of no more steps than stages is held in shared memory: the statistics loop stages
/// every step of its block, each in a buffer of its own, and the loop over the block's partial
/// step and the output loop (its partial step and its full steps) read it there, after waiting
/// for the copies; none loads the row from memory again.
#[test]
fn a_block_of_no_more_steps_than_stages_is_held_for_the_loops_after_it() {
    let (cuda, info) = emitted(&clustered_softmax(8), Dialect::Cuda);
    assert!(cuda.contains("loads the block's steps, staged in shared memory"), "{cuda}");
    assert_eq!(cuda.matches("dt_cp_async_wait<0>(); /* the block held in shared memory */").count(), 3, "{cuda}");
    // Every 16-byte read of A goes through the ring: the copies into it, and the reads back.
    assert!(!cuda.contains("*(const uint4*)(in0 + a)") && !cuda.contains("dt_load_once((const uint4*)(in0 + a))"), "{cuda}");
    // A buffer per step: 8 steps of one 16-byte run per thread, 32 threads.
    assert!(info.shared_bytes >= 8 * 32 * 16 && info.shared_bytes < 2 * 8 * 32 * 16, "{}", info.shared_bytes);
}

/// With fewer stages than steps, the ring turns over and the output loop reads memory again
/// (staging its own loads).
#[test]
fn a_block_of_more_steps_than_stages_is_read_again() {
    let (cuda, _) = emitted(&clustered_softmax(4), Dialect::Cuda);
    assert!(!cuda.contains("the block held") && !cuda.contains("the block's steps"), "{cuda}");
    assert!(cuda.contains("block(y:2048) out.tensorize(y:256) num_stages(4): loads 3 steps ahead, staged in shared memory"), "{cuda}");
}

/// f32 loads are held as 16-bit ones are: the statistics loop stages the block's steps and the
/// loops after it read them there, as floats. 8 steps of one 16-byte run (4 floats) per thread.
#[test]
fn an_f32_block_is_held_as_a_16_bit_one() {
    let (cuda, info) = emitted_as(&clustered_softmax(8), Dialect::Cuda, DType::F32);
    assert!(cuda.contains("loads the block's steps, staged in shared memory"), "{cuda}");
    assert_eq!(cuda.matches("dt_cp_async_wait<0>(); /* the block held in shared memory */").count(), 3, "{cuda}");
    assert!(!cuda.contains("*(const uint4*)(in0 + a)") && !cuda.contains("dt_load_once((const uint4*)(in0 + a))"), "{cuda}");
    assert!(cuda.contains("__uint_as_float(q.x)") && !cuda.contains("dt_f32s"), "{cuda}");
    // 8 steps of 256 columns, 32 threads of 8 floats: two 16-byte runs per thread and step.
    assert!(info.shared_bytes >= 8 * 2 * 32 * 16 && info.shared_bytes < 2 * 8 * 2 * 32 * 16, "{}", info.shared_bytes);
}

/// f32 loads that a loop would only stage, not hold, are loaded at their use (staged, such
/// loops ran slower on the H100, docs/language.md); nor do they go one step ahead in registers.
#[test]
fn f32_loads_are_staged_only_to_hold_a_block() {
    let (cuda, info) = emitted_as(&clustered_softmax(4), Dialect::Cuda, DType::F32);
    assert!(!cuda.contains("staged in shared memory") && !cuda.contains("loads one step ahead"), "{cuda}");
    assert!(cuda.contains("*(const uint4*)(in0 + a)") || cuda.contains("dt_load_once((const uint4*)(in0 + a))"), "{cuda}");
    assert!(info.shared_bytes < 1024, "{}", info.shared_bytes);
}

/// The first kernel of spec `src`, lowered.
fn kernel(src: &str) -> dt_core::kir::Kernel {
    let p = dt_core::compile_spec(src).expect("spec checks");
    dt_core::lower::lower_all(&p).expect("lowers").remove(0)
}

/// The printed plan (`dtc emit --target gpu-plan`) says how each loop issues its loads: the
/// statistics loop stages its block's steps and holds them, the loops after it read them there.
#[test]
fn the_plan_shows_how_each_loop_issues_its_loads() {
    let held = dt_codegen::plan::print_cuda(&kernel(&clustered_softmax(8))).expect("plans");
    assert!(
        held.contains("every step of its block by cp.async into a ring of 8 buffers") && held.contains("held for the loops after it"),
        "{held}"
    );
    assert!(held.contains("reads from the block held at word"), "{held}");
    let ahead = dt_codegen::plan::print_cuda(&kernel(&row_mean(8192, 2))).expect("plans");
    assert!(ahead.contains("one step ahead in registers: v"), "{ahead}");
    let staged = dt_codegen::plan::print_cuda(&kernel(&row_mean(8192, 4))).expect("plans");
    assert!(staged.contains("3 steps ahead by cp.async into a ring of 4 buffers"), "{staged}");
}

/// A ring of `num_stages` that does not fit the shared memory is no silent change: the plan
/// shows the stages the loop runs with, and `dtc check` warns of them (`lowered_stages`).
#[test]
fn a_ring_that_does_not_fit_is_reported() {
    let k = kernel(&row_mean(32768, 4));
    let lowered: Vec<(u32, u32)> = dt_codegen::plan::lowered_stages(&k).iter().map(|l| (l.asked, l.planned)).collect();
    assert_eq!(lowered, [(4, 2)]);
    let text = dt_codegen::plan::print_cuda(&k).expect("plans");
    assert!(text.contains("num_stages(4) runs with 2: its ring does not fit the shared memory"), "{text}");
    assert!(dt_codegen::plan::lowered_stages(&kernel(&row_mean(8192, 4))).is_empty());
}

/// A load staged by an outer loop is read where the body uses it, also after an inner staged
/// loop: the inner loop's staged loads end with it, the outer loop's stay (they were dropped
/// with the inner loop's, and the use loaded from global memory again, the staged copy unread).
#[test]
fn an_outer_loops_staged_load_outlives_an_inner_staged_loop() {
    let src = "Func m, s, out; In A; Var x; RVar y;
        m[x] = rmax(A[x, y], y);
        s[x] = rsum(exp(A[x, y] - m[x]), y);
        out[x, y] = exp(A[x, y] - m[x]) / reshape(s[x], x, 1);
        out.block(x:4, y:128); out.tensorize(x:2, y:0); out.num_warps(1); out.num_stages(3);
        m.fuse_at(out, y); s.fuse_at(out, y);
        out.dtypes(f16); out.compile();";
    let (cuda, _) = emitted(src, Dialect::Cuda);
    let rings = cuda.matches("staged in shared memory */").count();
    assert!(rings >= 2, "an outer and an inner staged loop:\n{cuda}");
    // Every register array a ring is read into is used after it.
    for line in cuda.lines().filter(|l| l.contains("] = ring")) {
        let name = line.split("if (").nth(1).and_then(|r| r.split(") ").nth(1)).and_then(|r| r.split('[').next()).expect("q[c] = ring[..]");
        assert!(cuda.matches(&format!("{name}[c]")).count() >= 2, "{name} is read into and never used:\n{cuda}");
    }
}
