//! The few operations the workloads need, behind one trait, so the same workload code runs
//! on e4 in process (inode numbers, library calls) and on any mounted directory (paths and
//! descriptors, system calls).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use e4_fs::{Creator, FallocateMode, Filesystem, LockReport};

/// Operations on one filesystem, callable from many threads at once.
pub trait FsOps: Sync {
    /// A directory handle.
    type Dir: Clone + Send + Sync;
    /// An open regular file.
    type File: Send + Sync;

    fn root(&self) -> Self::Dir;
    fn mkdir(&self, parent: &Self::Dir, name: &str) -> io::Result<Self::Dir>;
    /// Creates an empty file and closes it.
    fn create(&self, dir: &Self::Dir, name: &str) -> io::Result<()>;
    /// Creates (or truncates) a file and keeps it open for writing.
    fn open_new(&self, dir: &Self::Dir, name: &str) -> io::Result<Self::File>;
    fn unlink(&self, dir: &Self::Dir, name: &str) -> io::Result<()>;
    fn rename(&self, from: &Self::Dir, name: &str, to: &Self::Dir, new: &str) -> io::Result<()>;
    fn write_at(&self, file: &Self::File, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Reads up to `buf.len()` bytes at `offset`; returns how many (0 at the end).
    fn read_at(&self, file: &Self::File, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Makes the next read of `file` come from the filesystem's storage, not from a cache
    /// in memory, the same way for every target: after an fsync (so nothing is dirty) the
    /// kernel's page cache of the file is dropped (`posix_fadvise(POSIX_FADV_DONTNEED)`),
    /// which a user can do without root and which FUSE mounts honour, where O_DIRECT needs
    /// `direct_io` there and `drop_caches` drops every file on the machine.
    fn drop_cached(&self, file: &Self::File) -> io::Result<()>;
    /// Allocates `[offset, offset + len)`, growing the size (mode 0).
    fn fallocate(&self, file: &Self::File, offset: u64, len: u64) -> io::Result<()>;
    fn truncate(&self, file: &Self::File, size: u64) -> io::Result<()>;
    /// Makes the file's data and metadata durable.
    fn fsync(&self, file: &Self::File) -> io::Result<()>;
    /// Writes the whole filesystem back (`syncfs`): after a workload's set-up, so that the
    /// timed phase never pays for writing back what the set-up made.
    fn sync_all(&self) -> io::Result<()>;
    fn file_size(&self, file: &Self::File) -> io::Result<u64>;
    /// Resolves `path` (relative to the root, `/`-separated) and reads its attributes.
    fn stat_path(&self, path: &str) -> io::Result<()>;
    /// Lists `dir`; returns how many entries it holds.
    fn read_dir(&self, dir: &Self::Dir) -> io::Result<usize>;
    /// Free bytes, reserves included (statfs's `f_bfree`): the most any writer could ever
    /// be granted, so acknowledging more is an over-commit.
    fn free_bytes(&self) -> io::Result<u64>;
    /// The engine's lock counters, where the target has them (e4 only).
    fn lock_report(&self) -> Option<LockReport>;
    /// `dir` as a path other programs (tar, git) can work in: `None` for e4 in process,
    /// whose directories exist only inside this program.
    fn host_path(&self, dir: &Self::Dir) -> Option<PathBuf>;
}

/// Whether `e` is "no space left on device", from either kind of target.
pub fn is_no_space(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

fn io_error(e: e4_fs::Error) -> io::Error {
    match e {
        e4_fs::Error::NoSpace(_) => io::Error::new(io::ErrorKind::StorageFull, e.to_string()),
        e4_fs::Error::NotFound(_) => io::Error::new(io::ErrorKind::NotFound, e.to_string()),
        other => io::Error::other(other.to_string()),
    }
}

/// Owner and mode of everything the workloads make on e4.
const CREATOR: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};
const DIR_CREATOR: Creator = Creator {
    permissions: 0o755,
    uid: 0,
    gid: 0,
    umask: 0,
};
const ROOT_INO: u32 = 2;

/// e4 in process: handles are inode numbers.
pub struct E4Ops(pub Filesystem);

impl FsOps for E4Ops {
    type Dir = u32;
    type File = u32;

    fn root(&self) -> u32 {
        ROOT_INO
    }
    fn mkdir(&self, parent: &u32, name: &str) -> io::Result<u32> {
        self.0
            .mkdir(*parent, name.as_bytes(), DIR_CREATOR)
            .map_err(io_error)
    }
    fn create(&self, dir: &u32, name: &str) -> io::Result<()> {
        self.0
            .create(*dir, name.as_bytes(), CREATOR)
            .map(drop)
            .map_err(io_error)
    }
    fn open_new(&self, dir: &u32, name: &str) -> io::Result<u32> {
        self.0
            .create(*dir, name.as_bytes(), CREATOR)
            .map_err(io_error)
    }
    fn unlink(&self, dir: &u32, name: &str) -> io::Result<()> {
        self.0.unlink(*dir, name.as_bytes()).map_err(io_error)
    }
    fn rename(&self, from: &u32, name: &str, to: &u32, new: &str) -> io::Result<()> {
        self.0
            .rename(
                *from,
                name.as_bytes(),
                *to,
                new.as_bytes(),
                e4_fs::RenameMode::Replace,
            )
            .map_err(io_error)
    }
    fn write_at(&self, file: &u32, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0
            .write_at(*file, offset, data)
            .map(drop)
            .map_err(io_error)
    }
    fn read_at(&self, file: &u32, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read_at(*file, offset, buf).map_err(io_error)
    }
    /// Nothing to drop: the engine keeps no file data in memory (its cache holds metadata
    /// blocks), so every read goes to the image.
    fn drop_cached(&self, _file: &u32) -> io::Result<()> {
        Ok(())
    }
    fn fallocate(&self, file: &u32, offset: u64, len: u64) -> io::Result<()> {
        self.0
            .fallocate(*file, FallocateMode::Allocate, offset, len)
            .map_err(io_error)
    }
    fn truncate(&self, file: &u32, size: u64) -> io::Result<()> {
        self.0.truncate(*file, size).map_err(io_error)
    }
    fn fsync(&self, file: &u32) -> io::Result<()> {
        self.0.fsync(*file).map_err(io_error)
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync().map_err(io_error)
    }
    fn file_size(&self, file: &u32) -> io::Result<u64> {
        self.0.metadata(*file).map(|m| m.size).map_err(io_error)
    }
    fn stat_path(&self, path: &str) -> io::Result<()> {
        let ino = self
            .0
            .resolve(&format!("/{path}"), true)
            .map_err(io_error)?;
        self.0.metadata(ino).map(drop).map_err(io_error)
    }
    fn read_dir(&self, dir: &u32) -> io::Result<usize> {
        self.0.read_dir(*dir).map(|e| e.len()).map_err(io_error)
    }
    fn free_bytes(&self) -> io::Result<u64> {
        let s = self.0.statfs();
        Ok(s.free_blocks * u64::from(s.block_size))
    }
    fn lock_report(&self) -> Option<LockReport> {
        Some(self.0.lock_stats())
    }
    fn host_path(&self, _dir: &u32) -> Option<PathBuf> {
        None
    }
}

/// A mounted directory: handles are paths and open descriptors.
pub struct PosixOps {
    pub root: PathBuf,
}

impl FsOps for PosixOps {
    type Dir = PathBuf;
    type File = File;

    fn root(&self) -> PathBuf {
        self.root.clone()
    }
    fn mkdir(&self, parent: &PathBuf, name: &str) -> io::Result<PathBuf> {
        let dir = parent.join(name);
        std::fs::create_dir(&dir)?;
        Ok(dir)
    }
    fn create(&self, dir: &PathBuf, name: &str) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(name))
            .map(drop)
    }
    fn open_new(&self, dir: &PathBuf, name: &str) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join(name))
    }
    fn unlink(&self, dir: &PathBuf, name: &str) -> io::Result<()> {
        std::fs::remove_file(dir.join(name))
    }
    fn rename(&self, from: &PathBuf, name: &str, to: &PathBuf, new: &str) -> io::Result<()> {
        std::fs::rename(from.join(name), to.join(new))
    }
    fn write_at(&self, file: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        file.write_all_at(data, offset)
    }
    fn read_at(&self, file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        file.read_at(buf, offset)
    }
    fn drop_cached(&self, file: &File) -> io::Result<()> {
        file.sync_all()?;
        rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed).map_err(io::Error::from)
    }
    fn fallocate(&self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), offset, len)
            .map_err(io::Error::from)
    }
    fn truncate(&self, file: &File, size: u64) -> io::Result<()> {
        file.set_len(size)
    }
    fn fsync(&self, file: &File) -> io::Result<()> {
        file.sync_all()
    }
    fn sync_all(&self) -> io::Result<()> {
        let root = File::open(&self.root)?;
        rustix::fs::syncfs(&root).map_err(io::Error::from)
    }
    fn file_size(&self, file: &File) -> io::Result<u64> {
        file.metadata().map(|m| m.len())
    }
    fn stat_path(&self, path: &str) -> io::Result<()> {
        std::fs::metadata(self.root.join(path)).map(drop)
    }
    fn read_dir(&self, dir: &PathBuf) -> io::Result<usize> {
        let mut n = 0;
        for entry in std::fs::read_dir(dir)? {
            entry?;
            n += 1;
        }
        Ok(n)
    }
    fn free_bytes(&self) -> io::Result<u64> {
        let s = rustix::fs::statvfs(&self.root).map_err(io::Error::from)?;
        Ok(s.f_bfree * s.f_frsize)
    }
    fn lock_report(&self) -> Option<LockReport> {
        None
    }
    fn host_path(&self, dir: &PathBuf) -> Option<PathBuf> {
        Some(dir.clone())
    }
}
