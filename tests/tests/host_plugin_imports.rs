//! The import graph of host-plugin's modules, read from its sources (issue 37: layers
//! that import one way).
//!
//! Every `use` tree and every inline path that starts at `crate::`, `super::` or
//! `self::` in a module's own file (the items `#[cfg(test)]` is on and test files left
//! out; what follows such an item is read) is
//! resolved to the module it reaches (through the names modules bind with `use`); an
//! edge runs from the file's module to that module. A module's layer is its folder
//! below `src/` ([`LAYERS`]: `abi`, `generic`, `backend`, `elf`, `support`), and the
//! vendors are `backend`'s folders [`VENDORS`]. The checks, which `cargo xtask test`
//! runs (in `cargo test --workspace`):
//! - **no cycle**: the graph has no strongly connected component of more than one
//!   module;
//! - **imports run down the layers**: no edge runs from a folder to one above it in
//!   [`LAYERS`] (the C shims above the core, the core above the backend, the backend
//!   above the leaves, `elf` above `support`);
//! - **vendors import only the vendor API and leaves**: no edge runs from a vendor
//!   (`backend::cuda`, `backend::hip`, `backend::host`, `backend::isolated` and their
//!   children) to a module outside `backend` but the leaves ([`LEAF_FOLDERS`]: ELF
//!   reading, utilities, the launch rules' plain types), which import only each other;
//!   and from each vendor some edge to the vendor API or a leaf was read (a vendor
//!   whose imports the reader missed fails, it does not pass for having no wrong edge).
//!
//! The parsing is textual and simple (comments and string literals are skipped, not
//! macros' bodies); a test below shows it cycles on a small crate it writes, so that
//! "no cycle" is not a blind reader's answer.
use e2e_tests::rust_source::{closing_brace, without_comments_and_literals};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// host-plugin's folders below `src/` (its layers), top first: a module imports only
/// modules of its own folder and of those below it. The crate root (`lib.rs`, the
/// crate's face) is above them all.
const LAYERS: &[&str] = &["abi", "generic", "backend", "elf", "support"];

/// The leaves' folders (ELF reading; utilities and the launch rules' plain types): any
/// layer may import their modules, which import nothing but other leaves.
const LEAF_FOLDERS: &[&str] = &["elf", "support"];

const VENDORS: &[&str] = &[
    "backend::cuda",
    "backend::hip",
    "backend::host",
    "backend::isolated",
];

fn src() -> PathBuf {
    e2e_tests::paths::root().join("host-plugin/src")
}

/// The module a source file defines: `backend/cuda/mod.rs` -> `backend::cuda`,
/// `backend/host.rs` -> `backend::host`, `lib.rs` -> `crate`.
fn module_of(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    if parts.is_empty() {
        "crate".to_owned()
    } else {
        parts.join("::")
    }
}

/// Every library source file of host-plugin with its module (the device binary under
/// bin/ is a crate of its own; test files are left out).
fn modules(root: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("host-plugin/src is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(root, &mut files);
    files
        .into_iter()
        .map(|f| {
            (
                module_of(f.strip_prefix(root).expect("below src")),
                f.clone(),
            )
        })
        .collect()
}

/// The code of a file without comments, string and char literals, and without the
/// items `#[cfg(test)]` is on ([`without_test_items`]): what follows such an item is
/// product code again (a `#[cfg(test)]` method in the middle of an `impl` leaves out
/// that method, not the rest of the file).
fn code_of(text: &str) -> String {
    without_test_items(&without_comments_and_literals(text))
}

/// `code` (comments and literals already out) without each item a `#[cfg(test)]`
/// attribute is on: the attribute and what [`item_end`] says the item is, so a
/// `mod tests { ... }` block (by brace matching), a `mod tests;` line, a method, an
/// `impl`, a `use`, a field. An inner `#![cfg(test)]` leaves out the rest of the
/// block it is in (the whole file at its top).
fn without_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some((at, len, inner)) = find_cfg_test(rest) {
        out.push_str(&rest[..at]);
        let item = &rest[at + len..];
        let end = if inner {
            enclosing_end(item)
        } else {
            item_end(item)
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The first `#[cfg(test)]` (or `#![cfg(test)]`) in `code`, spaces allowed between its
/// tokens: (position, length, inner).
fn find_cfg_test(code: &str) -> Option<(usize, usize, bool)> {
    let mut from = 0;
    while let Some(found) = code[from..].find('#') {
        let at = from + found;
        let mut rest = &code[at + 1..];
        let inner = rest.starts_with('!');
        if inner {
            rest = &rest[1..];
        }
        let matched = ["[", "cfg", "(", "test", ")", "]"]
            .iter()
            .try_fold(rest, |rest, token| rest.trim_start().strip_prefix(token));
        if let Some(after) = matched {
            return Some((at, code.len() - after.len() - at, inner));
        }
        from = at + 1;
    }
    None
}

/// Where the item at the start of `item` (after its `#[cfg(test)]`) ends: at its `;`
/// or at the `}` closing its first block (`mod x { ... }`, `fn f() { ... }`, `impl`,
/// `struct`), further attributes before it skipped with their brackets. What is not an
/// item (a field, a variant, a match arm, an argument, a statement) also ends at a `,`,
/// and anything ends where the list or block around it closes.
fn item_end(item: &str) -> usize {
    const ITEMS: &[&str] = &[
        "fn",
        "mod",
        "impl",
        "struct",
        "enum",
        "union",
        "trait",
        "type",
        "const",
        "static",
        "use",
        "extern",
        "unsafe",
        "async",
        "macro_rules!",
        "let",
    ];
    // The first word after the attributes and the visibility says whether it is an item.
    let mut head = item.trim_start();
    while head.starts_with('#') {
        head = head[bracket_end(head).min(head.len())..].trim_start();
    }
    if let Some(after) = head.strip_prefix("pub") {
        let after = after.trim_start();
        head = if after.starts_with('(') {
            after[bracket_end(after).min(after.len())..].trim_start()
        } else {
            after
        };
    }
    let is_item = ITEMS.iter().any(|k| {
        head.strip_prefix(k).is_some_and(|after| {
            k.ends_with('!') || !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
        })
    });
    let mut depth = 0usize;
    for (i, c) in item.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => return i,
            ')' | ']' => depth -= 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            ';' if depth == 0 => return i + 1,
            ',' if depth == 0 && !is_item => return i + 1,
            _ => {}
        }
    }
    item.len()
}

/// Where the block `code` is inside closes (the position of its unmatched `}`), or the
/// end of `code`.
fn enclosing_end(code: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in code.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => return i,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
    }
    code.len()
}

/// Where the bracketed group `code` starts with (`#[...]`, `(...)`) ends: just past its
/// closing bracket.
fn bracket_end(code: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in code.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// Every path a `use` tree names, fully expanded: `crate::{a, b::{c, d as e}}` ->
/// `crate::a`, `crate::b::c`, `crate::b::d`.
fn expand_use(tree: &str) -> Vec<String> {
    expand_use_bound(tree)
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

/// [`expand_use`] with the name each path is bound to (`d as e` binds `e`; a glob
/// binds `*`).
fn expand_use_bound(tree: &str) -> Vec<(String, String)> {
    fn go(prefix: &str, tree: &str, out: &mut Vec<(String, String)>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head = tree[..open].trim().trim_end_matches("::");
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let prefix = join(prefix, head);
            for part in split_top_level(inner) {
                go(&prefix, part, out);
            }
        } else {
            let mut parts = tree.split(" as ");
            let path = parts.next().unwrap_or(tree).trim();
            let glob = path == "*" || path.ends_with("::*");
            if !path.is_empty() {
                let path = path.trim_end_matches("::*").trim_end_matches("::self");
                let full = if path == "self" || path == "*" {
                    prefix.to_owned()
                } else {
                    join(prefix, path)
                };
                let bound = match parts.next() {
                    Some(alias) => alias.trim().to_owned(),
                    None if glob => "*".to_owned(),
                    None => full.rsplit("::").next().unwrap_or(&full).to_owned(),
                };
                out.push((full, bound));
            }
        }
    }
    fn join(a: &str, b: &str) -> String {
        match (a.is_empty(), b.is_empty()) {
            (true, _) => b.to_owned(),
            (_, true) => a.to_owned(),
            _ => format!("{a}::{b}"),
        }
    }
    fn split_top_level(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        parts
    }
    let mut out = Vec::new();
    go("", tree, &mut out);
    out
}

/// What each module's names are: those it binds with `use` (public or not: a child
/// reaches its parent's through `super::`), each with the module it comes from (empty:
/// another crate's), the modules it imports whole (`use x::*`), and the items it
/// defines itself.
#[derive(Default)]
struct Bindings {
    bound: BTreeMap<String, BTreeMap<String, String>>,
    globs: BTreeMap<String, Vec<String>>,
    defines: BTreeMap<String, BTreeSet<String>>,
}

impl Bindings {
    /// Where `module`'s `name` comes from: a module of this crate, "" for another
    /// crate's, None when `module` defines it or nothing says.
    fn source(&self, module: &str, name: &str) -> Option<&str> {
        if let Some(source) = self.bound.get(module).and_then(|b| b.get(name)) {
            return Some(source);
        }
        if self.defines.get(module).is_some_and(|d| d.contains(name)) {
            return None;
        }
        self.globs.get(module)?.iter().find_map(|glob| {
            self.defines
                .get(glob)
                .is_some_and(|d| d.contains(name))
                .then_some(glob.as_str())
        })
    }
}

/// `path` as seen from `from` (inside `inline` levels of `mod x { ... }` blocks of
/// `from`'s file), as segments below the crate root; None when it starts elsewhere
/// (another crate, a local name).
fn absolute(
    from: &str,
    inline: usize,
    path: &str,
    known: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let segments: Vec<&str> = path.split("::").map(str::trim).collect();
    let own: Vec<&str> = if from == "crate" {
        Vec::new()
    } else {
        from.split("::").collect()
    };
    let mut rest = &segments[..];
    let mut base = match *rest.first()? {
        "crate" => {
            rest = &rest[1..];
            Vec::new()
        }
        "self" => {
            rest = &rest[1..];
            own
        }
        "super" => {
            let mut base = own;
            // An inline module's first `super`s stay in this file's module.
            let mut inline = inline;
            while rest.first() == Some(&"super") {
                rest = &rest[1..];
                if inline > 0 {
                    inline -= 1;
                } else {
                    base.pop();
                }
            }
            base
        }
        child if known.contains(&child_of(from, child)) => own,
        _ => return None,
    };
    base.extend(rest.iter().copied());
    Some(base.into_iter().map(str::to_owned).collect())
}

/// The deepest module of `known` that `segments` (below the root) reach, and how many
/// segments that took.
fn deepest(segments: &[String], known: &BTreeSet<String>) -> (String, usize) {
    (1..=segments.len())
        .rev()
        .find_map(|n| {
            let candidate = segments[..n].join("::");
            known.contains(&candidate).then_some((candidate, n))
        })
        .unwrap_or_else(|| ("crate".to_owned(), 0))
}

/// The module `path` (seen from `from`, `inline` levels deep) names: its deepest module,
/// or, when the next segment is a name that module binds with `use` from a module of
/// this crate, that module. A name it binds from another crate leaves the named module
/// (a vendor that reaches offload-formats through a core module still names the core
/// module), except the crate root's, whose re-exports are the crate's face. None for
/// another crate's path.
fn resolve_in(
    from: &str,
    inline: usize,
    path: &str,
    known: &BTreeSet<String>,
    bindings: &Bindings,
) -> Option<String> {
    let segments = absolute(from, inline, path, known)?;
    let (module, depth) = deepest(&segments, known);
    match segments
        .get(depth)
        .and_then(|name| bindings.source(&module, name))
    {
        Some("") if module == "crate" => None,
        Some("") | None => Some(module),
        Some(source) => Some(source.to_owned()),
    }
}

/// The path of `from`'s child module `name`.
fn child_of(from: &str, name: &str) -> String {
    if from == "crate" {
        name.to_owned()
    } else {
        format!("{from}::{name}")
    }
}

/// One module's code with what it refers to: (position, path) of every `use` tree path
/// and of every inline path from the crate, the parent, itself or a child.
struct Source {
    /// The names of the items it defines (`struct X`, `fn f`, ...).
    defines: BTreeSet<String>,
    uses: Vec<(usize, String, String)>,
    inline_paths: Vec<(usize, String)>,
    /// Byte ranges of `mod x { ... }` blocks.
    inline_modules: Vec<(usize, usize)>,
}

impl Source {
    fn read(module: &str, file: &Path, known: &BTreeSet<String>) -> Source {
        let code = code_of(&fs::read_to_string(file).expect("a readable source"));
        let mut uses = Vec::new();
        let mut from = 0;
        while let Some(at) = find_word(&code[from..], "use") {
            let start = from + at + 3;
            let end = code[start..].find(';').map_or(code.len(), |e| start + e);
            for (path, bound) in expand_use_bound(&code[start..end]) {
                uses.push((start, path, bound));
            }
            from = end;
        }
        let children = known.iter().filter_map(|k| {
            let rest = if module == "crate" {
                Some(k.as_str())
            } else {
                k.strip_prefix(&format!("{module}::"))
            }?;
            (!rest.contains("::") && rest != "crate").then(|| format!("{rest}::"))
        });
        let starts: Vec<String> = ["crate::", "super::", "self::"]
            .map(String::from)
            .into_iter()
            .chain(children)
            .collect();
        let mut inline_paths = Vec::new();
        for start in &starts {
            let mut from = 0;
            while let Some(found) = code[from..].find(start.as_str()) {
                let at = from + found;
                let before_ok = !code[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
                let tail = &code[at..];
                let len = tail
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(tail.len());
                let path = tail[..len].trim_end_matches(':');
                // `crate::{` opens a use tree, which the use reading has read.
                if before_ok && path.len() + 2 > start.len() {
                    inline_paths.push((at, path.to_owned()));
                }
                from = at + len.max(1);
            }
        }
        let inline_modules = inline_module_ranges(&code);
        let defines = defined_items(&code);
        Source {
            defines,
            uses,
            inline_paths,
            inline_modules,
        }
    }

    /// How many `mod x { ... }` blocks enclose byte `at`.
    fn depth(&self, at: usize) -> usize {
        self.inline_modules
            .iter()
            .filter(|(start, end)| *start <= at && at < *end)
            .count()
    }
}

/// The names `code` defines as items.
fn defined_items(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for keyword in [
        "struct",
        "enum",
        "union",
        "trait",
        "type",
        "fn",
        "const",
        "static",
        "macro_rules!",
    ] {
        let mut from = 0;
        while let Some(at) = code[from..].find(keyword) {
            let start = from + at;
            from = start + keyword.len();
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &code[from..];
            let trimmed = rest.trim_start();
            if trimmed.len() == rest.len() && keyword != "macro_rules!" {
                continue; // `structure`, not `struct x`
            }
            let trimmed = trimmed.strip_prefix("mut ").unwrap_or(trimmed);
            let len = trimmed
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(trimmed.len());
            if len > 0 {
                names.insert(trimmed[..len].to_owned());
            }
        }
    }
    names
}

/// The byte ranges of the `mod name { ... }` blocks in `code`.
fn inline_module_ranges(code: &str) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(at) = find_word(&code[from..], "mod") {
        let start = from + at;
        let after = &code[start + 3..];
        let name_len = after
            .trim_start()
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(0);
        let skipped = after.len() - after.trim_start().len();
        let rest = after[skipped + name_len..].trim_start();
        if name_len > 0 && rest.starts_with('{') {
            let open = code.len() - rest.len();
            ranges.push((open, closing_brace(code, open).unwrap_or(code.len())));
        }
        from = start + 3;
    }
    ranges
}

/// module -> the modules it imports, for the crate whose sources are below `root`.
fn graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(root);
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    let sources: BTreeMap<&String, Source> = modules
        .iter()
        .map(|(m, f)| (m, Source::read(m, f, &known)))
        .collect();
    // What each module's `use` binds, resolved twice so that a name bound to a name
    // another module binds reaches its source.
    let defines: BTreeMap<String, BTreeSet<String>> = sources
        .iter()
        .map(|(m, s)| ((*m).clone(), s.defines.clone()))
        .collect();
    let mut bindings = Bindings {
        defines: defines.clone(),
        ..Bindings::default()
    };
    for _ in 0..2 {
        let mut next = Bindings {
            defines: defines.clone(),
            ..Bindings::default()
        };
        for (module, source) in &sources {
            for (at, path, bound) in &source.uses {
                let depth = source.depth(*at);
                let from = resolve_in(module, depth, path, &known, &bindings).unwrap_or_default();
                if bound == "*" {
                    next.globs.entry((*module).clone()).or_default().push(from);
                } else {
                    next.bound
                        .entry((*module).clone())
                        .or_default()
                        .insert(bound.clone(), from);
                }
            }
        }
        bindings = next;
    }
    let mut edges = BTreeMap::new();
    for (module, source) in &sources {
        let uses = source.uses.iter().map(|(at, path, _)| (*at, path));
        let inline = source.inline_paths.iter().map(|(at, path)| (*at, path));
        let targets: BTreeSet<String> = uses
            .chain(inline)
            .filter_map(|(at, path)| resolve_in(module, source.depth(at), path, &known, &bindings))
            .filter(|t| t != *module)
            .collect();
        edges.insert((*module).clone(), targets);
    }
    edges
}

/// The position of `word` as a whole word in `text`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(word) {
        let at = from + at;
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        let boundary = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if boundary(before) && after.is_some_and(char::is_whitespace) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

fn is_vendor(module: &str) -> bool {
    VENDORS
        .iter()
        .any(|v| module == *v || module.starts_with(&format!("{v}::")))
}

fn is_backend(module: &str) -> bool {
    in_module(module, "backend")
}

/// `module` is in one of the leaves' folders.
fn is_leaf(module: &str) -> bool {
    LEAF_FOLDERS.iter().any(|folder| in_module(module, folder))
}

/// The position of `module`'s folder in [`LAYERS`]; None for the crate root and for a
/// module in no folder of the list (which [`layer_problems`] reports).
fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|folder| in_module(module, folder))
}

/// What is wrong with the layers in `edges`: every module of a folder that is not in
/// [`LAYERS`] (but the crate root), and every edge from a folder to one above it.
fn layer_problems(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (from, to) in edges {
        let Some(own) = layer(from) else {
            if from != "crate" {
                problems.push(format!("{from} is in no folder of the layers {LAYERS:?}"));
            }
            continue;
        };
        for t in to {
            if layer(t).is_some_and(|target| target < own) {
                problems.push(format!(
                    "{from} ({}) imports {t}, a layer above it ({})",
                    LAYERS[own],
                    LAYERS[layer(t).unwrap_or(own)]
                ));
            }
        }
    }
    problems
}

#[test]
fn imports_run_down_the_layers() {
    let edges = graph(&src());
    for folder in LAYERS {
        assert!(
            edges.keys().any(|m| in_module(m, folder)),
            "no module read in {folder}/: {:?}",
            edges.keys()
        );
    }
    let problems = layer_problems(&edges);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The layer check fails on an edge up the layers (the core importing a shim, a leaf
/// importing the core, `support` importing `elf`) and on a module outside the
/// folders, and passes edges down, within a folder and from the crate root.
#[test]
fn the_layer_check_fails_on_an_import_upward() {
    let graph = |edges: &[(&str, &[&str])]| -> BTreeMap<String, BTreeSet<String>> {
        edges
            .iter()
            .map(|(from, to)| {
                let to = to.iter().map(|t| (*t).to_owned()).collect();
                ((*from).to_owned(), to)
            })
            .collect()
    };
    let good: &[(&str, &[&str])] = &[
        ("crate", &["abi", "generic::plugin"]),
        ("abi", &["generic::plugin", "backend", "support::diag"]),
        ("generic::plugin", &["generic::device", "backend::cuda"]),
        ("backend::cuda", &["backend", "elf::symbols"]),
        (
            "elf::symbols",
            &["elf::symbols::gnu_hash", "support::prefetch"],
        ),
        ("support::prefetch", &[]),
    ];
    assert_eq!(layer_problems(&graph(good)), Vec::<String>::new());
    let mut bad = graph(good);
    bad.insert(
        "generic::plugin".to_owned(),
        BTreeSet::from(["abi".to_owned()]),
    );
    bad.insert(
        "support::prefetch".to_owned(),
        BTreeSet::from(["elf::symbols".to_owned()]),
    );
    bad.insert("loose".to_owned(), BTreeSet::new());
    assert_eq!(
        layer_problems(&bad),
        [
            "generic::plugin (generic) imports abi, a layer above it (abi)",
            "loose is in no folder of the layers [\"abi\", \"generic\", \"backend\", \"elf\", \"support\"]",
            "support::prefetch (support) imports elf::symbols, a layer above it (elf)",
        ]
    );
}

#[test]
fn no_import_cycle() {
    let edges = graph(&src());
    let problems: Vec<String> = cycles(&edges)
        .iter()
        .map(|cycle| {
            let members: Vec<String> = cycle
                .iter()
                .map(|m| {
                    let inside: Vec<&String> =
                        edges[m].iter().filter(|t| cycle.contains(*t)).collect();
                    format!("{m} -> {inside:?}")
                })
                .collect();
            format!("an import cycle: {}", members.join("; "))
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What is wrong with the vendors' imports in `edges`: every edge from a vendor (or a
/// child of one) to a module outside `backend` but the leaves, and every vendor of
/// [`VENDORS`] from which no edge to the vendor API (`backend` or one of its modules
/// that is no vendor) or to a leaf was read, which means the reader did not see its
/// imports (each vendor implements the vendor API's traits, so it names them).
fn vendor_import_problems(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let wrong = edges
        .iter()
        .filter(|(from, _)| is_vendor(from))
        .flat_map(|(from, to)| to.iter().map(move |t| (from.as_str(), t.as_str())))
        .filter(|(_, to)| !is_backend(to) && !is_leaf(to))
        .map(|(from, to)| format!("a vendor imports the core: {from} -> {to}"));
    let unread = VENDORS.iter().filter_map(|vendor| {
        let read = edges
            .iter()
            .filter(|(from, _)| in_module(from, vendor))
            .flat_map(|(_, to)| to)
            .any(|to| (is_backend(to) && !is_vendor(to)) || is_leaf(to));
        (!read).then(|| {
            format!("no import of the vendor API or a leaf was read from {vendor} or its children")
        })
    });
    wrong.chain(unread).collect()
}

/// `module` is `parent` or below it.
fn in_module(module: &str, parent: &str) -> bool {
    module == parent || module.starts_with(&format!("{parent}::"))
}

#[test]
fn vendors_import_only_the_vendor_api_and_leaves() {
    let problems = vendor_import_problems(&graph(&src()));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The vendor check fails on a vendor whose imports were not read (no edge from it at
/// all, or only edges inside itself) and on a vendor that imports the core, and passes
/// a graph where each vendor reaches the vendor API or a leaf.
#[test]
fn the_vendor_check_fails_on_a_vendor_it_did_not_read() {
    let graph = |edges: &[(&str, &[&str])]| -> BTreeMap<String, BTreeSet<String>> {
        edges
            .iter()
            .map(|(from, to)| {
                let to = to.iter().map(|t| (*t).to_owned()).collect();
                ((*from).to_owned(), to)
            })
            .collect()
    };
    let good: &[(&str, &[&str])] = &[
        ("backend", &["backend::error"]),
        ("backend::cuda", &["backend", "backend::cuda::device"]),
        ("backend::cuda::device", &["backend::error", "elf::symbols"]),
        ("backend::hip", &["support::launch_shape"]),
        ("backend::host", &["backend::handles"]),
        ("backend::isolated", &["backend", "backend::host"]),
        ("generic::device", &["backend"]),
    ];
    assert_eq!(vendor_import_problems(&graph(good)), Vec::<String>::new());

    // hip's file read as nothing: its module is there, with no edge.
    let mut unread = graph(good);
    unread.insert("backend::hip".to_owned(), BTreeSet::new());
    unread.insert(
        "backend::hip::sys".to_owned(),
        BTreeSet::from(["backend::hip".to_owned()]),
    );
    assert_eq!(
        vendor_import_problems(&unread),
        ["no import of the vendor API or a leaf was read from backend::hip or its children"]
    );
    // host's module missing from the graph, isolated reaching only another vendor.
    let mut missing = graph(good);
    missing.remove("backend::host");
    missing.insert(
        "backend::isolated".to_owned(),
        BTreeSet::from(["backend::host".to_owned()]),
    );
    assert_eq!(
        vendor_import_problems(&missing),
        [
            "no import of the vendor API or a leaf was read from backend::host or its children",
            "no import of the vendor API or a leaf was read from backend::isolated or its children",
        ]
    );
    let mut core = graph(good);
    core.insert(
        "backend::cuda::device".to_owned(),
        BTreeSet::from([
            "backend::error".to_owned(),
            "generic::table::device_table".to_owned(),
        ]),
    );
    assert_eq!(
        vendor_import_problems(&core),
        ["a vendor imports the core: backend::cuda::device -> generic::table::device_table"]
    );
}

/// A `#[cfg(test)]` item in the middle of a file leaves out that item only: the
/// product code after a test-only method, a test module, a `mod x;` line and a test
/// `use` is read, and what those test items name is not.
#[test]
fn the_reader_reads_past_test_items() {
    let dir = e2e_tests::paths::scratch("host-plugin-imports", "test-items");
    let files = [
        (
            "lib.rs",
            "pub mod a;\npub mod b;\npub mod c;\npub mod d;\npub mod e;\npub mod t;\n",
        ),
        (
            "a.rs",
            "pub struct S;\n\
             impl S {\n\
             \x20   #[cfg(test)]\n\
             \x20   fn for_tests<A, B>(a: A, b: B) -> S { crate::t::helper(); S }\n\
             \x20   pub fn product() -> crate::b::Y { crate::b::Y }\n\
             }\n\
             #[cfg(test)]\n\
             use crate::t::Only;\n\
             use crate::c::Z;\n\
             #[cfg(test)]\n\
             #[path = \"x.rs\"]\n\
             mod x;\n\
             // #[cfg(test)] in a comment hides nothing\n\
             pub fn f() -> Z { let _ = \"#[cfg(test)]\"; Z }\n\
             #[cfg(test)]\n\
             mod tests {\n\
             \x20   use crate::t::{self, Helper};\n\
             \x20   fn g() { if true { crate::t::helper() } }\n\
             }\n\
             pub fn after_the_tests() { crate::d::h() }\n\
             pub struct W {\n\
             \x20   #[cfg(test)]\n\
             \x20   probe: crate::t::Helper,\n\
             \x20   pub e: crate::e::E,\n\
             }\n",
        ),
        ("b.rs", "pub struct Y;\n"),
        ("c.rs", "pub struct Z;\n"),
        ("d.rs", "pub fn h() {}\n"),
        ("e.rs", "pub struct E;\n"),
        (
            "t.rs",
            "pub fn helper() {}\npub struct Helper;\npub struct Only;\n",
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        fs::create_dir_all(path.parent().expect("a folder")).expect("scratch is writable");
        fs::write(path, text).expect("scratch is writable");
    }
    let edges = graph(&dir);
    assert_eq!(
        edges["a"],
        BTreeSet::from(["b", "c", "d", "e"].map(String::from)),
        "{edges:?}"
    );
    // The item alone goes; an inner `#![cfg(test)]` takes the rest of its block.
    assert_eq!(
        code_of("fn a() {}\n#[cfg(test)] fn b() { {} }\nfn c() {}\n"),
        "fn a() {}\n\nfn c() {}\n"
    );
    assert_eq!(
        code_of("mod m { #![cfg(test)] use crate::t; }\nuse crate::k;\n"),
        "mod m { }\nuse crate::k;\n"
    );
}

#[test]
fn leaves_import_only_leaves() {
    let edges = graph(&src());
    let leaves: Vec<&String> = edges.keys().filter(|m| is_leaf(m)).collect();
    for folder in LEAF_FOLDERS {
        assert!(
            leaves.iter().any(|m| in_module(m, folder)),
            "no leaf read in {folder}/: {leaves:?}"
        );
    }
    let wrong: Vec<String> = leaves
        .iter()
        .flat_map(|leaf| {
            edges[*leaf]
                .iter()
                .filter(|to| !is_leaf(to))
                .map(move |to| format!("{leaf} -> {to}"))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "a leaf imports more: {}",
        wrong.join(", ")
    );
}

/// The reading is not vacuous: on a small crate written here it finds a cycle through
/// a re-export of the root, one through a child module named without `self::`, none
/// where imports run one way or a name only passes through a parent's `use`, and it
/// expands use trees as Rust reads them. On
/// host-plugin itself it finds edges the layering keeps.
#[test]
fn the_reader_finds_cycles_it_is_shown() {
    let dir = e2e_tests::paths::scratch("host-plugin-imports", "reader");
    let files = [
        (
            "lib.rs",
            "pub mod a;\npub mod b;\npub mod c;\npub mod e;\npub mod leaf;\npub use a::X;\n",
        ),
        // a -> b through a use tree; b -> a through the root's re-export.
        ("a.rs", "use crate::{b::{self, Y}, leaf};\npub struct X;\n"),
        (
            "b.rs",
            "// crate::c::Nothing in a comment\npub struct Y(pub crate::X);\n",
        ),
        // c -> c::d by a child path without self::; c::d -> c through super.
        ("c/mod.rs", "mod d;\npub fn f() { d::g() }\n"),
        (
            "c/d.rs",
            "pub fn g() { let _ = \"crate::leaf\"; super::f2() }\n",
        ),
        (
            "leaf.rs",
            "mod inner { use super::*; }\npub struct Z;\n#[cfg(test)]\nmod tests { use crate::a::X; }\n",
        ),
        // e binds leaf's Z; e::f names it through e, and depends on leaf, not on e.
        (
            "e/mod.rs",
            "use crate::leaf::Z as W;\nmod f;\npub fn g() -> f::H { f::H(None) }\n",
        ),
        ("e/f.rs", "use super::W;\npub struct H(pub Option<W>);\n"),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        fs::create_dir_all(path.parent().expect("a folder")).expect("scratch is writable");
        fs::write(path, text).expect("scratch is writable");
    }
    let edges = graph(&dir);
    let found = cycles(&edges);
    let sets: Vec<Vec<&str>> = found
        .iter()
        .map(|c| c.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(sets, [vec!["a", "b"], vec!["c", "c::d"]], "{edges:?}");
    assert_eq!(
        edges["leaf"],
        BTreeSet::new(),
        "the test part, an inline module's super and strings are left out"
    );
    assert_eq!(
        edges["e::f"],
        BTreeSet::from(["leaf".to_owned()]),
        "{edges:?}"
    );
    assert!(!edges["b"].contains("c"), "comments are left out");

    assert_eq!(
        expand_use("crate::{a, b::{c, d as e}, f::*}"),
        ["crate::a", "crate::b::c", "crate::b::d", "crate::f"]
    );
    // Edges the layers keep: the C shims call the core, the core calls the vendors.
    let real = graph(&src());
    assert!(real["abi"].contains("generic::plugin"), "{:?}", real["abi"]);
    assert!(
        real["generic::device"].contains("backend"),
        "{:?}",
        real["generic::device"]
    );
    assert!(
        real["generic::resolve"].contains("generic::table::device_table"),
        "{:?}",
        real["generic::resolve"]
    );
}

/// `cargo test -p e2e-tests --test host_plugin_imports -- --ignored --nocapture
/// print_the_graph` prints the cycles, the vendor -> core imports and every edge.
#[test]
#[ignore = "prints the import graph; asserts nothing"]
fn print_the_graph() {
    let edges = graph(&src());
    for c in cycles(&edges) {
        println!("cycle: {c:?}");
    }
    for (from, to) in &edges {
        for t in to.iter().filter(|t| is_vendor(from) && !is_backend(t)) {
            println!("vendor import: (\"{from}\", \"{t}\"),");
        }
    }
    for (from, to) in &edges {
        println!("{from} -> {to:?}");
    }
}
