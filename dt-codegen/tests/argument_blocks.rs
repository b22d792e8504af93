//! The argument blocks as the host packs them and as the generated code declares them have one
//! layout: `DtArgs` and the C `dt_args` of CPU kernels; `GpuArgs::offsets` (what `GpuArgs::pack`
//! writes) and the C++ `dt_args_t<N, R, S, C>` of GPU kernels, for every block a kernel of the
//! library takes and the largest. Checked by compiling `static_assert`s with this machine's C and
//! C++ compilers.

use dt_codegen::abi::{DtArgs, GpuArgs, C_DECL, GPU_DECL, MAX_DIMS, MAX_INPUTS, MAX_RANK, MAX_SCALARS};
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

fn compiler(cpp: bool) -> Command {
    let target = env!("DT_HOST_TARGET");
    let tool = cc::Build::new().cpp(cpp).target(target).host(target).opt_level(0).cargo_metadata(false).try_get_compiler();
    tool.unwrap_or_else(|e| panic!("no C{} compiler: {e}", if cpp { "++" } else { "" })).to_command()
}

/// Compiles `source` (only its syntax and static assertions) and fails with the compiler's
/// messages.
fn check_compiles(name: &str, source: &str, cpp: bool) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("argument_blocks");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(if cpp { format!("{name}.cpp") } else { format!("{name}.c") });
    std::fs::write(&src, source).unwrap();
    let mut cmd = compiler(cpp);
    cmd.arg(if cpp { "-std=c++17" } else { "-std=c11" }).arg("-fsyntax-only").arg(&src);
    let line = format!("{} {:?}", cmd.get_program().to_string_lossy(), cmd.get_args().collect::<Vec<_>>());
    let out = cmd.output().unwrap_or_else(|e| panic!("{line}: {e}"));
    assert!(out.status.success(), "{line}:\n{}\n{source}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn c_dt_args_has_the_layout_of_dt_args() {
    let source = format!(
        "#include <stddef.h>\n{C_DECL}\
         _Static_assert(sizeof(dt_args) == {}, \"size\");\n\
         _Static_assert(offsetof(dt_args, input_strides) == {}, \"input_strides\");\n\
         _Static_assert(offsetof(dt_args, output) == {}, \"output\");\n\
         _Static_assert(offsetof(dt_args, output_strides) == {}, \"output_strides\");\n\
         _Static_assert(offsetof(dt_args, sizes) == {}, \"sizes\");\n\
         _Static_assert(offsetof(dt_args, scalars) == {}, \"scalars\");\n\
         _Static_assert(sizeof(((dt_args*)0)->input_strides) == {}, \"input_strides extent\");\n\
         _Static_assert(sizeof(((dt_args*)0)->sizes) == {}, \"sizes extent\");\n\
         _Static_assert(sizeof(((dt_args*)0)->scalars) == {}, \"scalars extent\");\n",
        size_of::<DtArgs>(),
        offset_of!(DtArgs, input_strides),
        offset_of!(DtArgs, output),
        offset_of!(DtArgs, output_strides),
        offset_of!(DtArgs, sizes),
        offset_of!(DtArgs, scalars),
        8 * MAX_INPUTS * MAX_RANK,
        8 * MAX_DIMS,
        4 * MAX_SCALARS,
    );
    check_compiles("c_dt_args", &source, false);
}

#[test]
fn gpu_blocks_have_the_layout_that_packing_writes() {
    let mut blocks = vec![
        GpuArgs { inputs: MAX_INPUTS, rank: MAX_RANK, sizes: MAX_DIMS, scalars: MAX_SCALARS },
        GpuArgs { inputs: 1, rank: 1, sizes: 1, scalars: 1 },
        GpuArgs { inputs: 3, rank: 2, sizes: 2, scalars: 2 },
    ];
    let specs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dt-kernels/specs");
    for entry in std::fs::read_dir(&specs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "dt") {
            continue;
        }
        let program = dt_core::compile_spec(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for k in dt_core::lower::lower_all(&program).unwrap() {
            blocks.push(GpuArgs::of(&k));
        }
    }
    blocks.sort_by_key(|g| (g.inputs, g.rank, g.sizes, g.scalars));
    blocks.dedup();
    let mut source = format!("#include <cstddef>\n{GPU_DECL}");
    for (i, g) in blocks.iter().enumerate() {
        let t = format!("b{i}");
        source += &format!("typedef {} {t};\n", g.c_type());
        let [strides, output, output_strides, sizes, scalars, end] = g.offsets();
        source += &format!(
            "static_assert(offsetof({t}, input_strides) == {strides} && offsetof({t}, output) == {output} && \
             offsetof({t}, output_strides) == {output_strides} && offsetof({t}, sizes) == {sizes} && \
             offsetof({t}, scalars) == {scalars} && sizeof({t}) == {end}, \"{}\");\n",
            g.c_type()
        );
        assert!(g.bytes() <= size_of::<DtArgs>(), "{} is larger than the buffer it is packed in", g.c_type());
    }
    check_compiles("gpu_args", &source, true);
}
