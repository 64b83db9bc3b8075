//! The checker on whole images: whatever bytes arrive, `e4_fsck::check` returns a report
//! or an error, and never panics. Seeded with small images whose features reach the
//! checker's own readers (the MMP block, quota trees, inline data, xattr value inodes,
//! an xattr block, directories of several blocks, linear and indexed).
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The checker reads an image by path.
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(data).unwrap();
    let options = e4_fsck::Options {
        threads: Some(2),
        force: true,
        ..e4_fsck::Options::default()
    };
    if let Ok(report) = e4_fsck::check(file.path(), &options) {
        let _ = report.exit_code();
    }
});
