//! A kernel printed in a file of its own, as `xtask bench` compiles each row's, is printed as in
//! its spec's whole file (the library's): what the bench times is the library's code.

mod common;

use common::{kernel_text, read_spec};
use dt_codegen::emit::gpu::{emit_file, Dialect};

#[test]
fn a_kernel_printed_alone_reads_as_in_its_specs_file() {
    for spec in ["attention", "matmul", "softmax"] {
        let p = dt_core::compile_spec(&read_spec(&format!("dt-kernels/specs/{spec}.dt"))).expect("spec checks");
        let kernels = dt_core::lower::lower_all(&p).expect("lowers");
        let items = dt_codegen::emit::items(&kernels);
        let (whole, whole_infos) = emit_file(spec, Dialect::Cuda, &items).expect("emits");
        let mut printed = 0;
        for item in &items {
            let (alone, infos) = emit_file(spec, Dialect::Cuda, std::slice::from_ref(item)).expect("emits");
            for info in &infos {
                assert_eq!(kernel_text(&alone, &info.symbol), kernel_text(&whole, &info.symbol), "{spec}: {}", info.symbol);
                printed += 1;
            }
        }
        assert_eq!(printed, whole_infos.len(), "{spec}: every kernel and twin of the file, one item at a time");
    }
}
