//! The resize inode's contents (issue 9 §3), against `e2fsck -fn` (e2fsck's
//! `check_resize_inode`, super.c): its `i_block` words, mode and links, the double
//! indirect block's entries and the reserved descriptor blocks' lists of their copies; the
//! feature cleared under a live inode; `s_reserved_gdt_blocks` changed under it. Each
//! damage must give the same verdict and class set, and e4 its code. e2fsck -n exits 0
//! on the resize inode problems alone, so several of these are clean-with-a-report.

mod common;

use std::path::Path;

use e4_fsck::{ProblemClass, ProblemCode};
use e4_testkit::make_empty_image;

use common::{assert_agreement, debugfs, forced_check, read_bytes, write_bytes};

/// 1 KiB blocks, 64 MiB: eight groups, backups in groups 1, 3, 5 and 7, 256 reserved
/// descriptor blocks (3 to 258) after the one-block descriptor table.
const ARGS: &[&str] = &["-t", "ext4", "-b", "1024"];
const SIZE_MIB: u64 = 64;
const BLOCK: u64 = 1024;
/// The first reserved descriptor block.
const FIRST_RESERVED: u64 = 3;

/// The resize inode's double indirect block.
fn dind_block(image: &Path) -> u64 {
    let text = debugfs(image, "stat <7>");
    let rest = text
        .split("(DIND):")
        .nth(1)
        .expect("resize inode has a DIND block");
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Byte offset of the resize inode's record.
fn resize_inode_offset(image: &Path) -> u64 {
    e4_testkit::RawImage::read(image)
        .unwrap()
        .inode_offset(7)
        .unwrap()
}

/// `i_generation` in an inode.
const I_GENERATION: u64 = 0x64;

/// Adds one to the little-endian word at `offset`.
fn bump_word(image: &Path, offset: u64) {
    let word = u32::from_le_bytes(read_bytes(image, offset, 4).try_into().unwrap());
    write_bytes(image, offset, &(word + 1).to_le_bytes());
}

type Damage = fn(&Path);

/// Each damage, the exact class set both checkers must report (empty: nothing at all),
/// and the code e4 must report, if any.
const DAMAGES: &[(&str, Damage, &[ProblemClass], Option<ProblemCode>)] = &[
    (
        "first reserved block's copy list",
        |img| bump_word(img, FIRST_RESERVED * BLOCK),
        &[ProblemClass::ResizeInode],
        Some(ProblemCode::PR_0_RESIZE_INODE_INVALID),
    ),
    (
        "second copy named by the first reserved block",
        |img| bump_word(img, FIRST_RESERVED * BLOCK + 4),
        &[ProblemClass::ResizeInode],
        Some(ProblemCode::PR_0_RESIZE_INODE_INVALID),
    ),
    (
        "last reserved block e2fsck checks (number 63)",
        |img| bump_word(img, (FIRST_RESERVED + 63) * BLOCK),
        &[ProblemClass::ResizeInode],
        Some(ProblemCode::PR_0_RESIZE_INODE_INVALID),
    ),
    (
        // e2fsck checks the first s_reserved_gdt_blocks / 4 only.
        "first reserved block e2fsck does not check (number 64)",
        |img| bump_word(img, (FIRST_RESERVED + 64) * BLOCK),
        &[],
        None,
    ),
    (
        "double indirect entry of the first reserved block",
        |img| {
            // Entry desc_blocks (1) names block 3; make it name a free block instead
            // (not block 4, which entry 2 names: e4 walks a block named twice in one
            // map once, e2fsck twice, and their i_blocks would differ; see FSCK.md).
            let dind = dind_block(img);
            write_bytes(img, dind * BLOCK + 4, &9000u32.to_le_bytes());
        },
        &[ProblemClass::ResizeInode, ProblemClass::InodeBlocks],
        Some(ProblemCode::PR_0_RESIZE_INODE_INVALID),
    ),
    (
        "no links",
        |img| {
            debugfs(img, "sif <7> links_count 0");
        },
        &[ProblemClass::ResizeInode],
        Some(ProblemCode::PR_0_RESIZE_INODE_INVALID),
    ),
    (
        "a direct block",
        |img| {
            debugfs(img, "sif <7> block[0] 5000");
        },
        &[ProblemClass::ResizeInode, ProblemClass::InodeBlocks],
        Some(ProblemCode::PR_0_RESIZE_INODE_INVALID),
    ),
    (
        "no double indirect block",
        |img| {
            debugfs(img, "sif <7> block[DIND] 0");
        },
        &[
            ProblemClass::ResizeInode,
            ProblemClass::InodeBlocks,
            ProblemClass::BlockBitmap,
        ],
        Some(ProblemCode::PR_0_RESIZE_INODE_INVALID),
    ),
    (
        "double indirect block moved",
        |img| {
            debugfs(img, "sif <7> block[DIND] 5000");
        },
        &[
            ProblemClass::ResizeInode,
            ProblemClass::InodeBlocks,
            ProblemClass::BlockBitmap,
        ],
        Some(ProblemCode::PR_0_RESIZE_INODE_INVALID),
    ),
    (
        // LINUX_S_IFREG is tested as a bit: a socket passes the resize check, and pass 1
        // reports the mode (and, not walking a socket's blocks, its i_blocks).
        "socket mode",
        |img| {
            debugfs(img, "sif <7> mode 0140644");
        },
        &[
            ProblemClass::Inode,
            ProblemClass::InodeBlocks,
            ProblemClass::BlockBitmap,
        ],
        Some(ProblemCode::PR_1_RESERVED_BAD_MODE),
    ),
    (
        // Its generation changed: the checksum fails, so e2fsck skips the checks above
        // and fails to re-create the inode after pass 1 (then stops, exit 12).
        "resize inode checksum",
        |img| bump_word(img, resize_inode_offset(img) + I_GENERATION),
        &[ProblemClass::ResizeInode, ProblemClass::Inode],
        Some(ProblemCode::PR_1_RESIZE_INODE_CREATE),
    ),
    (
        "feature cleared under the inode",
        |img| {
            debugfs(img, "feature -resize_inode");
        },
        &[ProblemClass::ResizeInode],
        Some(ProblemCode::PR_0_CLEAR_RESIZE_INODE),
    ),
    (
        "no reserved descriptor blocks",
        |img| {
            debugfs(img, "ssv reserved_gdt_blocks 0");
        },
        &[ProblemClass::BlockBitmap, ProblemClass::FreeCounts],
        None,
    ),
    (
        // libext2fs stops counting the reserved blocks as metadata under meta_bg
        // (`ext2fs_reserve_super_and_bgd`), and pass 1 claims only the resize inode's
        // double indirect block: the reserved blocks are marked in the bitmap but owned
        // by no one.
        "meta_bg set under the resize inode",
        |img| {
            debugfs(img, "feature meta_bg");
            debugfs(img, "ssv first_meta_bg 1");
        },
        &[
            ProblemClass::ResizeInode,
            ProblemClass::BlockBitmap,
            ProblemClass::FreeCounts,
        ],
        Some(ProblemCode::PR_0_DISABLE_RESIZE_INODE),
    ),
];

#[test]
fn resize_inode_damage_agrees() {
    let image = make_empty_image(ARGS, SIZE_MIB);
    let pristine = std::fs::read(&image.path).unwrap();
    let classes = assert_agreement(&image.path, "undamaged");
    assert!(classes.is_empty(), "{classes:?}");
    for &(name, damage, expected, code) in DAMAGES {
        std::fs::write(&image.path, &pristine).unwrap();
        damage(&image.path);
        let classes = assert_agreement(&image.path, name);
        assert_eq!(
            classes.iter().copied().collect::<Vec<_>>(),
            expected,
            "{name}"
        );
        let report = forced_check(&image.path, None);
        if let Some(code) = code {
            assert!(
                report.problems.iter().any(|p| p.code == code),
                "{name}: {code} not reported: {:?}",
                report.problems
            );
        }
    }
}

/// Without the feature, `s_reserved_gdt_blocks` must be zero: e2fsck reports it, and the
/// inode being non-zero, with exit 0.
#[test]
fn feature_cleared_reports_reserved_blocks_and_inode() {
    let image = make_empty_image(ARGS, SIZE_MIB);
    debugfs(&image.path, "feature -resize_inode");
    let report = forced_check(&image.path, None);
    let codes: Vec<ProblemCode> = report.problems.iter().map(|p| p.code).collect();
    assert_eq!(
        codes,
        [
            ProblemCode::PR_0_NONZERO_RESERVED_GDT_BLOCKS,
            ProblemCode::PR_0_CLEAR_RESIZE_INODE
        ]
    );
    assert_eq!(report.exit_code(), 0);
}
