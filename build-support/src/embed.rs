//! Embedding artifacts: a build script collects items in an [`EmbedModule`], writes it to
//! OUT_DIR, and the crate includes it with `include!(concat!(env!("OUT_DIR"), "/kernels.rs"))`.

use std::io;
use std::path::Path;

/// Rust source text of `static` items that embed files, plus any raw items.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmbedModule {
    text: String,
}

impl EmbedModule {
    /// An empty module.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `pub static NAME: &[u8]`, the bytes of the file at `path` (absolute), aligned to
    /// 64 bytes so that loaders that parse the image in place (cubin, fatbin, code objects)
    /// get an aligned start.
    pub fn bytes(&mut self, name: &str, path: &Path) -> io::Result<&mut Self> {
        check_name(name)?;
        let lit = path_literal(path)?;
        self.text.push_str(&format!(
            "pub static {name}: &[u8] = {{\n    \
             #[repr(C, align(64))]\n    \
             struct Aligned<T: ?Sized>(T);\n    \
             static DATA: &Aligned<[u8]> = &Aligned(*include_bytes!({lit}));\n    \
             &DATA.0\n}};\n"
        ));
        Ok(self)
    }

    /// Adds `pub static NAME: &str`, the text of the file at `path` (absolute), e.g. CUDA C
    /// for NVRTC.
    pub fn str(&mut self, name: &str, path: &Path) -> io::Result<&mut Self> {
        check_name(name)?;
        let lit = path_literal(path)?;
        self.text.push_str(&format!("pub static {name}: &str = include_str!({lit});\n"));
        Ok(self)
    }

    /// Adds `item` verbatim (e.g. `pub const HAS_FATBIN: bool = false;`), followed by a newline.
    pub fn item(&mut self, item: &str) -> &mut Self {
        self.text.push_str(item);
        self.text.push('\n');
        self
    }

    /// The source text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Writes the source text to `path`, leaving the file untouched when it already holds it.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        if std::fs::read(path).ok().as_deref() == Some(self.text.as_bytes()) {
            return Ok(());
        }
        std::fs::write(path, &self.text)
    }
}

fn check_name(name: &str) -> io::Result<()> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic()) && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(invalid(format!("{name:?} is not a Rust identifier")))
    }
}

/// `path` as a Rust string literal. Relative paths would resolve against the including file,
/// so only absolute ones are accepted.
fn path_literal(path: &Path) -> io::Result<String> {
    if !path.is_absolute() {
        return Err(invalid(format!("{} is not an absolute path", path.display())));
    }
    let s = path.to_str().ok_or_else(|| invalid(format!("{} is not UTF-8", path.display())))?;
    // Debug formatting of a str is a valid Rust string literal.
    Ok(format!("{s:?}"))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_items() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("k \"1\".fatbin");
        let mut m = EmbedModule::new();
        m.bytes("K_FATBIN", &bin).unwrap().str("K_CU", &dir.path().join("k.cu")).unwrap().item("pub const HAS_FATBIN: bool = true;");
        let text = m.as_str();
        let lit = format!("{:?}", bin.to_str().unwrap());
        assert!(lit.contains("\\\""));
        assert!(text.starts_with("pub static K_FATBIN: &[u8] = {\n"));
        assert!(text.contains(&format!("include_bytes!({lit})")));
        assert!(text.contains("pub static K_CU: &str = include_str!("));
        assert!(text.ends_with("pub const HAS_FATBIN: bool = true;\n"));

        let out = dir.path().join("kernels.rs");
        m.write(&out).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), text);

        assert!(m.bytes("1X", &bin).is_err());
        assert!(m.bytes("a-b", &bin).is_err());
        assert!(m.str("X", Path::new("rel/k.cu")).is_err());
    }

    /// The generated items compile, and the bytes come out aligned and intact.
    #[test]
    fn generated_items_compile() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        std::fs::write(d.join("k.bin"), &data).unwrap();
        std::fs::write(d.join("k.cu"), "__global__ void k() {}\n").unwrap();
        let mut m = EmbedModule::new();
        m.bytes("K_BIN", &d.join("k.bin")).unwrap();
        m.str("K_CU", &d.join("k.cu")).unwrap();
        m.write(&d.join("kernels.rs")).unwrap();
        std::fs::write(
            d.join("main.rs"),
            "include!(\"kernels.rs\");\n\
             fn main() {\n\
             assert_eq!(K_BIN.as_ptr() as usize % 64, 0);\n\
             assert_eq!(K_BIN.iter().map(|&b| b as u64).sum::<u64>(), EXPECTED_SUM);\n\
             assert_eq!(K_CU, \"__global__ void k() {}\\n\");\n}\n",
        )
        .unwrap();
        let sum: u64 = data.iter().map(|&b| b as u64).sum();
        let main = std::fs::read_to_string(d.join("main.rs")).unwrap();
        std::fs::write(d.join("main.rs"), format!("const EXPECTED_SUM: u64 = {sum};\n{main}")).unwrap();
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let exe = d.join("check");
        let out = std::process::Command::new(rustc).args(["--edition", "2021", "-o"]).arg(&exe).arg(d.join("main.rs")).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let run = std::process::Command::new(&exe).output().unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    }
}
