//! The layout of an xattr block, against `e2fsck -fn` (`check_ext_attr`): its header
//! (`PR_1_BAD_EA_BLOCK` for the magic, `PR_1_EA_MULTI_BLOCK`), the region walk over its
//! entry records and values (`PR_1_EA_ALLOC_COLLISION`, `PR_1_EA_BAD_NAME`,
//! `PR_1_EA_BAD_VALUE`), the checksum asked about after them, the refcount that cannot
//! be fixed when the block does not read (`PR_1_EXTATTR_READ_ABORT`, fatal), and random
//! flips in the block. e2fsck declines each problem and goes on using the block, so it
//! stays claimed and counted in `i_blocks`.

mod common;

use std::path::Path;

use e4_fsck::ProblemCode;
use e4_testkit::{make_empty_image, Image, RawImage};

use common::flips::assert_flips_in_blocks_agree;
use common::{assert_agreement, debugfs, forced_check, inode_of, read_bytes, write_bytes};

/// A 1 KiB-block ext4 image (with or without metadata_csum) whose file `/f` has
/// `user.big` (700 bytes) and `user.wide` (100 bytes) in its xattr block; returns it and
/// the block's byte offset in the image. The records are at 32 (`big`) and 52 (`wide`),
/// the values fill the block from 224.
fn image(csum: bool) -> (Image, u64) {
    let features = if csum {
        "metadata_csum"
    } else {
        "^metadata_csum"
    };
    let image = make_empty_image(&["-t", "ext4", "-b", "1024", "-O", features], 8);
    let host = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: Vec<u8>| {
        let path = host.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let small = write("small", b"hi\n".to_vec());
    let big = write("big", vec![b'b'; 700]);
    let wide = write("wide", vec![b'w'; 100]);
    debugfs(&image.path, &format!("write {} f", small.display()));
    debugfs(
        &image.path,
        &format!("ea_set -f {} /f user.big", big.display()),
    );
    debugfs(
        &image.path,
        &format!("ea_set -f {} /f user.wide", wide.display()),
    );
    let raw = RawImage::read(&image.path).unwrap();
    let block = raw.inode(inode_of(&image.path, "/f")).unwrap().file_acl();
    let at = block * raw.block_size() as u64;
    assert_eq!(read_bytes(&image.path, at + BIG + 16, 3), b"big");
    assert_eq!(read_bytes(&image.path, at + WIDE + 16, 4), b"wide");
    (image, at)
}

/// Offsets in the block: the header's fields and the two entry records.
const H_MAGIC: u64 = 0;
const H_REFCOUNT: u64 = 4;
const H_BLOCKS: u64 = 8;
const BIG: u64 = 32;
const WIDE: u64 = 52;
/// Offsets in an entry record.
const E_NAME_LEN: u64 = 0;
const E_NAME_INDEX: u64 = 1;
const E_VALUE_OFFS: u64 = 2;
const E_VALUE_INUM: u64 = 4;

/// Damages the block of a fresh image with `edit` (given the image and the block's
/// offset), requires agreement and returns e4's codes and exit status.
fn damaged(what: &str, csum: bool, edit: impl FnOnce(&Path, u64)) -> (Vec<ProblemCode>, u8) {
    let (image, at) = image(csum);
    edit(&image.path, at);
    assert_agreement(&image.path, what);
    let report = forced_check(&image.path, None);
    (
        report.problems.iter().map(|p| p.code).collect(),
        report.exit_code(),
    )
}

fn set_u32(image: &Path, at: u64, value: u32) {
    write_bytes(image, at, &value.to_le_bytes());
}

#[test]
fn undamaged_block_is_clean() {
    assert_eq!(damaged("undamaged", false, |_, _| {}).0, []);
    assert_eq!(damaged("undamaged, metadata_csum", true, |_, _| {}).0, []);
}

/// A bad magic is reported, and the block is still used: claimed, counted in `i_blocks`
/// and its refcount compared (before, e4 dropped it and found both wrong).
#[test]
fn bad_magic_keeps_the_block() {
    let (codes, _) = damaged("h_magic changed", false, |img, at| {
        set_u32(img, at + H_MAGIC, 0x1234_5678)
    });
    assert_eq!(codes, [ProblemCode::PR_1_BAD_EA_BLOCK]);
}

/// libext2fs reads the first version's magic, so it also finds the checksum wrong;
/// a magic it does not read hides the checksum.
#[test]
fn first_version_magic_and_the_checksum() {
    let (codes, _) = damaged("h_magic of version 1", true, |img, at| {
        set_u32(img, at + H_MAGIC, 0xEA01_0000)
    });
    assert_eq!(
        codes,
        [
            ProblemCode::PR_1_BAD_EA_BLOCK,
            ProblemCode::PR_1_EA_BLOCK_ONLY_CSUM_INVALID
        ]
    );
    let (codes, _) = damaged("h_magic changed, metadata_csum", true, |img, at| {
        set_u32(img, at + H_MAGIC, 0x1234_5678)
    });
    assert_eq!(codes, [ProblemCode::PR_1_BAD_EA_BLOCK]);
}

#[test]
fn h_blocks_other_than_one() {
    let (codes, _) = damaged("h_blocks 2", false, |img, at| {
        set_u32(img, at + H_BLOCKS, 2)
    });
    assert_eq!(codes, [ProblemCode::PR_1_EA_MULTI_BLOCK]);
}

/// Name index 0 ends the walk at its entry, whose record then collides with the end
/// of the list e2fsck takes there; the checksum is still asked about.
#[test]
fn entry_with_name_index_zero() {
    let (codes, _) = damaged("user.wide's name index 0", true, |img, at| {
        write_bytes(img, at + WIDE + E_NAME_INDEX, &[0])
    });
    assert_eq!(
        codes,
        [
            ProblemCode::PR_1_EA_BLOCK_ONLY_CSUM_INVALID,
            ProblemCode::PR_1_EA_ALLOC_COLLISION,
            ProblemCode::PR_1_EA_BAD_NAME,
        ]
    );
}

#[test]
fn value_past_the_block() {
    let (codes, _) = damaged("user.wide's value at 1000", false, |img, at| {
        write_bytes(img, at + WIDE + E_VALUE_OFFS, &1000u16.to_le_bytes())
    });
    assert_eq!(
        codes,
        [
            ProblemCode::PR_1_EA_ALLOC_COLLISION,
            ProblemCode::PR_1_EA_BAD_VALUE
        ]
    );
}

/// A value moved into another collides, and its entry's hash is still checked (over
/// the bytes it now names).
#[test]
fn overlapping_values() {
    let (codes, _) = damaged(
        "user.wide's value moved onto user.big's",
        false,
        |img, at| write_bytes(img, at + WIDE + E_VALUE_OFFS, &330u16.to_le_bytes()),
    );
    assert_eq!(
        codes,
        [
            ProblemCode::PR_1_ATTR_HASH,
            ProblemCode::PR_1_EA_ALLOC_COLLISION
        ]
    );
}

/// A name 250 bytes long: its record swallows the values' start, so its value
/// collides, its hash fails, and the next record, read inside the value, runs into
/// `user.big`'s value. e2fsck prints both collisions, and so does e4.
#[test]
fn record_over_the_values() {
    let (codes, _) = damaged("user.wide's name length 250", false, |img, at| {
        write_bytes(img, at + WIDE + E_NAME_LEN, &[250])
    });
    assert_eq!(
        codes,
        [
            ProblemCode::PR_1_ATTR_HASH,
            ProblemCode::PR_1_EA_ALLOC_COLLISION,
            ProblemCode::PR_1_EA_ALLOC_COLLISION,
        ]
    );
}

/// A refcount to fix in a block e2fsck cannot read again (a bad magic, or a checksum
/// that fails) is fatal at the end of pass 1: exit 12 after the earlier error.
#[test]
fn refcount_of_a_block_that_does_not_read() {
    for (what, csum, magic) in [
        ("refcount 5 and a bad magic", false, 0x1234_5678),
        ("refcount 5, checksum now failing", true, 0xEA02_0000),
    ] {
        let (codes, exit) = damaged(what, csum, |img, at| {
            set_u32(img, at + H_MAGIC, magic);
            set_u32(img, at + H_REFCOUNT, 5);
        });
        assert!(
            codes.contains(&ProblemCode::PR_1_EXTATTR_READ_ABORT),
            "{what}: {codes:?}"
        );
        assert!(
            !codes.contains(&ProblemCode::PR_1_EXTATTR_REFCOUNT),
            "{what}"
        );
        assert_eq!(exit, 12, "{what}");
    }
    let (codes, exit) = damaged("refcount 5", false, |img, at| {
        set_u32(img, at + H_REFCOUNT, 5)
    });
    assert_eq!(codes, [ProblemCode::PR_1_EXTATTR_REFCOUNT]);
    assert_eq!(exit, 4);
}

/// An entry naming, as its value, an inode never written (all zeros): its checksum is
/// not looked at (libext2fs calls a blank inode's checksum valid), so the reference is
/// only a bad one, not a fatal read. Found by the random flips below.
#[test]
fn value_inode_never_written() {
    let (codes, exit) = damaged("user.wide's value in inode 64", true, |img, at| {
        set_u32(img, at + WIDE + E_VALUE_INUM, 64)
    });
    assert_eq!(
        codes,
        [
            ProblemCode::PR_1_EA_BLOCK_ONLY_CSUM_INVALID,
            ProblemCode::PR_1_ATTR_VALUE_EA_INODE
        ]
    );
    assert_eq!(exit, 4);
}

/// Random flips in the block, with and without metadata_csum: the verdicts agree.
#[test]
fn random_flips_in_the_xattr_block() {
    for (csum, seed) in [(false, 21), (true, 22)] {
        let (image, at) = image(csum);
        let block = at / 1024;
        assert_flips_in_blocks_agree(&image.path, &[block], 40, seed);
    }
}
