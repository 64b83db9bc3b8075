//! Fills an empty image (made by mke2fs) through e4's own write path, for the fsck speed
//! benchmark of issue 9 §5 (`scripts/bench-fsck.sh`). Three shapes:
//!
//! - `small IMAGE ENTRIES`: about ENTRIES small files and directories, 64 entries per
//!   directory, two levels below the root; file sizes cycle through 0, 100, 3,000 and 0
//!   bytes so most inodes hold at most one block (tmpfs memory stays near the metadata).
//! - `fragmented IMAGE FILES BLOCKS`: FILES files, each fallocated to BLOCKS blocks and then
//!   punched at every other block, so each holds BLOCKS/2 one-block extents (the case where
//!   e2fsck's parallel pass 1 fell apart).
//! - `mixed IMAGE ENTRIES`: four large directories sharing half of ENTRIES (hash trees of
//!   tens of thousands of long names), and a tree holding the other half: 1 KiB files,
//!   one in eight grown to up to 64 KiB by interleaved appends (several extents each),
//!   symlinks short and long, hard links and extended attributes.
//!
//! `-j THREADS` (after the image) spreads the work over threads, each on its own subtree or
//! file. The image is unmounted cleanly, so `e2fsck -fn` must find it clean.
//!
//! ```sh
//! mke2fs -q -F -t ext4 -N 2200000 /dev/shm/small.img 16G
//! cargo run --release -p e4-fsck --example bench_image -- small /dev/shm/small.img 2000000 -j 2
//! ```

use std::process::ExitCode;

use e4_fs::{Creator, FallocateMode, Filesystem, OpenOptions, XattrSet};

const ROOT: u32 = 2;
const OWNER: Creator = Creator {
    permissions: 0o644,
    uid: 1000,
    gid: 1000,
    umask: 0,
};
/// Entries per directory in the `small` tree.
const FANOUT: u64 = 64;

type Outcome = Result<(), String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench_image: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Outcome {
    let usage = "usage: bench_image small IMAGE ENTRIES | fragmented IMAGE FILES BLOCKS | mixed IMAGE ENTRIES  [-j THREADS]";
    let (positional, threads) = split_threads(args)?;
    let number = |i: usize| -> Result<u64, String> {
        positional
            .get(i)
            .ok_or_else(|| usage.to_string())?
            .parse()
            .map_err(|e| format!("argument {}: {e}", i + 1))
    };
    let (Some(kind), Some(image)) = (positional.first(), positional.get(1)) else {
        return Err(usage.to_string());
    };
    let fs = Filesystem::open(image, OpenOptions::writable())
        .map_err(|e| format!("cannot open {image} for writing: {e}"))?;
    match kind.as_str() {
        "small" => small_tree(&fs, number(2)?, threads)?,
        "fragmented" => fragmented_files(&fs, number(2)?, number(3)?, threads)?,
        "mixed" => mixed_tree(&fs, number(2)?, threads)?,
        _ => return Err(usage.to_string()),
    }
    fs.unmount().map_err(|e| format!("unmount: {e}"))
}

/// Removes `-j N` from the arguments; the thread count defaults to the cores available.
fn split_threads(args: &[String]) -> Result<(Vec<String>, usize), String> {
    let mut threads = std::thread::available_parallelism().map_or(1, usize::from);
    let mut rest = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "-j" {
            let value = iter.next().ok_or("-j needs a thread count")?;
            threads = value
                .parse()
                .map_err(|e| format!("-j {value}: {e}"))
                .and_then(|n: usize| {
                    if n == 0 {
                        Err("-j must be at least 1".to_string())
                    } else {
                        Ok(n)
                    }
                })?;
        } else {
            rest.push(arg.clone());
        }
    }
    Ok((rest, threads))
}

/// Runs `work(part)` for parts `0..parts` on `threads` threads; the first error wins.
fn in_parallel(threads: usize, parts: u64, work: impl Fn(u64) -> Outcome + Sync) -> Outcome {
    let next = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Outcome {
                    loop {
                        let part = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if part >= parts {
                            return Ok(());
                        }
                        work(part)?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().map_err(|_| "a worker panicked".to_string())?)
    })
}

fn mkdir(fs: &Filesystem, parent: u32, name: &str) -> Result<u32, String> {
    fs.mkdir(parent, name.as_bytes(), OWNER)
        .map_err(|e| format!("mkdir {name} in inode {parent}: {e}"))
}

fn create(fs: &Filesystem, parent: u32, name: &str) -> Result<u32, String> {
    fs.create(parent, name.as_bytes(), OWNER)
        .map_err(|e| format!("create {name} in inode {parent}: {e}"))
}

fn write(fs: &Filesystem, ino: u32, offset: u64, data: &[u8]) -> Outcome {
    fs.write_at(ino, offset, data)
        .map(drop)
        .map_err(|e| format!("write {} bytes at {offset} of inode {ino}: {e}", data.len()))
}

/// `small`: top directories of FANOUT leaf directories of FANOUT files each; one top
/// directory is one unit of parallel work.
fn small_tree(fs: &Filesystem, entries: u64, threads: usize) -> Outcome {
    let per_top = FANOUT * (FANOUT + 1) + 1;
    let tops = entries.div_ceil(per_top);
    let sizes = [0usize, 100, 3000, 0];
    let payload = vec![0x5au8; 3000];
    in_parallel(threads, tops, |top| {
        let top_dir = mkdir(fs, ROOT, &format!("t{top:05}"))?;
        for leaf in 0..FANOUT {
            let dir = mkdir(fs, top_dir, &format!("d{leaf:02}"))?;
            for file in 0..FANOUT {
                let ino = create(fs, dir, &format!("f{file:02}"))?;
                let size = sizes[(file % 4) as usize];
                if size > 0 {
                    write(fs, ino, 0, &payload[..size])?;
                }
            }
        }
        Ok(())
    })
}

/// `fragmented`: each file is allocated whole (unwritten extents, nothing written), then
/// every even block is punched out.
fn fragmented_files(fs: &Filesystem, files: u64, blocks: u64, threads: usize) -> Outcome {
    let block = u64::from(fs.block_size());
    in_parallel(threads, files, |file| {
        let ino = create(fs, ROOT, &format!("fragmented{file}"))?;
        fs.fallocate(ino, FallocateMode::Allocate, 0, blocks * block)
            .map_err(|e| format!("fallocate {blocks} blocks to inode {ino}: {e}"))?;
        for b in (0..blocks).step_by(2) {
            fs.fallocate(ino, FallocateMode::PunchHole, b * block, block)
                .map_err(|e| format!("punch block {b} of inode {ino}: {e}"))?;
        }
        Ok(())
    })
}

/// `mixed`: four large directories (units 0-3) and subtrees of 1,000 entries (the rest).
fn mixed_tree(fs: &Filesystem, entries: u64, threads: usize) -> Outcome {
    const LARGE_DIRS: u64 = 4;
    const PER_SUBTREE: u64 = 1000;
    let per_large = entries / 2 / LARGE_DIRS;
    let subtrees = (entries / 2).div_ceil(PER_SUBTREE);
    let piece = vec![0xa5u8; 4096];
    in_parallel(threads, LARGE_DIRS + subtrees, |unit| {
        if unit < LARGE_DIRS {
            let dir = mkdir(fs, ROOT, &format!("large{unit}"))?;
            for i in 0..per_large {
                let name = format!("entry-{i:08}-with-a-name-long-enough-to-fill-leaves");
                create(fs, dir, &name)?;
            }
            return Ok(());
        }
        let dir = mkdir(fs, ROOT, &format!("tree{:05}", unit - LARGE_DIRS))?;
        let mut files = Vec::new();
        for i in 0..PER_SUBTREE / 10 {
            let sub = mkdir(fs, dir, &format!("sub{i:03}"))?;
            for j in 0..8u64 {
                let ino = create(fs, sub, &format!("file{j}"))?;
                if j % 4 == 0 {
                    fs.set_xattr(ino, b"user.origin", b"bench_image", XattrSet::Either)
                        .map_err(|e| format!("set_xattr on inode {ino}: {e}"))?;
                }
                files.push(ino);
            }
            let target = if i % 2 == 0 {
                "short".to_string()
            } else {
                "a/long/target/".repeat(8)
            };
            fs.symlink(sub, b"link", target.as_bytes(), OWNER)
                .map_err(|e| format!("symlink in inode {sub}: {e}"))?;
        }
        if let Some(&first) = files.first() {
            fs.link(first, dir, b"hard")
                .map_err(|e| format!("link inode {first}: {e}"))?;
        }
        // One file in eight grows by interleaved 4 KiB appends (up to 64 KiB), so the
        // allocator places its pieces apart and it gets several extents; the others hold
        // 1 KiB.
        for round in 0..16u64 {
            for (k, &ino) in files.iter().enumerate() {
                let k = k as u64;
                if k % 8 != 0 {
                    if round == 0 {
                        write(fs, ino, 0, &piece[..1024])?;
                    }
                } else if (k / 8) % 16 >= round {
                    write(fs, ino, round * piece.len() as u64, &piece)?;
                }
            }
        }
        Ok(())
    })
}
