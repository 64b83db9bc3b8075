//! encrypt with casefold (issue 24) against `e2fsck -fn`. Such a directory's names are
//! ciphertext, placed in its htree by SipHash keyed from the encryption key, so the
//! kernel keeps each name's hashes after it (`EXT4_DIRENT_HASHES`, 8 bytes counted in
//! `rec_len`) for readers without the key, e2fsck among them; `.` and `..` have none.
//!
//! The kernel here has no `CONFIG_UNICODE`, so it cannot mount a casefold image: the
//! directory is written with the kernel's rules instead. debugfs makes the files (with
//! their contexts) in a plain directory given spare blocks; the directory's entries are
//! then laid out again with the hash pair after each name (`ext4_insert_dentry`: a
//! SipHash-2-4 of the name, the high half with its low bit cleared as the major hash,
//! the low half as the minor one), the directory made encrypted and casefolded, and
//! `e2fsck -fyD` indexes it, which orders the names by their stored hashes and names
//! SipHash (6) in the root, as the kernel's `make_indexed_dir` does. Both checkers must
//! find the linear and the indexed directory clean, and give the same exit status and
//! classes for each damage.

mod common;

use std::path::Path;

use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::{encode_entry, EntryHashes};
use e4_format::dir_htree::DxNode;
use e4_format::MetadataBlock;
use e4_fsck::ProblemCode;
use e4_testkit::{Image, RawImage};

use common::flips::assert_random_flips_agree;
use common::fscrypt::{edit_inode, encrypted_tree_image, CASEFOLD_FL, DIR, ENCRYPT_FL, EXTENTS_FL};
use common::{assert_exit, bmap, edit_dir_block, inode_of, inode_offset, write_bytes};

/// `EXT4_INDEX_FL`.
const INDEX_FL: u32 = 0x1000;
/// Offset of `dx_root_info.hash_version` in an htree root block.
const ROOT_HASH_VERSION: usize = 28;

/// The image of the tests: the directory encrypted and casefolded under `encoding_flags`.
fn encrypted_casefolded_image(encoding_flags: &str, indexed: bool) -> Image {
    encrypted_tree_image(Some(encoding_flags), indexed)
}

/// Applies `edit` to block 0 of `/e` (the htree root) and seals its checksum again.
fn edit_root(image: &Path, edit: impl FnOnce(&mut [u8])) {
    let dir = inode_of(image, DIR);
    let physical = bmap(image, DIR, 0);
    let raw = RawImage::read(image).unwrap();
    let bs = raw.block_size();
    let mut block = raw.block(physical).unwrap().to_vec();
    edit(&mut block);
    let sb = raw.superblock();
    let generation = raw.inode(dir).unwrap().record.generation;
    DxNode::seal(&mut block, inode_csum_seed(sb.csum_seed(), dir, generation));
    write_bytes(image, physical * bs as u64, &block);
}

/// Sets `/e`'s inode flags to `flags`, its checksum sealed again.
fn set_dir_flags(image: &Path, flags: u32) {
    let dir = inode_of(image, DIR);
    edit_inode(image, dir, |record| {
        record[0x20..0x24].copy_from_slice(&flags.to_le_bytes())
    });
}

#[test]
fn encrypted_casefolded_directories_are_clean() {
    for (flags, indexed) in [("", false), ("", true), (",encoding_flags=strict", true)] {
        let image = encrypted_casefolded_image(flags, indexed);
        let what = format!("encoding{flags}, indexed: {indexed}");
        let raw = RawImage::read(&image.path).unwrap();
        let root = raw.block(bmap(&image.path, DIR, 0)).unwrap();
        let dir = raw.inode(inode_of(&image.path, DIR)).unwrap();
        assert_eq!(dir.record.flags & INDEX_FL != 0, indexed, "{what}");
        if indexed {
            assert_eq!(root[ROOT_HASH_VERSION], 6, "{what}: the root names SipHash");
        }
        assert!(assert_exit(&image.path, &what, 0).is_empty(), "{what}");
    }
}

#[test]
fn encrypted_casefold_damage_agrees() {
    type Damage = (&'static str, fn(&Path), i32, Option<ProblemCode>);
    let damages: [Damage; 8] = [
        (
            "a stored hash above its leaf's range",
            |image| {
                edit_dir_block(image, DIR, 1, |block| {
                    let at = nth_entry_in(block, 1);
                    let name_len = usize::from(block[at + 6]);
                    EntryHashes {
                        hash: 0xffff_fff0,
                        minor_hash: 0,
                    }
                    .write(&mut block[at..], name_len);
                })
            },
            4,
            Some(ProblemCode::PR_2_HTREE_MAX_HASH),
        ),
        (
            "a stored hash below its leaf's range",
            |image| {
                edit_dir_block(image, DIR, 3, |block| {
                    let name_len = usize::from(block[6]);
                    EntryHashes {
                        hash: 2,
                        minor_hash: 0,
                    }
                    .write(block, name_len);
                })
            },
            4,
            Some(ProblemCode::PR_2_HTREE_MIN_HASH),
        ),
        (
            "the root naming half-MD4",
            |image| edit_root(image, |block| block[ROOT_HASH_VERSION] = 1),
            4,
            Some(ProblemCode::PR_1_HTREE_NEEDS_SIPHASH),
        ),
        (
            "the casefold flag cleared",
            |image| set_dir_flags(image, ENCRYPT_FL | INDEX_FL | EXTENTS_FL),
            4,
            Some(ProblemCode::PR_1_HTREE_CANNOT_SIPHASH),
        ),
        (
            "the encrypt flag cleared",
            |image| set_dir_flags(image, CASEFOLD_FL | INDEX_FL | EXTENTS_FL),
            4,
            Some(ProblemCode::PR_1_HTREE_CANNOT_SIPHASH),
        ),
        (
            "an entry's rec_len without room for its hashes",
            |image| {
                // 40 bytes hold the 32-byte name (enough without hashes), not its
                // hashes: e2fsck stops at this first entry, so what follows is moot.
                edit_dir_block(image, DIR, 2, |block| {
                    block[4..6].copy_from_slice(&40u16.to_le_bytes())
                })
            },
            12,
            Some(ProblemCode::PR_2_DIR_CORRUPTED),
        ),
        (
            "an unused entry whose name and hashes outgrow its rec_len",
            |image| {
                // A 40-byte name and its hashes need 56 bytes of the 48.
                edit_dir_block(image, DIR, 2, |block| {
                    block[..4].fill(0);
                    block[6] = 40;
                })
            },
            12,
            Some(ProblemCode::PR_2_DIR_CORRUPTED),
        ),
        (
            "an unused entry shorter than the smallest with hashes",
            |image| {
                // 16 bytes hold an empty name's header and hashes, but every entry but
                // `.` and `..` takes at least the 20 of a one-byte name's.
                edit_dir_block(image, DIR, 2, |block| {
                    encode_entry(block, 0, 16, 0, b"");
                    encode_entry(&mut block[16..], 0, 32, 0, b"");
                })
            },
            12,
            Some(ProblemCode::PR_2_DIR_CORRUPTED),
        ),
    ];
    let pristine = encrypted_casefolded_image("", true);
    let scratch = tempfile::tempdir().unwrap();
    for (what, damage, status, code) in damages {
        let path = scratch.path().join("damaged.img");
        std::fs::copy(&pristine.path, &path).unwrap();
        damage(&path);
        let codes = assert_exit(&path, what, status);
        if let Some(code) = code {
            assert!(codes.contains(&code), "{what}: {codes:?}");
        }
    }
}

/// Duplicate names, as e2fsck finds them in an encrypted and casefolded directory: pass
/// 2 compares a block's names (ciphertext here) folded under strict mode, as bytes
/// without it, and the rehash that follows a duplicate (pass 3A) compares them folded in
/// either mode, which makes the error; a name that does not fold (not UTF-8, or starting
/// with a continuation byte) equals none when folded. Two entries of one leaf are given
/// names (the stored hashes stay theirs, as ciphertext names hash by their key).
#[test]
fn duplicate_names_agree() {
    use ProblemCode::{PR_2_DUPLICATE_DIRENT as DUPLICATE, PR_2_REPORT_DUP_DIRENT as REPORT};
    /// The edit of the two names, and (exit status, e4's code) without and with strict
    /// mode.
    type Case = (
        &'static str,
        fn(&mut [u8], &mut [u8]),
        [(i32, Option<ProblemCode>); 2],
    );
    let cases: [Case; 5] = [
        (
            "the same bytes",
            |a, b| b.copy_from_slice(a),
            [(4, Some(DUPLICATE)), (4, Some(DUPLICATE))],
        ),
        (
            "names differing in case",
            |a, b| {
                b.copy_from_slice(a);
                b[0] = b.to_ascii_lowercase()[0];
            },
            [(0, None), (4, Some(DUPLICATE))],
        ),
        (
            "the same bytes, not UTF-8",
            |a, b| {
                a[5] = 0xFF;
                b.copy_from_slice(a);
            },
            [(0, Some(REPORT)), (0, None)],
        ),
        (
            "the same bytes, starting with a continuation byte",
            |a, b| {
                a[0] = 0x85;
                b.copy_from_slice(a);
            },
            [(0, Some(REPORT)), (0, None)],
        ),
        (
            "names not UTF-8 differing in case",
            |a, b| {
                a[5] = 0xFF;
                b.copy_from_slice(a);
                b[0] = b.to_ascii_lowercase()[0];
            },
            [(0, None), (0, None)],
        ),
    ];
    let scratch = tempfile::tempdir().unwrap();
    for (mode, flags) in ["", ",encoding_flags=strict"].into_iter().enumerate() {
        let pristine = encrypted_casefolded_image(flags, true);
        for (what, edit, expected) in cases {
            let what = format!("{what}, encoding{flags}");
            let path = scratch.path().join("damaged.img");
            std::fs::copy(&pristine.path, &path).unwrap();
            edit_dir_block(&path, DIR, 1, |block| {
                let (first, second) = (nth_entry_in(block, 1), nth_entry_in(block, 2));
                let len = usize::from(block[first + 6]);
                assert_eq!(len, usize::from(block[second + 6]));
                let (head, tail) = block.split_at_mut(second + 8);
                edit(&mut head[first + 8..first + 8 + len], &mut tail[..len]);
            });
            let (status, code) = expected[mode];
            let codes = assert_exit(&path, &what, status);
            let duplicates: Vec<ProblemCode> = codes
                .into_iter()
                .filter(|c| [DUPLICATE, REPORT].contains(c))
                .collect();
            assert_eq!(duplicates, Vec::from_iter(code), "{what}");
        }
    }
}

/// Byte offset, in `block`, of its `n`th entry (counting from 0).
fn nth_entry_in(block: &[u8], n: usize) -> usize {
    let mut at = 0;
    for _ in 0..n {
        at += usize::from(u16::from_le_bytes([block[at + 4], block[at + 5]]));
    }
    at
}

/// Random bit flips in the inode table and the directory's blocks: the same verdict as
/// e2fsck, no panic, no hang.
#[test]
fn random_flips_in_an_encrypted_casefolded_tree() {
    let image = encrypted_casefolded_image("", true);
    let table = inode_offset(&image.path, 12) / 1024;
    let table_blocks = usize::try_from(table + 2).unwrap();
    let damaged = assert_random_flips_agree(&image.path, &[DIR], table_blocks, 40, 29);
    assert!(damaged > 0, "no round damaged anything");
}
