//! The README's tested blocks: a fenced block right after an HTML comment
//! `<!-- quick-start: NAME -->` is run as written by `cargo xtask test` (in bare Debian
//! roots, after installing the package) and its output compared with the block marked
//! `output`. One reader for xtask (which runs them) and the tests (which check the
//! README's shape).

use std::path::PathBuf;

/// The README's marker of a tested block named `name`.
pub fn marker(name: &str) -> String {
    format!("<!-- quick-start: {name} -->")
}

/// README.md's text.
pub fn text() -> std::io::Result<String> {
    std::fs::read_to_string(path())
}

/// README.md's path.
pub fn path() -> PathBuf {
    crate::workspace::root().join("README.md")
}

/// The marked block named `name`: (the line number of its marker, 1-based; its body,
/// each line ending in a newline). None when the marker is missing or no fence follows
/// it directly.
pub fn block(readme: &str, name: &str) -> Option<(usize, String)> {
    let marker = marker(name);
    let lines: Vec<&str> = readme.lines().collect();
    let at = lines.iter().position(|l| l.trim() == marker)?;
    let fence = lines.get(at + 1)?.trim_start();
    if !fence.starts_with("```") {
        return None;
    }
    let mut body = String::new();
    for line in &lines[at + 2..] {
        if line.trim_start().starts_with("```") {
            return Some((at + 1, body));
        }
        body.push_str(line);
        body.push('\n');
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_block_is_read_and_an_unfenced_one_is_not() {
        let text = "# t\n<!-- quick-start: run -->\n```sh\necho a\necho b\n```\n\
                    <!-- quick-start: output -->\ntext\n";
        assert_eq!(
            block(text, "run"),
            Some((2, "echo a\necho b\n".to_string()))
        );
        assert_eq!(block(text, "output"), None);
        assert_eq!(block(text, "install"), None);
    }
}
