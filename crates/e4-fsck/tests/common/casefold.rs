//! A casefolded directory the casefold tests and the sweep share: made with `mke2fs -O
//! casefold -E encoding=utf8` (and `encoding_flags=strict`), given `EXT4_CASEFOLD_FL`
//! while empty, filled by debugfs with names that fold, and indexed by `e2fsck -fyD`.

use e4_testkit::{make_empty_image, Image};

use super::{e2fsck_exit, run_debugfs};

/// The casefolded directory.
pub const DIR: &str = "cf";
/// More names than a 1 KiB directory block holds of those here.
pub const NAMES_IN_ONE_BLOCK: usize = 20;
/// `s_hash_seed` of every image here.
pub const HASH_SEED: &str = "6c9e4c4e-32c3-4d6e-9a57-0a3e3a8a1b42";
/// `EXT4_CASEFOLD_FL | EXT4_EXTENTS_FL`.
pub const CASEFOLD_DIR_FLAGS: u32 = 0x4008_0000;

/// The `i`th name: its letters' case, and the characters that fold, vary with `i`.
pub fn name(i: usize) -> String {
    let stem = [
        "Datei",
        "ÄRGER",
        "straße",
        "Ångström",
        "soft\u{AD}hyphen",
        "zero\u{200B}space",
    ][i % 6];
    format!("{stem}-{i:04}")
}

/// The first `count` names.
pub fn names(count: usize) -> Vec<String> {
    (0..count).map(name).collect()
}

/// A 1 KiB-block casefold image (`encoding_flags`: "" or ",encoding_flags=strict") with
/// `/cf` holding a file for each of `names`, indexed by `e2fsck -fyD` when they need
/// more than one block.
pub fn casefold_image(encoding_flags: &str, names: &[String]) -> Image {
    let encoding = format!("encoding=utf8{encoding_flags}");
    let image = make_empty_image(
        &[
            "-t", "ext4", "-b", "1024", "-O", "casefold", "-E", &encoding,
        ],
        8,
    );
    let host = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(host.path(), b"x").unwrap();
    let mut commands = vec![
        // A fixed seed, so that which leaf a damaged name hashes outside does not vary.
        format!("ssv hash_seed {HASH_SEED}"),
        format!("mkdir {DIR}"),
        format!("sif {DIR} flags {CASEFOLD_DIR_FLAGS:#x}"),
        format!("cd {DIR}"),
    ];
    commands.extend(
        names
            .iter()
            .map(|name| format!("write {} \"{name}\"", host.path().display())),
    );
    run_debugfs(&image.path, &commands);
    // A few names fit a block and get no index: e2fsck -D would also repair them.
    if names.len() > NAMES_IN_ONE_BLOCK {
        let indexed = e2fsck_exit(&image.path, &["-fyD"]);
        assert!(indexed <= 1, "e2fsck -fyD exited {indexed}");
    }
    image
}
