//! With a journal every transaction fits its log, however many groups an operation or a
//! run of operations touches (`ops/steps.rs`, `txn/commit.rs` `log_blocks_pending`): a
//! commit larger than the log is written around it (not crash-safe) and counted in
//! `JournalStats::unjournaled`, which must stay 0. The images have 1 KiB blocks in groups
//! of 256 blocks and the smallest log mke2fs makes (1024 blocks): 2,048 groups on 512 MiB,
//! so one bitmap per group touched is twice what the log holds.

use e4_fs::{Creator, FallocateMode, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image, Image};

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
const MIB: u64 = 1 << 20;

/// A 512 MiB image of `kind` (ext3 or ext4) with 2,048 groups and a 1024-block log, plus
/// `features` (`-O`).
fn many_groups(kind: &str, features: &str) -> Image {
    make_empty_image(
        &[
            "-t", kind, "-b", "1024", "-g", "256", "-J", "size=1", "-N", "8192", "-O", features,
        ],
        512,
    )
}

fn open(image: &Image) -> Filesystem {
    Filesystem::open(&image.path, OpenOptions::writable()).unwrap()
}

/// Fails unless no commit so far was written around the log.
fn assert_all_logged(fs: &Filesystem, after: &str) {
    let stats = fs.journal_stats().unwrap();
    assert_eq!(stats.unjournaled, 0, "after {after}: {stats:?}");
}

#[test]
fn allocating_punching_truncating_and_unlinking_across_thousands_of_groups_fit_the_log() {
    let image = many_groups("ext4", "^resize_inode");
    let fs = open(&image);
    let free = fs.statfs().free_blocks;
    let big = fs.create(ROOT, b"big", FILE).unwrap();
    fs.fallocate(big, FallocateMode::Allocate, 0, 400 * MIB)
        .unwrap();
    assert_all_logged(&fs, "a 400 MiB fallocate");
    assert_eq!(fs.metadata(big).unwrap().size, 400 * MIB);
    fs.write_at(big, 300 * MIB + 5, b"kept").unwrap();
    fs.fallocate(big, FallocateMode::PunchHole, 10 * MIB, 200 * MIB)
        .unwrap();
    assert_all_logged(&fs, "a 200 MiB punch");
    fs.truncate(big, 320 * MIB).unwrap();
    assert_all_logged(&fs, "a truncate freeing 80 MiB");
    assert_eq!(fs.metadata(big).unwrap().size, 320 * MIB);
    let mut kept = [0u8; 4];
    fs.read_at(big, 300 * MIB + 5, &mut kept).unwrap();
    assert_eq!(&kept, b"kept");
    // An unlinked file still open is freed at its last close, in steps too.
    let open_file = fs.create(ROOT, b"open", FILE).unwrap();
    fs.fallocate(open_file, FallocateMode::KeepSize, 0, 150 * MIB)
        .unwrap();
    fs.open_inode(open_file).unwrap();
    fs.unlink(ROOT, b"open").unwrap();
    fs.release_inode(open_file).unwrap();
    assert_all_logged(&fs, "the last close of an unlinked 150 MiB file");
    fs.unlink(ROOT, b"big").unwrap();
    assert_all_logged(&fs, "the unlink of a 120 MiB file over 1,000 groups");
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free, "every block came back");
    let stats = fs.journal_stats().unwrap();
    assert!(stats.commits > 10, "{stats:?}");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

#[test]
fn block_mapped_files_across_many_groups_are_freed_in_steps() {
    let image = many_groups("ext3", "^resize_inode");
    let fs = open(&image);
    let free = fs.statfs().free_blocks;
    let file = fs.create(ROOT, b"file", FILE).unwrap();
    let chunk = vec![0x5au8; MIB as usize];
    // Over 1,200 groups: their bitmaps alone outgrow the log.
    for i in 0..300 {
        fs.write_at(file, i * MIB, &chunk).unwrap();
    }
    fs.truncate(file, MIB + 7).unwrap();
    assert_all_logged(&fs, "a truncate of a 300 MiB block-mapped file to 1 MiB");
    for i in 0..300 {
        fs.write_at(file, i * MIB, &chunk).unwrap();
    }
    fs.unlink(ROOT, b"file").unwrap();
    assert_all_logged(&fs, "the unlink of a 300 MiB block-mapped file");
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free);
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// Many small operations, each changing the bitmap of another group (files in directories
/// spread over the volume, without flex_bg, one block allocated to each): the changed
/// groups count toward the commit, not only the dirty blocks and inodes.
#[test]
fn operations_each_in_another_group_commit_before_the_log_overflows() {
    let image = many_groups("ext4", "^resize_inode,^flex_bg");
    let fs = open(&image);
    let files: Vec<u32> = (0..1500)
        .map(|i| {
            let dir = fs.mkdir(ROOT, format!("d{i}").as_bytes(), DIR).unwrap();
            fs.create(dir, b"f", FILE).unwrap()
        })
        .collect();
    fs.sync().unwrap();
    for &file in &files {
        fs.fallocate(file, FallocateMode::KeepSize, 0, 1024)
            .unwrap();
    }
    assert_all_logged(&fs, "1,500 one-block fallocates in as many groups");
    for (i, _) in files.iter().enumerate() {
        let dir = fs.resolve(&format!("/d{i}"), false).unwrap();
        fs.unlink(dir, b"f").unwrap();
    }
    assert_all_logged(&fs, "1,500 unlinks in as many groups");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// A delete in steps that fails part-way (a read that fails, at each of its reads in turn) leaves the file whole or an orphan partly freed, never lost
/// blocks: the unmount frees what the orphan still holds, and e2fsck finds the image
/// clean. Transactions are bounded to 24 blocks (`OpenOptions::transaction_limit`), so a
/// 20 MiB file over 1 MiB groups takes several steps with commits between them.
#[test]
fn a_delete_in_steps_that_fails_part_way_loses_nothing() {
    use e4_fs::device::{Device, Fault, FaultyDevice, MemoryDevice};
    use std::sync::Arc;

    let image = make_empty_image(
        &[
            "-t",
            "ext4",
            "-b",
            "4096",
            "-g",
            "256",
            "-O",
            "^resize_inode",
        ],
        64,
    );
    {
        let fs = open(&image);
        let file = fs.create(ROOT, b"wide", FILE).unwrap();
        let chunk = vec![0x77u8; MIB as usize];
        for i in 0..20 {
            fs.write_at(file, i * MIB, &chunk).unwrap();
        }
        fs.unmount().unwrap();
    }
    let base = std::fs::read(&image.path).unwrap();
    let options = OpenOptions {
        transaction_limit: Some(24),
        commit_interval: std::time::Duration::ZERO,
        ..OpenOptions::writable()
    };
    let run = |fault: Option<Fault>| {
        let device = Arc::new(FaultyDevice::new(
            MemoryDevice::new(base.clone()),
            Fault::Never,
        ));
        let fs =
            Filesystem::open_device(device.clone() as Arc<dyn Device>, options.clone()).unwrap();
        let reads_before = device.counts().0;
        device.set_fault(match fault {
            Some(Fault::Read(n)) => Fault::Read(reads_before + n),
            Some(Fault::CorruptRead(n)) => Fault::CorruptRead(reads_before + n),
            _ => Fault::Never,
        });
        let outcome = fs.unlink(ROOT, b"wide");
        let reads = device.counts().0 - reads_before;
        device.set_fault(Fault::Never);
        let name_left = fs.lookup(ROOT, b"wide").unwrap().is_some();
        fs.unmount().unwrap();
        (outcome, reads, name_left, device.inner().bytes())
    };
    let (outcome, reads, _, _) = run(None);
    outcome.unwrap();
    assert!(reads >= 3, "the steps read {reads} blocks");
    let mut stopped_part_way = 0;
    let checked = image.path.with_extension("checked");
    // A damaged bitmap (CorruptRead) fails its check as a failed read does.
    for fault in (0..reads).map(Fault::Read) {
        let (outcome, _, name_left, bytes) = run(Some(fault));
        assert!(
            outcome.is_err() || !name_left,
            "{fault:?}: unlinked, yet named"
        );
        if outcome.is_err() && !name_left {
            stopped_part_way += 1;
        }
        std::fs::write(&checked, bytes).unwrap();
        e2fsck_clean(&checked).unwrap_or_else(|e| panic!("{fault:?} ({outcome:?}): {e}"));
    }
    assert!(
        stopped_part_way > 0,
        "no fault fell between the unlink and the last step"
    );
}
