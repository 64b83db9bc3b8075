//! The inline-data rules of e2fsck's pass 1 (issue 9), against `e2fsck -fn`: the flag
//! with no `system.data` to be found (`PR_1_INLINE_DATA_NO_ATTR`), the inline-data and
//! extents flags together (`fix_inline_data_extents_file`: each offer that applies is
//! declined in turn, and the inode is checked as inline data), and a `system.data` held
//! in the xattr block, which libext2fs finds as it finds one in the inode.

mod common;

use std::collections::BTreeSet;

use e4_fsck::ProblemCode;
use e4_testkit::make_empty_image;

use common::flips::assert_flips_in_blocks_agree;
use common::{assert_agreement, debugfs, inode_of, problem_codes, read_bytes, write_bytes};

/// `EXT4_INLINE_DATA_FL | EXT4_EXTENTS_FL`.
const BOTH_FLAGS: &str = "0x10080000";

/// Host files to copy in with debugfs `write`.
struct HostFiles {
    dir: tempfile::TempDir,
}

impl HostFiles {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("text"), b"hello world\n").unwrap();
        std::fs::write(dir.path().join("zeros"), [0u8; 8]).unwrap();
        std::fs::write(dir.path().join("big"), vec![b'x'; 10_000]).unwrap();
        HostFiles { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// Runs `commands` through debugfs on a fresh 4 KiB inline_data image, requires
/// agreement, and returns e4's codes.
fn damaged(commands: &[String]) -> BTreeSet<ProblemCode> {
    let image = make_empty_image(&["-t", "ext4", "-b", "4096", "-O", "inline_data"], 8);
    for command in commands {
        debugfs(&image.path, command);
    }
    assert_agreement(&image.path, &commands.join("; "));
    problem_codes(&image.path)
}

#[test]
fn inline_file_and_directory_without_system_data() {
    let host = HostFiles::new();
    let codes = damaged(&[
        format!("write {} /f", host.path("text")),
        "mkdir /d".into(),
        "ea_rm /f system.data".into(),
        "ea_rm /d system.data".into(),
    ]);
    assert_eq!(
        codes,
        BTreeSet::from([ProblemCode::PR_1_INLINE_DATA_NO_ATTR])
    );
}

/// Text in `i_block`, a size that fits inline: the extents flag is the wrong one.
#[test]
fn inline_file_with_the_extents_flag() {
    let host = HostFiles::new();
    let codes = damaged(&[
        format!("write {} /f", host.path("text")),
        format!("sif /f flags {BOTH_FLAGS}"),
    ]);
    assert_eq!(
        codes,
        BTreeSet::from([
            ProblemCode::PR_1_CLEAR_EXTENT_FOR_INLINE_DATA,
            ProblemCode::PR_1_CLEAR_EXTENT_INLINE_DATA_INODE,
        ])
    );
}

/// Eight zero bytes: every `i_block` word could also be a block number.
#[test]
fn inline_file_that_could_be_a_block_map() {
    let host = HostFiles::new();
    let codes = damaged(&[
        format!("write {} /f", host.path("zeros")),
        format!("sif /f flags {BOTH_FLAGS}"),
    ]);
    assert_eq!(
        codes,
        BTreeSet::from([
            ProblemCode::PR_1_CLEAR_EXTENT_FOR_INLINE_DATA,
            ProblemCode::PR_1_CLEAR_EXTENT_INLINE_DATA_FLAGS,
            ProblemCode::PR_1_CLEAR_EXTENT_INLINE_DATA_INODE,
        ])
    );
}

/// An inline file maps no blocks, but its size is held to what a block map could reach
/// (e2fsck's `ext2_max_sizes`, as for any file without the extents flag): on 4 KiB
/// blocks (12 + 1 Ki + 1 Mi + 1 Gi) blocks, so exactly that is sound and one byte more is
/// `PR_1_BAD_I_SIZE` (issue 23's inline file claiming 1 TiB on 1 KiB blocks, which e4
/// called clean).
#[test]
fn inline_file_size_past_what_a_block_map_reaches() {
    let host = HostFiles::new();
    let per = 4096u64 / 4;
    let reach = (12 + per + per * per + per * per * per) * 4096;
    for (size, expected) in [
        (reach, BTreeSet::new()),
        (reach + 1, BTreeSet::from([ProblemCode::PR_1_BAD_I_SIZE])),
    ] {
        let codes = damaged(&[
            format!("write {} /f", host.path("text")),
            format!("sif /f size {size}"),
        ]);
        assert_eq!(codes, expected, "an inline file of {size} bytes");
    }
}

/// An extent file given the inline flag: checked as inline data, it has no `system.data`
/// and its extents are not walked (so `i_blocks` and the bitmap disagree).
#[test]
fn extent_file_with_the_inline_flag() {
    let host = HostFiles::new();
    let codes = damaged(&[
        format!("write {} /f", host.path("big")),
        format!("sif /f flags {BOTH_FLAGS}"),
    ]);
    for code in [
        ProblemCode::PR_1_CLEAR_INLINE_DATA_FOR_EXTENT,
        ProblemCode::PR_1_CLEAR_EXTENT_INLINE_DATA_INODE,
        ProblemCode::PR_1_INLINE_DATA_NO_ATTR,
    ] {
        assert!(codes.contains(&code), "{code} not in {codes:?}");
    }
    assert!(
        !codes.contains(&ProblemCode::PR_1_CLEAR_EXTENT_FOR_INLINE_DATA),
        "{codes:?}"
    );
}

/// 128-byte inodes leave no room in the inode, so an inline directory's `system.data`
/// can only be in its xattr block. libext2fs will not put it there, so an attribute
/// `user.data` is set and its name index changed to `system.` (7) in place: the entry's
/// hash covers the name and value only, so just the block checksum is sealed again (and
/// then, when `break_checksum`, flipped).
fn inline_directory_with_system_data_in_its_block(break_checksum: bool) -> e4_testkit::Image {
    use e4_format::xattr::XattrBlockHeader;
    use e4_format::{BlockSeed, MetadataBlock};
    use e4_testkit::RawImage;

    let image = make_empty_image(&["-t", "ext4", "-b", "4096", "-I", "128"], 8);
    for command in [
        "feature inline_data",
        "mkdir /d",
        "ea_set /d user.data \"\"",
    ] {
        debugfs(&image.path, command);
    }
    let raw = RawImage::read(&image.path).unwrap();
    let ino = inode_of(&image.path, "/d");
    let block = raw.inode(ino).unwrap().file_acl();
    assert_ne!(block, 0, "user.data went to an xattr block");
    let bs = raw.block_size() as u64;
    let mut bytes = read_bytes(&image.path, block * bs, bs as usize);
    // The first entry follows the 32-byte header: e_name_len, then e_name_index.
    const FIRST_ENTRY: usize = 32;
    // The header's h_checksum.
    const CHECKSUM: usize = 16;
    assert_eq!(&bytes[FIRST_ENTRY + 16..FIRST_ENTRY + 20], b"data");
    bytes[FIRST_ENTRY + 1] = 7;
    XattrBlockHeader::seal(
        &mut bytes,
        BlockSeed {
            seed: raw.superblock().csum_seed(),
            block_nr: block,
        },
    );
    if break_checksum {
        bytes[CHECKSUM] ^= 1;
    }
    write_bytes(&image.path, block * bs, &bytes);
    image
}

/// e2fsck finds the attribute in the block (no `PR_1_INLINE_DATA_NO_ATTR`, the
/// directory's entries are read): the image is clean.
#[test]
fn system_data_in_the_xattr_block() {
    let image = inline_directory_with_system_data_in_its_block(false);
    let classes = assert_agreement(&image.path, "system.data in the xattr block");
    assert!(classes.is_empty(), "{classes:?}");
}

/// A block whose checksum fails: the attribute is not found, and pass 2 gives up on the
/// directory (its `..` and its entries go uncounted).
#[test]
fn system_data_in_an_xattr_block_whose_checksum_fails() {
    let image = inline_directory_with_system_data_in_its_block(true);
    assert_agreement(&image.path, "system.data in a failing xattr block");
    let codes = problem_codes(&image.path);
    for code in [
        ProblemCode::PR_1_INLINE_DATA_NO_ATTR,
        ProblemCode::PR_1_EA_BLOCK_ONLY_CSUM_INVALID,
    ] {
        assert!(codes.contains(&code), "{code} not in {codes:?}");
    }
}

/// Random bit flips in the inode table block holding an inline directory whose entries
/// continue in `system.data`, and its inline files, must give e2fsck's verdict, and
/// neither panic nor hang.
#[test]
fn random_flips_in_inline_inodes() {
    let image = make_empty_image(&["-t", "ext4", "-b", "4096", "-O", "inline_data"], 8);
    let host = HostFiles::new();
    debugfs(&image.path, "mkdir /d");
    for name in ["first", "second", "third", "fourth", "fifth"] {
        debugfs(
            &image.path,
            &format!("write {} /d/{name}", host.path("text")),
        );
    }
    let raw = e4_testkit::RawImage::read(&image.path).unwrap();
    let bs = raw.block_size() as u64;
    let hot: Vec<u64> = ["/d", "/d/first", "/d/fifth"]
        .iter()
        .map(|path| raw.inode_offset(inode_of(&image.path, path)).unwrap() / bs)
        .collect();
    let classes = assert_agreement(&image.path, "inline directory in system.data");
    assert!(classes.is_empty(), "{classes:?}");
    assert_flips_in_blocks_agree(&image.path, &hot, 40, 17);
}
