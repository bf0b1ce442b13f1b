//! The small part of LLVM's `Triple::normalize` that bundle entry IDs need.
//!
//! clang-offload-bundler prints AMDHSA triples in three-component form followed by an
//! empty environment (`amdgcn-amd-amdhsa-`) and every other triple in four-component
//! form (`x86_64-unknown-linux-gnu`, `nvptx64-nvidia-cuda-unknown`). This module does
//! that for triples whose components are already in `arch-vendor-os-env` order, which is
//! what compilers write; unlike LLVM it does not reorder misplaced components.

/// Normalize `triple` to exactly `n` components, an empty component becoming `unknown`.
pub fn normalize_components(triple: &str, n: usize) -> String {
    let mut parts: Vec<&str> = triple.split('-').take(n).collect();
    while parts.len() < n {
        parts.push("");
    }
    parts
        .iter()
        .map(|p| if p.is_empty() { "unknown" } else { p })
        .collect::<Vec<_>>()
        .join("-")
}

/// True when the OS component is `amdhsa`.
pub fn is_amdhsa(triple: &str) -> bool {
    triple.split('-').nth(2) == Some("amdhsa")
}

/// The triple as clang-offload-bundler 22 writes it inside a bundle entry ID.
pub fn bundler_normal_form(triple: &str) -> String {
    if is_amdhsa(triple) {
        let mut s = normalize_components(triple, 3);
        s.push('-');
        s
    } else {
        normalize_components(triple, 4)
    }
}

/// The architecture component (`nvptx64`, `amdgcn`, `x86_64`).
pub fn arch(triple: &str) -> &str {
    triple.split('-').next().unwrap_or("")
}

/// Environment names LLVM's `Triple` recognises; any other environment component
/// (`sm_90`, `unknown`, empty) parses to "unknown environment".
const KNOWN_ENVIRONMENTS: &[&str] = &[
    "gnu",
    "gnuabin32",
    "gnuabi64",
    "gnueabi",
    "gnueabihf",
    "gnuf32",
    "gnuf64",
    "gnusf",
    "gnux32",
    "gnu_ilp32",
    "code16",
    "eabi",
    "eabihf",
    "android",
    "musl",
    "musleabi",
    "musleabihf",
    "muslx32",
    "msvc",
    "itanium",
    "cygnus",
    "coreclr",
    "simulator",
    "macabi",
    "ohos",
    "llvm",
    "mlibc",
];

/// LLVM's `Triple::isCompatibleWith` for triples in component order: arch, vendor and
/// OS must be equal (empty meaning `unknown`), environments equal once unrecognised
/// names are treated as "unknown".
pub fn compatible(a: &str, b: &str) -> bool {
    let parts = |t: &str| -> Vec<String> {
        normalize_components(t, 4)
            .split('-')
            .enumerate()
            .map(|(i, c)| {
                if i == 3 && !KNOWN_ENVIRONMENTS.contains(&c) {
                    String::new()
                } else {
                    c.to_owned()
                }
            })
            .collect()
    };
    parts(a) == parts(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundler_forms() {
        assert_eq!(
            bundler_normal_form("amdgcn-amd-amdhsa"),
            "amdgcn-amd-amdhsa-"
        );
        assert_eq!(
            bundler_normal_form("amdgcn--amdhsa-gfx906"),
            "amdgcn-unknown-amdhsa-"
        );
        assert_eq!(
            bundler_normal_form("nvptx64-nvidia-cuda-"),
            "nvptx64-nvidia-cuda-unknown"
        );
        assert_eq!(
            bundler_normal_form("x86_64-pc-linux-gnu"),
            "x86_64-pc-linux-gnu"
        );
    }

    #[test]
    fn compatibility() {
        assert!(compatible(
            "nvptx64-nvidia-cuda-sm_90",
            "nvptx64-nvidia-cuda-sm_80"
        ));
        assert!(compatible(
            "amdgcn-amd-amdhsa-",
            "amdgcn-amd-amdhsa-unknown"
        ));
        assert!(!compatible(
            "x86_64-pc-linux-gnu",
            "x86_64-unknown-linux-gnu"
        ));
        assert!(!compatible("x86_64-pc-linux-gnu", "x86_64-pc-linux-musl"));
    }
}
