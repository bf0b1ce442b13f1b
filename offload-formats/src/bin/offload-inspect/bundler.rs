//! `bundle`, `unbundle` and `list`: clang-offload-bundler's options, checks and
//! messages. Writing is in [`write`], reading in [`read`].

mod objcopy;
mod read;
mod write;

use crate::{fail, CliResult, Failure};
use offload_formats::bundle::{text, BundleEntryId};

/// clang-offload-bundler's options. LLVM's command line accepts `-name=value`,
/// `--name=value` and `-name value`; clap does not do single-dash long options, so
/// argv is normalised here.
#[derive(Default, Debug)]
pub struct BundlerOptions {
    pub file_type: Option<String>,
    pub targets: Vec<String>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub compress: bool,
    pub compression_level: Option<i32>,
    pub bundle_align: u64,
    pub allow_missing_bundles: bool,
    pub hip_openmp_compatible: bool,
}

impl BundlerOptions {
    pub fn parse(args: &[String]) -> CliResult<Self> {
        let mut o = BundlerOptions {
            bundle_align: 1,
            ..Default::default()
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let Some(stripped) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
                return fail(format!("unexpected positional argument '{arg}'"));
            };
            let (name, inline) = match stripped.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (stripped, None),
            };
            let mut value = |name: &str| -> CliResult<String> {
                match inline.clone().or_else(|| it.next().cloned()) {
                    Some(v) => Ok(v),
                    None => fail(format!("for the --{name} option: requires a value!")),
                }
            };
            let comma_list = |v: String| -> Vec<String> {
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            };
            match name {
                "type" => o.file_type = Some(value(name)?),
                "targets" => o.targets.extend(comma_list(value(name)?)),
                "input" => o.inputs.push(value(name)?),
                "inputs" => o.inputs.extend(comma_list(value(name)?)),
                "output" => o.outputs.push(value(name)?),
                "outputs" => o.outputs.extend(comma_list(value(name)?)),
                "compress" => o.compress = true,
                "compression-level" => {
                    let v = value(name)?;
                    o.compression_level = Some(v.parse().map_err(|_| {
                        Failure(format!("for the --compression-level option: '{v}' value invalid for integer argument!"))
                    })?)
                }
                "bundle-align" => {
                    let v = value(name)?;
                    o.bundle_align = v.parse().map_err(|_| {
                        Failure(format!(
                            "for the --bundle-align option: '{v}' value invalid for uint argument!"
                        ))
                    })?
                }
                "allow-missing-bundles" => o.allow_missing_bundles = true,
                "hip-openmp-compatible" => o.hip_openmp_compatible = true,
                // Mode flags are implied by the subcommand; verbosity is not modelled.
                "list" | "unbundle" | "verbose" | "check-input-archive" => {}
                _ => return fail(format!("Unknown command line argument '{arg}'.")),
            }
        }
        // The bundler's environment switch for compression.
        let env_ignored = std::env::var_os("OFFLOAD_BUNDLER_IGNORE_ENV_VAR").is_some();
        if !env_ignored && std::env::var_os("OFFLOAD_BUNDLER_COMPRESS").is_some() {
            o.compress = true;
        }
        if o.compression_level.is_none() && !env_ignored {
            if let Some(level) = std::env::var("OFFLOAD_BUNDLER_COMPRESSION_LEVEL")
                .ok()
                .and_then(|v| v.parse().ok())
            {
                o.compression_level = Some(level);
            }
        }
        Ok(o)
    }
}

/// How a `-type` is stored.
pub enum Format {
    Binary,
    /// `-type=o`: code objects in ELF sections when the file is an object, else binary.
    Object,
    Text(&'static str),
}

impl Format {
    /// Is `bytes` an object-file bundle for this format?
    pub fn is_object_bundle(&self, bytes: &[u8]) -> bool {
        matches!(self, Format::Object) && bytes.starts_with(b"\x7fELF")
    }
}

/// How `file_type` is stored, or the bundler's error for a type it does not know; `a`
/// (archives) is refused.
pub fn format_of(file_type: &str, mode: &str) -> CliResult<Format> {
    if let Some(comment) = text::comment_for_type(file_type) {
        return Ok(Format::Text(comment));
    }
    match file_type {
        "bc" | "gch" | "ast" => Ok(Format::Binary),
        "o" => Ok(Format::Object),
        "a" if mode == "bundle" => fail("Archive files are only supported for unbundling"),
        // Unbundling an archive writes one archive per target whose symbol table lists
        // each member's symbols; for bitcode members (static device libraries) those
        // come from reading LLVM IR, which needs LLVM. Our archives would differ.
        "a" => fail("archives of bundles (-type=a) are not supported by offload-inspect: use clang-offload-bundler"),
        other => fail(format!("'{other}': invalid file type specified")),
    }
}

pub fn run(mode: &str, o: &BundlerOptions, json: bool) -> CliResult {
    let Some(file_type) = o.file_type.as_deref() else {
        return fail("for the --type option: must be specified at least once!");
    };
    let format = format_of(file_type, mode)?;
    if mode == "list" {
        if o.inputs.len() != 1 {
            return fail("only one input file supported for -list");
        }
        return read::list(&o.inputs[0], &format, json);
    }
    // The bundler's checks, in its order.
    if o.outputs.is_empty() {
        return fail("no output file specified!");
    }
    if mode == "unbundle" && o.inputs.len() != 1 {
        return fail("only one input file supported in unbundling mode");
    }
    if mode == "bundle" && o.outputs.len() != 1 {
        return fail("only one output file supported in bundling mode");
    }
    if o.targets.is_empty() {
        return fail("for the --targets option: must be specified at least once!");
    }
    if mode == "bundle" && o.inputs.len() != o.targets.len() {
        return fail("number of input files and targets should match in bundling mode");
    }
    if mode == "unbundle" && o.outputs.len() != o.targets.len() {
        return fail("number of output files and targets should match in unbundling mode");
    }
    let mut ids = Vec::with_capacity(o.targets.len());
    for t in &o.targets {
        let id = BundleEntryId::parse(t).map_err(|_| {
            Failure("Targets need to follow the format '<offload kind>-<target triple>', where '<target triple>' follows the format '<kind>-<arch>-<vendor>-<os>-<env>[-<target id>[:target features]]'.".into())
        })?;
        if !id.is_known_kind() {
            return fail(format!(
                "invalid target '{t}', unknown offloading kind '{}'",
                id.kind
            ));
        }
        ids.push(id);
    }
    let normalized: Vec<String> = ids.iter().map(BundleEntryId::to_bundler_string).collect();
    let mut seen = std::collections::HashSet::new();
    if !normalized.iter().all(|n| seen.insert(n.as_str())) {
        return fail("Duplicate targets are not allowed");
    }
    if mode == "bundle" {
        write::bundle_files(o, &format, &ids, &normalized, json)
    } else {
        read::unbundle_files(o, &format, &ids, json)
    }
}

/// The bundler's check (clang's `getConflictTargetIDCombination`) over the sorted set
/// of target strings: the part before the first `:` is the key; a later target with the
/// same key that specifies a feature the first one left as Any conflicts with it.
pub fn conflicting_targets(targets: &[String]) -> Option<(String, String)> {
    let sorted: std::collections::BTreeSet<&str> = targets.iter().map(String::as_str).collect();
    let mut first: std::collections::HashMap<&str, (&str, Vec<&str>)> =
        std::collections::HashMap::new();
    for id in sorted {
        let mut parts = id.split(':');
        let key = parts.next().unwrap_or("");
        let features: Vec<&str> = parts.map(|f| f.trim_end_matches(['+', '-'])).collect();
        match first.get(key) {
            None => {
                first.insert(key, (id, features));
            }
            Some((existing, known)) => {
                if features.iter().any(|f| !known.contains(f)) {
                    return Some(((*existing).to_owned(), id.to_owned()));
                }
            }
        }
    }
    None
}

/// `COMPRESSED_BUNDLE_FORMAT_VERSION` (2 or 3, default 3), as the bundler reads it.
pub fn compression_version() -> u16 {
    match std::env::var("COMPRESSED_BUNDLE_FORMAT_VERSION")
        .ok()
        .as_deref()
    {
        Some("2") => 2,
        Some("3") | None => 3,
        Some(other) => {
            eprintln!("Warning: Invalid value for COMPRESSED_BUNDLE_FORMAT_VERSION: {other}. Valid values are 2 or 3. Using default version 3.");
            3
        }
    }
}

/// The zstd level: the user's, else the bundler's default.
pub fn zstd_level(o: &BundlerOptions) -> i32 {
    o.compression_level.unwrap_or(DEFAULT_ZSTD_LEVEL)
}

/// The zstd level clang-offload-bundler 22 uses by default (its output matches ours at 3).
const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// " a", " a and b", " a, b, and c": the bundler's wording for its missing list.
pub fn english_list(items: &[String]) -> String {
    let mut s = String::new();
    let last = items.len().saturating_sub(1);
    for (i, item) in items.iter().enumerate() {
        if i != 0 && last > 1 {
            s.push(',');
        }
        s.push(' ');
        if i == last && i != 0 {
            s.push_str("and ");
        }
        s.push_str(item);
    }
    s
}
