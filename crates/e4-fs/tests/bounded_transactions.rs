//! With a journal every transaction fits its log, however many groups or inode-table
//! blocks an operation or a run of operations touches (`ops/steps.rs`, `txn/commit.rs`
//! `log_blocks_pending`): a commit larger than the log is written around it (not
//! crash-safe) and counted in `JournalStats::unjournaled`, which must stay 0. The images
//! have 1 KiB blocks in groups of 256 blocks and the smallest log mke2fs makes (1024
//! blocks): 2,048 groups on 512 MiB, so one bitmap per group touched is twice what the log
//! holds.

use e4_fs::{Creator, FallocateMode, Filesystem, OpenOptions, RenameMode, SetAttributes};
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
    small_groups(kind, 512, &["-N", "8192", "-O", features])
}

/// An image of `kind` and `mib` MiB with 1 KiB blocks in groups of 256 (256 KiB) and the
/// smallest log mke2fs makes (1,024 blocks), with `more` arguments to mke2fs.
fn small_groups(kind: &str, mib: u64, more: &[&str]) -> Image {
    let mut args = vec!["-t", kind, "-b", "1024", "-g", "256", "-J", "size=1"];
    args.extend_from_slice(more);
    make_empty_image(&args, mib)
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
    // Each run's extent declares a split at every level of the tree: a step's allocation
    // declares more than its room, and stops to go on in a new handle, not on the margin.
    assert_eq!(fs.journal_stats().unwrap().room_overdrafts, 0);
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
    // Zeroing allocates the 200 MiB punched and frees 80 MiB still mapped; a collapse
    // then frees all 280 MiB and moves what follows down by as much.
    fs.write_at(big, 310 * MIB, b"moved").unwrap();
    fs.fallocate(big, FallocateMode::ZeroRange, 10 * MIB, 280 * MIB)
        .unwrap();
    assert_all_logged(&fs, "a 280 MiB zero range");
    fs.fallocate(big, FallocateMode::CollapseRange, 10 * MIB, 280 * MIB)
        .unwrap();
    assert_all_logged(&fs, "a 280 MiB collapse");
    assert_eq!(fs.metadata(big).unwrap().size, 40 * MIB);
    fs.read_at(big, 20 * MIB + 5, &mut kept).unwrap();
    assert_eq!(&kept, b"kept");
    let mut moved = [0u8; 5];
    fs.read_at(big, 30 * MIB, &mut moved).unwrap();
    assert_eq!(&moved, b"moved");
    // An unlinked file still open is freed at its last close, in steps too.
    let open_file = fs.create(ROOT, b"open", FILE).unwrap();
    fs.fallocate(open_file, FallocateMode::KeepSize, 0, 150 * MIB)
        .unwrap();
    fs.open_inode(open_file).unwrap();
    fs.unlink(ROOT, b"open").unwrap();
    fs.release_inode(open_file).unwrap();
    assert_all_logged(&fs, "the last close of an unlinked 150 MiB file");
    fs.unlink(ROOT, b"big").unwrap();
    assert_all_logged(&fs, "the unlink of what is left");
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free, "every block came back");
    let stats = fs.journal_stats().unwrap();
    assert!(stats.commits > 10, "{stats:?}");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// An insert and a collapse whose move changes more tree blocks than the whole log holds
/// (100,000 one-block extents: over 1,100 leaves of 1 KiB against a 1,024-block log) move
/// in pieces of whole leaves, each a transaction of its own, as the kernel restarts its
/// handle in `ext4_ext_shift_extents`: every commit fits the log, every block is where the
/// move puts it, and e2fsck finds the image clean. (In one transaction, the move was
/// written around the log: not crash-safe.)
#[test]
fn a_move_larger_than_the_log_goes_in_pieces_that_fit_it() {
    const EXTENTS: u64 = 100_000;
    const KIB: u64 = 1024;
    let image = many_groups("ext4", "^resize_inode");
    let fs = open(&image);
    let file = fs.create(ROOT, b"sparse", FILE).unwrap();
    // Block 2i holds the bytes of i: one extent each.
    let bytes_of = |i: u64| (i as u32).to_le_bytes().repeat(KIB as usize / 4);
    for i in 0..EXTENTS {
        fs.write_at(file, 2 * i * KIB, &bytes_of(i)).unwrap();
    }
    let size = fs.metadata(file).unwrap().size;
    let check_blocks = |at: &dyn Fn(u64) -> u64, what: &str| {
        let mut block = vec![0u8; KIB as usize];
        // Every block near the move's start, a sample of the rest, and the last.
        for i in (0..200)
            .chain((200..EXTENTS).step_by(97))
            .chain([EXTENTS - 1])
        {
            fs.read_at(file, at(2 * i) * KIB, &mut block).unwrap();
            assert!(
                block == bytes_of(i),
                "{what}: block {i} is not at {}",
                at(2 * i)
            );
        }
    };
    // Three blocks in at block 7: everything from block 7 on moves up by 3.
    fs.fallocate(file, FallocateMode::InsertRange, 7 * KIB, 3 * KIB)
        .unwrap();
    assert_all_logged(&fs, "an insert over 100,000 extents");
    assert_eq!(fs.metadata(file).unwrap().size, size + 3 * KIB);
    check_blocks(&|b| if b < 7 { b } else { b + 3 }, "inserted");
    fs.fallocate(file, FallocateMode::CollapseRange, 7 * KIB, 3 * KIB)
        .unwrap();
    assert_all_logged(&fs, "a collapse over 100,000 extents");
    assert_eq!(fs.metadata(file).unwrap().size, size);
    check_blocks(&|b| b, "collapsed again");
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
    let files = files_in_their_own_directories(&fs, 1500);
    fs.sync().unwrap();
    for &file in &files {
        fs.fallocate(file, FallocateMode::KeepSize, 0, 1024)
            .unwrap();
    }
    assert_all_logged(&fs, "1,500 one-block fallocates in as many groups");
    for (i, _) in files.iter().enumerate() {
        unlink_file_of_directory(&fs, i);
    }
    assert_all_logged(&fs, "1,500 unlinks in as many groups");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// A 512 MiB [`small_groups`] image with 128-byte inodes, 8 to a 1 KiB table block and 8
/// to a group, without flex_bg: a file made in its own directory (a group each) has a
/// table block and an inode bitmap to itself.
fn table_block_per_group() -> Image {
    small_groups(
        "ext4",
        512,
        &["-N", "16384", "-I", "128", "-O", "^resize_inode,^flex_bg"],
    )
}

/// `image` opened for writing without the commit thread: an operation past three
/// quarters of half the log (384 blocks of the 1,024-block log) commits itself, so no
/// transaction goes past that by more than one operation ([`assert_one_past_the_point`]).
fn without_commit_thread(image: &Image) -> Filesystem {
    let options = OpenOptions {
        commit_thread: false,
        ..OpenOptions::writable()
    };
    Filesystem::open(&image.path, options).unwrap()
}

/// Fails unless every commit of a [`without_commit_thread`] filesystem was logged and none
/// went past its commit point (384 blocks) by more than one small operation.
fn assert_one_past_the_point(fs: &Filesystem, after: &str) {
    assert_all_logged(fs, after);
    let stats = fs.journal_stats().unwrap();
    assert!(stats.largest_transaction <= 400, "after {after}: {stats:?}");
}

/// Unlinks `/d{i}/f` (made by [`files_in_their_own_directories`]).
fn unlink_file_of_directory(fs: &Filesystem, i: usize) {
    let dir = fs.resolve(&format!("/d{i}"), false).unwrap();
    fs.unlink(dir, b"f").unwrap();
}

/// Files `/d{i}/f` for `i` in `0..count`, each in its own directory: their inodes.
fn files_in_their_own_directories(fs: &Filesystem, count: usize) -> Vec<u32> {
    (0..count)
        .map(|i| {
            let dir = fs.mkdir(ROOT, format!("d{i}").as_bytes(), DIR).unwrap();
            fs.create(dir, b"f", FILE).unwrap()
        })
        .collect()
}

/// A transaction counted as if its inodes were packed would hold 8 times the table blocks
/// it was counted for.
#[test]
fn inode_changes_each_in_another_table_block_commit_before_the_log_overflows() {
    let image = table_block_per_group();
    let fs = open(&image);
    let files = files_in_their_own_directories(&fs, 2000);
    fs.sync().unwrap();
    let tables: std::collections::HashSet<u32> = files.iter().map(|ino| (ino - 1) / 8).collect();
    assert!(tables.len() > 1900, "{} table blocks", tables.len());
    for &file in &files {
        let attrs = SetAttributes {
            permissions: Some(0o600),
            ..SetAttributes::default()
        };
        fs.setattr(file, &attrs).unwrap();
    }
    fs.sync().unwrap();
    assert_all_logged(&fs, "2,000 changes of mode in as many inode-table blocks");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// An ext4 image of `mib` MiB with 4 KiB blocks in 1 MiB groups, on which
/// `OpenOptions::transaction_limit` of 24 blocks makes steps of 3 groups.
fn one_mib_groups(mib: u64) -> Image {
    make_empty_image(e4_testkit::ONE_MIB_GROUPS, mib)
}

/// Writes `mib` MiB of 0x77 into a new file `/wide` of `fs`; returns its inode.
fn write_wide_file(fs: &Filesystem, mib: u64) -> u32 {
    let file = fs.create(ROOT, b"wide", FILE).unwrap();
    let chunk = vec![0x77u8; MIB as usize];
    for i in 0..mib {
        fs.write_at(file, i * MIB, &chunk).unwrap();
    }
    file
}

/// A 32 MiB [`one_mib_groups`] image holding what `write` makes (it returns the inode the
/// test works on), unmounted: the image, that inode and the image's bytes.
fn one_mib_groups_with(write: impl FnOnce(&Filesystem) -> u32) -> (Image, u32, Vec<u8>) {
    let image = one_mib_groups(32);
    let fs = open(&image);
    let ino = write(&fs);
    fs.unmount().unwrap();
    let bytes = std::fs::read(&image.path).unwrap();
    (image, ino, bytes)
}

/// Transactions of at most 24 blocks (steps of 3 groups on [`one_mib_groups`]), committed
/// on the operations' thread where their sizes put them (no commit thread): the steps a
/// failure or a pause finds committed do not depend on a thread's timing.
fn in_steps() -> OpenOptions {
    OpenOptions {
        transaction_limit: Some(24),
        commit_thread: false,
        ..OpenOptions::writable()
    }
}

/// What [`run_failing`] saw.
struct FailingRun<R, A> {
    /// What the operation returned.
    outcome: R,
    /// Device reads the operation made.
    reads: u64,
    /// What the filesystem showed once the device worked again.
    seen: A,
    /// The device's bytes as the failure left them: a crash at that moment.
    crashed: Vec<u8>,
    /// The device's bytes after the unmount.
    unmounted: Vec<u8>,
}

/// Opens a copy of `base` with `options` on a device whose `fault`-th read from now on
/// fails, runs `op`, makes the device work again, runs `inspect`, and unmounts.
fn run_failing<R, A>(
    base: &[u8],
    options: &OpenOptions,
    fault: e4_fs::device::Fault,
    op: impl FnOnce(&Filesystem) -> R,
    inspect: impl FnOnce(&Filesystem) -> A,
) -> FailingRun<R, A> {
    use e4_fs::device::{Device, Fault, FaultyDevice, MemoryDevice};
    use std::sync::Arc;

    let device = Arc::new(FaultyDevice::new(
        MemoryDevice::new(base.to_vec()),
        Fault::Never,
    ));
    let fs = Filesystem::open_device(device.clone() as Arc<dyn Device>, options.clone()).unwrap();
    let reads_before = device.counts().0;
    device.set_fault(match fault {
        Fault::Read(n) => Fault::Read(reads_before + n),
        _ => Fault::Never,
    });
    let outcome = op(&fs);
    let reads = device.counts().0 - reads_before;
    device.set_fault(Fault::Never);
    let seen = inspect(&fs);
    let crashed = device.inner().bytes();
    fs.unmount().unwrap();
    FailingRun {
        outcome,
        reads,
        seen,
        crashed,
        unmounted: device.inner().bytes(),
    }
}

/// Opens `bytes` as a crash or an unmount left them (the journal replayed, the orphan list
/// processed), runs `inspect`, unmounts, and returns what it saw and the bytes the
/// unmount left.
fn reopened<T>(
    bytes: Vec<u8>,
    options: &OpenOptions,
    inspect: impl FnOnce(&Filesystem) -> T,
) -> (T, Vec<u8>) {
    use e4_fs::device::{Device, MemoryDevice};
    use std::sync::Arc;

    let device = Arc::new(MemoryDevice::new(bytes));
    let fs = Filesystem::open_device(device.clone() as Arc<dyn Device>, options.clone()).unwrap();
    let seen = inspect(&fs);
    fs.unmount().unwrap();
    (seen, device.bytes())
}

/// One image a failing run left, once e2fsck found it clean: see [`each_failing_view`].
struct FailedView<'a, R> {
    /// What failed, what the operation returned and which image this is, for messages.
    what: String,
    outcome: &'a R,
    /// The image's bytes.
    bytes: Vec<u8>,
}

/// Runs `op` on a copy of `base` with each of its `reads` reads failing in turn, and
/// hands `check` the image as the failure left it (a crash) and as the unmount left it,
/// each once e2fsck finds it clean.
/// (`checked` is where e2fsck reads them.)
fn each_failing_view<R: std::fmt::Debug>(
    checked: &std::path::Path,
    base: &[u8],
    options: &OpenOptions,
    reads: u64,
    op: impl Fn(&Filesystem) -> R,
    mut check: impl FnMut(FailedView<'_, R>),
) {
    use e4_fs::device::Fault;

    for fault in (0..reads).map(Fault::Read) {
        let FailingRun {
            outcome,
            crashed,
            unmounted,
            ..
        } = run_failing(base, options, fault, &op, |_| ());
        for (view, bytes) in [("crashed", crashed), ("unmounted", unmounted)] {
            std::fs::write(checked, &bytes).unwrap();
            let what = format!("{fault:?} ({outcome:?}), {view}");
            e2fsck_clean(checked).unwrap_or_else(|e| panic!("{what}: {e}"));
            check(FailedView {
                what,
                outcome: &outcome,
                bytes,
            });
        }
    }
}

/// A delete in steps that fails part-way (a read that fails, at each of its reads in
/// turn) leaves the file whole or an orphan partly freed, never lost blocks: the unmount
/// frees what the orphan still holds, and e2fsck finds the image clean. Transactions are
/// bounded to 24 blocks (`OpenOptions::transaction_limit`), so a 20 MiB file over 1 MiB
/// groups takes several steps with commits between them.
#[test]
fn a_delete_in_steps_that_fails_part_way_loses_nothing() {
    use e4_fs::device::Fault;

    let image = one_mib_groups(64);
    {
        let fs = open(&image);
        write_wide_file(&fs, 20);
        fs.unmount().unwrap();
    }
    let base = std::fs::read(&image.path).unwrap();
    let options = OpenOptions {
        transaction_limit: Some(24),
        commit_interval: std::time::Duration::ZERO,
        ..OpenOptions::writable()
    };
    let run = |fault| {
        run_failing(
            &base,
            &options,
            fault,
            |fs| fs.unlink(ROOT, b"wide"),
            |fs| fs.lookup(ROOT, b"wide").unwrap().is_some(),
        )
    };
    let clean = run(Fault::Never);
    clean.outcome.unwrap();
    let reads = clean.reads;
    assert!(reads >= 3, "the steps read {reads} blocks");
    let mut stopped_part_way = 0;
    let checked = image.path.with_extension("checked");
    // A damaged bitmap (CorruptRead) fails its check as a failed read does.
    for fault in (0..reads).map(Fault::Read) {
        let failing = run(fault);
        let (outcome, name_left) = (&failing.outcome, failing.seen);
        assert!(
            outcome.is_err() || !name_left,
            "{fault:?}: unlinked, yet named"
        );
        if outcome.is_err() && !name_left {
            stopped_part_way += 1;
        }
        std::fs::write(&checked, &failing.unmounted).unwrap();
        e2fsck_clean(&checked).unwrap_or_else(|e| panic!("{fault:?} ({outcome:?}): {e}"));
    }
    assert!(
        stopped_part_way > 0,
        "no fault fell between the unlink and the last step"
    );
}

/// A truncate in steps is all or nothing across a crash and across a failure part-way
/// (a read that fails, at each of its reads in turn): its first step sets the new size
/// and puts the file on the orphan list, so the image as the failure left it, opened
/// again (the crash: the journal replayed, the orphan list processed), and the image the
/// unmount leaves (which finishes the truncate) both hold the file at its old size with
/// all its blocks or at its new size with only the blocks below it, and e2fsck finds
/// them clean (the unmounted image before it is opened again too). (Before the first
/// step set the size, a crash between steps left the file at a size between the two:
/// `crash_states.rs` catches that one.)
#[test]
fn a_truncate_in_steps_that_fails_part_way_is_all_or_nothing() {
    use e4_fs::device::Fault;

    let (image, file, base) = one_mib_groups_with(|fs| write_wide_file(fs, 12));
    let options = in_steps();
    let reopen = |bytes: Vec<u8>| {
        reopened(bytes, &options, |fs| {
            let stat = fs.metadata(file).unwrap();
            (stat.size, stat.blocks, fs.statfs().free_blocks)
        })
    };
    // (size, blocks, free blocks) before and after.
    let (before, _) = reopen(base.clone());
    let run = |fault| {
        run_failing(
            &base,
            &options,
            fault,
            |fs| fs.truncate(file, NEW_SIZE),
            |_| (),
        )
    };
    let clean = run(Fault::Never);
    clean.outcome.unwrap();
    let (after, _) = reopen(clean.unmounted);
    assert_eq!(after.0, NEW_SIZE);
    let reads = clean.reads;
    assert!(reads >= 3, "the steps read {reads} blocks");
    let checked = image.path.with_extension("checked");
    let mut failed_part_way = 0;
    for fault in (0..reads).map(Fault::Read) {
        let FailingRun {
            outcome,
            crashed,
            unmounted,
            ..
        } = run(fault);
        // The unmount left the image clean and the orphan list empty: e2fsck as it is.
        std::fs::write(&checked, &unmounted).unwrap();
        e2fsck_clean(&checked).unwrap_or_else(|e| panic!("{fault:?}, as unmounted: {e}"));
        for (view, bytes) in [("crashed", crashed), ("unmounted", unmounted)] {
            let (found, bytes) = reopen(bytes);
            assert!(
                found == before || found == after,
                "{fault:?} ({outcome:?}), {view}: (size, blocks, free) {found:?}, \
                 neither {before:?} nor {after:?}"
            );
            if outcome.is_err() && found == after && view == "crashed" {
                failed_part_way += 1;
            }
            std::fs::write(&checked, bytes).unwrap();
            e2fsck_clean(&checked).unwrap_or_else(|e| panic!("{fault:?}, {view}: {e}"));
        }
    }
    assert!(
        failed_part_way > 0,
        "no fault fell after the first step and before the last"
    );
}

/// A collapse and a zeroing in steps that fail part-way (a read that fails, at each of
/// their reads in turn) leave what the kernel's restarted handles leave: the steps before
/// the failure done, the one it hit undone. A collapse punches its range a step at a
/// time and moves the rest down only after them (this file's tree is one leaf: in one
/// step), and a zeroing frees and allocates its range a step at a time, so the file, as
/// the failure left it (a crash: opened again) and as the unmount left it, is either the whole operation's result or the file
/// as before with some of the range's blocks read as zeros: every other block holds its
/// own bytes at its own offset (a move part-done, or a step's undo that lost a block,
/// would show a block elsewhere or zeroed outside the range), the size is unchanged,
/// and e2fsck finds the image clean.
#[test]
fn a_collapse_or_zeroing_in_steps_that_fails_part_way_keeps_every_block_in_place() {
    use e4_fs::device::Fault;

    const CHUNKS: u64 = 12;
    const BLOCK: usize = 4096;
    // Range: MiB 2 to 8 of 12, over 6 groups: two steps of 3 groups at least.
    let (offset, len) = (2 * MIB, 6 * MIB);
    // Each MiB of the file holds its own byte (1, 2, ...), so a block's bytes say where
    // it came from.
    let (image, file, base) = one_mib_groups_with(|fs| {
        let file = fs.create(ROOT, b"wide", FILE).unwrap();
        for chunk in 0..CHUNKS {
            fs.write_at(file, chunk * MIB, &vec![chunk as u8 + 1; MIB as usize])
                .unwrap();
        }
        file
    });
    let options = in_steps();
    let contents = |bytes: Vec<u8>| {
        reopened(bytes, &options, |fs| {
            fs.read_file(file, CHUNKS * MIB).unwrap()
        })
    };
    let (before, _) = contents(base.clone());
    let in_range = |at: u64| (offset..offset + len).contains(&at);
    let checked = image.path.with_extension("checked");
    for mode in [FallocateMode::CollapseRange, FallocateMode::ZeroRange] {
        let run = |fault| {
            run_failing(
                &base,
                &options,
                fault,
                |fs| fs.fallocate(file, mode, offset, len),
                |_| (),
            )
        };
        let clean = run(Fault::Never);
        clean.outcome.unwrap();
        let (after, _) = contents(clean.unmounted);
        let expected: Vec<u8> = match mode {
            FallocateMode::CollapseRange => before
                .iter()
                .enumerate()
                .filter(|&(at, _)| !in_range(at as u64))
                .map(|(_, &b)| b)
                .collect(),
            _ => before
                .iter()
                .enumerate()
                .map(|(at, &b)| if in_range(at as u64) { 0 } else { b })
                .collect(),
        };
        assert!(after == expected, "{mode:?} without a failure");
        let reads = clean.reads;
        assert!(reads >= 3, "{mode:?}: the steps read {reads} blocks");
        let mut part_way = 0;
        let op = |fs: &Filesystem| fs.fallocate(file, mode, offset, len);
        each_failing_view(&checked, &base, &options, reads, op, |failed| {
            let what = format!("{mode:?} {}", failed.what);
            let (found, _) = contents(failed.bytes);
            if found == after {
                return;
            }
            assert!(
                failed.outcome.is_err(),
                "{what}: done, yet the file is not its result"
            );
            assert_eq!(found.len(), before.len(), "{what}: the size");
            for (n, (found, old)) in found.chunks(BLOCK).zip(before.chunks(BLOCK)).enumerate() {
                let in_range = in_range((n * BLOCK) as u64);
                let zeroed = in_range && found.iter().all(|&b| b == 0);
                assert!(
                    found == old || zeroed,
                    "{what}: block {n} holds {:?}, not its own {:?}{}",
                    found[0],
                    old[0],
                    if in_range { " nor zeros" } else { "" }
                );
            }
            if found != before {
                part_way += 1;
            }
        });
        assert!(
            part_way > 0,
            "{mode:?}: no fault fell after a step that changed the file and before the last"
        );
    }
}

/// An insert and a collapse whose move goes in pieces of leaves (2,100 one-block extents
/// in leaves of 340, pieces of 3 leaves under a 24-block transaction limit) and fail
/// part-way (a read that fails, at each of their reads in turn) leave, as the failure
/// left the image (a crash: opened again) and as the unmount left it, a tree e2fsck finds
/// clean and every block at its own offset or moved by the distance, the moved ones all
/// those past a point (an insert moves from the end down) or before it (a collapse from
/// the start up); the size grown from an insert's first piece on, a collapse's shrunk
/// only in its last.
#[test]
fn a_move_in_pieces_that_fails_part_way_leaves_a_valid_tree() {
    use e4_fs::device::Fault;

    const EXTENTS: u64 = 2_100;
    const BLOCK: u64 = 4096;
    let bytes_of = |i: u64| (i as u32 + 1).to_le_bytes().repeat(BLOCK as usize / 4);
    // Block 2i holds the bytes of i: one extent each.
    let (image, file, base) = one_mib_groups_with(|fs| {
        let file = fs.create(ROOT, b"sparse", FILE).unwrap();
        for i in 0..EXTENTS {
            fs.write_at(file, 2 * i * BLOCK, &bytes_of(i)).unwrap();
        }
        file
    });
    let size = 2 * (EXTENTS - 1) * BLOCK + BLOCK;
    let options = in_steps();
    // Where each block after the first is (false: at its own offset, true: moved by
    // `by`), and the size. The first, at block 0, stays.
    let placed = |fs: &Filesystem, by: i64| {
        let mut block = vec![0u8; BLOCK as usize];
        fs.read_at(file, 0, &mut block).unwrap();
        assert!(block == bytes_of(0), "block 0 moved");
        let moved: Vec<bool> = (1..EXTENTS)
            .map(|i| {
                let own = 2 * i * BLOCK;
                let at = |offset: u64, block: &mut Vec<u8>| {
                    block.fill(0);
                    fs.read_at(file, offset, block).unwrap();
                    *block == bytes_of(i)
                };
                let there = own.checked_add_signed(by * BLOCK as i64).unwrap();
                match (at(own, &mut block), at(there, &mut block)) {
                    (true, false) => false,
                    (false, true) => true,
                    found => panic!("block {i}: (at its own offset, moved) {found:?}"),
                }
            })
            .collect();
        (moved, fs.metadata(file).unwrap().size)
    };
    let checked = image.path.with_extension("checked");
    // Insert a block at block 1; collapse block 1 (a hole) away.
    for (mode, by) in [
        (FallocateMode::InsertRange, 1i64),
        (FallocateMode::CollapseRange, -1),
    ] {
        let run = |fault| {
            run_failing(
                &base,
                &options,
                fault,
                |fs| fs.fallocate(file, mode, BLOCK, BLOCK),
                |_| (),
            )
        };
        let clean = run(Fault::Never);
        clean.outcome.unwrap();
        let reads = clean.reads;
        let ((moved, after_size), _) = reopened(clean.unmounted, &options, |fs| placed(fs, by));
        assert!(moved.iter().all(|&m| m), "{mode:?}: not every block moved");
        assert_eq!(
            after_size,
            size.checked_add_signed(by * BLOCK as i64).unwrap()
        );
        assert!(reads >= 7, "{mode:?}: the move read {reads} blocks");
        let mut part_way = 0;
        let op = |fs: &Filesystem| fs.fallocate(file, mode, BLOCK, BLOCK);
        each_failing_view(&checked, &base, &options, reads, op, |failed| {
            let ((moved, found_size), _) = reopened(failed.bytes, &options, |fs| placed(fs, by));
            let what = format!("{mode:?} {}", failed.what);
            let first_moved = moved.iter().position(|&m| m).unwrap_or(moved.len());
            let last_moved = moved.iter().rposition(|&m| m);
            let some = last_moved.is_some();
            let shape = format!(
                "{} of {} blocks moved, the first {first_moved}, the last {last_moved:?}",
                moved.iter().filter(|&&m| m).count(),
                moved.len()
            );
            match mode {
                FallocateMode::InsertRange => {
                    assert!(moved[first_moved..].iter().all(|&m| m), "{what}: {shape}");
                    assert_eq!(found_size, if some { after_size } else { size }, "{what}");
                }
                _ => {
                    let end = last_moved.map_or(0, |l| l + 1);
                    assert!(moved[..end].iter().all(|&m| m), "{what}: {shape}");
                    let done = moved.iter().all(|&m| m);
                    assert_eq!(found_size, if done { after_size } else { size }, "{what}");
                }
            }
            if some && moved.iter().any(|&m| !m) {
                part_way += 1;
            }
        });
        assert!(part_way > 0, "{mode:?}: no fault fell between two pieces");
    }
}

/// A device that stops the first flush after [`PausingDevice::arm`] until the test lets
/// it go: a commit between two steps of an operation, with no lock held that another
/// operation needs (the gate is open while a commit writes).
struct PausingDevice {
    inner: e4_fs::device::MemoryDevice,
    armed: std::sync::atomic::AtomicBool,
    paused: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl e4_fs::device::Device for PausingDevice {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        if self.armed.swap(false, std::sync::atomic::Ordering::AcqRel) {
            self.paused.lock().unwrap().send(()).unwrap();
            self.release.lock().unwrap().recv().unwrap();
        }
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// The size the paused truncates cut a 16 MiB file to.
const NEW_SIZE: u64 = 4096 + 7;

/// What [`truncate_paused_between_steps`] leaves for the checks after it.
struct Paused<R> {
    image: Image,
    device: std::sync::Arc<PausingDevice>,
    fs: Filesystem,
    file: u32,
    /// Free blocks before the file was written.
    free_before: u64,
    /// What `op` returned.
    outcome: R,
}

/// Truncates a 16 MiB file (over 16 groups, with transactions bounded to 24 blocks: steps
/// of 3 groups) to [`NEW_SIZE`], stops it in a commit between two of its steps (the
/// first has set the new size), runs `op` on another thread meanwhile, gives it 100 ms
/// (time for an `op` that does not wait to be done), lets the truncate go and returns
/// what `op` returned once both are over.
fn truncate_paused_between_steps<R: Send>(
    op: impl FnOnce(&Filesystem, u32) -> R + Send,
) -> Paused<R> {
    use e4_fs::device::{Device, MemoryDevice};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc, Mutex};

    let image = one_mib_groups(32);
    let (paused_tx, paused) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let device = Arc::new(PausingDevice {
        inner: MemoryDevice::new(std::fs::read(&image.path).unwrap()),
        armed: AtomicBool::new(false),
        paused: Mutex::new(paused_tx),
        release: Mutex::new(release_rx),
    });
    // Commits on the operations' thread, where the transactions' sizes put them: some
    // fall between the truncate's steps.
    let options = in_steps();
    let fs = Filesystem::open_device(device.clone() as Arc<dyn Device>, options).unwrap();
    let free_before = fs.statfs().free_blocks;
    let file = write_wide_file(&fs, 16);
    fs.sync().unwrap();
    device.armed.store(true, Ordering::Release);
    let truncated = AtomicBool::new(false);
    let outcome = std::thread::scope(|s| {
        s.spawn(|| {
            fs.truncate(file, NEW_SIZE).unwrap();
            truncated.store(true, Ordering::Release);
        });
        paused.recv().unwrap();
        assert!(
            !truncated.load(Ordering::Acquire),
            "the truncate ended before a commit"
        );
        assert_eq!(
            fs.metadata(file).unwrap().size,
            NEW_SIZE,
            "the first step set the size"
        );
        let op = s.spawn(|| op(&fs, file));
        std::thread::sleep(std::time::Duration::from_millis(100));
        release.send(()).unwrap();
        op.join().unwrap()
    });
    Paused {
        image,
        device,
        fs,
        file,
        free_before,
        outcome,
    }
}

/// Unmounts `paused`'s filesystem and fails unless e2fsck finds its image clean.
fn unmount_and_check<R>(paused: Paused<R>) {
    paused.fs.unmount().unwrap();
    std::fs::write(&paused.image.path, paused.device.inner.bytes()).unwrap();
    e2fsck_clean(&paused.image.path).unwrap();
}

/// A write that comes while a truncate in steps is part-way waits for its last step, as
/// the kernel's waits on `i_rwsem`. It goes past the new size, into blocks the last step
/// frees: had it gone in between the steps, it would have written into an old block still
/// mapped there (the old bytes around it read back) and the last step would have freed
/// that block under it. The file ends as the write after the truncate leaves it: the old
/// bytes up to the new size, zeros, then the write.
#[test]
fn a_write_waits_for_a_truncate_in_steps() {
    const AT: u64 = 64 * 1024 + 100;
    let paused =
        truncate_paused_between_steps(|fs, file| fs.write_at(file, AT, b"after the cut").unwrap());
    assert_eq!(paused.outcome, 13);
    let (fs, file) = (&paused.fs, paused.file);
    let size = fs.metadata(file).unwrap().size;
    assert_eq!(size, AT + 13);
    let mut contents = vec![0u8; size as usize];
    assert_eq!(fs.read_at(file, 0, &mut contents).unwrap(), contents.len());
    assert!(contents[..NEW_SIZE as usize].iter().all(|&b| b == 0x77));
    if let Some(at) = contents[NEW_SIZE as usize..AT as usize]
        .iter()
        .position(|&b| b != 0)
    {
        panic!("byte {} is not zero", NEW_SIZE as usize + at);
    }
    assert_eq!(&contents[AT as usize..], b"after the cut");
    assert_all_logged(fs, "a truncate in steps with a write waiting");
    unmount_and_check(paused);
}

/// An unlink does not wait for a truncate in steps: it frees the file (in steps of its
/// own), and the truncate's remaining steps find it freed and stop. Every block comes
/// back, the orphan list ends empty, and e2fsck finds the image clean.
#[test]
fn an_unlink_during_a_truncate_in_steps_frees_the_file() {
    let paused = truncate_paused_between_steps(|fs, _| fs.unlink(ROOT, b"wide"));
    paused.outcome.as_ref().unwrap();
    assert_eq!(paused.fs.lookup(ROOT, b"wide").unwrap(), None);
    paused.fs.sync().unwrap();
    assert_eq!(paused.fs.statfs().free_blocks, paused.free_before);
    assert_all_logged(&paused.fs, "an unlink during a truncate in steps");
    unmount_and_check(paused);
}

/// What [`many_groups`]' 1,024-block log bounds a transaction by: half the log, which no
/// operation joins past (`txn/commit.rs` `log_full`), plus the log room the operations
/// running then may still use (`txn/log_room.rs`: three quarters of the other half).
const MOST_A_TRANSACTION_TAKES: u64 = 512 + 384;

/// The last eighth of [`many_groups`]' log: what credits declared inside handles when the
/// log room had none left may take.
const LOG_MARGIN: u64 = 128;

/// Fails unless no commit so far was written around the log, the largest transaction
/// stayed within [`MOST_A_TRANSACTION_TAKES`], and credits declared beyond the log room
/// within [`LOG_MARGIN`].
fn assert_within_bound(fs: &Filesystem, after: &str) {
    let stats = fs.journal_stats().unwrap();
    assert_eq!(stats.unjournaled, 0, "after {after}: {stats:?}");
    assert!(
        stats.largest_transaction <= MOST_A_TRANSACTION_TAKES,
        "after {after}: {stats:?}"
    );
    assert!(
        stats.room_overdrafts <= LOG_MARGIN,
        "after {after}: {stats:?}"
    );
}

/// Sixty-four threads each deleting a 15 MiB file (60 groups of 256 KiB, freed in steps)
/// on a 1,024-block log: every operation in flight when the transaction reaches its bound
/// adds to it before the commit stops them. Without the log room (each step reserving its
/// groups before it joins) the largest transaction took 969-1,263 log blocks, and one was
/// written around the log in two runs of three.
#[test]
fn deletes_in_steps_from_many_threads_fit_the_log() {
    let image = small_groups("ext4", 1200, &["-N", "8192", "-O", "^resize_inode"]);
    let fs = open(&image);
    const FILES: usize = 64;
    for i in 0..FILES {
        let f = fs.create(ROOT, format!("f{i}").as_bytes(), FILE).unwrap();
        fs.fallocate(f, FallocateMode::Allocate, 0, 15 * MIB)
            .unwrap();
    }
    fs.sync().unwrap();
    let free = fs.statfs().free_blocks;
    std::thread::scope(|s| {
        for i in 0..FILES {
            let fs = &fs;
            s.spawn(move || fs.unlink(ROOT, format!("f{i}").as_bytes()).unwrap());
        }
    });
    assert_within_bound(&fs, "64 deletes in steps at once");
    fs.sync().unwrap();
    assert!(fs.statfs().free_blocks > free + FILES as u64 * 15 * 1024);
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// One 300 MiB write on 1 KiB blocks in 256 KiB groups touches 1,200 groups: a bitmap and
/// a share of a descriptor each, more than the 1,024-block log. It goes in pieces, each a
/// transaction that fits (in one, it was written around the log).
#[test]
fn a_write_larger_than_the_log_goes_in_pieces_that_fit_it() {
    let image = many_groups("ext4", "^resize_inode");
    let fs = open(&image);
    let file = fs.create(ROOT, b"w", FILE).unwrap();
    let data: Vec<u8> = (0..300 * MIB as usize).map(|i| (i / 4093) as u8).collect();
    assert_eq!(fs.write_at(file, 0, &data).unwrap(), data.len());
    assert_within_bound(&fs, "one 300 MiB write");
    let stats = fs.journal_stats().unwrap();
    assert!(stats.commits >= 3, "{stats:?}");
    let mut back = vec![0u8; data.len()];
    fs.read_at(file, 0, &mut back).unwrap();
    assert!(back == data, "the pieces hold the write");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// Unlinks of empty files, each in its own group: the inode bitmap each frees changes only
/// at the commit, but counts toward the transaction from the unlink on. Without the commit
/// thread an operation commits itself past three quarters of half the log (384 blocks),
/// so no transaction goes past that by more than one unlink; counted without the freed
/// inodes' groups, the largest took 482.
#[test]
fn unlinks_count_the_inode_bitmaps_their_commit_changes() {
    let image = table_block_per_group();
    let fs = without_commit_thread(&image);
    files_in_their_own_directories(&fs, 2000);
    fs.sync().unwrap();
    for i in 0..2000 {
        unlink_file_of_directory(&fs, i);
    }
    fs.sync().unwrap();
    assert_one_past_the_point(&fs, "2,000 unlinks, each in its own group");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// Twenty-four threads on the 1,024-block log, more than the log room lets run at once:
/// truncates and fallocates in steps of four shared files, small writes into those files
/// (which leave their transaction and wait for a truncate's steps, giving their room back),
/// 512 KiB writes that go in pieces when the room runs out, creates and unlinks. Nothing
/// may deadlock (a watchdog fails the test after two minutes), every transaction stays
/// within its bound, and e2fsck finds the image clean.
#[test]
fn steps_writes_creates_and_unlinks_from_many_threads_share_the_log_room() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let image = small_groups("ext4", 1200, &["-N", "16384", "-O", "^resize_inode"]);
    let fs = open(&image);
    let shared: Vec<u32> = (0..4)
        .map(|i| {
            fs.create(ROOT, format!("shared{i}").as_bytes(), FILE)
                .unwrap()
        })
        .collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watchdog = s.spawn(|| {
            let started = std::time::Instant::now();
            while !done.load(Ordering::Acquire) {
                if started.elapsed() > std::time::Duration::from_secs(120) {
                    // A panic here would leave the test waiting for the deadlocked
                    // workers forever (the scope joins them): end the process, saying
                    // why on stderr itself (the harness captures `eprintln!`).
                    use std::io::Write;
                    let _ = writeln!(
                        std::io::stderr(),
                        "the threads did not finish in 120 s: a deadlock"
                    );
                    std::process::abort();
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
        let workers: Vec<_> = (0..24u32)
            .map(|t| {
                let (fs, shared) = (&fs, &shared);
                s.spawn(move || {
                    let file = shared[t as usize % shared.len()];
                    let chunk = vec![t as u8; 512 * 1024];
                    for round in 0..20u64 {
                        match t % 4 {
                            0 => {
                                fs.fallocate(file, FallocateMode::KeepSize, 0, 12 * MIB)
                                    .unwrap();
                                fs.truncate(file, round * 1000).unwrap();
                            }
                            1 => {
                                fs.write_at(file, round * 4096 + 17, b"small").unwrap();
                            }
                            2 => {
                                let name = format!("big{t}-{round}");
                                let f = fs.create(ROOT, name.as_bytes(), FILE).unwrap();
                                for piece in 0..4 {
                                    fs.write_at(f, piece * chunk.len() as u64, &chunk).unwrap();
                                }
                                if round % 2 == 1 {
                                    fs.unlink(ROOT, name.as_bytes()).unwrap();
                                }
                            }
                            _ => {
                                for n in 0..50 {
                                    let name = format!("c{t}-{round}-{n}");
                                    fs.create(ROOT, name.as_bytes(), FILE).unwrap();
                                    if n % 2 == 0 {
                                        fs.unlink(ROOT, name.as_bytes()).unwrap();
                                    }
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
        watchdog.join().unwrap();
    });
    assert_within_bound(&fs, "24 threads of mixed work");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// A fallocate into free space broken into single blocks: every run is an extent, and each
/// extent inserted declares a split at every level of the tree, so one step's allocation
/// declares far more than the log room holds though it dirties little. It stops where the
/// room runs out and goes on in a new handle (as a write does), rather than declaring on
/// the log's margin: every block is allocated, and the file reads as zeros.
#[test]
fn a_fallocate_into_scattered_free_blocks_goes_on_in_new_handles() {
    let image = small_groups("ext4", 64, &["-N", "1024", "-O", "^resize_inode"]);
    let fs = open(&image);
    let free = fs.statfs().free_blocks;
    // Everything free taken, then every other block of the first file given back: only
    // single free blocks are left.
    let filler = fs.create(ROOT, b"filler", FILE).unwrap();
    let _ = fs.fallocate(filler, FallocateMode::KeepSize, 0, free * 1024);
    let rest = fs.create(ROOT, b"rest", FILE).unwrap();
    let _ = fs.fallocate(rest, FallocateMode::KeepSize, 0, free * 1024);
    let filled = fs.metadata(filler).unwrap().blocks / 2;
    for block in (0..filled / 2).map(|i| 2 * i) {
        fs.fallocate(filler, FallocateMode::PunchHole, block * 1024, 1024)
            .unwrap();
    }
    fs.sync().unwrap();
    let scattered = fs.create(ROOT, b"scattered", FILE).unwrap();
    let len = 4000 * 1024;
    fs.fallocate(scattered, FallocateMode::Allocate, 0, len)
        .unwrap();
    let stats = fs.journal_stats().unwrap();
    assert_eq!(stats.room_overdrafts, 0, "{stats:?}");
    assert_within_bound(&fs, "a fallocate into single free blocks");
    assert_eq!(fs.metadata(scattered).unwrap().size, len);
    let mut back = vec![1u8; len as usize];
    fs.read_at(scattered, 0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    // One write over all of it turns every one of those extents written: each conversion
    // declares its tree's worst case too, and the write goes on in a new handle when the
    // room cannot cover the next.
    let data: Vec<u8> = (0..len as usize).map(|i| (i / 1021) as u8).collect();
    assert_eq!(fs.write_at(scattered, 0, &data).unwrap(), data.len());
    let stats = fs.journal_stats().unwrap();
    assert_eq!(stats.room_overdrafts, 0, "{stats:?}");
    assert_within_bound(&fs, "a write over single unwritten blocks");
    fs.read_at(scattered, 0, &mut back).unwrap();
    assert!(back == data);
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// A rename over a file spread over more groups than the log holds frees that file: in
/// steps, after the rename, as an unlink frees one (the rename leaves it an orphan, with
/// no name, until its last step).
#[test]
fn a_rename_over_a_large_file_frees_it_in_steps() {
    let image = many_groups("ext4", "^resize_inode");
    let fs = open(&image);
    let free = fs.statfs().free_blocks;
    let big = fs.create(ROOT, b"big", FILE).unwrap();
    fs.fallocate(big, FallocateMode::Allocate, 0, 400 * MIB)
        .unwrap();
    let small = fs.create(ROOT, b"small", FILE).unwrap();
    fs.write_at(small, 0, b"the new contents").unwrap();
    fs.rename(ROOT, b"small", ROOT, b"big", RenameMode::Replace)
        .unwrap();
    assert_within_bound(&fs, "a rename over a 400 MiB file");
    assert_eq!(fs.lookup(ROOT, b"big").unwrap(), Some(small));
    fs.sync().unwrap();
    assert_eq!(
        fs.statfs().free_blocks,
        free - 1,
        "only the new file's block is used"
    );
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// Four threads each creating a file, opening it, unlinking it and closing it (the last
/// close frees the orphan): the log room holds many such small operations at once, so
/// none waits for room. The close reserved a whole step's room (three eighths of what a
/// transaction may log, so two fitted the room at once) for an empty file, and the four
/// threads waited for room hundreds of times.
#[test]
fn closing_unlinked_files_from_many_threads_does_not_wait_for_log_room() {
    let image = small_groups("ext4", 64, &["-N", "4096", "-O", "^resize_inode"]);
    let fs = open(&image);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let fs = &fs;
            s.spawn(move || {
                for n in 0..300 {
                    let name = format!("t{t}-{n}");
                    let f = fs.create(ROOT, name.as_bytes(), FILE).unwrap();
                    fs.open_inode(f).unwrap();
                    fs.unlink(ROOT, name.as_bytes()).unwrap();
                    fs.release_inode(f).unwrap();
                }
            });
        }
    });
    let stats = fs.journal_stats().unwrap();
    assert_eq!(stats.room_waits, 0, "{stats:?}");
    assert_eq!(stats.unjournaled, 0, "{stats:?}");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// Unlinks of open files, each in its own table block, between orphans already on the
/// list: each unlink puts its file on the orphan list, whose chain the commit rewrites
/// (each orphan's `i_dtime` names the next), so the record of the orphan before it, in
/// another table block, changes at the commit. Counted from the unlink on, no transaction
/// goes past three quarters of half the log (384 blocks) by more than one unlink; counted
/// only at the commit, the largest took 551.
#[test]
fn orphan_list_changes_count_the_neighbours_their_commit_changes() {
    let image = table_block_per_group();
    let fs = without_commit_thread(&image);
    let files = files_in_their_own_directories(&fs, 1200);
    for &f in &files {
        fs.open_inode(f).unwrap();
    }
    // Every other file an orphan first, in a transaction of its own.
    for i in (0..files.len()).step_by(2) {
        unlink_file_of_directory(&fs, i);
    }
    fs.sync().unwrap();
    let before = fs.journal_stats().unwrap().largest_transaction;
    for i in (1..files.len()).step_by(2) {
        unlink_file_of_directory(&fs, i);
    }
    fs.sync().unwrap();
    let after = format!("unlinks between orphans (largest before them: {before})");
    assert_one_past_the_point(&fs, &after);
    for &f in &files {
        fs.release_inode(f).unwrap();
    }
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// A write in pieces whose allocation fails in a later piece (the filesystem full there):
/// the pieces before it stay written, and the write returns them as a short count; nothing
/// written is lost, nothing else is mapped, and e2fsck finds the image clean.
#[test]
fn a_write_in_pieces_that_fails_in_a_later_piece_keeps_the_earlier_pieces() {
    let image = many_groups("ext4", "^resize_inode");
    let fs = open(&image);
    let file = fs.create(ROOT, b"w", FILE).unwrap();
    let data: Vec<u8> = (0..300 * MIB as usize).map(|i| (i / 4093) as u8).collect();
    let before = fs.allocations_seen();
    fs.fail_allocations_after(Some(600));
    let written = fs.write_at(file, 0, &data).unwrap();
    fs.fail_allocations_after(None);
    assert!(
        fs.allocations_seen() - before > 600,
        "the failure was reached"
    );
    assert!(written > 0 && written < data.len(), "{written} bytes");
    assert_eq!(fs.metadata(file).unwrap().size, written as u64);
    let mut back = vec![0u8; written];
    fs.read_at(file, 0, &mut back).unwrap();
    assert!(
        back == data[..written],
        "the earlier pieces hold their bytes"
    );
    assert_within_bound(&fs, "a write in pieces failing part-way");
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}
