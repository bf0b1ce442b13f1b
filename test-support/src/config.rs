//! The installed config files (`<prefix>/share/omptarget-indirect/<triple>.cfg`), as the
//! controls need them.
use std::path::Path;

/// The text of an installed config without the two compiler-plugin lines (`-fplugin=`,
/// `-fpass-plugin=`): the same toolchain and device RTL, standard clang 16 behaviour.
/// Its `<CFGDIR>/../..` paths become `prefix`, so the file can live anywhere.
pub fn without_compiler_plugin(config_text: &str, prefix: &Path) -> String {
    config_text
        .lines()
        .filter(|l| !l.contains("plugin="))
        .map(|l| l.replace("<CFGDIR>/../..", &prefix.display().to_string()) + "\n")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_lines_go_and_paths_become_the_prefix() {
        let text = "-fopenmp\n-fplugin=<CFGDIR>/../../lib/p.so\n-fpass-plugin=<CFGDIR>/../../lib/p.so\n-I<CFGDIR>/../../include\n";
        assert_eq!(
            without_compiler_plugin(text, Path::new("/opt/p")),
            "-fopenmp\n-I/opt/p/include\n"
        );
    }
}
