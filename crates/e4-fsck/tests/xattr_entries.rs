//! Xattr entries, against `e2fsck -fn`: hashes (`PR_1_ATTR_HASH`), an entry in an xattr
//! block or in an inode whose `e_hash` does not match its name and value (e2fsck 1.47.0
//! accepts the hash computed with the name's bytes unsigned or signed, as kernels before
//! 6.2 wrote it, and 0 in an inode; it does not check the block's own `h_hash`), and the
//! layout of the attributes in an inode (`PR_1_ATTR_NAME_LEN`, `PR_1_ATTR_VALUE_SIZE`,
//! `PR_1_INODE_EA_ALLOC_COLLISION`). Hashes of values held in inodes are in
//! `ea_inode.rs`.

mod common;

use std::path::Path;

use e4_format::xattr::{xattr_entry_hash, xattr_entry_hash_signed};
use e4_fsck::ProblemCode;
use e4_testkit::{make_empty_image, Image, RawImage};

use common::{assert_agreement, debugfs, forced_check, inode_of, read_bytes, write_bytes};

/// Names with bytes above 0x7F (é in UTF-8), whose signed and unsigned hashes differ:
/// one held in the inode, one in the block.
const HIGH_NAME: &[u8] = "h\u{e9}z".as_bytes();
const HIGH_BLOCK_NAME: &[u8] = "x\u{e9}".as_bytes();
/// The value of `user.x\u{e9}`: too big for what the inode has left.
const WIDE_VALUE: &[u8] = &[b'w'; 100];

/// A 1 KiB-block ext4 image without metadata_csum (so bytes can be changed without
/// sealing) whose file `/f` has `user.a` = "hello" and `user.h\u{e9}z` = "vv" in its
/// inode (debugfs stores hash 0 there) and `user.big` (700 bytes) and `user.x\u{e9}` (100
/// bytes) in its xattr block.
fn image() -> Image {
    let image = make_empty_image(&["-t", "ext4", "-b", "1024", "-O", "^metadata_csum"], 8);
    let host = tempfile::tempdir().unwrap();
    let small = host.path().join("small");
    let big = host.path().join("big");
    std::fs::write(&small, b"hi\n").unwrap();
    std::fs::write(&big, vec![b'b'; 700]).unwrap();
    debugfs(&image.path, &format!("write {} f", small.display()));
    debugfs(&image.path, "ea_set /f user.a hello");
    debugfs(&image.path, "ea_set /f user.h\u{e9}z vv");
    debugfs(
        &image.path,
        &format!("ea_set -f {} /f user.big", big.display()),
    );
    let wide = host.path().join("wide");
    std::fs::write(&wide, WIDE_VALUE).unwrap();
    debugfs(
        &image.path,
        &format!("ea_set -f {} /f user.x\u{e9}", wide.display()),
    );
    image
}

/// Where each entry of `/f` keeps its `e_hash`, by the entry's stored name: in the
/// inode's area or in its xattr block.
struct Entries {
    in_inode: Vec<(Vec<u8>, u64)>,
    in_block: Vec<(Vec<u8>, u64)>,
}

fn entries(image: &Path) -> Entries {
    let raw = RawImage::read(image).unwrap();
    let ino = inode_of(image, "/f");
    let inode = raw.inode(ino).unwrap();
    let area = raw.inode_offset(ino).unwrap() + 128 + u64::from(inode.record.extra_isize);
    let block = inode.file_acl() * raw.block_size() as u64;
    Entries {
        in_inode: walk(image, area + 4),
        in_block: walk(image, block + 32),
    }
}

/// The entries from byte `first` of the image to the four zero bytes that end them.
fn walk(image: &Path, first: u64) -> Vec<(Vec<u8>, u64)> {
    let mut out = Vec::new();
    let mut at = first;
    loop {
        let record = read_bytes(image, at, 16);
        if record[..4] == [0; 4] {
            return out;
        }
        let name_len = u64::from(record[0]);
        out.push((read_bytes(image, at + 16, name_len as usize), at + 12));
        at += (16 + name_len + 3) & !3;
    }
}

fn hash_offset(list: &[(Vec<u8>, u64)], name: &[u8]) -> u64 {
    list.iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no entry {:?}", String::from_utf8_lossy(name)))
        .1
}

fn set_hash(image: &Path, at: u64, hash: u32) {
    write_bytes(image, at, &hash.to_le_bytes());
}

fn codes(image: &Path) -> Vec<ProblemCode> {
    forced_check(image, None)
        .problems
        .iter()
        .map(|p| p.code)
        .collect()
}

/// Changes hashes with `edit`, requires agreement and returns e4's codes.
fn damaged(what: &str, edit: impl FnOnce(&Path, &Entries)) -> Vec<ProblemCode> {
    let image = image();
    let entries = entries(&image.path);
    edit(&image.path, &entries);
    assert_agreement(&image.path, what);
    codes(&image.path)
}

#[test]
fn undamaged_hashes_are_clean() {
    assert_eq!(damaged("undamaged", |_, _| {}), []);
}

#[test]
fn block_entry_with_a_wrong_hash() {
    let codes = damaged("user.big's hash changed", |img, e| {
        let at = hash_offset(&e.in_block, b"big");
        let hash = u32::from_le_bytes(read_bytes(img, at, 4).try_into().unwrap());
        set_hash(img, at, hash ^ 1);
    });
    assert_eq!(codes, [ProblemCode::PR_1_ATTR_HASH]);
}

/// Every entry of a block is checked: two wrong hashes, two reports.
#[test]
fn two_block_entries_with_wrong_hashes() {
    let codes = damaged("two block hashes 1", |img, e| {
        set_hash(img, hash_offset(&e.in_block, b"big"), 1);
        set_hash(img, hash_offset(&e.in_block, HIGH_BLOCK_NAME), 1);
    });
    assert_eq!(codes, [ProblemCode::PR_1_ATTR_HASH; 2]);
}

/// The signed form an older kernel wrote is accepted, in a block and in an inode.
#[test]
fn signed_hashes_are_accepted() {
    let codes = damaged("signed hashes", |img, e| {
        let name = HIGH_BLOCK_NAME;
        let signed = xattr_entry_hash_signed(name, WIDE_VALUE);
        assert_ne!(signed, xattr_entry_hash(name, WIDE_VALUE));
        set_hash(img, hash_offset(&e.in_block, name), signed);
        let signed = xattr_entry_hash_signed(HIGH_NAME, b"vv");
        set_hash(img, hash_offset(&e.in_inode, HIGH_NAME), signed);
    });
    assert_eq!(codes, []);
}

/// A hash in an inode is checked when it is not 0; the loop stops at the first bad
/// one, so a second is not reported.
#[test]
fn inode_entries_with_wrong_hashes() {
    let codes = damaged("in-inode hashes 7", |img, e| {
        set_hash(img, hash_offset(&e.in_inode, b"a"), 7);
        set_hash(img, hash_offset(&e.in_inode, HIGH_NAME), 7);
    });
    assert_eq!(codes, [ProblemCode::PR_1_ATTR_HASH]);
}

/// The right hash stored in an inode is as good as 0.
#[test]
fn inode_entry_with_its_hash() {
    let codes = damaged("in-inode hash stored", |img, e| {
        set_hash(
            img,
            hash_offset(&e.in_inode, b"a"),
            xattr_entry_hash(b"a", b"hello"),
        );
    });
    assert_eq!(codes, []);
}

/// The block's own hash is not checked by e2fsck.
#[test]
fn block_hash_is_not_checked() {
    let codes = damaged("h_hash changed", |img, e| {
        let header = hash_offset(&e.in_block, b"big") - 12;
        let block_start = header - (header % 1024);
        set_hash(img, block_start + 12, 5);
    });
    assert_eq!(codes, []);
}

/// Adds `delta` to the little-endian `u16` at `at`.
fn bump_u16(image: &Path, at: u64, delta: u16) {
    let word = u16::from_le_bytes(read_bytes(image, at, 2).try_into().unwrap());
    write_bytes(image, at, &word.wrapping_add(delta).to_le_bytes());
}

/// Offsets in an entry record, from its `e_hash` (at 12).
const E_NAME_LEN_FROM_HASH: u64 = 12;
const E_VALUE_OFFS_FROM_HASH: u64 = 10;
const E_VALUE_SIZE_FROM_HASH: u64 = 4;

#[test]
fn inode_entry_value_size_past_the_area() {
    let codes = damaged("user.a's e_value_size 200", |img, e| {
        let at = hash_offset(&e.in_inode, b"a") - E_VALUE_SIZE_FROM_HASH;
        write_bytes(img, at, &200u32.to_le_bytes());
    });
    assert_eq!(codes, [ProblemCode::PR_1_ATTR_VALUE_SIZE]);
}

/// A name running past the area: e2fsck takes the record's room (name included) before
/// it compares the name with what is left, so that is the collision it reports.
#[test]
fn inode_entry_name_past_the_area() {
    let codes = damaged("user.a's e_name_len 90", |img, e| {
        write_bytes(
            img,
            hash_offset(&e.in_inode, b"a") - E_NAME_LEN_FROM_HASH,
            &[90],
        );
    });
    assert_eq!(codes, [ProblemCode::PR_1_INODE_EA_ALLOC_COLLISION]);
}

/// The second value moved onto the first: an allocation collision.
#[test]
fn inode_entry_values_overlapping() {
    let codes = damaged("user.h\u{e9}z's value moved onto user.a's", |img, e| {
        let first = hash_offset(&e.in_inode, b"a") - E_VALUE_OFFS_FROM_HASH;
        let offs = read_bytes(img, first, 2);
        write_bytes(
            img,
            hash_offset(&e.in_inode, HIGH_NAME) - E_VALUE_OFFS_FROM_HASH,
            &offs,
        );
    });
    assert_eq!(codes, [ProblemCode::PR_1_INODE_EA_ALLOC_COLLISION]);
}

/// A bad hash on the first entry ends the walk before the second's bad layout.
#[test]
fn inode_walk_ends_at_the_first_problem() {
    let codes = damaged(
        "user.a's hash, then user.h\u{e9}z's value offset",
        |img, e| {
            set_hash(img, hash_offset(&e.in_inode, b"a"), 7);
            bump_u16(
                img,
                hash_offset(&e.in_inode, HIGH_NAME) - E_VALUE_OFFS_FROM_HASH,
                400,
            );
        },
    );
    assert_eq!(codes, [ProblemCode::PR_1_ATTR_HASH]);
}
