//! Target IDs: `<processor>(:<feature>(+|-))*`, e.g. `gfx90a:sramecc+:xnack-`.
//!
//! A feature left out means *Any*: the code object runs whether the device has the
//! feature on or off. `+` (*On*) and `-` (*Off*) code objects run only on a device
//! configured the same way. The canonical form uses the primary processor name and
//! sorts features alphabetically.

use crate::error::{Error, Result};
use std::fmt;

/// The setting of one target feature in a target ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum FeatureSetting {
    On,
    Off,
}

/// A parsed target ID. `features` holds only the features that are specified (On/Off);
/// a feature absent from it is *Any*.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct TargetId {
    pub processor: String,
    pub features: Vec<(String, FeatureSetting)>,
}

/// Offload architectures clang 22 knows (`clang::StringToOffloadArch`). The bundler
/// keeps a target ID in a bundle entry ID only when its processor is one of these.
pub const KNOWN_OFFLOAD_ARCHS: &[&str] = &[
    "sm_20",
    "sm_21",
    "sm_30",
    "sm_32",
    "sm_35",
    "sm_37",
    "sm_50",
    "sm_52",
    "sm_53",
    "sm_60",
    "sm_61",
    "sm_62",
    "sm_70",
    "sm_72",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_87",
    "sm_88",
    "sm_89",
    "sm_90",
    "sm_90a",
    "sm_100",
    "sm_100a",
    "sm_101",
    "sm_101a",
    "sm_103",
    "sm_103a",
    "sm_110",
    "sm_110a",
    "sm_120",
    "sm_120a",
    "sm_121",
    "sm_121a",
    "gfx600",
    "gfx601",
    "gfx602",
    "gfx700",
    "gfx701",
    "gfx702",
    "gfx703",
    "gfx704",
    "gfx705",
    "gfx801",
    "gfx802",
    "gfx803",
    "gfx805",
    "gfx810",
    "gfx9-generic",
    "gfx900",
    "gfx902",
    "gfx904",
    "gfx906",
    "gfx908",
    "gfx909",
    "gfx90a",
    "gfx90c",
    "gfx9-4-generic",
    "gfx942",
    "gfx950",
    "gfx10-1-generic",
    "gfx1010",
    "gfx1011",
    "gfx1012",
    "gfx1013",
    "gfx10-3-generic",
    "gfx1030",
    "gfx1031",
    "gfx1032",
    "gfx1033",
    "gfx1034",
    "gfx1035",
    "gfx1036",
    "gfx11-generic",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1103",
    "gfx1150",
    "gfx1151",
    "gfx1152",
    "gfx1153",
    "gfx12-generic",
    "gfx1200",
    "gfx1201",
    "gfx1250",
    "gfx1251",
];

/// AMDGPU alternative processor names (AMDGPUUsage) and their primary names.
const ALTERNATIVE_NAMES: &[(&str, &str)] = &[
    ("tahiti", "gfx600"),
    ("pitcairn", "gfx601"),
    ("verde", "gfx601"),
    ("hainan", "gfx602"),
    ("oland", "gfx602"),
    ("kaveri", "gfx700"),
    ("hawaii", "gfx701"),
    ("kabini", "gfx703"),
    ("mullins", "gfx703"),
    ("bonaire", "gfx704"),
    ("carrizo", "gfx801"),
    ("iceland", "gfx802"),
    ("tonga", "gfx802"),
    ("fiji", "gfx803"),
    ("polaris10", "gfx803"),
    ("polaris11", "gfx803"),
    ("tongapro", "gfx805"),
    ("stoney", "gfx810"),
];

/// Is `processor` an offload architecture clang 22 knows (case-sensitive, as clang)?
pub fn is_known_offload_arch(processor: &str) -> bool {
    KNOWN_OFFLOAD_ARCHS.contains(&processor)
}

impl TargetId {
    /// Parse a target ID in canonical or non-canonical form. Rejects an empty
    /// processor, a feature without `+`/`-`, and a feature given twice.
    pub fn parse(text: &str) -> Result<TargetId> {
        let err = |reason: String| Error::Syntax {
            what: "target ID",
            text: text.to_owned(),
            reason,
        };
        let mut parts = text.split(':');
        let processor = parts.next().unwrap_or("");
        if processor.is_empty() {
            return Err(err("empty processor".into()));
        }
        let mut features: Vec<(String, FeatureSetting)> = Vec::new();
        for f in parts {
            let (name, setting) = match f.as_bytes().last() {
                Some(b'+') => (&f[..f.len() - 1], FeatureSetting::On),
                Some(b'-') => (&f[..f.len() - 1], FeatureSetting::Off),
                _ => return Err(err(format!("feature `{f}` must end in `+` or `-`"))),
            };
            if name.is_empty() {
                return Err(err("empty feature name".into()));
            }
            if features.iter().any(|(n, _)| n == name) {
                return Err(err(format!("feature `{name}` given twice")));
            }
            features.push((name.to_owned(), setting));
        }
        Ok(TargetId {
            processor: processor.to_owned(),
            features,
        })
    }

    /// The canonical form: primary processor name, features in alphabetical order.
    pub fn canonical(&self) -> TargetId {
        let processor = ALTERNATIVE_NAMES
            .iter()
            .find(|(alt, _)| *alt == self.processor)
            .map_or(self.processor.as_str(), |(_, primary)| primary)
            .to_owned();
        let mut features = self.features.clone();
        features.sort_by(|a, b| a.0.cmp(&b.0));
        TargetId {
            processor,
            features,
        }
    }

    /// The setting of `feature`, `None` meaning *Any*.
    pub fn feature(&self, feature: &str) -> Option<FeatureSetting> {
        self.features
            .iter()
            .find(|(n, _)| n == feature)
            .map(|(_, s)| *s)
    }
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for (name, setting) in &self.features {
            let sign = match setting {
                FeatureSetting::On => '+',
                FeatureSetting::Off => '-',
            };
            write!(f, ":{name}{sign}")?;
        }
        Ok(())
    }
}

/// Can a code object built for `code_object` run on a device described by `device`?
///
/// The processors (canonical names) must be equal; every feature the code object
/// specifies must be specified identically by the device. A feature the code object
/// leaves out (*Any*) matches either setting. This is clang's `isCompatibleTargetID`.
pub fn is_compatible(code_object: &TargetId, device: &TargetId) -> bool {
    let (code, dev) = (code_object.canonical(), device.canonical());
    code.processor == dev.processor
        && code
            .features
            .iter()
            .all(|(name, setting)| dev.feature(name) == Some(*setting))
}

/// The one tie-break of every code-object choice ([`best_match`], the HIP backend's
/// `select`, [`crate::image::best_for_device`]): the highest rank wins and, among equal
/// ranks, the EARLIEST candidate, i.e. the order the packager (clang-offload-bundler,
/// clang-linker-wrapper) wrote. That order is the only one a user controls, so the
/// first of two equally good builds is the one they listed first. `rank` is `None` for
/// a candidate that cannot run at all.
pub fn best_index<T>(candidates: &[T], rank: impl Fn(&T) -> Option<i64>) -> Option<usize> {
    let mut best: Option<(i64, usize)> = None;
    for (at, candidate) in candidates.iter().enumerate() {
        if let Some(r) = rank(candidate) {
            if best.is_none_or(|(b, _)| r > b) {
                best = Some((r, at));
            }
        }
    }
    best.map(|(_, at)| at)
}

/// How well a code object for `code_object` suits `device`: `None` if it cannot run,
/// else the number of features it specifies (the most specialised build ranks highest).
pub fn rank(code_object: &TargetId, device: &TargetId) -> Option<i64> {
    is_compatible(code_object, device).then_some(code_object.features.len() as i64)
}

/// Of several code objects, pick the best for `device`: compatible, and among those the
/// one that specifies the most features (the most specialised build); ties go to the
/// earliest ([`best_index`]).
pub fn best_match<'t>(candidates: &'t [TargetId], device: &TargetId) -> Option<&'t TargetId> {
    best_index(candidates, |c| rank(c, device)).map(|at| &candidates[at])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TargetId {
        TargetId::parse(s).unwrap()
    }

    #[test]
    fn canonical_form_sorts_and_renames() {
        assert_eq!(
            id("fiji:xnack+:sramecc-").canonical().to_string(),
            "gfx803:sramecc-:xnack+"
        );
        assert_eq!(id("gfx90a").canonical().to_string(), "gfx90a");
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            ":xnack+",
            "gfx90a:xnack",
            "gfx90a:+",
            "gfx90a:xnack+:xnack-",
        ] {
            assert!(TargetId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn any_on_off_rules() {
        let dev_on = id("gfx90a:sramecc+:xnack+");
        let dev_off = id("gfx90a:sramecc+:xnack-");
        assert!(is_compatible(&id("gfx90a"), &dev_on));
        assert!(is_compatible(&id("gfx90a"), &dev_off));
        assert!(is_compatible(&id("gfx90a:xnack+"), &dev_on));
        assert!(!is_compatible(&id("gfx90a:xnack+"), &dev_off));
        assert!(!is_compatible(&id("gfx90a:xnack-"), &dev_on));
        assert!(!is_compatible(&id("gfx908"), &dev_on));
        // A device that does not say: only Any code objects are safe.
        assert!(!is_compatible(&id("gfx90a:xnack+"), &id("gfx90a")));
        assert!(is_compatible(&id("gfx803"), &id("fiji:xnack-")));
    }

    #[test]
    fn best_match_prefers_specialised() {
        let c = [id("gfx90a"), id("gfx90a:xnack+"), id("gfx90a:xnack-")];
        assert_eq!(best_match(&c, &id("gfx90a:xnack+")), Some(&c[1]));
        assert_eq!(best_match(&c, &id("gfx90a:sramecc+:xnack-")), Some(&c[2]));
        assert_eq!(best_match(&c, &id("gfx908:xnack-")), None);
        // Equally specific builds: the earliest wins (it used to be the last).
        let twins = [id("gfx90a:xnack+"), id("gfx90a:xnack+"), id("gfx90a")];
        let chosen = best_match(&twins, &id("gfx90a:xnack+")).unwrap();
        assert!(std::ptr::eq(chosen, &twins[0]));
    }
}
