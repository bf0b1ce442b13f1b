//! The symbol checks every artifact passes before it is delivered.

use crate::targets::{Artifact, EXPORTED_SYMBOLS};
use anyhow::{bail, ensure, Context, Result};
use std::collections::HashSet;
use std::path::Path;
use xshell::{cmd, Shell};

/// Symbols the x86_64 library may leave to the C library.
const LIBC_SYMBOLS: &[&str] = &["memcpy", "memmove", "memset", "memcmp", "bcmp", "strlen"];

/// The artifact defines the three exported symbols; bitcode references nothing
/// outside itself (a leftover call into `core`, e.g. a panic, would be unresolved on
/// the device); the static library needs at most a few libc functions.
pub fn check(path: &Path, artifact: Artifact) -> Result<()> {
    let nm = crate::tools::llvm22("llvm-nm")?;
    let sh = Shell::new()?;
    let list =
        |which: &str| crate::tools::read(cmd!(sh, "{nm} {which} --format=just-symbols {path}"));
    let (defined, undefined) = (list("--defined-only")?, list("--undefined-only")?);
    check_lists(&defined, &undefined, artifact)
        .with_context(|| format!("checking the symbols of {}", path.display()))
}

/// [`check`]'s rule on llvm-nm's two lists (a symbol a line; archives add `member:`
/// lines).
fn check_lists(defined: &str, undefined: &str, artifact: Artifact) -> Result<()> {
    let defined: HashSet<&str> = defined.lines().map(str::trim).collect();
    for sym in EXPORTED_SYMBOLS {
        ensure!(defined.contains(sym), "it does not define {sym}");
    }
    let unresolved: Vec<&str> = undefined
        .lines()
        .map(str::trim)
        .filter(|s| !s.is_empty() && !s.ends_with(':') && !defined.contains(s))
        .filter(|s| artifact == Artifact::Bitcode || !LIBC_SYMBOLS.contains(s))
        .collect();
    if !unresolved.is_empty() {
        bail!("it has unresolved references: {}", unresolved.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported() -> String {
        EXPORTED_SYMBOLS.join("\n")
    }

    #[test]
    fn every_exported_symbol_must_be_defined() {
        assert!(check_lists(&exported(), "", Artifact::Bitcode).is_ok());
        let without_first = EXPORTED_SYMBOLS[1..].join("\n");
        let err = check_lists(&without_first, "", Artifact::Bitcode).unwrap_err();
        assert!(err.to_string().contains(EXPORTED_SYMBOLS[0]), "{err}");
    }

    #[test]
    fn bitcode_may_reference_nothing_outside_and_the_library_only_libc() {
        // An archive member header and a reference the archive itself resolves.
        let defined = format!("{}\nhelper", exported());
        let undefined = "libdevice_rtl.a:device_rtl.o:\nhelper\nmemcpy\n";
        assert!(check_lists(&defined, undefined, Artifact::StaticLib).is_ok());
        let err = check_lists(&defined, undefined, Artifact::Bitcode).unwrap_err();
        assert!(err.to_string().ends_with("memcpy"), "{err}");
        let panic = "memset\ncore::panicking::panic\n";
        let err = check_lists(&defined, panic, Artifact::StaticLib).unwrap_err();
        assert!(err.to_string().ends_with("core::panicking::panic"), "{err}");
    }
}
