//! An application of the DT kernel library: a small model's forward pass (layer norm, a
//! two-layer perceptron with a leaky ReLU, a softmax over the outputs, and a DyT) and one
//! attention, through the public API, on the GPU in f16 where there is one and on the CPU
//! fallback in f32 otherwise; each result is compared with the library's own references.
//!
//! `cargo run --release --manifest-path examples/downstream/Cargo.toml`

use dt_kernels::reference;
use dt_kernels::{Element, Gpu, HostTensor};
use half::f16;

const TOKENS: usize = 96;
const WIDTH: usize = 128;
const HIDDEN: usize = 256;
const CLASSES: usize = 40;

/// Values in [-scale, scale), from a seed.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The model's inputs and weights, rounded to the element type the run uses.
struct Model {
    x: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    w1: Vec<f32>,
    w2: Vec<f32>,
}

impl Model {
    fn new(round: impl Fn(Vec<f32>) -> Vec<f32>) -> Model {
        Model {
            x: round(values(TOKENS * WIDTH, 1, 2.0)),
            gamma: round(values(WIDTH, 2, 0.5).iter().map(|v| 1.0 + v).collect()),
            beta: round(values(WIDTH, 3, 0.1)),
            w1: round(values(WIDTH * HIDDEN, 4, 0.1)),
            w2: round(values(HIDDEN * CLASSES, 5, 0.1)),
        }
    }

    /// The forward pass with the hand-written references: (probabilities, DyT of the input).
    fn reference(&self, round: impl Fn(Vec<f32>) -> Vec<f32>) -> (Vec<f32>, Vec<f32>) {
        let h = round(reference::layernorm(&self.x, &self.gamma, &self.beta, TOKENS, WIDTH, 1e-5));
        let a = round(reference::mm_leaky_relu(&h, &self.w1, TOKENS, HIDDEN, WIDTH, 0.01));
        let z = round(reference::matmul(&a, &self.w2, TOKENS, CLASSES, HIDDEN));
        (reference::softmax(&z, TOKENS, CLASSES), reference::dyt(&self.x, &self.gamma, &self.beta, 0.5, TOKENS, WIDTH))
    }
}

/// The forward pass on the GPU: every intermediate stays on the device.
fn forward_gpu(gpu: &Gpu, m: &Model) -> dt_kernels::Result<(Vec<f32>, Vec<f32>)> {
    let up = |shape: Vec<usize>, v: &[f32]| gpu.upload(shape, &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>());
    let (x, gamma, beta) = (up(vec![TOKENS, WIDTH], &m.x)?, up(vec![WIDTH], &m.gamma)?, up(vec![WIDTH], &m.beta)?);
    let (w1, w2) = (up(vec![WIDTH, HIDDEN], &m.w1)?, up(vec![HIDDEN, CLASSES], &m.w2)?);
    let h = dt_kernels::layernorm::layernorm(gpu, &x, &gamma, &beta, 1e-5)?;
    let a = dt_kernels::mm_leaky_relu::mm_leaky_relu(gpu, &h, &w1)?;
    let z = dt_kernels::matmul::matmul(gpu, &a, &w2)?;
    let p = dt_kernels::softmax::softmax(gpu, &z)?;
    let d = dt_kernels::dyt::dyt(gpu, &x, &gamma, &beta, 0.5)?;
    let down = |t: dt_kernels::DeviceTensor<f16>| t.to_host().map(|v| v.into_iter().map(f16::to_f32).collect());
    Ok((down(p)?, down(d)?))
}

/// The same on the CPU fallback.
fn forward_cpu(m: &Model) -> dt_kernels::Result<(Vec<f32>, Vec<f32>)> {
    use dt_kernels::cpu;
    let t = |shape: Vec<usize>, v: &[f32]| HostTensor::new(shape, v.to_vec());
    let (x, gamma, beta) = (t(vec![TOKENS, WIDTH], &m.x)?, t(vec![WIDTH], &m.gamma)?, t(vec![WIDTH], &m.beta)?);
    let h = cpu::layernorm(&x, &gamma, &beta, 1e-5)?;
    let a = cpu::mm_leaky_relu(&h, &t(vec![WIDTH, HIDDEN], &m.w1)?)?;
    let z = cpu::matmul(&a, &t(vec![HIDDEN, CLASSES], &m.w2)?)?;
    Ok((cpu::softmax(&z)?.to_f32_vec(), cpu::dyt(&x, &gamma, &beta, 0.5)?.to_f32_vec()))
}

/// Causal attention of 2 batches of 4 heads, 70 queries and keys of 64: (result, reference).
fn attention(gpu: Option<&Gpu>, round: impl Fn(Vec<f32>) -> Vec<f32>) -> dt_kernels::Result<(Vec<f32>, Vec<f32>)> {
    let shape = vec![2, 4, 70, 64];
    let n = shape.iter().product();
    let (q, k, v) = (round(values(n, 6, 1.0)), round(values(n, 7, 1.0)), round(values(n, 8, 1.0)));
    let want = reference::attention(&q, &k, &v, 2, 4, 70, 70, 64, 64, true);
    let got = match gpu {
        Some(gpu) => {
            let up = |v: &[f32]| gpu.upload(shape.clone(), &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>());
            let out = dt_kernels::attention::attention(gpu, &up(&q)?, &up(&k)?, &up(&v)?, true)?;
            out.to_host()?.into_iter().map(f16::to_f32).collect()
        }
        None => {
            let t = |v: &[f32]| HostTensor::new(shape.clone(), v.to_vec());
            dt_kernels::cpu::attention(&t(&q)?, &t(&k)?, &t(&v)?, true)?.to_f32_vec()
        }
    };
    Ok((got, want))
}

fn main() -> dt_kernels::Result<()> {
    let gpu = Gpu::new().ok();
    let dtype = if gpu.is_some() { f16::DTYPE } else { f32::DTYPE };
    let round = |v: Vec<f32>| reference::round_to(&v, dtype);
    let model = Model::new(round);
    let (probs, dyt) = match &gpu {
        Some(g) => forward_gpu(g, &model)?,
        None => forward_cpu(&model)?,
    };
    let (want_probs, want_dyt) = model.reference(round);
    let (att, want_att) = attention(gpu.as_ref(), round)?;
    let tolerance = if gpu.is_some() { 3e-2 } else { 1e-5 };
    let where_ = gpu.as_ref().map_or("the CPU fallback".to_string(), |g| g.name().unwrap_or_default());
    println!("downstream: {dtype} on {where_}");
    let mut failed = false;
    for (name, got, want) in [("model", &probs, &want_probs), ("dyt", &dyt, &want_dyt), ("attention", &att, &want_att)] {
        let err = reference::error_stats(got, want).rel_l2;
        let ok = err <= tolerance;
        failed |= !ok;
        println!("{name:<10} relative error {err:.2e}  {}", if ok { "ok" } else { "WRONG" });
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
