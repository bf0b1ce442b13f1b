//! The rule that makes the plugin-written globals `constant` in GPU bitcode.

use anyhow::{ensure, Context, Result};
use std::fs;
use std::path::Path;
use xshell::{cmd, Shell};

/// The globals the plugin writes and device code only reads (device-rtl's lib.rs).
const READ_ONLY_GLOBALS: [&str; 4] = [
    device_rtl::symbols::TABLE,
    device_rtl::symbols::TABLE_SIZE,
    device_rtl::symbols::INDEX,
    device_rtl::symbols::HEAD,
];

/// Mark the plugin-written globals `constant` in GPU bitcode, so that the compiler may
/// load them once per kernel and hoist the loads out of its loops, over indirect calls
/// too (which may write any writable memory). Rust cannot say this itself: an immutable
/// `static`'s reads are folded to its initializer by rustc, so they are `static mut`
/// there. The rule, on the bitcode's text (llvm-dis-22, then llvm-as-22, which checks the
/// result): each of [`READ_ONLY_GLOBALS`] has exactly one definition line, and it must
/// read `@<name> = weak global ...`; it becomes `@<name> = weak constant ...`. Weak keeps
/// the initializer from ever being taken for the value (the plugin writes it before any
/// kernel runs). Anything else about those lines stops the build, naming it.
pub fn mark(bitcode: &Path) -> Result<()> {
    let sh = Shell::new()?;
    let (dis, asm) = (
        crate::tools::llvm22("llvm-dis")?,
        crate::tools::llvm22("llvm-as")?,
    );
    let text = cmd!(sh, "{dis} {bitcode} -o -").read()?;
    let marked = mark_read_only_text(&text)
        .with_context(|| format!("marking the read-only globals of {}", bitcode.display()))?;
    let tmp = bitcode.with_extension("constant.ll");
    fs::write(&tmp, marked)?;
    cmd!(sh, "{asm} {tmp} -o {bitcode}").run()?;
    fs::remove_file(&tmp)?;
    Ok(())
}

/// One definition line `@<name> = weak [addrspace(N) ]global ...` as `... constant ...`
/// (amdgcn puts its globals in address space 1; nvptx64 names none).
fn mark_definition(name: &str, line: &str) -> Result<String> {
    let shape = || {
        format!(
            "the definition of {name} is not `@{name} = weak [addrspace(N) ]global ...`: {line}"
        )
    };
    let rest = line
        .strip_prefix(&format!("@{name} = weak "))
        .with_context(shape)?;
    let (space, rest) = match rest.strip_prefix("addrspace(") {
        Some(after) => {
            let (n, rest) = after.split_once(") ").with_context(shape)?;
            ensure!(
                n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty(),
                shape()
            );
            (format!("addrspace({n}) "), rest)
        }
        None => (String::new(), rest),
    };
    let rest = rest.strip_prefix("global ").with_context(shape)?;
    Ok(format!("@{name} = weak {space}constant {rest}"))
}

/// [`mark`]'s rule on the text of a module.
fn mark_read_only_text(text: &str) -> Result<String> {
    let mut out = String::with_capacity(text.len() + 64);
    let mut marked = [0usize; READ_ONLY_GLOBALS.len()];
    for line in text.lines() {
        let which = READ_ONLY_GLOBALS
            .iter()
            .position(|name| line.starts_with(&format!("@{name} = ")));
        match which {
            Some(i) => {
                out.push_str(&mark_definition(READ_ONLY_GLOBALS[i], line)?);
                out.push('\n');
                marked[i] += 1;
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for (name, count) in READ_ONLY_GLOBALS.iter().zip(marked) {
        ensure!(count == 1, "{name} is defined {count} times, not once");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(definitions: &[&str]) -> String {
        let mut text = String::from("; ModuleID = 'device_rtl'\n");
        for d in definitions {
            text.push_str(d);
            text.push('\n');
        }
        text.push_str("define ptr @__kmpc_target_translate_fptr(ptr %p) {\n  ret ptr %p\n}\n");
        text
    }

    fn weak_global(name: &str, bytes: usize) -> String {
        format!("@{name} = weak global [{bytes} x i8] zeroinitializer, align 8")
    }

    #[test]
    fn each_plugin_written_global_becomes_constant_and_nothing_else_changes() {
        let defs: Vec<String> = READ_ONLY_GLOBALS
            .iter()
            .map(|n| weak_global(n, 8))
            .collect();
        let refs: Vec<&str> = defs.iter().map(String::as_str).collect();
        let text = module(&refs);
        let marked = mark_read_only_text(&text).unwrap();
        for name in READ_ONLY_GLOBALS {
            assert!(
                marked.contains(&format!(
                    "@{name} = weak constant [8 x i8] zeroinitializer, align 8"
                )),
                "{marked}"
            );
        }
        assert_eq!(marked.lines().count(), text.lines().count());
        // amdgcn's globals live in address space 1.
        assert_eq!(
            mark_definition(
                "g",
                "@g = weak addrspace(1) global [8 x i8] zeroinitializer, align 8"
            )
            .unwrap(),
            "@g = weak addrspace(1) constant [8 x i8] zeroinitializer, align 8"
        );
        assert!(mark_definition("g", "@g = weak addrspace(x) global i64 0").is_err());
        assert!(marked.contains("define ptr @__kmpc_target_translate_fptr(ptr %p) {"));
        assert!(!marked.contains("weak global"));
    }

    #[test]
    fn a_definition_of_another_shape_or_a_missing_one_stops_the_build() {
        let mut defs: Vec<String> = READ_ONLY_GLOBALS
            .iter()
            .map(|n| weak_global(n, 8))
            .collect();
        defs[0] = format!("@{} = internal global ptr null", READ_ONLY_GLOBALS[0]);
        let refs: Vec<&str> = defs.iter().map(String::as_str).collect();
        let err = format!("{:#}", mark_read_only_text(&module(&refs)).unwrap_err());
        assert!(
            err.contains(READ_ONLY_GLOBALS[0]) && err.contains("internal global"),
            "{err}"
        );
        let refs: Vec<&str> = defs[1..].iter().map(String::as_str).collect();
        let err = format!("{:#}", mark_read_only_text(&module(&refs)).unwrap_err());
        assert!(err.contains("defined 0 times"), "{err}");
    }
}
