//! `e4 import`: copy a host directory tree into the image, in parallel, keeping contents
//! (holes as holes), modes, owners, atime and mtime to the nanosecond, symlinks, hard links,
//! fifos, sockets, device nodes and xattrs.
//!
//! How the work is split: a task per subdirectory, and the other entries of a directory in
//! tasks of [`ENTRIES_PER_TASK`], all on one rayon pool. Threads thus mostly work in
//! different directories, so they rarely wait on the same directory's lock; a file's data is
//! written without holding its directory's lock at all, so a directory of large files still
//! copies on every core. The first [`PARALLEL_LEVELS`] levels recurse; deeper ones are
//! walked with an explicit stack, so no host tree's depth can overflow a thread's stack.
//!
//! An ordered import (`e4 mkfs -d`, and any reproducible one, `SOURCE_DATE_EPOCH`) walks
//! one entry at a time in name order, so every inode number, directory entry and block
//! placement is decided in an order the host cannot change; a regular file's blocks are
//! reserved in that walk ([`Filesystem::reserve_data`]) and its data copied into them by
//! `-j` − 1 helper threads ([`host_copy::fill_reserved`]), which change no metadata, so the
//! image is the same to the byte whatever the thread count. The helpers also read the host
//! tree ahead of the walk ([`crate::read_ahead`]): listings, metadata, symlink targets and
//! xattrs, which do not depend on the order the walk places things in. On two CPUs this
//! beats two parallel walkers, which both write the image file and spin on its lock in the
//! host's kernel ([`ImportPolicy::ordered`]).
//!
//! Order: a directory's own mode, owner and times are set once all its children are in, because creating them changes its mtime. A host inode with
//! several names is created at the first name met and linked at the others after the walk
//! (two threads may meet its names at once), and then the times of the directories that got
//! such a link are set again.
//!
//! Failures: a path that cannot be imported (a name that exists in the image as another
//! type, a host file that cannot be read, an xattr the engine refuses) is one line, and the
//! import goes on; it exits 1 at the end with the count. A failure of the whole filesystem
//! (no space, a feature the engine does not write) stops the import with one line: every
//! other path would fail the same way.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::IsTerminal;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e4_format::features::IncompatFeatures;
use e4_fs::{DataReservation, Error, FileType, Filesystem, SetAttributes, XattrSet};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use rustix::fs::FileType as HostFileType;

use crate::edit_session::{describe, stops_everything, ImagePath};
use crate::file_contexts::{selinux_xattr, FileContexts, FileKind};
use crate::fs_config::{capability_xattr, FsConfig};
use crate::host_copy::{
    copy_data, copy_xattrs, creator_of, data_regions, fill_reserved, final_attributes, set_xattrs,
    CopyError, HostEntry, XattrSource,
};
use crate::host_metadata::HostMetadata;
use crate::id_map::IdRule;
use crate::output::CliError;
use crate::read_ahead::{
    listing_with_facts, sorted_names, EntryFacts, Helpers, Listing, XattrPaths,
};

/// Non-directory entries of one directory handled by one task: enough that a task is worth
/// scheduling, few enough that a large flat directory still spreads over every core.
const ENTRIES_PER_TASK: usize = 64;
/// Directory levels below the import's root imported by parallel recursion; deeper levels
/// are walked by [`Import::deep_directory`], whose stack does not grow with depth. 64
/// levels of recursion fit a worker's stack many times over.
const PARALLEL_LEVELS: usize = 64;

/// Imports the contents of host directory `host_dir` into directory `target` of the image
/// (created if missing; its parent must exist), and gives `target` the host directory's
/// mode, owner and times. `image` is the image file: if the host tree holds it, it is
/// skipped (copying an image into itself while it changes is never what was meant).
pub fn run(
    fs: &Filesystem,
    image: &Path,
    host_dir: &Path,
    target: ImagePath<'_>,
    threads: Option<usize>,
) -> Result<(), CliError> {
    run_with(
        fs,
        image,
        host_dir,
        target,
        threads,
        &ImportPolicy::default(),
    )
}

/// How an import departs from copying the host as it is (`e4 mkfs -d` uses it).
#[derive(Debug, Clone, Default)]
pub struct ImportPolicy {
    /// `SOURCE_DATE_EPOCH`: the import's changes to metadata are the same sequence whatever
    /// the host and the thread count: one walk, each directory's entries in name order (so
    /// the host's directory order and inode numbers decide nothing), file data copied by
    /// other threads into blocks the walk reserved, and host times later than the epoch
    /// clamped to it (reproducible-builds.org's rule). With the engine's clock stopped and
    /// interval commits off, the image is then the same to the byte.
    pub reproducible_at: Option<i64>,
    /// The ordered walk without `reproducible_at`'s clamping: one thread places every
    /// entry in name order and reserves each file's blocks, the others read the host tree
    /// ahead of it and copy the data. `e4 mkfs -d` always walks so: on two CPUs it took
    /// 13-17% less wall time at `-j 2` than parallel walkers, and as little or less at `-j 1`
    /// (docs/BENCHMARKS.md), since parallel walkers both write the image file and spin on
    /// its lock in the host's kernel. (`reproducible_at` implies it.)
    pub ordered: bool,
    /// How a host owner becomes the image's: kept, all one (`--owner`) or mapped
    /// (`--uid-map`, `--gid-map`), so an unprivileged build makes the image a root build
    /// would.
    pub uids: IdRule,
    pub gids: IdRule,
    /// `--fs-config`: each entry's owner, mode and capabilities from its line.
    pub fs_config: Option<FsConfig>,
    /// `--file-contexts`: each entry's SELinux label.
    pub file_contexts: Option<FileContexts>,
}

/// As [`run`], with `policy`.
pub fn run_with(
    fs: &Filesystem,
    image: &Path,
    host_dir: &Path,
    target: ImagePath<'_>,
    threads: Option<usize>,
    policy: &ImportPolicy,
) -> Result<(), CliError> {
    let reproducible_at = policy.reproducible_at;
    let ordered = policy.ordered || reproducible_at.is_some();
    // An ordered import walks on one thread; the others read ahead and copy data.
    let (threads, fill_threads) = match ordered {
        true => {
            let all = threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            });
            (Some(1), all.saturating_sub(1))
        }
        false => (threads, 0),
    };
    // The walk reads everything else through this descriptor (see `HostEntry`).
    let host_root = fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW).bits() as i32)
        .open(host_dir)
        .map_err(|e| match e.raw_os_error() {
            Some(code)
                if code == rustix::io::Errno::NOTDIR.raw_os_error()
                    || code == rustix::io::Errno::LOOP.raw_os_error() =>
            {
                format!("{}: not a directory", host_dir.display())
            }
            _ => format!("{}: {e}", host_dir.display()),
        })?;
    let host_meta =
        HostMetadata::of(&host_root).map_err(|e| format!("{}: {e}", host_dir.display()))?;
    let host_root = Arc::new(host_root);
    let root = target_directory(fs, target, &host_meta)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .map_err(|e| format!("cannot start worker threads: {e}"))?;
    let import = Import {
        fs,
        image_file: HostMetadata::of_path(image).ok().map(|m| m.key()),
        progress: Progress::new(),
        stopped: AtomicBool::new(false),
        stop_reason: Mutex::new(None),
        first_names: Mutex::new(HashMap::new()),
        late_links: Mutex::new(Vec::new()),
        reproducible_at,
        ordered,
        uids: &policy.uids,
        gids: &policy.gids,
        fs_config: policy.fs_config.as_ref(),
        file_contexts: policy.file_contexts.as_ref(),
        inline_files: fs
            .superblock()
            .incompat()
            .contains(IncompatFeatures::INLINE_DATA),
        helpers: (fill_threads > 0).then(Helpers::new),
    };
    let root_path = trimmed_root(target.bytes());
    std::thread::scope(|scope| {
        if let Some(helpers) = &import.helpers {
            for _ in 0..fill_threads {
                scope.spawn(|| helpers.run(|job| import.fill(job)));
            }
        }
        pool.install(|| {
            import.directory_contents(&host_root, host_dir, root, &root_path, 0);
            import.finish_late_links();
            import.finish_directory(&host_root, host_dir, &root_path, root, &host_meta);
        });
        // No more fills: this thread and the helpers finish the queue.
        if let Some(helpers) = &import.helpers {
            helpers.finish(|job| import.fill(job));
        }
    });
    import.progress.finish();
    let entries = import.progress.entries.load(Ordering::Relaxed);
    let stop_reason = import
        .stop_reason
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .or_else(|| crate::interrupt::received().map(|s| format!("interrupted by {s}")));
    if let Some(reason) = stop_reason {
        return Err(format!(
            "{reason}; the import stopped after {}",
            counted(entries, "entry", "entries")
        )
        .into());
    }
    match import.progress.failures.load(Ordering::Relaxed) {
        0 => Ok(()),
        n => Err(format!(
            "{} imported; {} could not be (each is named above)",
            counted(entries, "entry", "entries"),
            counted(n, "path", "paths")
        )
        .into()),
    }
}

/// "1 entry", "2 entries".
fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The image directory to import into: `target` if it is one, else a new directory made
/// there with the host directory's mode and owner.
fn target_directory(
    fs: &Filesystem,
    target: ImagePath<'_>,
    host_meta: &HostMetadata,
) -> Result<u32, String> {
    match fs.resolve_bytes(target.bytes(), true) {
        Ok(ino) => match fs.metadata(ino) {
            Ok(m) if m.file_type == FileType::Directory => Ok(ino),
            Ok(_) => Err(format!("{}: not a directory", target.shown())),
            Err(e) => Err(describe(target, &e)),
        },
        Err(Error::NotFound(_)) => {
            let (parent, name) = target.parent_and_name(fs)?;
            fs.mkdir(parent, name, creator_of(host_meta))
                .map_err(|e| describe(target, &e))
        }
        Err(e) => Err(describe(target, &e)),
    }
}

/// The image path of the import's root, without trailing slashes ("" for the root), so
/// that children are shown as `{root}/{name}`.
fn trimmed_root(path: &[u8]) -> Vec<u8> {
    let end = path.iter().rposition(|&b| b != b'/').map_or(0, |at| at + 1);
    let mut root = path[..end].to_vec();
    if !root.is_empty() && root[0] != b'/' {
        root.insert(0, b'/');
    }
    root
}

/// State shared by the workers of one import.
struct Import<'a> {
    fs: &'a Filesystem,
    /// The image file's (device, inode) on the host.
    image_file: Option<(u64, u64)>,
    progress: Progress,
    /// Set once something stopped the import; read before every entry, so an atomic
    /// rather than the lock of the reason.
    stopped: AtomicBool,
    /// Why the import stopped (the first reason).
    stop_reason: Mutex<Option<String>>,
    /// Host inodes with several names, by (device, inode): the image inode made for the
    /// first name, None while it is being made or if making it failed.
    first_names: Mutex<HashMap<(u64, u64), Option<u32>>>,
    /// Further names of those inodes, linked after the walk.
    late_links: Mutex<Vec<LateLink>>,
    /// `SOURCE_DATE_EPOCH` for a reproducible import: times clamped to it.
    reproducible_at: Option<i64>,
    /// Entries in name order, one at a time, with fills on the helpers
    /// ([`ImportPolicy::ordered`]).
    ordered: bool,
    /// How each entry's host owner becomes its owner in the image.
    uids: &'a IdRule,
    gids: &'a IdRule,
    fs_config: Option<&'a FsConfig>,
    file_contexts: Option<&'a FileContexts>,
    /// The image has inline_data: an ordered walk copies a file smaller than a block
    /// itself, so the engine may put it in its inode as any write would.
    inline_files: bool,
    /// An ordered walk's `-j` − 1 helpers, which read the host tree ahead of it and
    /// fill the files whose blocks it reserved; None with one thread (the walk does both).
    helpers: Option<Helpers<FillJob<'a>>>,
}

/// A file whose blocks an ordered walk reserved, waiting for its data: `name` in the
/// open host directory `host`.
struct FillJob<'a> {
    host: Arc<File>,
    name: OsString,
    shown: PathBuf,
    image_path: Vec<u8>,
    reservation: DataReservation<'a>,
}

impl FillJob<'_> {
    /// Copies the host file into its reserved blocks: the bytes copied.
    fn fill(self) -> Result<u64, CopyError> {
        let at = HostEntry {
            dir: &self.host,
            name: &self.name,
            shown: &self.shown,
        };
        fill_reserved(self.reservation, &at)
    }
}

/// A second (or later) name of a host inode.
struct LateLink {
    host_inode: (u64, u64),
    parent: u32,
    name: OsString,
    image_path: Vec<u8>,
    /// The directory the link goes in, and its host attributes to set again afterwards.
    parent_path: Vec<u8>,
    parent_attributes: SetAttributes,
}

/// A unit of work in one directory.
enum Task {
    Subdirectory(OsString),
    Entries(Vec<OsString>),
}

fn child_path(parent: &[u8], name: &OsString) -> Vec<u8> {
    let mut path = Vec::with_capacity(parent.len() + 1 + name.len());
    path.extend_from_slice(parent);
    path.push(b'/');
    path.extend_from_slice(name.as_bytes());
    path
}

fn as_image_path(image_path: &[u8]) -> ImagePath<'_> {
    ImagePath(std::ffi::OsStr::from_bytes(if image_path.is_empty() {
        b"/"
    } else {
        image_path
    }))
}

impl Import<'_> {
    /// `attributes` as the policy wants them: times after the reproducible epoch set to it,
    /// the owner as the policy makes it.
    fn clamped(&self, mut attributes: SetAttributes) -> SetAttributes {
        attributes.uid = attributes.uid.map(|uid| self.uids.apply(uid));
        attributes.gid = attributes.gid.map(|gid| self.gids.apply(gid));
        if let Some(epoch) = self.reproducible_at {
            for time in [&mut attributes.atime, &mut attributes.mtime]
                .into_iter()
                .flatten()
            {
                if time.seconds > epoch || (time.seconds == epoch && time.nanoseconds > 0) {
                    *time = e4_fs::Timestamp {
                        seconds: epoch,
                        nanoseconds: 0,
                    };
                }
            }
        }
        attributes
    }

    /// Whether to start no more work: the filesystem failed, or the user asked to stop.
    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed) || crate::interrupt::received().is_some()
    }

    /// Reports an engine error at `image_path`: a failure of that path, or of the whole
    /// filesystem, which stops the import (the first such reason is the one reported).
    fn image_error(&self, image_path: &[u8], error: &Error) {
        let line = describe(as_image_path(image_path), error);
        if stops_everything(error) {
            self.stop_reason
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(line);
            self.stopped.store(true, Ordering::Relaxed);
        } else {
            self.progress.fail(&line);
        }
    }

    fn copy_error(&self, image_path: &[u8], error: &CopyError) {
        match error {
            CopyError::Host(line) => self.progress.fail(line),
            CopyError::Image(e) => self.image_error(image_path, e),
        }
    }

    /// Imports every entry of host directory `host` (at `shown`) into image directory `dir`
    /// (at `image_path`, `depth` levels below the import's root): subdirectories by
    /// parallel recursion down to [`PARALLEL_LEVELS`], by [`Import::deep_directory`] below.
    fn directory_contents(
        &self,
        host: &Arc<File>,
        shown: &Path,
        dir: u32,
        image_path: &[u8],
        depth: usize,
    ) {
        self.contents(host, shown, dir, image_path, &|name, meta| {
            let (shown, image_path) = (shown.join(&name), child_path(image_path, &name));
            if depth < PARALLEL_LEVELS {
                self.directory(host, &shown, dir, &image_path, &name, &meta, depth + 1);
            } else {
                self.deep_directory(host, shown, dir, image_path, &name, &meta);
            }
        });
    }

    /// Imports the entries of host directory `host` (at `shown`) into image directory `dir`
    /// (at `image_path`) in parallel tasks, handing each subdirectory (name and host
    /// metadata) to `subdirectory`.
    fn contents(
        &self,
        host: &Arc<File>,
        shown: &Path,
        dir: u32,
        image_path: &[u8],
        subdirectory: &(dyn Fn(OsString, HostMetadata) + Sync),
    ) {
        if self.ordered {
            return self.ordered_contents(host, shown, dir, image_path, subdirectory);
        }
        let listing = match rustix::fs::Dir::read_from(&**host) {
            Ok(listing) => listing,
            Err(e) => return self.progress.fail(&format!("{}: {e}", shown.display())),
        };
        let mut tasks = Vec::new();
        let mut entries = Vec::new();
        for entry in listing {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    // A listing that failed part-way does not go on.
                    self.progress.fail(&format!("{}: {e}", shown.display()));
                    break;
                }
            };
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsString::from_vec(name.to_vec());
            // d_type, when the host filesystem records it; the entry is stat-ed anyway.
            if entry.file_type() == rustix::fs::FileType::Directory {
                tasks.push(Task::Subdirectory(name));
            } else {
                entries.push(name);
                if entries.len() == ENTRIES_PER_TASK {
                    tasks.push(Task::Entries(std::mem::take(&mut entries)));
                }
            }
        }
        if !entries.is_empty() {
            tasks.push(Task::Entries(entries));
        }
        tasks.into_par_iter().for_each(|task| {
            let names = match task {
                Task::Subdirectory(name) => vec![name],
                Task::Entries(names) => names,
            };
            for name in names {
                if let Some(meta) = self.entry(host, shown, dir, image_path, &name, None) {
                    subdirectory(name, meta);
                }
            }
        });
    }

    /// [`Import::contents`] for an ordered walk: one entry at a time in name order,
    /// from the listing the helpers read ahead when they did, else read here (and its
    /// subdirectories then handed to the helpers to read ahead).
    fn ordered_contents(
        &self,
        host: &Arc<File>,
        shown: &Path,
        dir: u32,
        image_path: &[u8],
        subdirectory: &(dyn Fn(OsString, HostMetadata) + Sync),
    ) {
        let read_ahead = self
            .helpers
            .as_ref()
            .and_then(|helpers| helpers.take(HostMetadata::of(host).ok()?.key()));
        let listing: Listing = match read_ahead {
            Some(listing) => listing,
            None => {
                let names = match sorted_names(host) {
                    Ok(names) => names,
                    Err(e) => return self.progress.fail(&format!("{}: {e}", shown.display())),
                };
                match &self.helpers {
                    // The facts are read here so the helpers know the subdirectories.
                    Some(helpers) => {
                        let listing = listing_with_facts(host, names, XattrPaths::ThroughProc);
                        helpers.read_subdirectories(host, &listing);
                        listing
                    }
                    None => names.into_iter().map(|name| (name, None)).collect(),
                }
            }
        };
        for (name, facts) in listing {
            if let Some(meta) = self.entry(host, shown, dir, image_path, &name, facts) {
                subdirectory(name, meta);
            }
        }
    }

    /// Imports the tree of host directory `name` in `parent` (the directory itself at
    /// `shown`) as `name` in image directory `parent_ino` (at `image_path`). Depth is the
    /// host tree's to choose, so this walk keeps an explicit stack whose levels hold only
    /// what is left to import there, one open host directory (a parent is reopened through
    /// `..`, checked to be the directory left), one shown and one image path; neither the
    /// thread's stack nor its descriptors grow with depth.
    fn deep_directory(
        &self,
        parent: &Arc<File>,
        mut shown: PathBuf,
        parent_ino: u32,
        mut image_path: Vec<u8>,
        name: &OsString,
        meta: &HostMetadata,
    ) {
        /// A directory being imported, with the subdirectories it still holds.
        struct Level {
            ino: u32,
            meta: HostMetadata,
            left: Vec<(OsString, HostMetadata)>,
        }
        let subdirectories_of = |host: &Arc<File>, shown: &Path, ino: u32, image_path: &[u8]| {
            let found = Mutex::new(Vec::new());
            self.contents(host, shown, ino, image_path, &|name, meta| {
                found
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((name, meta));
            });
            found.into_inner().unwrap_or_else(|p| p.into_inner())
        };
        let Some((mut host, ino)) =
            self.open_and_make(parent, &shown, parent_ino, &image_path, name, meta)
        else {
            return;
        };
        let mut stack = vec![Level {
            ino,
            meta: *meta,
            left: subdirectories_of(&host, &shown, ino, &image_path),
        }];
        loop {
            while stack.last().is_some_and(|level| level.left.is_empty()) {
                // OK to unwrap: the loop condition saw a level.
                let done = stack.pop().unwrap();
                self.finish_directory(&host, &shown, &image_path, done.ino, &done.meta);
                let Some(up) = stack.last() else {
                    return;
                };
                shown.pop();
                let parent_len = image_path.iter().rposition(|&b| b == b'/').unwrap_or(0);
                image_path.truncate(parent_len);
                let dot_dot = HostEntry {
                    dir: &host,
                    name: OsStr::new(".."),
                    shown: &shown,
                };
                match dot_dot.open_directory(up.meta.key()) {
                    Ok(dir) => host = Arc::new(dir),
                    Err(line) => {
                        // Moved meanwhile: what is left of this walk cannot be found.
                        return self.progress.fail(&line);
                    }
                }
            }
            // OK to unwrap: the loop above returns when the stack empties and stops at a
            // level with a subdirectory left.
            let level = stack.last_mut().unwrap();
            let (name, meta) = level.left.pop().unwrap();
            let parent_ino = level.ino;
            shown.push(&name);
            image_path = child_path(&image_path, &name);
            match self.open_and_make(&host, &shown, parent_ino, &image_path, &name, &meta) {
                Some((child, ino)) => {
                    let left = subdirectories_of(&child, &shown, ino, &image_path);
                    stack.push(Level { ino, meta, left });
                    host = child;
                }
                None => {
                    shown.pop();
                    let parent_len = image_path.len() - name.len() - 1;
                    image_path.truncate(parent_len);
                }
            }
        }
    }

    /// Imports one host entry, `name` in host directory `host` (at `shown_dir`), into image
    /// directory `dir` (at `dir_path`) if it is not a directory; returns a directory's host
    /// metadata for the caller's walk. `facts`: what was read of it ahead, if anything.
    fn entry(
        &self,
        host: &Arc<File>,
        shown_dir: &Path,
        dir: u32,
        dir_path: &[u8],
        name: &OsString,
        facts: Option<EntryFacts>,
    ) -> Option<HostMetadata> {
        if self.is_stopped() {
            return None;
        }
        let shown = shown_dir.join(name);
        let at = HostEntry {
            dir: host,
            name,
            shown: &shown,
        };
        let image_path = child_path(dir_path, name);
        let facts = match facts {
            Some(facts) => facts,
            None => match at.metadata() {
                Ok(meta) => EntryFacts {
                    meta,
                    link: None,
                    xattrs: None,
                },
                Err(line) => {
                    self.progress.fail(&line);
                    return None;
                }
            },
        };
        let meta = &facts.meta;
        if self.image_file == Some(meta.key()) {
            let line = format!(
                "{}: skipped: it is the image being written",
                shown.display()
            );
            self.progress.fail(&line);
            return None;
        }
        if meta.is_dir() {
            return Some(facts.meta);
        }
        if meta.nlink() > 1 {
            let key = meta.key();
            let mut first_names = self.first_names.lock().unwrap_or_else(|p| p.into_inner());
            if first_names.contains_key(&key) {
                drop(first_names);
                let parent_attributes = match HostMetadata::of(host) {
                    Ok(parent) => self.clamped(times_only(&parent)),
                    Err(e) => {
                        self.progress.fail(&format!("{}: {e}", shown_dir.display()));
                        return None;
                    }
                };
                self.late_links
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(LateLink {
                        host_inode: key,
                        parent: dir,
                        name: name.clone(),
                        image_path,
                        parent_path: dir_path.to_vec(),
                        parent_attributes,
                    });
                return None;
            }
            first_names.insert(key, None);
            drop(first_names);
            if let Some(ino) = self.non_directory(host, &at, dir, &image_path, facts) {
                self.first_names
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, Some(ino));
            }
            return None;
        }
        self.non_directory(host, &at, dir, &image_path, facts);
        None
    }

    /// A host directory, `name` in host directory `parent` (itself at `shown`): made in the
    /// image (or, if it already is one there, merged into), filled, then given its
    /// attributes.
    #[allow(clippy::too_many_arguments)]
    fn directory(
        &self,
        parent: &Arc<File>,
        shown: &Path,
        parent_ino: u32,
        image_path: &[u8],
        name: &OsString,
        meta: &HostMetadata,
        depth: usize,
    ) {
        if let Some((host, ino)) =
            self.open_and_make(parent, shown, parent_ino, image_path, name, meta)
        {
            self.directory_contents(&host, shown, ino, image_path, depth);
            self.finish_directory(&host, shown, image_path, ino, meta);
        }
    }

    /// Opens host directory `name` in `parent` (at `shown`), which must still be the one
    /// `meta` describes, and makes (or finds) it in image directory `parent_ino`: both, or
    /// None after reporting a failure.
    fn open_and_make(
        &self,
        parent: &Arc<File>,
        shown: &Path,
        parent_ino: u32,
        image_path: &[u8],
        name: &OsString,
        meta: &HostMetadata,
    ) -> Option<(Arc<File>, u32)> {
        let at = HostEntry {
            dir: parent,
            name,
            shown,
        };
        let host = match at.open_directory(meta.key()) {
            Ok(host) => Arc::new(host),
            Err(line) => {
                self.progress.fail(&line);
                return None;
            }
        };
        let ino = self.make_directory(parent_ino, image_path, name, meta)?;
        Some((host, ino))
    }

    /// Makes directory `name` in image directory `parent`, or finds the one already there
    /// (a merge): its inode; None after reporting a failure.
    fn make_directory(
        &self,
        parent: u32,
        image_path: &[u8],
        name: &OsString,
        meta: &HostMetadata,
    ) -> Option<u32> {
        let made = match self.fs.mkdir(parent, name.as_bytes(), creator_of(meta)) {
            Ok(ino) => Ok(ino),
            Err(Error::Exists(_)) => self.existing_directory(parent, name),
            Err(e) => Err(e),
        };
        match made {
            Ok(made) => {
                self.progress.entry(0);
                Some(made)
            }
            Err(e) => {
                self.image_error(image_path, &e);
                None
            }
        }
    }

    /// The directory `name` already in `parent`, for a merge; [`Error::Exists`] if that name
    /// is something else.
    fn existing_directory(&self, parent: u32, name: &OsString) -> Result<u32, Error> {
        let shown = || name.to_string_lossy().into_owned();
        let ino = self
            .fs
            .lookup(parent, name.as_bytes())?
            .ok_or_else(|| Error::NotFound(shown()))?;
        match self.fs.metadata(ino)?.file_type {
            FileType::Directory => Ok(ino),
            _ => Err(Error::Exists(shown())),
        }
    }

    /// Gives a directory its mode, owner, xattrs and times now that its children are in
    /// (the owner too for one made here: a set-group-ID parent gave it its group). `host`
    /// is the open host directory, at `shown`.
    fn finish_directory(
        &self,
        host: &File,
        shown: &Path,
        image_path: &[u8],
        ino: u32,
        meta: &HostMetadata,
    ) {
        if self.is_stopped() {
            return;
        }
        if let Err(reason) = copy_xattrs(self.fs, ino, XattrSource::File(host)) {
            self.progress
                .fail(&format!("{}: {reason}", shown.display()));
        }
        self.set_final_attributes(ino, image_path, meta);
    }

    /// Gives inode `ino` (host `meta`, at `image_path`) the attributes it ends with, after
    /// its data and xattrs: the host's, clamped and with owners mapped by the policy; under
    /// `--fs-config`, the owner and mode its line gives, and its capabilities as
    /// `security.capability` (over the host's; the import's root gets no line, as
    /// e2fsdroid applies none to it; an entry the file does not name is one failure line);
    /// under `--file-contexts`, its label as `security.selinux` (over the host's).
    fn set_final_attributes(&self, ino: u32, image_path: &[u8], meta: &HostMetadata) {
        let mut attributes = self.clamped(final_attributes(meta));
        let relative = image_path.strip_prefix(b"/").unwrap_or(image_path);
        let mut capabilities = 0;
        if let (Some(config), false) = (self.fs_config, relative.is_empty()) {
            let Some(entry) = config.lookup(relative) else {
                let shown = as_image_path(image_path).shown();
                return self
                    .progress
                    .fail(&format!("{shown}: not in the fs_config file"));
            };
            attributes.uid = Some(entry.uid);
            attributes.gid = Some(entry.gid);
            attributes.permissions = Some(entry.permissions);
            capabilities = entry.capabilities;
        }
        let kind = FileKind::of(meta.file_type());
        let absolute: &[u8] = if image_path.is_empty() {
            b"/"
        } else {
            image_path
        };
        let label = self.file_contexts.and_then(|c| c.lookup(absolute, kind));
        if let Some(label) = label {
            let value = selinux_xattr(label);
            let set = self
                .fs
                .set_xattr(ino, b"security.selinux", &value, XattrSet::Either);
            if let Err(e) = set {
                return self.image_error(image_path, &e);
            }
        }
        if capabilities != 0 {
            let value = capability_xattr(capabilities);
            let set = self
                .fs
                .set_xattr(ino, b"security.capability", &value, XattrSet::Either);
            if let Err(e) = set {
                return self.image_error(image_path, &e);
            }
        }
        if let Err(e) = self.fs.setattr(ino, &attributes) {
            self.image_error(image_path, &e);
        }
    }

    /// A host file that is not a directory (`at`, in open host directory `host`): made in
    /// image directory `parent` with its data, xattrs and attributes. Returns its image
    /// inode once it exists (even if a later step failed, so its other names can still be
    /// linked). What `facts` lacks (a symlink's target, the xattrs) is read here.
    fn non_directory(
        &self,
        host: &Arc<File>,
        at: &HostEntry<'_>,
        parent: u32,
        image_path: &[u8],
        facts: EntryFacts,
    ) -> Option<u32> {
        let fs = self.fs;
        let meta = &facts.meta;
        let name_bytes = at.name.as_bytes();
        let creator = creator_of(meta);
        let node = |kind| fs.mknod(parent, name_bytes, kind, meta.rdev(), creator);
        let made = match meta.file_type() {
            HostFileType::RegularFile => fs.create(parent, name_bytes, creator),
            HostFileType::Symlink => match facts.link.map_or_else(|| at.read_link(), Ok) {
                Ok(target) => fs.symlink(parent, name_bytes, &target, creator),
                Err(line) => {
                    self.progress.fail(&line);
                    return None;
                }
            },
            HostFileType::Fifo => node(FileType::Fifo),
            HostFileType::Socket => node(FileType::Socket),
            HostFileType::CharacterDevice => node(FileType::CharDevice),
            HostFileType::BlockDevice => node(FileType::BlockDevice),
            HostFileType::Directory | HostFileType::Unknown => {
                let line = format!(
                    "{}: skipped: not a file type ext4 holds",
                    at.shown.display()
                );
                self.progress.fail(&line);
                return None;
            }
        };
        let ino = match made {
            Ok(ino) => ino,
            Err(e) => {
                self.image_error(image_path, &e);
                return None;
            }
        };
        let mut bytes = 0;
        // A file opened for its data gives its xattrs too (a path through /proc costs a
        // lookup of its own).
        let mut opened = None;
        if meta.is_file() {
            let copied = match self.ordered {
                true => self.reserve_and_fill(ino, host, at, image_path, meta),
                false => at.open_file().and_then(|file| {
                    let copied = copy_data(fs, ino, &file, at.shown, meta.size())?;
                    opened = Some(file);
                    Ok(copied)
                }),
            };
            match copied {
                Ok(copied) => bytes = copied,
                Err(e) => {
                    self.copy_error(image_path, &e);
                    // Half a file is worse than none: the name goes (best effort).
                    let _ = fs.unlink(parent, name_bytes);
                    return None;
                }
            }
        }
        self.progress.entry(bytes);
        let xattrs = match (&opened, facts.xattrs) {
            (Some(file), _) => copy_xattrs(fs, ino, XattrSource::File(file)),
            (None, Some(read)) => read.and_then(|read| set_xattrs(fs, ino, &read)),
            (None, None) => copy_xattrs(fs, ino, XattrSource::Path(&at.proc_path())),
        };
        if let Err(reason) = xattrs {
            self.progress
                .fail(&format!("{}: {reason}", as_image_path(image_path).shown()));
        }
        self.set_final_attributes(ino, image_path, meta);
        Some(ino)
    }

    /// The data of host file `at` (in open host directory `host`) in an ordered walk: a
    /// file smaller than a block of an inline_data image is copied at once (the engine
    /// decides whether it goes in the inode); any other gets its blocks reserved here, in
    /// the walk's order, and is filled by a fill thread, or at once when there is none.
    /// Returns the bytes copied now.
    fn reserve_and_fill(
        &self,
        ino: u32,
        host: &Arc<File>,
        at: &HostEntry<'_>,
        image_path: &[u8],
        meta: &HostMetadata,
    ) -> Result<u64, CopyError> {
        let size = meta.size();
        if self.inline_files && size < u64::from(self.fs.block_size()) {
            return copy_data(self.fs, ino, &at.open_file()?, at.shown, size);
        }
        let regions = data_regions(at, meta)?;
        let reservation = self.fs.reserve_data(ino, size, &regions)?;
        let job = FillJob {
            host: Arc::clone(host),
            name: at.name.to_os_string(),
            shown: at.shown.to_path_buf(),
            image_path: image_path.to_vec(),
            reservation,
        };
        let job = match &self.helpers {
            Some(helpers) => helpers.fill_later(job),
            None => Some(job),
        };
        job.map_or(Ok(0), FillJob::fill)
    }

    /// A helper's fill of a file the walk queued. After a failure that stops the import,
    /// the files left are dropped unfilled (their blocks are zeroed; the import fails
    /// anyway).
    fn fill(&self, job: FillJob<'_>) {
        if self.is_stopped() {
            return;
        }
        let image_path = job.image_path.clone();
        match job.fill() {
            Ok(bytes) => self.progress.data(bytes),
            Err(e) => self.copy_error(&image_path, &e),
        }
    }

    /// Links the later names of multiply-linked host inodes, then sets the times of the
    /// directories they went into again (a link changes its directory's mtime).
    fn finish_late_links(&self) {
        let links = std::mem::take(&mut *self.late_links.lock().unwrap_or_else(|p| p.into_inner()));
        let first_names =
            std::mem::take(&mut *self.first_names.lock().unwrap_or_else(|p| p.into_inner()));
        for link in &links {
            if self.is_stopped() {
                return;
            }
            let Some(&Some(ino)) = first_names.get(&link.host_inode) else {
                self.progress.fail(&format!(
                    "{}: not linked: the first name of this hard-linked file was not imported",
                    as_image_path(&link.image_path).shown()
                ));
                continue;
            };
            match self.fs.link(ino, link.parent, link.name.as_bytes()) {
                Ok(()) => self.progress.entry(0),
                Err(e) => self.image_error(&link.image_path, &e),
            }
        }
        for link in &links {
            if let Err(e) = self.fs.setattr(link.parent, &link.parent_attributes) {
                self.image_error(&link.parent_path, &e);
            }
        }
    }
}

/// Only the times of host file `meta` (for a directory whose other attributes are set).
fn times_only(meta: &HostMetadata) -> SetAttributes {
    SetAttributes {
        permissions: None,
        uid: None,
        gid: None,
        ..final_attributes(meta)
    }
}

/// Counts what was imported and what failed; draws a progress line when stderr is a
/// terminal (and only then, so scripts and logs get just the failure lines).
struct Progress {
    bar: Option<ProgressBar>,
    entries: AtomicU64,
    bytes: AtomicU64,
    failures: AtomicU64,
}

impl Progress {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {elapsed_precise} {msg} ({binary_bytes_per_sec})",
                )
                // OK to unwrap: the template is a constant that parses.
                .expect("a valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            entries: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// One more entry imported, with `bytes` of data.
    fn entry(&self, bytes: u64) {
        self.entries.fetch_add(1, Ordering::Relaxed);
        self.data(bytes);
    }

    /// `bytes` more of data copied (by a fill thread, for an entry already counted).
    fn data(&self, bytes: u64) {
        let entries = self.entries.load(Ordering::Relaxed);
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if let Some(bar) = &self.bar {
            bar.set_position(total);
            bar.set_message(format!(
                "{entries} entries, {}",
                indicatif::BinaryBytes(total)
            ));
        }
    }

    /// Reports one failed path (a line on stderr, above the progress line) and counts it.
    fn fail(&self, line: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("e4: {line}")),
            None => eprintln!("e4: {line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_import_root_is_shown_as_an_absolute_path() {
        assert_eq!(trimmed_root(b"/"), b"");
        assert_eq!(trimmed_root(b""), b"");
        assert_eq!(trimmed_root(b"/dest/"), b"/dest");
        assert_eq!(trimmed_root(b"dest"), b"/dest");
    }
}
