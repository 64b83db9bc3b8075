//! The blocks mke2fs `-m` keeps back for the superuser: an ordinary caller gets "no space"
//! while they are still free, and a caller the kernel would let in (root's capability, the
//! reserved uid, a member of the reserved group) fills them, through every way a write
//! allocates: file data (small files, appends, fallocate), directory blocks and extent-tree
//! blocks.
//! Every image ends with `e2fsck -fn`.

use std::path::Path;
use std::process::Command;

use e4_fs::{Caller, Creator, Error, FallocateMode, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image};

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
const CHUNK: usize = 64 << 10;

fn open_as(image: &Path, caller: Caller) -> Filesystem {
    Filesystem::open(
        image,
        OpenOptions {
            caller,
            ..OpenOptions::writable()
        },
    )
    .unwrap()
}

/// Appends to `name` (made if missing) until the engine says no space; returns the bytes
/// written. Any other error fails the test.
fn append_until_full(fs: &Filesystem, name: &[u8]) -> u64 {
    let ino = match fs.lookup(ROOT, name).unwrap() {
        Some(ino) => ino,
        None => fs.create(ROOT, name, FILE).unwrap(),
    };
    let start = fs.metadata(ino).unwrap().size;
    let mut size = start;
    loop {
        match fs.write_at(ino, size, &[0x3c; CHUNK]) {
            Ok(n) => size += n as u64,
            Err(Error::NoSpace(_)) => return size - start,
            Err(e) => panic!("append to {name:?}: {e}"),
        }
    }
}

/// What `-m 10` keeps back, in blocks.
fn reserved_blocks(image: &Path) -> u64 {
    let fs = Filesystem::open(image, OpenOptions::default()).unwrap();
    fs.superblock().reserved_blocks_count()
}

/// Fills `image` as an ordinary user, then checks that `privileged` can go on into the
/// reserve through data, directory and extent-tree blocks, and that `refused` cannot.
fn the_reserve_is_filled_only_by(image: &Path, privileged: Caller, refused: Caller) {
    let reserved = reserved_blocks(image);
    let fs = open_as(image, Caller::ordinary());
    append_until_full(&fs, b"ordinary");
    let statfs = fs.statfs();
    assert_eq!(statfs.available_blocks, 0, "{statfs:?}");
    assert!(
        statfs.free_blocks >= reserved,
        "an ordinary writer stopped with {} free blocks, {reserved} reserved",
        statfs.free_blocks
    );
    assert!(matches!(
        fs.mkdir(ROOT, b"no-room", DIR),
        Err(Error::NoSpace(_))
    ));
    fs.unmount().unwrap();
    e2fsck_clean(image).unwrap();

    let fs = open_as(image, refused);
    assert_eq!(append_until_full(&fs, b"refused"), 0);
    fs.unmount().unwrap();

    let fs = open_as(image, privileged);
    // A directory, and a small file in it.
    let dir = fs.mkdir(ROOT, b"root-only", DIR).unwrap();
    let small = fs.create(dir, b"small", FILE).unwrap();
    assert_eq!(fs.write_at(small, 0, &[1; 5000]).unwrap(), 5000);
    // A file of many extents (every other block written), so its tree needs a leaf block.
    let sparse = fs.create(dir, b"sparse", FILE).unwrap();
    for n in 0..12u64 {
        fs.write_at(sparse, n * 8192, &[2; 4096]).unwrap();
    }
    let block_size = u64::from(fs.block_size());
    assert_eq!(
        fs.metadata(sparse).unwrap().blocks * 512,
        12 * 4096 + block_size,
        "12 extents of data and one extent-tree leaf"
    );
    // Preallocation.
    let preallocated = fs.create(dir, b"preallocated", FILE).unwrap();
    fs.fallocate(preallocated, FallocateMode::Allocate, 0, 256 << 10)
        .unwrap();
    let appended = append_until_full(&fs, b"ordinary");
    let left = fs.statfs().free_blocks;
    assert!(
        appended / fs.block_size() as u64 + left + 300 >= reserved,
        "the privileged writer got {appended} bytes and stopped with {left} free blocks of {reserved} reserved"
    );
    fs.unmount().unwrap();
    e2fsck_clean(image).unwrap();
}

#[test]
fn the_superuser_fills_the_root_reserve_an_ordinary_caller_may_not_touch() {
    let img = make_empty_image(&["-t", "ext4", "-m", "10"], 16);
    the_reserve_is_filled_only_by(
        &img.path,
        Caller::superuser(),
        Caller {
            uid: 1000,
            gid: 1000,
            groups: vec![0, 4],
            sys_resource: false,
        },
    );
}

fn tune2fs(image: &Path, args: &[&str]) {
    let out = Command::new(e4_testkit::tool("tune2fs"))
        .args(args)
        .arg(image)
        .output()
        .expect("tune2fs must be installed (e2fsprogs)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_reserved_uid_fills_the_reserve() {
    let img = make_empty_image(&["-t", "ext4", "-m", "10"], 16);
    tune2fs(&img.path, &["-u", "1234"]);
    let user = |uid| Caller {
        uid,
        gid: 100,
        groups: Vec::new(),
        sys_resource: false,
    };
    // uid 0 without the capability is no longer the reserved user.
    the_reserve_is_filled_only_by(&img.path, user(1234), user(0));
}

#[test]
fn a_member_of_the_reserved_group_fills_the_reserve() {
    let img = make_empty_image(&["-t", "ext4", "-m", "10"], 16);
    tune2fs(&img.path, &["-g", "4321"]);
    let member = |groups: Vec<u32>| Caller {
        uid: 1000,
        gid: 100,
        groups,
        sys_resource: false,
    };
    the_reserve_is_filled_only_by(&img.path, member(vec![7, 4321]), member(vec![7]));
}

/// Writing into preallocated (unwritten) blocks on a disk full for the writer: the data
/// has its blocks, but marking them written splits the extent, and a file whose inode
/// holds four extents then needs an extent-tree block. The kernel's ext4 takes that block
/// from the metadata reserve (`mpage_map_one_extent` maps with
/// `EXT4_GET_BLOCKS_METADATA_NOFAIL`: writeback must not fail), so an ordinary user's
/// write there succeeds on a full disk (checked on a loop mount of Linux 6.18:
/// docs/FUSE.md, "Writing into preallocated space on a full disk"); so must e4's.
#[test]
fn an_ordinary_write_into_preallocated_blocks_on_a_full_disk_takes_its_tree_block() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096", "-m", "5"], 64);
    let fs = open_as(&img.path, Caller::ordinary());
    let file = fs.create(ROOT, b"preallocated", FILE).unwrap();
    // Four unwritten extents, as many as the inode holds.
    for start in [0u64, 2 << 20, 4 << 20, 6 << 20] {
        fs.fallocate(file, FallocateMode::KeepSize, start, 256 << 10)
            .unwrap();
    }
    assert_eq!(fs.metadata(file).unwrap().blocks * 512, 4 * (256 << 10));
    append_until_full(&fs, b"filler");
    assert_eq!(fs.statfs().available_blocks, 0);
    // Into the middle of the first extent: three extents where there was one.
    let data = [0x5a; 4096];
    assert_eq!(fs.write_at(file, 8 * 4096, &data).unwrap(), 4096);
    assert_eq!(
        fs.metadata(file).unwrap().blocks * 512,
        4 * (256 << 10) + 4096,
        "the preallocated blocks and one extent-tree leaf"
    );
    let mut back = [0; 4096];
    assert_eq!(fs.read_at(file, 8 * 4096, &mut back).unwrap(), 4096);
    assert_eq!(back, data);
    // The file's size did not grow past the written block (KEEP_SIZE left it at 0).
    assert_eq!(fs.metadata(file).unwrap().size, 9 * 4096);
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}
