//! A host file's metadata as `e4 import`, `e4 mkfs -d` and `e4 put` read it: one `statx`
//! of a name relative to its directory's descriptor (`AT_SYMLINK_NOFOLLOW`), where
//! `std::fs::Metadata` would take an `O_PATH` open, an `fstat` and a close per entry
//! (`std` makes a `Metadata` only from its own calls). On a tree of tens of thousands of
//! files those three system calls were about half of what reading the metadata cost.
//!
//! Only the fields an import copies are kept, so a read-ahead listing holds about half of
//! what a `Metadata` (a whole `struct stat`) would.

use std::ffi::OsStr;
use std::fs::File;
use std::path::Path;

use rustix::fs::{statx, AtFlags, FileType, Statx, StatxFlags, StatxTimestamp, CWD};
use rustix::io::Errno;

/// The fields of a host file's `statx` that an import uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMetadata {
    /// `stx_mode`: the file type and the permission bits.
    mode: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    /// `stx_dev_major`/`stx_dev_minor` as one number (`makedev`), with `stx_ino`: which
    /// host file this is.
    dev: u64,
    ino: u64,
    size: u64,
    /// `stx_blocks`: 512-byte units allocated (fewer than the size needs: a sparse file).
    blocks: u64,
    atime: (i64, u32),
    mtime: (i64, u32),
    /// `stx_rdev_major`, `stx_rdev_minor`: a device node's device.
    rdev: (u32, u32),
}

/// The fields [`HostMetadata`] needs the kernel to have filled.
const NEEDED: StatxFlags = StatxFlags::BASIC_STATS;

impl HostMetadata {
    /// Entry `name` of open host directory `dir` itself (a symlink's own metadata, not its
    /// target's), without opening it (so a device or FIFO notices nothing).
    pub fn at(dir: &File, name: &OsStr) -> Result<Self, Errno> {
        Self::from_statx(statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, NEEDED)?)
    }

    /// The open file `file`.
    pub fn of(file: &File) -> Result<Self, Errno> {
        Self::from_statx(statx(file, "", AtFlags::EMPTY_PATH, NEEDED)?)
    }

    /// The file at `path`, following symlinks (as `std::fs::metadata`).
    pub fn of_path(path: &Path) -> Result<Self, Errno> {
        Self::from_statx(statx(CWD, path, AtFlags::empty(), NEEDED)?)
    }

    fn from_statx(s: Statx) -> Result<Self, Errno> {
        // A file system that does not report the type and mode (statx(2) lets it leave
        // out any field) gives nothing an import could copy faithfully.
        let reported = StatxFlags::from_bits_retain(s.stx_mask);
        if !reported.contains(StatxFlags::TYPE | StatxFlags::MODE) {
            return Err(Errno::NODATA);
        }
        let time = |t: StatxTimestamp| (t.tv_sec, t.tv_nsec);
        Ok(HostMetadata {
            mode: s.stx_mode,
            uid: s.stx_uid,
            gid: s.stx_gid,
            nlink: s.stx_nlink,
            dev: rustix::fs::makedev(s.stx_dev_major, s.stx_dev_minor),
            ino: s.stx_ino,
            size: s.stx_size,
            blocks: s.stx_blocks,
            atime: time(s.stx_atime),
            mtime: time(s.stx_mtime),
            rdev: (s.stx_rdev_major, s.stx_rdev_minor),
        })
    }

    pub fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode.into())
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    pub fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    /// The permission bits with setuid, setgid and sticky (the mode's low 12 bits).
    pub fn permissions(&self) -> u16 {
        self.mode & 0o7777
    }

    pub fn uid(&self) -> u32 {
        self.uid
    }

    pub fn gid(&self) -> u32 {
        self.gid
    }

    pub fn nlink(&self) -> u32 {
        self.nlink
    }

    /// The host file's identity: (device, inode).
    pub fn key(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// 512-byte units allocated.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Last access, as (seconds, nanoseconds).
    pub fn atime(&self) -> (i64, u32) {
        self.atime
    }

    /// Last modification, as (seconds, nanoseconds).
    pub fn mtime(&self) -> (i64, u32) {
        self.mtime
    }

    /// A device node's (major, minor).
    pub fn rdev(&self) -> (u32, u32) {
        self.rdev
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// Every field agrees with what `std` reads through `lstat`, for a file, a symlink (its
    /// own metadata) and a directory, and a missing name is an error.
    #[test]
    fn the_fields_are_the_ones_lstat_gives() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("file");
        std::fs::write(&file, vec![7u8; 5000]).unwrap();
        // Times apart, to the nanosecond, so a field read for another shows.
        let at = |s, ns| std::time::UNIX_EPOCH + std::time::Duration::new(s, ns);
        let times = std::fs::FileTimes::new()
            .set_accessed(at(1_600_000_000, 111))
            .set_modified(at(1_500_000_000, 222));
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_times(times)
            .unwrap();
        std::os::unix::fs::symlink("file", root.path().join("link")).unwrap();
        std::fs::create_dir(root.path().join("dir")).unwrap();
        let dir = File::open(root.path()).unwrap();
        for name in ["file", "link", "dir"] {
            let ours = HostMetadata::at(&dir, OsStr::new(name)).unwrap();
            let std = std::fs::symlink_metadata(root.path().join(name)).unwrap();
            assert_eq!(u32::from(ours.mode), std.mode(), "{name}");
            assert_eq!(ours.key(), (std.dev(), std.ino()), "{name}");
            assert_eq!((ours.uid(), ours.gid()), (std.uid(), std.gid()), "{name}");
            assert_eq!(u64::from(ours.nlink()), std.nlink(), "{name}");
            assert_eq!(
                (ours.size(), ours.blocks()),
                (std.size(), std.blocks()),
                "{name}"
            );
            let atime = (std.atime(), std.atime_nsec() as u32);
            let mtime = (std.mtime(), std.mtime_nsec() as u32);
            assert_eq!((ours.atime(), ours.mtime()), (atime, mtime), "{name}");
            assert_eq!(ours.is_dir(), std.is_dir(), "{name}");
            assert_eq!(ours.is_file(), std.is_file(), "{name}");
        }
        let ours = HostMetadata::at(&dir, OsStr::new("file")).unwrap();
        assert_eq!(ours.atime(), (1_600_000_000, 111));
        assert_eq!(ours.mtime(), (1_500_000_000, 222));
        let link = HostMetadata::at(&dir, OsStr::new("link")).unwrap();
        assert_eq!(link.file_type(), FileType::Symlink);
        let opened = HostMetadata::of(&File::open(&file).unwrap()).unwrap();
        assert_eq!(opened, HostMetadata::at(&dir, OsStr::new("file")).unwrap());
        assert_eq!(
            HostMetadata::of_path(&root.path().join("link")).unwrap(),
            opened
        );
        assert_eq!(
            HostMetadata::at(&dir, OsStr::new("missing")),
            Err(Errno::NOENT)
        );
    }

    /// A device node's major and minor come through apart, as `mknod` needs them.
    #[test]
    fn a_device_node_gives_its_major_and_minor() {
        let null = HostMetadata::of_path(Path::new("/dev/null")).unwrap();
        assert_eq!(null.file_type(), FileType::CharacterDevice);
        assert_eq!(null.rdev(), (1, 3));
    }
}
