//! Structures grown large through the engine: a directory to 200,000 entries (htree leaf
//! and index splits; three levels with large_dir, "index full" at two levels without it), a
//! directory with more than 65,000 subdirectories (dir_nlink), and a file punched into a
//! deep extent tree. Each image ends with `e2fsck -fn` and a read-back.

use e4_fs::{Creator, Error, FallocateMode, Filesystem, OpenOptions, Shortage};
use e4_testkit::{e2fsck_clean, make_empty_image};

const ROOT: u32 = 2;
const ME: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// Index levels of an htree directory (its root's `indirect_levels` + 1), read from the
/// image at `path` after a commit.
fn htree_levels(fs: &Filesystem, dir: u32, path: &std::path::Path) -> u8 {
    fs.sync().unwrap();
    let inode = fs.read_inode(dir).unwrap();
    assert!(inode.has_flag(e4_format::inode::flags::INDEX));
    let Some(e4_fs::Mapping::Data { physical, .. }) = fs.map_block(&inode, 0, 1).ok() else {
        panic!("no block 0")
    };
    let mut block = vec![0u8; fs.block_size() as usize];
    let file = std::fs::File::open(path).unwrap();
    std::os::unix::fs::FileExt::read_exact_at(
        &file,
        &mut block,
        physical * u64::from(fs.block_size()),
    )
    .unwrap();
    block[30] + 1
}

#[test]
fn a_directory_grows_to_200000_entries() {
    for (large_dir, args) in [
        (
            true,
            &[
                "-t",
                "ext4",
                "-b",
                "1024",
                "-O",
                "large_dir",
                "-N",
                "220000",
            ][..],
        ),
        (false, &["-t", "ext4", "-b", "1024", "-N", "220000"]),
    ] {
        let img = make_empty_image(args, 512);
        let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
        let dir = fs.mkdir(ROOT, b"big", ME).unwrap();
        // Long names fill 1 KiB leaves fast, so the index needs its deepest level.
        let name = |i: u32| format!("entry-{i:07}-{}", "x".repeat(40)).into_bytes();
        let mut made = 0u32;
        for i in 0..200_000u32 {
            match fs.create(dir, &name(i), ME) {
                Ok(_) => made += 1,
                Err(Error::NoSpace(what)) if !large_dir => {
                    assert_eq!(what, Shortage::DirectoryIndex);
                    break;
                }
                Err(e) => panic!("entry {i}: {e}"),
            }
        }
        if large_dir {
            assert_eq!(made, 200_000);
            assert_eq!(htree_levels(&fs, dir, &img.path), 3);
        } else {
            assert!(
                made < 200_000,
                "two levels of 1 KiB index blocks cannot hold 200,000 long names"
            );
            assert_eq!(htree_levels(&fs, dir, &img.path), 2);
        }
        // Every name is found through the index; remove a third.
        for i in (0..made).step_by(3) {
            assert!(fs.lookup(dir, &name(i)).unwrap().is_some(), "entry {i}");
            fs.unlink(dir, &name(i)).unwrap();
        }
        fs.unmount().unwrap();
        e2fsck_clean(&img.path).unwrap_or_else(|e| panic!("large_dir {large_dir}: {e}"));
        let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
        let dir = fs.resolve("/big", true).unwrap();
        assert_eq!(
            fs.read_dir(dir).unwrap().len() as u32,
            made - made.div_ceil(3)
        );
        for i in (1..made).step_by(997) {
            let found = fs.lookup(dir, &name(i)).unwrap();
            assert_eq!(found.is_some(), i % 3 != 0, "entry {i}");
        }
    }
}

#[test]
fn more_than_65000_subdirectories_with_dir_nlink() {
    let img = make_empty_image(&["-t", "ext4", "-N", "70000"], 512);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let dir = fs.mkdir(ROOT, b"many", ME).unwrap();
    for i in 0..65_100u32 {
        fs.mkdir(dir, format!("d{i}").as_bytes(), ME).unwrap();
    }
    // Past 65,000 a dir_nlink directory counts 1 ("many"), as the kernel records it.
    assert_eq!(fs.metadata(dir).unwrap().nlink, 1);
    fs.rmdir(dir, b"d7").unwrap();
    assert_eq!(fs.metadata(dir).unwrap().nlink, 1);
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

#[test]
fn punching_every_other_block_builds_a_deep_extent_tree() {
    let img = make_empty_image(&["-t", "ext4", "-b", "1024"], 256);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"holes", ME).unwrap();
    let blocks = 60_000u64;
    fs.fallocate(ino, FallocateMode::Allocate, 0, blocks * 1024)
        .unwrap();
    fs.write_at(ino, 0, &vec![9u8; (blocks * 1024) as usize])
        .unwrap();
    for b in (0..blocks).step_by(2) {
        fs.fallocate(ino, FallocateMode::PunchHole, b * 1024, 1024)
            .unwrap();
    }
    let root = e4_format::extent::ExtentNode::parse(
        &fs.read_inode(ino).unwrap().record.block,
        e4_format::Location::Inode(ino),
    )
    .unwrap();
    assert!(root.header.depth >= 2, "depth {}", root.header.depth);
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    let data = fs.read_file(ino, 1 << 30).unwrap();
    for b in 0..blocks as usize {
        let want = if b % 2 == 0 { 0 } else { 9 };
        assert!(
            data[b * 1024..(b + 1) * 1024].iter().all(|&x| x == want),
            "block {b}"
        );
    }
}

/// Directory `dir`'s size in blocks and its runs of physically contiguous blocks, as
/// (first logical block, length).
fn directory_runs(fs: &Filesystem, dir: u32) -> (u64, Vec<(u64, u64)>) {
    let inode = fs.read_inode(dir).unwrap();
    let blocks = inode.size() / u64::from(fs.block_size());
    let (mut logical, mut runs, mut last_end) = (0, Vec::<(u64, u64)>::new(), None);
    while logical < blocks {
        let Ok(e4_fs::Mapping::Data { physical, len, .. }) = fs.map_block(&inode, logical, blocks)
        else {
            panic!("directory {dir} has a hole at block {logical}")
        };
        match runs.last_mut() {
            Some((_, run_len)) if last_end == Some(physical) => *run_len += len,
            _ => runs.push((logical, len)),
        }
        last_end = Some(physical + len);
        logical += len;
    }
    (blocks, runs)
}

/// Makes `files` entries of 58-byte names in each of `dirs`, one in each by turns, as
/// threads making files in their own directories do.
fn grow_by_turns(fs: &Filesystem, dirs: [u32; 2], files: u32) {
    for i in 0..files {
        for dir in dirs {
            let name = format!("entry-{i:06}-{}", "y".repeat(40));
            fs.create(dir, name.as_bytes(), ME).unwrap();
        }
    }
}

/// Past its first 256 blocks, a directory's runs are windows of about a quarter of its
/// size (the last may be cut short by the end of the directory): at least an eighth of
/// where they start.
fn assert_runs_grow_with_the_directory(runs: &[(u64, u64)]) {
    for &(start, len) in &runs[..runs.len() - 1] {
        assert!(
            start < 256 || len >= start / 8,
            "a run of {len} blocks at block {start}: {runs:?}"
        );
    }
}

/// Two directories growing by turns (as each thread's own directory does under creates from
/// every thread) take their blocks from reservation windows: a run of blocks each, not one
/// block each by turns; and a large directory's windows grow with it, so its runs do. Past
/// their first two blocks they continue in different parts of the volume, so each is one
/// run from there.
#[test]
fn directories_growing_by_turns_do_not_interleave_their_blocks() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096", "-N", "80000"], 256);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let dirs = [
        fs.mkdir(ROOT, b"a", ME).unwrap(),
        fs.mkdir(ROOT, b"b", ME).unwrap(),
    ];
    grow_by_turns(&fs, dirs, 36_000);
    for dir in dirs {
        let (blocks, runs) = directory_runs(&fs, dir);
        assert!(blocks > 700, "{blocks} blocks");
        assert!(runs.len() <= 3, "{} runs: {runs:?}", runs.len());
        // 2 blocks alone, then windows of 16, 32 and 64 blocks up to 256 blocks.
        let early = runs.iter().filter(|(start, _)| *start < 256).count();
        assert!(
            early <= 3 + 256 / 64 + 2,
            "{early} runs in 256 blocks: {runs:?}"
        );
        assert_runs_grow_with_the_directory(&runs);
    }
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// Colouring does not separate every pair: where a colour's part of the volume is smaller
/// than the directories, a directory grows into the part where the next colour's began.
/// Without reservation windows each would then take the block after the other's last by
/// turns, one extent per block; windows keep them in runs, and the runs grow with the
/// directories (about a quarter of their size past 256 blocks), where fixed 64-block windows
/// would give each one run per 64 blocks.
#[test]
fn directories_outgrowing_their_colour_take_runs_that_grow_with_them() {
    // 4,096-block groups without flex_bg: a colour's part is 256 blocks, and the two
    // directories (adjacent inode numbers) begin 256 blocks apart.
    let img = make_empty_image(
        &[
            "-t", "ext4", "-b", "4096", "-g", "4096", "-O", "^flex_bg", "-N", "220000",
        ],
        256,
    );
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    // Below a top-level directory, new directories go to their parent's group.
    let top = fs.mkdir(ROOT, b"top", ME).unwrap();
    let dirs = [
        fs.mkdir(top, b"a", ME).unwrap(),
        fs.mkdir(top, b"b", ME).unwrap(),
    ];
    grow_by_turns(&fs, dirs, 100_000);
    let group = |ino: u32| (ino - 1) / fs.superblock().inodes_per_group;
    assert_eq!(group(dirs[0]), group(dirs[1]), "the two must share a group");
    for dir in dirs {
        let (blocks, runs) = directory_runs(&fs, dir);
        assert!(blocks > 2000, "{blocks} blocks");
        // Chasing each other from the start, they take windows by turns: 19 runs each
        // (2026-12-07), 40 with 64-block windows throughout, one per block without windows.
        assert!(runs.len() <= 24, "{} runs: {runs:?}", runs.len());
        assert_runs_grow_with_the_directory(&runs);
    }
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}
