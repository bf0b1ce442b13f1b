//! Which LLVM versions `cargo xtask install --llvm N` serves, and which Debian release
//! packages each (clang-N, libomp-N-dev, llvm-N-dev, ...): Debian 12 (bookworm) has LLVM
//! 16, Debian 13 (trixie) has 17 and 18 (and not 16). Asked before apt-get is, so that a
//! version the running release lacks gets a message naming the release that has it
//! instead of apt's "Unable to locate package".

use anyhow::{bail, Context, Result};

/// What `--llvm` means when it is not given.
pub const DEFAULT: u32 = 16;

/// One LLVM version and the Debian release that packages it.
pub struct Packaged {
    pub major: u32,
    pub codename: &'static str,
    pub release: &'static str,
}

/// Every version `install --llvm` takes.
pub const SERVED: [Packaged; 3] = [
    Packaged {
        major: 16,
        codename: "bookworm",
        release: "Debian 12",
    },
    Packaged {
        major: 17,
        codename: "trixie",
        release: "Debian 13",
    },
    Packaged {
        major: 18,
        codename: "trixie",
        release: "Debian 13",
    },
];

/// The release that packages LLVM `major`, or why none is served.
pub fn packaged(major: u32) -> Result<&'static Packaged> {
    match SERVED.iter().find(|p| p.major == major) {
        Some(p) => Ok(p),
        None => bail!(
            "LLVM {major} is not served: --llvm takes {}",
            SERVED.map(|p| p.major.to_string()).join(", ")
        ),
    }
}

/// Ok when this machine's release packages LLVM `major` (or is not one we know: then apt
/// decides), else the message naming the release that does.
pub fn ensure_packaged_here(major: u32) -> Result<()> {
    let wanted = packaged(major)?;
    let here = os_release_codename().unwrap_or_default();
    check(wanted, &here)
}

/// What one LLVM version needs, to build the project for it and to use it (on its
/// Debian release, or in a root of that release): clang and its headers and libraries (clang-N
/// pulls binutils, libc6-dev and libstdc++-dev), the offload packager and linker wrapper
/// clang runs for `-fopenmp-targets` (clang-tools-N), libomp and libomptarget N with
/// LLVM's plugins (libomp-N-dev), FileCheck, not and lit.py (llvm-N-tools), and what the
/// compiler plugin builds against (llvm-N-dev for llvm-config and the C API headers,
/// libclang-N-dev for clang's C++ headers, libclang-cppN-dev for the libclang-cpp.so link
/// name).
pub fn packages(major: u32) -> Vec<String> {
    let mut packages: Vec<String> = ["clang", "clang-tools", "libomp", "llvm", "llvm", "libclang"]
        .iter()
        .zip(["", "", "-dev", "-tools", "-dev", "-dev"])
        .map(|(name, suffix)| format!("{name}-{major}{suffix}"))
        .collect();
    packages.push(format!("libclang-cpp{major}-dev"));
    packages
}

fn check(wanted: &Packaged, here: &str) -> Result<()> {
    let Some(this) = SERVED.iter().find(|p| p.codename == here) else {
        return Ok(());
    };
    if this.codename == wanted.codename {
        return Ok(());
    }
    let major = wanted.major;
    bail!(
        "LLVM {major} is not packaged for {} ({here}): clang-{major}, libomp-{major}-dev, \
         llvm-{major}-dev, libclang-{major}-dev and libclang-cpp{major}-dev are {} ({}) \
         packages. Run `cargo xtask install --llvm {major}` on {}, or use the LLVM this \
         release has (`--llvm {}`); `cargo xtask test` builds and tests LLVM {major} in a \
         {} root.",
        this.release,
        wanted.release,
        wanted.codename,
        wanted.release,
        this.major,
        wanted.release
    )
}

/// This machine's Debian release, by codename (`/etc/os-release`).
pub fn os_release_codename() -> Result<String> {
    let text = std::fs::read_to_string("/etc/os-release")?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
        .context("/etc/os-release has no VERSION_CODENAME")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_17_on_debian_12_names_debian_13_and_the_packages() {
        let err = check(packaged(17).unwrap(), "bookworm")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not packaged for Debian 12"), "{err}");
        assert!(err.contains("Debian 13 (trixie)"), "{err}");
        assert!(err.contains("clang-17, libomp-17-dev"), "{err}");
        assert!(err.contains("--llvm 16"), "{err}");
    }

    #[test]
    fn each_version_is_served_on_its_release_and_unknown_releases_are_left_to_apt() {
        for (major, here) in [
            (16, "bookworm"),
            (17, "trixie"),
            (18, "trixie"),
            (18, "noble"),
        ] {
            assert!(
                check(packaged(major).unwrap(), here).is_ok(),
                "{major} {here}"
            );
        }
        assert!(check(packaged(16).unwrap(), "trixie").is_err());
        assert!(packaged(19).is_err());
    }
}
