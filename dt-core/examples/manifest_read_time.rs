//! What reading a spec's manifest costs next to compiling and lowering the spec, per library
//! spec (decision 0034): `cargo run --release -p dt-core --example manifest_read_time`.

use std::time::Instant;

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let reps = 5;
    for name in ["attention", "dyt", "layernorm", "matmul", "mm_leaky_relu", "softmax"] {
        let text = std::fs::read_to_string(format!("{root}/dt-kernels/specs/{name}.dt")).expect("spec");
        let json = std::fs::read_to_string(format!("{root}/dt-kernels/generated/{name}.manifest.json")).expect("manifest");
        let t = Instant::now();
        for _ in 0..reps {
            let p = dt_core::compile_spec(&text).expect("checks");
            std::hint::black_box(dt_core::lower::lower_all(&p).expect("lowers"));
        }
        let lower = t.elapsed().as_secs_f64() / reps as f64;
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(dt_core::manifest::Manifest::from_json(&json).expect("reads"));
        }
        let read = t.elapsed().as_secs_f64() / reps as f64;
        println!("{name:14} compile and lower {:8.3} ms   read the manifest {:7.3} ms", lower * 1e3, read * 1e3);
    }
}
