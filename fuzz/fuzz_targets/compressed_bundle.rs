//! Compressed (`CCOB`) bundles: header parse, bounded decompression, hash check.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_formats::compressed::CompressedBundle;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = CompressedBundle::parse(data) {
        if let Ok(plain) = header.decompress() {
            assert_eq!(plain.len() as u64, header.uncompressed_size);
            let _ = offload_formats::bundle::Bundle::parse(&plain);
        }
    }
});
