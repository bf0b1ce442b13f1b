//! The installed clang config files: every file or folder they name exists (with
//! `<CFGDIR>`, which clang expands to the config's folder, expanded), and clang-N is
//! there to read them.

use crate::install::{Install, CONFIG_TRIPLES};
use crate::report::Report;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The options whose value is a path, joined (`-I/x`, `-fplugin=/x`) or, for the
/// ones without `=`, the next argument (`-I /x`).
const PATH_OPTIONS: &[&str] = &["-fplugin=", "-fpass-plugin=", "-isystem", "-I", "-L"];

/// A config file's arguments, as clang reads them: `#` lines are comments, a
/// backslash at a line's end continues it, arguments are split at whitespace outside
/// quotes.
pub fn arguments(text: &str) -> Vec<String> {
    let joined = text.replace("\\\r\n", "").replace("\\\n", "");
    joined
        .lines()
        .map(str::trim_start)
        .filter(|l| !l.starts_with('#'))
        .flat_map(split_line)
        .collect()
}

fn split_line(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut current: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => {
                quote = Some(c);
                current.get_or_insert_with(String::new);
            }
            (q, '\\') if q != Some('\'') => {
                if let Some(next) = chars.next() {
                    current.get_or_insert_with(String::new).push(next);
                }
            }
            (None, c) if c.is_whitespace() => args.extend(current.take()),
            (_, c) => current.get_or_insert_with(String::new).push(c),
        }
    }
    args.extend(current);
    args
}

/// The paths `args` name (each with the option that names it), `<CFGDIR>` replaced by
/// `cfgdir`: the values of [`PATH_OPTIONS`], `-Wl,-rpath,<dir>`, and bare absolute
/// paths.
pub fn paths(args: &[String], cfgdir: &Path) -> Vec<(String, PathBuf)> {
    let cfgdir = cfgdir.to_string_lossy();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("<CFGDIR>", &cfgdir))
        .collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if let Some(option) = PATH_OPTIONS.iter().find(|o| arg.starts_with(**o)) {
            let joined = &arg[option.len()..];
            if !joined.is_empty() {
                found.push((option.to_string(), PathBuf::from(joined)));
            } else if let Some(next) = args.get(i + 1).filter(|_| !option.ends_with('=')) {
                found.push((option.to_string(), PathBuf::from(next)));
                i += 1;
            }
        } else if let Some(dir) = arg.strip_prefix("-Wl,-rpath,") {
            found.push(("-Wl,-rpath,".into(), PathBuf::from(dir)));
        } else if arg.starts_with('/') {
            found.push((String::new(), PathBuf::from(arg)));
        }
        i += 1;
    }
    found
}

/// The `[configs]` section.
pub fn check(report: &mut Report<impl Write>, install: &Install) {
    for triple in CONFIG_TRIPLES {
        check_config(report, install, triple);
    }
    check_clang(report, install);
}

fn reinstall(install: &Install) -> String {
    format!(
        "reinstall: `cargo xtask install --prefix {} --llvm {}` (or the package)",
        install.prefix.display(),
        install.major
    )
}

fn check_config(report: &mut Report<impl Write>, install: &Install, triple: &str) {
    let path = install.config(triple);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            report.fail(format!("{}: {e}", path.display()), reinstall(install));
            return;
        }
    };
    let cfgdir = path.parent().unwrap_or(Path::new("/"));
    let named = paths(&arguments(&text), cfgdir);
    let missing: Vec<&(String, PathBuf)> = named.iter().filter(|(_, p)| !p.exists()).collect();
    for (option, p) in &missing {
        report.fail(
            format!("{triple}.cfg: {option}{} is missing", p.display()),
            reinstall(install),
        );
    }
    if missing.is_empty() {
        report.ok(format!(
            "{}: the {} files and folders it names exist",
            path.display(),
            named.len()
        ));
    }
}

/// clang-N on PATH, else LLVM N's own `bin/clang`.
pub fn find_clang(install: &Install) -> Option<PathBuf> {
    let name = format!("clang-{}", install.major);
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(&name))
        .chain(std::iter::once(install.llvm_root.join("bin/clang")))
        .find(|p| p.is_file())
}

fn check_clang(report: &mut Report<impl Write>, install: &Install) {
    let n = install.major;
    match find_clang(install) {
        Some(clang) => {
            let version = std::process::Command::new(&clang)
                .arg("--version")
                .output()
                .ok()
                .and_then(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .next()
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| "its --version failed".into());
            report.ok(format!("clang-{n}: {} ({version})", clang.display()));
        }
        // A warning, not a failure: a GPU node often runs programs compiled elsewhere.
        None => report.warn(
            format!(
                "no clang-{n} on PATH nor {}: programs cannot be compiled on this machine (running programs built elsewhere needs no clang)",
                install.llvm_root.join("bin/clang").display()
            ),
            Some(&format!("apt-get install clang-{n} where you compile")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86_64_CFG: &str = "\
# clang-16 --config=<this file> prog.c -o prog: OpenMP 5.1 offloading to the host
-fopenmp
-fopenmp-version=51
-fplugin=<CFGDIR>/../../lib/libomptarget-indirect-clang16.so
-fpass-plugin=<CFGDIR>/../../lib/libomptarget-indirect-clang16.so
-I<CFGDIR>/../../include
  # an indented comment
-fopenmp-targets=x86_64-pc-linux-gnu
-Xoffload-linker-x86_64-pc-linux-gnu --undefined=__kmpc_target_translate_fptr
-Xoffload-linker-x86_64-pc-linux-gnu <CFGDIR>/../../lib/omptarget-indirect/x86_64-unknown-linux-gnu/libdevice_rtl.a
";

    #[test]
    fn the_paths_of_an_installed_config() {
        let named = paths(
            &arguments(X86_64_CFG),
            Path::new("/p/share/omptarget-indirect"),
        );
        let expected = [
            ("-fplugin=", "/p/share/omptarget-indirect/../../lib/libomptarget-indirect-clang16.so"),
            ("-fpass-plugin=", "/p/share/omptarget-indirect/../../lib/libomptarget-indirect-clang16.so"),
            ("-I", "/p/share/omptarget-indirect/../../include"),
            ("", "/p/share/omptarget-indirect/../../lib/omptarget-indirect/x86_64-unknown-linux-gnu/libdevice_rtl.a"),
        ];
        let expected: Vec<(String, PathBuf)> = expected
            .iter()
            .map(|(o, p)| (o.to_string(), PathBuf::from(p)))
            .collect();
        assert_eq!(named, expected);
    }

    #[test]
    fn separate_values_rpath_and_the_gpu_configs_options() {
        let text = "-I /inc\n-Xarch_device -isystem<CFGDIR>/compat\n-L<CFGDIR>/lib\n-Wl,-rpath,/usr/lib/llvm-17/lib\n-fopenmp-version=51\n";
        let named = paths(&arguments(text), Path::new("/cfg"));
        let options: Vec<(&str, &Path)> = named
            .iter()
            .map(|(o, p)| (o.as_str(), p.as_path()))
            .collect();
        assert_eq!(
            options,
            [
                ("-I", Path::new("/inc")),
                ("-isystem", Path::new("/cfg/compat")),
                ("-L", Path::new("/cfg/lib")),
                ("-Wl,-rpath,", Path::new("/usr/lib/llvm-17/lib")),
            ]
        );
    }

    #[test]
    fn quotes_escapes_and_continued_lines() {
        let text = "-I'/a b' \"-DX=1 2\" \\\n-fopenmp\n-Ic\\ d\n";
        assert_eq!(arguments(text), ["-I/a b", "-DX=1 2", "-fopenmp", "-Ic d"]);
    }
}
