//! Bundle entry IDs (`<offload kind>-<triple>-<target ID>`), parsed, normalized and
//! matched the way clang-offload-bundler 22 does.

use crate::error::{Error, Result};
use crate::target_id::{is_known_offload_arch, TargetId};
use crate::triple::bundler_normal_form;

/// Offload kinds clang-offload-bundler 22 accepts.
pub const OFFLOAD_KINDS: &[&str] = &["host", "openmp", "hip", "hipv4"];

/// A bundle entry ID, `<offload kind>-<arch>-<vendor>-<os>-<env>[-<target ID>]`, parsed
/// the way clang-offload-bundler 22 does (`OffloadTargetInfo`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BundleEntryId {
    pub kind: String,
    /// The four triple components as written (not yet normalized).
    pub triple: String,
    /// The target ID with its features, as written; empty when absent, or when its
    /// processor is not an offload architecture clang knows (the bundler drops it).
    pub target_id: String,
}

impl BundleEntryId {
    /// Parse with the bundler's rules: the kind, then at least four triple components;
    /// anything after the fifth `-` is the target ID, which may itself contain `-`.
    pub fn parse(text: &str) -> Result<Self> {
        let syntax = |reason: String| Error::Syntax {
            what: "bundle entry ID",
            text: text.to_owned(),
            reason,
        };
        let parts: Vec<&str> = text.splitn(6, '-').collect();
        if parts.len() < 5 {
            return Err(syntax(
                "expected <offload kind>-<arch>-<vendor>-<os>-<env>[-<target id>]".into(),
            ));
        }
        let target = if parts.len() == 6 { parts[5] } else { "" };
        let processor = target.split(':').next().unwrap_or("");
        let target_id = if is_known_offload_arch(processor) {
            target.to_owned()
        } else {
            String::new()
        };
        Ok(BundleEntryId {
            kind: parts[0].to_owned(),
            triple: parts[1..5].join("-"),
            target_id,
        })
    }

    pub fn is_known_kind(&self) -> bool {
        OFFLOAD_KINDS.contains(&self.kind.as_str())
    }

    pub fn is_host(&self) -> bool {
        self.kind == "host"
    }

    /// The ID as the bundler writes it: kind, normalized triple, target ID.
    pub fn to_bundler_string(&self) -> String {
        format!(
            "{}-{}-{}",
            self.kind,
            bundler_normal_form(&self.triple),
            self.target_id
        )
    }

    fn kind_compatible(&self, other: &BundleEntryId, hip_openmp_compatible: bool) -> bool {
        let hip = |k: &str| k == "hip" || k == "hipv4";
        self.kind == other.kind
            || (hip(&self.kind) && hip(&other.kind))
            || (hip_openmp_compatible
                && ((hip(&self.kind) && other.kind == "openmp")
                    || (self.kind == "openmp" && hip(&other.kind))))
    }

    /// May the code object with this ID be unbundled for `wanted`? Exact match, or same
    /// kind family and triple, same processor, and every feature the code object
    /// specifies specified identically by `wanted` (the bundler's
    /// `isCodeObjectCompatible`).
    pub fn is_code_object_compatible(
        &self,
        wanted: &BundleEntryId,
        hip_openmp_compatible: bool,
    ) -> bool {
        if self.to_bundler_string() == wanted.to_bundler_string() {
            return true;
        }
        if !self.kind_compatible(wanted, hip_openmp_compatible)
            || !crate::triple::compatible(&self.triple, &wanted.triple)
        {
            return false;
        }
        if self.target_id.is_empty() || wanted.target_id.is_empty() {
            return self.target_id.is_empty() && wanted.target_id.is_empty();
        }
        match (
            TargetId::parse(&self.target_id),
            TargetId::parse(&wanted.target_id),
        ) {
            (Ok(code), Ok(want)) => {
                code.features.len() <= want.features.len()
                    && crate::target_id::is_compatible(&code, &want)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_normalize_like_the_bundler() {
        let cases = [
            (
                "openmp-nvptx64-nvidia-cuda-sm_90",
                "openmp-nvptx64-nvidia-cuda-sm_90-",
            ),
            (
                "openmp-nvptx64-nvidia-cuda--sm_90",
                "openmp-nvptx64-nvidia-cuda-unknown-sm_90",
            ),
            ("hip-amdgcn-amd-amdhsa-gfx90a", "hip-amdgcn-amd-amdhsa--"),
            (
                "hip-amdgcn-amd-amdhsa--gfx90a:sramecc-:xnack+",
                "hip-amdgcn-amd-amdhsa--gfx90a:sramecc-:xnack+",
            ),
            (
                "openmp-amdgcn--amdhsa-gfx906",
                "openmp-amdgcn-unknown-amdhsa--",
            ),
            (
                "hip-amdgcn-amd-amdhsa-unknown-gfx90a",
                "hip-amdgcn-amd-amdhsa--gfx90a",
            ),
            (
                "openmp-amdgcn-amd-amdhsa--gfx90A",
                "openmp-amdgcn-amd-amdhsa--",
            ),
            (
                "host-x86_64-unknown-linux-gnu",
                "host-x86_64-unknown-linux-gnu-",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                BundleEntryId::parse(input).unwrap().to_bundler_string(),
                want,
                "{input}"
            );
        }
        assert!(BundleEntryId::parse("openmp-nvptx64-nvidia-cuda").is_err());
    }
}
