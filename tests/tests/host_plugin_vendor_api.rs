//! The vendor API's shape (issue 37): what is per device is asked of a device's own
//! object, so no call of `BackendDevice` takes a device number, and `Backend` takes one
//! only where it hands that object out (`device(index)`).
//!
//! Read from the source like the import check beside it: each trait's method
//! signatures (comments and literals left out, the methods at the trait's top level,
//! parameters split where Rust splits them), and every parameter that could carry a
//! device number is reported ([`could_be_a_device_number`]):
//! - any integer: a Rust primitive, a C integer (`c_int`, `libc::c_uint`,
//!   `std::os::raw::c_long`, ...), a vendor's device handle that is one (`CUdevice`,
//!   `hipDevice_t`), a `NonZero` integer, an alias `type X = <integer>` of the vendor
//!   API's own files, each also inside `Option<...>`, unless the parameter's name or
//!   type is on [`ALLOWED_NAMES`] / [`ALLOWED_TYPES`], each with its reason;
//! - any type named as an identifier or a position (`DeviceId`, `DeviceIndex`,
//!   `Ordinal`, `GpuIdx`, ...), allowed or not;
//! - any parameter passed by value that is named like a device number (`device`, `dev`,
//!   `src_device`, `ordinal`, `index`, `idx`, `id`, `dev_id`, `gpu`, ...), whatever its
//!   type: a device object is handed by reference (`to: &dyn BackendDevice`).

use e2e_tests::rust_source::{closing_brace, without_comments_and_literals};
use std::collections::BTreeSet;
use std::fs;

/// Integer parameters that are no device number, by name (a leading `_` dropped).
const ALLOWED_NAMES: &[(&str, &str)] = &[
    ("size", "a byte count (BackendDevice::alloc)"),
    (
        "len",
        "a byte count (copy, write_async, read_async, copy_async, lock_host)",
    ),
    ("bytes", "a byte count (BackendDevice::set_limit's value)"),
    (
        "flags",
        "the `requires` bit flags (Backend::unsupported_requirements)",
    ),
];

/// Integer types that are no device number, by name (aliases of `u64` in the vendor
/// API).
const ALLOWED_TYPES: &[(&str, &str)] = &[
    ("DeviceAddr", "an address in the device's memory"),
    ("QueueHandle", "a queue this device handed out"),
    ("EventHandle", "an event this device handed out"),
];

/// The integer types by their last path segment (`libc::c_int`, `std::os::raw::c_int`
/// and `core::ffi::c_int` are `c_int`).
const INTEGERS: &[&str] = &[
    "i8",
    "i16",
    "i32",
    "i64",
    "i128",
    "isize",
    "u8",
    "u16",
    "u32",
    "u64",
    "u128",
    "usize",
    "c_char",
    "c_schar",
    "c_uchar",
    "c_short",
    "c_ushort",
    "c_int",
    "c_uint",
    "c_long",
    "c_ulong",
    "c_longlong",
    "c_ulonglong",
    "size_t",
    "ssize_t",
    "NonZeroI32",
    "NonZeroU32",
    "NonZeroI64",
    "NonZeroU64",
    "NonZeroUsize",
    "NonZeroIsize",
    // CUDA's and HIP's device handles are C ints.
    "CUdevice",
    "hipDevice_t",
];

/// The words (split at `_`) of a parameter name that make it a device number's.
const DEVICE_WORDS: &[&str] = &[
    "device", "devices", "dev", "devnum", "ordinal", "index", "idx", "id", "gpu", "gpus",
];

/// The ends of a type name that make it an identifier or a position.
const ID_TYPE_ENDS: &[&str] = &["Id", "ID", "Index", "Idx", "Ordinal", "Number", "Num"];

/// The position of `word` as a whole word in `text`, from `from` on.
fn find_word(text: &str, word: &str, mut from: usize) -> Option<usize> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while let Some(found) = text[from..].find(word) {
        let at = from + found;
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        if !before.is_some_and(ident) && !after.is_some_and(ident) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The body of `trait <name>` in `code` (between its braces).
fn trait_body<'a>(code: &'a str, name: &str) -> &'a str {
    let start =
        find_word(code, &format!("trait {name}"), 0).unwrap_or_else(|| panic!("no trait {name}"));
    let open = start + code[start..].find('{').expect("the trait's body");
    let close = closing_brace(code, open).unwrap_or_else(|| panic!("trait {name} is not closed"));
    &code[open + 1..close]
}

/// `text` split at its top-level commas (not inside `()`, `[]`, `{}` or `<>`).
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0i32, 0, Vec::new());
    let mut previous = ' ';
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' | '{' | '<' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '>' if previous != '-' && previous != '=' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        previous = c;
    }
    parts.push(&text[start..]);
    parts
}

/// Each method of a trait body at its top level (not functions inside default bodies)
/// with its parameter list: (name, parameters).
fn methods(body: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = find_word(body, "fn", from) {
        from = at + 2;
        let depth = body[..at].matches('{').count() - body[..at].matches('}').count();
        if depth != 0 {
            continue;
        }
        let rest = body[at + 2..].trim_start();
        let name_len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = rest[..name_len].to_owned();
        let Some(open) = rest.find('(') else { continue };
        let mut depth = 0usize;
        let close = rest[open..]
            .char_indices()
            .find_map(|(i, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                (depth == 0).then_some(open + i)
            })
            .unwrap_or(rest.len());
        found.push((name, rest[open + 1..close].to_owned()));
    }
    found
}

/// The aliases `type X = <integer>;` that `code` defines, as names.
fn integer_aliases(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut from = 0;
    while let Some(at) = find_word(code, "type", from) {
        from = at + 4;
        let rest = &code[from..];
        let Some((name, target)) = rest
            .split_once(';')
            .and_then(|(item, _)| item.split_once('='))
        else {
            continue;
        };
        if is_integer(target, &BTreeSet::new()) {
            found.insert(name.trim().to_owned());
        }
    }
    found
}

/// The type's name without `Option<...>`, `mut` and its path: `Option<libc::c_int>` ->
/// `c_int`.
fn type_name(ty: &str) -> &str {
    let mut ty = ty.trim();
    while let Some(inner) = ty.strip_prefix("Option<").and_then(|t| t.strip_suffix('>')) {
        ty = inner.trim();
    }
    ty = ty.strip_prefix("mut ").unwrap_or(ty).trim();
    ty.rsplit("::").next().unwrap_or(ty).trim()
}

fn is_integer(ty: &str, aliases: &BTreeSet<String>) -> bool {
    let name = type_name(ty);
    INTEGERS.contains(&name) || aliases.contains(name)
}

/// Named as an identifier or a position: `DeviceId`, `DeviceIndex`, `Ordinal`, ...
fn is_id_type(ty: &str) -> bool {
    let name = type_name(ty);
    let name = name.split('<').next().unwrap_or(name);
    ID_TYPE_ENDS.iter().any(|end| name.ends_with(end))
}

/// Named like a device number: a word of `src_device`, `dev_id`, `ordinal`, ...
fn is_device_name(name: &str) -> bool {
    name.to_lowercase()
        .split('_')
        .any(|word| DEVICE_WORDS.contains(&word))
}

/// Passed by reference, pointer or as a trait object (a device's object, not a number).
fn is_by_reference(ty: &str) -> bool {
    let ty = ty.trim();
    ty.starts_with('&') || ty.starts_with('*') || ty.contains("dyn ") || ty.contains("impl ")
}

/// Whether parameter `name: ty` could carry a device number (see the module's rules).
fn could_be_a_device_number(name: &str, ty: &str, aliases: &BTreeSet<String>) -> bool {
    let name = name
        .trim()
        .trim_start_matches("mut ")
        .trim_start_matches('_');
    let allowed = ALLOWED_NAMES.iter().any(|(n, _)| *n == name)
        || ALLOWED_TYPES.iter().any(|(t, _)| *t == type_name(ty));
    (is_integer(ty, aliases) && !allowed)
        || is_id_type(ty)
        || (is_device_name(name) && !is_by_reference(ty))
}

/// The parameters of every method of `trait <name>` in `source` that could take a
/// device number: `method: param: type` for each. `aliases`: the integer aliases the
/// vendor API defines.
fn device_number_parameters(source: &str, name: &str, aliases: &BTreeSet<String>) -> Vec<String> {
    let code = without_comments_and_literals(source);
    let mut found = Vec::new();
    for (method, params) in methods(trait_body(&code, name)) {
        for param in split_top_level(&params) {
            let Some((pname, ptype)) = param.split_once(':') else {
                continue; // `&self`, `self`
            };
            let (pname, ptype) = (pname.trim(), ptype.trim());
            if pname != "self" && could_be_a_device_number(pname, ptype, aliases) {
                found.push(format!("{method}: {pname}: {ptype}"));
            }
        }
    }
    found
}

/// The vendor API (`backend/mod.rs`) and the integer aliases of its files (those right
/// in `backend/`, not the vendors').
fn vendor_api() -> (String, BTreeSet<String>) {
    let dir = e2e_tests::paths::root().join("host-plugin/src/backend");
    let read = |path: &std::path::Path| {
        fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let mut aliases = BTreeSet::new();
    for entry in fs::read_dir(&dir).expect("host-plugin/src/backend is readable") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            aliases.extend(integer_aliases(&without_comments_and_literals(&read(
                &path,
            ))));
        }
    }
    (read(&dir.join("mod.rs")), aliases)
}

#[test]
fn no_per_device_call_takes_a_device_number() {
    let (source, aliases) = vendor_api();
    // The reader sees the trait's methods and their parameters (not an empty body).
    let read = methods(trait_body(
        &without_comments_and_literals(&source),
        "BackendDevice",
    ));
    let alloc = read.iter().find(|(name, _)| name == "alloc");
    assert!(
        read.len() >= 20 && alloc.is_some_and(|(_, params)| params.contains("size: usize")),
        "the reader misses BackendDevice's methods: {read:?}"
    );
    let found = device_number_parameters(&source, "BackendDevice", &aliases);
    assert!(
        found.is_empty(),
        "BackendDevice calls taking a device number: {found:?}"
    );
}

#[test]
fn the_backend_takes_a_device_number_only_to_hand_out_the_device() {
    let (source, aliases) = vendor_api();
    let found = device_number_parameters(&source, "Backend", &aliases);
    assert_eq!(found, ["device: index: usize"]);
}

/// The allowed integer types are what the vendor API says they are (aliases of an
/// integer), so that the allow-list names nothing that is not there.
#[test]
fn the_allowed_types_are_the_vendor_apis_integer_aliases() {
    let (_, aliases) = vendor_api();
    for (allowed, why) in ALLOWED_TYPES {
        assert!(
            aliases.contains(*allowed),
            "{allowed} ({why}) is no integer alias of the vendor API: {aliases:?}"
        );
    }
}

/// The reader sees a device number where one is, in the shapes the old trait had them
/// (first parameter, among others, with an underscore) and in those the old reader
/// missed (another name, a C integer, an id type, a vendor's handle, an alias), and not
/// in byte counts, allowed handles, device objects, nested functions or comments.
#[test]
fn the_reader_finds_device_numbers_it_is_shown() {
    let source = "\
pub trait ShownDevice: Send {
    fn not_this_trait(&self, device: usize);
}
pub type Number = u32;
pub trait Shown: Send {
    /// fn documented(&self, device: usize) is a comment
    fn init(&self, device: usize) -> Result<(), E>;
    unsafe fn copy(
        &self,
        src_device: usize,
        src: DeviceAddr,
        _dst_device: usize,
        len: usize,
    ) -> Result<(), E>;
    fn alloc(&self, size: usize, kind: AllocKind) -> u64 {
        fn nested(device: usize) {}
        let s = \"fn in_a_string(device: usize)\";
        0
    }
    fn f(&self, ordinal: c_int);
    fn g(&self, dev: DeviceId);
    fn h<'a>(&self, map: HashMap<u8, Vec<u8>>, n: libc::c_uint, to: &dyn ShownDevice);
    fn i(&self, which: std::os::raw::c_long, at: Option<GpuIndex>, cu: CUdevice);
    fn j(&self, count: Number, bytes: usize, queue: QueueHandle, gpu: Handle);
    fn device(&self, index: usize) -> Arc<dyn D>;
}
";
    let aliases = integer_aliases(&without_comments_and_literals(source));
    assert_eq!(aliases, BTreeSet::from(["Number".to_owned()]));
    assert_eq!(
        device_number_parameters(source, "Shown", &aliases),
        [
            "init: device: usize",
            "copy: src_device: usize",
            "copy: _dst_device: usize",
            "f: ordinal: c_int",
            "g: dev: DeviceId",
            "h: n: libc::c_uint",
            "i: which: std::os::raw::c_long",
            "i: at: Option<GpuIndex>",
            "i: cu: CUdevice",
            "j: count: Number",
            "j: gpu: Handle",
            "device: index: usize",
        ]
    );
    // The brief's shapes one by one; a byte size passes.
    for (text, flagged) in [
        ("fn f(&self, ordinal: c_int);", true),
        ("fn g(&self, dev: DeviceId);", true),
        ("fn k(&self, id: i32);", true),
        ("fn l(&self, size: usize);", false),
    ] {
        let source = format!("pub trait T {{\n    {text}\n}}\n");
        assert_eq!(
            !device_number_parameters(&source, "T", &BTreeSet::new()).is_empty(),
            flagged,
            "{text}"
        );
    }
}
