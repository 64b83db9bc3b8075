//! Many more threads than cores change one filesystem at once: private directories, one
//! shared directory, and files moved between directories (cross-directory renames), with
//! writes, appends and truncates in between. Afterwards `e2fsck -fn` must pass, every file's
//! bytes must be the pattern its writer used (whatever name it ended under), and the kernel
//! must see the same tree as e4.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e4_fs::device::{Device, MemoryDevice};
use e4_fs::{Creator, Error, FileType, Filesystem, OpenOptions, RenameMode};
use e4_testkit::{e2fsck_clean, make_empty_image, IoGate, KernelMount};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROOT: u32 = 2;
const THREADS: usize = 24;
const OPS: usize = 400;
const ME: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// Byte `i` of the file whose writer id is `id`: files carry their id in bytes 0..8.
fn pattern(id: u64, i: u64) -> u8 {
    if i < 8 {
        id.to_le_bytes()[i as usize]
    } else {
        (id.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8
    }
}

fn bytes(id: u64, from: u64, len: u64) -> Vec<u8> {
    (from..from + len).map(|i| pattern(id, i)).collect()
}

/// Errors another thread's concurrent change can cause; anything else fails the test.
fn tolerated(result: Result<(), Error>) {
    match result {
        Ok(()) | Err(Error::NotFound(_) | Error::Exists(_) | Error::NotEmpty(_)) => {}
        Err(e) => panic!("unexpected error under concurrency: {e}"),
    }
}

fn worker(fs: &Filesystem, t: usize, dirs: &[u32], shared: u32, ids: &AtomicU64) {
    let mut rng = StdRng::seed_from_u64(t as u64 * 7919);
    let mine = dirs[t];
    let mut files: Vec<(u32, Vec<u8>)> = Vec::new();
    for k in 0..OPS {
        let dir = if rng.gen_bool(0.3) { shared } else { mine };
        match rng.gen_range(0..10) {
            0..=2 => {
                // Made and written in my directory (where nobody else removes it), then
                // moved to the shared one: an inode number is only safe to use while a name
                // (or an open) keeps it.
                let name = format!("t{t}-{k}").into_bytes();
                let ino = fs.create(mine, &name, ME).unwrap();
                let id = ids.fetch_add(1, Ordering::Relaxed);
                let len = rng.gen_range(8..40_000);
                fs.write_at(ino, 0, &bytes(id, 0, len)).unwrap();
                if dir == mine {
                    files.push((ino, name));
                } else {
                    tolerated(fs.rename(mine, &name, shared, &name, RenameMode::Replace));
                }
            }
            3 => {
                if let Some((ino, _)) = files.get(rng.gen_range(0..files.len().max(1))) {
                    // Append the continuation of the file's own pattern.
                    let Ok(meta) = fs.metadata(*ino) else {
                        continue;
                    };
                    if meta.nlink == 0 || meta.size < 8 {
                        continue;
                    }
                    let mut head = [0u8; 8];
                    fs.read_at(*ino, 0, &mut head).unwrap();
                    let id = u64::from_le_bytes(head);
                    let len = rng.gen_range(1..20_000);
                    fs.write_at(*ino, meta.size, &bytes(id, meta.size, len))
                        .unwrap();
                }
            }
            4 => {
                if let Some((ino, _)) = files.get(rng.gen_range(0..files.len().max(1))) {
                    let Ok(meta) = fs.metadata(*ino) else {
                        continue;
                    };
                    if meta.nlink > 0 && meta.size > 8 {
                        fs.truncate(*ino, rng.gen_range(8..=meta.size)).unwrap();
                    }
                }
            }
            5 => {
                if !files.is_empty() {
                    let (_, name) = files.swap_remove(rng.gen_range(0..files.len()));
                    tolerated(fs.unlink(mine, &name));
                }
            }
            6 => {
                // Move one of my files into another thread's directory.
                if !files.is_empty() {
                    let (_, name) = files.swap_remove(rng.gen_range(0..files.len()));
                    let to = dirs[rng.gen_range(0..dirs.len())];
                    let new_name = format!("moved-{t}-{k}").into_bytes();
                    tolerated(fs.rename(mine, &name, to, &new_name, RenameMode::Replace));
                }
            }
            7 => {
                // Renames inside the shared directory collide with everyone's.
                let from = format!("t{}-{}", rng.gen_range(0..THREADS), rng.gen_range(0..k + 1));
                let to = format!("s{}", rng.gen_range(0..50));
                tolerated(fs.rename(
                    shared,
                    from.as_bytes(),
                    shared,
                    to.as_bytes(),
                    RenameMode::Replace,
                ));
            }
            8 => {
                let name = format!("d{t}-{}", rng.gen_range(0..8)).into_bytes();
                if rng.gen_bool(0.5) {
                    tolerated(fs.mkdir(dir, &name, ME).map(drop));
                } else {
                    tolerated(fs.rmdir(dir, &name));
                }
            }
            _ => {
                let name = format!("t{}-{}", rng.gen_range(0..THREADS), rng.gen_range(0..k + 1));
                match fs.unlink(shared, name.as_bytes()) {
                    Err(Error::IsADirectory(_)) => {}
                    other => tolerated(other),
                }
            }
        }
    }
}

/// Checks every regular file's bytes against its pattern; returns (path, size) of each.
fn check_tree(fs: &Filesystem, dir: u32, path: &str, out: &mut BTreeMap<String, u64>) {
    for e in fs.read_dir(dir).unwrap() {
        let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
        let inode = fs.read_inode(e.ino).unwrap();
        match inode.file_type() {
            Some(FileType::Directory) => check_tree(fs, e.ino, &p, out),
            Some(FileType::Regular) => {
                let data = fs.read_file(e.ino, 1 << 30).unwrap();
                if data.len() >= 8 {
                    let id = u64::from_le_bytes(data[..8].try_into().unwrap());
                    assert!(
                        data == bytes(id, 0, data.len() as u64),
                        "{p}: bytes are not its writer's"
                    );
                }
                out.insert(p, data.len() as u64);
            }
            _ => {}
        }
    }
}

fn host_tree(dir: &Path, path: &str, out: &mut BTreeMap<String, u64>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = format!("{path}/{}", e.file_name().to_string_lossy());
        let meta = e.metadata().unwrap();
        if meta.is_dir() {
            host_tree(&e.path(), &p, out);
        } else if meta.is_file() {
            out.insert(p, meta.len());
        }
    }
}

#[test]
fn many_threads_on_private_and_shared_directories() {
    let profiles: [&[&str]; 3] = [
        &["-t", "ext4"],
        &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum,uninit_bg"],
        &["-t", "ext3"],
    ];
    for args in profiles {
        let img = make_empty_image(args, 256);
        let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
        let dirs: Vec<u32> = (0..THREADS)
            .map(|t| {
                fs.mkdir(ROOT, format!("private{t}").as_bytes(), ME)
                    .unwrap()
            })
            .collect();
        let shared = fs.mkdir(ROOT, b"shared", ME).unwrap();
        let ids = AtomicU64::new(1);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (fs, dirs, ids) = (&fs, &dirs, &ids);
                s.spawn(move || worker(fs, t, dirs, shared, ids));
            }
            // Commits race with the workers.
            s.spawn(|| {
                for _ in 0..20 {
                    fs.sync().unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            });
        });
        fs.unmount().unwrap();
        e2fsck_clean(&img.path).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
        let mut ours = BTreeMap::new();
        check_tree(&fs, ROOT, "", &mut ours);
        assert!(ours.len() > THREADS, "only {} files survived", ours.len());
        if let Ok(mount) = KernelMount::mount(&img.path) {
            let mut kernel = BTreeMap::new();
            host_tree(&mount.path(), "", &mut kernel);
            kernel.retain(|p, _| !p.starts_with("/lost+found"));
            ours.retain(|p, _| !p.starts_with("/lost+found"));
            assert_eq!(kernel, ours, "{args:?}: the kernel sees another tree");
        }
    }
}

/// An unlink that cannot take the file's lock while holding the directory's (the file's
/// number is lower, and a write holds its lock, held at its data by the device) lets go of
/// the directory and takes both in order. Creates made in that gap change the leaf the
/// entry is in: the unlink must remove the entry from the leaf as it is then, not from its
/// first look. The names made are long enough that the one-block directory becomes indexed
/// and its leaves split: the victim's record moves, so its first place holds something
/// else (the index root).
#[test]
fn an_unlink_waiting_for_the_file_keeps_names_made_meanwhile() {
    let img = make_empty_image(&["-t", "ext4", "-N", "20000"], 64);
    let device = DataGate::over(&img.path, true);
    let fs = device.open();
    let file = fs.create(ROOT, b"victim", ME).unwrap();
    let dir = fs.mkdir(ROOT, b"d", ME).unwrap();
    assert!(
        file < dir,
        "the file {file} must sort before its directory {dir}"
    );
    fs.rename(ROOT, b"victim", dir, b"victim", RenameMode::Replace)
        .unwrap();
    // A second name keeps the file: the unlink frees nothing, so it needs no more log room
    // than it began with and never starts over (which would look the name up afresh).
    fs.link(file, ROOT, b"kept").unwrap();
    let made = |i: usize| format!("made-{i:03}-{}", "n".repeat(200));
    let data = vec![0x5au8; 1 << 20];
    std::thread::scope(|s| {
        device.gate.arm();
        let writing = s.spawn(|| fs.write_at(file, 0, &data).unwrap());
        device.gate.wait_until_held();
        let contended = fs.lock_stats().inode.contended;
        let unlinking = s.spawn(|| fs.unlink(dir, b"victim").unwrap());
        wait_until_an_inode_lock_is_waited_for(&fs, contended);
        for i in 0..100 {
            fs.create(dir, made(i).as_bytes(), ME).unwrap();
        }
        assert!(
            !unlinking.is_finished(),
            "the unlink did not wait for the file"
        );
        device.gate.release();
        writing.join().unwrap();
        unlinking.join().unwrap();
    });
    assert!(
        fs.read_inode(dir)
            .unwrap()
            .has_flag(e4_format::inode::flags::INDEX),
        "the names made must turn the directory indexed"
    );
    for i in 0..100 {
        let name = made(i);
        assert!(
            fs.lookup(dir, name.as_bytes()).unwrap().is_some(),
            "{name} was lost"
        );
    }
    assert_eq!(fs.lookup(dir, b"victim").unwrap(), None);
    assert_eq!(fs.read_inode(file).unwrap().links_count(), 1);
    fs.unmount().unwrap();
    device.e2fsck_clean(&img.path);
}

/// A rename looks at its source's type with no directory locked (a move's "into itself"
/// check); while it waits there for the source (a write holds its lock, held at its data),
/// the empty destination directory is removed. Locked again, the rename must find the
/// destination gone (ENOENT, as the kernel's lookup in a dead directory), not look into
/// the freed directory's blocks, and leave the file where it was.
#[test]
fn a_rename_into_a_directory_removed_while_it_waits_is_not_found() {
    for mkfs in [
        &["-t", "ext4", "-N", "20000"][..],
        &[
            "-t",
            "ext4",
            "-N",
            "20000",
            "-O",
            "inline_data",
            "-I",
            "256",
        ],
    ] {
        let img = make_empty_image(mkfs, 64);
        let device = DataGate::over(&img.path, true);
        let fs = device.open();
        let file = fs.create(ROOT, b"f", ME).unwrap();
        fs.mkdir(ROOT, b"d", ME).unwrap();
        let dir = fs.lookup(ROOT, b"d").unwrap().unwrap();
        let data = vec![0x5au8; 1 << 20];
        let renamed = std::thread::scope(|s| {
            device.gate.arm();
            let writing = s.spawn(|| fs.write_at(file, 0, &data).unwrap());
            device.gate.wait_until_held();
            let contended = fs.lock_stats().inode.contended;
            let renaming = s.spawn(|| fs.rename(ROOT, b"f", dir, b"g", RenameMode::Replace));
            wait_until_an_inode_lock_is_waited_for(&fs, contended);
            fs.rmdir(ROOT, b"d").unwrap();
            device.gate.release();
            writing.join().unwrap();
            renaming.join().unwrap()
        });
        assert!(
            matches!(renamed, Err(Error::NotFound(_))),
            "{mkfs:?}: {renamed:?}"
        );
        assert_eq!(fs.lookup(ROOT, b"f").unwrap(), Some(file), "{mkfs:?}");
        fs.unmount().unwrap();
        device.e2fsck_clean(&img.path);
    }
}

/// A read follows the file's mapping under the inode's lock (shared with other readers): a
/// truncate cannot free the blocks under it, so a commit cannot hand them to another file
/// before the read is done. On a volume with no other free space, the other file's bytes
/// land in exactly those blocks: a reader holding the old mapping would read them.
#[test]
fn a_read_never_sees_another_files_bytes_in_blocks_its_file_gave_up() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096"], 128);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let file = fs.create(ROOT, b"a", ME).unwrap();
    const LEN: usize = 16 << 20;
    let mine = vec![0xaau8; LEN];
    let theirs = vec![0xbbu8; LEN];
    fs.write_at(file, 0, &mine).unwrap();
    // Everything else full: what `a` gives up is the only room `b` can have.
    let filler = fs.create(ROOT, b"filler", ME).unwrap();
    let spare = fs.statfs().free_blocks.saturating_sub(64) * 4096;
    fs.write_at(filler, 0, &vec![1u8; spare as usize]).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut buf = vec![0u8; LEN];
            let mut reads = 0u64;
            while !done.load(Ordering::Relaxed) {
                let n = fs.read_at(file, 0, &mut buf).unwrap();
                // Bytes written by a's writer, or nothing: never another file's.
                assert!(
                    buf[..n].iter().all(|&b| b == 0xaa),
                    "read another file's bytes"
                );
                reads += 1;
            }
            reads
        });
        for _ in 0..40 {
            fs.truncate(file, 0).unwrap();
            fs.sync().unwrap();
            let other = fs.create(ROOT, b"b", ME).unwrap();
            fs.write_at(other, 0, &theirs).unwrap();
            fs.unlink(ROOT, b"b").unwrap();
            fs.sync().unwrap();
            fs.write_at(file, 0, &mine).unwrap();
        }
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// A memory device that, once armed, holds the first read (or write) of at least
/// [`HELD_BYTES`] bytes until released: a file's data, which an operation reads or writes
/// holding the file's lock (metadata goes a block at a time).
struct DataGate {
    inner: MemoryDevice,
    gate: IoGate,
    writes: bool,
}

const HELD_BYTES: usize = 64 << 10;

impl DataGate {
    /// A gate over a copy of the image at `path`, holding reads, or writes when `writes`.
    fn over(path: &Path, writes: bool) -> Arc<Self> {
        Arc::new(DataGate {
            inner: MemoryDevice::new(std::fs::read(path).unwrap()),
            gate: IoGate::default(),
            writes,
        })
    }

    /// The filesystem on it, with no commit of its own accord (a commit waiting for the
    /// held operation's transaction would stop every other operation a test makes).
    fn open(self: &Arc<Self>) -> Filesystem {
        let options = OpenOptions {
            commit_interval: Duration::from_secs(3600),
            ..OpenOptions::writable()
        };
        Filesystem::open_device(self.clone(), options).unwrap()
    }

    /// e2fsck on what the device holds (the filesystem unmounted).
    fn e2fsck_clean(&self, img: &Path) {
        let path = img.with_extension("after");
        std::fs::write(&path, self.inner.bytes()).unwrap();
        e2fsck_clean(&path).unwrap();
    }
}

impl Device for DataGate {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if !self.writes && buf.len() >= HELD_BYTES {
            self.gate.hold_if_armed();
        }
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.writes && buf.len() >= HELD_BYTES {
            self.gate.hold_if_armed();
        }
        self.inner.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// Waits until some thread is blocked on an inode's lock (counted as contended before it
/// blocks): the operation a test started has made its first look and now waits.
fn wait_until_an_inode_lock_is_waited_for(fs: &Filesystem, contended_before: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs.lock_stats().inode.contended == contended_before {
        assert!(
            Instant::now() < deadline,
            "nothing waits for an inode's lock"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// [`a_read_never_sees_another_files_bytes_in_blocks_its_file_gave_up`] without the race:
/// the read is held at its data, after it has followed the mapping, while another thread
/// truncates the file, commits, and writes another file into the blocks given up. The
/// truncate must wait for the read (the inode's lock), so nothing of that happens before
/// the read is let go: the reader sees its file's bytes. A read following a copy of the
/// inode taken under the lock and then let go would read the other file's: nothing would
/// wait, and the writer would end while the read is held.
#[test]
fn a_read_held_at_its_data_keeps_the_blocks_from_a_truncate() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096"], 16);
    let device = DataGate::over(&img.path, false);
    let fs = Filesystem::open_device(device.clone(), OpenOptions::writable()).unwrap();
    const LEN: usize = 1 << 20;
    let file = fs.create(ROOT, b"a", ME).unwrap();
    fs.write_at(file, 0, &[0xaa; LEN]).unwrap();
    // Everything else full: `b` can only go where `a` was (and 16 spare blocks).
    let filler = fs.create(ROOT, b"filler", ME).unwrap();
    let spare = fs.statfs().free_blocks.saturating_sub(16) * 4096;
    fs.write_at(filler, 0, &vec![1u8; spare as usize]).unwrap();
    fs.sync().unwrap();
    device.gate.arm();
    let other_written = AtomicBool::new(false);
    let read = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut buf = vec![0u8; LEN];
            let n = fs.read_at(file, 0, &mut buf).unwrap();
            buf.truncate(n);
            buf
        });
        device.gate.wait_until_held();
        let contended = fs.lock_stats().inode.contended;
        let writer = s.spawn(|| {
            fs.truncate(file, 0).unwrap();
            fs.sync().unwrap();
            let other = fs.create(ROOT, b"b", ME).unwrap();
            fs.write_at(other, 0, &[0xbb; LEN]).unwrap();
            fs.sync().unwrap();
            other_written.store(true, Ordering::Release);
        });
        // The truncate waits for the file's lock (counted as contended before it blocks),
        // or, if the read holds nothing, the writer gets to the end: either decides.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !other_written.load(Ordering::Acquire) && fs.lock_stats().inode.contended == contended
        {
            assert!(
                Instant::now() < deadline,
                "the writer neither waits nor ends"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        device.gate.release();
        writer.join().unwrap();
        reader.join().unwrap()
    });
    assert_eq!(read.len(), LEN);
    assert!(
        read.iter().all(|&b| b == 0xaa),
        "the read saw another file's bytes"
    );
    assert_eq!(fs.read_file(file, 1 << 30).unwrap().len(), 0);
    fs.unmount().unwrap();
    device.e2fsck_clean(&img.path);
}
