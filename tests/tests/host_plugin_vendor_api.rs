//! The vendor API's shape (issue 37): what is per device is asked of a device's own
//! object, so no call of `BackendDevice` takes a device number, and `Backend` takes one
//! only where it hands that object out (`device(index)`).
//!
//! Read from the source like the import check beside it: each trait's method
//! signatures, comments left out, and every parameter of an integer type named for a
//! device (`device`, `src_device`, `_device`, `index`, ...) is reported.

use std::fs;

/// The parameters of every method signature in `trait <name>` of `source` that take a
/// device number: `fn name: param` for each.
fn device_number_parameters(source: &str, name: &str) -> Vec<String> {
    let code: String = source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect();
    let start = code
        .find(&format!("pub trait {name}"))
        .unwrap_or_else(|| panic!("no trait {name}"));
    let body = &code[start..];
    let end = body.find("\n}\n").expect("the trait's end");
    let body = &body[..end];
    let mut found = Vec::new();
    for signature in body.split("fn ").skip(1) {
        let method = signature.split('(').next().unwrap_or("").trim().to_owned();
        let Some(params) = signature
            .split_once('(')
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(params, _)| params)
        else {
            continue;
        };
        for param in params.split(',') {
            let Some((pname, ptype)) = param.split_once(':') else {
                continue;
            };
            let (pname, ptype) = (pname.trim(), ptype.trim());
            let numbered = matches!(ptype, "usize" | "u32" | "i32" | "u64");
            if numbered && (pname.contains("device") || pname.trim_start_matches('_') == "index") {
                found.push(format!("{method}: {pname}: {ptype}"));
            }
        }
    }
    found
}

fn vendor_api() -> String {
    let path = e2e_tests::paths::root().join("host-plugin/src/backend/mod.rs");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn no_per_device_call_takes_a_device_number() {
    let found = device_number_parameters(&vendor_api(), "BackendDevice");
    assert!(
        found.is_empty(),
        "BackendDevice calls taking a device number: {found:?}"
    );
}

#[test]
fn the_backend_takes_a_device_number_only_to_hand_out_the_device() {
    let found = device_number_parameters(&vendor_api(), "Backend");
    assert_eq!(found, ["device: index: usize"]);
}

/// The reader sees a device number where one is, in the shapes the old trait had them
/// (first parameter, among others, with an underscore), and not in other integers.
#[test]
fn the_reader_finds_device_numbers_it_is_shown() {
    let source = "\
pub trait Shown: Send {
    /// fn documented(&self, device: usize) is a comment
    fn init(&self, device: usize) -> Result<(), E>;
    unsafe fn copy(
        &self,
        src_device: usize,
        src: u64,
        _dst_device: usize,
        len: usize,
    ) -> Result<(), E>;
    fn alloc(&self, size: usize, kind: AllocKind) -> u64 {
        0
    }
    fn device(&self, index: usize) -> Arc<dyn D>;
}
";
    assert_eq!(
        device_number_parameters(source, "Shown"),
        [
            "init: device: usize",
            "copy: src_device: usize",
            "copy: _dst_device: usize",
            "device: index: usize",
        ]
    );
}
