//! Crash consistency: each workload runs on a device that records every write and flush
//! (`RecordingDevice`), and every image a crash could leave is recovered and checked (issue
//! 25 item 4, journal reference section 6).
//!
//! The states of each flush epoch: the flush itself; every subset of the writes issued
//! since (one write per block), when there are at most 10, or 32 sampled subsets in random
//! orders; torn last writes (only their first 512-byte sector new); and a commit block on
//! the device without some of the log blocks it commits (a device ignoring a flush). For
//! each: e4 opens it for writing, which recovers it, and unmounts; `e2fsck -fn` is clean;
//! and read back, every fsync'd file has its contents as of that fsync or later, the tree
//! of names is the tree at some moment since the last completed sync (so each create and
//! rename happened or did not, whole), and no file holds another file's records. Equal
//! images are checked once (before recovery, and after it without the clocks and the
//! emptied log). A sample is opened read-only, which must show what the recovery leaves
//! and leave the image as it was; recovered again after a crash at one of its recovery's
//! writes, which must come out as one recovery leaves it; and recovered by the kernel (a
//! read-write loop mount), which e2fsck must find clean, where loop mounts work.
//!
//! Two kinds of state may be refused (see `crash_states/sweep.rs`): a commit without its
//! log blocks, which only a device ignoring flushes leaves (recovered, it must be
//! consistent, and the transaction whole or absent where its descriptor is missing), and
//! a torn write of the primary superblock, which on these one-group images neither e2fsck
//! nor the kernel opens either.
//!
//! A file made with `Run::create_whole` takes only changes e4 makes atomic, and must come
//! back as one of its versions whole, or part-way through a range move in pieces in the
//! shapes `crash_states/range_moves.rs` names (what the kernel and e4 promise of a crash
//! in the middle of an insert or a collapse).
//!
//! Each workload asserts a floor on its states (together over 10,000; about 45,500 run).
//! `E4_CRASH_KEEP=DIR` writes each failing crash image (before recovery) and what failed,
//! with the writes since its flush, to DIR. `E4_CRASH_SAMPLES=N` samples N subsets per
//! epoch instead of 32, `E4_CRASH_SEED` picks other ones: the long run is
//! `E4_CRASH_SAMPLES=512 cargo test --release -p e4-fs --test crash_states -- --nocapture`.

mod crash_states {
    pub mod model;
    pub mod range_moves;
    pub mod sweep;
}

use crash_states::model::{self, Run, BLOCK, RECORD};
use crash_states::range_moves::Shift;
use crash_states::sweep::sweep;
use e4_fs::OpenOptions;
use e4_testkit::ONE_MIB_GROUPS;

#[test]
fn creates_and_renames_across_directories_are_atomic_at_every_crash() {
    let run = Run::start(|run| {
        run.mkdir("/a");
        run.mkdir("/b");
        let keep = run.create("/b/keep");
        run.write(keep, 0, 8192);
    });
    for i in 0..10 {
        let new = run.create(&format!("/a/new{i}"));
        run.write(new, 0, 4096 + i * RECORD * 16);
        run.fsync(new);
        run.rename(&format!("/a/new{i}"), &format!("/b/moved{i}"));
        if i % 2 == 1 {
            // Over an existing name: the old file goes, the new one takes its place.
            run.rename(&format!("/b/moved{i}"), "/b/keep");
        }
        if i % 3 == 2 {
            run.sync();
        }
    }
    let (log, model) = run.finish();
    sweep("creates and renames", &log, &model, 1_200);
}

#[test]
fn a_directory_growing_through_htree_splits_is_consistent_at_every_crash() {
    let run = Run::start(|run| run.mkdir("/d"));
    for i in 0..320 {
        // Long names: a 4 KiB leaf holds about 50, so the directory splits several times.
        let id = run.create(&format!("/d/a-rather-long-file-name-for-splitting-{i:05}"));
        if i % 16 == 0 {
            run.write(id, 0, 64 * RECORD);
            run.fsync(id);
        }
        if i % 40 == 39 {
            run.sync();
        }
    }
    let (log, model) = run.finish();
    sweep("htree growth", &log, &model, 1_000);
}

#[test]
fn truncates_and_punches_of_large_files_never_expose_freed_blocks() {
    let mut large = Vec::new();
    let run = Run::start(|run| {
        for name in ["/big1", "/big2"] {
            let id = run.create(name);
            run.write(id, 0, 1536 * 1024);
            large.push(id);
        }
    });
    let (one, two) = (large[0], large[1]);
    run.truncate(one, 700 * 1024);
    run.fsync(one);
    run.punch(two, 256 * 1024, 512 * 1024);
    run.fsync(two);
    // New files take the freed blocks: a crash must not show their records in the old
    // files, nor the old files' records in them.
    let three = run.create("/big3");
    run.write(three, 0, 768 * 1024);
    run.fsync(three);
    run.append(one, 200 * 1024);
    run.truncate(two, 0);
    run.write(two, 0, 100 * 1024);
    run.fsync(two);
    run.punch(three, 0, 4096 * 3);
    run.truncate(one, 1000);
    run.sync();
    let (log, model) = run.finish();
    sweep("truncates and punches", &log, &model, 1_000);
}

#[test]
fn concurrent_appends_keep_every_fsynced_byte_at_every_crash() {
    let mut files = Vec::new();
    let run = Run::start(|run| {
        for t in 0..4 {
            files.push(run.create(&format!("/log{t}")));
        }
    });
    std::thread::scope(|s| {
        for (t, &id) in files.iter().enumerate() {
            let run = &run;
            s.spawn(move || {
                for round in 0..12 {
                    run.append(id, 1024 + (t * 7 + round * 13) % 32 * 256);
                    if round % 3 == t % 3 {
                        run.fsync(id);
                    }
                }
            });
        }
    });
    let (log, model) = run.finish();
    sweep("concurrent appends", &log, &model, 500);
}

#[test]
fn extended_attributes_change_whole_at_every_crash() {
    let run = Run::start(|run| {
        run.create("/x");
        run.mkdir("/dir");
    });
    let small = run.create("/y");
    run.write(small, 0, 1024);
    for i in 0..8 {
        let path = if i % 2 == 0 { "/x" } else { "/y" };
        run.set_xattr(path, &format!("user.k{i}"), &[i as u8; 40]);
        // Large values leave the inode for an external block.
        run.set_xattr(path, "user.big", &vec![b'a' + i as u8; 1500]);
        if i % 3 == 0 {
            run.remove_xattr(path, &format!("user.k{i}"));
        }
        run.set_xattr("/dir", "user.d", &[i as u8; 8]);
        if i % 2 == 1 {
            run.sync();
        } else {
            run.fsync(small);
        }
    }
    let (log, model) = run.finish();
    sweep("xattrs", &log, &model, 1_500);
}

#[test]
fn an_fsync_heavy_mix_keeps_every_fsync_at_every_crash() {
    let run = Run::start(|run| run.mkdir("/m"));
    let mut live = Vec::new();
    for i in 0..24 {
        let path = format!("/m/f{i}");
        let id = run.create(&path);
        run.write(id, 0, (i % 5 + 1) * 1024);
        run.fsync(id);
        live.push((path, id));
        if i % 4 == 3 {
            let (path, _) = live.remove(0);
            run.unlink(&path);
        }
        if i % 5 == 4 {
            let (from, id) = live.pop().unwrap();
            let to = format!("/m/r{i}");
            run.rename(&from, &to);
            run.fsync(id);
            live.push((to, id));
        }
        if let Some(&(_, first)) = live.first() {
            run.append(first, 512);
            run.fsync(first);
        }
    }
    let (log, model) = run.finish();
    sweep("fsync-heavy mix", &log, &model, 10_000);
}

#[test]
fn unlinked_open_files_are_freed_after_every_crash() {
    let run = Run::start(|_| {});
    let mut open = Vec::new();
    for i in 0..6 {
        let path = format!("/open{i}");
        let id = run.create(&path);
        run.write(id, 0, 64 * 1024);
        run.fsync(id);
        run.open(id);
        run.unlink(&path);
        run.sync();
        // Still written through the open handle: an orphan with blocks.
        run.append(id, 16 * 1024);
        run.fsync(id);
        open.push(id);
        if i % 2 == 1 {
            run.close(open.remove(0));
            run.sync();
        }
    }
    for id in open {
        run.close(id);
    }
    let (log, model) = run.finish();
    sweep("unlinked open files", &log, &model, 6_000);
}

#[test]
fn freed_directory_blocks_reused_for_data_are_never_overwritten_by_the_log() {
    let run = Run::start(|run| {
        run.mkdir("/d");
        // A filler leaves a few blocks free, so new data must take the freed ones.
        let filler = run.create("/filler");
        let available = run.fs.statfs().available_blocks as usize;
        run.write(filler, 0, (available - 8) * BLOCK);
    });
    // Directory blocks, logged while the directory grows...
    let names: Vec<String> = (0..150)
        .map(|i| format!("/d/a-name-long-enough-to-fill-blocks-quickly-{i:04}"))
        .collect();
    for name in &names {
        run.create(name);
    }
    run.sync();
    // ...freed with it (their copies still in the log: revoked)...
    for name in &names {
        run.unlink(name);
    }
    run.rmdir("/d");
    run.sync();
    // ...and taken for file data: a replay of those copies would overwrite it.
    for i in 0..6 {
        let id = run.create(&format!("/data{i}"));
        run.write(id, 0, BLOCK);
        run.fsync(id);
    }
    let (log, model) = run.finish();
    sweep("freed metadata reused", &log, &model, 500);
}

/// A file whose blocks lie in more groups than one transaction may change is freed in
/// steps (`ops/steps.rs`): its unlink leaves it an orphan, and each step frees part of it
/// in a transaction of its own, committed as the log's pressure asks. A crash between
/// steps leaves an orphan partly freed, which the recovery frees: the name is gone or
/// not, and no block stays lost. A truncate in steps is all or nothing the same way: its
/// first step sets the new size and makes the file an orphan, and the recovery frees what
/// the crash left past that size (the model allows the old size or the new one, never
/// one between). (1 MiB groups and transactions bounded to 24 blocks, as a volume of
/// thousands of groups would see with its log: steps of 3 groups, a commit every few
/// steps.)
#[test]
fn a_file_over_many_groups_is_freed_in_steps_that_every_crash_completes() {
    let options = OpenOptions {
        transaction_limit: Some(24),
        ..model::options()
    };
    let mut ids = Vec::new();
    let run = Run::start_on(ONE_MIB_GROUPS, 64, options, |run| {
        for (name, mib) in [("/wide", 20), ("/open", 20), ("/cut", 8)] {
            let id = run.create(name);
            for mib in 0..mib {
                run.write(id, mib << 20, 1 << 20);
            }
            ids.push(id);
        }
    });
    // Cut back from 8 groups (three steps) to a block and 7 bytes.
    run.truncate(ids[2], BLOCK + 7);
    run.sync();
    run.unlink("/wide");
    run.sync();
    // Unlinked while open: freed in steps at its last close.
    run.open(ids[1]);
    run.unlink("/open");
    run.sync();
    run.close(ids[1]);
    let (log, model) = run.finish();
    sweep("a file freed in steps", &log, &model, 500);
}

/// Inserts and collapses that each fit one transaction are atomic (`ops/fallocate.rs`): a
/// crash leaves the file as before the move or as after it, whole (the files are checked
/// whole, not record by record), every block it freed free once and reused by one file
/// only, and every fsync'd file as fsync'd. Ranges at the start, in the middle and up to
/// the last (partial) block; over data and over holes; a hole an insert opened filled
/// again; the blocks a collapse freed taken by another file.
#[test]
fn inserts_and_collapses_leave_a_file_before_or_after_at_every_crash() {
    let (mut a, mut b) = (0, 0);
    let run = Run::start(|run| {
        a = run.create_whole("/a");
        run.write(a, 0, 40 * BLOCK);
        // A partial last block: the moves keep it partial.
        b = run.create_whole("/b");
        run.write(b, 0, 24 * BLOCK + 6 * RECORD);
        let c = run.create("/c");
        run.write(c, 0, 2 * BLOCK);
    });
    run.move_range(a, Shift::Insert, 4 * BLOCK, 3 * BLOCK);
    run.fsync(a);
    run.move_range(a, Shift::Collapse, 10 * BLOCK, 5 * BLOCK);
    run.move_range(b, Shift::Collapse, 0, 4 * BLOCK);
    // Blocks the collapses freed, taken by a new file once their commit is on disk.
    let d = run.create("/d");
    run.write(d, 0, 9 * BLOCK);
    run.fsync(d);
    // The hole the insert opened, written again.
    run.write(a, 5 * BLOCK, BLOCK);
    run.fsync(a);
    run.move_range(b, Shift::Insert, 19 * BLOCK, 2 * BLOCK);
    run.move_range(a, Shift::Insert, 0, 2 * BLOCK);
    run.sync();
    run.move_range(a, Shift::Collapse, 0, 3 * BLOCK);
    run.move_range(b, Shift::Collapse, 18 * BLOCK, 3 * BLOCK);
    run.fsync(b);
    run.move_range(a, Shift::Collapse, 30 * BLOCK, BLOCK);
    let (log, model) = run.finish();
    sweep("inserts and collapses", &log, &model, 1_000);
}

/// An insert and a collapse whose moves are larger than a transaction go in pieces of
/// whole leaves with commits between them (`ops/fallocate.rs`, as
/// `ext4_ext_shift_extents` restarts its handle), and a crash may fall between two: the
/// file is then before, after, or part-way as `range_moves.rs` describes (an insert's
/// size grown and its blocks moved from some leaf on; a collapse's range freed, its
/// blocks moved up to some leaf, the size not yet shrunk), never a block lost or doubled;
/// the recovery leaves it so (nothing finishes a move, in the kernel either). Then a
/// collapse of all but the first and last extents, whose range lies in more groups than a
/// step may touch, punches it in steps (a crash between them leaves it punched from its
/// start to a step's cut, nothing moved) and frees every tree block (the pieces logged
/// each) with the rest, and a new file takes every block an ordinary caller may, tree
/// blocks among them: a replay of a tree block's old copy (its revoke missing) would
/// write over the new file's data, and a crash never shows the new file's data in the
/// moved file, nor the moved file's in it. (1,800 one-block extents: six leaves of 340
/// under an index block, on 1 MiB groups; transactions bounded to one block, so each
/// piece or step commits on its own and a step touches one group.)
#[test]
fn a_move_in_pieces_leaves_the_file_before_after_or_part_way_at_every_crash() {
    const EXTENTS: usize = 1_800;
    const LEAF: usize = 340;
    let options = OpenOptions {
        transaction_limit: Some(1),
        ..model::options()
    };
    let (mut sparse, mut other) = (0, 0);
    let args = [ONE_MIB_GROUPS, &["-m", "0"]].concat();
    let run = Run::start_on(&args, 16, options, |run| {
        sparse = run.create_whole("/sparse");
        // Block 2i holds extent i: no two merge.
        let blocks: Vec<usize> = (0..EXTENTS).map(|i| 2 * i * BLOCK).collect();
        run.write_each(sparse, &blocks, BLOCK);
        other = run.create("/other");
        run.write(other, 0, BLOCK);
        // A filler takes what is free but room for the moves' tree blocks and the append
        // below, so the new file at the end takes the freed blocks.
        let filler = run.create("/filler");
        let available = run.fs.statfs().available_blocks as usize;
        run.fill(filler, 0, (available - 64) * BLOCK);
    });
    // A block in at block 1 (a hole): every extent but the first moves up, a leaf at a
    // time from the last.
    run.move_range_in_pieces(sparse, Shift::Insert, BLOCK, BLOCK);
    run.append(other, BLOCK);
    run.fsync(other);
    // Two blocks out at block 1 (holes): every extent but the first moves down, a leaf at
    // a time from the first, and extent i > 0 lands at block 2i - 1.
    run.move_range_in_pieces(sparse, Shift::Collapse, BLOCK, 2 * BLOCK);
    // Every extent but the first and the last goes (blocks 1..3597), punched a group at a
    // time, and the last moves down to block 1 with the step that frees the rest and
    // every tree block (two extents fit the inode).
    let tree = run.tree_blocks(sparse);
    assert_eq!(tree.len(), 7, "six leaves and an index block: {tree:?}");
    run.move_range_in_pieces(sparse, Shift::Collapse, BLOCK, (2 * EXTENTS - 4) * BLOCK);
    assert!(run.tree_blocks(sparse).is_empty(), "tree blocks left");
    // Every block an ordinary caller may take goes to a new file, tree blocks among them.
    let reuse = run.create("/reuse");
    let taken = run.fill(reuse, 0, 4096 * BLOCK) / BLOCK;
    assert!(taken > 4 * LEAF, "the new file took {taken} blocks");
    let reused = run.data_blocks(reuse).intersection(&tree).count();
    assert!(
        reused > 0,
        "the new file took none of the freed tree blocks"
    );
    run.fsync(reuse);
    let (log, model) = run.finish();
    sweep("a move in pieces", &log, &model, 3_000);
    for (id, moved, seen) in model.part_way_states() {
        eprintln!("a move in pieces: {seen} checks found file {id} part-way through {moved:?}");
        assert!(seen > 0, "no crash state fell part-way through {moved:?}");
    }
}
