//! Xattr values held in inodes (the ea_inode feature), against `e2fsck -fn`: the value
//! inode's stored reference count (`PR_4_EA_INODE_REF_COUNT`), a value inode nothing
//! names any more (unattached), one that lost its `EXT4_EA_INODE_FL`
//! (`PR_1_ATTR_SET_EA_INODE_FL`, `PR_1_ATTR_NO_EA_INODE_FL`), the value's blocks
//! charged to the owner's `i_blocks`, and the entry's hash over the value inode's own
//! (`PR_1_ATTR_HASH`, an old Lustre-style reference, `PR_1_ATTR_VALUE_EA_INODE`).

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use e4_format::xattr::{decode_xattr_block, parse_inode_xattrs, XattrValue};
use e4_fsck::ProblemCode;
use e4_testkit::{make_empty_image, Image, RawImage};

use common::flips::assert_flips_in_blocks_agree;
use common::{assert_agreement, debugfs, forced_check, inode_of, problem_codes};

/// A 1 KiB-block ea_inode image whose file `/f` holds a 1,024-byte `user.big` in a value
/// inode (its number returned). debugfs does not charge the value's block to `/f`'s
/// `i_blocks` as the kernel does, so that is set by hand: the image is then clean.
fn image_with_a_value_inode() -> (Image, u32) {
    image_with_a_value_inode_named_from(&[], 4)
}

/// The same, with `extra_args` to mke2fs and `/f`'s `i_blocks` set to `i_blocks`.
fn image_with_a_value_inode_named_from(extra_args: &[&str], i_blocks: u32) -> (Image, u32) {
    let mut args = vec!["-t", "ext4", "-b", "1024", "-O", "ea_inode"];
    args.extend_from_slice(extra_args);
    let image = make_empty_image(&args, 8);
    let host = tempfile::tempdir().unwrap();
    let (small, big) = (host.path().join("small"), host.path().join("big"));
    std::fs::write(&small, b"hello world\n").unwrap();
    std::fs::write(&big, vec![b'v'; 1024]).unwrap();
    debugfs(&image.path, &format!("write {} /f", small.display()));
    debugfs(
        &image.path,
        &format!("ea_set -f {} /f user.big", big.display()),
    );
    debugfs(&image.path, &format!("sif /f blocks {i_blocks}"));
    let value = value_inode(&image.path, inode_of(&image.path, "/f"));
    (image, value)
}

/// The value inode named by `owner`'s attributes, in the inode or in its xattr block.
fn value_inode(image: &Path, owner: u32) -> u32 {
    let raw = RawImage::read(image).unwrap();
    let inode = raw.inode(owner).unwrap();
    let loc = e4_format::Location::Inode(owner);
    let mut xattrs = parse_inode_xattrs(&inode.xattr_area, loc).unwrap();
    if inode.file_acl() != 0 {
        let block = raw.block(inode.file_acl()).unwrap();
        xattrs.extend(decode_xattr_block(block, loc).unwrap().1);
    }
    xattrs
        .into_iter()
        .find_map(|x| match x.value {
            XattrValue::InInode { inode, .. } => Some(inode),
            XattrValue::Inline(_) => None,
        })
        .expect("user.big is held in an inode")
}

#[test]
fn value_inode_undamaged_is_clean() {
    let (image, _) = image_with_a_value_inode();
    let classes = assert_agreement(&image.path, "value inode");
    assert!(classes.is_empty(), "{classes:?}");
}

/// One entry names it; it says five.
#[test]
fn value_inode_ref_count() {
    let (image, value) = image_with_a_value_inode();
    debugfs(&image.path, &format!("sif <{value}> version 5"));
    assert_agreement(&image.path, "value inode storing 5 references");
    assert_eq!(
        problem_codes(&image.path),
        BTreeSet::from([ProblemCode::PR_4_EA_INODE_REF_COUNT])
    );
}

/// The owner cleared: nothing names the value inode.
#[test]
fn value_inode_of_a_cleared_owner_is_unattached() {
    let (image, value) = image_with_a_value_inode();
    debugfs(&image.path, "clri /f");
    assert_agreement(&image.path, "owner cleared");
    assert!(problem_codes(&image.path).contains(&ProblemCode::PR_4_UNATTACHED_INODE));
    let report = forced_check(&image.path, None);
    assert!(report
        .problems
        .iter()
        .any(|p| p.code == ProblemCode::PR_4_UNATTACHED_INODE
            && p.location == e4_fsck::problem::Location::Inode(value)));
}

/// The value inode without its flag: the entry is invalid, its block no longer charged
/// to the owner, and the inode, now a plain file, unattached.
#[test]
fn value_inode_without_its_flag() {
    let (image, value) = image_with_a_value_inode();
    debugfs(&image.path, &format!("sif <{value}> flags 0x80000"));
    assert_agreement(&image.path, "value inode without EA_INODE_FL");
    let codes = problem_codes(&image.path);
    for code in [
        ProblemCode::PR_1_ATTR_SET_EA_INODE_FL,
        ProblemCode::PR_1_ATTR_NO_EA_INODE_FL,
        ProblemCode::PR_1_BAD_I_BLOCKS,
        ProblemCode::PR_4_UNATTACHED_INODE,
    ] {
        assert!(codes.contains(&code), "{code} not in {codes:?}");
    }
}

/// 128-byte inodes: the entry is in `/f`'s xattr block, whose block and value block are
/// both charged to it (with its data block, 6 sectors).
#[test]
fn value_inode_named_from_an_xattr_block() {
    let (image, value) = image_with_a_value_inode_named_from(&["-I", "128"], 6);
    let classes = assert_agreement(&image.path, "value inode named from a block");
    assert!(classes.is_empty(), "{classes:?}");
    debugfs(&image.path, &format!("sif <{value}> version 3"));
    assert_agreement(&image.path, "value inode named from a block, storing 3");
    assert_eq!(
        problem_codes(&image.path),
        BTreeSet::from([ProblemCode::PR_4_EA_INODE_REF_COUNT])
    );
}

/// The value inode's own hash (`i_atime`) changed: the entry's hash, which covers it,
/// no longer matches (`PR_1_ATTR_HASH`), and its block is not charged to the owner.
#[test]
fn value_inode_entry_hash() {
    let (image, value) = image_with_a_value_inode();
    debugfs(&image.path, &format!("sif <{value}> atime 12345"));
    assert_agreement(&image.path, "value inode's hash changed");
    let codes = problem_codes(&image.path);
    assert_eq!(
        codes,
        BTreeSet::from([ProblemCode::PR_1_ATTR_HASH, ProblemCode::PR_1_BAD_I_BLOCKS])
    );
}

/// A hash that does not match, from an old Lustre-style value inode (its `i_mtime` the
/// owner's number, its generation the owner's): sound, but nothing is charged, so the
/// owner's `i_blocks` counts a block too many.
#[test]
fn value_inode_of_the_old_lustre_style() {
    let (image, value) = image_with_a_value_inode();
    let owner = inode_of(&image.path, "/f");
    for (inode, field, number) in [
        (format!("<{value}>"), "atime", 12345),
        (format!("<{value}>"), "mtime", owner),
        (format!("<{value}>"), "generation", 77),
        ("/f".to_string(), "generation", 77),
    ] {
        debugfs(&image.path, &format!("sif {inode} {field} {number}"));
    }
    assert_agreement(&image.path, "Lustre-style value inode");
    assert_eq!(
        problem_codes(&image.path),
        BTreeSet::from([ProblemCode::PR_1_BAD_I_BLOCKS])
    );
}

/// A hash that does not match, to an inode without the flag: a bad reference
/// (`PR_1_ATTR_VALUE_EA_INODE`), not a missing flag.
#[test]
fn value_inode_hash_and_flag_both_wrong() {
    let (image, value) = image_with_a_value_inode();
    debugfs(&image.path, &format!("sif <{value}> atime 12345"));
    debugfs(&image.path, &format!("sif <{value}> flags 0x80000"));
    assert_agreement(&image.path, "value inode's hash and flag");
    let codes = problem_codes(&image.path);
    assert!(
        codes.contains(&ProblemCode::PR_1_ATTR_VALUE_EA_INODE),
        "{codes:?}"
    );
    assert!(
        !codes.contains(&ProblemCode::PR_1_ATTR_SET_EA_INODE_FL),
        "{codes:?}"
    );
}

/// Random bit flips in the inode table blocks holding the owner and its value inode, and
/// in the value's block, must give e2fsck's verdict, and neither panic nor hang.
#[test]
fn random_flips_in_the_owner_and_its_value_inode() {
    let (image, value) = image_with_a_value_inode();
    let raw = RawImage::read(&image.path).unwrap();
    let bs = raw.block_size() as u64;
    let owner = inode_of(&image.path, "/f");
    let mut hot: Vec<u64> = [owner, value]
        .iter()
        .map(|&ino| raw.inode_offset(ino).unwrap() / bs)
        .collect();
    hot.extend(raw.file_block(value, 0).unwrap());
    assert_flips_in_blocks_agree(&image.path, &hot, 40, 13);
}

/// The value inode's checksum fails: e2fsck reads it on its own while checking the
/// owner's entry (`e2fsck_read_inode`), which is fatal (exit 8, with 4 added for an
/// error found before). Found by random flips. e4 gives the same exit status, reports
/// it at the owner, and the output is the same at 1 and 4 threads.
#[test]
fn value_inode_whose_checksum_fails() {
    let (image, value) = image_with_a_value_inode();
    let at = RawImage::read(&image.path)
        .unwrap()
        .inode_offset(value)
        .unwrap()
        + I_CHECKSUM_LO;
    let byte = common::read_bytes(&image.path, at, 1)[0];
    common::write_bytes(&image.path, at, &[byte ^ 1]);
    let e2fsck = std::process::Command::new(e4_testkit::tool("e2fsck"))
        .arg("-fn")
        .arg(&image.path)
        .output()
        .unwrap();
    assert_eq!(e2fsck.status.code(), Some(8), "{e2fsck:?}");
    let report = forced_check(&image.path, Some(4));
    assert_eq!(report.exit_code(), e4_fsck::report::EXIT_OPERATIONAL);
    let owner = inode_of(&image.path, "/f");
    assert!(report
        .problems
        .iter()
        .any(|p| p.code == ProblemCode::EXT2_ET_INODE_CSUM_INVALID
            && p.location == e4_fsck::problem::Location::Inode(owner)));
    let (_, four) = common::e4_verdict(&image.path, 4);
    let (_, one) = common::e4_verdict(&image.path, 1);
    assert_eq!(one, four);
}

/// `i_checksum_lo` in an inode (`l_i_checksum_lo`).
const I_CHECKSUM_LO: u64 = 0x7C;

/// An ea_inode image without metadata_csum whose `/f` has `user.a` = "hello" and then
/// `user.big` (1,024 bytes, in a value inode), in the inode (256-byte inodes) or in an
/// xattr block (128-byte inodes), `i_blocks` counting the value's block; returns it
/// and the byte offset of `user.a`'s entry record (the first).
fn value_after_a_small_entry(inode_size: &str) -> (Image, u64) {
    let image = make_empty_image(
        &[
            "-t",
            "ext4",
            "-b",
            "1024",
            "-I",
            inode_size,
            "-O",
            "ea_inode,^metadata_csum",
        ],
        8,
    );
    let host = tempfile::tempdir().unwrap();
    let (small, big) = (host.path().join("small"), host.path().join("big"));
    std::fs::write(&small, b"hi\n").unwrap();
    std::fs::write(&big, vec![b'v'; 1024]).unwrap();
    debugfs(&image.path, &format!("write {} /f", small.display()));
    debugfs(&image.path, "ea_set /f user.a hello");
    debugfs(
        &image.path,
        &format!("ea_set -f {} /f user.big", big.display()),
    );
    let owner = inode_of(&image.path, "/f");
    let raw = RawImage::read(&image.path).unwrap();
    let inode = raw.inode(owner).unwrap();
    // debugfs keeps the order of `ea_set` in an inode; a block sorts `a` before `big`.
    let first = if inode.file_acl() == 0 {
        raw.inode_offset(owner).unwrap() + 128 + u64::from(inode.record.extra_isize) + 4
    } else {
        inode.file_acl() * raw.block_size() as u64 + 32
    };
    assert_eq!(common::read_bytes(&image.path, first + 16, 1), b"a");
    debugfs(
        &image.path,
        &format!("sif /f blocks {}", inode.record.blocks_lo + 2),
    );
    assert_agreement(&image.path, "value after a small entry, undamaged");
    (image, first)
}

/// A value inode named by an entry after one whose layout is broken: e2fsck's layout
/// walk stops at the broken entry, but it counts the value inodes of every entry up to
/// the list's end (`inc_ea_inode_refs`), so the value inode is still referenced. In the
/// inode (`user.a`'s value moved onto its own record: a collision) and in an xattr
/// block (128-byte inodes; `user.a`'s name index 0). Before, e4 found it unattached.
#[test]
fn value_inode_named_after_a_broken_entry() {
    for (inode_size, what, code) in [
        (
            "256",
            "in the inode",
            ProblemCode::PR_1_INODE_EA_ALLOC_COLLISION,
        ),
        ("128", "in the block", ProblemCode::PR_1_EA_BAD_NAME),
    ] {
        let (image, first) = value_after_a_small_entry(inode_size);
        if inode_size == "256" {
            common::write_bytes(&image.path, first + 2, &0u16.to_le_bytes());
        } else {
            common::write_bytes(&image.path, first + 1, &[0]);
        }
        assert_agreement(
            &image.path,
            &format!("value inode named {what} after a broken entry"),
        );
        let codes = problem_codes(&image.path);
        assert!(codes.contains(&code), "{what}: {codes:?}");
        assert!(
            !codes.contains(&ProblemCode::PR_4_UNATTACHED_INODE),
            "{what}: {codes:?}"
        );
    }
}

/// An entry whose record runs past the end of the list names no value inode for
/// e2fsck's count (it wants the next record to start inside the list): its value inode
/// is unattached. Found by random flips in the area.
#[test]
fn value_inode_named_by_an_entry_past_the_end() {
    let (image, first) = value_after_a_small_entry("256");
    // `user.big`'s record follows `user.a`'s 20 bytes; a name of 131 bytes runs past
    // the 96-byte area.
    common::write_bytes(&image.path, first + 20, &[131]);
    assert_agreement(&image.path, "user.big's name length 131");
    let codes = problem_codes(&image.path);
    assert!(
        codes.contains(&ProblemCode::PR_1_INODE_EA_ALLOC_COLLISION),
        "{codes:?}"
    );
    assert!(
        codes.contains(&ProblemCode::PR_4_UNATTACHED_INODE),
        "{codes:?}"
    );
}
