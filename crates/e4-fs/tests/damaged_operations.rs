//! Operations on a damaged image that fail part-way leave it as they found it (issue 22,
//! "What was found", item 3): each test makes an image, damages one structure on disk as a
//! bad sector or a stray write would, runs the operation that used to leave new damage
//! behind, and checks that it fails, that the image is byte for byte as before but for the
//! superblock's mount bookkeeping, and that after a later allocation `e2fsck -fn` reports
//! exactly the problems it reported before the operation: none new, and none (such as a
//! block claimed twice) that a half-done free would let the allocator create.

use std::path::Path;
use std::time::Duration;

use e4_fs::{Creator, Filesystem, OpenOptions, RenameMode, XattrSet};
use e4_testkit::{e2fsck_clean, e2fsck_problems, make_empty_image, Image, RawImage};

const ROOT: u32 = 2;
const FILE: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};
const DIR: Creator = Creator {
    permissions: 0o755,
    uid: 0,
    gid: 0,
    umask: 0,
};

fn options() -> OpenOptions {
    OpenOptions {
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Makes an image with `mke2fs_args` and fills it through e4 with `build`; the result must
/// be clean before it is damaged.
fn built_image(mke2fs_args: &[&str], build: impl FnOnce(&Filesystem)) -> Image {
    let img = make_empty_image(mke2fs_args, 8);
    let fs = Filesystem::open(&img.path, options()).unwrap();
    build(&fs);
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
    img
}

/// An ext4 image (1 KiB blocks, without metadata_csum so the damage passes the open)
/// holding one 3 KiB file, inode 12, whose first extent's `ee_start_lo` (bytes 20-23 of
/// `i_block`) is then set to the block `aim` picks.
fn file_with_its_extent_at(aim: impl Fn(&RawImage) -> u64) -> (Image, u32) {
    let img = built_image(
        &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum"],
        |fs| {
            let file = fs.create(ROOT, b"f", FILE).unwrap();
            fs.write_at(file, 0, &pattern(3 * 1024, 1)).unwrap();
        },
    );
    let raw = RawImage::read(&img.path).unwrap();
    let ino = 12;
    let offset = raw.inode_offset(ino).unwrap() + 0x28 + 20;
    let start = u32::try_from(aim(&raw)).unwrap();
    damage(&img.path, offset, 4, |p| {
        p.copy_from_slice(&start.to_le_bytes())
    });
    (img, ino)
}

/// Changes the image file's bytes at `offset` with `damage`.
fn damage(path: &Path, offset: u64, len: usize, damage: impl FnOnce(&mut [u8])) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = offset as usize;
    damage(&mut bytes[at..at + len]);
    std::fs::write(path, bytes).unwrap();
}

/// The blocks (of `block_size` bytes) in which two images differ, the first (the boot
/// block and primary superblock, where an unmount records its mount bookkeeping) left out.
fn changed_blocks(before: &[u8], after: &[u8], block_size: usize, path: &Path) -> Vec<usize> {
    let skip = 2048usize.div_ceil(block_size);
    let journal = journal_blocks(path);
    before
        .chunks(block_size)
        .zip(after.chunks(block_size))
        .enumerate()
        .skip(skip)
        .filter(|(i, (b, a))| b != a && !journal.contains(&(*i as u64)))
        .map(|(i, _)| i)
        .collect()
}

/// The journal's blocks, which every commit writes (the log, and its superblock at
/// unmount): none of the operation's business.
fn journal_blocks(path: &Path) -> std::collections::BTreeSet<u64> {
    let raw = RawImage::read(path).unwrap();
    if raw.superblock().journal_inum == 0 {
        return Default::default();
    }
    let ino = raw.superblock().journal_inum;
    (0..)
        .map_while(|i| raw.file_block(ino, i).ok().flatten())
        .collect()
}

/// Runs `operation`, which must fail on the damaged image at `path`, and checks that it
/// changed nothing on disk. Then, on a second copy of the damaged image, runs it again and
/// in the same session writes a new file of `fill_blocks` blocks (which takes whatever
/// blocks a half-done free left free in the allocator, on disk or only in memory), and
/// checks that e2fsck sees no problem it did not see before.
fn fails_and_changes_nothing(
    path: &Path,
    operation: impl Fn(&Filesystem) -> e4_fs::Result<()>,
    fill_blocks: usize,
) {
    let problems = e2fsck_problems(path);
    assert!(!problems.is_empty(), "e2fsck must see the damage");
    let before = std::fs::read(path).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let again = scratch.path().join("again.img");
    std::fs::write(&again, &before).unwrap();

    let fs = Filesystem::open(path, options()).unwrap();
    let block_size = fs.block_size() as usize;
    let outcome = operation(&fs);
    assert!(outcome.is_err(), "the operation must fail: {outcome:?}");
    fs.unmount().expect("the filesystem still unmounts");
    let after = std::fs::read(path).unwrap();
    assert_eq!(
        changed_blocks(&before, &after, block_size, path),
        Vec::<usize>::new(),
        "the failed operation ({outcome:?}) changed blocks of the image"
    );

    let fs = Filesystem::open(&again, options()).unwrap();
    assert!(operation(&fs).is_err());
    let new = fs.create(ROOT, b"taken-later", FILE).unwrap();
    fs.write_at(new, 0, &pattern(fill_blocks * block_size, 7))
        .unwrap();
    fs.unmount().unwrap();
    assert_eq!(
        e2fsck_problems(&again),
        problems,
        "e2fsck must find what it found before, nothing new"
    );
}

/// `truncate` of an ext2 file whose block map holds one pointer past the end of the
/// filesystem: it used to free the file's other blocks in the bitmap, then fail, leaving
/// the inode mapping blocks the next write took. Now it fails before it frees anything.
#[test]
fn truncate_of_a_file_with_a_bad_block_pointer_frees_nothing() {
    let img = built_image(&["-t", "ext2", "-b", "1024"], |fs| {
        let file = fs.create(ROOT, b"f", FILE).unwrap();
        // Past the 12 direct pointers, so that an indirect block maps the rest.
        fs.write_at(file, 0, &pattern(40 * 1024, 1)).unwrap();
    });
    let raw = RawImage::read(&img.path).unwrap();
    let ino = 12;
    let indirect = {
        let block = &raw.inode(ino).unwrap().record.block;
        u64::from(u32::from_le_bytes(block[48..52].try_into().unwrap()))
    };
    assert_ne!(indirect, 0, "the file must have an indirect block");
    // Logical block 30 is the indirect block's pointer 18; point it past the end.
    let offset = indirect * 1024 + 18 * 4;
    damage(&img.path, offset, 4, |p| {
        p.copy_from_slice(&0xFFFF_FF00u32.to_le_bytes())
    });
    fails_and_changes_nothing(&img.path, |fs| fs.truncate(ino, 5 * 1024), 40);
}

/// `unlink` of a file whose xattr block is bad (a checksum that does not match on ext4, a
/// wrong magic number on ext2): it used to remove the name and free the blocks, then fail
/// on the xattr block and leave the inode allocated with nothing naming it. Now the name,
/// the inode, its data blocks and its xattr block are all as they were.
#[test]
fn unlink_of_a_file_with_a_bad_xattr_block_keeps_name_inode_and_blocks() {
    for (profile, what) in [
        (&["-t", "ext4", "-b", "1024"][..], "checksum"),
        (&["-t", "ext2", "-b", "1024"][..], "magic"),
    ] {
        let img = built_image(profile, |fs| {
            let dir = fs.mkdir(ROOT, b"dir", DIR).unwrap();
            let file = fs.create(dir, b"f", FILE).unwrap();
            fs.write_at(file, 0, &pattern(20 * 1024, 2)).unwrap();
            fs.set_xattr(file, b"user.big", &pattern(600, 3), XattrSet::Create)
                .unwrap();
        });
        let raw = RawImage::read(&img.path).unwrap();
        let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
        let ino = fs.resolve("/dir/f", false).unwrap();
        drop(fs);
        let xattr_block = raw.inode(ino).unwrap().file_acl();
        assert_ne!(xattr_block, 0, "{what}: the value must be in a block");
        // The checksum (`h_checksum`, at 0x10) or the magic (`h_magic`, at 0).
        let at = if what == "checksum" { 0x10 } else { 0 };
        damage(&img.path, xattr_block * 1024 + at, 1, |b| b[0] ^= 0x5a);
        fails_and_changes_nothing(
            &img.path,
            |fs| {
                let dir = fs.resolve("/dir", false)?;
                fs.unlink(dir, b"f")
            },
            40,
        );
        let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
        assert_eq!(
            fs.resolve("/dir/f", false).ok(),
            Some(ino),
            "{what}: the name is still there"
        );
    }
}

/// `rmdir` (the last step of `rm -r`) of an empty directory whose xattr block has a wrong
/// magic number: the name, the directory's inode and block, and the parent's link count
/// stay as they were.
#[test]
fn rmdir_of_a_directory_with_a_bad_xattr_block_keeps_it() {
    let img = built_image(&["-t", "ext4", "-b", "1024"], |fs| {
        let dir = fs.mkdir(ROOT, b"dir", DIR).unwrap();
        fs.set_xattr(dir, b"user.big", &pattern(600, 4), XattrSet::Create)
            .unwrap();
    });
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    let dir = fs.resolve("/dir", false).unwrap();
    drop(fs);
    let xattr_block = RawImage::read(&img.path)
        .unwrap()
        .inode(dir)
        .unwrap()
        .file_acl();
    assert_ne!(xattr_block, 0, "the value must be in a block");
    damage(&img.path, xattr_block * 1024, 1, |b| b[0] ^= 0x5a);
    fails_and_changes_nothing(&img.path, |fs| fs.rmdir(ROOT, b"dir"), 40);
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    assert_eq!(fs.resolve("/dir", false).ok(), Some(dir));
}

/// `rename` of a directory into another whose first block (the one holding `..`) fails
/// verification (a checksum that does not match on ext4; on ext2, a `.` entry whose length
/// runs past the block): it used to move the entry and then fail to point `..` at the new
/// parent. Now the entry stays where it was and `..` names the old parent.
#[test]
fn rename_of_a_directory_whose_block_fails_verification_moves_nothing() {
    for (profile, what) in [
        (&["-t", "ext4", "-b", "1024"][..], "checksum"),
        (&["-t", "ext2", "-b", "1024"][..], "entry length"),
    ] {
        let img = built_image(profile, |fs| {
            let a = fs.mkdir(ROOT, b"a", DIR).unwrap();
            fs.mkdir(ROOT, b"b", DIR).unwrap();
            let moving = fs.mkdir(a, b"moving", DIR).unwrap();
            fs.create(moving, b"inside", FILE).unwrap();
        });
        let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
        let (a, moving) = (
            fs.resolve("/a", false).unwrap(),
            fs.resolve("/a/moving", false).unwrap(),
        );
        drop(fs);
        let raw = RawImage::read(&img.path).unwrap();
        let first = raw.file_block(moving, 0).unwrap().unwrap();
        if what == "checksum" {
            // The last byte of the tail's `det_checksum`.
            damage(&img.path, first * 1024 + 1023, 1, |b| b[0] ^= 0x5a);
        } else {
            // `rec_len` of `.` (at 4): past the block's end.
            damage(&img.path, first * 1024 + 4, 2, |l| {
                l.copy_from_slice(&2048u16.to_le_bytes())
            });
        }
        fails_and_changes_nothing(
            &img.path,
            |fs| {
                let (a, b) = (fs.resolve("/a", false)?, fs.resolve("/b", false)?);
                fs.rename(a, b"moving", b, b"moving", RenameMode::Replace)
            },
            40,
        );
        let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
        assert_eq!(fs.resolve("/a/moving", false).ok(), Some(moving), "{what}");
        assert!(fs.resolve("/b/moving", false).is_err(), "{what}");
        drop(fs);
        let raw = RawImage::read(&img.path).unwrap();
        let block = raw.block(first).unwrap();
        // `..` is the second entry, after `.` (12 bytes): its inode is the old parent's.
        assert_eq!(
            u32::from_le_bytes(block[12..16].try_into().unwrap()),
            a,
            "{what}: `..` still names /a"
        );
    }
}

/// A write into a file whose extent maps its data onto the group descriptors (found while
/// building the `write` fuzz target): it used to write the data over them, since a write
/// looked up the file's blocks without checking them, leaving an image e2fsck could not
/// open. Now the lookup refuses a run that overlaps the filesystem's metadata, as the
/// kernel does, and the write fails before anything is written.
#[test]
fn write_into_a_file_mapped_onto_the_group_descriptors_writes_nothing() {
    // Block 2: the descriptors, right after the superblock on 1 KiB blocks.
    let (img, ino) = file_with_its_extent_at(|_| 2);
    fails_and_changes_nothing(
        &img.path,
        |fs| fs.write_at(ino, 100, &pattern(1000, 2)).map(drop),
        8,
    );
}

/// A read of a file whose extent maps its data onto the inode table is refused, on a
/// read-only open as on a writable one, as the kernel refuses it: it showed the table's
/// records as the file's bytes.
#[test]
fn a_read_of_a_file_mapped_onto_the_inode_table_is_refused() {
    let (img, ino) = file_with_its_extent_at(|raw| raw.group_descriptor(0).unwrap().inode_table());
    let problems = e2fsck_problems(&img.path);
    for options in [e4_fs::OpenOptions::default(), options()] {
        let fs = Filesystem::open(&img.path, options).unwrap();
        let mut back = vec![0u8; 1024];
        let read = fs.read_at(ino, 0, &mut back);
        assert!(
            matches!(&read, Err(e) if e.to_string().contains("overlap the filesystem's metadata")),
            "{read:?}"
        );
        drop(fs);
        assert_eq!(
            e2fsck_problems(&img.path),
            problems,
            "e2fsck must find what it found before, nothing new"
        );
    }
}

/// The same through a block map: an ext2 file whose indirect block pointer names a block of
/// the inode table. A write past the twelve direct blocks used to read the inode table as
/// the indirect block and write through the pointers it found there; now the pointer is
/// refused before the block is read as the file's.
#[test]
fn write_through_an_indirect_pointer_into_the_inode_table_writes_nothing() {
    let img = built_image(&["-t", "ext2", "-b", "1024"], |fs| {
        let file = fs.create(ROOT, b"f", FILE).unwrap();
        fs.write_at(file, 0, &pattern(20 * 1024, 1)).unwrap();
    });
    let raw = RawImage::read(&img.path).unwrap();
    let ino = 12;
    let table = raw.group_descriptor(0).unwrap().inode_table();
    // `i_block[12]`, the indirect block pointer, onto the inode table's second block.
    let offset = raw.inode_offset(ino).unwrap() + 0x28 + 48;
    let pointer = u32::try_from(table + 1).unwrap();
    damage(&img.path, offset, 4, |p| {
        p.copy_from_slice(&pointer.to_le_bytes())
    });
    fails_and_changes_nothing(
        &img.path,
        |fs| fs.write_at(ino, 14 * 1024, &pattern(3000, 3)).map(drop),
        8,
    );
}

/// A file whose extent maps its data onto a block of the journal: a write used to put the
/// data in the log, and a truncate freed the journal's block in the bitmap, for the next
/// allocation to hand out while the journal still used it. The journal's blocks are now in
/// the system zone with the fixed metadata (as the kernel protects the journal inode's
/// blocks), so both fail and nothing changes.
#[test]
fn a_file_mapped_onto_the_journal_neither_writes_nor_frees_it() {
    // From the journal's (inode 8's) sixth block on.
    let (img, ino) = file_with_its_extent_at(|raw| raw.file_block(8, 5).unwrap().unwrap());
    fails_and_changes_nothing(
        &img.path,
        |fs| {
            let write = fs.write_at(ino, 0, &pattern(100, 2));
            assert!(write.is_err(), "the write must fail: {write:?}");
            fs.truncate(ino, 0)
        },
        8,
    );
}

/// An ext3 journal whose block map names the group descriptors as its second block: the
/// first commit used to write its descriptor block there (the log's first block), leaving
/// the descriptors broken until the commit was written home, and for good after a crash in
/// between. A writable open now refuses the journal, and leaves the image as it was; a
/// read-only open goes on without it and says why.
#[test]
fn a_journal_mapped_onto_the_group_descriptors_is_refused() {
    let img = make_empty_image(&["-t", "ext3", "-b", "1024"], 8);
    let raw = RawImage::read(&img.path).unwrap();
    // `i_block[1]` of the journal inode (8), onto block 2: the descriptors.
    let offset = raw.inode_offset(8).unwrap() + 0x28 + 4;
    damage(&img.path, offset, 4, |p| {
        p.copy_from_slice(&2u32.to_le_bytes())
    });
    let before = std::fs::read(&img.path).unwrap();
    let opened = Filesystem::open(&img.path, options());
    let message = opened
        .err()
        .expect("the writable open must fail")
        .to_string();
    assert!(
        message.contains("inode 8") && message.contains("overlap the filesystem's metadata"),
        "{message}"
    );
    assert!(
        std::fs::read(&img.path).unwrap() == before,
        "the image changed"
    );
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    assert!(
        fs.warnings()
            .iter()
            .any(|w| w.contains("journal cannot be used")),
        "{:?}",
        fs.warnings()
    );
}

/// A file whose xattr block pointer names a block of the journal that holds a copy of a
/// good xattr block (a stale log block, say): replacing the attribute used to rewrite the
/// "block" in place, in the journal. The pointer is now checked like a block of the file's
/// mapping, and the change fails before anything is written.
#[test]
fn an_xattr_block_pointer_into_the_journal_is_refused() {
    let img = built_image(
        &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum"],
        |fs| {
            let file = fs.create(ROOT, b"f", FILE).unwrap();
            fs.set_xattr(file, b"user.big", &pattern(600, 3), XattrSet::Create)
                .unwrap();
        },
    );
    let raw = RawImage::read(&img.path).unwrap();
    let ino = 12;
    let xattr_block = raw.inode(ino).unwrap().file_acl();
    assert_ne!(xattr_block, 0, "the value must be in a block");
    // Far from the log's head, where this test's few commits write.
    let journal_block = raw.file_block(8, 900).unwrap().unwrap();
    let copy = raw.block(xattr_block).unwrap().to_vec();
    damage(&img.path, journal_block * 1024, 1024, |b| {
        b.copy_from_slice(&copy)
    });
    // `i_file_acl_lo`, at 0x68 in the inode.
    let offset = raw.inode_offset(ino).unwrap() + 0x68;
    let pointer = u32::try_from(journal_block).unwrap();
    damage(&img.path, offset, 4, |p| {
        p.copy_from_slice(&pointer.to_le_bytes())
    });
    // Not `fails_and_changes_nothing`: the block is the journal's, so a later commit's log
    // goes over the copy there, and e2fsck's findings change with it, rightly.
    let before = std::fs::read(&img.path).unwrap();
    let fs = Filesystem::open(&img.path, options()).unwrap();
    let outcome = fs.set_xattr(ino, b"user.big", &pattern(600, 4), XattrSet::Replace);
    let message = outcome.expect_err("the change must fail").to_string();
    assert!(
        message.contains("overlap the filesystem's metadata"),
        "{message}"
    );
    fs.unmount().unwrap();
    let after = std::fs::read(&img.path).unwrap();
    assert_eq!(
        changed_blocks(&before, &after, 1024, &img.path),
        Vec::<usize>::new()
    );
    let journal = &after[journal_block as usize * 1024..][..1024];
    assert!(journal == &copy[..], "the journal's block was written");
}
