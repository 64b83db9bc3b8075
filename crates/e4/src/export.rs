//! `e4 export`: extract the whole tree with contents, modes, owners, times, symlinks, hard
//! links, device nodes and xattrs, in parallel.
//!
//! The walk streams: each directory is read, its entries are exported in parallel (rayon), and
//! its own metadata is applied once its children are done, so creating children never
//! disturbs a parent's times. Every host call is relative to an open directory descriptor
//! (`openat`, `mkdirat`, `symlinkat`, ...), so paths of any length export. The first
//! [`PARALLEL_LEVELS`] levels recurse; deeper ones are walked with an explicit stack, so
//! no image's depth can overflow a thread's stack.
//!
//! Memory does not grow with the tree: what is held is the entry list of each directory being
//! exported (at most one per level per thread), one copy buffer per thread (up to
//! [`CHUNK`] bytes), one bit per inode of the image for cycle detection, and one record per
//! inode with several links and one per later name of it (those are linked at the end to
//! the file the inode's first name made, found by inode number: in a damaged directory
//! holding one name twice, the entry made second fails, and a later name of its inode is
//! not linked to the other's file; then their directories' times are set again).
//!
//! A host-side failure (a name or xattr the host refuses, no space) is reported as one line
//! naming the path, and the export goes on; the command fails at the end if anything did.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fmt::Display;
use std::fs::{self, File};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use e4_fs::{DirEntry, FileType, Filesystem, Inode, Mapping, Metadata, Timestamp};
use e4_fsck::AtomicBitmap;
use rayon::prelude::*;
use rustix::fs::{self as host, AtFlags, Mode, OFlags, Timespec, Timestamps, XattrFlags};

use crate::output::CliError;

/// Bytes read per call while copying a file: large enough that a contiguous file is one
/// device read per MiB, small enough that a buffer per thread is cheap.
const CHUNK: usize = 1 << 20;

/// Directory levels below the root exported by parallel recursion (wide trees keep every
/// thread busy); deeper levels are walked by `Export::deep_directory`, whose stack and
/// open descriptors do not grow with depth. 64 levels of recursion fit a worker's stack
/// many times over.
const PARALLEL_LEVELS: usize = 64;

thread_local! {
    /// The copy buffer of this worker thread. It grows to the largest chunk a file needed and
    /// is reused, so a small file costs no allocation and no zeroing.
    static COPY_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The mode bits that make a program run as its owner or group (`S_ISUID`, `S_ISGID`).
const SET_USER_ID: u32 = 0o4000;
const SET_GROUP_ID: u32 = 0o2000;

/// What an image is not allowed to make on the host (`--no-devices`, `--no-setuid`).
#[derive(Clone, Copy, Default)]
pub struct Untrusted {
    /// Character and block device nodes are not made, only counted.
    pub no_devices: bool,
    /// Setuid and setgid bits are cleared on everything but directories (where setgid
    /// only means that new entries take the directory's group).
    pub no_setuid: bool,
}

pub fn run(
    fs: &Filesystem,
    dest: &Path,
    untrusted: Untrusted,
    threads: Option<usize>,
) -> Result<(), CliError> {
    if dest.exists() {
        let mut entries = fs::read_dir(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
        if entries.next().is_some() {
            return Err(format!("{}: destination is not empty", dest.display()).into());
        }
    } else {
        fs::create_dir_all(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    let root_fd = host::open(dest, OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("{}: {e}", dest.display()))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .map_err(|e| format!("cannot start worker threads: {e}"))?;
    let export = Export {
        fs,
        set_owner: rustix::process::geteuid().is_root(),
        untrusted,
        devices_not_made: AtomicU64::new(0),
        visited: AtomicBitmap::new(
            u64::from(fs.superblock().inodes_count) + 1,
            "the directories exported",
        )
        .map_err(|e| e.to_string())?,
        first_names: Mutex::new(HashMap::new()),
        late_links: Mutex::new(Vec::new()),
        failures: AtomicU64::new(0),
    };
    let root_ino = e4_format::inode::ROOT_INO;
    pool.install(|| match fs.metadata(root_ino) {
        Ok(root) => {
            export.visited.set(u64::from(root_ino));
            export.directory_contents(&root_fd, Path::new(""), &root, 0);
            export.finish_late_links(&root_fd);
            export.apply_metadata(Target::Fd(&root_fd), Path::new("/"), &root);
        }
        Err(e) => export.fail("/", e),
    });
    match export.devices_not_made.load(Ordering::Relaxed) {
        0 => {}
        1 => eprintln!("e4: 1 device node not made (--no-devices)"),
        n => eprintln!("e4: {n} device nodes not made (--no-devices)"),
    }
    match export.failures.load(Ordering::Relaxed) {
        0 => Ok(()),
        n => Err(format!(
            "{n} path{} could not be exported (each is named above)",
            if n == 1 { "" } else { "s" }
        )
        .into()),
    }
}

/// State shared by the workers of one export.
struct Export<'a> {
    fs: &'a Filesystem,
    /// Owners can only be set by root; others keep their own.
    set_owner: bool,
    untrusted: Untrusted,
    /// Device nodes skipped under `--no-devices`.
    devices_not_made: AtomicU64,
    /// Directories already entered, to refuse a directory cycle in a damaged image.
    visited: AtomicBitmap,
    /// For each inode with several links: the path its file was made at, or `None` while
    /// the first of its names met is being made. Recorded by inode number and only once
    /// made: when two entries of one directory have the same name (damage), the one made
    /// second fails, and a later name of its inode must not be linked to the other's file.
    first_names: Mutex<HashMap<u32, Option<PathBuf>>>,
    /// Hard links to make once every file exists.
    late_links: Mutex<Vec<LateLink>>,
    failures: AtomicU64,
}

/// A second name of an inode, linked after the walk to the file its first name made (or
/// made here, if no name of the inode could be made during the walk).
struct LateLink {
    ino: u32,
    meta: Metadata,
    link: PathBuf,
    /// The directory the link goes in (its times are set again afterwards).
    parent: PathBuf,
    parent_times: (Timestamp, Timestamp),
}

/// What a metadata call applies to: an open descriptor, or a name in a directory.
#[derive(Clone, Copy)]
enum Target<'f> {
    Fd(&'f OwnedFd),
    At(&'f OwnedFd, &'f OsStr),
}

impl Export<'_> {
    /// Reports one failure (one line on stderr) and counts it.
    fn fail(&self, path: impl AsRef<Path>, what: impl Display) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        eprintln!("e4: {}: {what}", shown(path.as_ref()));
    }

    /// Exports every entry of the directory `dir_fd` (at `rel` in the image, `depth` levels
    /// below the root): its files, then its subdirectories' trees, each in parallel.
    fn directory_contents(&self, dir_fd: &OwnedFd, rel: &Path, meta: &Metadata, depth: usize) {
        let subdirectories = self.files_of(dir_fd, rel, meta);
        subdirectories.par_iter().for_each(|(name, sub)| {
            let path = rel.join(name);
            let result = if depth < PARALLEL_LEVELS {
                self.directory(dir_fd, name, &path, sub, depth + 1)
            } else {
                self.deep_directory(dir_fd, name, &path, sub)
            };
            if let Err(e) = result {
                self.fail(&path, e);
            }
        });
    }

    /// Exports the entries of the directory `dir_fd` (at `rel`) that are not directories,
    /// in parallel, and returns its subdirectories (name and metadata) for the caller's walk.
    fn files_of(&self, dir_fd: &OwnedFd, rel: &Path, meta: &Metadata) -> Vec<(OsString, Metadata)> {
        let entries = match self.fs.read_dir(meta.ino) {
            Ok(entries) => entries,
            Err(e) => {
                self.fail(rel, e);
                return Vec::new();
            }
        };
        entries
            .par_iter()
            .filter_map(|entry| self.entry(dir_fd, rel, meta, entry))
            .collect()
    }

    /// Exports one entry if it is not a directory; returns a directory's name and metadata.
    fn entry(
        &self,
        dir_fd: &OwnedFd,
        rel: &Path,
        parent: &Metadata,
        entry: &DirEntry,
    ) -> Option<(OsString, Metadata)> {
        let name = OsStr::from_bytes(&entry.name);
        let path = rel.join(name);
        if let Some(problem) = bad_name(&entry.name) {
            self.fail(rel, format!("entry {:?} skipped: {problem}", name));
            return None;
        }
        let meta = match self.fs.metadata(entry.ino) {
            Ok(meta) => meta,
            Err(e) => {
                self.fail(&path, e);
                return None;
            }
        };
        let result = match meta.file_type {
            FileType::Directory => return Some((name.to_owned(), meta)),
            _ if meta.nlink > 1 => self.linked(dir_fd, name, &path, rel, parent, &meta),
            _ => self.non_directory(dir_fd, name, &path, &meta),
        };
        if let Err(e) = result {
            self.fail(&path, e);
        }
        None
    }

    /// Exports the tree of directory `name` in `parent_fd` by parallel recursion.
    fn directory(
        &self,
        parent_fd: &OwnedFd,
        name: &OsStr,
        path: &Path,
        meta: &Metadata,
        depth: usize,
    ) -> Result<(), String> {
        let dir_fd = self.make_directory(parent_fd, name, meta)?;
        self.directory_contents(&dir_fd, path, meta, depth);
        self.apply_metadata(Target::Fd(&dir_fd), path, meta);
        Ok(())
    }

    /// Exports the tree of directory `name` in `parent_fd`, below [`PARALLEL_LEVELS`]. Depth
    /// is the image's to choose (tens of thousands of levels are legal), so this walk keeps
    /// an explicit stack whose levels hold only what is left to export there, one open
    /// descriptor (a parent is reopened through `..`, checked to be the directory made
    /// there) and one path; neither the thread's stack nor its descriptors grow with depth.
    fn deep_directory(
        &self,
        parent_fd: &OwnedFd,
        name: &OsStr,
        path: &Path,
        meta: &Metadata,
    ) -> Result<(), String> {
        /// A directory being exported, with the subdirectories it still holds.
        struct Level {
            meta: Metadata,
            /// The host directory made for it (device, inode), to check `..` against.
            host: (u64, u64),
            left: Vec<(OsString, Metadata)>,
        }
        let host_id = |fd: &OwnedFd| {
            host::fstat(fd)
                .map(|st| (st.st_dev, st.st_ino))
                .map_err(|e| e.to_string())
        };
        let mut rel = path.to_path_buf();
        let mut dir_fd = self.make_directory(parent_fd, name, meta)?;
        let mut stack = vec![Level {
            meta: meta.clone(),
            host: host_id(&dir_fd)?,
            left: self.files_of(&dir_fd, &rel, meta),
        }];
        loop {
            while stack.last().is_some_and(|level| level.left.is_empty()) {
                // OK to unwrap: the loop condition saw a level.
                let done = stack.pop().unwrap();
                self.apply_metadata(Target::Fd(&dir_fd), &rel, &done.meta);
                let Some(up) = stack.last() else {
                    return Ok(());
                };
                let parent = host::openat(
                    &dir_fd,
                    "..",
                    OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| e.to_string())?;
                rel.pop();
                if host_id(&parent)? != up.host {
                    return Err(format!(
                        "{}: the host directory was moved during the export",
                        shown(&rel)
                    ));
                }
                dir_fd = parent;
            }
            // OK to unwrap: the loop above returns when the stack empties and stops at a
            // level with a subdirectory left.
            let (name, meta) = stack.last_mut().unwrap().left.pop().unwrap();
            let path = rel.join(&name);
            match self.make_directory(&dir_fd, &name, &meta) {
                Ok(child) => {
                    let left = self.files_of(&child, &path, &meta);
                    stack.push(Level {
                        host: host_id(&child)?,
                        meta,
                        left,
                    });
                    (dir_fd, rel) = (child, path);
                }
                Err(e) => self.fail(&path, e),
            }
        }
    }

    /// Makes the host directory for image directory `meta` as `name` in `parent_fd`, and
    /// opens it; refuses a directory already entered (a cycle in a damaged image).
    fn make_directory(
        &self,
        parent_fd: &OwnedFd,
        name: &OsStr,
        meta: &Metadata,
    ) -> Result<OwnedFd, String> {
        // An inode past the count is never in the set: `metadata` has refused it already.
        if self.visited.set(u64::from(meta.ino)) {
            return Err(format!(
                "directory inode {} appears twice (a directory cycle); skipped",
                meta.ino
            ));
        }
        // Owner-only until its children are in; its own mode is applied afterwards.
        host::mkdirat(parent_fd, name, Mode::RWXU).map_err(|e| e.to_string())?;
        host::openat(
            parent_fd,
            name,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| e.to_string())
    }

    /// An inode with several names: the first name met creates it; a later name links to it
    /// at once if that is safe, or at the end.
    fn linked(
        &self,
        dir_fd: &OwnedFd,
        name: &OsStr,
        path: &Path,
        rel: &Path,
        parent: &Metadata,
        meta: &Metadata,
    ) -> Result<(), String> {
        {
            let mut first_names = self.first_names.lock().unwrap_or_else(|p| p.into_inner());
            if first_names.contains_key(&meta.ino) {
                drop(first_names);
                let link = LateLink {
                    ino: meta.ino,
                    meta: meta.clone(),
                    link: path.to_path_buf(),
                    parent: rel.to_path_buf(),
                    parent_times: (parent.atime, parent.mtime),
                };
                self.late_links
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(link);
                return Ok(());
            }
            first_names.insert(meta.ino, None);
        }
        let made = self.non_directory(dir_fd, name, path, meta);
        let mut first_names = self.first_names.lock().unwrap_or_else(|p| p.into_inner());
        if made.is_ok() {
            first_names.insert(meta.ino, Some(path.to_path_buf()));
        } else {
            // A later name of the inode makes its file instead.
            first_names.remove(&meta.ino);
        }
        made
    }

    /// Links every second name, then sets the times of the directories that got one again.
    fn finish_late_links(&self, root_fd: &OwnedFd) {
        let links = std::mem::take(&mut *self.late_links.lock().unwrap_or_else(|p| p.into_inner()));
        let mut first_names =
            std::mem::take(&mut *self.first_names.lock().unwrap_or_else(|p| p.into_inner()));
        for link in &links {
            match first_names.get(&link.ino).cloned().flatten() {
                Some(first) => {
                    if let Err(e) =
                        host::linkat(root_fd, &first, root_fd, &link.link, AtFlags::empty())
                    {
                        self.fail(&link.link, format!("cannot link to {}: {e}", shown(&first)));
                    }
                }
                None => match self.make_late(root_fd, link) {
                    Ok(()) => {
                        first_names.insert(link.ino, Some(link.link.clone()));
                    }
                    Err(e) => self.fail(&link.link, e),
                },
            }
        }
        for link in &links {
            let (atime, mtime) = link.parent_times;
            let target = if link.parent.as_os_str().is_empty() {
                Target::Fd(root_fd)
            } else {
                Target::At(root_fd, link.parent.as_os_str())
            };
            if let Err(e) = set_times(target, atime, mtime) {
                self.fail(&link.parent, e);
            }
        }
    }

    /// Makes the file of `link`'s inode at its name: none of its names met during the
    /// walk could be made.
    fn make_late(&self, root_fd: &OwnedFd, link: &LateLink) -> Result<(), String> {
        let name = link.link.file_name().ok_or("no file name")?;
        let parent_fd = if link.parent.as_os_str().is_empty() {
            root_fd.try_clone().map_err(|e| e.to_string())?
        } else {
            host::openat(
                root_fd,
                &link.parent,
                OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| e.to_string())?
        };
        self.non_directory(&parent_fd, name, &link.link, &link.meta)
    }

    fn non_directory(
        &self,
        dir_fd: &OwnedFd,
        name: &OsStr,
        path: &Path,
        meta: &Metadata,
    ) -> Result<(), String> {
        let inode = self.fs.read_inode(meta.ino).map_err(|e| e.to_string())?;
        match meta.file_type {
            FileType::Regular => {
                let fd = host::openat(
                    dir_fd,
                    name,
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::RUSR | Mode::WUSR,
                )
                .map_err(|e| e.to_string())?;
                let file = File::from(fd);
                self.copy_contents(&inode, &file)?;
                let fd = OwnedFd::from(file);
                self.apply_metadata(Target::Fd(&fd), path, meta);
            }
            FileType::Symlink => {
                let target = self.fs.read_link(inode.ino).map_err(|e| e.to_string())?;
                host::symlinkat(OsStr::from_bytes(&target), dir_fd, name)
                    .map_err(|e| e.to_string())?;
                self.apply_metadata(Target::At(dir_fd, name), path, meta);
            }
            FileType::CharDevice | FileType::BlockDevice if self.untrusted.no_devices => {
                self.devices_not_made.fetch_add(1, Ordering::Relaxed);
            }
            FileType::CharDevice | FileType::BlockDevice | FileType::Fifo | FileType::Socket => {
                let kind = match meta.file_type {
                    FileType::CharDevice => host::FileType::CharacterDevice,
                    FileType::BlockDevice => host::FileType::BlockDevice,
                    FileType::Fifo => host::FileType::Fifo,
                    _ => host::FileType::Socket,
                };
                let (major, minor) = meta.rdev;
                host::mknodat(
                    dir_fd,
                    name,
                    kind,
                    Mode::RUSR | Mode::WUSR,
                    host::makedev(major, minor),
                )
                .map_err(|e| e.to_string())?;
                self.apply_metadata(Target::At(dir_fd, name), path, meta);
            }
            FileType::Directory => unreachable!("directories are exported by `directory`"),
        }
        Ok(())
    }

    /// Copies a file's data, leaving its holes (and unwritten extents) as holes in the copy,
    /// so the work is proportional to the data, not to the file's size.
    fn copy_contents(&self, inode: &Inode, file: &File) -> Result<(), String> {
        let fs = self.fs;
        let size = inode.size();
        if inode.has_flag(e4_format::inode::flags::INLINE_DATA) {
            // Inline data lives inside the inode (i_block and the system.data xattr), which
            // is smaller than a block. An i_size claiming more (damage e2fsck lets pass)
            // reads as zeros past that, as the kernel zeroes every page after the first, so
            // the rest stays a hole: memory is bounded by the inode, not by its i_size.
            let mut held = vec![0u8; size.min(u64::from(fs.block_size())) as usize];
            let n = fs
                .read_at(inode.ino, 0, &mut held)
                .map_err(|e| e.to_string())?;
            file.write_all_at(&held[..n], 0)
                .map_err(|e| e.to_string())?;
            return file.set_len(size).map_err(|e| e.to_string());
        }
        let bs = u64::from(fs.block_size());
        let blocks = size.div_ceil(bs);
        COPY_BUFFER.with_borrow_mut(|buf| {
            let mut logical = 0;
            while logical < blocks {
                let mapping = fs
                    .map_block(inode, logical, blocks - logical)
                    .map_err(|e| e.to_string())?;
                match mapping {
                    Mapping::Data {
                        len,
                        unwritten: false,
                        ..
                    } => {
                        let end = ((logical + len) * bs).min(size);
                        let mut offset = logical * bs;
                        while offset < end {
                            let want = ((end - offset) as usize).min(CHUNK);
                            if buf.len() < want {
                                buf.resize(want, 0);
                            }
                            let n = fs
                                .read_at(inode.ino, offset, &mut buf[..want])
                                .map_err(|e| e.to_string())?;
                            file.write_all_at(&buf[..n], offset)
                                .map_err(|e| e.to_string())?;
                            offset += n as u64;
                        }
                        logical += len;
                    }
                    Mapping::Data { len, .. } | Mapping::Hole { len } => logical += len,
                }
            }
            Ok::<_, String>(())
        })?;
        // A trailing hole: the size is what the inode says, not where the data ended.
        file.set_len(size).map_err(|e| e.to_string())
    }

    /// Owner, then permissions (chown clears setuid), then xattrs, then times. Each failure
    /// is reported on its own; the others are still applied.
    fn apply_metadata(&self, target: Target<'_>, path: &Path, m: &Metadata) {
        if self.set_owner {
            let (uid, gid) = (
                Some(rustix::fs::Uid::from_raw(m.uid)),
                Some(rustix::fs::Gid::from_raw(m.gid)),
            );
            let owned = match target {
                Target::Fd(fd) => host::fchown(fd, uid, gid),
                Target::At(dir, name) => {
                    host::chownat(dir, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW)
                }
            };
            if let Err(e) = owned {
                self.fail(path, format!("cannot set owner {}:{}: {e}", m.uid, m.gid));
            }
        }
        if m.file_type != FileType::Symlink {
            let mut permissions = u32::from(m.permissions);
            if self.untrusted.no_setuid && m.file_type != FileType::Directory {
                permissions &= !(SET_USER_ID | SET_GROUP_ID);
            }
            let mode = Mode::from_raw_mode(permissions);
            let changed = match target {
                Target::Fd(fd) => host::fchmod(fd, mode),
                Target::At(dir, name) => host::chmodat(dir, name, mode, AtFlags::empty()),
            };
            if let Err(e) = changed {
                self.fail(path, format!("cannot set mode {permissions:o}: {e}"));
            }
        }
        if let Err(e) = self.copy_xattrs(target, path, m.ino) {
            self.fail(path, e);
        }
        if let Err(e) = set_times(target, m.atime, m.mtime) {
            self.fail(path, e);
        }
    }

    fn copy_xattrs(&self, target: Target<'_>, path: &Path, ino: u32) -> Result<(), String> {
        let fs = self.fs;
        for name in fs.list_xattrs(ino).map_err(|e| e.to_string())? {
            let value = fs
                .get_xattr(ino, &name)
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            let set = match target {
                Target::Fd(fd) => host::fsetxattr(fd, name.as_slice(), &value, XattrFlags::empty()),
                // No *at form of setxattr exists: name the entry through the directory's
                // descriptor in /proc, which keeps the path short whatever the depth.
                Target::At(dir, entry) => {
                    let mut through = PathBuf::from(format!(
                        "/proc/self/fd/{}",
                        std::os::fd::AsRawFd::as_raw_fd(&dir.as_fd())
                    ));
                    through.push(entry);
                    host::lsetxattr(&through, name.as_slice(), &value, XattrFlags::empty())
                }
            };
            if let Err(e) = set {
                self.fail(
                    path,
                    format!(
                        "cannot set xattr {} ({} bytes): {e}",
                        String::from_utf8_lossy(&name),
                        value.len()
                    ),
                );
            }
        }
        Ok(())
    }
}

fn set_times(target: Target<'_>, atime: Timestamp, mtime: Timestamp) -> Result<(), String> {
    let spec = |t: Timestamp| Timespec {
        tv_sec: t.seconds,
        tv_nsec: t.nanoseconds.into(),
    };
    let times = Timestamps {
        last_access: spec(atime),
        last_modification: spec(mtime),
    };
    match target {
        Target::Fd(fd) => host::futimens(fd, &times),
        Target::At(dir, name) => host::utimensat(dir, name, &times, AtFlags::SYMLINK_NOFOLLOW),
    }
    .map_err(|e| format!("cannot set times: {e}"))
}

/// Why a directory entry's name cannot be a host file name, if it cannot.
fn bad_name(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty name")
    } else if name == b"." || name == b".." {
        // The directory's own first two entries are never listed; another one with such a
        // name is damage (e2fsck: "duplicate '.' entry"), and no host directory can hold it.
        Some("a second entry with that name (damage; e4 fsck reports it)")
    } else if name.contains(&b'/') {
        Some("name contains '/'")
    } else if name.contains(&0) {
        Some("name contains a NUL byte")
    } else {
        None
    }
}

/// A path inside the image as a user would write it.
fn shown(rel: &Path) -> String {
    if rel.is_absolute() {
        rel.display().to_string()
    } else {
        format!("/{}", rel.display())
    }
}
