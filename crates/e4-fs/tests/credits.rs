//! Transaction credits: no commit writes more metadata blocks than the handles of its
//! transaction declared (plus the superblock). Each operation here runs alone in its
//! transaction (a commit after every one), so an operation that under-declares shows as an
//! overrun of its own commit; then the same mix runs from several threads with commits in
//! between. Every kind of change is here, on every mapping and directory format: creates of
//! each kind, writes that take many runs and grow extent trees and block maps, truncates,
//! punches and shifts, unlinks of large files, renames, links, extended attributes in the
//! inode and in blocks, growing htrees and inline data.

use std::sync::Arc;
use std::time::Duration;

use e4_fs::{Creator, FallocateMode, Filesystem, OpenOptions, RenameMode, SetAttributes, XattrSet};
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

/// mke2fs options of each profile: extent trees and block maps, 1 KiB and 4 KiB blocks,
/// with and without metadata_csum, inline data.
const PROFILES: &[&[&str]] = &[
    &["-t", "ext4", "-b", "4096"],
    &["-t", "ext4", "-b", "1024"],
    &["-t", "ext4", "-O", "inline_data", "-b", "1024"],
    &["-t", "ext3", "-b", "1024"],
    &["-t", "ext2", "-b", "4096", "-O", "^dir_index"],
];

fn open(path: &std::path::Path) -> Filesystem {
    Filesystem::open(
        path,
        OpenOptions {
            commit_interval: Duration::ZERO,
            ..OpenOptions::writable()
        },
    )
    .unwrap()
}

/// Deterministic bytes.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every kind of change, in directory `dir` of `fs`, with `step` run after each (a commit,
/// or nothing) with the line of the change before it. `tag` keeps the names of concurrent
/// runs apart.
fn every_change(fs: &Filesystem, dir: u32, tag: u32, step: &dyn Fn(u32)) {
    let bs = u64::from(fs.block_size());
    let name = |s: &str| format!("{s}-{tag}").into_bytes();
    let extents = fs
        .superblock()
        .incompat()
        .contains(e4_format::features::IncompatFeatures::EXTENTS);

    // Small things: a file, a directory, symlinks fast and slow, a node, a link.
    let small = fs.create(dir, &name("small"), FILE).unwrap();
    step(line!());
    fs.write_at(small, 0, b"hello").unwrap();
    step(line!());
    let sub = fs.mkdir(dir, &name("sub"), DIR).unwrap();
    step(line!());
    fs.symlink(sub, b"fast", b"short/target", FILE).unwrap();
    step(line!());
    fs.symlink(sub, b"slow", &[b'x'; 900], FILE).unwrap();
    step(line!());
    fs.link(small, sub, b"hard").unwrap();
    step(line!());
    fs.setattr(
        small,
        &SetAttributes {
            permissions: Some(0o600),
            ..SetAttributes::default()
        },
    )
    .unwrap();
    step(line!());

    // A directory that grows past one block, into an htree where the format has one.
    let wide = fs.mkdir(dir, &name("wide"), DIR).unwrap();
    step(line!());
    for i in 0..(bs as usize / 8) {
        let f = fs
            .create(
                wide,
                format!("entry-with-a-long-name-{i:05}").as_bytes(),
                FILE,
            )
            .unwrap();
        if i % 97 == 0 {
            step(line!());
            fs.write_at(f, 0, &pattern(100, i as u64)).unwrap();
        }
        if i % 31 == 0 {
            step(line!());
        }
    }
    step(line!());
    for i in (0..(bs as usize / 8)).step_by(3) {
        fs.unlink(wide, format!("entry-with-a-long-name-{i:05}").as_bytes())
            .unwrap();
        if i % 61 == 0 {
            step(line!());
        }
    }
    step(line!());

    // A file written in many runs: interleave two files so neither gets one run.
    let big = fs.create(dir, &name("big"), FILE).unwrap();
    let other = fs.create(dir, &name("other"), FILE).unwrap();
    for i in 0..300u64 {
        fs.write_at(big, i * bs, &pattern(bs as usize, i)).unwrap();
        fs.write_at(other, i * bs, &pattern(bs as usize, i + 7))
            .unwrap();
        if i % 50 == 0 {
            step(line!());
        }
    }
    step(line!());
    // Sparse writes far apart: a deeper tree or the double and triple indirect blocks.
    for i in 0..200u64 {
        fs.write_at(big, (1000 + i * 37) * bs, &pattern(100, i))
            .unwrap();
        if i % 40 == 0 {
            step(line!());
        }
    }
    step(line!());
    fs.write_at(big, 70_000 * bs, b"far").unwrap();
    step(line!());
    // One large write.
    fs.write_at(other, 400 * bs, &pattern(600 * bs as usize, 3))
        .unwrap();
    step(line!());

    if extents {
        // Punches at many places split extents; shifts rewrite every leaf after a point.
        for i in 0..60u64 {
            fs.fallocate(big, FallocateMode::PunchHole, (i * 5 + 1) * bs, bs)
                .unwrap();
            if i % 20 == 0 {
                step(line!());
            }
        }
        step(line!());
        fs.fallocate(other, FallocateMode::CollapseRange, 10 * bs, 4 * bs)
            .unwrap();
        step(line!());
        fs.fallocate(other, FallocateMode::InsertRange, 20 * bs, 8 * bs)
            .unwrap();
        step(line!());
        // An insert that splits an extent of a full root: the split adds a tree level.
        let rooted = fs.create(dir, &name("rooted"), FILE).unwrap();
        for i in 0..4u64 {
            fs.write_at(rooted, i * 20 * bs, &pattern(10 * bs as usize, i))
                .unwrap();
        }
        step(line!());
        fs.fallocate(rooted, FallocateMode::InsertRange, 25 * bs, bs)
            .unwrap();
        step(line!());
        fs.fallocate(other, FallocateMode::ZeroRange, 3 * bs + 5, 40 * bs)
            .unwrap();
        step(line!());
        fs.fallocate(small, FallocateMode::KeepSize, 0, 200 * bs)
            .unwrap();
        step(line!());
        fs.write_at(small, 50 * bs + 17, &pattern(3000, 9)).unwrap();
        step(line!());
    }

    // Extended attributes: in the inode, then too large for it (a block), shared removal.
    fs.set_xattr(small, b"user.a", b"1", XattrSet::Either)
        .unwrap();
    step(line!());
    fs.set_xattr(
        small,
        b"user.big",
        &pattern(bs as usize / 2, 1),
        XattrSet::Either,
    )
    .unwrap();
    step(line!());
    fs.remove_xattr(small, b"user.big").unwrap();
    step(line!());

    // Renames: within a directory, across, over an existing file, a directory, exchanges.
    fs.rename(dir, &name("small"), sub, b"moved", RenameMode::Replace)
        .unwrap();
    step(line!());
    fs.rename(sub, b"moved", dir, &name("other"), RenameMode::Replace)
        .unwrap();
    step(line!());
    fs.rename(dir, &name("wide"), sub, b"wide-moved", RenameMode::Replace)
        .unwrap();
    step(line!());
    fs.rename(sub, b"fast", sub, b"slow", RenameMode::Exchange)
        .unwrap();
    step(line!());

    // Shrinking and removing large files; an unlinked file kept open, then closed.
    fs.truncate(big, 123 * bs + 45).unwrap();
    step(line!());
    fs.truncate(big, 0).unwrap();
    step(line!());
    let kept = fs.create(dir, &name("kept"), FILE).unwrap();
    fs.write_at(kept, 0, &pattern(50 * bs as usize, 4)).unwrap();
    step(line!());
    fs.open_inode(kept).unwrap();
    fs.unlink(dir, &name("kept")).unwrap();
    step(line!());
    fs.release_inode(kept).unwrap();
    step(line!());
    fs.unlink(dir, &name("big")).unwrap();
    step(line!());
    fs.unlink(dir, &name("other")).unwrap();
    step(line!());
}

fn assert_no_overrun(fs: &Filesystem, what: &str) {
    let overruns = fs.credit_overruns();
    assert!(
        overruns.is_empty(),
        "{what}: commits wrote more than their handles declared: {overruns:?}"
    );
}

#[test]
fn each_operation_alone_writes_no_more_than_it_declared() {
    for profile in PROFILES {
        let img = make_empty_image(profile, 64);
        let fs = open(&img.path);
        let dir = fs.mkdir(ROOT, b"work", DIR).unwrap();
        fs.sync().unwrap();
        every_change(&fs, dir, 0, &|line| {
            fs.sync().unwrap();
            assert_no_overrun(&fs, &format!("{profile:?}, the change before line {line}"));
        });
        fs.sync().unwrap();
        assert_no_overrun(&fs, &format!("{profile:?}"));
        fs.unmount().unwrap();
        e2fsck_clean(&img.path).unwrap_or_else(|e| panic!("{profile:?}: {e}"));
    }
}

#[test]
fn concurrent_operations_write_no_more_than_they_declared() {
    for profile in [PROFILES[0], PROFILES[3]] {
        let img = make_empty_image(profile, 128);
        let fs = Arc::new(open(&img.path));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let fs = Arc::clone(&fs);
                std::thread::spawn(move || {
                    let dir = fs.mkdir(ROOT, format!("t{t}").as_bytes(), DIR).unwrap();
                    // Commits from this thread land in the middle of the others' work.
                    let n = std::sync::atomic::AtomicU32::new(0);
                    every_change(&fs, dir, t, &|_| {
                        if n.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3 == t % 3 {
                            fs.sync().unwrap();
                        }
                    });
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        fs.sync().unwrap();
        assert_no_overrun(&fs, &format!("{profile:?}, 4 threads"));
        Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
        e2fsck_clean(&img.path).unwrap_or_else(|e| panic!("{profile:?}: {e}"));
    }
}
