//! Lazy checkpointing (`io/checkpoint_list.rs`): a committed block waits in the
//! checkpoint list and goes home once, at the checkpoint, however many commits logged it;
//! meanwhile every read sees it; and a block a committed transaction freed leaves the list
//! before it can become another file's data.

use std::os::unix::fs::FileExt;
use std::time::Duration;

use e4_fs::{Creator, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image};

const ROOT: u32 = 2;
const ME: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

fn no_interval() -> OpenOptions {
    OpenOptions {
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    }
}

/// The bytes of block `nr` in the image file at `path`, as the device holds them.
fn home_block(path: &std::path::Path, nr: u64, block_size: u32) -> Vec<u8> {
    let file = std::fs::File::open(path).unwrap();
    let mut bytes = vec![0u8; block_size as usize];
    file.read_exact_at(&mut bytes, nr * u64::from(block_size))
        .unwrap();
    bytes
}

/// The inode-table block that holds inode `ino`'s record.
fn table_block(fs: &Filesystem, ino: u32) -> u64 {
    let sb = fs.superblock();
    let index = u64::from(ino - 1);
    let group = (index / u64::from(sb.inodes_per_group)) as usize;
    let slot = index % u64::from(sb.inodes_per_group);
    let table = fs.group_descriptors()[group].inode_table();
    table + slot * u64::from(sb.inode_size()) / u64::from(fs.block_size())
}

/// Appends blocks to file `ino` until the filesystem is full; returns what it wrote (each
/// block different, from `seed`).
fn fill(fs: &Filesystem, ino: u32, seed: u8) -> Vec<u8> {
    let block = fs.block_size() as usize;
    let mut data = Vec::new();
    loop {
        let n = data.len() / block;
        let bytes: Vec<u8> = (0..block).map(|i| seed ^ (i + n) as u8).collect();
        match fs.write_at(ino, data.len() as u64, &bytes) {
            Ok(written) if written == block => data.extend_from_slice(&bytes),
            Ok(_) => return data,
            Err(e) if e.errno() == rustix::io::Errno::NOSPC.raw_os_error() => return data,
            Err(e) => panic!("{e}"),
        }
    }
}

/// The physical blocks of the first `blocks` blocks of `inode`.
fn physical_blocks(fs: &Filesystem, inode: &e4_fs::Inode, blocks: u64) -> Vec<u64> {
    (0..blocks)
        .filter_map(|l| match fs.map_block(inode, l, 1).unwrap() {
            e4_fs::Mapping::Data { physical, .. } => Some(physical),
            e4_fs::Mapping::Hole { .. } => None,
        })
        .collect()
}

/// Fifty fsyncs of one growing file log its inode-table block fifty times and leave its
/// home as it was before them (reads see the new record); the unmount's checkpoint writes
/// it home. Then, fsyncs enough to fill the smallest log several times over make
/// checkpoints that write each block once: a few blocks each, against hundreds logged.
#[test]
fn a_block_many_commits_log_goes_home_once_at_the_checkpoint() {
    // 16 MiB: 1 KiB blocks and the smallest log mke2fs makes (1,024 blocks).
    let img = make_empty_image(&["-t", "ext4"], 16);
    let fs = Filesystem::open(&img.path, no_interval()).unwrap();
    let ino = fs.create(ROOT, b"f", ME).unwrap();
    fs.sync().unwrap();
    let (block_size, table) = (fs.block_size(), table_block(&fs, ino));
    let before = home_block(&img.path, table, block_size);
    for i in 0..50u64 {
        fs.write_at(ino, i, b"x").unwrap();
        fs.fsync(ino).unwrap();
    }
    let stats = fs.journal_stats().unwrap();
    assert_eq!(stats.checkpoints, 0, "{stats:?}");
    assert!(stats.commits >= 51, "{stats:?}");
    assert_eq!(
        home_block(&img.path, table, block_size),
        before,
        "the inode-table block was written home before a checkpoint"
    );
    assert_eq!(fs.read_inode(ino).unwrap().size(), 50);
    for i in 50..2000u64 {
        fs.write_at(ino, i, b"x").unwrap();
        fs.fsync(ino).unwrap();
    }
    let stats = fs.journal_stats().unwrap();
    assert!(stats.checkpoints >= 2, "{stats:?}");
    assert!(
        stats.checkpointed_blocks * 20 < stats.log_blocks,
        "checkpoints wrote about as many blocks as the log took: {stats:?}"
    );
    fs.unmount().unwrap();
    assert_ne!(home_block(&img.path, table, block_size), before);
    e2fsck_clean(&img.path).unwrap();
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    assert_eq!(fs.read_file(ino, 1 << 20).unwrap(), vec![b'x'; 2000]);
}

/// A directory's blocks, committed, wait for the checkpoint; freed with the directory, they
/// leave the list when the transaction that frees them commits (before the allocator may
/// hand them out as another file's data, which the checkpoint would otherwise overwrite
/// with the directory's old copies); then, taken by a new file that fills the filesystem,
/// its data survives the unmount's checkpoint. (Debug builds also refuse a data write over
/// a held block outright.)
#[test]
fn freed_metadata_leaves_the_checkpoint_list_before_it_can_become_data() {
    // No blocks reserved for root: the new file may take every free block.
    let img = make_empty_image(&["-t", "ext4", "-m", "0"], 8);
    let fs = Filesystem::open(&img.path, no_interval()).unwrap();
    let block = fs.block_size() as usize;
    let dir = fs
        .mkdir(
            ROOT,
            b"d",
            Creator {
                permissions: 0o755,
                ..ME
            },
        )
        .unwrap();
    let names: Vec<String> = (0..150)
        .map(|i| format!("a-name-long-enough-to-fill-blocks-quickly-{i:04}"))
        .collect();
    for name in &names {
        fs.create(dir, name.as_bytes(), ME).unwrap();
    }
    let filler = fs.create(ROOT, b"filler", ME).unwrap();
    fill(&fs, filler, 0xF1);
    fs.sync().unwrap();
    let inode = fs.read_inode(dir).unwrap();
    let dir_blocks = physical_blocks(&fs, &inode, inode.size() / block as u64);
    assert!(dir_blocks.len() >= 4, "the directory has {dir_blocks:?}");
    for nr in &dir_blocks {
        assert!(
            fs.waits_for_checkpoint(*nr),
            "directory block {nr} is not held"
        );
    }
    for name in &names {
        fs.unlink(dir, name.as_bytes()).unwrap();
    }
    fs.rmdir(ROOT, b"d").unwrap();
    fs.sync().unwrap();
    for nr in &dir_blocks {
        assert!(
            !fs.waits_for_checkpoint(*nr),
            "freed block {nr} is still held"
        );
    }
    let ino = fs.create(ROOT, b"data", ME).unwrap();
    let data = fill(&fs, ino, 0x5A);
    assert!(data.len() >= 4 * block, "{} bytes written", data.len());
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    assert!(
        fs.read_file(ino, 1 << 30).unwrap() == data,
        "the new file's data changed"
    );
}
