//! Target IDs and bundle entry IDs: parse, canonicalise, compare.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_formats::bundle::BundleEntryId;
use offload_formats::target_id::{is_compatible, TargetId};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (a, b) = text.split_once('|').unwrap_or((text, text));
    if let (Ok(x), Ok(y)) = (TargetId::parse(a), TargetId::parse(b)) {
        // The canonical form parses back to itself.
        let canon = x.canonical();
        assert_eq!(
            TargetId::parse(&canon.to_string()).unwrap().canonical(),
            canon
        );
        // Everything is compatible with itself.
        assert!(is_compatible(&x, &x));
        let _ = is_compatible(&x, &y);
    }
    if let Ok(id) = BundleEntryId::parse(a) {
        let s = id.to_bundler_string();
        let _ = BundleEntryId::parse(&s);
        let _ = id.is_code_object_compatible(&id, false);
    }
});
