// Records the target triple, so that `dtc run --backend cpu` finds the C compiler for the machine
// it runs on the way the `cc` crate does.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=DT_HOST_TARGET={target}");
}
