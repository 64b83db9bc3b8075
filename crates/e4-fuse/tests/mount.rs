//! e4's FUSE mount through the kernel: images made by mke2fs at test time are mounted on
//! a temporary directory, used through std::fs and nix as any program would, unmounted,
//! and checked with `e2fsck -fn`. Where FUSE cannot mount here (no /dev/fuse, no
//! permission) each test says so on stderr and passes, unless `E4_REQUIRE_FUSE=1`, which
//! CI sets wherever /dev/fuse is usable. Every mount is watched by a [`FuseGuard`], so a
//! stuck one is aborted after [`LIMIT`] and detached at the end of its test whatever
//! happened.

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File, FileTimes, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant, UNIX_EPOCH};

use e4_fuse::{MountError, MountOptions, Mounted};
use e4_testkit::{
    compare_trees, e2fsck_clean, fuse_skipped, make_empty_image, CompareOptions, FuseGuard, Image,
    KernelMount,
};
use nix::errno::Errno;
use nix::fcntl::{fallocate, renameat2, FallocateFlags, RenameFlags, AT_FDCWD};
use nix::sys::statvfs::statvfs;

/// The longest any test keeps its mount.
const LIMIT: Duration = Duration::from_secs(60);

/// An image mounted for one test. Fields drop in order: a mount the test did not finish
/// is detached by the guard before its directory and image go.
struct TestMount {
    mounted: Option<Mounted>,
    _guard: FuseGuard,
    dir: tempfile::TempDir,
    image: Image,
}

impl TestMount {
    /// Mounts a fresh `size_mib` MiB ext4 image with `-o options`, or reports why FUSE
    /// cannot mount here.
    fn new(what: &str, size_mib: u64, options: &str) -> Option<Self> {
        let image = make_empty_image(&["-t", "ext4", "-b", "4096"], size_mib);
        Self::of(what, image, options)
    }

    fn of(what: &str, image: Image, options: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let options = MountOptions::parse(options).unwrap();
        match e4_fuse::mount(&image.path, dir.path(), &options) {
            Ok(mounted) => Some(TestMount {
                mounted: Some(mounted),
                _guard: FuseGuard::watch(dir.path(), LIMIT),
                dir,
                image,
            }),
            Err(e @ MountError::Mount { .. }) => {
                fuse_skipped(what, &e.to_string());
                None
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Unmounts, waits for the image to be written back, and checks it with e2fsck.
    fn finish(mut self) -> Image {
        let mounted = self.mounted.take().unwrap();
        mounted.unmount().unwrap();
        e2fsck_clean(&self.image.path).unwrap();
        let TestMount { image, .. } = self;
        image
    }
}

fn errno_of(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().expect("an OS error"))
}

fn free_inodes(dir: &Path) -> u64 {
    statvfs(dir).unwrap().files_free()
}

/// Waits up to ten seconds for `done`.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if done() {
            return true;
        }
        // Unused inodes and dentries go now, so the kernel sends its forgets (needs root;
        // without it they come when the kernel evicts by itself).
        let _ = fs::write("/proc/sys/vm/drop_caches", "2");
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn the_root_is_ext4_inode_2_and_shows_its_entries() {
    let Some(m) = TestMount::new("root mapping", 16, "") else {
        return;
    };
    let root = m.path();
    // The root is FUSE's node 1, but shows ext4's inode 2, as on the kernel's ext4.
    assert_eq!(fs::metadata(root).unwrap().ino(), 2);
    assert_eq!(fs::metadata(root.join("lost+found")).unwrap().ino(), 11);
    fs::create_dir(root.join("d")).unwrap();
    let names: HashSet<_> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, HashSet::from(["lost+found".into(), "d".into()]));
    // ".." of a top-level directory is the root, and a listing names it by inode 2 too.
    let dotdot = fs::metadata(root.join("d/..")).unwrap();
    assert_eq!((dotdot.ino(), dotdot.nlink()), (2, 4));
    assert_eq!(fs::metadata(root).unwrap().ino(), 2);
    let listed_dotdot = nix::dir::Dir::open(
        &root.join("d"),
        nix::fcntl::OFlag::O_RDONLY,
        nix::sys::stat::Mode::empty(),
    )
    .unwrap()
    .iter()
    .map(|e| e.unwrap())
    .find(|e| e.file_name().to_bytes() == b"..")
    .unwrap()
    .ino();
    assert_eq!(listed_dotdot, 2);
    m.finish();
}

#[test]
fn files_directories_links_and_attributes_behave_as_on_ext4() {
    let Some(m) = TestMount::new("file operations", 32, "") else {
        return;
    };
    let root = m.path();
    let d = root.join("d");
    let f = d.join("f");
    fs::create_dir(&d).unwrap();
    fs::write(&f, b"hello").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"hello");
    // O_APPEND writes at the end, O_TRUNC empties first.
    OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b" world")
        .unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"hello world");
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&f)
        .unwrap()
        .write_all(b"new")
        .unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"new");
    // A write past the end leaves a hole that reads as zeros; set_len is a setattr.
    let mut file = OpenOptions::new().read(true).write(true).open(&f).unwrap();
    file.seek(SeekFrom::Start(100_000)).unwrap();
    file.write_all(b"far").unwrap();
    file.set_len(100_002).unwrap();
    let mut all = Vec::new();
    file.seek(SeekFrom::Start(0)).unwrap();
    file.read_to_end(&mut all).unwrap();
    assert_eq!(all.len(), 100_002);
    assert!(all[3..100_000].iter().all(|&b| b == 0));
    assert_eq!(&all[100_000..], b"fa");
    // Mode, owner and times.
    // A chown clears set-user-ID, as on ext4 (the kernel sends the mode change).
    fs::set_permissions(&f, fs::Permissions::from_mode(0o4640)).unwrap();
    std::os::unix::fs::chown(&f, Some(1234), Some(5678)).unwrap();
    assert_eq!(fs::metadata(&f).unwrap().mode() & 0o7777, 0o640);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o4640)).unwrap();
    let mtime = UNIX_EPOCH + Duration::new(1_000_000_000, 5);
    let atime = UNIX_EPOCH + Duration::new(900_000_000, 7);
    file.set_times(FileTimes::new().set_modified(mtime).set_accessed(atime))
        .unwrap();
    drop(file);
    let meta = fs::metadata(&f).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o4640);
    assert_eq!((meta.uid(), meta.gid()), (1234, 5678));
    assert_eq!(meta.modified().unwrap(), mtime);
    assert_eq!(meta.accessed().unwrap(), atime);
    // Symlinks and hard links.
    std::os::unix::fs::symlink("d/f", root.join("s")).unwrap();
    assert_eq!(fs::read_link(root.join("s")).unwrap(), Path::new("d/f"));
    assert_eq!(fs::read(root.join("s")).unwrap().len(), 100_002);
    fs::hard_link(&f, root.join("h")).unwrap();
    let (fm, hm) = (
        fs::metadata(&f).unwrap(),
        fs::metadata(root.join("h")).unwrap(),
    );
    assert_eq!((fm.ino(), fm.nlink()), (hm.ino(), 2));
    // Renames: replacing, refusing to replace, exchanging.
    let (a, b) = (root.join("a"), root.join("b"));
    fs::write(&a, b"A").unwrap();
    fs::write(&b, b"B").unwrap();
    fs::rename(&a, &b).unwrap();
    assert_eq!(fs::read(&b).unwrap(), b"A");
    assert_eq!(errno_of(fs::metadata(&a).unwrap_err()), Errno::ENOENT);
    fs::write(&a, b"A2").unwrap();
    let noreplace = renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_NOREPLACE);
    assert_eq!(noreplace, Err(Errno::EEXIST));
    renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_EXCHANGE).unwrap();
    assert_eq!(
        (fs::read(&a).unwrap(), fs::read(&b).unwrap()),
        (b"A".to_vec(), b"A2".to_vec())
    );
    // The errors a user can cause.
    assert_eq!(errno_of(fs::remove_dir(&d).unwrap_err()), Errno::ENOTEMPTY);
    assert_eq!(errno_of(fs::remove_file(&d).unwrap_err()), Errno::EISDIR);
    assert_eq!(errno_of(fs::create_dir(&d).unwrap_err()), Errno::EEXIST);
    assert_eq!(
        errno_of(fs::read(root.join("missing")).unwrap_err()),
        Errno::ENOENT
    );
    let long = root.join("x".repeat(256));
    assert_eq!(
        errno_of(fs::write(long, b"").unwrap_err()),
        Errno::ENAMETOOLONG
    );
    assert_eq!(errno_of(fs::read_dir(&f).unwrap_err()), Errno::ENOTDIR);
    // Special files.
    nix::unistd::mkfifo(
        &root.join("p"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &fs::symlink_metadata(root.join("p")).unwrap().file_type()
    ));
    // Extended attributes: set, probe, list, remove.
    xattr::set(&f, "user.colour", b"blue").unwrap();
    assert_eq!(xattr::get(&f, "user.colour").unwrap().unwrap(), b"blue");
    let names: Vec<_> = xattr::list(&f).unwrap().collect();
    assert!(names.iter().any(|n| n == "user.colour"), "{names:?}");
    xattr::remove(&f, "user.colour").unwrap();
    assert_eq!(xattr::get(&f, "user.colour").unwrap(), None);
    assert_eq!(
        errno_of(xattr::remove(&f, "user.colour").unwrap_err()),
        Errno::ENODATA
    );
    // fallocate: kept size, grown size, a punched hole.
    let g = root.join("g");
    let file = File::create(&g).unwrap();
    fallocate(&file, FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, 1 << 20).unwrap();
    let meta = file.metadata().unwrap();
    assert_eq!(meta.len(), 0);
    assert!(meta.blocks() >= 2048, "{} sectors", meta.blocks());
    fallocate(&file, FallocateFlags::empty(), 0, 2 << 20).unwrap();
    assert_eq!(file.metadata().unwrap().len(), 2 << 20);
    let punch = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    fallocate(&file, punch, 0, 1 << 20).unwrap();
    assert!(file.metadata().unwrap().blocks() < 4096);
    drop(file);
    // statfs.
    let st = statvfs(root).unwrap();
    assert_eq!((st.block_size(), st.name_max()), (4096, 255));
    assert!(st.blocks_free() > 0 && st.files_free() > 0);
    fs::remove_file(root.join("h")).unwrap();
    assert_eq!(fs::metadata(&f).unwrap().nlink(), 1);

    let image = m.finish();
    // What the mount showed is what the image holds.
    let fs = e4_fs::Filesystem::open(&image.path, e4_fs::OpenOptions::default()).unwrap();
    let read = |path: &str| {
        let ino = fs.resolve(path, true).unwrap();
        fs.read_file(ino, u64::MAX).unwrap()
    };
    assert_eq!(read("/a"), b"A");
    assert_eq!(read("/b"), b"A2");
    assert_eq!(&read("/d/f")[..3], b"new");
    assert_eq!(
        fs.metadata(fs.resolve("/d/f", true).unwrap()).unwrap().uid,
        1234
    );
}

/// A file unlinked while the kernel holds it (an open descriptor, and the lookups of its
/// two names) lives until the last release and the last forget, then is freed: the free
/// inode count returns to what it was.
#[test]
fn an_unlinked_file_lives_until_its_last_release_and_forget() {
    let Some(m) = TestMount::new("unlink while open", 16, "") else {
        return;
    };
    let root = m.path();
    let before = free_inodes(root);
    let (f, g) = (root.join("f"), root.join("g"));
    fs::write(&f, b"still here").unwrap();
    fs::hard_link(&f, &g).unwrap();
    let mut file = File::open(&f).unwrap();
    fs::remove_file(&f).unwrap();
    fs::remove_file(&g).unwrap();
    let mut content = String::new();
    file.read_to_string(&mut content).unwrap();
    assert_eq!(content, "still here");
    assert_eq!(file.metadata().unwrap().nlink(), 0);
    assert_eq!(free_inodes(root), before - 1);
    drop(file);
    assert!(
        eventually(|| free_inodes(root) == before),
        "the inode was not freed after its last release and forget: {} free, {before} before",
        free_inodes(root)
    );
    m.finish();
}

/// Reads from storage (the page cache dropped first) through one worker thread, whose
/// READ buffer is kept between requests: a file's bytes past its end read as zeros once
/// the file grows over them, as on ext4, even after a larger read of another file filled
/// that buffer; and, as root, the mount's readahead window is raised to 1 MiB once INIT
/// is done (`readahead.rs`), so a sequential read comes in 1 MiB READs.
#[test]
fn reads_show_no_other_reads_bytes_and_come_in_one_mebibyte_requests() {
    let Some(m) = TestMount::new("reads", 32, "threads=1") else {
        return;
    };
    let root = m.path();
    if nix::unistd::geteuid().is_root() {
        let dev = fs::metadata(root).unwrap().dev();
        let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
        let window = fs::read_to_string(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"));
        assert_eq!(window.unwrap().trim(), "1024", "the mount's read_ahead_kb");
    }
    let uncached = |path: &Path| {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        file.sync_all().unwrap();
        nix::fcntl::posix_fadvise(
            &file,
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .unwrap();
        file
    };
    let (big, small) = (root.join("big"), root.join("small"));
    fs::write(&big, vec![0xab; 1 << 20]).unwrap();
    let mut read = Vec::new();
    uncached(&big).read_to_end(&mut read).unwrap();
    assert!(read.len() == 1 << 20 && read.iter().all(|&b| b == 0xab));
    fs::write(&small, [b's'; 100]).unwrap();
    let mut file = uncached(&small);
    read.clear();
    file.read_to_end(&mut read).unwrap();
    assert_eq!(read, [b's'; 100]);
    // The page the READ filled stays cached: growing the file past it shows its tail.
    std::os::unix::fs::FileExt::write_all_at(&file, b"e", 8192).unwrap();
    let grown = fs::read(&small).unwrap();
    assert_eq!(grown.len(), 8193);
    assert!(
        grown[100..8192].iter().all(|&b| b == 0),
        "bytes 100..8192 of a 100-byte file grown by a write at 8192 are not zeros: {:x?}",
        &grown[100..116]
    );
    drop(file);
    m.finish();
}

/// What the kernel caches of a directory stays right while other threads read its
/// attributes during creates and removals in it. The kernel drops a directory's cached
/// attributes when a change in it returns, but a reply carrying them that was read before
/// the change and reaches the kernel after it is cached all the same (nothing marks it
/// stale), for the attributes' timeout; the mount tells the kernel of a change where such
/// a reply may be on its way (`names_changed` in `ops.rs`, `shown_directories.rs`),
/// which discards it. Observers that `stat` the directory (GETATTR) and observers that
/// list its parent (READDIRPLUS, an entry with its attributes) run while one thread makes
/// rounds of changes in it; after each round the observers stop and the directory's
/// mtime and ctime as a stat shows them must be the mount's own (a stat that asks the
/// mount, `AT_STATX_FORCE_SYNC`). Not the wall clock's: with multigrain timestamps a change
/// nobody looked at takes the tick's time, earlier than a clock read just before it, as on
/// the kernel's ext4. At the end, what the mount shows is what the image holds.
#[test]
fn a_directory_statted_while_it_changes_shows_its_last_change() {
    let what = "a directory statted while it changes";
    let Some(m) = TestMount::new(what, 32, "threads=4") else {
        return;
    };
    let dir = m.path().join("d");
    fs::create_dir(&dir).unwrap();
    let stat = || {
        fs::metadata(&dir).unwrap();
    };
    let list = || {
        assert!(fs::read_dir(m.path()).unwrap().count() > 0);
    };
    // A listing leaves a stale entry less often than a stat does: with the record left
    // out, the first came within 90 rounds in six runs, a stat's within 20.
    let observers: [(&str, &(dyn Fn() + Sync), usize); 2] =
        [("stat", &stat, 150), ("listing", &list, 400)];
    for (observed_by, observe, rounds) in observers {
        for round in 0..rounds {
            shows_the_last_change_of_a_round(&dir, &format!("{observed_by}-{round}"), observe);
        }
    }
    let shown = fs::metadata(&dir).unwrap();
    let image = m.finish();
    match KernelMount::mount(&image.path) {
        Ok(view) => {
            let on_disk = fs::metadata(view.path().join("d")).unwrap();
            let fields = |m: &fs::Metadata| {
                (
                    (m.mtime(), m.mtime_nsec()),
                    (m.ctime(), m.ctime_nsec()),
                    m.size(),
                    m.nlink(),
                )
            };
            assert_eq!(
                fields(&shown),
                fields(&on_disk),
                "{what}: shown, then on disk"
            );
        }
        Err(reason) => e4_testkit::kernel_comparison_skipped(what, &reason),
    }
}

/// One round of [`a_directory_statted_while_it_changes_shows_its_last_change`]: two
/// threads `observe` while two files are made in `dir` and one removed; then the
/// directory's mtime and ctime as the kernel shows them must be those the mount holds.
fn shows_the_last_change_of_a_round(dir: &Path, round: &str, observe: &(dyn Fn() + Sync)) {
    use rustix::fs::{statx, AtFlags, StatxFlags, CWD};
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    observe();
                }
            });
        }
        let (a, b) = (
            dir.join(format!("{round}-a")),
            dir.join(format!("{round}-b")),
        );
        fs::write(&a, b"").unwrap();
        fs::write(&b, b"").unwrap();
        fs::remove_file(&a).unwrap();
        stop.store(true, Ordering::Relaxed);
    });
    let shown = fs::metadata(dir).unwrap();
    let times = StatxFlags::MTIME | StatxFlags::CTIME;
    let held = statx(CWD, dir, AtFlags::STATX_FORCE_SYNC, times).unwrap();
    let at = |t: rustix::fs::StatxTimestamp| (t.tv_sec, t.tv_nsec);
    for (name, shown, held) in [
        (
            "mtime",
            (shown.mtime(), shown.mtime_nsec() as u32),
            at(held.stx_mtime),
        ),
        (
            "ctime",
            (shown.ctime(), shown.ctime_nsec() as u32),
            at(held.stx_ctime),
        ),
    ] {
        assert_eq!(
            shown, held,
            "round {round}: the directory's {name} shown is not the mount's: a stale reply \
             was cached"
        );
    }
}

/// The offsets a directory handle hands out stay good while the directory changes under
/// it: a listing read in many requests names nothing twice and everything that stayed.
#[test]
fn a_directory_read_while_it_changes_lists_nothing_twice() {
    let Some(m) = TestMount::new("readdir offsets", 32, "") else {
        return;
    };
    let d = m.path().join("d");
    fs::create_dir(&d).unwrap();
    let name = |i: usize| format!("a-rather-long-file-name-{i:04}");
    for i in 0..400 {
        File::create(d.join(name(i))).unwrap();
    }
    let mut seen = Vec::new();
    for (n, entry) in fs::read_dir(&d).unwrap().enumerate() {
        seen.push(entry.unwrap().file_name().into_string().unwrap());
        if n == 20 {
            for i in (0..400).step_by(2) {
                fs::remove_file(d.join(name(i))).unwrap();
            }
            for i in 400..600 {
                File::create(d.join(name(i))).unwrap();
            }
        }
    }
    let unique: HashSet<_> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "a name was listed twice");
    for i in (1..400).step_by(2) {
        assert!(unique.contains(&name(i)), "{} was skipped", name(i));
    }
    m.finish();
}

/// The kernel keeps a directory's listing across opens (FOPEN_CACHE_DIR): every change of
/// its names through the mount (create, mkdir, link, symlink, rename in, out and within,
/// unlink, rmdir) shows in the next listing.
#[test]
fn a_kept_listing_shows_every_change_of_names() {
    let Some(m) = TestMount::new("kept listings", 32, "") else {
        return;
    };
    let (d, other) = (m.path().join("d"), m.path().join("other"));
    fs::create_dir(&d).unwrap();
    fs::create_dir(&other).unwrap();
    File::create(other.join("outside")).unwrap();
    let listed = || -> BTreeSet<String> {
        fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    let mut expected = BTreeSet::new();
    // After each change, listed twice: the second listing is the one the kernel may serve
    // from what it kept.
    let mut changed = |change: &str, added: &[&str], removed: &[&str]| {
        expected.extend(added.iter().map(|n| n.to_string()));
        for gone in removed {
            expected.remove(*gone);
        }
        for _ in 0..2 {
            assert_eq!(listed(), expected, "after {change}");
        }
    };
    changed("nothing", &[], &[]);
    File::create(d.join("f")).unwrap();
    changed("a create", &["f"], &[]);
    fs::create_dir(d.join("sub")).unwrap();
    changed("a mkdir", &["sub"], &[]);
    fs::hard_link(d.join("f"), d.join("l")).unwrap();
    changed("a link", &["l"], &[]);
    std::os::unix::fs::symlink("f", d.join("s")).unwrap();
    changed("a symlink", &["s"], &[]);
    fs::rename(d.join("f"), d.join("g")).unwrap();
    changed("a rename within", &["g"], &["f"]);
    fs::rename(other.join("outside"), d.join("in")).unwrap();
    changed("a rename in", &["in"], &[]);
    fs::rename(d.join("in"), other.join("back")).unwrap();
    changed("a rename out", &[], &["in"]);
    fs::remove_file(d.join("l")).unwrap();
    changed("an unlink", &[], &["l"]);
    fs::remove_dir(d.join("sub")).unwrap();
    changed("an rmdir", &[], &["sub"]);
    m.finish();
}

#[test]
fn a_read_only_mount_refuses_changes_and_leaves_the_image_as_it_was() {
    let image = make_empty_image(&["-t", "ext4"], 16);
    let before = fs::read(&image.path).unwrap();
    let Some(m) = TestMount::of("read-only mount", image, "ro") else {
        return;
    };
    let root = m.path();
    assert_eq!(
        errno_of(fs::write(root.join("f"), b"").unwrap_err()),
        Errno::EROFS
    );
    assert_eq!(
        errno_of(fs::create_dir(root.join("d")).unwrap_err()),
        Errno::EROFS
    );
    assert!(fs::read_dir(root.join("lost+found"))
        .unwrap()
        .next()
        .is_none());
    let image = m.finish();
    assert!(
        fs::read(&image.path).unwrap() == before,
        "a read-only mount wrote"
    );
}

/// `sleep SECONDS` working in `dir`: a process holding the mount on it, as a shell `cd`'d
/// there, or a child forked while one of this process's files there was open, does.
fn holding(dir: &Path, seconds: &str) -> std::process::Child {
    std::process::Command::new("sleep")
        .arg(seconds)
        .current_dir(dir)
        .spawn()
        .unwrap()
}

/// While anything holds a mount its unmount fails with EBUSY; under load, one of the
/// tests' forked children holds it for a moment. The unmount waits for it to let go.
#[test]
fn an_unmount_waits_for_a_process_holding_the_mount_for_a_moment() {
    let Some(m) = TestMount::new("busy for a moment", 16, "") else {
        return;
    };
    fs::write(m.path().join("f"), "written before").unwrap();
    let mut holder = holding(m.path(), "1");
    let image = m.finish();
    holder.wait().unwrap();
    let fs = e4_fs::Filesystem::open(&image.path, e4_fs::OpenOptions::default()).unwrap();
    let ino = fs.resolve("/f", true).unwrap();
    assert_eq!(fs.read_file(ino, u64::MAX).unwrap(), b"written before");
}

/// An unmount still busy when its patience runs out fails in one line naming the process
/// that holds the mount, and leaves the mount served; once that process has gone, the
/// same mount unmounts and is written back.
#[test]
fn an_unmount_still_busy_names_the_holder_and_leaves_the_mount_served() {
    let Some(m) = TestMount::new("busy for long", 16, "") else {
        return;
    };
    let mut holder = holding(m.path(), "30");
    let busy = m
        .mounted
        .as_ref()
        .unwrap()
        .try_unmount(Duration::from_millis(300))
        .unwrap_err()
        .to_string();
    let named = format!("pid {} (sleep)", holder.id());
    assert!(
        busy.contains(&named) && busy.contains("busy") && busy.lines().count() == 1,
        "{busy}"
    );
    fs::write(m.path().join("after"), "still served").unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    let image = m.finish();
    let fs = e4_fs::Filesystem::open(&image.path, e4_fs::OpenOptions::default()).unwrap();
    let ino = fs.resolve("/after", true).unwrap();
    assert_eq!(fs.read_file(ino, u64::MAX).unwrap(), b"still served");
}

/// Several threads create, write, read back, rename and remove files, each in its own
/// directory and all in one shared one, through a mount with as many workers.
#[test]
fn concurrent_work_through_four_workers_leaves_a_clean_image() {
    let Some(m) = TestMount::new("concurrent work", 64, "threads=4") else {
        return;
    };
    let root = m.path().to_path_buf();
    fs::create_dir(root.join("shared")).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let root = &root;
            s.spawn(move || {
                let own = root.join(format!("t{t}"));
                fs::create_dir(&own).unwrap();
                for i in 0..60 {
                    let data = vec![(t * 60 + i) as u8; 8192 + i * 7];
                    for dir in [&own, &root.join("shared")] {
                        let p = dir.join(format!("{t}-{i}"));
                        fs::write(&p, &data).unwrap();
                        assert_eq!(fs::read(&p).unwrap(), data);
                        let q = dir.join(format!("{t}-{i}.done"));
                        fs::rename(&p, &q).unwrap();
                        if i % 2 == 0 {
                            fs::remove_file(&q).unwrap();
                        }
                    }
                }
            });
        }
    });
    assert_eq!(fs::read_dir(root.join("shared")).unwrap().count(), 4 * 30);
    for t in 0..4 {
        assert_eq!(
            fs::read_dir(root.join(format!("t{t}"))).unwrap().count(),
            30
        );
    }
    m.finish();
}

/// How long the lookup/forget race runs: 2 s by default, `E4_FORGET_RACE_SECS` for longer.
fn forget_race_duration() -> Duration {
    let secs = std::env::var("E4_FORGET_RACE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

/// The kernel sends FORGET when it evicts an inode, which the other tests leave to memory
/// pressure; here `drop_caches` evicts every unused dentry and inode in a loop while
/// three threads look the same names up again (each file has a name in two directories,
/// so two lookups of one inode race too). A LOOKUP then meets the FORGET of the same inode
/// on another worker, and the mount's lookup counts and the engine's open count must stay
/// in step: no name may go missing, and once every file is unlinked and the kernel has
/// forgotten them, every inode must be free again (a count lost in the race keeps its
/// inode open in the engine, and so allocated, until unmount).
#[test]
fn lookups_racing_the_kernels_forgets_keep_every_inode_counted() {
    const FILES: usize = 256;
    let what = "lookups racing forgets";
    if fs::write("/proc/sys/vm/drop_caches", "2").is_err() {
        fuse_skipped(what, "cannot write /proc/sys/vm/drop_caches (needs root)");
        return;
    }
    let Some(m) = TestMount::new(what, 32, "threads=4") else {
        return;
    };
    let root = m.path().to_path_buf();
    let before = free_inodes(&root);
    let (a, b) = (root.join("a"), root.join("b"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    for i in 0..FILES {
        fs::write(a.join(i.to_string()), i.to_string()).unwrap();
        fs::hard_link(a.join(i.to_string()), b.join(i.to_string())).unwrap();
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let running = || !stop.load(std::sync::atomic::Ordering::Relaxed);
    let (lookups, drops) = std::thread::scope(|s| {
        let dropper = s.spawn(|| {
            let mut drops = 0u64;
            while running() {
                fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
                drops += 1;
            }
            drops
        });
        let lookers: Vec<_> = (0..3usize)
            .map(|t| {
                let (a, b) = (&a, &b);
                s.spawn(move || {
                    let mut lookups = 0u64;
                    let mut i = t * 17;
                    while running() {
                        i = (i + 7) % FILES;
                        let dir = if (i + t) % 2 == 0 { a } else { b };
                        let meta = fs::metadata(dir.join(i.to_string()))
                            .unwrap_or_else(|e| panic!("stat {}/{i}: {e}", dir.display()));
                        assert_eq!((meta.nlink(), meta.len()), (2, i.to_string().len() as u64));
                        lookups += 1;
                    }
                    lookups
                })
            })
            .collect();
        std::thread::sleep(forget_race_duration());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let lookups: u64 = lookers.into_iter().map(|t| t.join().unwrap()).sum();
        (lookups, dropper.join().unwrap())
    });
    eprintln!("{what}: {lookups} stats, {drops} cache drops");
    fs::remove_dir_all(&a).unwrap();
    fs::remove_dir_all(&b).unwrap();
    assert!(
        eventually(|| free_inodes(&root) == before),
        "inodes still allocated after every file was unlinked and forgotten: {} free, {before} before",
        free_inodes(&root)
    );
    m.finish();
}

#[test]
fn missing_entries_and_bad_renames_answer_errnos_not_panics() {
    let Some(m) = TestMount::new("errors", 16, "") else {
        return;
    };
    let root = m.path();
    let (a, b) = (root.join("a"), root.join("b"));
    let exchange = renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_EXCHANGE);
    assert_eq!(exchange, Err(Errno::ENOENT));
    let whiteout = renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_WHITEOUT);
    assert!(whiteout.is_err());
    fs::create_dir(&a).unwrap();
    assert_eq!(
        errno_of(fs::rename(&a, a.join("inside")).unwrap_err()),
        Errno::EINVAL
    );
    assert_eq!(errno_of(fs::hard_link(&a, &b).unwrap_err()), Errno::EPERM);
    let err = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&a)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    assert_eq!(xattr::get(&a, "user.none").unwrap(), None);
    m.finish();
}

/// `uid=`/`gid=`: the mounting user's files are stored as the image's ids and shown as the
/// user's; `fakeroot` stores root whoever creates (run as root, as in CI, that part only
/// shows the option is taken).
#[test]
fn owner_options_map_the_image_ids_to_the_mounting_user() {
    let Some(m) = TestMount::new("uid= and gid=", 16, "uid=1000,gid=1001") else {
        return;
    };
    let (me, my_group) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    fs::write(m.path().join("f"), b"").unwrap();
    let shown = fs::metadata(m.path().join("f")).unwrap();
    assert_eq!((shown.uid(), shown.gid()), (me, my_group));
    let image = m.finish();
    let fs = e4_fs::Filesystem::open(&image.path, e4_fs::OpenOptions::default()).unwrap();
    let stored = fs.metadata(fs.resolve("/f", true).unwrap()).unwrap();
    assert_eq!((stored.uid, stored.gid), (1000, 1001));
    drop(fs);
    let Some(m) = TestMount::of("fakeroot", image, "fakeroot") else {
        return;
    };
    fs::write(m.path().join("g"), b"").unwrap();
    let image = m.finish();
    let fs = e4_fs::Filesystem::open(&image.path, e4_fs::OpenOptions::default()).unwrap();
    let stored = fs.metadata(fs.resolve("/g", true).unwrap()).unwrap();
    assert_eq!((stored.uid, stored.gid), (0, 0));
}

/// statfs's free and available counts move together, by the blocks a write takes (the
/// blocks an allocator keeps ahead for a file being written count as free, as ext4's
/// preallocations do); and O_TRUNC of an empty file frees what fallocate KEEP_SIZE put
/// past its end, as ext4's truncate does.
#[test]
fn free_counts_follow_what_files_hold() {
    let Some(m) = TestMount::new("free counts", 32, "") else {
        return;
    };
    let f = m.path().join("f");
    let before = statvfs(m.path()).unwrap();
    fs::write(&f, vec![7u8; 10_000]).unwrap();
    let after = statvfs(m.path()).unwrap();
    let used = before.blocks_free() - after.blocks_free();
    assert!((3..=4).contains(&used), "a 3-block file took {used} blocks");
    assert_eq!(
        before.blocks_available() - after.blocks_available(),
        used,
        "available blocks moved apart from free ones"
    );

    let g = m.path().join("g");
    let file = File::create(&g).unwrap();
    fallocate(&file, FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, 1 << 20).unwrap();
    assert_eq!(fs::metadata(&g).unwrap().blocks(), 2048);
    drop(file);
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&g)
        .unwrap();
    assert_eq!(fs::metadata(&g).unwrap().blocks(), 0);
    m.finish();
}

/// `fallocate -l 1G` on a 512 MiB image answers ENOSPC and keeps what it allocated, as the
/// kernel's ext4 does (`ext4_alloc_file_blocks`; on Linux 6.18 it leaves 500,109,312 bytes
/// and answers in 12 ms): the size ends at the last block mapped, a second call changes
/// nothing, and the kernel reads the same file from the unmounted image. e4 took 18 s to
/// answer (an allocation of everything, its undo, a commit and the same again, one block
/// at a time once the free count was below the request); `e4-fs/tests/fallocate_full.rs`
/// counts its allocations.
#[test]
fn a_fallocate_larger_than_the_disk_answers_enospc_keeping_what_it_allocated() {
    let Some(m) = TestMount::new("fallocate past the free space", 512, "") else {
        return;
    };
    let f = m.path().join("big");
    let file = File::create(&f).unwrap();
    let full = fallocate(&file, FallocateFlags::empty(), 0, 1 << 30);
    assert_eq!(full, Err(Errno::ENOSPC));
    let kept = fs::metadata(&f).unwrap();
    assert!(kept.len() > 400 << 20 && kept.len() < 512 << 20, "{kept:?}");
    assert_eq!(kept.len() % 4096, 0);
    assert!(kept.blocks() * 512 >= kept.len());
    assert_eq!(statvfs(m.path()).unwrap().blocks_available(), 0);
    let again = fallocate(&file, FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, 1 << 30);
    assert_eq!(again, Err(Errno::ENOSPC));
    let after = fs::metadata(&f).unwrap();
    assert_eq!((after.len(), after.blocks()), (kept.len(), kept.blocks()));
    drop(file);
    let image = m.finish();
    match KernelMount::mount(&image.path) {
        Ok(view) => {
            let seen = fs::metadata(view.path().join("big")).unwrap();
            assert_eq!((seen.len(), seen.blocks()), (kept.len(), kept.blocks()));
        }
        Err(reason) => {
            e4_testkit::kernel_comparison_skipped("fallocate past the free space", &reason)
        }
    }
}

/// `norecovery`: an image whose journal needs recovery (a crash image of e4's own, taken
/// at the first flush where the log alone holds a new file) is shown as it is on disk,
/// without the log's transactions, and left byte for byte as it was; a plain `ro` mount
/// shows it replayed (in memory), and `rw` with `norecovery` is refused.
#[test]
fn norecovery_shows_the_image_without_its_journal() {
    use e4_fs::device::Device;
    use e4_fs::{Creator, Filesystem, OpenOptions as EngineOptions};

    let image = make_empty_image(&["-t", "ext4", "-b", "4096"], 16);
    let bytes = fs::read(&image.path).unwrap();
    let device = std::sync::Arc::new(e4_fs::recording_device::RecordingDevice::new(
        bytes.clone(),
        4096,
    ));
    let engine = Filesystem::open_device(device.clone(), EngineOptions::writable()).unwrap();
    let creator = Creator {
        permissions: 0o644,
        uid: 0,
        gid: 0,
        umask: 0,
    };
    let ino = engine.create(2, b"logged", creator).unwrap();
    engine.write_at(ino, 0, b"in the log").unwrap();
    engine.sync().unwrap();
    engine.unmount().unwrap();
    let log = device.log();
    let sees = |image: &[u8], replay_journal: bool| {
        let options = EngineOptions {
            replay_journal,
            ..EngineOptions::default()
        };
        let fs = Filesystem::open_bytes(image.to_vec(), options).unwrap();
        fs.lookup(2, b"logged").unwrap().is_some()
    };
    let crashed = (0..=log.flushes())
        .map(|k| {
            let mut crashed = vec![0; bytes.len()];
            log.image_at_flush(k)
                .read_exact_at(&mut crashed, 0)
                .unwrap();
            crashed
        })
        .find(|crashed| !sees(crashed, false) && sees(crashed, true))
        .expect("a crash image whose log alone holds the new file");
    let refused = Filesystem::open_bytes(
        crashed.clone(),
        EngineOptions {
            replay_journal: false,
            ..EngineOptions::writable()
        },
    );
    assert!(refused.is_err(), "written over a log that was not replayed");
    let dirty = image.path.with_extension("dirty");
    fs::write(&dirty, &crashed).unwrap();
    let before = fs::read(&dirty).unwrap();
    let shown = |options: &str| -> Option<bool> {
        let dir = tempfile::tempdir().unwrap();
        let options = MountOptions::parse(options).unwrap();
        let mounted = match e4_fuse::mount(&dirty, dir.path(), &options) {
            Ok(mounted) => mounted,
            Err(e @ MountError::Mount { .. }) => {
                fuse_skipped("norecovery", &e.to_string());
                return None;
            }
            Err(e) => panic!("{e}"),
        };
        let _guard = FuseGuard::watch(dir.path(), LIMIT);
        let found = dir.path().join("logged").exists();
        mounted.unmount().unwrap();
        Some(found)
    };
    let Some(without) = shown("norecovery") else {
        return;
    };
    assert!(!without, "norecovery showed what only the log holds");
    assert_eq!(shown("ro"), Some(true), "ro did not replay the log");
    assert!(
        fs::read(&dirty).unwrap() == before,
        "a read-only mount wrote"
    );
    assert!(matches!(
        MountOptions::parse("rw,norecovery"),
        Err(e4_fuse::OptionError::WritableWithoutRecovery)
    ));
}

/// With `-o acl` the kernel checks permissions itself, through the POSIX ACLs e4 stores:
/// a user the mode shuts out reads a file whose ACL names them, and is refused one whose
/// ACL does not, and a write the ACL does not grant. Run as user 1000 with `setpriv`
/// (util-linux); without it (or without root to switch users) the test says so and passes.
#[test]
fn with_acl_the_kernel_checks_permissions_through_the_acls() {
    let Some(m) = TestMount::new("acl permission checks", 16, "acl,allow_other") else {
        return;
    };
    let named = m.path().join("named");
    let unnamed = m.path().join("unnamed");
    for file in [&named, &unnamed] {
        fs::write(file, b"secret").unwrap();
        fs::set_permissions(file, fs::Permissions::from_mode(0o600)).unwrap();
    }
    // user::rw- user:1000:r-- group::--- mask::r-- other::---, in setxattr's form.
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 4, 1000),
        (0x04, 0, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    xattr::set(&named, "system.posix_acl_access", &acl).unwrap();
    assert_eq!(fs::metadata(&named).unwrap().mode() & 0o777, 0o640);
    let as_user_1000 = |args: &[&str]| {
        std::process::Command::new("timeout")
            .args([
                "10",
                "setpriv",
                "--reuid=1000",
                "--regid=1000",
                "--clear-groups",
            ])
            .args(args)
            .output()
    };
    match as_user_1000(&["true"]) {
        Ok(out) if out.status.success() => {
            let read = |path: &Path| as_user_1000(&["cat", path.to_str().unwrap()]).unwrap();
            let allowed = read(&named);
            assert!(allowed.status.success(), "{allowed:?}");
            assert_eq!(allowed.stdout, b"secret");
            let refused = read(&unnamed);
            assert!(!refused.status.success(), "{refused:?}");
            assert!(String::from_utf8_lossy(&refused.stderr).contains("Permission denied"));
            let write =
                as_user_1000(&["sh", "-c", &format!("echo x >> {}", named.display())]).unwrap();
            assert!(!write.status.success(), "{write:?}");
        }
        other => eprintln!(
            "acl permission checks: skipped, setpriv cannot run as user 1000 here ({other:?})"
        ),
    }
    m.finish();
}

/// Set-user-ID and set-group-ID go when a user without CAP_FSETID writes, truncates
/// (also by O_TRUNC) or fallocates a file, as on the kernel's ext4; set-group-ID without
/// group execute stays, and root keeps both. The mount clears them itself: it asks the
/// kernel for FUSE_HANDLE_KILLPRIV_V2, which spares a GETXATTR before every write.
#[test]
fn writes_by_a_user_clear_set_user_id_and_set_group_id_as_on_ext4() {
    let Some(m) = TestMount::new("privileges cleared on write", 16, "allow_other") else {
        return;
    };
    let as_user_1000 = |shell: &str| {
        std::process::Command::new("timeout")
            .args([
                "10",
                "setpriv",
                "--reuid=1000",
                "--regid=1000",
                "--clear-groups",
            ])
            .args(["sh", "-c", shell])
            .current_dir(m.path())
            .output()
            .unwrap()
    };
    if !as_user_1000("true").status.success() {
        eprintln!("privileges cleared on write: skipped, setpriv cannot run as user 1000 here");
        return;
    }
    // (name, mode before, what user 1000 does, mode after): what ext4 leaves.
    let cases = [
        ("appended", 0o6775, "printf x >> appended", 0o775),
        (
            "no-group-execute",
            0o6745,
            "printf x >> no-group-execute",
            0o2745,
        ),
        ("written", 0o4755, "printf x 1<> written", 0o755),
        ("truncated", 0o6775, "truncate -s 1 truncated", 0o775),
        (
            "opened-with-o-trunc",
            0o6775,
            ": > opened-with-o-trunc",
            0o775,
        ),
        ("fallocated", 0o6775, "fallocate -l 8192 fallocated", 0o775),
        ("read", 0o6775, "cat read", 0o6775),
    ];
    for (name, before, _, _) in cases {
        let path = m.path().join(name);
        fs::write(&path, b"data").unwrap();
        std::os::unix::fs::chown(&path, Some(1000), Some(1000)).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(before)).unwrap();
    }
    let by_root = m.path().join("by-root");
    fs::write(&by_root, b"data").unwrap();
    fs::set_permissions(&by_root, fs::Permissions::from_mode(0o6775)).unwrap();
    for (name, _, shell, after) in cases {
        let out = as_user_1000(shell);
        assert!(out.status.success(), "{shell}: {out:?}");
        let mode = fs::metadata(m.path().join(name)).unwrap().mode() & 0o7777;
        assert_eq!(mode, after, "{shell}: mode {mode:o}, ext4 leaves {after:o}");
    }
    // An append-only file refuses the change of mode, and so the write (ext4's
    // `notify_change`): nothing written, the bits kept.
    let protected = m.path().join("protected");
    fs::write(&protected, b"data").unwrap();
    std::os::unix::fs::chown(&protected, Some(1000), Some(1000)).unwrap();
    fs::set_permissions(&protected, fs::Permissions::from_mode(0o4777)).unwrap();
    let chattr = std::process::Command::new("chattr")
        .arg("+a")
        .arg(&protected)
        .status();
    if chattr.is_ok_and(|s| s.success()) {
        let out = as_user_1000("printf x >> protected");
        assert!(
            !out.status.success(),
            "a write to an append-only 4777 file: {out:?}"
        );
        let meta = fs::metadata(&protected).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.len()), (0o4777, 4));
    }
    // Root holds CAP_FSETID: its append, truncate, O_TRUNC and fallocate keep both.
    let mut file = OpenOptions::new().append(true).open(&by_root).unwrap();
    file.write_all(b"x").unwrap();
    file.set_len(1).unwrap();
    fallocate(&file, FallocateFlags::empty(), 0, 8192).unwrap();
    drop(file);
    File::create(&by_root).unwrap();
    assert_eq!(fs::metadata(&by_root).unwrap().mode() & 0o7777, 0o6775);
    // But a chown naming no owner clears them, even root's, and leaves a directory's.
    let dir = m.path().join("dir");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o6775)).unwrap();
    for (path, after) in [(&by_root, 0o775), (&dir, 0o6775)] {
        std::os::unix::fs::chown(path, None, None).unwrap();
        assert_eq!(
            fs::metadata(path).unwrap().mode() & 0o7777,
            after,
            "{path:?}"
        );
    }
    m.finish();
}

/// Runs `program ARGS` in `dir` with at most 60 s (a stuck mount must not hang the test);
/// it must succeed. Returns its standard output.
fn run_in(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("timeout")
        .arg("60")
        .arg(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The tree a real-tree test copies: `E4_REAL_TREE` (e.g. `/usr/share/doc`: 5,000
/// entries, 133 MiB, symlinks), else `crate` of the repository's own `crates/` ("." for
/// all of it: about 450 entries, 4.5 MiB).
fn real_tree(crate_dir: &str) -> std::path::PathBuf {
    std::env::var_os("E4_REAL_TREE").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(crate_dir)
        },
        Into::into,
    )
}

/// `cp -a`, `tar x`, `git init/add/commit/status/checkout` and `rm -rf` of a real tree
/// through the mount, as a user's build sandbox would run them: each copy equals its
/// source (types, modes, owners, sizes, contents, link targets, user xattrs, hard links,
/// mtimes: to the nanosecond for `cp -a`, the second for tar's), git sees a clean tree,
/// then a change, then the change undone; after `rm -rf` the tree is gone. What the mount
/// showed at the end is copied out; then the image is unmounted, must pass `e2fsck -fn`,
/// and the kernel's read-only mount of it must show that same tree.
#[test]
fn cp_tar_git_and_rm_of_a_real_tree_leave_what_the_kernel_reads_back() {
    let source = real_tree(".");
    // Two copies and git's objects.
    let size_mib = 256.max(3 * du_mib(&source) + 128);
    let Some(m) = TestMount::new("a real tree", size_mib, "") else {
        return;
    };
    let root = m.path().to_path_buf();
    let src = source.to_str().unwrap();
    let exact = to_the_nanosecond();
    // cp -a: everything, times to the nanosecond.
    run_in(&root, "cp", &["-a", &format!("{src}/."), "copy"]);
    assert_same_tree(&source, &root.join("copy"), &exact, "cp -a");
    // tar x, from a pipe: tar keeps mtimes to the second.
    let archive = tempfile::NamedTempFile::new().unwrap();
    let archive_path = archive.path().to_str().unwrap();
    run_in(&root, "tar", &["cf", archive_path, "-C", src, "."]);
    fs::create_dir(root.join("untar")).unwrap();
    run_in(&root.join("untar"), "tar", &["xpf", archive_path]);
    let seconds = to_the_second();
    assert_same_tree(&source, &root.join("untar"), &seconds, "tar x");
    // git: a repository of the copy, committed, changed, restored, branched.
    let repo = root.join("copy");
    let git = |args: &[&str]| git_in(&repo, args);
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "the real tree"]);
    assert_eq!(git(&["status", "--porcelain"]), "");
    let tracked = git(&["ls-files"]);
    let first = tracked.lines().next().expect("a tracked file").to_string();
    fs::OpenOptions::new()
        .append(true)
        .open(repo.join(&first))
        .unwrap()
        .write_all(b"changed through e4\n")
        .unwrap();
    assert_eq!(git(&["status", "--porcelain"]), format!(" M {first}\n"));
    git(&["checkout", "-q", "--", &first]);
    assert_eq!(git(&["status", "--porcelain"]), "");
    git(&["checkout", "-q", "-b", "other"]);
    assert_eq!(git(&["log", "--oneline"]).lines().count(), 1);
    git(&["fsck", "--no-progress"]);
    // rm -rf: the untarred tree goes, and the inodes it held come back.
    let before = free_inodes(&root);
    run_in(&root, "rm", &["-rf", "untar"]);
    assert!(!root.join("untar").exists());
    assert!(
        eventually(|| free_inodes(&root) > before),
        "rm -rf freed no inode"
    );
    finish_as_the_kernel_reads_it(m, "a real tree");
}

/// Copies out what the mount shows, unmounts (the image must pass `e2fsck -fn`), and
/// checks that the kernel's read-only mount of the image shows that same tree to the
/// nanosecond.
fn finish_as_the_kernel_reads_it(m: TestMount, what: &str) {
    let shown = tempfile::tempdir().unwrap();
    run_in(m.path(), "cp", &["-a", ".", shown.path().to_str().unwrap()]);
    let image = m.finish();
    match KernelMount::mount(&image.path) {
        Ok(view) => {
            let exact = to_the_nanosecond();
            assert_same_tree(
                shown.path(),
                &view.path(),
                &exact,
                &format!("{what}: the kernel's view"),
            );
        }
        Err(reason) => e4_testkit::kernel_comparison_skipped(what, &reason),
    }
}

/// Trees compared as `cp -a` keeps them: mtimes to the nanosecond, the root's times too.
fn to_the_nanosecond() -> CompareOptions {
    CompareOptions {
        mtime_nanoseconds: true,
        root_times: true,
        ..CompareOptions::default()
    }
}

/// Trees compared as tar keeps them: mtimes to the second.
fn to_the_second() -> CompareOptions {
    CompareOptions {
        root_times: true,
        ..CompareOptions::default()
    }
}

/// `git ARGS` in `repo` ([`run_in`]), as a user with a name, in a repository owned by
/// anyone.
fn git_in(repo: &Path, args: &[&str]) -> String {
    let mut all = vec![
        "-c",
        "safe.directory=*",
        "-c",
        "user.name=e4",
        "-c",
        "user.email=e4@e4",
    ];
    all.extend_from_slice(args);
    run_in(repo, "git", &all)
}

/// The real-tree tools of the test above, all at once in one mount, served by four
/// worker threads: two `cp -a` of the tree, a `tar x` of it, `rm -rf` of a copy made
/// before, and git committing, changing and checking out a third copy, each from a
/// thread of its own. Then every copy must equal its source as above, the removed tree
/// be gone, git's repository be clean and pass `git fsck`; the image must pass `e2fsck
/// -fn` and the kernel's view of it equal what the mount showed. `E4_REAL_TREE` as above
/// (the default here is `crates/e4-fs`).
#[test]
fn cp_tar_git_and_rm_at_once_in_one_mount_leave_what_the_kernel_reads_back() {
    // By default one crate (150 entries, 1.7 MiB): six trees of it cost what two of
    // `crates/` do.
    let source = real_tree("e4-fs");
    // Four copies and git's objects.
    let size_mib = 256.max(5 * du_mib(&source) + 128);
    let Some(m) = TestMount::new("real-tree tools at once", size_mib, "threads=4") else {
        return;
    };
    let root = m.path().to_path_buf();
    let src = source.to_str().unwrap();
    let archive = tempfile::NamedTempFile::new().unwrap();
    let archive_path = archive.path().to_str().unwrap();
    run_in(&root, "tar", &["cf", archive_path, "-C", src, "."]);
    // Made before: the tree rm -rf removes and the one git works in.
    run_in(&root, "cp", &["-a", &format!("{src}/."), "doomed"]);
    run_in(&root, "cp", &["-a", &format!("{src}/."), "repo"]);
    fs::create_dir(root.join("untar")).unwrap();
    let repo = root.join("repo");
    let tracked_first = std::thread::scope(|scope| {
        let copies: Vec<_> = ["copy1", "copy2"]
            .map(|to| {
                let root = &root;
                scope.spawn(move || run_in(root, "cp", &["-a", &format!("{src}/."), to]))
            })
            .into_iter()
            .collect();
        let untar = scope.spawn(|| run_in(&root.join("untar"), "tar", &["xpf", archive_path]));
        let remove = scope.spawn(|| run_in(&root, "rm", &["-rf", "doomed"]));
        let git = scope.spawn(|| {
            let git = |args: &[&str]| git_in(&repo, args);
            git(&["init", "-q"]);
            git(&["add", "-A"]);
            git(&["commit", "-q", "-m", "the real tree"]);
            let tracked = git(&["ls-files"]);
            let first = tracked.lines().next().expect("a tracked file").to_string();
            fs::OpenOptions::new()
                .append(true)
                .open(repo.join(&first))
                .unwrap()
                .write_all(b"changed through e4\n")
                .unwrap();
            assert_eq!(git(&["status", "--porcelain"]), format!(" M {first}\n"));
            git(&["checkout", "-q", "--", &first]);
            git(&["checkout", "-q", "-b", "other"]);
            first
        });
        for worker in copies.into_iter().chain([untar, remove]) {
            worker.join().expect("a tool's thread panicked");
        }
        git.join().expect("git's thread panicked")
    });
    let exact = to_the_nanosecond();
    for copy in ["copy1", "copy2"] {
        assert_same_tree(&source, &root.join(copy), &exact, copy);
    }
    let seconds = to_the_second();
    assert_same_tree(&source, &root.join("untar"), &seconds, "tar x");
    assert!(!root.join("doomed").exists(), "rm -rf left the tree");
    assert_eq!(git_in(&repo, &["status", "--porcelain"]), "");
    assert!(git_in(&repo, &["ls-files"]).contains(&tracked_first));
    git_in(&repo, &["fsck", "--no-progress"]);
    finish_as_the_kernel_reads_it(m, "real-tree tools at once");
}

/// Fails unless trees `a` and `b` match under `options`, naming `what` and the first ten
/// differences.
fn assert_same_tree(a: &Path, b: &Path, options: &CompareOptions, what: &str) {
    let diffs = compare_trees(a, b, options);
    assert!(
        diffs.is_empty(),
        "{what}: {:?}",
        &diffs[..diffs.len().min(10)]
    );
}

/// MiB of files under `dir` (`du -sm`).
fn du_mib(dir: &Path) -> u64 {
    let out = run_in(dir, "du", &["-sm", "."]);
    out.split_whitespace().next().unwrap().parse().unwrap()
}
