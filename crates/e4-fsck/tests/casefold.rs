//! casefold (issue 24) against `e2fsck -fn`: images made with `mke2fs -O casefold -E
//! encoding=utf8` (and `encoding_flags=strict`), a directory given `EXT4_CASEFOLD_FL`
//! while empty and filled by debugfs with names that fold (upper case, `ß`, `Å`, a soft
//! hyphen and a zero-width space, which the utf8-12.1 folding drops), then indexed by
//! `e2fsck -fyD`, which hashes them case-folded. Both checkers must find it clean, and
//! give the same exit status and classes for each damage.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use e4_fsck::ProblemCode;
use e4_testkit::make_empty_image;

use common::casefold::{casefold_image, name, names, CASEFOLD_DIR_FLAGS, DIR, NAMES_IN_ONE_BLOCK};
use common::flips::assert_random_flips_agree;
use common::{assert_exit, bmap, debugfs, edit_dir_block};

/// Applies `edit` to the name bytes of entry `name` wherever it is in `/cf`.
fn edit_name(image: &Path, name: &str, edit: impl Fn(&mut [u8]) + Copy) {
    let blocks = debugfs(image, &format!("stat {DIR}"));
    let size: u64 = blocks
        .split("Size: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("stat gives the size");
    for logical in 0..size / 1024 {
        let physical = bmap(image, DIR, logical);
        let bytes = common::read_bytes(image, physical * 1024, 1024);
        if let Some(at) = find_name(&bytes, name.as_bytes()) {
            edit_dir_block(image, DIR, logical, |block| {
                edit(&mut block[at..at + name.len()])
            });
            return;
        }
    }
    panic!("no entry {name}");
}

/// Where `name` lies in a directory block, as an entry's name (after its 8-byte header).
fn find_name(block: &[u8], name: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at + 8 <= block.len() {
        let rec_len = usize::from(u16::from_le_bytes([block[at + 4], block[at + 5]]));
        let len = usize::from(block[at + 6]);
        if block.get(at + 8..at + 8 + len) == Some(name) {
            return Some(at + 8);
        }
        if rec_len < 8 {
            return None;
        }
        at += rec_len;
    }
    None
}

/// e4-format's folded hash of tricky names against debugfs's `dx_hash -c` (e2fsprogs'
/// own folding): sharp s, the Angstrom sign, ignorables, a ligature, Hangul, dotted
/// capital I, final sigma, Cherokee (whose lower case folds to upper), a combining
/// mark whose folding is a letter, and characters of each kind Unicode 12.1 had not
/// assigned (debugfs refuses a name that is not UTF-8, which e2fsck hashes as its
/// bytes).
/// Under strict mode, names holding characters Unicode 12.1 had not assigned (some the
/// crates' tables fold, decompose or class, one never assigned) and noncharacters are
/// valid, as e2fsck 1.47.0 finds them (only what is not UTF-8, a surrogate among it, is
/// refused); enough of them to be indexed by `e2fsck -fyD`, which places them by 12.1's
/// folding, so each leaf's names must hash into its range in e4 as well.
#[test]
fn names_with_characters_12_1_lacks() {
    let odd = [
        "\u{A7C7}",
        "e\u{301}\u{1AC0}",
        "\u{11938}",
        "\u{1C89}",
        "\u{378}",
        "\u{10FFFF}",
        "\u{FFFE}",
    ];
    let names: Vec<String> = (0..3 * NAMES_IN_ONE_BLOCK)
        .map(|i| format!("{}{}-{i:02}", odd[i % odd.len()], name(i)))
        .collect();
    let image = casefold_image(",encoding_flags=strict", &names);
    let htree = debugfs(&image.path, &format!("htree {DIR}"));
    assert!(htree.contains("Indirect levels"), "not indexed:\n{htree}");
    assert!(assert_exit(&image.path, "strict, characters 12.1 lacks", 0).is_empty());
}

#[test]
fn folded_hashes_match_e2fsprogs() {
    use e4_format::casefold::casefold;
    use e4_format::dir_hash::{dir_hash, HashVersion};
    let image = casefold_image("", &names(1));
    let names: &[&[u8]] = &[
        "Straße".as_bytes(),
        "STRASSE".as_bytes(),
        "\u{212B}ngström".as_bytes(),
        "soft\u{AD}hy\u{200B}phen\u{E0001}".as_bytes(),
        "\u{FB01}le".as_bytes(),
        "한국어".as_bytes(),
        "İstanbul".as_bytes(),
        "ΣΑΣ ς".as_bytes(),
        "\u{AB70}\u{13A0}".as_bytes(),
        "\u{3B1}\u{345}\u{301}".as_bytes(),
        // Characters Unicode 12.1 had not assigned, which the crates' tables touch and
        // 12.1's leave alone: a letter with a folding (13.0), a combining mark of class
        // 220 after one of 230 (14.0: reordered by the crates' NFD), a character with a
        // canonical decomposition (13.0), letters with foldings of 16.0, a mark of the
        // crates' later tables.
        "X\u{A7C7}".as_bytes(),
        "e\u{301}\u{1AC0}\u{212B}".as_bytes(),
        "\u{11938}".as_bytes(),
        "\u{1C89}\u{10D50}".as_bytes(),
        "a\u{301}\u{1E6E3}".as_bytes(),
    ];
    for &name in names {
        let folded = casefold(name);
        let ours = dir_hash(
            HashVersion::HalfMd4,
            folded.as_deref().unwrap_or(name),
            &[0; 4],
        );
        // Quoted for the spaces.
        let mut request = b"dx_hash -c -e utf8 -h half_md4 \"".to_vec();
        request.extend_from_slice(name);
        request.push(b'"');
        let out = Command::new("timeout")
            .arg("60")
            .arg(e4_testkit::tool("debugfs"))
            .arg("-R")
            .arg(OsStr::from_bytes(&request))
            .arg(&image.path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let expected = format!("is {:#x} (minor {:#x})", ours.major, ours.minor);
        assert!(
            text.contains(&expected),
            "{}: e2fsprogs says {text}, e4 {expected}",
            String::from_utf8_lossy(name)
        );
    }
}

#[test]
fn casefolded_htree_is_clean() {
    let image = casefold_image("", &names(300));
    let htree = debugfs(&image.path, &format!("htree {DIR}"));
    assert!(htree.contains("Hash Version: 1"), "not indexed:\n{htree}");
    assert!(assert_exit(&image.path, "casefolded htree", 0).is_empty());
    // Changing a name's case leaves its folded hash, so the index still holds.
    edit_name(&image.path, &name(0), |bytes| bytes.make_ascii_uppercase());
    assert!(assert_exit(&image.path, "a name's case changed", 0).is_empty());
    // Names that fold alike are no duplicates without strict mode.
    let image = casefold_image("", &["abc".into(), "ABC".into()]);
    assert!(assert_exit(&image.path, "names equal when folded", 0).is_empty());
}

#[test]
fn casefold_damage_agrees() {
    use ProblemCode::*;
    // A name whose folded hash moves out of its leaf's range.
    let image = casefold_image("", &names(300));
    edit_name(&image.path, &name(6), |bytes| bytes[0] = b'Q');
    assert_exit(&image.path, "a name changed under the index", 4);
    // Strict mode: names must be UTF-8, and are duplicates when they fold alike.
    let strict = ",encoding_flags=strict";
    let image = casefold_image(strict, &names(3));
    edit_name(&image.path, &name(0), |bytes| bytes[0] = 0xFF);
    let codes = assert_exit(&image.path, "a name that is not UTF-8", 4);
    assert!(codes.contains(&PR_2_BAD_ENCODED_NAME), "{codes:?}");
    let image = casefold_image(strict, &["abc".into(), "ABC".into()]);
    let codes = assert_exit(&image.path, "names equal when folded, strict", 4);
    assert!(codes.contains(&PR_2_DUPLICATE_DIRENT), "{codes:?}");
    // The same bytes, not UTF-8: without strict mode pass 2 finds them alike, but the
    // rehash, comparing them folded, does not (tests/encrypt_casefold.rs has the rest).
    let image = casefold_image("", &["abc".into(), "abd".into()]);
    for name in ["abc", "abd"] {
        edit_name(&image.path, name, |bytes| bytes.copy_from_slice(b"a\xFFc"));
    }
    let codes = assert_exit(&image.path, "the same bytes, not UTF-8", 0);
    assert_eq!(codes, [PR_2_REPORT_DUP_DIRENT]);
    // The flag on a file, and without the feature.
    let image = casefold_image("", &names(1));
    debugfs(&image.path, "write /dev/null plain");
    debugfs(
        &image.path,
        &format!("sif plain flags {CASEFOLD_DIR_FLAGS:#x}"),
    );
    let codes = assert_exit(&image.path, "the flag on a file", 4);
    assert!(codes.contains(&PR_1_CASEFOLD_NONDIR), "{codes:?}");
    let image = make_empty_image(&["-t", "ext4"], 8);
    debugfs(&image.path, &format!("mkdir {DIR}"));
    debugfs(
        &image.path,
        &format!("sif {DIR} flags {CASEFOLD_DIR_FLAGS:#x}"),
    );
    let codes = assert_exit(&image.path, "the flag without the feature", 4);
    assert!(codes.contains(&PR_1_CASEFOLD_FEATURE), "{codes:?}");
}

/// e2fsck stops on an encoding it does not know, with errors (exit 12).
#[test]
fn unknown_encoding_stops_the_check() {
    let image = casefold_image("", &names(1));
    debugfs(&image.path, "ssv encoding 2");
    let codes = assert_exit(&image.path, "encoding 2", 12);
    assert!(
        codes.contains(&ProblemCode::E2FSCK_UNSUPPORTED_ENCODING),
        "{codes:?}"
    );
}

/// Random bit flips in the casefolded directory's index and leaves: the same verdict as
/// e2fsck, no panic, no hang.
#[test]
fn random_flips_in_a_casefolded_htree() {
    let image = casefold_image("", &names(300));
    let damaged = assert_random_flips_agree(&image.path, &[DIR], 0, 40, 27);
    assert!(damaged > 0, "no round damaged anything");
}
