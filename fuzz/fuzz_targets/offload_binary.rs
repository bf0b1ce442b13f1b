//! OffloadBinary (`.llvm.offloading`): parse a section of back-to-back binaries and
//! round-trip what parses through our writer.
#![no_main]
use libfuzzer_sys::fuzz_target;
use offload_formats::offload_binary::{self, OffloadBinary, OffloadingImage};

fuzz_target!(|data: &[u8]| {
    if let Ok(all) = offload_binary::parse_all(data) {
        for (_, bin) in all {
            let bytes = offload_binary::write(&OffloadingImage {
                image_kind: bin.image_kind,
                offload_kind: bin.offload_kind,
                flags: bin.flags,
                strings: bin.strings.clone(),
                image: bin.image,
            });
            let again = OffloadBinary::parse(&bytes).expect("our own binary parses");
            assert_eq!(again.strings, bin.strings);
            assert_eq!(again.image, bin.image);
        }
    }
});
