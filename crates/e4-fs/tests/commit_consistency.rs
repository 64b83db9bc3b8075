//! A commit writes while the next transaction's operations go on (the commit gate is closed
//! only while it gathers what to write). What it writes must still be exactly its own
//! transaction, so that the image as of each commit's flush is consistent: a device keeps a
//! copy of the image at every flush, and `e2fsck -fn` checks the copies.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e4_fs::device::{Device, Fault, FaultyDevice, MemoryDevice};
use e4_fs::{Creator, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image, IoGate};

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

/// A memory device whose writes take 50 µs (as a disk's do, against memory), so that a
/// commit's write-out overlaps many of the next transaction's operations.
struct SlowWrites(MemoryDevice);

impl Device for SlowWrites {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::thread::sleep(Duration::from_micros(50));
        self.0.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
}

#[test]
fn the_image_at_every_commit_is_consistent_while_operations_go_on() {
    let img = make_empty_image(&["-t", "ext4"], 64);
    // The image at every flush.
    let copies = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&copies);
    let device = Arc::new(SlowWrites(MemoryDevice::watching_flushes(
        std::fs::read(&img.path).unwrap(),
        move |image| kept.lock().unwrap().push(image.to_vec()),
    )));
    let options = OpenOptions {
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    };
    let fs = Filesystem::open_device(device, options).unwrap();
    let workers_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (fs, workers_done) = (&fs, &workers_done);
        // Commits, back to back, while the workers change directories, inode tables,
        // bitmaps and extent trees that every commit has just gathered.
        let committer = s.spawn(move || {
            while !workers_done.load(Ordering::Acquire) {
                fs.sync().unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let workers: Vec<_> = (0..2)
            .map(|t| {
                s.spawn(move || {
                    let dir = fs.mkdir(ROOT, format!("d{t}").as_bytes(), DIR).unwrap();
                    let data = vec![t as u8 + 1; 6000];
                    for i in 0..2500u32 {
                        let ino = fs.create(dir, format!("f{i}").as_bytes(), FILE).unwrap();
                        fs.write_at(ino, 0, &data[..(i as usize % 6000) + 1])
                            .unwrap();
                        if i % 3 == 2 {
                            fs.unlink(dir, format!("f{}", i - 1).as_bytes()).unwrap();
                        }
                        if i % 500 == 499 {
                            let sub = format!("s{i}");
                            fs.mkdir(dir, sub.as_bytes(), DIR).unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        workers_done.store(true, Ordering::Release);
        committer.join().unwrap();
    });
    fs.unmount().unwrap();
    let copies = std::mem::take(&mut *copies.lock().unwrap());
    assert!(copies.len() >= 4, "only {} flushes", copies.len());
    let dir = tempfile::tempdir().unwrap();
    // Every copy when there are few; otherwise 12 spread over the run, the last included.
    let step = copies.len().div_ceil(12);
    for (n, copy) in copies.iter().enumerate().rev().step_by(step) {
        let path = dir.path().join(format!("flush-{n}.img"));
        std::fs::write(&path, copy).unwrap();
        if let Err(e) = e2fsck_clean(&path) {
            panic!("the image at flush {n} of {}: {e}", copies.len());
        }
    }
}

/// A memory device that, once armed, holds the first write outside the journal's blocks
/// (a commit's first home write, made after its log write) until released.
struct HomeWriteGate {
    inner: MemoryDevice,
    /// The journal's blocks, as byte offsets.
    journal: std::collections::HashSet<u64>,
    gate: IoGate,
}

impl HomeWriteGate {
    /// A gate over `inner` whose journal lies at the byte offsets `journal`, not armed.
    fn new(inner: MemoryDevice, journal: std::collections::HashSet<u64>) -> Self {
        HomeWriteGate {
            inner,
            journal,
            gate: IoGate::default(),
        }
    }

    fn hold_if_home(&self, offset: u64) {
        if !self.journal.contains(&offset) {
            self.gate.hold_if_armed();
        }
    }
}

impl Device for HomeWriteGate {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.hold_if_home(offset);
        self.inner.write_all_at(buf, offset)
    }
    fn write_gathered_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.hold_if_home(offset);
        self.inner.write_gathered_at(bufs, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// The physical blocks of the journal inode of `image`, as byte offsets.
fn journal_offsets(image: &std::path::Path) -> std::collections::HashSet<u64> {
    let out = std::process::Command::new(e4_testkit::tool("debugfs"))
        .args(["-R", "blocks <8>"])
        .arg(image)
        .output()
        .unwrap();
    let blocks: std::collections::HashSet<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|b| b.parse::<u64>().unwrap() * 4096)
        .collect();
    assert!(blocks.len() >= 1024, "{blocks:?}");
    blocks
}

/// A commit writes its blocks to the log, then home; until the home writes are done the
/// device still holds the old contents, so the cache must hold on to those blocks until
/// then: one evicted and read back in between brings back the old contents, and the next
/// commit writes them over the committed change. Found at the fsck benchmark's scale (a
/// million entries, the 64 MiB cache full: entries of large directories lost, e2fsck
/// "unattached inode"). Here the commit is held at its first home write while another
/// thread pushes every other block out of a 64-block cache and lists the directory.
#[test]
fn a_block_is_never_read_back_stale_while_its_commit_writes_it_home() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096"], 64);
    let device = Arc::new(HomeWriteGate::new(
        MemoryDevice::new(std::fs::read(&img.path).unwrap()),
        journal_offsets(&img.path),
    ));
    let options = OpenOptions {
        cache_bytes: 64 * 4096,
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    };
    let fs = Filesystem::open_device(device.clone(), options).unwrap();
    // Directories of a block each, enough that every shard of the cache sees several.
    let crowd = fs.mkdir(ROOT, b"crowd", DIR).unwrap();
    let crowd_dirs: Vec<u32> = (0..2048)
        .map(|i| fs.mkdir(crowd, format!("c{i}").as_bytes(), DIR).unwrap())
        .collect();
    let dir = fs.mkdir(ROOT, b"d", DIR).unwrap();
    fs.create(dir, b"before", FILE).unwrap();
    fs.sync().unwrap();

    fs.create(dir, b"committed", FILE).unwrap();
    device.gate.arm();
    std::thread::scope(|s| {
        let committer = s.spawn(|| fs.sync());
        device.gate.wait_until_held();
        // The commit has logged "committed" and holds before writing it home. The
        // crowd's blocks pass through the cache meanwhile.
        for _ in 0..2 {
            for &crowded in &crowd_dirs {
                fs.read_dir(crowded).unwrap();
            }
        }
        let names: Vec<Vec<u8>> = fs
            .read_dir(dir)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        device.gate.release();
        committer.join().unwrap().unwrap();
        assert!(
            names.iter().any(|n| n == b"committed"),
            "the directory read back without the committed entry: {:?}",
            names
                .iter()
                .map(|n| String::from_utf8_lossy(n))
                .collect::<Vec<_>>()
        );
    });
    fs.unmount().unwrap();
    let path = img.path.with_extension("after");
    std::fs::write(&path, device.inner.bytes()).unwrap();
    e2fsck_clean(&path).unwrap();
}

/// A commit seals each block by the role it had in that commit's transaction, not by the
/// role the next transaction gives it meanwhile. A directory whose one block is full becomes
/// indexed at its next entry: block 0 turns from a leaf into the htree root. Done while the
/// commit of the leaf was still writing, the leaf was sealed as a root, which left it with
/// no checksum (e2fsck: "directory passes checks but fails checksum"; seen after an
/// `e4 import` killed at the right moment had its journal replayed). Without a journal a
/// commit seals each run of adjacent blocks just before writing it, so holding its first
/// write (the new inode's table block, below the directory's block) holds it between
/// taking the leaf and sealing it.
#[test]
fn a_commit_seals_a_block_by_its_role_in_that_commit() {
    let img = make_empty_image(&["-t", "ext4", "-O", "^has_journal", "-b", "1024"], 16);
    let copies = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&copies);
    let device = Arc::new(HomeWriteGate::new(
        MemoryDevice::watching_flushes(std::fs::read(&img.path).unwrap(), move |image| {
            kept.lock().unwrap().push(image.to_vec())
        }),
        std::collections::HashSet::new(),
    ));
    let options = OpenOptions {
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    };
    let fs = Filesystem::open_device(device.clone(), options).unwrap();
    let dir = fs.mkdir(ROOT, b"d", DIR).unwrap();
    // Four-byte names take 12 bytes each: 82 fill the 988 a 1 KiB leaf has for them.
    let name = |i: u32| format!("f{i:03}");
    for i in 0..81 {
        fs.create(dir, name(i).as_bytes(), FILE).unwrap();
    }
    fs.sync().unwrap();
    // The leaf's last entry, in the transaction the held commit takes.
    fs.create(dir, name(81).as_bytes(), FILE).unwrap();
    device.gate.arm();
    std::thread::scope(|s| {
        let committer = s.spawn(|| fs.sync());
        device.gate.wait_until_held();
        fs.create(dir, name(82).as_bytes(), FILE).unwrap();
        assert_ne!(
            fs.read_inode(dir).unwrap().flags() & e4_format::inode::flags::INDEX,
            0,
            "the directory was meant to become indexed while the commit is held"
        );
        device.gate.release();
        committer.join().unwrap().unwrap();
    });
    let held_commit = copies.lock().unwrap().last().unwrap().clone();
    fs.unmount().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (what, image) in [
        ("the image as the held commit left it", held_commit),
        ("the image after unmount", device.inner.bytes()),
    ] {
        let path = dir.path().join("image");
        std::fs::write(&path, image).unwrap();
        e2fsck_clean(&path).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}

/// A commit writes new inodes' records into their table blocks. A block no inode was ever
/// used in (past its group's `bg_itable_unused`) is made from zeros, not read: a read per
/// sixteen creates, with every operation stopped for the commit's gather, on a disk. A
/// block that already holds inodes is read, or their records would be lost: after a
/// remount, files made in the block the first ones left half full must stand beside them.
#[test]
fn a_commit_makes_blocks_of_new_inodes_without_reading_them() {
    let img = make_empty_image(&["-t", "ext4", "-O", "^has_journal"], 64);
    let mut image = std::fs::read(&img.path).unwrap();
    let name = |i: u32| format!("f{i}");
    for (round, files) in [(0, 0..1000), (1, 1000..1010)] {
        let device = Arc::new(FaultyDevice::new(MemoryDevice::new(image), Fault::Never));
        let fs = Filesystem::open_device(device.clone(), OpenOptions::writable()).unwrap();
        let dir = match fs.lookup(ROOT, b"d").unwrap() {
            Some(dir) => dir,
            None => fs.mkdir(ROOT, b"d", DIR).unwrap(),
        };
        let before = device.counts().0;
        for i in files {
            fs.create(dir, name(i).as_bytes(), FILE).unwrap();
        }
        fs.sync().unwrap();
        let reads = device.counts().0 - before;
        if round == 0 {
            // 1,000 new records fill 63 table blocks; what is read is bitmaps.
            assert!(reads < 8, "{reads} reads for 1,000 creates");
        }
        fs.unmount().unwrap();
        image = device.inner().bytes();
    }
    let path = img.path.with_extension("after");
    std::fs::write(&path, &image).unwrap();
    e2fsck_clean(&path).unwrap();
    let fs = Filesystem::open(&path, OpenOptions::default()).unwrap();
    let dir = fs.lookup(ROOT, b"d").unwrap().unwrap();
    for i in 0..1010 {
        let ino = fs.lookup(dir, name(i).as_bytes()).unwrap();
        let ino = ino.unwrap_or_else(|| panic!("{} lost", name(i)));
        assert_eq!(fs.read_inode(ino).unwrap().links_count(), 1, "{}", name(i));
    }
}

/// A commit's frees become reusable only once it has written its own blocks: until then
/// the image a crash would leave still has them in use (a freed extent leaf, say), and
/// data written into them would land in that image's metadata. Allocation takes blocks
/// anywhere with room, so a write aimed at a freed block does not reliably get it; what
/// the allocator counts as free shows the rule directly. While the commit of a truncate
/// is held at its first home write, the freed blocks are not free yet; once it has
/// written, they are. Planted bug: the frees handed to the allocator before the commit's
/// writes (the count rises while the commit is held).
#[test]
fn blocks_a_commit_frees_become_free_only_once_it_has_written() {
    let img = make_empty_image(&["-t", "ext4", "-O", "^has_journal", "-b", "1024"], 8);
    let device = Arc::new(HomeWriteGate::new(
        MemoryDevice::new(std::fs::read(&img.path).unwrap()),
        std::collections::HashSet::new(),
    ));
    let options = OpenOptions {
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    };
    let fs = Filesystem::open_device(device.clone(), options).unwrap();
    // Every second block: twelve extents, a tree with a leaf block.
    let doomed = fs.create(ROOT, b"doomed", FILE).unwrap();
    for i in 0..12u64 {
        fs.write_at(doomed, 2 * i * 1024, &[0x5a; 1024]).unwrap();
    }
    fs.sync().unwrap();
    let free_before = fs.statfs().free_blocks;
    fs.truncate(doomed, 0).unwrap();
    assert_eq!(
        fs.statfs().free_blocks,
        free_before,
        "blocks free before the commit"
    );
    device.gate.arm();
    let free_during = std::thread::scope(|s| {
        let committer = s.spawn(|| fs.sync());
        device.gate.wait_until_held();
        let free_during = fs.statfs().free_blocks;
        device.gate.release();
        committer.join().unwrap().unwrap();
        free_during
    });
    let free_after = fs.statfs().free_blocks;
    assert_eq!(
        free_during, free_before,
        "blocks free while the commit is held"
    );
    assert_eq!(
        free_after,
        free_before + 13,
        "the twelve data blocks and the leaf"
    );
    fs.unmount().unwrap();
    let path = img.path.with_extension("after");
    std::fs::write(&path, device.inner.bytes()).unwrap();
    e2fsck_clean(&path).unwrap();
}
