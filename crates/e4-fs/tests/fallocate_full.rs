//! A fallocate larger than the free space, as `ext4_alloc_file_blocks` answers it: the
//! blocks it allocated stay mapped (unwritten), the size moves to the end of them without
//! KEEP_SIZE, and the answer is "no space"; a second call finds nothing more and changes
//! nothing. Measured on the kernel (Linux 6.18, a 512 MiB ext4 image): `fallocate -l 1G`
//! answers ENOSPC in 12 ms and leaves a file of 500,109,312 bytes. e4 undid the whole
//! allocation, committed and did it again, one block per allocation once the free count
//! was below the request: 58,000 allocations and 18 s through the mount. Counted here by
//! allocation points (`allocations_seen`), never by time.

use e4_fs::{Caller, Creator, Error, FallocateMode, Filesystem, OpenOptions, Shortage};
use e4_testkit::{e2fsck_clean, make_empty_image, Image};

const ROOT: u32 = 2;
const FILE: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// A few allocations per group and extent (a 512 MiB image of 4 KiB blocks has four
/// groups; unwritten extents hold 128 MiB): far from one per block.
const FEW_ALLOCATIONS: u64 = 64;

/// A 512 MiB ext4 image of 4 KiB blocks (mke2fs's defaults, as the mount test's).
fn image() -> Image {
    make_empty_image(&["-t", "ext4"], 512)
}

/// Opened for `caller`: root may take the root reserve, an ordinary user may not.
fn open(image: &Image, caller: Caller) -> Filesystem {
    let options = OpenOptions {
        caller,
        ..OpenOptions::writable()
    };
    Filesystem::open(&image.path, options).unwrap()
}

fn is_no_space<T: std::fmt::Debug>(result: e4_fs::Result<T>) -> bool {
    matches!(result, Err(Error::NoSpace(Shortage::Blocks)))
}

#[test]
fn a_fallocate_larger_than_the_free_space_keeps_what_it_allocated() {
    let image = image();
    let fs = open(&image, Caller::ordinary());
    let bs = u64::from(fs.block_size());
    let big = fs.create(ROOT, b"big", FILE).unwrap();
    let before = fs.allocations_seen();
    assert!(is_no_space(fs.fallocate(
        big,
        FallocateMode::Allocate,
        0,
        GIB
    )));
    let allocations = fs.allocations_seen() - before;
    assert!(
        allocations <= FEW_ALLOCATIONS,
        "{allocations} allocations for one fallocate"
    );
    let kept = fs.metadata(big).unwrap();
    // Everything an ordinary user may take is taken, and the size ends where it ends.
    assert_eq!(fs.statfs().available_blocks, 0);
    assert!(kept.size > 400 * MIB && kept.size < 512 * MIB, "{kept:?}");
    assert_eq!(kept.size % bs, 0, "the size ends at a block's end");
    assert!(
        kept.blocks * 512 >= kept.size,
        "every block below the size is mapped"
    );
    // Nothing more to take: no change at all, not even the times.
    assert!(is_no_space(fs.fallocate(
        big,
        FallocateMode::Allocate,
        0,
        GIB
    )));
    assert_eq!(fs.metadata(big).unwrap(), kept);
    // Within what it holds, a fallocate succeeds and allocates nothing.
    let before = fs.allocations_seen();
    fs.fallocate(big, FallocateMode::Allocate, 0, kept.size)
        .unwrap();
    assert_eq!(fs.allocations_seen(), before);
    // The blocks are unwritten: they read as zeros.
    let mut read = [1u8; 8];
    fs.read_at(big, 300 * MIB, &mut read).unwrap();
    assert_eq!(read, [0; 8]);
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

#[test]
fn keeping_the_size_keeps_the_blocks_and_root_takes_its_reserve() {
    let image = image();
    let fs = open(&image, Caller::superuser());
    let file = fs.create(ROOT, b"keep", FILE).unwrap();
    fs.write_at(file, 0, b"head").unwrap();
    let before = fs.allocations_seen();
    assert!(is_no_space(fs.fallocate(
        file,
        FallocateMode::KeepSize,
        0,
        GIB
    )));
    assert!(fs.allocations_seen() - before <= FEW_ALLOCATIONS);
    let kept = fs.metadata(file).unwrap();
    assert_eq!(kept.size, 4, "KEEP_SIZE leaves the size");
    assert!(kept.blocks * 512 > 450 * MIB, "{kept:?}");
    // Root's reserve is taken too: only the metadata reserve is left (2 % of the blocks,
    // 2,621, as the kernel's `s_resv_clusters`).
    assert_eq!(fs.statfs().free_blocks, 2621, "{:?}", fs.statfs());
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// Blocks freed in the running transaction are free only once it commits: the fallocate
/// that meets them keeps what it allocated, commits and goes on from there (the kernel's
/// `ext4_should_retry_alloc`), so it ends whole.
#[test]
fn a_fallocate_that_needs_the_blocks_of_an_uncommitted_unlink_goes_on_after_the_commit() {
    let image = image();
    let fs = open(&image, Caller::ordinary());
    let first = fs.create(ROOT, b"first", FILE).unwrap();
    assert!(is_no_space(fs.fallocate(
        first,
        FallocateMode::KeepSize,
        0,
        GIB
    )));
    let held = fs.metadata(first).unwrap().blocks * 512;
    fs.sync().unwrap();
    fs.unlink(ROOT, b"first").unwrap();
    let second = fs.create(ROOT, b"second", FILE).unwrap();
    let want = held - 4 * MIB;
    fs.fallocate(second, FallocateMode::Allocate, 0, want)
        .unwrap();
    assert_eq!(fs.metadata(second).unwrap().size, want);
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}
