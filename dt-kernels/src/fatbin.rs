//! Which code of the embedded fatbins a CUDA GPU runs, so that the library chooses only the
//! classes that code can run. A fatbin holds machine code (SASS) for each architecture of the
//! build (`CUDA_COMPUTE_CAPS`, [`crate::registry::NVCC_ARCHS`]) and PTX for the highest portable
//! (unsuffixed) one. The driver runs SASS built for the GPU's major version and a minor version
//! up to its own (code for an `a` architecture, such as sm_90a, only on exactly that GPU; code
//! for an `f` architecture on its family, the same major version), and else compiles that PTX
//! where its architecture is at most the GPU's. Code compiled for an architecture below sm_90
//! has no thread-block clusters: the runtime header's cluster calls trap there.

/// An architecture of the build list: its number (compute capability times ten) and suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Arch {
    number: u32,
    suffix: Option<char>,
}

impl Arch {
    /// Whether code built for it has thread-block clusters (sm_90 and newer), from which the
    /// library's clustered classes run.
    pub(crate) fn has_clusters(self) -> bool {
        self.number >= 90
    }

    /// Whether it is sm_90a, whose code has Hopper's own instructions (wgmma, `setmaxnreg`),
    /// which the warp-specialized and `wgmma()` classes need.
    pub(crate) fn is_sm90a(self) -> bool {
        self.number == 90 && self.suffix == Some('a')
    }
}

/// The architectures of a build list such as `80,90a` or `sm_80, compute_90a` (entries it cannot
/// read are left out).
fn archs(list: &str) -> Vec<Arch> {
    list.split([',', ' ', '\t'])
        .filter_map(|entry| {
            let t = entry.trim();
            let t = t.strip_prefix("sm_").or_else(|| t.strip_prefix("compute_")).unwrap_or(t);
            let (digits, suffix) = match t.strip_suffix(['a', 'f']) {
                Some(rest) => (rest, t.chars().last()),
                None => (t, None),
            };
            let number = digits.replace('.', "").parse().ok()?;
            Some(Arch { number, suffix })
        })
        .collect()
}

/// The architecture of the code a GPU of compute capability `major.minor` runs from a fatbin
/// built for `list`: its SASS where the build has SASS it runs (the arch-specific one where
/// there are both), else the PTX it compiles; `None` where the fatbin has neither.
pub(crate) fn code_arch(list: &str, major: u32, minor: u32) -> Option<Arch> {
    let own = major * 10 + minor;
    let archs = archs(list);
    let runs_sass = |a: &&Arch| match a.suffix {
        Some('a') => a.number == own,
        _ => a.number / 10 == major && a.number <= own,
    };
    let sass = archs.iter().filter(runs_sass).max_by_key(|a| (a.number, a.suffix.is_some()));
    let ptx = archs.iter().filter(|a| a.suffix.is_none() && a.number <= own).max_by_key(|a| a.number);
    sass.or(ptx).copied()
}

/// The architecture number of [`code_arch`].
#[cfg(test)]
fn code_for(list: &str, major: u32, minor: u32) -> Option<u32> {
    code_arch(list, major, minor).map(|a| a.number)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default build (SASS for sm_80 and sm_90a, PTX for compute_80): the H100 runs the
    /// sm_90a code, an A100 or an RTX 4090 the sm_80 code, a Blackwell GPU the compute_80 PTX
    /// (no clusters there, so no clustered class); other builds as the driver picks their code.
    #[test]
    fn each_gpu_runs_the_code_the_driver_picks() {
        assert_eq!(code_for("80,90a", 9, 0), Some(90));
        assert_eq!(code_for("sm_80,sm_90a", 8, 0), Some(80));
        assert_eq!(code_for("80,90a", 8, 9), Some(80));
        assert_eq!(code_for("80,90a", 10, 0), Some(80));
        assert_eq!(code_for("80,90a", 12, 0), Some(80));
        assert_eq!(code_for("80", 9, 0), Some(80), "an sm_80 build on an H100: no clusters");
        assert_eq!(code_for("80,86", 8, 9), Some(86));
        assert_eq!(code_for("80,90", 10, 0), Some(90), "compute_90 PTX, compiled for Blackwell");
        assert_eq!(code_for("80,90a,100a", 10, 0), Some(100));
        assert_eq!(code_for("100f", 10, 3), Some(100));
        assert_eq!(code_for("90a", 8, 0), None);
        assert_eq!(code_for("8.0, compute_90a", 9, 0), Some(90));
        assert!(code_arch("80,90,90a", 9, 0).is_some_and(Arch::is_sm90a));
        assert!(code_arch("80,90", 9, 0).is_some_and(|a| a.has_clusters() && !a.is_sm90a()));
    }
}
