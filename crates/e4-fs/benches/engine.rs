//! In-process throughput of the write engine, with its lock traffic per operation, beside
//! the kernel's ext4 on a loop device over tmpfs running the same workload through system
//! calls (when run as root; otherwise that column is skipped).
//!
//! `cargo bench -p e4-fs --bench engine [-- --threads 1,2,4,8,16 --seconds 1 --runs 3]`
//!
//! Workloads, each thread on its own file or directory:
//! - `create`: empty files in a private directory (FxMark MWCL);
//! - `unlink`: the files `create` made (MWUL);
//! - `append`: 4 KiB writes at the end of a private file (reports MiB/s and the mean extent
//!   of the resulting files, read back from the image);
//! - `fallocate2`: will-it-scale's fallocate2: 8 KiB fallocate appends to 1 MiB, truncate to
//!   0, repeat.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e4_fs::{Creator, FallocateMode, Filesystem, LockReport, Mapping, OpenOptions};

const ROOT: u32 = 2;
const ME: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
};
const IMAGE_MIB: u64 = 2048;

struct Options {
    threads: Vec<usize>,
    seconds: f64,
    runs: usize,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    Options {
        threads: value("--threads")
            .unwrap_or_else(|| "1,2,4,8,16".into())
            .split(',')
            .map(|t| t.parse().expect("--threads takes numbers"))
            .collect(),
        seconds: value("--seconds").map_or(1.0, |s| s.parse().unwrap()),
        runs: value("--runs").map_or(3, |s| s.parse().unwrap()),
    }
}

fn scratch() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("e4-bench-{}", std::process::id()))
}

fn make_image(path: &Path) {
    let _ = std::fs::remove_file(path);
    let out = Command::new("mke2fs")
        .args([
            "-q",
            "-F",
            "-t",
            "ext4",
            "-E",
            "lazy_itable_init=1,lazy_journal_init=1",
        ])
        .arg(path)
        .arg(format!("{IMAGE_MIB}M"))
        .output()
        .expect("mke2fs is needed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One measured run: operations (or bytes) done by all threads in the time given.
struct Run {
    ops: u64,
    bytes: u64,
    elapsed: Duration,
    locks: Option<(LockReport, LockReport)>,
    mean_extent: Option<f64>,
}

/// Runs `work(thread, deadline) -> (ops, bytes)` on `threads` threads.
fn timed(
    threads: usize,
    seconds: f64,
    work: impl Fn(usize, Instant) -> (u64, u64) + Sync,
) -> (u64, u64, Duration) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let totals: Vec<(u64, u64)> = std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || work(t, deadline)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed();
    (
        totals.iter().map(|t| t.0).sum(),
        totals.iter().map(|t| t.1).sum(),
        elapsed,
    )
}

fn mean_extent_blocks(fs: &Filesystem, inos: &[u32]) -> f64 {
    let (mut extents, mut blocks) = (0u64, 0u64);
    for &ino in inos {
        let size = fs.metadata(ino).unwrap().size;
        let inode = fs.read_inode(ino).unwrap();
        let bs = u64::from(fs.block_size());
        let mut logical = 0;
        let mut last_end = None;
        while logical < size.div_ceil(bs) {
            match fs.map_block(&inode, logical, u64::MAX).unwrap() {
                Mapping::Data { physical, len, .. } => {
                    if last_end != Some(physical) {
                        extents += 1;
                    }
                    last_end = Some(physical + len);
                    blocks += len;
                    logical += len;
                }
                Mapping::Hole { len } => logical += len,
            }
        }
    }
    blocks as f64 / extents.max(1) as f64
}

fn e4_run(workload: &str, threads: usize, seconds: f64, image: &Path) -> Run {
    make_image(image);
    let fs = Filesystem::open(image, OpenOptions::writable()).unwrap();
    let dirs: Vec<u32> = (0..threads)
        .map(|t| fs.mkdir(ROOT, format!("t{t}").as_bytes(), ME).unwrap())
        .collect();
    if workload == "unlink" {
        // Files to remove, made before the clock starts.
        timed(threads, seconds, |t, deadline| {
            let mut n = 0;
            while Instant::now() < deadline {
                fs.create(dirs[t], format!("f{n}").as_bytes(), ME).unwrap();
                n += 1;
            }
            (n, 0)
        });
        fs.sync().unwrap();
    }
    let files: Vec<u32> = (0..threads)
        .map(|t| fs.create(dirs[t], b"data", ME).unwrap())
        .collect();
    let before = fs.lock_stats();
    let (ops, bytes, elapsed) = timed(threads, seconds, |t, deadline| {
        let mut n = 0u64;
        let mut bytes = 0u64;
        let chunk = vec![t as u8; 4096];
        let mut size = 0u64;
        while Instant::now() < deadline {
            for _ in 0..64 {
                match workload {
                    "create" => {
                        fs.create(dirs[t], format!("f{n}").as_bytes(), ME).unwrap();
                    }
                    "unlink" => {
                        if fs.unlink(dirs[t], format!("f{n}").as_bytes()).is_err() {
                            return (n, 0);
                        }
                    }
                    "append" => {
                        fs.write_at(files[t], size, &chunk).unwrap();
                        size += 4096;
                        bytes += 4096;
                    }
                    "fallocate2" => {
                        if size >= 1 << 20 {
                            fs.truncate(files[t], 0).unwrap();
                            size = 0;
                        }
                        fs.fallocate(files[t], FallocateMode::Allocate, size, 8192)
                            .unwrap();
                        size += 8192;
                    }
                    _ => unreachable!(),
                }
                n += 1;
            }
        }
        (n, bytes)
    });
    let after = fs.lock_stats();
    let mean_extent = (workload == "append").then(|| mean_extent_blocks(&fs, &files) * 4096.0);
    fs.unmount().unwrap();
    Run {
        ops,
        bytes,
        elapsed,
        locks: Some((before, after)),
        mean_extent,
    }
}

/// The same workloads through system calls on the kernel's ext4 (a loop mount of an image
/// on tmpfs), when this runs as root.
fn kernel_run(
    workload: &str,
    threads: usize,
    seconds: f64,
    image: &Path,
    mount: &Path,
) -> Option<Run> {
    make_image(image);
    std::fs::create_dir_all(mount).ok()?;
    let ok = Command::new("mount")
        .args(["-o", "loop"])
        .arg(image)
        .arg(mount)
        .status()
        .ok()?
        .success();
    if !ok {
        return None;
    }
    let dirs: Vec<PathBuf> = (0..threads)
        .map(|t| {
            let d = mount.join(format!("t{t}"));
            std::fs::create_dir(&d).unwrap();
            d
        })
        .collect();
    if workload == "unlink" {
        timed(threads, seconds, |t, deadline| {
            let mut n = 0;
            while Instant::now() < deadline {
                std::fs::File::create(dirs[t].join(format!("f{n}"))).unwrap();
                n += 1;
            }
            (n, 0)
        });
    }
    let (ops, bytes, elapsed) = timed(threads, seconds, |t, deadline| {
        let mut n = 0u64;
        let mut bytes = 0u64;
        let chunk = vec![t as u8; 4096];
        let data = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(dirs[t].join("data"))
            .unwrap();
        let mut size = 0u64;
        while Instant::now() < deadline {
            for _ in 0..64 {
                match workload {
                    "create" => drop(std::fs::File::create(dirs[t].join(format!("f{n}"))).unwrap()),
                    "unlink" => {
                        if std::fs::remove_file(dirs[t].join(format!("f{n}"))).is_err() {
                            return (n, 0);
                        }
                    }
                    "append" => {
                        data.write_all_at(&chunk, size).unwrap();
                        size += 4096;
                        bytes += 4096;
                    }
                    "fallocate2" => {
                        use std::os::fd::AsRawFd;
                        if size >= 1 << 20 {
                            data.set_len(0).unwrap();
                            size = 0;
                        }
                        // SAFETY: fallocate on a descriptor this thread owns; no memory is
                        // passed to the kernel.
                        let r = unsafe { libc::fallocate(data.as_raw_fd(), 0, size as i64, 8192) };
                        assert_eq!(r, 0);
                        size += 8192;
                    }
                    _ => unreachable!(),
                }
                n += 1;
            }
        }
        (n, bytes)
    });
    let _ = Command::new("sync").status();
    let _ = Command::new("umount").arg(mount).status();
    Some(Run {
        ops,
        bytes,
        elapsed,
        locks: None,
        mean_extent: None,
    })
}

fn rate(run: &Run) -> f64 {
    run.ops as f64 / run.elapsed.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn per_op(run: &Run) -> String {
    let Some((b, a)) = &run.locks else {
        return String::new();
    };
    let ops = run.ops.max(1) as f64;
    let total = |r: &LockReport| {
        r.inode.acquisitions
            + r.inode_cache_shards.acquisitions
            + r.buffer_cache_shards.acquisitions
            + r.commit_gate.acquisitions
            + r.block_groups.acquisitions
            + r.packing_windows.acquisitions
            + r.inode_groups.acquisitions
    };
    let contended = |r: &LockReport| {
        r.inode.contended
            + r.inode_cache_shards.contended
            + r.buffer_cache_shards.contended
            + r.commit_gate.contended
            + r.block_groups.contended
            + r.packing_windows.contended
            + r.inode_groups.contended
    };
    format!(
        "{:6.1} locks/op {:7.4} contended/op ({} commits)",
        (total(a) - total(b)) as f64 / ops,
        (contended(a) - contended(b)) as f64 / ops,
        a.commits - b.commits
    )
}

fn main() {
    let opts = options();
    let dir = scratch();
    std::fs::create_dir_all(&dir).unwrap();
    let image = dir.join("bench.img");
    let mount = dir.join("mnt");
    println!(
        "e4 engine, in process, vs the kernel's ext4 on a loop device over tmpfs; {} run(s) of {:.1} s; median (min-max)",
        opts.runs, opts.seconds
    );
    let only = std::env::var("E4_BENCH_ONLY").ok();
    for workload in ["create", "unlink", "append", "fallocate2"] {
        if only.as_deref().is_some_and(|o| o != workload) {
            continue;
        }
        println!("\n{workload}");
        for &threads in &opts.threads {
            let e4: Vec<Run> = (0..opts.runs)
                .map(|_| e4_run(workload, threads, opts.seconds, &image))
                .collect();
            let (lo, mid, hi) = median(e4.iter().map(rate).collect());
            let kernel: Vec<Run> = (0..opts.runs
                * usize::from(std::env::var_os("E4_BENCH_NO_KERNEL").is_none()))
                .filter_map(|_| kernel_run(workload, threads, opts.seconds, &image, &mount))
                .collect();
            let middle = &e4[e4.len() / 2];
            let mut line = format!(
                "  {threads:>2} threads  e4 {mid:>10.0} ops/s ({lo:.0}-{hi:.0})  {}",
                per_op(middle)
            );
            if workload == "append" {
                let mib = |r: &Run| r.bytes as f64 / r.elapsed.as_secs_f64() / (1 << 20) as f64;
                line += &format!(
                    "  {:.0} MiB/s, mean extent {:.1} MiB",
                    median(e4.iter().map(mib).collect()).1,
                    middle.mean_extent.unwrap_or(0.0) / (1 << 20) as f64
                );
            }
            if !kernel.is_empty() {
                let (klo, kmid, khi) = median(kernel.iter().map(rate).collect());
                line += &format!(
                    "  kernel {kmid:>9.0} ({klo:.0}-{khi:.0})  ratio {:.2}x",
                    mid / kmid
                );
            }
            println!("{line}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
