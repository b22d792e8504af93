//! Runs every library kernel once at a realistic shape, checks the result against the
//! hand-written reference of `dt_kernels::reference` and prints the time and the status of each.
//!
//! On a GPU the kernels run in f16 (the GPU's native training type); without one they run on the
//! CPU fallback in f32, at smaller shapes, and the demo says so.
//!
//! `cargo run --release -p dt-kernels --example demo`

use dt_kernels::reference::{self, error_stats};
use dt_kernels::{cpu, DeviceTensor, Element, Gpu, HostTensor};
use half::f16;
use std::time::Instant;

/// Deterministic inputs in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// One op at one shape: inputs (shape, values), scalars, and the reference result.
struct Job {
    name: &'static str,
    shape: String,
    inputs: Vec<(Vec<usize>, Vec<f32>)>,
    scalar: f32,
    want: Vec<f32>,
}

fn jobs(small: bool) -> Vec<Job> {
    let (m, n, k) = if small { (256, 256, 256) } else { (1024, 1024, 1024) };
    let (rows, cols) = if small { (256, 1024) } else { (4096, 4096) };
    let (b, h, s, d) = if small { (1, 2, 128, 64) } else { (2, 8, 512, 64) };
    let round = |v: Vec<f32>| if small { v } else { reference::round_to(&v, dt_kernels::DType::F16) };
    let a = round(values(m * k, 1));
    let bm = round(values(k * n, 2));
    let x = round(values(rows * cols, 3).iter().map(|v| v * 4.0).collect());
    let w = round(values(cols, 4).iter().map(|v| 1.0 + v * 0.5).collect());
    let bias = round(values(cols, 5));
    let q = round(values(b * h * s * d, 6));
    let kk = round(values(b * h * s * d, 7));
    let v = round(values(b * h * s * d, 8));
    let mm_in = vec![(vec![m, k], a.clone()), (vec![k, n], bm.clone())];
    let row_in = vec![(vec![rows, cols], x.clone()), (vec![cols], w.clone()), (vec![cols], bias.clone())];
    let att_in = vec![(vec![b, h, s, d], q.clone()), (vec![b, h, s, d], kk.clone()), (vec![b, h, s, d], v.clone())];
    vec![
        Job {
            name: "matmul",
            shape: format!("{m}x{n}x{k}"),
            inputs: mm_in.clone(),
            scalar: 0.0,
            want: reference::matmul(&a, &bm, m, n, k),
        },
        Job {
            name: "mm_leaky_relu",
            shape: format!("{m}x{n}x{k}"),
            inputs: mm_in,
            scalar: 0.0,
            want: reference::mm_leaky_relu(&a, &bm, m, n, k, 0.01),
        },
        Job {
            name: "softmax",
            shape: format!("{rows}x{cols}"),
            inputs: vec![(vec![rows, cols], x.clone())],
            scalar: 0.0,
            want: reference::softmax(&x, rows, cols),
        },
        Job {
            name: "layernorm",
            shape: format!("{rows}x{cols}"),
            inputs: row_in.clone(),
            scalar: 1e-5,
            want: reference::layernorm(&x, &w, &bias, rows, cols, 1e-5),
        },
        Job {
            name: "dyt",
            shape: format!("{rows}x{cols}"),
            inputs: row_in,
            scalar: 0.5,
            want: reference::dyt(&x, &w, &bias, 0.5, rows, cols),
        },
        Job {
            name: "attention",
            shape: format!("{b}x{h}x{s}x{d}"),
            inputs: att_in.clone(),
            scalar: 0.0,
            want: reference::attention(&q, &kk, &v, b, h, s, s, d, d, false),
        },
        Job {
            name: "attention_causal",
            shape: format!("{b}x{h}x{s}x{d}"),
            inputs: att_in,
            scalar: 0.0,
            want: reference::attention(&q, &kk, &v, b, h, s, s, d, d, true),
        },
    ]
}

fn run_gpu(gpu: &Gpu, job: &Job) -> dt_kernels::Result<(Vec<f32>, f64)> {
    let t: Vec<DeviceTensor<f16>> = job
        .inputs
        .iter()
        .map(|(shape, v)| gpu.upload(shape.clone(), &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>()))
        .collect::<Result<_, _>>()?;
    let call = || match job.name {
        "matmul" => dt_kernels::matmul::matmul(gpu, &t[0], &t[1]),
        "mm_leaky_relu" => dt_kernels::mm_leaky_relu::mm_leaky_relu(gpu, &t[0], &t[1]),
        "softmax" => dt_kernels::softmax::softmax(gpu, &t[0]),
        "layernorm" => dt_kernels::layernorm::layernorm(gpu, &t[0], &t[1], &t[2], job.scalar),
        "dyt" => dt_kernels::dyt::dyt(gpu, &t[0], &t[1], &t[2], job.scalar),
        "attention" => dt_kernels::attention::attention(gpu, &t[0], &t[1], &t[2], false),
        _ => dt_kernels::attention::attention(gpu, &t[0], &t[1], &t[2], true),
    };
    // The first call loads (or compiles) the kernels.
    let out = call()?;
    gpu.synchronize()?;
    let reps = 10;
    let start = Instant::now();
    for _ in 0..reps {
        call()?;
    }
    gpu.synchronize()?;
    let secs = start.elapsed().as_secs_f64() / reps as f64;
    Ok((out.to_host()?.into_iter().map(f16::to_f32).collect(), secs))
}

fn run_cpu(job: &Job) -> dt_kernels::Result<(Vec<f32>, f64)> {
    let t: Vec<HostTensor<f32>> =
        job.inputs.iter().map(|(shape, v)| HostTensor::new(shape.clone(), v.clone())).collect::<Result<_, _>>()?;
    let start = Instant::now();
    let out = match job.name {
        "matmul" => cpu::matmul(&t[0], &t[1]),
        "mm_leaky_relu" => cpu::mm_leaky_relu(&t[0], &t[1]),
        "softmax" => cpu::softmax(&t[0]),
        "layernorm" => cpu::layernorm(&t[0], &t[1], &t[2], job.scalar),
        "dyt" => cpu::dyt(&t[0], &t[1], &t[2], job.scalar),
        "attention" => cpu::attention(&t[0], &t[1], &t[2], false),
        _ => cpu::attention(&t[0], &t[1], &t[2], true),
    }?;
    Ok((out.to_f32_vec(), start.elapsed().as_secs_f64()))
}

fn main() {
    let gpu = Gpu::new();
    let (tolerance, dtype) = match &gpu {
        Ok(g) => {
            println!(
                "GPU: {} (kernels from {})",
                g.name().unwrap_or_else(|e| e.to_string()),
                match Gpu::fatbin_archs() {
                    Some(a) => format!("the fatbin built for {a}"),
                    None => "NVRTC".into(),
                }
            );
            (2e-2, f16::DTYPE)
        }
        Err(e) => {
            println!("no GPU ({e}); running the CPU fallback, at smaller shapes");
            (1e-5, f32::DTYPE)
        }
    };
    println!("{:<17} {:<14} {:>5} {:>12} {:>12}  status", "op", "shape", "dtype", "time (ms)", "rel. error");
    let mut failed = 0;
    for job in jobs(gpu.is_err()) {
        let result = match &gpu {
            Ok(g) => run_gpu(g, &job),
            Err(_) => run_cpu(&job),
        };
        match result {
            Ok((got, secs)) => {
                let err = error_stats(&got, &job.want).rel_l2;
                let ok = err <= tolerance;
                failed += usize::from(!ok);
                println!(
                    "{:<17} {:<14} {:>5} {:>12.3} {:>12.2e}  {}",
                    job.name,
                    job.shape,
                    dtype.name(),
                    secs * 1e3,
                    err,
                    if ok { "ok" } else { "WRONG" }
                );
            }
            Err(e) => {
                failed += 1;
                println!("{:<17} {:<14} {:>5} {:>12} {:>12}  error: {e}", job.name, job.shape, dtype.name(), "-", "-");
            }
        }
    }
    if failed > 0 {
        println!("{failed} kernel(s) failed");
        std::process::exit(1);
    }
    println!("all kernels match the reference");
}
