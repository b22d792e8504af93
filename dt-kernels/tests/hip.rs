//! The `hip` feature where it can be checked without an AMD GPU: the embedded code objects (when
//! hipcc was found at build time, which CI requires with `DT_REQUIRE_TOOLCHAINS=1`), the choice of
//! code object by architecture, and clean errors from every entry point on a machine without ROCm
//! or without an AMD GPU. Where a GPU is present, a matmul runs and matches the CPU.
//!
//! Run with `cargo test -p dt-kernels --features hip --test hip`.
#![cfg(feature = "hip")]

use dt_kernels::hip::{self, Hip, HipTensor};
use dt_kernels::Error;

/// An AMD GPU code object as `hipModuleLoadData` takes it: an ELF for EM_AMDGPU (224), or (what
/// `hipcc --genco` writes) a clang offload bundle holding one for `arch`.
fn is_code_object(bytes: &[u8], arch: &str) -> bool {
    let elf = |b: &[u8]| b.len() > 64 && b.starts_with(b"\x7fELF") && b[4] == 2 && u16::from_le_bytes([b[18], b[19]]) == 224;
    let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    elf(bytes)
        || (bytes.starts_with(b"__CLANG_OFFLOAD_BUNDLE__")
            && contains(format!("amdgcn-amd-amdhsa--{arch}").as_bytes())
            && contains(b"\x7fELF"))
}

#[test]
fn code_objects_are_embedded_for_gfx90a() {
    let info = hip::build_info();
    let Some(hipcc) = info.hipcc else {
        if std::env::var_os("DT_REQUIRE_TOOLCHAINS").is_some() && std::env::var_os("DT_KERNELS_NO_HIPCC").is_none() {
            panic!("hipcc was not found when dt-kernels was built, and DT_REQUIRE_TOOLCHAINS is set (source .venv/toolchains.env)");
        }
        eprintln!("skipped: hipcc was not found when dt-kernels was built");
        assert!(info.built.is_empty());
        return;
    };
    assert!(info.built.iter().all(|a| info.requested.contains(a)), "{info:?}");
    if !info.requested.contains(&"gfx90a") {
        eprintln!("skipped: HIP_ARCHS did not ask for gfx90a ({:?})", info.requested);
        return;
    }
    assert!(info.built.contains(&"gfx90a"), "{hipcc} did not build gfx90a: {info:?}");
    for spec in ["matmul", "mm_leaky_relu", "softmax", "layernorm", "dyt", "attention"] {
        let co = hip::code_object(spec, "gfx90a").unwrap_or_else(|| panic!("no gfx90a code object for spec {spec}"));
        assert!(is_code_object(co, "gfx90a"), "the gfx90a code object of {spec} is not an AMDGPU code object");
        assert_eq!(co.as_ptr() as usize % 64, 0, "code object of {spec} not 64-byte aligned");
    }
    assert!(hip::code_object("matmul", "gfx000").is_none());
    assert!(hip::code_object("no_such_spec", "gfx90a").is_none());
}

#[test]
fn selects_the_code_object_by_architecture() {
    let built = ["gfx90a", "gfx942"];
    assert_eq!(hip::select_arch("gfx90a:sramecc+:xnack-", &built), Some("gfx90a"));
    assert_eq!(hip::select_arch("gfx942", &built), Some("gfx942"));
    assert_eq!(hip::select_arch("gfx1100", &built), None);
    assert_eq!(hip::select_arch("gfx90", &built), None);
    let featured = ["gfx90a:xnack+", "gfx90a"];
    assert_eq!(hip::select_arch("gfx90a:sramecc+:xnack+", &featured), Some("gfx90a:xnack+"));
    assert_eq!(hip::select_arch("gfx90a:sramecc+:xnack-", &featured), Some("gfx90a"));
    assert_eq!(hip::select_arch("gfx90a:xnack+", &featured), Some("gfx90a:xnack+"));
}

/// Without an AMD GPU (no /dev/kfd), opening a handle is `Error::Unavailable`, with a message,
/// and no panic. With one, a small matmul matches the CPU.
#[test]
fn entry_points_fail_cleanly_or_run() {
    match Hip::new() {
        Err(Error::Unavailable(msg)) => {
            assert!(!msg.is_empty());
            eprintln!("no AMD GPU here, as expected on this machine: {msg}");
            assert!(matches!(Hip::with_device(3), Err(Error::Unavailable(_))));
            if std::path::Path::new("/dev/kfd").exists() {
                eprintln!("note: /dev/kfd exists, but the HIP runtime found no usable GPU");
            }
        }
        Err(e) => panic!("opening a HIP device failed with an error other than Unavailable: {e}"),
        Ok(gpu) => {
            eprintln!("running on {} ({})", gpu.name(), gpu.arch());
            let a = HipTensor::from_host(&gpu, [2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
            let b = gpu.upload([2, 3], &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0]).unwrap();
            let bad = hip::matmul(&gpu, &a, &b).unwrap_err();
            assert!(matches!(bad, Error::ShapeMismatch { .. }), "{bad}");
            match hip::matmul(&gpu, &a, &b.transpose(0, 1).unwrap()) {
                Ok(c) => assert_eq!(c.to_host().unwrap(), vec![1.0, 6.0, 4.0, 15.0]),
                Err(Error::Compile { msg, .. }) => eprintln!("no code object for this GPU: {msg}"),
                Err(e) => panic!("{e}"),
            }
        }
    }
}

/// With an AMD GPU: a forked handle runs on its own stream, and tensors made on one stream and
/// used or written on the other give the results of running in order. Without one, skipped.
#[test]
fn forked_streams_order_cross_stream_use() {
    let gpu = match Hip::new() {
        Ok(gpu) => gpu,
        Err(e) => return eprintln!("skipped: no AMD GPU ({e})"),
    };
    let other = gpu.fork().unwrap();
    assert_ne!(gpu.raw_stream(), other.raw_stream());
    let x: Vec<f32> = (0..4 * 300).map(|i| ((i * 37 % 101) as f32 - 50.0) / 10.0).collect();
    let t = gpu.upload([4, 300], &x).unwrap();
    let want = dt_kernels::reference::softmax(&x, 4, 300);
    // Made on `gpu`, written on `other`, read back through `gpu`'s stream.
    let mut out = gpu.zeros::<f32>([4, 300]).unwrap();
    match hip::softmax_into(&other, &t, &mut out) {
        Ok(()) => {}
        Err(Error::Compile { msg, .. }) => return eprintln!("no code object for this GPU: {msg}"),
        Err(e) => panic!("{e}"),
    }
    let got = out.to_host().unwrap();
    let err = dt_kernels::reference::error_stats(&got, &want).max_abs;
    assert!(err < 1e-5, "softmax on a forked stream: max error {err}");
    // A handle on a stream of other code: here the fork's, which stays alive meanwhile.
    // SAFETY: `other`'s stream lives until `other` is dropped, after `borrowed` and its tensors.
    let borrowed = unsafe { gpu.with_stream(other.raw_stream()) };
    let again = hip::softmax(&borrowed, &t).unwrap().to_host().unwrap();
    assert_eq!(again, got);
}
