//! Plain and text clang offload bundles: parse, and check what a successful parse says.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_formats::bundle::{text, Bundle};

fuzz_target!(|data: &[u8]| {
    if let Ok(bundle) = Bundle::parse(data) {
        for e in &bundle.entries {
            // Entries lie inside the input.
            assert!(e.offset as usize + e.data.len() <= data.len());
        }
        assert!(bundle.listing_order().len() <= bundle.entries.len());
        // Re-writing what we read parses back to the same entries.
        let pairs: Vec<(&str, &[u8])> = bundle.entries.iter().map(|e| (e.id, e.data)).collect();
        let again = offload_formats::bundle::write(&pairs, 1);
        let reparsed = Bundle::parse(&again).expect("our own bundle parses");
        assert_eq!(reparsed.entries.len(), bundle.entries.len());
    }
    for comment in [";", "#", "//"] {
        let _ = text::parse(data, comment);
    }
});
