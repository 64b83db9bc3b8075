//! The FUSE requests, answered by the engine.
//!
//! fuser runs each request on the worker thread that read it from its clone of
//! `/dev/fuse` and the handler runs inline there: no request is handed to another thread
//! and no handler waits for another request. Engine calls lock only what they touch
//! (inodes, directories, groups); the mount's one table of its own ([`ShownDirectories`])
//! is sharded by key, and a directory listing keeps no state but the kernel's offset
//! (`dir_listing`).
//!
//! The kernel's lookup counts (FUSE's `nlookup`: how many times a node was handed to the
//! kernel in an entry reply, less what `forget` gave back) are the engine's own open
//! counts: every entry reply opens the inode once ([`Filesystem::open_inode`], before the
//! reply, since a forget can follow it at once on another thread), and a forget releases
//! it as many times ([`Filesystem::release_inode_times`]); open file handles count there
//! too. So a file whose last name is removed while the kernel still knows it lives on the
//! orphan list until the last forget and release, as the protocol asks, and is freed
//! then; any still known at unmount are freed by the engine's unmount (the kernel sends no
//! forgets then). One count under the inode's own lock, instead of a table of the mount's
//! beside the engine's, spares a forget and an entry reply a lookup in a second table
//! (docs/BENCHMARKS.md, "Where an unlink through e4's mount goes").

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use e4_format::dir_entry::MAX_NAME_LEN;
use e4_fs::{
    Creator, FallocateMode, FileType, Filesystem, Metadata, OpenIntent, RenameMode, SetAttributes,
    XattrSet,
};
use fuser::{
    CopyFileRangeFlags, Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use crate::attrs::{
    decode_rdev, entry_attr, ext4_ino, file_attr, file_type_of_mode, generation_of, kind_of,
    negative_entry_attr, node_of, timestamp, IdMap, Owners,
};
use crate::dir_listing::{self, Listed};
use crate::error_policy::OnError;
use crate::file_flags;
use crate::kill_privileges::{caller_lacks_fsetid, kill_privileges};
use crate::seek::{seek, Seek, SeekError};
use crate::shown_directories::ShownDirectories;

/// How long the kernel may trust an entry (a name, or a name's absence) or attributes
/// without asking again. Every change goes through this mount (it holds the image's lock),
/// so nothing changes behind the kernel's back: it updates or drops what it cached itself
/// on every change it sends (an unlink drops the other names' link count and invalidates
/// the name, a write or setxattr invalidates the attributes it changes), and the mount
/// tells it what a reply cannot (`attributes_changed`: a directory's new mtime against a
/// GETATTR that raced the change, `fallocate`'s ENOSPC). So the timeout is long:
/// with 1 s, every unlink in a directory made more than a second before cost a LOOKUP to
/// revalidate the name first, two round trips instead of one (docs/BENCHMARKS.md,
/// "Round trips, reads and sequential I/O through e4's mount").
const TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Largest write request the kernel sends: its own cap (`fs.fuse.max_pages_limit`, 256
/// pages) is 1 MiB, so asking for more buys nothing.
const MAX_WRITE: u32 = 1 << 20;

/// Readahead asked for: as large as a write, if the kernel offers it (it offers its
/// backing-device window, 128 KiB by default, until `readahead.rs` raises that).
const MAX_READAHEAD: u32 = crate::readahead::READAHEAD_KIB << 10;

/// What the kernel is asked to do, where it offers it: look up and create in one
/// directory in parallel (else it serialises them per directory), pass O_TRUNC to open
/// (one request instead of SETATTR then OPEN), list with attributes (READDIRPLUS, the
/// kernel choosing when), cache symlink targets, and leave set-user-ID and set-group-ID
/// to the mount (which saves a GETXATTR before every write and fallocate;
/// `kill_privileges.rs`).
const WANTED: InitFlags = InitFlags::FUSE_PARALLEL_DIROPS
    .union(InitFlags::FUSE_ATOMIC_O_TRUNC)
    .union(InitFlags::FUSE_DO_READDIRPLUS)
    .union(InitFlags::FUSE_READDIRPLUS_AUTO)
    .union(InitFlags::FUSE_CACHE_SYMLINKS)
    .union(InitFlags::FUSE_HANDLE_KILLPRIV_V2);

thread_local! {
    /// Each worker's buffer for READ replies, kept between requests: a new zeroed buffer
    /// per READ cost the daemon a pass over every byte before the engine filled it
    /// (docs/BENCHMARKS.md, "Round trips, reads and sequential I/O through e4's mount").
    /// The engine writes every byte of what it returns (holes as zeros), and only that is
    /// sent.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where [`Mounted::wait`](crate::Mounted) finds the result of writing the image back.
pub(crate) type Outcome = Arc<Mutex<Option<e4_fs::Result<()>>>>;

/// The filesystem fuser serves.
pub(crate) struct E4Fuse {
    /// `None` only after `destroy`, when no request comes any more.
    fs: Option<Arc<Filesystem>>,
    /// Directories whose attributes a reply may carry stale (`shown_directories`).
    shown: ShownDirectories,
    owners: Owners,
    fakeroot: bool,
    /// `acl`: POSIX_ACL and DONT_MASK are asked for.
    posix_acl: bool,
    /// The kernel granted DONT_MASK: a create's mode comes without the umask taken off,
    /// and the umask beside it, for the engine to apply (`Creator::umask`).
    umask_is_ours: bool,
    /// The kernel left clearing set-user-ID and set-group-ID on write, truncate and
    /// fallocate to the mount (FUSE_HANDLE_KILLPRIV_V2).
    kills_privileges: bool,
    block_size: u32,
    outcome: Outcome,
    on_error: OnError,
    /// Tells the kernel that cached attributes went stale: set once the session exists.
    notifier: Arc<OnceLock<Notifier>>,
}

/// An engine result as a request's result: the errno the kernel's ext4 gives for the
/// same failure ([`e4_fs::Error::errno`]), once the mount's `errors=` policy has seen it.
trait OrErrno<T> {
    fn or_errno(self, on_error: &OnError) -> Result<T, Errno>;
}

impl<T> OrErrno<T> for e4_fs::Result<T> {
    fn or_errno(self, on_error: &OnError) -> Result<T, Errno> {
        self.map_err(|e| on_error.errno(&e))
    }
}

/// A name from the kernel as the engine takes it.
fn bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

impl E4Fuse {
    pub(crate) fn new(
        fs: Arc<Filesystem>,
        owners: Owners,
        fakeroot: bool,
        posix_acl: bool,
        outcome: Outcome,
        on_error: OnError,
        notifier: Arc<OnceLock<Notifier>>,
    ) -> Self {
        E4Fuse {
            on_error,
            notifier,
            block_size: fs.block_size(),
            fs: Some(fs),
            shown: ShownDirectories::new(),
            owners,
            fakeroot,
            posix_acl,
            umask_is_ours: false,
            kills_privileges: false,
            outcome,
        }
    }

    fn fs(&self) -> &Filesystem {
        // OK to unwrap: only `destroy` takes it, after the last request.
        self.fs.as_ref().expect("a request after destroy")
    }

    /// `m`'s attributes for an attribute reply (see [`file_attr`]).
    fn attr(&self, m: &Metadata) -> FileAttr {
        file_attr(m, self.block_size, self.owners)
    }

    /// `ino` handed to the kernel in an entry reply: its lookup count (the engine's open
    /// count; module doc) is raised first, which fails if the inode has meanwhile lost its
    /// last link and is open nowhere, and given back if its attributes cannot be read.
    fn entry(&self, ino: u32) -> Result<(FileAttr, Generation), Errno> {
        let fs = self.fs();
        fs.open_inode(ino).or_errno(&self.on_error)?;
        match self.metadata_to_show(ino) {
            Ok(m) => Ok((
                entry_attr(&m, self.block_size, self.owners),
                generation_of(&m),
            )),
            Err(e) => {
                let _ = fs.release_inode(ino);
                Err(self.on_error.errno(&e))
            }
        }
    }

    /// Inode `ino`'s metadata for a reply that carries its attributes (an attribute or
    /// entry reply). A directory is recorded as shown first (`shown_directories`) and read
    /// again after that, so a change in it either finds the record or is in what is sent.
    fn metadata_to_show(&self, ino: u32) -> e4_fs::Result<Metadata> {
        self.to_show(self.fs().metadata(ino)?)
    }

    /// [`E4Fuse::metadata_to_show`] from `m`, read (or changed) just before.
    fn to_show(&self, m: Metadata) -> e4_fs::Result<Metadata> {
        if m.file_type != FileType::Directory {
            return Ok(m);
        }
        self.shown.showing(node_of(m.ino));
        self.fs().metadata(m.ino)
    }

    /// Tells the kernel that node `node`'s attributes changed without a reply that carries
    /// them: a directory that gained or lost a name, an inode whose xattrs changed. The
    /// kernel drops what it cached when the reply comes, but a GETATTR answered before the
    /// change and read after the reply would be cached again, stale, for `TTL` (a
    /// directory statted while files were made in it kept an old mtime); the notification
    /// also raises the inode's attribute version, so such an answer is thrown away.
    /// Attributes only (offset -1): no page is dropped and no lock taken, so a handler may
    /// send it.
    fn attributes_changed(&self, node: INodeNo) {
        if let Some(notifier) = self.notifier.get() {
            let _ = notifier.inval_inode(node, -1, 0);
        }
    }

    /// [`E4Fuse::attributes_changed`] for `nodes`, once `result` says the change was made.
    fn changed<T>(&self, result: &Result<T, Errno>, nodes: &[INodeNo]) {
        if result.is_ok() {
            for &node in nodes {
                self.attributes_changed(node);
            }
        }
    }

    /// Directories `dirs` gained or lost names, if `result` says so: the kernel is told
    /// of those whose attributes a reply may have carried stale since it was last told
    /// (`shown_directories`); the others' cached attributes the kernel drops itself when
    /// the reply comes.
    fn names_changed<T>(&self, result: &Result<T, Errno>, dirs: &[INodeNo]) {
        if result.is_ok() {
            for &dir in dirs {
                if self.shown.take(dir) {
                    self.attributes_changed(dir);
                }
            }
        }
    }

    fn reply_entry(&self, reply: ReplyEntry, made: Result<u32, Errno>) {
        match made.and_then(|ino| self.entry(ino)) {
            Ok((attr, generation)) => reply.entry(&TTL, &attr, generation),
            Err(e) => reply.error(e),
        }
    }

    /// Who owns a new inode, with `permissions`: the caller (root under `fakeroot`, the
    /// image's id under `uid=`/`gid=`). The engine gives an inode made in a set-group-ID
    /// directory that directory's group (`inode_init_owner`), and applies `umask` or the
    /// directory's default ACL, when the kernel left the umask to it.
    fn creator(&self, req: &Request, permissions: u32, umask: u32) -> Creator {
        let (uid, gid) = if self.fakeroot {
            (0, 0)
        } else {
            (
                IdMap::stored(self.owners.uid, req.uid()),
                IdMap::stored(self.owners.gid, req.gid()),
            )
        };
        Creator {
            permissions: (permissions & 0o7777) as u16,
            uid,
            gid,
            umask: if self.umask_is_ours {
                (umask & 0o777) as u16
            } else {
                0
            },
        }
    }

    /// Serves directory `ino` from `offset`: calls `add` with each entry and the offset of
    /// the one after it until `add` says the reply is full or the directory ends. One walk
    /// for READDIR and READDIRPLUS.
    fn fill_dir(
        &self,
        ino: INodeNo,
        mut offset: u64,
        mut add: impl FnMut(&Listed, u64) -> bool,
    ) -> Result<(), Errno> {
        loop {
            let batch =
                dir_listing::batch(self.fs(), ext4_ino(ino), offset).or_errno(&self.on_error)?;
            if batch.is_empty() {
                return Ok(());
            }
            for (entry, next) in &batch {
                if add(entry, *next) {
                    return Ok(());
                }
                offset = *next;
            }
        }
    }

    /// Fills `buf` from `offset` of file `ino`; returns how many bytes it holds (fewer
    /// only at the end of the file).
    fn read_file(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut done = 0;
        // The kernel takes a short read for the end of the file: read until full or EOF.
        while done < buf.len() {
            let n = self
                .fs()
                .read_at(ino, offset + done as u64, &mut buf[done..])
                .or_errno(&self.on_error)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }

    fn write_file(&self, ino: u32, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let mut done = 0;
        while done < data.len() {
            let n = self
                .fs()
                .write_at(ino, offset + done as u64, &data[done..])
                .or_errno(&self.on_error)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        // OK to cast: a request carries at most MAX_WRITE bytes.
        Ok(done as u32)
    }

    /// Opens inode `ino` for the kernel; with O_TRUNC, `caller` (a uid) decides whether
    /// set-user-ID and set-group-ID go as on a truncate.
    fn open_file(&self, ino: u32, flags: OpenFlags, caller: u32) -> Result<(), Errno> {
        let fs = self.fs();
        let intent = OpenIntent {
            write: flags.0 & libc::O_ACCMODE != libc::O_RDONLY,
            append: flags.0 & libc::O_APPEND != 0,
            truncate: flags.0 & libc::O_TRUNC != 0,
        };
        fs.check_open(ino, intent).or_errno(&self.on_error)?;
        fs.open_inode(ino).or_errno(&self.on_error)?;
        if flags.0 & libc::O_TRUNC != 0 && flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            let size = Some(0);
            if let Err(e) = self.kill_privileges_of(ino, caller).and_then(|()| {
                fs.setattr(
                    ino,
                    &SetAttributes {
                        size,
                        ..Default::default()
                    },
                )
            }) {
                let _ = fs.release_inode(ino);
                return Err(self.on_error.errno(&e));
            }
        }
        Ok(())
    }

    /// Clears inode `ino`'s set-user-ID and set-group-ID before a truncate (or O_TRUNC)
    /// by `caller` (a uid), where the kernel left that to the mount.
    fn kill_privileges_of(&self, ino: u32, caller: u32) -> e4_fs::Result<()> {
        if self.kills_privileges && caller_lacks_fsetid(caller) {
            kill_privileges(self.fs(), ino)?;
        }
        Ok(())
    }

    fn get_xattr(&self, ino: u32, name: &OsStr, size: u32) -> Result<XattrReply, Errno> {
        let value = self
            .fs()
            .get_xattr(ino, bytes(name))
            .or_errno(&self.on_error)?
            .ok_or(Errno::ENODATA)?;
        sized(value, size)
    }

    fn list_xattrs(&self, ino: u32, size: u32) -> Result<XattrReply, Errno> {
        let mut list = Vec::new();
        for name in self.fs().list_xattrs(ino).or_errno(&self.on_error)? {
            list.extend_from_slice(&name);
            list.push(0);
        }
        sized(list, size)
    }
}

/// An xattr value or name list, or its size when the caller asked for the size only.
enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// `value` for a caller with `size` bytes of room: its size for a probe (size 0), ERANGE
/// when it does not fit.
fn sized(value: Vec<u8>, size: u32) -> Result<XattrReply, Errno> {
    let len = u32::try_from(value.len()).map_err(|_| Errno::E2BIG)?;
    match size {
        0 => Ok(XattrReply::Size(len)),
        room if len > room => Err(Errno::ERANGE),
        _ => Ok(XattrReply::Data(value)),
    }
}

fn reply_xattr(reply: ReplyXattr, result: Result<XattrReply, Errno>) {
    match result {
        Ok(XattrReply::Size(n)) => reply.size(n),
        Ok(XattrReply::Data(d)) => reply.data(&d),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn time_of(t: TimeOrNow) -> e4_fs::Timestamp {
    timestamp(match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    })
}

/// How a `fallocate` mode is done: the kernel passes on plain allocation, KEEP_SIZE,
/// PUNCH_HOLE (always with KEEP_SIZE) and ZERO_RANGE with or without KEEP_SIZE.
enum Fallocation {
    Engine(FallocateMode),
    /// ZERO_RANGE with KEEP_SIZE: the engine's zeroing grows the size, so the range is
    /// zeroed up to the size and allocated (as KEEP_SIZE) past it (`zero_keeping_size`).
    ZeroKeepingSize,
}

fn fallocation(mode: i32) -> Option<Fallocation> {
    const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
    const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;
    match mode {
        0 => Some(Fallocation::Engine(FallocateMode::Allocate)),
        KEEP_SIZE => Some(Fallocation::Engine(FallocateMode::KeepSize)),
        m if m == libc::FALLOC_FL_PUNCH_HOLE | KEEP_SIZE => {
            Some(Fallocation::Engine(FallocateMode::PunchHole))
        }
        ZERO_RANGE => Some(Fallocation::Engine(FallocateMode::ZeroRange)),
        m if m == ZERO_RANGE | KEEP_SIZE => Some(Fallocation::ZeroKeepingSize),
        _ => None,
    }
}

/// ZERO_RANGE with KEEP_SIZE of `len` bytes at `offset`: zeroes what lies below the size
/// and allocates the rest past it without changing the size, as ext4 does in one call.
/// (A write that grows the file between the two steps is not zeroed; the kernel holds
/// the inode lock across its fallocate, so no write of this mount's users comes between.)
fn zero_keeping_size(fs: &Filesystem, ino: u32, offset: u64, len: u64) -> e4_fs::Result<()> {
    let size = fs.metadata(ino)?.size;
    let end = offset.saturating_add(len);
    if offset < size {
        fs.fallocate(
            ino,
            FallocateMode::ZeroRange,
            offset,
            end.min(size) - offset,
        )?;
    }
    if end > size {
        let from = offset.max(size);
        fs.fallocate(ino, FallocateMode::KeepSize, from, end - from)?;
    }
    Ok(())
}

impl fuser::Filesystem for E4Fuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = if self.posix_acl {
            WANTED | InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK
        } else {
            WANTED
        };
        let offered = config.capabilities() & wanted;
        // OK to ignore: only offered capabilities are added, and both sizes fall back to
        // the kernel's limit.
        let _ = config.add_capabilities(offered);
        self.umask_is_ours = offered.contains(InitFlags::FUSE_DONT_MASK);
        self.kills_privileges = offered.contains(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        let _ = config.set_max_write(MAX_WRITE);
        if let Err(most) = config.set_max_readahead(MAX_READAHEAD) {
            let _ = config.set_max_readahead(most);
        }
        Ok(())
    }

    /// The last request is done: close what the kernel still knew, then write the image
    /// back and mark it clean.
    fn destroy(&mut self) {
        let Some(mut fs) = self.fs.take() else { return };
        // The interval-commit thread holds the filesystem only while it commits.
        let result = loop {
            match Arc::try_unwrap(fs) {
                Ok(fs) => break fs.unmount(),
                Err(shared) => {
                    fs = shared;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        *self.outcome.lock() = Some(result);
    }

    /// A name longer than ext4 can hold is ENAMETOOLONG, not ENOENT, as `ext4_lookup`
    /// answers (the kernel's FUSE allows names up to 1024 bytes).
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if name.len() > MAX_NAME_LEN {
            return reply.error(Errno::ENAMETOOLONG);
        }
        match self
            .fs()
            .lookup(ext4_ino(parent), bytes(name))
            .or_errno(&self.on_error)
        {
            Ok(Some(ino)) => self.reply_entry(reply, Ok(ino)),
            // Node 0: the kernel keeps a negative entry for `TTL`, so looking the name up
            // again (a `stat` of a missing file, a search along a path) costs no request
            // until a change through this mount names it. No lookup is counted.
            Ok(None) => reply.entry(&TTL, &negative_entry_attr(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // A forget has no reply: an error here (a count the kernel never had, as for the
        // root, which it never forgets) shows at the next e2fsck, as the kernel's own
        // failures in eviction do.
        let times = u32::try_from(nlookup).unwrap_or(u32::MAX);
        let _ = self.fs().release_inode_times(ext4_ino(ino), times);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.metadata_to_show(ext4_ino(ino)) {
            Ok(m) => reply.attr(&TTL, &self.attr(&m)),
            Err(e) => reply.error(self.on_error.errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let attrs = SetAttributes {
            permissions: mode.map(|m| (m & 0o7777) as u16),
            uid: uid.map(|u| IdMap::stored(self.owners.uid, u)),
            gid: gid.map(|g| IdMap::stored(self.owners.gid, g)),
            size,
            // The kernel sends "now" for both times for `utimes(NULL)` (ATTR_TOUCH), and
            // also for two UTIME_NOWs, which it takes for named times (an append-only
            // file refuses those): the two cannot be told apart here.
            times_are_touch: matches!((atime, mtime), (Some(TimeOrNow::Now), Some(TimeOrNow::Now))),
            atime: atime.map(time_of),
            mtime: mtime.map(time_of),
        };
        let ino = ext4_ino(ino);
        // A truncate takes the privileges away first, as ext4's `do_truncate`; a new mode
        // given with it is the caller's (the kernel sends it only without the capability).
        let killed = match (size, mode) {
            (Some(_), None) => self.kill_privileges_of(ino, req.uid()),
            // A SETATTR that changes nothing is what is left of the kernel's own request
            // to drop them, once it has taken out the mode it leaves to the mount under
            // HANDLE_KILLPRIV_V2: a chown naming no owner (`chown(f, -1, -1)`, which
            // clears them on ext4 whoever calls, `chown_common`), or `file_remove_privs`.
            // A chown naming an owner is the engine's to handle.
            (None, None)
                if self.kills_privileges
                    && (uid, gid, atime, mtime, ctime) == (None, None, None, None, None) =>
            {
                kill_privileges(self.fs(), ino)
            }
            _ => Ok(()),
        };
        match killed
            .and_then(|()| self.fs().setattr(ino, &attrs))
            .and_then(|m| self.to_show(m))
        {
            Ok(m) => reply.attr(&TTL, &self.attr(&m)),
            Err(e) => reply.error(self.on_error.errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs().read_link(ext4_ino(ino)) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(self.on_error.errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let (node, parent) = (parent, ext4_ino(parent));
        let c = self.creator(req, mode, umask);
        let made = {
            let fs = self.fs();
            match file_type_of_mode(mode) {
                Some(FileType::Regular) => {
                    fs.create(parent, bytes(name), c).or_errno(&self.on_error)
                }
                Some(
                    t @ (FileType::Fifo
                    | FileType::Socket
                    | FileType::CharDevice
                    | FileType::BlockDevice),
                ) => fs
                    .mknod(parent, bytes(name), t, decode_rdev(rdev), c)
                    .or_errno(&self.on_error),
                _ => Err(Errno::EINVAL),
            }
        };
        self.names_changed(&made, &[node]);
        self.reply_entry(reply, made);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let made = self
            .fs()
            .mkdir(
                ext4_ino(parent),
                bytes(name),
                self.creator(req, mode, umask),
            )
            .or_errno(&self.on_error);
        self.names_changed(&made, &[parent]);
        self.reply_entry(reply, made);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let result = self
            .fs()
            .unlink(ext4_ino(parent), bytes(name))
            .or_errno(&self.on_error);
        self.names_changed(&result, &[parent]);
        reply_empty(reply, result);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let result = self
            .fs()
            .rmdir(ext4_ino(parent), bytes(name))
            .or_errno(&self.on_error);
        self.names_changed(&result, &[parent]);
        reply_empty(reply, result);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let c = self.creator(req, 0o777, 0);
        let made = self
            .fs()
            .symlink(
                ext4_ino(parent),
                bytes(link_name),
                target.as_os_str().as_bytes(),
                c,
            )
            .or_errno(&self.on_error);
        self.names_changed(&made, &[parent]);
        self.reply_entry(reply, made);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let mode = if flags.is_empty() {
            Ok(RenameMode::Replace)
        } else if flags == RenameFlags::RENAME_NOREPLACE {
            Ok(RenameMode::NoReplace)
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            Ok(RenameMode::Exchange)
        } else {
            // RENAME_WHITEOUT (overlayfs): the engine makes no whiteouts.
            Err(Errno::EINVAL)
        };
        let result = mode.and_then(|mode| {
            self.fs()
                .rename(
                    ext4_ino(parent),
                    bytes(name),
                    ext4_ino(newparent),
                    bytes(newname),
                    mode,
                )
                .or_errno(&self.on_error)
        });
        if parent == newparent {
            self.names_changed(&result, &[parent]);
        } else {
            self.names_changed(&result, &[parent, newparent]);
        }
        reply_empty(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let ino = ext4_ino(ino);
        let made = self
            .fs()
            .link(ino, ext4_ino(newparent), bytes(newname))
            .or_errno(&self.on_error)
            .map(|()| ino);
        self.names_changed(&made, &[newparent]);
        self.reply_entry(reply, made);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            if let Err(e) = self.on_error.may_change() {
                return reply.error(e);
            }
        }
        match self.open_file(ext4_ino(ino), flags, req.uid()) {
            // Every change goes through this mount, so cached pages stay good across opens.
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    // Kept out of fuser's dispatch, where the buffer's closure made the compiler inline it,
    // so that scripts/mount-instructions.sh finds READs among the handlers it counts.
    #[inline(never)]
    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        READ_BUFFER.with_borrow_mut(|buf| {
            let size = size as usize;
            if buf.len() < size {
                buf.resize(size, 0);
            }
            match self.read_file(ext4_ino(ino), offset, &mut buf[..size]) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(e),
            }
        });
    }

    /// Writes where the kernel says: for O_APPEND it has already put the offset at the end
    /// of the file it knows, which is this mount's, since every write goes through it.
    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let ino = ext4_ino(ino);
        // The protocol's rule. On Linux 6.18 the kernel's `file_remove_privs` has already
        // sent the empty SETATTR that clears them (see `setattr`), so nothing is left.
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            if let Err(e) = kill_privileges(self.fs(), ino) {
                return reply.error(self.on_error.errno(&e));
            }
        }
        match self.write_file(ino, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    /// Nothing is buffered in the mount: a write is in the engine when it is answered.
    /// ENOSYS, so the kernel sends no FLUSH again (`no_flush`): e4 has nothing to do at
    /// `close` (data reaches the engine with each WRITE, and POSIX locks are the kernel's
    /// own), and a FLUSH was one of the four round trips of every `open(O_CREAT)` and
    /// `close` (docs/BENCHMARKS.md, "Where a create through e4's mount goes"). The kernel
    /// writes dirty pages back before it would have sent it either way.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.fs()
                .release_inode(ext4_ino(ino))
                .or_errno(&self.on_error),
        );
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.fs().fsync(ext4_ino(ino)).or_errno(&self.on_error),
        );
    }

    /// FS_IOC_GETFLAGS and FS_IOC_SETFLAGS (and FS_IOC_FSGETXATTR, which the kernel asks
    /// before a SETFLAGS): `file_flags`.
    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        if file_flags::changes(cmd) {
            if let Err(e) = self.on_error.may_change() {
                return reply.error(e);
            }
        }
        // The kernel checked ownership and CAP_LINUX_IMMUTABLE before sending SETFLAGS.
        let may_protect = true;
        match file_flags::answer(self.fs(), ext4_ino(ino), cmd, in_data, may_protect) {
            Ok(Some(out)) => reply.ioctl(0, &out),
            Ok(None) => reply.error(Errno::ENOTTY),
            Err(e) => reply.error(self.on_error.errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // The offset is a listing's whole state (`dir_listing`): no handle to keep. The
        // kernel may keep a listing in the directory's page cache and serve it again,
        // across opens, until the directory changes: every change goes through this mount,
        // which the kernel sees (and the daemon's own notifications drop the cache too),
        // as the day-long entry and attribute timeouts already rely on. A warm `git status`
        // lists every directory of its tree.
        reply.opened(
            FileHandle(0),
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
        );
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        // `d_ino` is ext4's number, as `stat` shows it (the root's "." and ".." show 2).
        let filled = self.fill_dir(ino, offset, |e, next| {
            reply.add(
                INodeNo(u64::from(e.ino)),
                next,
                kind_of(e.file_type),
                OsStr::from_bytes(&e.name),
            )
        });
        match filled {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// As readdir, with each entry's attributes; every entry but "." and ".." is handed to
    /// the kernel, so counts a lookup. An entry removed since the listing was read is
    /// left out.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let fs = self.fs();
        let filled = self.fill_dir(ino, offset, |e, next| {
            let (attr, generation) = if e.is_dot() {
                match fs.metadata(e.ino) {
                    Ok(m) => (self.attr(&m), generation_of(&m)),
                    Err(_) => return false,
                }
            } else {
                match self.entry(e.ino) {
                    Ok(entry) => entry,
                    Err(_) => return false,
                }
            };
            let name = OsStr::from_bytes(&e.name);
            // fuser sends `attr.ino` as both the node and `d_ino`.
            let full = reply.add(attr.ino, next, name, &TTL, &attr, generation);
            if full && !e.is_dot() {
                // Not sent: the lookup is not the kernel's.
                let _ = fs.release_inode(e.ino);
            }
            full
        });
        match filled {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.fs().fsync(ext4_ino(ino)).or_errno(&self.on_error),
        );
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs().statfs();
        reply.statfs(
            s.blocks,
            s.free_blocks,
            s.available_blocks,
            s.inodes,
            s.free_inodes,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let how = match flags {
            0 => Ok(XattrSet::Either),
            libc::XATTR_CREATE => Ok(XattrSet::Create),
            libc::XATTR_REPLACE => Ok(XattrSet::Replace),
            _ => Err(Errno::EINVAL),
        };
        let result = how.and_then(|how| {
            self.fs()
                .set_xattr(ext4_ino(ino), bytes(name), value, how)
                .or_errno(&self.on_error)
        });
        self.changed(&result, &[ino]);
        reply_empty(reply, result);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply_xattr(reply, self.get_xattr(ext4_ino(ino), name, size));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(reply, self.list_xattrs(ext4_ino(ino), size));
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let result = self
            .fs()
            .remove_xattr(ext4_ino(ino), bytes(name))
            .or_errno(&self.on_error);
        self.changed(&result, &[ino]);
        reply_empty(reply, result);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let made = self
            .fs()
            .create(
                ext4_ino(parent),
                bytes(name),
                self.creator(req, mode, umask),
            )
            .or_errno(&self.on_error)
            .and_then(|ino| {
                let entry = self.entry(ino)?;
                if let Err(e) = self.fs().open_inode(ino) {
                    let _ = self.fs().release_inode(ino);
                    return Err(self.on_error.errno(&e));
                }
                Ok(entry)
            });
        self.names_changed(&made, &[parent]);
        match made {
            Ok((attr, generation)) => reply.created(
                &TTL,
                &attr,
                generation,
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(e),
        }
    }

    /// A copy of data (ext4 shares no extents): the engine's `copy_range`, which meets
    /// every rule a write meets. The kernel has already refused a copy into an O_APPEND
    /// descriptor (EBADF) and clamped the length to the source's end and to 4 GiB less a
    /// page, so the count fits the reply.
    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let len = len.min(u64::from(u32::MAX));
        match self.fs().copy_range(
            ext4_ino(ino_in),
            offset_in,
            ext4_ino(ino_out),
            offset_out,
            len,
        ) {
            // OK to cast: at most `len`, which fits.
            Ok(copied) => reply.written(copied as u32),
            Err(e) => reply.error(self.on_error.errno(&e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if let Err(e) = self.on_error.may_change() {
            return reply.error(e);
        }
        let (node, fs, ino) = (ino, self.fs(), ext4_ino(ino));
        let result = match fallocation(mode) {
            Some(Fallocation::Engine(mode)) => fs
                .fallocate(ino, mode, offset, length)
                .or_errno(&self.on_error),
            Some(Fallocation::ZeroKeepingSize) => {
                zero_keeping_size(fs, ino, offset, length).or_errno(&self.on_error)
            }
            None => Err(Errno::EOPNOTSUPP),
        };
        if result == Err(Errno::ENOSPC) {
            // An allocation that filled the disk keeps what it allocated and may have moved
            // the size, but the kernel updates its cached attributes only after a fallocate
            // that succeeds: without this a `stat` showed the old size for up to `TTL`.
            self.attributes_changed(node);
        }
        reply_empty(reply, result);
    }

    /// SEEK_DATA and SEEK_HOLE (`seek`); the kernel moves the offset itself for the rest.
    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let wanted = match whence {
            libc::SEEK_DATA => Seek::Data,
            libc::SEEK_HOLE => Seek::Hole,
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO);
        };
        match seek(self.fs(), ext4_ino(ino), offset, wanted) {
            // OK to cast: an answer is below the size, which fits an i64 (ext4's limit).
            Ok(found) => reply.offset(found as i64),
            Err(SeekError::Beyond) => reply.error(Errno::ENXIO),
            Err(SeekError::Engine(e)) => reply.error(self.on_error.errno(&e)),
        }
    }
}
