//! Image discovery over any container: classify, then find every device image.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = offload_formats::image::classify(data);
    if let Ok(images) = offload_formats::image::find_images(data) {
        for img in images {
            if let Some(r) = img.range {
                assert!(r.end as usize <= data.len() && r.start <= r.end);
            }
        }
    }
});
