//! The device RTL's GPU bitcode for older clangs. rustc writes the IR of its own LLVM
//! (22), which clang 16, 17 and 18 cannot read (`llvm-link-16`: `Unknown attribute kind
//! (102)`). [`rewrite`] turns the text of that IR (llvm-dis-22) into IR an older LLVM
//! reads, by the explicit rules below; the caller then assembles it with that LLVM's
//! `llvm-as` ([`to_older_bitcode`]).
//!
//! Every rule is conservative: it drops a fact an optimizer may use (a flag, an
//! attribute, a lifetime marker) or writes the same fact in the older spelling; it never
//! adds one. A function attribute the rules do not know fails the rewrite, naming it;
//! whatever else the older assembler does not know fails there, naming the line.
use crate::targets::{self, Artifact};
use anyhow::{bail, ensure, Context, Result};
use std::path::Path;
use xshell::{cmd, Shell};

/// An instruction flag the older LLVM lacks: dropped after `opcode` (both words as they
/// stand in the text), for LLVM versions before `since`.
struct FlagRule {
    opcode: &'static str,
    flag: &'static str,
    since: u32,
}

const FLAG_RULES: &[FlagRule] = &[
    // getelementptr's no-unsigned-wrap flags (LLVM 19); `inbounds` is as old as LLVM.
    FlagRule {
        opcode: "getelementptr inbounds",
        flag: "nuw",
        since: 19,
    },
    FlagRule {
        opcode: "getelementptr",
        flag: "nusw",
        since: 19,
    },
    FlagRule {
        opcode: "getelementptr",
        flag: "nuw",
        since: 19,
    },
    FlagRule {
        opcode: "trunc",
        flag: "nuw",
        since: 19,
    },
    FlagRule {
        opcode: "trunc",
        flag: "nsw",
        since: 19,
    },
    FlagRule {
        opcode: "icmp",
        flag: "samesign",
        since: 20,
    },
    FlagRule {
        opcode: "zext",
        flag: "nneg",
        since: 18,
    },
    FlagRule {
        opcode: "uitofp",
        flag: "nneg",
        since: 19,
    },
    FlagRule {
        opcode: "or",
        flag: "disjoint",
        since: 18,
    },
];

/// A parameter or return attribute the older LLVM lacks: `replacement` for LLVM versions
/// before `since` ("" drops it). `name(` matches the attribute with any argument.
struct AttributeRule {
    name: &'static str,
    replacement: &'static str,
    since: u32,
}

const ATTRIBUTE_RULES: &[AttributeRule] = &[
    // The same fact, in the spelling LLVM 21 replaced.
    AttributeRule {
        name: "captures(none)",
        replacement: "nocapture",
        since: 21,
    },
    // Any other capture set: dropped (the pointer may then be captured).
    AttributeRule {
        name: "captures(",
        replacement: "",
        since: 21,
    },
    AttributeRule {
        name: "dead_on_unwind",
        replacement: "",
        since: 19,
    },
    AttributeRule {
        name: "initializes(",
        replacement: "",
        since: 19,
    },
    AttributeRule {
        name: "range(",
        replacement: "",
        since: 19,
    },
    AttributeRule {
        name: "writable",
        replacement: "",
        since: 18,
    },
    AttributeRule {
        name: "nofpclass(",
        replacement: "",
        since: 17,
    },
];

/// Memory locations of `memory(...)` the older LLVM lacks (there they fall under the
/// default effect): (location, the first LLVM that knows it).
const MEMORY_LOCATIONS: &[(&str, u32)] =
    &[("target_mem0", 22), ("target_mem1", 22), ("errnomem", 21)];

/// Function attributes newer than the older LLVM, each a promise an optimizer may use:
/// dropped for LLVM versions before the second field.
const DROPPED_FUNCTION_ATTRIBUTES: &[(&str, u32)] = &[
    // The function creates no undef or poison (LLVM 22, on intrinsics such as the warp
    // shuffles).
    ("nocreateundeforpoison", 22),
];

/// Function attributes the device RTL's IR carries that LLVM 16 already knows (and so
/// 17 and 18): anything else in an attribute group fails the rewrite. String attributes
/// (`"key"="value"`) pass: an LLVM ignores the ones it does not know.
const KNOWN_FUNCTION_ATTRIBUTES: &[&str] = &[
    "alwaysinline",
    "cold",
    "convergent",
    "inlinehint",
    "mustprogress",
    "nocallback",
    "nofree",
    "noinline",
    "norecurse",
    "noreturn",
    "nosync",
    "nounwind",
    "speculatable",
    "willreturn",
];

/// The text of LLVM 22 IR as LLVM `major` (16, 17 or 18) reads it, with `datalayout` (the
/// older clang's own for the triple) as the module's data layout.
pub fn rewrite(text: &str, major: u32, datalayout: &str) -> Result<String> {
    ensure!(
        (16..22).contains(&major),
        "rewriting LLVM 22 IR for LLVM {major}: only 16 to 21 are older"
    );
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if is_lifetime_marker(line) {
            // The markers' signature changed in LLVM 22 (no size); they only help the
            // optimizer reuse stack slots.
            continue;
        }
        if line.starts_with('^') {
            // The ThinLTO summary (rustc writes one): its syntax changed too, and no
            // `-mlink-builtin-bitcode` link reads it.
            continue;
        }
        let line = if line.starts_with("target datalayout = ") {
            format!("target datalayout = \"{datalayout}\"")
        } else if line.starts_with("attributes #") {
            rewrite_attribute_group(line, major)?
        } else {
            rewrite_attributes(&rewrite_flags(line, major), major)
        };
        out.push_str(&line);
        out.push('\n');
    }
    Ok(out)
}

/// A call or declaration of `llvm.lifetime.start`/`end`.
fn is_lifetime_marker(line: &str) -> bool {
    line.contains("@llvm.lifetime.start.") || line.contains("@llvm.lifetime.end.")
}

fn rewrite_flags(line: &str, major: u32) -> String {
    let mut line = line.to_owned();
    for rule in FLAG_RULES.iter().filter(|r| major < r.since) {
        let from = format!("{} {} ", rule.opcode, rule.flag);
        let to = format!("{} ", rule.opcode);
        // Repeated: `getelementptr inbounds nuw` loses `nuw`, `getelementptr nusw nuw`
        // both.
        while line.contains(&from) {
            line = line.replace(&from, &to);
        }
    }
    line
}

fn rewrite_attributes(line: &str, major: u32) -> String {
    let mut line = line.to_owned();
    for rule in ATTRIBUTE_RULES.iter().filter(|r| major < r.since) {
        line = replace_attribute(&line, rule.name, rule.replacement);
    }
    line
}

/// Every whole-word `name` (with its parenthesized argument when `name` ends in `(`),
/// replaced by `replacement` (dropped with its leading space when that is empty).
fn replace_attribute(line: &str, name: &str, replacement: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(name) {
        let before_ok = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c == ' ' || c == '(');
        let mut end = at + name.len();
        if name.ends_with('(') {
            end = match matching_paren(rest, at + name.len() - 1) {
                Some(close) => close + 1,
                None => rest.len(),
            };
        }
        let after_ok = rest[end..]
            .chars()
            .next()
            .is_none_or(|c| c == ' ' || c == ',' || c == ')');
        if !(before_ok && after_ok) {
            out.push_str(&rest[..at + name.len()]);
            rest = &rest[at + name.len()..];
            continue;
        }
        if replacement.is_empty() {
            // Drop the attribute and the space before it.
            out.push_str(rest[..at].strip_suffix(' ').unwrap_or(&rest[..at]));
        } else {
            out.push_str(&rest[..at]);
            out.push_str(replacement);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The index of the `)` that closes the `(` at `open`.
fn matching_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `attributes #N = { ... }`: every attribute known to LLVM `major` (or a string), the
/// memory effects without the locations it lacks.
fn rewrite_attribute_group(line: &str, major: u32) -> Result<String> {
    let (head, body) = line
        .split_once('{')
        .with_context(|| format!("an attribute group without `{{`: {line}"))?;
    let body = body
        .trim_end()
        .strip_suffix('}')
        .with_context(|| format!("an attribute group without `}}`: {line}"))?;
    let mut kept = Vec::new();
    for token in attribute_tokens(body) {
        if token.starts_with('"') {
            kept.push(token);
        } else if let Some(effects) = token
            .strip_prefix("memory(")
            .and_then(|t| t.strip_suffix(')'))
        {
            kept.push(format!("memory({})", older_memory_effects(effects, major)?));
        } else if KNOWN_FUNCTION_ATTRIBUTES.contains(&token.as_str()) {
            kept.push(token);
        } else if DROPPED_FUNCTION_ATTRIBUTES
            .iter()
            .any(|&(name, since)| token == name && major < since)
        {
            continue;
        } else {
            bail!(
                "function attribute `{token}` has no rule for LLVM {major} \
                 (device-build/src/older_llvm.rs): {line}"
            );
        }
    }
    Ok(format!("{head}{{ {} }}", kept.join(" ")))
}

/// The space-separated attributes of a group, keeping parentheses and strings whole.
fn attribute_tokens(body: &str) -> Vec<String> {
    let (mut tokens, mut current) = (Vec::new(), String::new());
    let (mut depth, mut in_string) = (0usize, false);
    for c in body.chars() {
        match c {
            '"' => in_string = !in_string,
            '(' if !in_string => depth += 1,
            ')' if !in_string => depth = depth.saturating_sub(1),
            ' ' if !in_string && depth == 0 => {
                if !current.is_empty() {
                    tokens.push(std::mem::take(&mut current));
                }
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// `memory(...)`'s entries without the locations LLVM `major` lacks. Those then fall
/// under the default effect, which must allow at least what the entry allowed (else the
/// older IR would promise more than the newer: refused).
fn older_memory_effects(effects: &str, major: u32) -> Result<String> {
    let entries: Vec<&str> = effects.split(',').map(str::trim).collect();
    let default = entries
        .iter()
        .find(|e| !e.contains(':'))
        .copied()
        .unwrap_or("none");
    let mut kept = Vec::new();
    for entry in entries {
        let lacked = entry.split_once(':').and_then(|(location, _)| {
            MEMORY_LOCATIONS
                .iter()
                .find(|(l, since)| *l == location.trim() && major < *since)
        });
        match (lacked, entry.split_once(':')) {
            (Some(_), Some((location, effect))) => ensure!(
                effect_within(effect.trim(), default),
                "memory({effects}): `{}` allows more than the default `{default}` that \
                 LLVM {major} would put in its place",
                location.trim()
            ),
            _ => kept.push(entry),
        }
    }
    Ok(kept.join(", "))
}

/// True when `effect` allows nothing beyond `default`.
fn effect_within(effect: &str, default: &str) -> bool {
    effect == "none" || effect == default || default == "readwrite"
}

/// A place where an older LLVM's tools run, other than this machine: a Debian root that
/// has them (LLVM 17 and 18, which Debian 12 lacks). Its commands must see the bitcode
/// and the outputs at their own paths. The test harness implements it for its roots.
pub trait ToolPlace {
    /// `args` (a program and its arguments) run in this place.
    fn cmd<'s>(&self, sh: &'s Shell, args: &[&str]) -> xshell::Cmd<'s>;
}

/// Where an older LLVM's tools run: on this machine (Debian installs them as
/// `<tool>-N`), or in another [`ToolPlace`].
#[derive(Clone, Copy)]
pub enum OlderLlvm<'a> {
    Here(u32),
    Elsewhere(u32, &'a dyn ToolPlace),
}

impl OlderLlvm<'_> {
    pub fn major(self) -> u32 {
        match self {
            OlderLlvm::Here(major) | OlderLlvm::Elsewhere(major, _) => major,
        }
    }

    /// `tool` of this LLVM with `args`, where it runs.
    fn cmd<'s>(self, sh: &'s Shell, tool: &str, args: &[&str]) -> Result<xshell::Cmd<'s>> {
        Ok(match self {
            OlderLlvm::Here(major) => {
                let program = test_support::tools::find_llvm(major, tool)?;
                cmd!(sh, "{program} {args...}")
            }
            OlderLlvm::Elsewhere(major, place) => {
                let program = format!("{tool}-{major}");
                let all: Vec<&str> = std::iter::once(program.as_str())
                    .chain(args.iter().copied())
                    .collect();
                place.cmd(sh, &all)
            }
        })
    }
}

/// `bitcode` (LLVM 22) as LLVM `older`'s bitcode at `out`: llvm-dis-22, [`rewrite`] with
/// that clang's own data layout for `triple`, that LLVM's llvm-as (which checks the
/// result).
pub fn to_older_bitcode(bitcode: &Path, out: &Path, older: OlderLlvm, triple: &str) -> Result<()> {
    let sh = Shell::new()?;
    let major = older.major();
    let dis = crate::tools::llvm22("llvm-dis")?;
    let text = crate::tools::read(cmd!(sh, "{dis} {bitcode} -o -"))?;
    let layout = datalayout_of(&sh, older, triple)?;
    let rewritten = rewrite(&text, major, &layout)
        .with_context(|| format!("rewriting {} for LLVM {major}", bitcode.display()))?;
    let ll = out.with_extension("ll");
    std::fs::write(&ll, rewritten)?;
    let (ll_arg, out_arg) = (ll.display().to_string(), out.display().to_string());
    older
        .cmd(&sh, "llvm-as", &[&ll_arg, "-o", &out_arg])?
        .run()
        .with_context(|| format!("llvm-as-{major} refused the rewritten {}", ll.display()))?;
    Ok(())
}

/// The data layout the older clang gives modules of `triple` (from an empty C unit).
fn datalayout_of(sh: &Shell, older: OlderLlvm, triple: &str) -> Result<String> {
    let target = format!("--target={triple}");
    let args = [
        target.as_str(),
        "-nogpulib",
        "-x",
        "c",
        "-S",
        "-emit-llvm",
        "/dev/null",
        "-o",
        "-",
    ];
    let ir = crate::tools::read(older.cmd(sh, "clang", &args)?)?;
    ir.lines()
        .find_map(|l| l.strip_prefix("target datalayout = \""))
        .and_then(|l| l.strip_suffix('"'))
        .map(str::to_owned)
        .with_context(|| {
            format!(
                "clang-{} printed no data layout for {triple}",
                older.major()
            )
        })
}

/// The older LLVMs whose tools this machine has (as Debian installs them), for which the GPU
/// bitcode is also written in their own IR ([`rewrite`]): clang 16 everywhere
/// `cargo xtask test` runs; 17 and 18 inside their Debian 13 roots.
pub fn older_llvms() -> Vec<u32> {
    [16, 17, 18]
        .into_iter()
        .filter(|&n| {
            ["llvm-as", "clang"]
                .iter()
                .all(|t| test_support::tools::find_llvm(n, t).is_ok())
        })
        .collect()
}

/// Every GPU bitcode (as build-device left it) rewritten for LLVM `major`, whose tools
/// run in `place` ([`OlderLlvm::Elsewhere`]), beside it as `device_rtl.llvmN.bc`:
/// how this machine, which lacks LLVM 17 and 18, makes their bitcode with their own
/// clang's data layout and llvm-as. Rewritten every time (cheap), so never stale.
pub fn write_older_bitcode_in(major: u32, place: &dyn ToolPlace) -> Result<()> {
    for target in targets::all_targets()
        .iter()
        .filter(|t| t.artifact == Artifact::Bitcode)
    {
        let (bitcode, older) = (
            targets::output_of(target),
            targets::older_output_of(target, major),
        );
        ensure!(
            bitcode.is_file(),
            "{} is missing: run `cargo xtask build-device`",
            bitcode.display()
        );
        to_older_bitcode(
            &bitcode,
            &older,
            OlderLlvm::Elsewhere(major, place),
            target.triple,
        )?;
        eprintln!("wrote {} (LLVM {major}, in its root)", older.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: &str = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64";

    #[test]
    fn flags_the_older_llvm_lacks_are_dropped_and_older_ones_kept() {
        let text = "  %1 = getelementptr inbounds nuw i8, ptr %0, i64 8\n\
                    %2 = icmp samesign ult i64 %a, %b\n\
                    %3 = add nuw nsw i64 %a, 1\n\
                    %4 = zext nneg i32 %x to i64\n\
                    %5 = or disjoint i64 %a, %b\n\
                    %6 = trunc nuw i64 %a to i32\n";
        let out = rewrite(text, 16, LAYOUT).unwrap();
        assert_eq!(
            out,
            "  %1 = getelementptr inbounds i8, ptr %0, i64 8\n\
             %2 = icmp ult i64 %a, %b\n\
             %3 = add nuw nsw i64 %a, 1\n\
             %4 = zext i32 %x to i64\n\
             %5 = or i64 %a, %b\n\
             %6 = trunc i64 %a to i32\n"
        );
        // LLVM 18 keeps `nneg` and `disjoint`.
        let out = rewrite(text, 18, LAYOUT).unwrap();
        assert!(out.contains("zext nneg") && out.contains("or disjoint"));
        assert!(!out.contains("samesign") && !out.contains("inbounds nuw"));
    }

    #[test]
    fn parameter_attributes_are_respelled_or_dropped() {
        let text = "define void @f(ptr dead_on_unwind noalias writable sret([96 x i8]) \
                    align 8 captures(none) initializes((0, 96)) %0, i64 range(i64 0, 8) %n, \
                    ptr captures(address) %p) #0 {";
        let out = rewrite(text, 16, LAYOUT).unwrap();
        assert_eq!(
            out.trim_end(),
            "define void @f(ptr noalias sret([96 x i8]) align 8 nocapture %0, i64 %n, \
             ptr %p) #0 {"
        );
        // `writable` stays for 18; `captures` is respelled up to 20.
        let out = rewrite(text, 18, LAYOUT).unwrap();
        assert!(out.contains("writable") && out.contains("nocapture"));
        // A name that merely contains an attribute's is left alone.
        let out = rewrite("@arange(i64 1) = global i64 0\n", 16, LAYOUT).unwrap();
        assert_eq!(out, "@arange(i64 1) = global i64 0\n");
    }

    #[test]
    fn lifetime_markers_and_the_summary_go_and_the_data_layout_is_the_older_clangs() {
        let text = "target datalayout = \"e-p6:32:32-i64:64\"\n\
                    call void @llvm.lifetime.start.p0(ptr %x)\n\
                    declare void @llvm.lifetime.end.p0(ptr captures(none)) #3\n\
                    ^1 = gv: (name: \"llvm.trap\") ; guid = 6116349651215144041\n\
                    ret void\n";
        let out = rewrite(text, 16, LAYOUT).unwrap();
        assert_eq!(out, format!("target datalayout = \"{LAYOUT}\"\nret void\n"));
    }

    #[test]
    fn memory_locations_the_older_llvm_lacks_fall_under_the_default() {
        let group = "attributes #2 = { nofree nounwind memory(read, inaccessiblemem: write, \
                     target_mem0: none, target_mem1: none) \"target-cpu\"=\"sm_70\" }";
        let out = rewrite(group, 16, LAYOUT).unwrap();
        assert_eq!(
            out.trim_end(),
            "attributes #2 = { nofree nounwind memory(read, inaccessiblemem: write) \
             \"target-cpu\"=\"sm_70\" }"
        );
        // A newer promise is dropped.
        let group = "attributes #8 = { nocallback nocreateundeforpoison memory(none) }";
        let out = rewrite(group, 18, LAYOUT).unwrap();
        assert_eq!(
            out.trim_end(),
            "attributes #8 = { nocallback memory(none) }"
        );
        // A location that allowed more than the default would: refused.
        let wider = "attributes #1 = { memory(none, target_mem0: write) }";
        let err = rewrite(wider, 16, LAYOUT).unwrap_err();
        assert!(format!("{err:#}").contains("target_mem0"), "{err:#}");
    }

    #[test]
    fn an_unknown_function_attribute_fails_naming_it() {
        let group = "attributes #0 = { nounwind sanitize_alloc_token }";
        let err = rewrite(group, 16, LAYOUT).unwrap_err();
        assert!(
            format!("{err:#}").contains("`sanitize_alloc_token` has no rule"),
            "{err:#}"
        );
    }

    /// Each flag and attribute rule, per older LLVM: the fact is gone exactly for the
    /// versions before the one that introduced it, and kept from it on.
    #[test]
    fn each_rule_applies_to_exactly_the_versions_before_its_own() {
        for major in [16, 17, 18] {
            for rule in FLAG_RULES {
                let line = format!("  %1 = {} {} i64 %a, %b\n", rule.opcode, rule.flag);
                let out = rewrite(&line, major, LAYOUT).unwrap();
                let kept = out.contains(&format!("{} {} ", rule.opcode, rule.flag));
                assert_eq!(kept, major >= rule.since, "LLVM {major}: {line} -> {out}");
            }
            for rule in ATTRIBUTE_RULES {
                let attribute = match rule.name.strip_suffix('(') {
                    Some(name) => format!("{name}(i64 0, 8)"),
                    None => rule.name.to_string(),
                };
                let line = format!("define void @f(ptr {attribute} %p) {{\n");
                let out = rewrite(&line, major, LAYOUT).unwrap();
                let expected = if major >= rule.since {
                    line.clone()
                } else if rule.replacement.is_empty() {
                    "define void @f(ptr %p) {\n".to_string()
                } else {
                    format!("define void @f(ptr {} %p) {{\n", rule.replacement)
                };
                assert_eq!(out, expected, "LLVM {major}: {line}");
            }
        }
    }

    #[test]
    fn only_older_llvms_are_rewritten_for() {
        for major in [15, 22, 23] {
            let err = rewrite("ret void\n", major, LAYOUT).unwrap_err();
            assert!(err.to_string().contains(&format!("LLVM {major}")), "{err}");
        }
    }
}
