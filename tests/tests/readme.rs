//! README.md and docs/*.md as a user meets them: the README stays a short page that
//! starts with the user (at most [`MAX_README_LINES`] lines), its quick start comes early
//! and keeps the marked, fenced blocks that the package check extracts and runs, the
//! messages its troubleshooting table quotes are ones this repository's code really
//! prints, and every relative link (with its `#anchor`) in the README and docs/*.md
//! leads somewhere.
//!
//! Each check is a function returning its problems, so that the tests at the end can
//! show each one failing on a small bad sample: a check that cannot fail proves nothing.

use e2e_tests::paths::{root, scratch};
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use test_support::readme;

/// The README is the user's first page; everything else lives in docs/.
const MAX_README_LINES: usize = 250;
/// The quick start's blocks, in order (test_support::readme's names: xtask runs them in
/// bare Debian roots); each marker sits directly above a fenced block.
const QUICK_START: [&str; 3] = ["install", "run", "output"];
/// The install block's marker must be on one of the README's first this many lines.
const INSTALL_MARKER_WITHIN: usize = 60;
/// The heading above the troubleshooting table.
const TROUBLESHOOTING_HEADING: &str = "## Troubleshooting";
/// Files the troubleshooting table's messages must be found in.
const SOURCE_EXTENSIONS: &[&str] = &["rs", "c", "cpp", "h"];
/// The program the quick start builds, whose output the README shows.
const QUICK_START_PROGRAM: &str = "examples/standard_indirect.cpp";

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn readme() -> String {
    readme::text().expect("reading README.md")
}

/// Whether `line` opens or closes a fenced code block.
fn is_fence(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("```") || line.starts_with("~~~")
}

// ---- the README's length and quick start ----

fn length_problems(text: &str) -> Vec<String> {
    let lines = text.lines().count();
    if lines > MAX_README_LINES {
        vec![format!(
            "README.md has {lines} lines, more than {MAX_README_LINES}: move detail to docs/"
        )]
    } else {
        Vec::new()
    }
}

/// The quick start's marked blocks (install, run, output), as test_support::readme
/// reads them for xtask, or the problems.
fn quick_start_blocks(text: &str) -> Result<Vec<Vec<String>>, Vec<String>> {
    let mut problems = Vec::new();
    let mut blocks = Vec::new();
    let mut previous: Option<usize> = None;
    for name in QUICK_START {
        let marker = readme::marker(name);
        let count = text.lines().filter(|l| l.trim() == marker).count();
        if count != 1 {
            problems.push(format!("`{marker}` must occur once, found {count} times"));
            continue;
        }
        let Some((line, body)) = readme::block(text, name) else {
            problems.push(format!(
                "`{marker}`: a closed fenced block (```) must follow the marker directly"
            ));
            continue;
        };
        if name == QUICK_START[0] && line > INSTALL_MARKER_WITHIN {
            problems.push(format!(
                "`{marker}` is on line {line}: the quick start must begin within the first \
                 {INSTALL_MARKER_WITHIN} lines"
            ));
        }
        if previous.is_some_and(|p| p > line) {
            problems.push(format!("`{marker}` comes before the marker it must follow"));
        }
        previous = Some(line);
        if body.trim().is_empty() {
            problems.push(format!("`{marker}`: its fenced block is empty"));
        }
        blocks.push(body.lines().map(str::to_string).collect());
    }
    if problems.is_empty() {
        Ok(blocks)
    } else {
        Err(problems)
    }
}

/// The output block against the program: each line one of its `check("<label>", ...)`
/// lines, ending `: ok`, then its summary with no wrong call.
fn output_problems(output: &[String], program: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let Some((summary, checks)) = output.split_last() else {
        return vec!["the output block is empty".into()];
    };
    if !summary.starts_with("standard example: ") || !summary.ends_with(" ok, 0 wrong") {
        problems.push(format!(
            "the output's last line is {summary:?}, not the program's summary \
             `standard example: N ok, 0 wrong`"
        ));
    }
    let count = format!("standard example: {} ok, 0 wrong", checks.len());
    if summary != &count {
        problems.push(format!(
            "the summary says {summary:?} but the block shows {} check lines",
            checks.len()
        ));
    }
    for line in checks {
        let label = line.split("  ").next().unwrap_or("").trim();
        if label.is_empty() || !program.contains(&format!("check(\"{label}\"")) {
            problems.push(format!(
                "output line {line:?}: {QUICK_START_PROGRAM} has no check labelled {label:?}"
            ));
        }
        if !line.ends_with(": ok") {
            problems.push(format!("output line {line:?} does not end with `: ok`"));
        }
    }
    problems
}

// ---- the troubleshooting table's messages ----

/// A table row's cells (outer pipes dropped; `\|` is a pipe inside a cell).
fn cells(row: &str) -> Vec<String> {
    let row = row.trim();
    let inner = row.strip_prefix('|').unwrap_or(row);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().unwrap().push(c),
        }
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The code spans of a cell (the text between each pair of backticks).
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Every backticked message in the troubleshooting table's message column (the column
/// whose header says "message"), with the symptom of its row.
fn troubleshooting_messages(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim() != TROUBLESHOOTING_HEADING);
    if lines.next().is_none() {
        return Err(format!("no `{TROUBLESHOOTING_HEADING}` heading"));
    }
    let mut table = lines
        .take_while(|l| !l.starts_with("## "))
        .skip_while(|l| !l.trim_start().starts_with('|'))
        .take_while(|l| l.trim_start().starts_with('|'));
    let header = cells(table.next().ok_or("no table under the heading")?);
    let column = header
        .iter()
        .position(|h| h.to_lowercase().contains("message"))
        .ok_or_else(|| format!("no column whose header says \"message\": {header:?}"))?;
    let separator = table.next().ok_or("the table has no separator row")?;
    if !cells(separator)
        .iter()
        .all(|c| c.chars().all(|ch| matches!(ch, '-' | ':')))
    {
        return Err(format!(
            "the table's second row is not its separator: {separator}"
        ));
    }
    let mut messages = Vec::new();
    for row in table {
        let row = cells(row);
        let cell = row
            .get(column)
            .ok_or_else(|| format!("a row has no cell {column}: {row:?}"))?;
        let symptom = row.first().cloned().unwrap_or_default();
        messages.extend(code_spans(cell).into_iter().map(|m| (symptom.clone(), m)));
    }
    Ok(messages)
}

/// Every source file of the repository (by [`SOURCE_EXTENSIONS`]) outside build output,
/// git's folder, docs/ and this test.
fn source_files() -> Vec<PathBuf> {
    let root = root();
    let this_test = root.join("tests/tests/readme.rs");
    let mut files = Vec::new();
    let mut folders = vec![root.clone()];
    while let Some(folder) = folders.pop() {
        let entries =
            fs::read_dir(&folder).unwrap_or_else(|e| panic!("listing {}: {e}", folder.display()));
        for entry in entries {
            let entry = entry.expect("a directory entry");
            let path = entry.path();
            let name = entry.file_name();
            let kind = entry.file_type().expect("a file type");
            if kind.is_dir() {
                let skipped = name == "target" || name == ".git" || path == root.join("docs");
                if !skipped {
                    folders.push(path);
                }
            } else if kind.is_file()
                && path != this_test
                && path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| SOURCE_EXTENSIONS.contains(&e))
            {
                files.push(path);
            }
        }
    }
    files
}

/// The messages found in none of `sources` (path and text).
fn unfound_messages(messages: &[(String, String)], sources: &[(PathBuf, String)]) -> Vec<String> {
    messages
        .iter()
        .filter(|(_, message)| {
            !sources
                .iter()
                .any(|(_, text)| text.contains(message.as_str()))
        })
        .map(|(symptom, message)| {
            format!(
                "row {symptom:?}: `{message}` occurs verbatim in no .rs/.c/.cpp/.h file: quote \
                 only messages the code prints, or leave the text out of backticks"
            )
        })
        .collect()
}

// ---- links ----

/// `text` without its fenced code blocks and inline code spans (links are not read
/// there), line by line so that line numbers stay.
fn prose_lines(text: &str) -> Vec<String> {
    let mut in_fence = false;
    text.lines()
        .map(|line| {
            if is_fence(line) {
                in_fence = !in_fence;
                return String::new();
            }
            if in_fence {
                return String::new();
            }
            line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

/// The targets of the inline links and images of `text`, with their line numbers.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut targets = Vec::new();
    for (number, line) in prose_lines(text).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            targets.push((number + 1, target.to_string()));
            rest = &after[end..];
        }
    }
    targets
}

/// GitHub's anchor for a heading's text: lower case, punctuation dropped (but `-` and
/// `_`), each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of the headings of `text` (outside code blocks); a repeated heading
/// gets `-1`, `-2`, ... as on GitHub.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut in_fence = false;
    for line in text.lines() {
        if is_fence(line) {
            in_fence = !in_fence;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if in_fence || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    seen
}

/// The relative links of the markdown file `file` that lead nowhere: a missing file or
/// folder, or an `#anchor` that no heading of the markdown file it names makes.
fn broken_links(file: &Path) -> Vec<String> {
    let text = read(file);
    let folder = file.parent().expect("a file has a folder");
    let mut problems = Vec::new();
    for (line, target) in link_targets(&text) {
        if target.is_empty()
            || target.contains("://")
            || target.starts_with("mailto:")
            || target.starts_with('/')
        {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            folder.join(path)
        };
        let at = format!("{}:{line}: ({target})", file.display());
        if !resolved.exists() {
            problems.push(format!("{at}: {} does not exist", resolved.display()));
            continue;
        }
        if let Some(anchor) = anchor {
            let is_markdown = resolved.extension().is_some_and(|e| e == "md");
            if is_markdown && !anchors(&read(&resolved)).contains(anchor) {
                problems.push(format!(
                    "{at}: {} has no heading whose anchor is #{anchor}",
                    resolved.display()
                ));
            }
        }
    }
    problems
}

/// README.md and every docs/*.md.
fn markdown_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("listing docs/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn assert_none(problems: Vec<String>) {
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---- the tests ----

#[test]
fn readme_has_at_most_250_lines() {
    assert_none(length_problems(&readme()));
}

#[test]
fn quick_start_markers_come_early_each_above_a_fenced_block() {
    if let Err(problems) = quick_start_blocks(&readme()) {
        assert_none(problems);
    }
}

#[test]
fn quick_start_output_is_what_the_example_prints() {
    let blocks = quick_start_blocks(&readme()).unwrap_or_else(|p| panic!("{}", p.join("\n")));
    let program = read(&root().join(QUICK_START_PROGRAM));
    let run = blocks[1].join("\n");
    let file_name = Path::new(QUICK_START_PROGRAM).file_name().unwrap();
    assert!(
        run.contains(file_name.to_str().unwrap()),
        "the run block does not build {QUICK_START_PROGRAM}:\n{run}"
    );
    assert_none(output_problems(&blocks[2], &program));
}

#[test]
fn troubleshooting_messages_occur_verbatim_in_the_source() {
    let messages = troubleshooting_messages(&readme()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        messages.len() >= 2,
        "the troubleshooting table quotes {} message(s); its message column must put each \
         message the code prints in backticks",
        messages.len()
    );
    let sources: Vec<(PathBuf, String)> = source_files()
        .into_iter()
        .filter_map(|p| fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect();
    assert!(
        sources
            .iter()
            .any(|(p, _)| p.ends_with("host-plugin/src/generic/table/fptr.rs")),
        "the source walk missed host-plugin/src/generic/table/fptr.rs"
    );
    assert_none(unfound_messages(&messages, &sources));
}

#[test]
fn relative_links_in_readme_and_docs_lead_somewhere() {
    let files = markdown_files();
    assert!(files.len() > 1, "no docs/*.md found");
    assert_none(files.iter().flat_map(|f| broken_links(f)).collect());
}

// ---- each check fails where it should ----

#[test]
fn the_length_check_refuses_a_long_readme() {
    let long = "line\n".repeat(MAX_README_LINES + 1);
    assert_eq!(length_problems(&long).len(), 1);
    assert!(length_problems(&"line\n".repeat(MAX_README_LINES)).is_empty());
}

#[test]
fn the_quick_start_check_refuses_late_missing_and_unfenced_markers() {
    let [install, run, output] = QUICK_START.map(readme::marker);
    let good = format!(
        "# t\n{install}\n```sh\napt-get install x\n```\n{run}\n```sh\n./x\n```\n{output}\n```text\nout\n```\n"
    );
    let blocks = quick_start_blocks(&good).expect("the good sample passes");
    assert_eq!(blocks[2], vec!["out".to_string()]);

    let late = format!("{}{good}", "filler\n".repeat(INSTALL_MARKER_WITHIN));
    let problems = quick_start_blocks(&late).unwrap_err();
    assert!(problems[0].contains("first 60 lines"), "{problems:?}");

    let missing = good.replace(&output, "");
    assert!(quick_start_blocks(&missing).is_err());

    let unfenced = good.replace(&format!("{run}\n```sh"), &format!("{run}\n\n```sh"));
    let problems = quick_start_blocks(&unfenced).unwrap_err();
    assert!(
        problems[0].contains("must follow the marker directly"),
        "{problems:?}"
    );

    let swapped = good
        .replace(&install, "@@")
        .replace(&run, &install)
        .replace("@@", &run);
    let problems = quick_start_blocks(&swapped).unwrap_err();
    assert!(problems[0].contains("comes before"), "{problems:?}");
}

#[test]
fn the_output_check_refuses_a_line_the_program_does_not_print() {
    let program = r#"check("add_one(20) through a pointer", calls[0], 1021);"#;
    let good: Vec<String> = [
        "add_one(20) through a pointer       1021 (want  1021): ok",
        "standard example: 1 ok, 0 wrong",
    ]
    .map(String::from)
    .to_vec();
    assert_none(output_problems(&good, program));
    let mut invented = good.clone();
    invented.insert(
        0,
        "made_up(1) through a pointer        1 (want 1): ok".into(),
    );
    assert!(!output_problems(&invented, program).is_empty());
    let wrong = vec![good[0].replace(": ok", ": WRONG"), good[1].clone()];
    assert!(!output_problems(&wrong, program).is_empty());
}

#[test]
fn the_message_check_reads_only_the_message_column_and_refuses_an_invented_message() {
    let text = "## Troubleshooting\n\n\
        | Symptom | Message (verbatim) | Fix |\n\
        |---|---|---|\n\
        | it faults | `faulted on the device` | set `LD_LIBRARY_PATH` |\n\
        | a \\| pipe | `no such message anywhere` | none |\n\
        \n## Next\n| a | `not read` |\n";
    let messages = troubleshooting_messages(text).unwrap();
    let quoted: Vec<&str> = messages.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(
        quoted,
        ["faulted on the device", "no such message anywhere"]
    );
    assert_eq!(messages[1].0, "a | pipe");
    let sources = vec![(
        PathBuf::from("x.rs"),
        "\"kernel faulted on the device\"".to_string(),
    )];
    let unfound = unfound_messages(&messages, &sources);
    assert_eq!(unfound.len(), 1, "{unfound:?}");
    assert!(unfound[0].contains("no such message anywhere"));

    let no_column = "## Troubleshooting\n| Symptom | Fix |\n|---|---|\n| a | b |\n";
    assert!(troubleshooting_messages(no_column).is_err());
}

#[test]
fn the_link_check_refuses_missing_files_and_anchors_and_skips_code() {
    let dir = scratch("readme-test", "links");
    fs::write(
        dir.join("b.md"),
        "# B\n## The `x` part: one, two\n## Twice\n## Twice\n",
    )
    .unwrap();
    let a = dir.join("a.md");
    fs::write(
        &a,
        "[ok](b.md) [ok](b.md#the-x-part-one-two) [ok](b.md#twice-1) [web](https://x.example/y)\n\
         [self](#a) `code [no](nowhere.md)`\n\
         ```\n[no](nowhere-either.md)\n```\n\
         # A\n\
         [missing](c.md) [bad anchor](b.md#three) ![img](missing.svg)\n",
    )
    .unwrap();
    let problems = broken_links(&a);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("c.md"));
    assert!(problems[1].contains("#three"));
    assert!(problems[2].contains("missing.svg"));
    fs::remove_dir_all(dir).unwrap();
}
