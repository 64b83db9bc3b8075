//! The write path at its edges: files unlinked while open, a full filesystem (blocks and
//! inodes) with concurrent writers, injected I/O errors, and very large and very sparse files.
//! Every image that is written ends with `e2fsck -fn`.

use std::sync::Arc;

use e4_format::inode::FileType;
use e4_format::superblock::{Superblock, SUPERBLOCK_OFFSET};
use e4_fs::device::{Device, Fault, FaultyDevice, MemoryDevice};
use e4_fs::{Creator, Error, FallocateMode, Filesystem, OpenOptions, Shortage};
use e4_testkit::{e2fsck_clean, make_empty_image};

const ROOT: u32 = 2;
const ME: Creator = Creator {
    permissions: 0o600,
    uid: 0,
    gid: 0,
    umask: 0,
};

fn superblock_of(path: &std::path::Path) -> Superblock {
    let bytes = std::fs::read(path).unwrap();
    Superblock::decode_checked(
        &bytes[SUPERBLOCK_OFFSET as usize..SUPERBLOCK_OFFSET as usize + 1024],
    )
    .unwrap()
}

#[test]
fn a_file_unlinked_while_open_lives_until_its_last_close() {
    let img = make_empty_image(&["-t", "ext4"], 32);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"victim", ME).unwrap();
    fs.write_at(ino, 0, &vec![7u8; 100_000]).unwrap();
    let free_with_file = fs.statfs().free_blocks;
    fs.open_inode(ino).unwrap();
    fs.unlink(ROOT, b"victim").unwrap();
    fs.sync().unwrap();
    // On disk it is an orphan: the superblock's list starts at it, its blocks are in use.
    assert_eq!(superblock_of(&img.path).last_orphan, ino);
    let mut back = vec![0u8; 100_000];
    assert_eq!(fs.read_at(ino, 0, &mut back).unwrap(), 100_000);
    assert!(back.iter().all(|&b| b == 7));
    assert_eq!(fs.lookup(ROOT, b"victim").unwrap(), None);
    fs.release_inode(ino).unwrap();
    fs.sync().unwrap();
    assert_eq!(superblock_of(&img.path).last_orphan, 0);
    assert!(fs.statfs().free_blocks > free_with_file);
    // A number kept past the last unlink, without an open, is stale: writing through it
    // must not reach whatever file gets the number next.
    let stale = fs.create(ROOT, b"stale", ME).unwrap();
    fs.unlink(ROOT, b"stale").unwrap();
    assert!(matches!(
        fs.write_at(stale, 0, b"x"),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(fs.truncate(stale, 10), Err(Error::NotFound(_))));
    // Another one is still open at unmount: unmount frees it.
    let other = fs.create(ROOT, b"other", ME).unwrap();
    fs.write_at(other, 0, b"x").unwrap();
    fs.open_inode(other).unwrap();
    fs.unlink(ROOT, b"other").unwrap();
    fs.unmount().unwrap();
    assert_eq!(superblock_of(&img.path).last_orphan, 0);
    e2fsck_clean(&img.path).unwrap();
}

/// Several opens of an inode (a FUSE mount's lookups) given back at once: the inode lives
/// until the last is, and a release of more than are held changes nothing.
#[test]
fn opens_given_back_at_once_free_an_unlinked_file_only_with_the_last() {
    let img = make_empty_image(&["-t", "ext4"], 32);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"looked-up", ME).unwrap();
    fs.write_at(ino, 0, &vec![3u8; 50_000]).unwrap();
    for _ in 0..3 {
        fs.open_inode(ino).unwrap();
    }
    fs.unlink(ROOT, b"looked-up").unwrap();
    fs.release_inode_times(ino, 2).unwrap();
    fs.sync().unwrap();
    assert_eq!(
        superblock_of(&img.path).last_orphan,
        ino,
        "one open is left"
    );
    assert!(matches!(
        fs.release_inode_times(ino, 2),
        Err(Error::Invalid(_))
    ));
    assert_eq!(
        fs.read_at(ino, 0, &mut [0u8; 10]).unwrap(),
        10,
        "still open once"
    );
    fs.release_inode_times(ino, 1).unwrap();
    fs.sync().unwrap();
    assert_eq!(
        superblock_of(&img.path).last_orphan,
        0,
        "freed with the last"
    );
    assert!(matches!(
        fs.release_inode_times(ino, 1),
        Err(Error::NotFound(_) | Error::Invalid(_))
    ));
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// A write the filesystem cannot hold whole stops short only when the space is truly gone:
/// blocks other files' reservation windows hold, which statfs counts free, are given back
/// first (the kernel discards preallocations before it stops), before the write starts:
/// it stays one transaction (crash_states' move in pieces finds a write split by a commit).
#[test]
fn a_write_stops_short_only_when_no_window_holds_free_space() {
    let img = make_empty_image(&["-t", "ext4", "-m", "0"], 16);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    // Small files that keep growing get reservation windows past their ends.
    let growing: Vec<u32> = (0..8)
        .map(|i| {
            let ino = fs.create(ROOT, format!("g{i}").as_bytes(), ME).unwrap();
            for k in 0..4u64 {
                fs.write_at(ino, k * 4096, &[i as u8; 4096]).unwrap();
            }
            ino
        })
        .collect();
    let ino = fs.create(ROOT, b"big", ME).unwrap();
    let free = fs.statfs().free_blocks as usize;
    let data = vec![0x5Au8; (free + 64) * fs.block_size() as usize];
    let written = fs.write_at(ino, 0, &data).unwrap();
    assert!(written < data.len());
    let left = fs.statfs();
    assert!(
        left.available_blocks < 16,
        "the write stopped at {} of {} bytes with {} blocks available",
        written,
        data.len(),
        left.available_blocks
    );
    for (i, g) in growing.iter().enumerate() {
        assert_eq!(fs.read_file(*g, 1 << 20).unwrap(), vec![i as u8; 4 * 4096]);
    }
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

#[test]
fn concurrent_writers_fill_the_filesystem_exactly() {
    let img = make_empty_image(&["-t", "ext4", "-m", "0"], 24);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let free_before = fs.statfs().free_blocks;
    let threads = 8;
    let inos: Vec<u32> = (0..threads)
        .map(|t| fs.create(ROOT, format!("w{t}").as_bytes(), ME).unwrap())
        .collect();
    let sizes: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = inos
            .iter()
            .enumerate()
            .map(|(t, &ino)| {
                let fs = &fs;
                s.spawn(move || {
                    let chunk = vec![t as u8 + 1; 4096];
                    let mut size = 0u64;
                    loop {
                        match fs.write_at(ino, size, &chunk) {
                            Ok(n) => size += n as u64,
                            Err(Error::NoSpace(_)) => return size,
                            Err(e) => panic!("writer {t}: {e}"),
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let written: u64 = sizes.iter().sum::<u64>() / 4096;
    let st = fs.statfs();
    // Nothing over-committed: the data plus what is left never exceeds what was free, and
    // at most the extent-tree blocks are unaccounted for.
    assert!(
        written <= free_before,
        "{written} blocks written of {free_before}"
    );
    assert!(written + st.free_blocks <= free_before);
    // What is left is the kernel's metadata reserve (counted free, as `df` counts it, but
    // not available) and at most a few blocks no writer could use.
    assert!(
        st.available_blocks < 64,
        "{} blocks still available after ENOSPC",
        st.available_blocks
    );
    assert!(
        st.free_blocks >= st.available_blocks + 100,
        "the metadata reserve was spent on data"
    );
    for (t, &ino) in inos.iter().enumerate() {
        let data = fs.read_file(ino, 1 << 30).unwrap();
        assert_eq!(data.len() as u64, sizes[t]);
        assert!(data.iter().all(|&b| b == t as u8 + 1), "writer {t}'s data");
    }
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
    // statfs after reopening agrees with what the writers saw.
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    assert_eq!(fs.statfs().free_blocks, st.free_blocks);
}

/// The physical blocks of file `ino`.
fn blocks_of(fs: &Filesystem, ino: u32) -> Vec<u64> {
    let inode = fs.read_inode(ino).unwrap();
    let bs = u64::from(fs.block_size());
    let mut out = Vec::new();
    for logical in 0..inode.size().div_ceil(bs) {
        if let e4_fs::Mapping::Data { physical, .. } = fs.map_block(&inode, logical, 1).unwrap() {
            out.push(physical);
        }
    }
    out
}

/// Files written as an archive is unpacked (a few blocks first, the rest after, one file
/// after another from one thread) each lie in one run: a packed small file that grows takes
/// over the rest of its packing window, and the next file is packed after it.
#[test]
fn a_small_file_that_grows_stays_contiguous_and_the_next_is_packed_after_it() {
    // 4 KiB blocks, so that tar's first write is a small file's three blocks.
    let img = make_empty_image(&["-t", "ext4", "-b", "4096"], 64);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let bs = fs.block_size() as usize;
    let mut files = Vec::new();
    for (i, blocks) in [40usize, 3, 25, 1, 60].into_iter().enumerate() {
        let ino = fs.create(ROOT, format!("f{i}").as_bytes(), ME).unwrap();
        // tar's first write: 9,728 bytes, then the rest.
        let first = 9728.min(blocks * bs);
        fs.write_at(ino, 0, &vec![i as u8 + 1; first]).unwrap();
        if blocks * bs > first {
            fs.write_at(ino, first as u64, &vec![i as u8 + 1; blocks * bs - first])
                .unwrap();
        }
        files.push((ino, blocks));
    }
    let mut runs = Vec::new();
    for &(ino, blocks) in &files {
        let physical = blocks_of(&fs, ino);
        assert_eq!(physical.len(), blocks);
        assert!(
            physical.windows(2).all(|w| w[1] == w[0] + 1),
            "inode {ino} of {blocks} blocks is not one run: {physical:?}"
        );
        runs.push((physical[0], physical[physical.len() - 1]));
    }
    runs.sort_unstable();
    assert!(
        runs.windows(2).all(|w| w[0].1 < w[1].0),
        "files overlap: {runs:?}"
    );
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// A packed small file's growth that fails part-way (its data write, from the first on)
/// leaves the file as it was and keeps no block; the retried growth and the next small file
/// lie apart, and the image is e2fsck-clean.
#[test]
fn a_failed_growth_of_a_packed_file_loses_nothing() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096"], 64);
    let bytes = std::fs::read(&img.path).unwrap();
    let device = Arc::new(FaultyDevice::new(MemoryDevice::new(bytes), Fault::Never));
    let fs = Filesystem::open_device(device.clone(), OpenOptions::writable()).unwrap();
    let bs = fs.block_size() as usize;
    let ino = fs.create(ROOT, b"grows", ME).unwrap();
    fs.write_at(ino, 0, &vec![1u8; 3 * bs]).unwrap();
    let packed = blocks_of(&fs, ino);
    let free = fs.statfs().free_blocks;
    // The growth's one data write fails (every write after it is the commit's).
    let (_, writes_so_far, _) = device.counts();
    device.set_fault(Fault::WritesFrom(writes_so_far));
    let grown = fs.write_at(ino, 3 * bs as u64, &vec![2u8; 20 * bs]);
    device.set_fault(Fault::Never);
    assert!(matches!(grown, Err(Error::Io { .. })), "{grown:?}");
    assert_eq!(
        blocks_of(&fs, ino),
        packed,
        "the failed growth mapped blocks"
    );
    assert_eq!(fs.metadata(ino).unwrap().size, 3 * bs as u64);
    assert_eq!(
        fs.statfs().free_blocks,
        free,
        "the failed growth kept blocks"
    );
    // The retry goes on where the failed one's blocks were given back from (the front
    // of the window it took over has moved past them, as any window's does).
    fs.write_at(ino, 3 * bs as u64, &vec![2u8; 20 * bs])
        .unwrap();
    let physical = blocks_of(&fs, ino);
    assert_eq!(physical.len(), 23);
    let next = fs.create(ROOT, b"next", ME).unwrap();
    fs.write_at(next, 0, &vec![3u8; 2 * bs]).unwrap();
    assert!(blocks_of(&fs, next).iter().all(|b| !physical.contains(b)));
    fs.unmount().unwrap();
    let copy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(copy.path(), device.inner().bytes()).unwrap();
    e2fsck_clean(copy.path()).unwrap();
}

#[test]
fn freed_blocks_are_reused_only_after_the_commit() {
    let img = make_empty_image(&["-t", "ext4", "-m", "0"], 16);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let a = fs.create(ROOT, b"a", ME).unwrap();
    fs.write_at(a, 0, &vec![1u8; 400 << 10]).unwrap();
    fs.sync().unwrap();
    let freed = blocks_of(&fs, a);
    fs.truncate(a, 0).unwrap();
    // Same transaction: the freed blocks may still be needed (a crash before the commit
    // leaves `a` as it was), so nothing new may be put there.
    let b = fs.create(ROOT, b"b", ME).unwrap();
    fs.write_at(b, 0, &vec![2u8; 400 << 10]).unwrap();
    assert!(blocks_of(&fs, b).iter().all(|p| !freed.contains(p)));
    // Fill what is left: the allocation that finds no room commits, and then may use them.
    let c = fs.create(ROOT, b"c", ME).unwrap();
    let mut size = 0u64;
    while let Ok(n) = fs.write_at(c, size, &[3u8; 4096]) {
        size += n as u64;
    }
    assert!(
        blocks_of(&fs, c).iter().any(|p| freed.contains(p)),
        "freed blocks never reused"
    );
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

#[test]
fn a_full_filesystem_with_pending_frees_is_not_full() {
    let img = make_empty_image(&["-t", "ext4", "-m", "0"], 16);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"f", ME).unwrap();
    let mut size = 0u64;
    while let Ok(n) = fs.write_at(ino, size, &[5u8; 65536]) {
        size += n as u64;
    }
    // Free it all; the space is pending until a commit, yet writing must succeed at once.
    fs.truncate(ino, 0).unwrap();
    assert_eq!(
        fs.write_at(ino, 0, &vec![6u8; (size / 2) as usize])
            .unwrap() as u64,
        size / 2
    );
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// A directory past its first blocks holds a reservation window; when the only free blocks
/// left are in it, a create elsewhere that needs a new directory block takes them back (as a
/// write does) instead of reporting a full volume that statfs shows as not full.
#[test]
fn blocks_held_in_a_directory_window_are_not_a_full_volume() {
    // Small, so that the kernel's metadata reserve (2 % of the blocks, which statfs does not
    // count as available) is below what the window holds.
    let img = make_empty_image(
        &[
            "-t",
            "ext4",
            "-b",
            "4096",
            "-m",
            "0",
            "-N",
            "4096",
            "-O",
            "^has_journal",
        ],
        4,
    );
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let name = |dir: &str, i: u32| format!("{dir}-{i:05}-{}", "n".repeat(200)).into_bytes();
    let grower = fs.mkdir(ROOT, b"grower", ME).unwrap();
    let other = fs.mkdir(ROOT, b"other", ME).unwrap();
    // Blocks statfs never counts as available (the kernel's metadata reserve).
    let start = fs.statfs();
    let reserve = start.free_blocks - start.available_blocks;
    // Leave 150 blocks, then grow one directory to 60 blocks: its fourth window (64
    // blocks, taken at block 50) holds 54 of them unused, more than the reserve.
    let filler = fs.create(ROOT, b"filler", ME).unwrap();
    let fill = fs.statfs().available_blocks - 150;
    fs.fallocate(filler, FallocateMode::Allocate, 0, fill * 4096)
        .unwrap();
    let mut i = 0;
    while fs.metadata(grower).unwrap().size < 60 * 4096 {
        fs.create(grower, &name("g", i), ME).unwrap();
        i += 1;
    }
    // The other directory grows until the volume is really full.
    let mut made = 0;
    loop {
        match fs.create(other, &name("o", made), ME) {
            Ok(_) => made += 1,
            Err(Error::NoSpace(what)) => {
                assert_eq!(what, Shortage::Blocks);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let free = fs.statfs().free_blocks;
    assert!(
        free <= reserve,
        "no space reported with {free} blocks free, reserve {reserve} ({made} files)"
    );
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// Ordinary writers stop at the kernel's metadata reserve (2 % of the filesystem), and a
/// punch that must split an extent on the full filesystem takes its new tree block from it,
/// as the kernel's EXT4_GET_BLOCKS_METADATA_NOFAIL does.
#[test]
fn a_punch_on_a_full_filesystem_splits_its_extent_from_the_metadata_reserve() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096", "-m", "0"], 64);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let reserve = (64 << 20) / 4096 / 50;
    // Four extents: the most the inode's root holds.
    let holes = fs.create(ROOT, b"holes", ME).unwrap();
    for k in 0..4u64 {
        fs.fallocate(holes, FallocateMode::Allocate, k * 32 * 4096, 16 * 4096)
            .unwrap();
    }
    let filler = fs.create(ROOT, b"filler", ME).unwrap();
    let mut offset = 0u64;
    for chunk in [64 * 4096, 4096] {
        loop {
            match fs.write_at(filler, offset, &vec![7u8; chunk]) {
                Ok(0) => break,
                Ok(n) => offset += n as u64,
                Err(Error::NoSpace(_)) => break,
                Err(e) => panic!("{e}"),
            }
        }
    }
    let full = fs.statfs();
    assert_eq!(full.available_blocks, 0);
    assert_eq!(
        full.free_blocks, reserve,
        "ordinary writes stop at the metadata reserve"
    );
    // A hole in the middle of the first extent makes five: the root must move to a block.
    fs.fallocate(holes, FallocateMode::PunchHole, 4 * 4096, 4096)
        .unwrap();
    assert!(fs.statfs().free_blocks < reserve + 1);
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// Every inode can be used, no more; a freed one is reused only after a commit.
#[test]
fn inode_exhaustion_is_exact() {
    let img = make_empty_image(&["-t", "ext4", "-N", "256"], 16);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let free = fs.statfs().free_inodes;
    let mut made = 0u64;
    loop {
        match fs.create(ROOT, format!("f{made}").as_bytes(), ME) {
            Ok(_) => made += 1,
            Err(Error::NoSpace(what)) => {
                assert_eq!(what, Shortage::Inodes);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(made, free);
    assert_eq!(fs.statfs().free_inodes, 0);
    // A full inode table hides neither a name that exists nor a parent that is no
    // directory: those are reported, as the kernel reports them, before "no space".
    assert!(matches!(fs.create(ROOT, b"f1", ME), Err(Error::Exists(_))));
    let file = fs.lookup(ROOT, b"f1").unwrap().unwrap();
    assert!(matches!(
        fs.create(file, b"x", ME),
        Err(Error::NotADirectory(_))
    ));
    assert_eq!(fs.statfs().free_inodes, 0);
    // A freed number counts as free at once, but is handed out again only after the
    // transaction that freed it is written: the create that needs it commits first.
    let first = fs.lookup(ROOT, b"f0").unwrap().unwrap();
    fs.unlink(ROOT, b"f0").unwrap();
    assert_eq!(fs.statfs().free_inodes, 1);
    let commits = fs.lock_stats().commits;
    assert_eq!(fs.create(ROOT, b"again", ME).unwrap(), first);
    assert_eq!(fs.lock_stats().commits, commits + 1);
    assert_eq!(fs.statfs().free_inodes, 0);
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

#[test]
fn large_and_sparse_files() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096", "-O", "^large_file"], 64);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"big", ME).unwrap();
    // Past 4 GiB (needs large_file, which is switched on) and near the 16 TiB extent limit.
    fs.write_at(ino, 5 << 30, b"five gib").unwrap();
    let last = ((1u64 << 32) - 1) * 4096;
    fs.write_at(ino, last - 8, b"the end!").unwrap();
    assert!(matches!(
        fs.write_at(ino, last, b"x"),
        Err(Error::FileTooBig(_))
    ));
    fs.fallocate(ino, FallocateMode::KeepSize, 1 << 40, 1 << 20)
        .unwrap();
    let mut buf = [0u8; 8];
    fs.read_at(ino, 5 << 30, &mut buf).unwrap();
    assert_eq!(&buf, b"five gib");
    fs.read_at(ino, 1 << 40, &mut buf).unwrap();
    assert_eq!(buf, [0; 8]);
    assert_eq!(fs.metadata(ino).unwrap().size, last);
    fs.unmount().unwrap();
    assert!(superblock_of(&img.path)
        .ro_compat()
        .contains(e4_format::features::RoCompatFeatures::LARGE_FILE));
    e2fsck_clean(&img.path).unwrap();
}

/// Operations on a device that fails: errors, never panics, and after a failed commit no
/// further change is accepted (the image would need e2fsck).
#[test]
fn injected_io_errors_are_errors() {
    let img = make_empty_image(&["-t", "ext4"], 16);
    let bytes = std::fs::read(&img.path).unwrap();
    for fail_from in [0u64, 1, 3, 10, 40] {
        let device = Arc::new(FaultyDevice::new(
            MemoryDevice::new(bytes.clone()),
            Fault::Never,
        ));
        let fs = Filesystem::open_device(device.clone(), OpenOptions::writable()).unwrap();
        let dir = fs.mkdir(ROOT, b"d", ME).unwrap();
        let (_, writes_so_far, _) = device.counts();
        device.set_fault(Fault::WritesFrom(writes_so_far + fail_from));
        let mut failed = false;
        for i in 0..200 {
            let r = fs
                .create(dir, format!("f{i}").as_bytes(), ME)
                .and_then(|ino| fs.write_at(ino, 0, &[1u8; 10_000]).map(drop))
                .and_then(|()| if i % 20 == 0 { fs.sync() } else { Ok(()) });
            if let Err(e) = r {
                assert!(matches!(e, Error::Io { .. } | Error::ReadOnly(_)), "{e}");
                failed = true;
            }
        }
        assert!(failed, "no write failed from write {fail_from}");
        // A failed data write changes nothing on disk; a failed commit may have, and then
        // nothing more is accepted.
        assert!(fs.sync().is_err());
        assert!(matches!(
            fs.create(dir, b"late", ME),
            Err(Error::ReadOnly(_))
        ));
        assert!(fs.unmount().is_err());
    }
    // Reads that fail during an operation.
    let device = Arc::new(FaultyDevice::new(MemoryDevice::new(bytes), Fault::Never));
    let fs = Filesystem::open_device(device.clone(), OpenOptions::writable()).unwrap();
    device.set_fault(Fault::ReadsFrom(0));
    for i in 0..50 {
        let _ = fs.mkdir(ROOT, format!("d{i}").as_bytes(), ME);
        let _ = fs.read_dir(ROOT);
    }
    device.set_fault(Fault::Never);
    drop(fs);
    let _ = device.inner().size();
}

/// A directory leaf is checked whole (every record of its chain) the first time it is read,
/// with or without metadata_csum, and editors trust that check: a leaf whose chain breaks
/// partway is an error for a create, and is left as it was, rather than taking the new
/// name in a slot before the break and being written back broken.
#[test]
fn a_create_in_a_leaf_with_a_broken_chain_is_an_error_and_changes_nothing() {
    let img = make_empty_image(&["-t", "ext4", "-O", "^metadata_csum"], 32);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let dir = fs.mkdir(ROOT, b"d", ME).unwrap();
    for i in 0..20 {
        fs.create(dir, format!("f{i}").as_bytes(), ME).unwrap();
    }
    // f4's record takes f5's bytes: a slot with room ahead of the damage.
    fs.unlink(dir, b"f5").unwrap();
    fs.unmount().unwrap();
    let out = std::process::Command::new(e4_testkit::tool("debugfs"))
        .args(["-R", "bmap /d 0"])
        .arg(&img.path)
        .output()
        .unwrap();
    let leaf: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let bs = superblock_of(&img.path).block_size() as usize;
    let mut image = std::fs::read(&img.path).unwrap();
    let block = &mut image[leaf * bs..(leaf + 1) * bs];
    let mut at = 0;
    while &block[at + 8..at + 8 + usize::from(block[at + 6])] != b"f10" {
        let rec_len = usize::from(u16::from_le_bytes([block[at + 4], block[at + 5]]));
        assert!(rec_len >= 12, "not a directory leaf at offset {at}");
        at += rec_len;
    }
    let intact = block.to_vec();
    block[at + 4..at + 6].fill(0);
    let damaged = block.to_vec();
    std::fs::write(&img.path, &image).unwrap();

    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let created = fs.create(dir, b"new", ME);
    assert!(matches!(created, Err(Error::Format(_))), "{created:?}");
    fs.unmount().unwrap();
    let mut image = std::fs::read(&img.path).unwrap();
    assert_eq!(
        &image[leaf * bs..(leaf + 1) * bs],
        &damaged[..],
        "the damaged leaf was rewritten"
    );
    // With the leaf mended, the rest of what e4 wrote (the failed create's inode given
    // back, the unmount) must be clean.
    image[leaf * bs..(leaf + 1) * bs].copy_from_slice(&intact);
    std::fs::write(&img.path, &image).unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// `fallocate` answers as the kernel's `vfs_fallocate` for anything but a regular file
/// (EISDIR, ESPIPE, ENODEV), whatever the mode, and changes nothing.
#[test]
fn fallocate_on_other_kinds_of_file_fails_as_in_the_kernel() {
    let img = make_empty_image(&["-t", "ext4"], 32);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let dir = fs.mkdir(ROOT, b"dir", ME).unwrap();
    let node = |name: &[u8], kind| fs.mknod(ROOT, name, kind, (8, 1), ME).unwrap();
    let fifo = node(b"fifo", FileType::Fifo);
    let chr = node(b"chr", FileType::CharDevice);
    let blk = node(b"blk", FileType::BlockDevice);
    let sock = node(b"sock", FileType::Socket);
    let link = fs.symlink(ROOT, b"link", b"dir", ME).unwrap();
    for mode in [
        FallocateMode::Allocate,
        FallocateMode::KeepSize,
        FallocateMode::PunchHole,
    ] {
        let got = |ino| fs.fallocate(ino, mode, 0, 4096);
        assert!(matches!(got(dir), Err(Error::IsADirectory(_))), "{mode:?}");
        assert!(matches!(got(fifo), Err(Error::IllegalSeek(_))), "{mode:?}");
        for ino in [chr, blk, sock, link] {
            assert!(
                matches!(got(ino), Err(Error::NoDevice(_))),
                "{mode:?} {ino}"
            );
        }
    }
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// Operations commit by themselves once as many blocks are dirty as the buffer cache holds
/// (and not at half of it, which made two benchmark threads commit where one did not).
/// Without a journal: with one, a transaction's bound is the log's, whose rule is
/// `journal_recovery::every_transaction_fits_the_log`'s subject.
#[test]
fn operations_commit_once_the_buffer_cache_capacity_is_dirty() {
    let img = make_empty_image(
        &[
            "-t",
            "ext4",
            "-O",
            "^has_journal",
            "-b",
            "4096",
            "-I",
            "256",
        ],
        64,
    );
    let capacity = 256;
    let options = OpenOptions {
        cache_bytes: capacity * 4096,
        commit_interval: std::time::Duration::ZERO,
        // The operation that crosses the threshold commits, not a thread some time after.
        commit_thread: false,
        ..OpenOptions::writable()
    };
    let fs = Filesystem::open(&img.path, options).unwrap();
    // An unlink writes the inode's record into its inode-table block: a new dirty block
    // every 16 unlinks (256-byte inodes, 4 KiB blocks), beside the directory's own blocks.
    let inodes_per_block = 16;
    let files = 2 * capacity * inodes_per_block;
    for n in 0..files {
        fs.create(ROOT, format!("f{n}").as_bytes(), ME).unwrap();
    }
    fs.sync().unwrap();
    let before = fs.lock_stats().commits;
    let first_commit = (0..files).find(|n| {
        fs.unlink(ROOT, format!("f{n}").as_bytes()).unwrap();
        fs.lock_stats().commits > before
    });
    let first_commit = first_commit.expect("no commit with twice the cache's blocks dirty");
    let at_capacity = capacity * inodes_per_block;
    assert!(
        (at_capacity * 3 / 4..=at_capacity + inodes_per_block).contains(&first_commit),
        "first commit after {first_commit} unlinks, with a cache of {capacity} blocks"
    );
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}
