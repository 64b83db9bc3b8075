//! Multiple-mount protection (the mmp feature), against `e2fsck -fn`: the MMP block
//! counted as in use, its place, magic and checksum (`PR_0_MMP_INVALID_BLK`,
//! `PR_0_MMP_INVALID_MAGIC`, `PR_0_MMP_CSUM_INVALID`), and its sequence (a checker's
//! mark or an unknown value). e2fsck stops on these (exit 12),
//! so its classes must be a subset of e4's, which goes on; a file given the MMP block
//! makes it claimed twice.

mod common;

use std::path::Path;

use e4_format::mmp::{MMP_SEQ_CLEAN, MMP_SEQ_FSCK, MMP_SEQ_MAX};
use e4_fsck::{ProblemClass, ProblemCode};
use e4_testkit::{make_empty_image, RawImage};

use common::flips::assert_flips_in_blocks_agree;
use common::{assert_agreement, forced_check, inode_offset, read_bytes, write_bytes};

/// A fresh 1 KiB-block ext4 image with mmp and one file, `/f` (inode 12), made by mke2fs
/// from a host directory: opening an mmp image read-write (debugfs -w) waits out the MMP
/// interval, eleven seconds, so every damage here is written as bytes. `extra` goes to
/// mke2fs's `-O`.
fn mmp_image(extra: &str) -> e4_testkit::Image {
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("f"), vec![b'f'; 3000]).unwrap();
    let features = format!("mmp{extra}");
    let dir = host.path().display().to_string();
    make_empty_image(
        &["-t", "ext4", "-b", "1024", "-O", &features, "-d", &dir],
        8,
    )
}

fn mmp_offset(image: &Path) -> u64 {
    let raw = RawImage::read(image).unwrap();
    raw.superblock().mmp_block * raw.block_size() as u64
}

/// Applies `damage`, requires agreement, and returns e4's codes.
fn damaged(what: &str, extra: &str, damage: impl FnOnce(&Path)) -> Vec<ProblemCode> {
    let image = mmp_image(extra);
    damage(&image.path);
    assert_agreement(&image.path, what);
    forced_check(&image.path, None)
        .problems
        .iter()
        .map(|p| p.code)
        .collect()
}

#[test]
fn mmp_block_is_in_use() {
    let image = mmp_image("");
    let classes = assert_agreement(&image.path, "undamaged mmp image");
    assert!(classes.is_empty(), "{classes:?}");
}

#[test]
fn mmp_magic() {
    let codes = damaged("MMP magic zeroed", "", |img| {
        write_bytes(img, mmp_offset(img), &[0; 4]);
    });
    assert_eq!(codes, [ProblemCode::PR_0_MMP_INVALID_MAGIC]);
}

#[test]
fn mmp_checksum() {
    let codes = damaged("MMP node name changed", "", |img| {
        let at = mmp_offset(img) + 20;
        let byte = read_bytes(img, at, 1)[0];
        write_bytes(img, at, &[byte ^ 1]);
    });
    assert_eq!(codes, [ProblemCode::PR_0_MMP_CSUM_INVALID]);
}

/// Writes `seq` into the MMP block's `mmp_seq` and seals its checksum again (under
/// metadata_csum, through e4-format), so that only the sequence is left to find.
fn set_sequence(image: &Path, seq: u32) {
    use e4_format::mmp::MmpBlock;
    use e4_format::MetadataBlock;
    let raw = RawImage::read(image).unwrap();
    let sb = raw.superblock();
    let mut block = raw.block(sb.mmp_block).unwrap().to_vec();
    block[MMP_SEQ..MMP_SEQ + 4].copy_from_slice(&seq.to_le_bytes());
    if sb.has_metadata_csum() {
        MmpBlock::seal(&mut block, sb.csum_seed());
    }
    write_bytes(image, mmp_offset(image), &block);
}

/// A checker's mark (`EXT4_MMP_SEQ_FSCK`): e2fsck stops ("e2fsck being run", exit 12).
#[test]
fn mmp_sequence_of_a_running_check() {
    let codes = damaged("MMP sequence EXT4_MMP_SEQ_FSCK", "", |img| {
        set_sequence(img, MMP_SEQ_FSCK);
    });
    assert_eq!(codes, [ProblemCode::EXT2_ET_MMP_FSCK_ON]);
}

/// A sequence above `EXT4_MMP_SEQ_MAX` that is neither mark: e2fsck stops ("undergoing
/// an unknown operation", exit 12). The sequence just above the checker's mark, and
/// the one just below the clean mark.
#[test]
fn mmp_sequence_unknown() {
    for seq in [MMP_SEQ_FSCK + 1, MMP_SEQ_CLEAN - 1] {
        let codes = damaged(&format!("MMP sequence {seq:#x}"), "", |img| {
            set_sequence(img, seq);
        });
        assert_eq!(codes, [ProblemCode::EXT2_ET_MMP_UNKNOWN_SEQ], "{seq:#x}");
    }
}

/// A mounted node's sequence, up to `EXT4_MMP_SEQ_MAX`: `e2fsck -n` does not wait for
/// it (the wait is for a read-write open) and finds the filesystem clean.
#[test]
fn mmp_sequence_of_a_mounted_node() {
    for seq in [1, MMP_SEQ_MAX] {
        let codes = damaged(&format!("MMP sequence {seq:#x}"), "", |img| {
            set_sequence(img, seq);
        });
        assert!(codes.is_empty(), "{seq:#x}: {codes:?}");
    }
}

/// `s_mmp_block` 0 (without metadata_csum, so the superblock needs no new checksum):
/// the MMP block is then no block, and the old one unused (e4 goes on to pass 5, so
/// reports the bitmap difference too).
#[test]
fn mmp_block_number() {
    let codes = damaged("MMP block 0", ",^metadata_csum", |img| {
        write_bytes(img, SUPERBLOCK_OFFSET + S_MMP_BLOCK, &[0; 8]);
    });
    assert!(
        codes.contains(&ProblemCode::PR_0_MMP_INVALID_BLK),
        "{codes:?}"
    );
}

/// `/f`'s one extent moved onto the MMP block (without metadata_csum, so the inode
/// needs no new checksum): the block is claimed twice.
#[test]
fn file_extent_on_the_mmp_block() {
    let image = mmp_image(",^metadata_csum");
    let raw = RawImage::read(&image.path).unwrap();
    let mmp = raw.superblock().mmp_block;
    assert_eq!(raw.inode(FILE_INO).unwrap().size(), 3000, "inode 12 is /f");
    // `ee_start_lo` of the first extent in `i_block`.
    let start_lo = inode_offset(&image.path, FILE_INO) + I_BLOCK + 12 + 8;
    write_bytes(&image.path, start_lo, &(mmp as u32).to_le_bytes());
    let classes = assert_agreement(&image.path, "a file's extent moved onto the MMP block");
    assert!(
        classes.contains(&ProblemClass::MultiplyClaimed),
        "{classes:?}"
    );
}

/// Random bit flips in the MMP block, with and without metadata_csum, must give e2fsck's
/// verdict, and neither panic nor hang.
#[test]
fn random_flips_in_the_mmp_block() {
    for (extra, seed) in [("", 7), (",^metadata_csum", 8)] {
        let image = mmp_image(extra);
        let mmp = RawImage::read(&image.path).unwrap().superblock().mmp_block;
        assert_flips_in_blocks_agree(&image.path, &[mmp], 30, seed);
    }
}

/// Where the superblock starts, and `s_mmp_block` in it.
const SUPERBLOCK_OFFSET: u64 = 1024;
const S_MMP_BLOCK: u64 = 0x168;
/// The file mke2fs copies in first.
const FILE_INO: u32 = 12;
/// `mmp_seq` in the MMP block.
const MMP_SEQ: usize = 4;
/// `i_block` in an inode.
const I_BLOCK: u64 = 0x28;
