//! Whole images: open whatever bytes arrive (checksums off, so damage reaches the parsers)
//! and walk everything reachable. Seed the corpus with small mke2fs images.
#![no_main]

use e4_fs::{Filesystem, OpenOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let options = OpenOptions {
        verify_checksums: false,
        cache_bytes: 1 << 20,
        ..OpenOptions::default()
    };
    if let Ok(fs) = Filesystem::open_bytes(data.to_vec(), options) {
        e4_testkit::walk_everything(&fs);
    }
});
