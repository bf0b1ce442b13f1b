//! Reading Rust source as text, for the tests that check the tree's own code (its import
//! graph, the vendor API's signatures): comments and literals out first, so that nothing
//! in them reads as code.

/// `text` without comments, with every string and char literal made empty (`""`, `' '`),
/// so that nothing in them reads as code.
pub fn without_comments_and_literals(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |e| e + 2);
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|&c| c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            i += body
                + rest[body..]
                    .find(&close)
                    .map_or(rest.len() - body, |e| e + close.len());
            out.push_str("\"\"");
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() {
                match rest.as_bytes()[j] {
                    b'\\' => j += 2,
                    b'"' => break,
                    _ => j += 1,
                }
            }
            i += (j + 1).min(rest.len());
            out.push_str("\"\"");
        } else if rest.starts_with("b'") || (rest.starts_with('\'') && is_char_literal(rest)) {
            let start = usize::from(rest.starts_with('b'));
            let end = rest[start + 1..]
                .find('\'')
                .map_or(rest.len(), |e| start + e + 2);
            i += end;
            out.push_str("' '");
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `'x'` or `'\n'` (a char literal), not a lifetime `'a`.
fn is_char_literal(rest: &str) -> bool {
    let b = rest.as_bytes();
    (b.len() > 2 && b[1] != b'\\' && rest[1..].chars().nth(1) == Some('\''))
        || (b.len() > 3 && b[1] == b'\\')
}

/// The position of the `}` that closes the `{` at `open` in `code` (comments and
/// literals already out), if it is closed.
pub fn closing_brace(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}
