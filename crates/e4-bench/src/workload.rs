//! The workloads: will-it-scale's fallocate2, fio-style appends, the FxMark
//! micro-benchmarks that apply to a filesystem without a page cache of its own
//! (reference/allocator.md §4.3), a race for the last blocks of a nearly full
//! filesystem, sequential 1 MiB writes and reads of a file per thread, and a real source
//! tree extracted, removed and `git status`ed through the system's tools
//! ([`real_tree`](crate::real_tree)). Each runs on any [`FsOps`], setting up what it needs
//! before the clock starts.

use std::io;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e4_fs::LockReport;

use crate::fs_ops::{is_no_space, FsOps};
use crate::pinning::Placement;
use crate::real_tree::{self, TreeTarball};

/// Bytes per append, overwrite and truncation step.
pub const BLOCK: u64 = 4096;
/// Bytes per request of `seqwrite` and `seqread`: the largest request the kernel's FUSE
/// sends (`fs.fuse.max_pages_limit`), and what `dd bs=1M` or `cp` of a large file asks for.
pub const SEQUENTIAL_REQUEST: u64 = 1 << 20;
/// fallocate2's step and the size it truncates at.
const FALLOCATE2_STEP: u64 = 8192;
const FALLOCATE2_LIMIT: u64 = 1 << 20;
/// Depth of MRPL's private path.
const PATH_DEPTH: usize = 8;
/// Entries in each MRDL directory.
const LISTED_ENTRIES: usize = 100;
/// Operations between two looks at the clock.
const BATCH: u64 = 32;
/// How full `near-full` makes the filesystem before the race starts.
const NEAR_FULL_PERCENT: u64 = 95;
/// `near-full` races until every thread is out of space, not for `--duration`; this bounds
/// it should a target never report ENOSPC.
const NEAR_FULL_LIMIT: Duration = Duration::from_secs(120);

/// How `append` grows its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendBy {
    Write,
    Fallocate,
}

/// A workload, by the name `e4 bench` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// will-it-scale fallocate2: 8 KiB fallocate appends to 1 MiB, truncate to 0, repeat.
    Fallocate2,
    /// 4 KiB appends to a private file, up to `--size` (FxMark DWAL; fio's appends).
    Append,
    /// Creates in a private directory (FxMark MWCL).
    Create,
    /// Unlinks in a private directory (MWUL), of files made before the clock (see
    /// [`setup_files_per_thread`]).
    Unlink,
    /// Creates in one shared directory (MWCM).
    CreateShared,
    /// Unlinks in one shared directory (MWUM), of files made before the clock.
    UnlinkShared,
    /// Overwrites of a private file's one block (DWOL).
    Dwol,
    /// Truncation of a private file by one block per operation (DWTL).
    Dwtl,
    /// A 4 KiB append and an fsync (DWSL).
    Dwsl,
    /// Resolution of a private path 8 directories deep (MRPL).
    Mrpl,
    /// Listing of a private directory of 100 entries (MRDL).
    Mrdl,
    /// Renames within a private directory (MWRL).
    Mwrl,
    /// Moves from a private directory into a shared one (MWRM).
    Mwrm,
    /// 4 KiB appends racing for the last 5 % of the filesystem until every thread is out
    /// of space (not for `--duration`); checks that nothing was over-committed or lost.
    /// Image-backed targets only: it fills the filesystem.
    NearFull,
    /// Sequential writes of a private new file in 1 MiB requests up to `--size`, then its
    /// fsync, inside the clock: buffered I/O as a user sees it, done once the data is safe.
    SeqWrite,
    /// Sequential reads of a private file of `--size` in 1 MiB requests, from storage: the
    /// file is written, fsync'd and dropped from the page cache before the clock
    /// ([`FsOps::drop_cached`]).
    SeqRead,
    /// `tar -x` of the tree into a private directory per thread, once each, then `syncfs`,
    /// inside the clock. Targets with a directory only (not e4 in process).
    Untar,
    /// `rm -rf` of a private copy of the tree per thread, extracted before the clock, then
    /// `syncfs`, inside the clock.
    RmTree,
    /// `git status` in a private work tree per thread, committed before the clock, again
    /// and again until `--duration`. Warm: the set-up ran `git status` once, so the index
    /// holds every file's stat data and the kernel's caches hold what that run read, as
    /// for a developer asking again (nothing is dropped: the kernel's dentry and attribute
    /// caches can only be dropped machine-wide).
    GitStatus,
}

impl Workload {
    pub const ALL: [Workload; 19] = [
        Workload::Fallocate2,
        Workload::Append,
        Workload::Create,
        Workload::Unlink,
        Workload::CreateShared,
        Workload::UnlinkShared,
        Workload::Dwol,
        Workload::Dwtl,
        Workload::Dwsl,
        Workload::Mrpl,
        Workload::Mrdl,
        Workload::Mwrl,
        Workload::Mwrm,
        Workload::NearFull,
        Workload::SeqWrite,
        Workload::SeqRead,
        Workload::Untar,
        Workload::RmTree,
        Workload::GitStatus,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Fallocate2 => "fallocate2",
            Workload::Append => "append",
            Workload::Create => "create",
            Workload::Unlink => "unlink",
            Workload::CreateShared => "create-shared",
            Workload::UnlinkShared => "unlink-shared",
            Workload::Dwol => "dwol",
            Workload::Dwtl => "dwtl",
            Workload::Dwsl => "dwsl",
            Workload::Mrpl => "mrpl",
            Workload::Mrdl => "mrdl",
            Workload::Mwrl => "mwrl",
            Workload::Mwrm => "mwrm",
            Workload::NearFull => "near-full",
            Workload::SeqWrite => "seqwrite",
            Workload::SeqRead => "seqread",
            Workload::Untar => "untar",
            Workload::RmTree => "rm-tree",
            Workload::GitStatus => "git-status",
        }
    }

    /// Whether the workload leaves file data whose layout is worth reading back.
    pub fn writes_data(self) -> bool {
        matches!(
            self,
            Workload::Fallocate2
                | Workload::Append
                | Workload::Dwol
                | Workload::Dwtl
                | Workload::Dwsl
                | Workload::NearFull
                | Workload::SeqWrite
                | Workload::SeqRead
                | Workload::Untar
        )
    }

    /// Whether throughput is better told in MiB/s.
    pub fn moves_bytes(self) -> bool {
        matches!(
            self,
            Workload::Append
                | Workload::NearFull
                | Workload::SeqWrite
                | Workload::SeqRead
                | Workload::Untar
        )
    }

    /// Whether the workload runs the system's tools on a copy of the `--tree` (and so needs
    /// a target with a directory, and [`Params::tree`]). Its ops are trees (untar, rm-tree)
    /// or `git status` runs, each over the tree's files.
    pub fn works_on_a_tree(self) -> bool {
        matches!(
            self,
            Workload::Untar | Workload::RmTree | Workload::GitStatus
        )
    }
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
                format!("unknown workload '{s}' (one of: {})", names.join(", "))
            })
    }
}

/// How one point of a run is shaped.
#[derive(Debug, Clone)]
pub struct Params {
    pub threads: usize,
    pub duration: Duration,
    /// The per-thread file size `append` stops at, and `dwtl` starts from.
    pub size: u64,
    pub append_by: AppendBy,
    /// The CPUs the workload threads (and a target's daemon) run on.
    pub placement: Placement,
    /// The timed part ends with the whole filesystem written back (`syncfs`; e4's
    /// `sync`), so a target that leaves its write-back for later (the kernel's flusher,
    /// e4's commit interval on an image without a journal) pays for it inside the clock.
    /// `untar` and `rm-tree` always settle: a tree in the page cache is not extracted yet.
    pub settle: bool,
    /// The tree the tree workloads copy ([`Workload::works_on_a_tree`]).
    pub tree: Option<TreeTarball>,
}

/// What one point measured.
#[derive(Debug, Clone, Default)]
pub struct Measurement {
    pub ops: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Lock counters before and after the timed part (e4 only).
    pub locks: Option<(LockReport, LockReport)>,
    /// For `near-full`: bytes acknowledged but missing from the files afterwards (must be 0).
    pub lost_bytes: Option<u64>,
    /// For `near-full`: bytes acknowledged beyond what was free when the race started
    /// (must be 0).
    pub overcommitted_bytes: Option<u64>,
    /// For the tree workloads: the tree's regular files, times the trees (or `git status`
    /// runs) done.
    pub files: Option<u64>,
}

/// Per-thread counts from the timed loop.
#[derive(Default)]
struct Tally {
    ops: u64,
    bytes: u64,
}

/// When a timed phase ends for its threads ([`until`]).
#[derive(Clone, Copy)]
struct Window<'a> {
    deadline: Instant,
    ends: PhaseEnd,
    /// Set by the first thread that runs out of work, under [`PhaseEnd::FirstOutOfWork`].
    out_of_work: &'a AtomicBool,
}

/// How a timed phase ends besides its deadline.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PhaseEnd {
    /// Every thread stops within one batch of the first that runs out of work (its share of
    /// files to remove, its bytes to append, an inode to create): every second the rate
    /// counts then has all the threads working, as FxMark's fixed-time runs do. Without it
    /// a thread that lost the CPU for a while finished alone, and a phase of 0.2 s (e4's
    /// 200,000 unlinks at two threads) counted that tail as if two threads ran it.
    FirstOutOfWork,
    /// Each thread runs until its own work is done (`near-full`'s race for the last blocks
    /// goes on until every thread has found the filesystem full).
    EachOutOfWork,
}

/// Runs `work(thread, window)` on `p.threads` threads at once, each on its CPU of
/// `p.placement`, and adds up what they did.
fn timed<F>(
    p: &Params,
    duration: Duration,
    ends: PhaseEnd,
    work: F,
) -> io::Result<(Tally, Duration)>
where
    F: Fn(usize, Window<'_>) -> io::Result<Tally> + Sync,
{
    let out_of_work = AtomicBool::new(false);
    let start = Instant::now();
    let window = Window {
        deadline: start + duration,
        ends,
        out_of_work: &out_of_work,
    };
    let results: Vec<io::Result<Tally>> = std::thread::scope(|s| {
        let work = &work;
        let placement = &p.placement;
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                s.spawn(move || {
                    placement.enter(t)?;
                    work(t, window)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a worker thread panicked")))
            })
            .collect()
    });
    let elapsed = start.elapsed();
    let mut total = Tally::default();
    for r in results {
        let t = r?;
        total.ops += t.ops;
        total.bytes += t.bytes;
    }
    Ok((total, elapsed))
}

/// An operation's result for [`until`]: go on after a success; an error `ends` accepts
/// ends the thread's run (the rate counts what was done until then), any other fails it.
/// Creates end at a full filesystem (the image is sized for the slowest target, and a fast
/// one may use every inode before the clock runs out); removals when their files are gone.
fn go_on_unless(done: io::Result<()>, ends: fn(&io::Error) -> bool) -> io::Result<bool> {
    match done {
        Ok(()) => Ok(true),
        Err(e) if ends(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

fn is_not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

/// Calls `op(n)` for n = 0, 1, ... until it returns `Ok(false)` (this thread is out of
/// work), until the deadline, or, under [`PhaseEnd::FirstOutOfWork`], until another thread
/// is out of work; the deadline and the others are looked at once per [`BATCH`].
fn until(window: Window<'_>, op: impl FnMut(u64) -> io::Result<bool>) -> io::Result<u64> {
    until_every(window, BATCH, op)
}

/// [`until`], looking at the deadline and the others once per `batch` operations (1 for
/// operations that take milliseconds, such as a `git status`).
fn until_every(
    window: Window<'_>,
    batch: u64,
    mut op: impl FnMut(u64) -> io::Result<bool>,
) -> io::Result<u64> {
    let mut n = 0;
    loop {
        for _ in 0..batch {
            if !op(n)? {
                if window.ends == PhaseEnd::FirstOutOfWork {
                    window.out_of_work.store(true, Ordering::Relaxed);
                }
                return Ok(n);
            }
            n += 1;
        }
        if Instant::now() >= window.deadline || window.out_of_work.load(Ordering::Relaxed) {
            return Ok(n);
        }
    }
}

/// Files each thread makes before the clock for the workloads that remove or move them
/// (unlink, unlink-shared, mwrm): 400,000 in all, at most 100,000 per thread.
pub fn setup_files_per_thread(threads: usize) -> u64 {
    (SETUP_FILES / threads.max(1) as u64).min(SETUP_FILES_PER_THREAD)
}

/// All threads' set-up files together, and one thread's most.
const SETUP_FILES: u64 = 400_000;
const SETUP_FILES_PER_THREAD: u64 = 100_000;

/// The size of each thread's file in `seqwrite` and `seqread`: `--size`, in whole requests
/// (at least one).
fn sequential_size(p: &Params) -> u64 {
    (p.size / SEQUENTIAL_REQUEST).max(1) * SEQUENTIAL_REQUEST
}

/// The stamp that begins each 4 KiB block of thread `thread`'s sequential file at byte
/// `pos`: a block read from another place or another thread's file does not carry it.
/// Only the stamps are written and checked per request (256 words a MiB), so the clock
/// measures the filesystem, not a pass over every byte; the rest of a block is 0x5a.
fn stamp(thread: usize, pos: u64) -> [u8; 8] {
    (pos << 8 | thread as u64 & 0xff).to_le_bytes()
}

/// Stamps each block of `request`, which goes at `offset` of thread `thread`'s file.
fn stamp_sequential(request: &mut [u8], thread: usize, offset: u64) {
    for (i, block) in request.chunks_exact_mut(BLOCK as usize).enumerate() {
        block[..8].copy_from_slice(&stamp(thread, offset + i as u64 * BLOCK));
    }
}

/// Whether `request`, read at `offset` of thread `thread`'s file, carries its stamps.
fn is_stamped(request: &[u8], thread: usize, offset: u64) -> bool {
    request
        .chunks_exact(BLOCK as usize)
        .enumerate()
        .all(|(i, block)| block[..8] == stamp(thread, offset + i as u64 * BLOCK))
}

/// Reads one whole request at `offset` (a short read only at the end of the file, which
/// `seqread` never reaches: it is an error here).
fn read_request<F: FsOps>(fs: &F, file: &F::File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match fs.read_at(file, offset + done as u64, &mut buf[done..])? {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("seqread: the file ends at {}", offset + done as u64),
                ))
            }
            n => done += n,
        }
    }
    Ok(())
}

/// The tree and each thread's directory as a path, for the tree workloads: `None` for
/// the others.
fn tree_and_paths<F: FsOps>(
    fs: &F,
    workload: Workload,
    p: &Params,
    dirs: &[F::Dir],
) -> io::Result<Option<(TreeTarball, Vec<PathBuf>)>> {
    if !workload.works_on_a_tree() {
        return Ok(None);
    }
    let unsupported = |why: &str| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{} {why}", workload.name()),
        )
    };
    let tree = p
        .tree
        .clone()
        .ok_or_else(|| unsupported("has no tree to work on"))?;
    let paths = dirs
        .iter()
        .map(|d| fs.host_path(d))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| unsupported("needs a directory that tar and git can use"))?;
    Ok(Some((tree, paths)))
}

/// Where `rm-tree` extracts each thread's copy, inside the thread's directory.
const TREE_COPY: &str = "tree";

/// Runs `workload` on `fs`, from an empty filesystem.
pub fn run<F: FsOps>(fs: &F, workload: Workload, p: &Params) -> io::Result<Measurement> {
    let root = fs.root();
    let dirs: Vec<F::Dir> = (0..p.threads)
        .map(|t| fs.mkdir(&root, &format!("t{t}")))
        .collect::<io::Result<_>>()?;
    let tree_work = tree_and_paths(fs, workload, p, &dirs)?;
    let shared = fs.mkdir(&root, "shared")?;
    let data = vec![0x5a_u8; BLOCK as usize];
    // Set-up before the clock: files to remove, rename, list or shrink.
    let mut files: Vec<F::File> = Vec::new();
    match workload {
        Workload::Unlink | Workload::UnlinkShared | Workload::Mwrm => {
            let target = |t: usize| {
                if workload == Workload::UnlinkShared {
                    &shared
                } else {
                    &dirs[t]
                }
            };
            // A fixed number, not as many as fit in the duration: every target then
            // removes from directories of the same size (a faster creator would otherwise
            // set itself larger directories to remove from).
            let per_thread = setup_files_per_thread(p.threads);
            timed(p, p.duration, PhaseEnd::EachOutOfWork, |t, _| {
                for n in 0..per_thread {
                    fs.create(target(t), &format!("t{t}-{n}"))?;
                }
                Ok(Tally {
                    ops: per_thread,
                    bytes: 0,
                })
            })?;
        }
        Workload::Mrpl => {
            for dir in &dirs {
                let mut d = dir.clone();
                for level in 0..PATH_DEPTH {
                    d = fs.mkdir(&d, &format!("d{level}"))?;
                }
                fs.create(&d, "file")?;
            }
        }
        Workload::Mrdl => {
            for dir in &dirs {
                for i in 0..LISTED_ENTRIES {
                    fs.create(dir, &format!("e{i}"))?;
                }
            }
        }
        Workload::Mwrl => {
            for dir in &dirs {
                fs.create(dir, "r0")?;
            }
        }
        Workload::NearFull => {
            // Fill to 95 % with one preallocated file before the race.
            let free = fs.free_bytes()?;
            let filler = fs.open_new(&root, "filler")?;
            let fill = free * NEAR_FULL_PERCENT / 100 / BLOCK * BLOCK;
            fs.fallocate(&filler, 0, fill)?;
        }
        Workload::RmTree | Workload::GitStatus => {
            // OK to unwrap: tree_work is Some for every tree workload.
            let (tree, paths) = tree_work.as_ref().unwrap();
            // Each thread makes its own copy, all at once, as they will be used.
            timed(p, p.duration, PhaseEnd::EachOutOfWork, |t, _| {
                if workload == Workload::RmTree {
                    let copy = paths[t].join(TREE_COPY);
                    std::fs::create_dir(&copy)?;
                    tree.extract(&copy)?;
                } else {
                    tree.extract_committed(&paths[t])?;
                }
                Ok(Tally::default())
            })?;
        }
        _ => {}
    }
    if matches!(
        workload,
        Workload::Fallocate2
            | Workload::Append
            | Workload::Dwol
            | Workload::Dwtl
            | Workload::Dwsl
            | Workload::NearFull
            | Workload::SeqWrite
            | Workload::SeqRead
    ) {
        for (t, dir) in dirs.iter().enumerate() {
            let file = fs.open_new(dir, "data")?;
            match workload {
                Workload::Dwol => fs.write_at(&file, 0, &data)?,
                Workload::Dwtl => fs.fallocate(&file, 0, p.size.max(BLOCK))?,
                Workload::SeqRead => {
                    let mut request = vec![0x5a; SEQUENTIAL_REQUEST as usize];
                    for offset in (0..sequential_size(p)).step_by(SEQUENTIAL_REQUEST as usize) {
                        stamp_sequential(&mut request, t, offset);
                        fs.write_at(&file, offset, &request)?;
                    }
                }
                _ => {}
            }
            files.push(file);
        }
    }
    // The set-up's write-back (400,000 new inodes for unlink) is not part of any timed
    // phase: without this, e4 at two threads committed the set-up's inode tables while
    // the clock ran (its commit threshold is crossed by 200,000 files, not by 100,000),
    // and the kernel wrote them back whenever its flusher ran.
    fs.sync_all()?;
    if workload == Workload::SeqRead {
        for file in &files {
            fs.drop_cached(file)?;
        }
    }
    let free_at_start = fs.free_bytes()?;
    let duration = if workload == Workload::NearFull {
        NEAR_FULL_LIMIT
    } else {
        p.duration
    };
    let before = fs.lock_report();
    let ends = if workload == Workload::NearFull {
        PhaseEnd::EachOutOfWork
    } else {
        PhaseEnd::FirstOutOfWork
    };
    let (tally, elapsed) = timed(p, duration, ends, |t, window| {
        let dir = &dirs[t];
        match workload {
            Workload::Fallocate2 => {
                let mut size = 0;
                let ops = until(window, |_| {
                    if size >= FALLOCATE2_LIMIT {
                        fs.truncate(&files[t], 0)?;
                        size = 0;
                    }
                    fs.fallocate(&files[t], size, FALLOCATE2_STEP)?;
                    size += FALLOCATE2_STEP;
                    Ok(true)
                })?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::Append | Workload::Dwsl => {
                let mut size = 0;
                let ops = until(window, |_| {
                    if size + BLOCK > p.size {
                        return Ok(false);
                    }
                    match (workload, p.append_by) {
                        (Workload::Append, AppendBy::Fallocate) => {
                            fs.fallocate(&files[t], size, BLOCK)?
                        }
                        _ => fs.write_at(&files[t], size, &data)?,
                    }
                    if workload == Workload::Dwsl {
                        fs.fsync(&files[t])?;
                    }
                    size += BLOCK;
                    Ok(true)
                })?;
                Ok(Tally {
                    ops,
                    bytes: ops * BLOCK,
                })
            }
            Workload::Create => {
                let ops = until(window, |n| {
                    go_on_unless(fs.create(dir, &format!("f{n}")), is_no_space)
                })?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::CreateShared => {
                let ops = until(window, |n| {
                    go_on_unless(fs.create(&shared, &format!("t{t}-{n}")), is_no_space)
                })?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::Unlink | Workload::UnlinkShared => {
                let parent = if workload == Workload::Unlink {
                    dir
                } else {
                    &shared
                };
                let ops = until(window, |n| {
                    // NotFound: every file made in set-up is gone.
                    go_on_unless(fs.unlink(parent, &format!("t{t}-{n}")), is_not_found)
                })?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::Dwol => {
                let ops = until(window, |_| fs.write_at(&files[t], 0, &data).map(|()| true))?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::Dwtl => {
                let mut size = p.size.max(BLOCK);
                let ops = until(window, |_| {
                    if size == 0 {
                        return Ok(false);
                    }
                    size -= BLOCK;
                    fs.truncate(&files[t], size).map(|()| true)
                })?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::Mrpl => {
                let path: String = std::iter::once(format!("t{t}"))
                    .chain((0..PATH_DEPTH).map(|l| format!("d{l}")))
                    .chain(std::iter::once("file".to_string()))
                    .collect::<Vec<_>>()
                    .join("/");
                let ops = until(window, |_| fs.stat_path(&path).map(|()| true))?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::Mrdl => {
                let ops = until(window, |_| fs.read_dir(dir).map(|_| true))?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::Mwrl => {
                let ops = until(window, |n| {
                    fs.rename(dir, &format!("r{n}"), dir, &format!("r{}", n + 1))
                        .map(|()| true)
                })?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::Mwrm => {
                let ops = until(window, |n| {
                    let name = format!("t{t}-{n}");
                    go_on_unless(fs.rename(dir, &name, &shared, &name), is_not_found)
                })?;
                Ok(Tally { ops, bytes: 0 })
            }
            Workload::SeqWrite => {
                let mut request = vec![0x5a; SEQUENTIAL_REQUEST as usize];
                let end = sequential_size(p);
                let ops = until(window, |n| {
                    let offset = n * SEQUENTIAL_REQUEST;
                    if offset >= end {
                        return Ok(false);
                    }
                    stamp_sequential(&mut request, t, offset);
                    fs.write_at(&files[t], offset, &request)?;
                    Ok(true)
                })?;
                fs.fsync(&files[t])?;
                Ok(Tally {
                    ops,
                    bytes: ops * SEQUENTIAL_REQUEST,
                })
            }
            Workload::SeqRead => {
                let mut request = vec![0; SEQUENTIAL_REQUEST as usize];
                let end = sequential_size(p);
                let ops = until(window, |n| {
                    let offset = n * SEQUENTIAL_REQUEST;
                    if offset >= end {
                        return Ok(false);
                    }
                    read_request(fs, &files[t], offset, &mut request)?;
                    if !is_stamped(&request, t, offset) {
                        return Err(io::Error::other(format!(
                            "seqread: thread {t}'s file read back other bytes than were \
                             written at {offset}"
                        )));
                    }
                    Ok(true)
                })?;
                Ok(Tally {
                    ops,
                    bytes: ops * SEQUENTIAL_REQUEST,
                })
            }
            Workload::Untar | Workload::RmTree | Workload::GitStatus => {
                // OK to unwrap: tree_work is Some for every tree workload.
                let (tree, paths) = tree_work.as_ref().unwrap();
                let ops = match workload {
                    Workload::Untar => {
                        tree.extract(&paths[t])?;
                        1
                    }
                    Workload::RmTree => {
                        real_tree::remove(&paths[t].join(TREE_COPY))?;
                        1
                    }
                    _ => until_every(window, 1, |_| {
                        real_tree::git_status_is_clean(&paths[t]).map(|()| true)
                    })?,
                };
                Ok(Tally {
                    ops,
                    bytes: if workload == Workload::Untar {
                        tree.bytes
                    } else {
                        0
                    },
                })
            }
            Workload::NearFull => {
                let mut size = 0;
                let ops = until(window, |_| match fs.write_at(&files[t], size, &data) {
                    Ok(()) => {
                        size += BLOCK;
                        Ok(true)
                    }
                    Err(e) if is_no_space(&e) => Ok(false),
                    Err(e) => Err(e),
                })?;
                Ok(Tally {
                    ops,
                    bytes: ops * BLOCK,
                })
            }
        }
    })?;
    let elapsed = if p.settle || matches!(workload, Workload::Untar | Workload::RmTree) {
        let started = Instant::now();
        fs.sync_all()?;
        elapsed + started.elapsed()
    } else {
        elapsed
    };
    let after = fs.lock_report();
    let (lost_bytes, overcommitted_bytes) = if workload == Workload::NearFull {
        let mut kept = 0;
        for file in &files {
            kept += fs.file_size(file)?;
        }
        (
            Some(tally.bytes.saturating_sub(kept)),
            Some(tally.bytes.saturating_sub(free_at_start)),
        )
    } else {
        (None, None)
    };
    Ok(Measurement {
        ops: tally.ops,
        bytes: tally.bytes,
        elapsed,
        locks: before.zip(after),
        lost_bytes,
        overcommitted_bytes,
        files: tree_work.map(|(tree, _)| tally.ops * tree.files),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use rustix::thread::sched_getcpu;

    use super::*;
    use crate::pinning::{allowed_cpus, Pin};

    /// Runs 3 threads placed by `pin` and returns, per thread, the CPU it ran on and the
    /// CPUs its affinity allows, as seen from inside the thread.
    fn cpus_seen(pin: Pin) -> Vec<(usize, Vec<usize>)> {
        let p = Params {
            threads: 3,
            duration: Duration::ZERO,
            size: BLOCK,
            append_by: AppendBy::Write,
            placement: Placement::for_this_process(pin).unwrap(),
            settle: false,
            tree: None,
        };
        let seen = Mutex::new(vec![(usize::MAX, Vec::new()); p.threads]);
        timed(&p, p.duration, PhaseEnd::EachOutOfWork, |t, _| {
            // allowed_cpus reads the calling thread's affinity.
            seen.lock().unwrap()[t] = (sched_getcpu(), allowed_cpus()?);
            Ok(Tally::default())
        })
        .unwrap();
        seen.into_inner().unwrap()
    }

    /// Two threads, a far deadline: thread 0 runs out of work after 100 operations, thread 1
    /// after `thread_1_ops` (never if `None`). Returns what each did, or `None` if the phase
    /// had not ended after 30 s.
    fn one_thread_runs_out_first(ends: PhaseEnd, thread_1_ops: Option<u64>) -> Option<Vec<u64>> {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let p = Params {
                threads: 2,
                duration: Duration::from_secs(3600),
                size: BLOCK,
                append_by: AppendBy::Write,
                placement: Placement::for_this_process(Pin::None).unwrap(),
                settle: false,
                tree: None,
            };
            let each = Mutex::new(vec![0; 2]);
            timed(&p, p.duration, ends, |t, window| {
                let share = if t == 0 { Some(100) } else { thread_1_ops };
                let ops = until(window, |n| Ok(share.is_none_or(|share| n < share)))?;
                each.lock().unwrap()[t] = ops;
                Ok(Tally { ops, bytes: 0 })
            })
            .unwrap();
            done.send(each.into_inner().unwrap()).ok();
        });
        finished.recv_timeout(Duration::from_secs(30)).ok()
    }

    #[test]
    fn a_phase_with_shares_of_work_ends_when_the_first_thread_runs_out() {
        let each = one_thread_runs_out_first(PhaseEnd::FirstOutOfWork, None)
            .expect("the phase ran on after one thread had run out of work");
        assert_eq!(each[0], 100);
    }

    #[test]
    fn a_race_to_the_end_lets_every_thread_finish() {
        let each = one_thread_runs_out_first(PhaseEnd::EachOutOfWork, Some(1_000_000))
            .expect("the phase did not end");
        assert_eq!(each, [100, 1_000_000]);
    }

    /// A directory's operations, with a log of the sequential file's reads and cache drops.
    struct Logged {
        inner: crate::fs_ops::PosixOps,
        log: Mutex<Vec<&'static str>>,
    }

    impl FsOps for Logged {
        type Dir = std::path::PathBuf;
        type File = std::fs::File;
        fn root(&self) -> Self::Dir {
            self.inner.root()
        }
        fn mkdir(&self, parent: &Self::Dir, name: &str) -> io::Result<Self::Dir> {
            self.inner.mkdir(parent, name)
        }
        fn create(&self, dir: &Self::Dir, name: &str) -> io::Result<()> {
            self.inner.create(dir, name)
        }
        fn open_new(&self, dir: &Self::Dir, name: &str) -> io::Result<Self::File> {
            self.inner.open_new(dir, name)
        }
        fn unlink(&self, dir: &Self::Dir, name: &str) -> io::Result<()> {
            self.inner.unlink(dir, name)
        }
        fn rename(&self, f: &Self::Dir, n: &str, t: &Self::Dir, m: &str) -> io::Result<()> {
            self.inner.rename(f, n, t, m)
        }
        fn write_at(&self, file: &Self::File, offset: u64, data: &[u8]) -> io::Result<()> {
            self.inner.write_at(file, offset, data)
        }
        fn read_at(&self, file: &Self::File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
            self.log.lock().unwrap().push("read");
            self.inner.read_at(file, offset, buf)
        }
        fn drop_cached(&self, file: &Self::File) -> io::Result<()> {
            self.log.lock().unwrap().push("drop");
            self.inner.drop_cached(file)
        }
        fn fallocate(&self, file: &Self::File, offset: u64, len: u64) -> io::Result<()> {
            self.inner.fallocate(file, offset, len)
        }
        fn truncate(&self, file: &Self::File, size: u64) -> io::Result<()> {
            self.inner.truncate(file, size)
        }
        fn fsync(&self, file: &Self::File) -> io::Result<()> {
            self.inner.fsync(file)
        }
        fn sync_all(&self) -> io::Result<()> {
            self.inner.sync_all()
        }
        fn file_size(&self, file: &Self::File) -> io::Result<u64> {
            self.inner.file_size(file)
        }
        fn stat_path(&self, path: &str) -> io::Result<()> {
            self.inner.stat_path(path)
        }
        fn read_dir(&self, dir: &Self::Dir) -> io::Result<usize> {
            self.inner.read_dir(dir)
        }
        fn free_bytes(&self) -> io::Result<u64> {
            self.inner.free_bytes()
        }
        fn lock_report(&self) -> Option<LockReport> {
            None
        }
        fn host_path(&self, dir: &Self::Dir) -> Option<std::path::PathBuf> {
            self.inner.host_path(dir)
        }
    }

    fn sequential_params(threads: usize) -> Params {
        Params {
            threads,
            duration: Duration::from_secs(60),
            size: 3 * SEQUENTIAL_REQUEST,
            append_by: AppendBy::Write,
            placement: Placement::for_this_process(Pin::None).unwrap(),
            settle: false,
            tree: None,
        }
    }

    #[test]
    fn seqread_drops_every_file_from_the_cache_before_the_first_read_and_reads_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Logged {
            inner: crate::fs_ops::PosixOps {
                root: dir.path().to_path_buf(),
            },
            log: Mutex::new(Vec::new()),
        };
        let m = run(&fs, Workload::SeqRead, &sequential_params(2)).unwrap();
        assert_eq!((m.ops, m.bytes), (6, 6 * SEQUENTIAL_REQUEST));
        let log = fs.log.into_inner().unwrap();
        let first_read = log.iter().position(|&e| e == "read").unwrap();
        assert_eq!(log[..first_read], ["drop", "drop"], "{log:?}");
        assert!(!log[first_read..].contains(&"drop"), "{log:?}");
    }

    #[test]
    fn seqwrite_writes_each_thread_its_size_and_seqread_checks_what_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::fs_ops::PosixOps {
            root: dir.path().to_path_buf(),
        };
        let m = run(&fs, Workload::SeqWrite, &sequential_params(2)).unwrap();
        assert_eq!((m.ops, m.bytes), (6, 6 * SEQUENTIAL_REQUEST));
        for t in 0..2 {
            let data = std::fs::read(dir.path().join(format!("t{t}/data"))).unwrap();
            assert_eq!(data.len() as u64, 3 * SEQUENTIAL_REQUEST);
            for (n, request) in data.chunks(SEQUENTIAL_REQUEST as usize).enumerate() {
                assert!(is_stamped(request, t, n as u64 * SEQUENTIAL_REQUEST));
            }
        }
        // A block from another place, or another thread's, is not what was written there.
        let mut request = vec![0x5a; SEQUENTIAL_REQUEST as usize];
        stamp_sequential(&mut request, 1, SEQUENTIAL_REQUEST);
        assert!(is_stamped(&request, 1, SEQUENTIAL_REQUEST));
        assert!(!is_stamped(&request, 0, SEQUENTIAL_REQUEST));
        request[BLOCK as usize * 3] ^= 1;
        assert!(!is_stamped(&request, 1, SEQUENTIAL_REQUEST));
    }

    #[test]
    fn pinned_workload_threads_run_on_their_cpu() {
        let allowed = allowed_cpus().unwrap();
        for (t, (cpu, affinity)) in cpus_seen(Pin::Same).into_iter().enumerate() {
            assert_eq!(
                (cpu, affinity),
                (allowed[0], vec![allowed[0]]),
                "thread {t}"
            );
        }
        if allowed.len() >= 2 {
            let others = &allowed[1..];
            for (t, (cpu, affinity)) in cpus_seen(Pin::Split).into_iter().enumerate() {
                let expected = others[t % others.len()];
                assert_eq!((cpu, affinity), (expected, vec![expected]), "thread {t}");
            }
        }
        for (cpu, affinity) in cpus_seen(Pin::None) {
            assert_eq!(
                affinity, allowed,
                "unpinned threads keep the process's CPUs"
            );
            assert!(allowed.contains(&cpu));
        }
    }
}
