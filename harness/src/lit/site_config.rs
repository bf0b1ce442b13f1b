//! Renders `tests/lit/lit.site.cfg.in` into the `lit.site.cfg` that points LLVM 16's
//! upstream `lit.cfg` at Debian's installed LLVM 16 and carries the run's environment.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where Debian installs LLVM 16.
pub const LLVM16_PREFIX: &str = "/usr/lib/llvm-16";

/// Everything that differs between machines or runs.
pub struct SiteConfig<'a> {
    /// Where the LLVM under test is installed, as the tests see it (`/usr/lib/llvm-N`).
    pub prefix: &'a Path,
    /// `openmp/libomptarget/test` of the source tree (holds the upstream lit.cfg).
    pub tests: &'a Path,
    /// Where lit builds and runs the test programs (`%t` lives below it).
    pub exec_root: &'a Path,
    /// `clang-16 -dumpversion`, e.g. `16.0.6`: lit features `clang-16`, `clang-16.0`...
    pub clang_version: &'a str,
    /// Variables every test command gets (lit cleans the environment otherwise).
    pub environment: &'a [(String, String)],
    /// What stands before the compiler in `%clang` and `%clangxx`: the compile cache's
    /// command ([`super::compile_cache`]), or nothing.
    pub compiler_prefix: Option<&'a str>,
}

impl SiteConfig<'_> {
    pub fn render(&self, template: &str) -> Result<String> {
        let bin = self.prefix.join("bin");
        let lib = self.prefix.join("lib");
        let major = self.clang_version.split('.').next().unwrap_or("");
        let major_minor: Vec<&str> = self.clang_version.split('.').take(2).collect();
        // Same list upstream's set_test_compiler_features() builds for Clang.
        let features = [
            "clang".to_owned(),
            format!("clang-{major}"),
            format!("clang-{}", major_minor.join(".")),
            format!("clang-{}", self.clang_version),
        ]
        .iter()
        .map(|f| python_str(f))
        .collect::<Result<Vec<_>>>()?;
        let header_dir = lib.join("clang").join(major).join("include");
        let mut environment = String::new();
        for (k, v) in self.environment {
            environment.push_str(&format!(
                "config.environment[{}] = {}\n",
                python_str(k)?,
                python_str(v)?
            ));
        }
        let compiler = |name: &str| -> Result<String> {
            let path = bin.join(name);
            let path = path
                .to_str()
                .with_context(|| format!("path is not UTF-8: {}", path.display()))?;
            python_str(&match self.compiler_prefix {
                Some(prefix) => format!("{prefix} {path}"),
                None => path.to_owned(),
            })
        };
        let substitutions = [
            ("C_COMPILER", compiler("clang")?),
            ("CXX_COMPILER", compiler("clang++")?),
            ("COMPILER_FEATURES", format!("[{}]", features.join(", "))),
            ("EXEC_ROOT", python_path(self.exec_root)?),
            ("LIBRARY_DIR", python_path(&lib)?),
            ("OMP_HEADER_DIR", python_path(&header_dir)?),
            ("FILECHECK", python_path(&bin.join("FileCheck"))?),
            ("NOT", python_path(&bin.join("not"))?),
            ("ENVIRONMENT", environment),
            (
                "UPSTREAM_LIT_CFG",
                python_path(&self.tests.join("lit.cfg"))?,
            ),
        ];
        let mut out = template.to_owned();
        for (name, value) in substitutions {
            let placeholder = format!("@{name}@");
            if !out.contains(&placeholder) {
                bail!("lit.site.cfg.in lacks {placeholder}");
            }
            out = out.replace(&placeholder, &value);
        }
        if let Some(name) = leftover_placeholder(&out) {
            bail!("lit.site.cfg.in has an unknown placeholder @{name}@");
        }
        Ok(out)
    }

    /// The files the generated config relies on, checked before lit starts so a
    /// missing package reads as such and not as 114 failed tests. Paths as the tests see them
    /// (inside the root, for a chrooted run).
    pub fn required_files(&self) -> Vec<PathBuf> {
        let p = self.prefix;
        vec![
            p.join("bin/clang"),
            p.join("bin/clang++"),
            p.join("bin/FileCheck"),
            p.join("bin/not"),
            p.join("lib/libomptarget.so"),
            p.join("lib/libomp.so"),
            self.tests.join("lit.cfg"),
        ]
    }
}

/// The first `@NAME@` (upper case and `_`) left in `text`, if any.
fn leftover_placeholder(text: &str) -> Option<&str> {
    let pieces: Vec<&str> = text.split('@').collect();
    // Only pieces with an '@' on both sides are enclosed.
    let enclosed = pieces.get(1..pieces.len().saturating_sub(1)).unwrap_or(&[]);
    enclosed.iter().copied().find(|piece| {
        !piece.is_empty() && piece.chars().all(|c| c.is_ascii_uppercase() || c == '_')
    })
}

/// A Python string literal holding `s` (single-quoted, escaped).
fn python_str(s: &str) -> Result<String> {
    if s.chars().any(|c| c.is_control()) {
        bail!("refusing to put a control character into lit.site.cfg: {s:?}");
    }
    Ok(format!(
        "'{}'",
        s.replace('\\', "\\\\").replace('\'', "\\'")
    ))
}

fn python_path(p: &Path) -> Result<String> {
    python_str(
        p.to_str()
            .with_context(|| format!("path is not UTF-8: {}", p.display()))?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = include_str!("../../../tests/lit/lit.site.cfg.in");

    fn config<'a>(env: &'a [(String, String)]) -> SiteConfig<'a> {
        SiteConfig {
            prefix: Path::new(LLVM16_PREFIX),
            tests: Path::new("/src/openmp/libomptarget/test"),
            exec_root: Path::new("/t/x86_64-pc-linux-gnu"),
            clang_version: "16.0.6",
            environment: env,
            compiler_prefix: None,
        }
    }

    #[test]
    fn renders_every_placeholder() {
        let env = [("LD_DEBUG".to_owned(), "libs".to_owned())];
        let out = config(&env).render(TEMPLATE).unwrap();
        assert!(!out.contains("@"), "{out}");
        assert!(out.contains(
            "config.test_compiler_features = ['clang', 'clang-16', 'clang-16.0', 'clang-16.0.6']"
        ));
        assert!(out.contains("config.environment['LD_DEBUG'] = 'libs'\n"));
        assert!(out.contains("'/usr/lib/llvm-16/lib/clang/16/include'"));
        assert!(out.contains("load_config(config, '/src/openmp/libomptarget/test/lit.cfg')"));
    }

    #[test]
    fn renders_llvm17_template() {
        const TEMPLATE_17: &str = include_str!("../../../tests/lit/lit.site.cfg.17.in");
        let mut site = config(&[]);
        site.prefix = Path::new("/usr/lib/llvm-17");
        site.clang_version = "17.0.6";
        let out = site.render(TEMPLATE_17).unwrap();
        assert!(
            out.contains("'/usr/lib/llvm-17/lib/clang/17/include'"),
            "{out}"
        );
        assert!(out.contains("config.has_libomptarget_ompt = True"));
    }

    #[test]
    fn the_compile_cache_stands_before_both_compilers() {
        let mut site = config(&[]);
        site.compiler_prefix = Some("/usr/bin/python3 /c/compile_cache.py /c /run");
        let out = site.render(TEMPLATE).unwrap();
        for compiler in ["clang", "clang++"] {
            let line = format!(
                "'/usr/bin/python3 /c/compile_cache.py /c /run /usr/lib/llvm-16/bin/{compiler}'"
            );
            assert!(out.contains(&line), "{out}");
        }
    }

    #[test]
    fn quotes_are_escaped_and_control_characters_refused() {
        assert_eq!(python_str(r"a'b\c").unwrap(), r"'a\'b\\c'");
        let env = [("X".to_owned(), "a\nb".to_owned())];
        assert!(config(&env).render(TEMPLATE).is_err());
    }

    #[test]
    fn unknown_placeholder_is_an_error() {
        let template = format!("{TEMPLATE}\n@SOMETHING_NEW@\n");
        assert!(config(&[]).render(&template).is_err());
    }
}
