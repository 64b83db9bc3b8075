//! The differential test of issue 27: one seeded random sequence of system calls runs on a
//! kernel ext4 loop mount and on an e4 FUSE mount of copies of one image, and every
//! result must be the same — return values, errnos, the stat fields ext4 defines,
//! directory listings (as sets), and the whole trees every few steps and at the end. Then
//! both are unmounted and pass `e2fsck -fn`, and the kernel's view of e4's image equals
//! what the mount showed.
//!
//! The calls: open with flag combinations, write (at an offset or O_APPEND), read,
//! truncate, mkdir, rmdir, unlink, rename (plain, RENAME_NOREPLACE, RENAME_EXCHANGE),
//! link, symlink, readlink, mkfifo, chmod, chown, utimensat (times, UTIME_NOW,
//! UTIME_OMIT), setxattr (CREATE, REPLACE), getxattr and listxattr with size probes and
//! small buffers, removexattr, fallocate (the modes FUSE passes on), lseek
//! SEEK_DATA/SEEK_HOLE, statfs, readdir, and writes until the disk is full. Paths come
//! from a few names in a few directories, so calls meet each other's files and the
//! errors users cause come up: ENOENT, EEXIST, ENOTEMPTY, EISDIR, ENOTDIR, ENAMETOOLONG,
//! ENOSPC, ERANGE, ENODATA, EINVAL.
//!
//! What is not compared, and why (docs/FUSE.md, "Differences from the kernel's ext4"):
//! ctime and times set to "now" (compared as "recent"); inode numbers (both allocate from
//! the same free inodes, but the kernel's choice is its own); how much a write that
//! fills the disk writes (ext4's reservations differ from e4's by a few blocks; the errno
//! is compared); a regular file's st_blocks within two blocks (its extent tree's: the
//! two allocators leave files in different numbers of extents); statfs's f_blocks and free blocks (ext4 counts its metadata out of
//! f_blocks, and shares xattr blocks e4 does not); the sticky bit of non-directories;
//! lseek on directories. The kernel mounts with `noatime` (the FUSE mount does not update atime)
//! and `nodelalloc` (delayed allocation makes st_blocks depend on writeback).
//!
//! Seeds: 4 runs of 400 steps (about 2 s); `E4_DIFF_STEPS` and `E4_DIFF_SEEDS` (a count, or
//! `from..to`) for longer runs. One thread: the kernel's order of two mounts' calls
//! would differ otherwise; the run from several threads compares what does not depend on
//! that order (its doc). Skipped, and said so, without FUSE or loop mounts
//! (failures under `E4_REQUIRE_FUSE=1` and `E4_REQUIRE_KERNEL=1`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use e4_fuse::{MountError, MountOptions};
use e4_testkit::{
    e2fsck_clean, fuse_skipped, kernel_comparison_skipped, make_empty_image, FuseGuard,
    KernelMount, LoopDevice,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rustix::fs::{
    self as rfs, AtFlags, FallocateFlags, IFlags, Mode, OFlags, RenameFlags, SeekFrom, Timespec,
    Timestamps, XattrFlags, CWD, UTIME_NOW, UTIME_OMIT,
};
use rustix::io::Errno;

/// The longest the e4 mount may stay up.
const LIMIT: Duration = Duration::from_secs(120);

/// Directories paths are made in, and the names made in them: "a", "b" and "c" are both,
/// so a path through one of them may meet a file (ENOTDIR) and renames move trees.
const DIRS: [&str; 4] = ["", "a", "a/b", "c"];
const NAMES: [&str; 6] = ["f", "g", "a", "b", "c", "l"];

/// Times before this (2000-01-01) were set by the test and are compared exactly; later
/// ones are "now" on one side or the other and compared as "recent".
const SET_BY_THE_TEST: i64 = 946_684_800;

/// A 16 MiB ext4 with 1 KiB blocks and 256 inodes, so the disk and the inode table both
/// fill up within a run.
const MKE2FS: &[&str] = &["-t", "ext4", "-b", "1024", "-I", "256", "-N", "256"];
const SIZE_MIB: u64 = 16;

fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from[rng.gen_range(0..from.len())]
}

/// A path below the root, now and then one with a name too long for ext4 (256 bytes).
fn path(rng: &mut StdRng) -> String {
    let name = if rng.gen_ratio(1, 40) {
        "n".repeat(256)
    } else {
        pick(rng, &NAMES).to_string()
    };
    match pick(rng, &DIRS) {
        "" => name,
        dir => format!("{dir}/{name}"),
    }
}

fn dir(rng: &mut StdRng) -> String {
    pick(rng, &DIRS).to_string()
}

#[derive(Debug, Clone, Copy)]
enum Time {
    Now,
    Omit,
    At(i64, i64),
}

#[derive(Debug, Clone)]
enum Op {
    Open {
        path: String,
        flags: OFlags,
        mode: u32,
    },
    Write {
        path: String,
        offset: u64,
        len: usize,
        seed: u8,
        append: bool,
    },
    Read {
        path: String,
        offset: u64,
        len: usize,
    },
    Truncate {
        path: String,
        size: u64,
    },
    Mkdir {
        path: String,
        mode: u32,
    },
    Rmdir {
        path: String,
    },
    Unlink {
        path: String,
    },
    Rename {
        from: String,
        to: String,
        flags: RenameFlags,
    },
    Link {
        from: String,
        to: String,
    },
    Symlink {
        target: String,
        path: String,
    },
    Readlink {
        path: String,
    },
    Mkfifo {
        path: String,
    },
    Chmod {
        path: String,
        mode: u32,
    },
    Chown {
        path: String,
        uid: Option<u32>,
        gid: Option<u32>,
    },
    Utimens {
        path: String,
        atime: Time,
        mtime: Time,
    },
    SetXattr {
        path: String,
        name: String,
        len: usize,
        flags: XattrFlags,
    },
    GetXattr {
        path: String,
        name: String,
        room: usize,
    },
    ListXattr {
        path: String,
        room: usize,
    },
    RemoveXattr {
        path: String,
        name: String,
    },
    Fallocate {
        path: String,
        mode: FallocateFlags,
        offset: u64,
        len: u64,
    },
    Seek {
        path: String,
        offset: u64,
        data: bool,
    },
    Stat {
        path: String,
    },
    Statfs,
    /// `ftruncate` through a descriptor opened with O_APPEND (the only kind an
    /// append-only file opens for writing).
    TruncateAppending {
        path: String,
        size: u64,
    },
    /// `fallocate` through a descriptor opened with O_APPEND.
    FallocateAppending {
        path: String,
        mode: FallocateFlags,
    },
    /// Opens with O_APPEND, takes O_APPEND away (`fcntl`) and writes at offset 0: ext4
    /// refuses the `fcntl` on an append-only file; through FUSE the kernel does not know
    /// the flag, so e4 must refuse the write.
    WriteAfterDroppingAppend {
        path: String,
    },
    /// `copy_file_range` of `len` bytes from `from` at `offset_in` to `to` at `offset_out`.
    CopyRange {
        from: String,
        to: String,
        offset_in: u64,
        offset_out: u64,
        len: usize,
    },
    /// `setfacl`: sets the access (or default) ACL to `entries` (tag, permissions, id),
    /// in the form `setxattr` takes; no entries removes it.
    SetAcl {
        path: String,
        default: bool,
        entries: Vec<(u16, u16, u32)>,
    },
    /// `chattr =FLAGS`: the flags of [`CHATTR_FLAGS`] become `flags`, the others stay.
    SetFlags {
        path: String,
        flags: u32,
    },
    List {
        dir: String,
    },
    Fill,
}

const OPEN_FLAGS: [OFlags; 8] = [
    OFlags::RDONLY,
    OFlags::WRONLY.union(OFlags::CREATE),
    OFlags::RDWR.union(OFlags::CREATE).union(OFlags::EXCL),
    OFlags::WRONLY.union(OFlags::TRUNC),
    OFlags::RDONLY.union(OFlags::DIRECTORY),
    OFlags::WRONLY
        .union(OFlags::CREATE)
        .union(OFlags::TRUNC)
        .union(OFlags::APPEND),
    OFlags::RDWR,
    OFlags::WRONLY
        .union(OFlags::CREATE)
        .union(OFlags::DIRECTORY),
];

const XATTR_NAMES: [&str; 4] = [
    "user.a",
    "user.b",
    "user.long_name_for_a_value",
    "trusted.t",
];

const FALLOCATE_MODES: [FallocateFlags; 5] = [
    FallocateFlags::empty(),
    FallocateFlags::KEEP_SIZE,
    FallocateFlags::PUNCH_HOLE.union(FallocateFlags::KEEP_SIZE),
    FallocateFlags::ZERO_RANGE,
    FallocateFlags::ZERO_RANGE.union(FallocateFlags::KEEP_SIZE),
];

/// The flags the tests set: immutable, append-only, sync, nodump, noatime, dirsync.
const CHATTR_FLAGS: u32 = IFlags::IMMUTABLE
    .union(IFlags::APPEND)
    .union(IFlags::SYNC)
    .union(IFlags::NODUMP)
    .union(IFlags::NOATIME)
    .union(IFlags::DIRSYNC)
    .bits();

/// Some of [`CHATTR_FLAGS`], none half of the time.
fn chattr_flags(rng: &mut StdRng) -> u32 {
    if rng.gen_ratio(1, 2) {
        return 0;
    }
    [
        IFlags::IMMUTABLE,
        IFlags::APPEND,
        IFlags::SYNC,
        IFlags::NODUMP,
        IFlags::NOATIME,
        IFlags::DIRSYNC,
        IFlags::IMMUTABLE | IFlags::NODUMP,
        IFlags::APPEND | IFlags::SYNC,
    ][rng.gen_range(0..8)]
    .bits()
}

fn time(rng: &mut StdRng) -> Time {
    match rng.gen_range(0..4) {
        0 => Time::Now,
        1 => Time::Omit,
        _ => Time::At(
            rng.gen_range(0..SET_BY_THE_TEST),
            rng.gen_range(0..1_000_000_000),
        ),
    }
}

/// A file offset: mostly in the first blocks, sometimes far.
fn offset(rng: &mut StdRng) -> u64 {
    if rng.gen_ratio(1, 8) {
        rng.gen_range(0..4 << 20)
    } else {
        rng.gen_range(0..40_000)
    }
}

fn random_op(rng: &mut StdRng) -> Op {
    match rng.gen_range(0..100) {
        0..=9 => Op::Open {
            path: path(rng),
            flags: OPEN_FLAGS[rng.gen_range(0..OPEN_FLAGS.len())],
            mode: rng.gen_range(0..0o10000),
        },
        10..=21 => Op::Write {
            path: path(rng),
            offset: offset(rng),
            len: rng.gen_range(1..20_000),
            seed: rng.gen(),
            append: rng.gen_ratio(1, 4),
        },
        22..=26 => Op::Read {
            path: path(rng),
            offset: offset(rng),
            len: rng.gen_range(1..50_000),
        },
        27..=30 => Op::Truncate {
            path: path(rng),
            size: offset(rng),
        },
        31..=37 => Op::Mkdir {
            path: path(rng),
            mode: rng.gen_range(0o700..0o10000),
        },
        38..=41 => Op::Rmdir { path: path(rng) },
        42..=46 => Op::Unlink { path: path(rng) },
        47..=53 => Op::Rename {
            from: path(rng),
            to: path(rng),
            flags: [
                RenameFlags::empty(),
                RenameFlags::NOREPLACE,
                RenameFlags::EXCHANGE,
            ][rng.gen_range(0..3)],
        },
        54..=56 => Op::Link {
            from: path(rng),
            to: path(rng),
        },
        57..=59 => Op::Symlink {
            // Relative and never above the root: a target that leaves the mount would be
            // followed into the host's filesystem, one file for both sides.
            target: ["f", "a/b", "dangling", &"t".repeat(59), &"long/".repeat(60)]
                [rng.gen_range(0..5)]
            .to_string(),
            path: path(rng),
        },
        60..=61 => Op::Readlink { path: path(rng) },
        62 => Op::Mkfifo { path: path(rng) },
        63..=65 => Op::Chmod {
            path: path(rng),
            mode: rng.gen_range(0..0o10000),
        },
        66..=67 => Op::Chown {
            path: path(rng),
            uid: [None, Some(0), Some(1000)][rng.gen_range(0..3)],
            gid: [None, Some(0), Some(100)][rng.gen_range(0..3)],
        },
        68..=70 => Op::Utimens {
            path: path(rng),
            atime: time(rng),
            mtime: time(rng),
        },
        71..=76 => Op::SetXattr {
            path: path(rng),
            name: pick(rng, &XATTR_NAMES).to_string(),
            len: [0, 5, 100, 700, 2000][rng.gen_range(0..5)],
            flags: [XattrFlags::empty(), XattrFlags::CREATE, XattrFlags::REPLACE]
                [rng.gen_range(0..3)],
        },
        77..=79 => Op::GetXattr {
            path: path(rng),
            name: pick(rng, &XATTR_NAMES).to_string(),
            room: [0, 3, 4096][rng.gen_range(0..3)],
        },
        80..=81 => Op::ListXattr {
            path: path(rng),
            room: [0, 3, 4096][rng.gen_range(0..3)],
        },
        82..=83 => Op::RemoveXattr {
            path: path(rng),
            name: pick(rng, &XATTR_NAMES).to_string(),
        },
        84..=87 => Op::Fallocate {
            path: path(rng),
            mode: FALLOCATE_MODES[rng.gen_range(0..FALLOCATE_MODES.len())],
            offset: offset(rng),
            len: rng.gen_range(1..30_000),
        },
        88..=89 => Op::Seek {
            path: path(rng),
            offset: rng.gen_range(0..60_000),
            data: rng.gen(),
        },
        90..=93 => Op::Stat { path: path(rng) },
        94 => Op::Statfs,
        95..=98 => Op::List { dir: dir(rng) },
        _ => Op::Fill,
    }
}

/// What a call returned, as text to compare.
type Outcome = Result<String, Errno>;

fn bytes_of(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn hash_of(data: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

fn recent_or_exact(seconds: i64, nanoseconds: i64) -> String {
    if seconds < SET_BY_THE_TEST {
        format!("{seconds}.{nanoseconds:09}")
    } else {
        "recent".into()
    }
}

/// The stat fields ext4 defines and both sides must agree on (see the module doc). The
/// sticky bit of a non-directory, which means nothing on Linux, is left out: when a chown
/// drops set-user-ID, the kernel's FUSE sends the new mode without it (docs/FUSE.md).
fn describe(st: &rfs::Stat) -> String {
    let mode = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        st.st_mode
    } else {
        st.st_mode & !libc::S_ISVTX
    };
    format!(
        "mode {:o} nlink {} uid {} gid {} size {} blocks {} rdev {:x} atime {} mtime {}",
        mode,
        st.st_nlink,
        st.st_uid,
        st.st_gid,
        st.st_size,
        st.st_blocks,
        st.st_rdev,
        recent_or_exact(st.st_atime, st.st_atime_nsec as i64),
        recent_or_exact(st.st_mtime, st.st_mtime_nsec as i64),
    )
}

fn timespec(t: Time) -> Timespec {
    match t {
        Time::Now => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
        Time::Omit => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        Time::At(tv_sec, tv_nsec) => Timespec { tv_sec, tv_nsec },
    }
}

/// Every open is non-blocking: a FIFO opened with no partner would wait forever.
const OPEN_ALWAYS: OFlags = OFlags::CLOEXEC.union(OFlags::NONBLOCK);

fn open(root: &Path, path: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
    rfs::open(root.join(path), flags | OPEN_ALWAYS, Mode::from(0o644))
}

/// Writes until the disk is full: what both sides must say is ENOSPC (how much fitted
/// is ext4's reservations against e4's; see the module doc). The file is then removed,
/// and its blocks waited for: e4 frees them when the kernel's RELEASE and FORGET for it
/// arrive, which may be after `unlink` returned (the lag the free inode count shows too).
fn fill(root: &Path) -> Outcome {
    let free_before = rfs::statvfs(root)?.f_bfree;
    let name = root.join("filler");
    let fd = rfs::open(&name, OFlags::WRONLY | OFlags::CREATE, Mode::from(0o644))?;
    let chunk = vec![0x5a; 64 << 10];
    let mut result = Ok("never full".to_string());
    for _ in 0..(2 * SIZE_MIB * 16) {
        if let Err(e) = rustix::io::write(&fd, &chunk) {
            result = Err(e);
            break;
        }
    }
    drop(fd);
    rfs::unlink(&name)?;
    // Within a few blocks: what the allocator keeps ahead for other files may differ.
    for _ in 0..100 {
        if rfs::statvfs(root)?.f_bfree + 16 >= free_before {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    result
}

fn xattr_list(list: &[u8]) -> String {
    let names: BTreeSet<&[u8]> = list.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    format!("{names:?}")
}

/// Runs `op` under `root`.
fn run(op: &Op, root: &Path) -> Outcome {
    let at = |p: &str| root.join(p);
    Ok(match op {
        Op::Open { path, flags, mode } => {
            rfs::open(at(path), *flags | OPEN_ALWAYS, Mode::from(*mode))?;
            "opened".into()
        }
        Op::Write {
            path,
            offset,
            len,
            seed,
            append,
        } => {
            let data = bytes_of(*seed, *len);
            let n = if *append {
                rustix::io::write(open(root, path, OFlags::WRONLY | OFlags::APPEND)?, &data)?
            } else {
                rustix::io::pwrite(open(root, path, OFlags::WRONLY)?, &data, *offset)?
            };
            format!("wrote {n}")
        }
        Op::Read { path, offset, len } => {
            let mut buf = vec![0; *len];
            let n = rustix::io::pread(open(root, path, OFlags::RDONLY)?, &mut buf, *offset)?;
            format!("read {n} bytes, hash {:x}", hash_of(&buf[..n]))
        }
        Op::Truncate { path, size } => {
            rfs::ftruncate(open(root, path, OFlags::WRONLY)?, *size)?;
            "truncated".into()
        }
        Op::Mkdir { path, mode } => {
            rfs::mkdir(at(path), Mode::from(*mode))?;
            "made".into()
        }
        Op::Rmdir { path } => {
            rfs::rmdir(at(path))?;
            "removed".into()
        }
        Op::Unlink { path } => {
            rfs::unlink(at(path))?;
            "unlinked".into()
        }
        Op::Rename { from, to, flags } => {
            rfs::renameat_with(CWD, at(from), CWD, at(to), *flags)?;
            "renamed".into()
        }
        Op::Link { from, to } => {
            rfs::link(at(from), at(to))?;
            "linked".into()
        }
        Op::Symlink { target, path } => {
            rfs::symlink(target, at(path))?;
            "made".into()
        }
        Op::Readlink { path } => format!("{:?}", rfs::readlink(at(path), Vec::new())?),
        Op::Mkfifo { path } => {
            rfs::mkfifoat(CWD, at(path), Mode::from(0o640))?;
            "made".into()
        }
        Op::Chmod { path, mode } => {
            rfs::chmod(at(path), Mode::from(*mode))?;
            "changed".into()
        }
        Op::Chown { path, uid, gid } => {
            let uid = uid.map(rfs::Uid::from_raw);
            let gid = gid.map(rfs::Gid::from_raw);
            rfs::chown(at(path), uid, gid)?;
            "changed".into()
        }
        Op::Utimens {
            path,
            atime: Time::Now,
            mtime: Time::Now,
        } => {
            // `utimes(NULL)`, the kernel's ATTR_TOUCH: the kernel's FUSE sends it as two
            // UTIME_NOWs, and an append-only file takes it (not two explicit UTIME_NOWs,
            // which ext4 refuses there and FUSE cannot tell apart; docs/FUSE.md).
            let c_path = std::ffi::CString::new(at(path).into_os_string().into_encoded_bytes())
                .map_err(|_| Errno::INVAL)?;
            // SAFETY: a NUL-terminated path and a null `times`, which utimensat allows.
            let rc =
                unsafe { libc::utimensat(libc::AT_FDCWD, c_path.as_ptr(), std::ptr::null(), 0) };
            if rc != 0 {
                return Err(Errno::from_raw_os_error(
                    std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
                ));
            }
            "touched".into()
        }
        Op::Utimens { path, atime, mtime } => {
            let times = Timestamps {
                last_access: timespec(*atime),
                last_modification: timespec(*mtime),
            };
            rfs::utimensat(CWD, at(path), &times, AtFlags::empty())?;
            "changed".into()
        }
        Op::SetXattr {
            path,
            name,
            len,
            flags,
        } => {
            rfs::setxattr(at(path), name.as_str(), &bytes_of(*len as u8, *len), *flags)?;
            "set".into()
        }
        Op::GetXattr { path, name, room } => {
            if *room == 0 {
                format!("size {}", rfs::getxattr_query(at(path), name.as_str())?)
            } else {
                let mut buf = vec![0; *room];
                let n = rfs::getxattr(at(path), name.as_str(), &mut buf[..])?;
                format!("{n} bytes, hash {:x}", hash_of(&buf[..n]))
            }
        }
        Op::ListXattr { path, room } => {
            if *room == 0 {
                format!("size {}", rfs::listxattr_query(at(path))?)
            } else {
                let mut buf = vec![0; *room];
                let n = rfs::listxattr(at(path), &mut buf[..])?;
                xattr_list(&buf[..n])
            }
        }
        Op::RemoveXattr { path, name } => {
            rfs::removexattr(at(path), name.as_str())?;
            "removed".into()
        }
        Op::Fallocate {
            path,
            mode,
            offset,
            len,
        } => {
            rfs::fallocate(open(root, path, OFlags::WRONLY)?, *mode, *offset, *len)?;
            "allocated".into()
        }
        Op::Seek { path, offset, data } => {
            let fd = open(root, path, OFlags::RDONLY)?;
            // A directory's lseek never reaches a FUSE server (the kernel's FUSE answers
            // it from the size, ext4 from its hash positions): not compared.
            if rfs::fstat(&fd)?.st_mode & libc::S_IFMT == libc::S_IFDIR {
                return Ok("a directory".into());
            }
            // ext4 takes fallocated (unwritten) blocks whose pages its cache holds, even
            // clean ones a read left, for data; the cache is a kernel's, not the image's,
            // so its clean pages are dropped first (dirty ones are written back).
            rfs::fadvise(&fd, 0, None, rfs::Advice::DontNeed)?;
            let to = if *data {
                SeekFrom::Data(*offset)
            } else {
                SeekFrom::Hole(*offset)
            };
            format!("at {}", rfs::seek(fd, to)?)
        }
        Op::Stat { path } => describe(&rfs::lstat(at(path))?),
        Op::Statfs => {
            let s = rfs::statvfs(root)?;
            // Not f_blocks: e4 counts every block, ext4 leaves out its metadata's. Not
            // the free blocks either: ext4 shares an xattr block among inodes whose
            // xattrs are the same, e4 does not (docs/FUSE.md).
            format!(
                "bsize {} files {} ffree {} namemax {}",
                s.f_bsize, s.f_files, s.f_ffree, s.f_namemax
            )
        }
        Op::List { dir } => {
            let mut names = BTreeSet::new();
            for entry in std::fs::read_dir(at(dir)).map_err(errno_of)? {
                let entry = entry.map_err(errno_of)?;
                let kind = entry.file_type().map_err(errno_of)?;
                names.insert(format!("{:?} {kind:?}", entry.file_name()));
            }
            format!("{names:?}")
        }
        Op::TruncateAppending { path, size } => {
            rfs::ftruncate(open(root, path, OFlags::WRONLY | OFlags::APPEND)?, *size)?;
            "truncated".into()
        }
        Op::FallocateAppending { path, mode } => {
            let fd = open(root, path, OFlags::WRONLY | OFlags::APPEND)?;
            rfs::fallocate(fd, *mode, 100, 5000)?;
            "allocated".into()
        }
        Op::WriteAfterDroppingAppend { path } => {
            let fd = open(root, path, OFlags::WRONLY | OFlags::APPEND)?;
            rustix::fs::fcntl_setfl(&fd, OFlags::WRONLY | OPEN_ALWAYS)?;
            format!("wrote {}", rustix::io::pwrite(&fd, b"over", 0)?)
        }
        Op::CopyRange {
            from,
            to,
            offset_in,
            offset_out,
            len,
        } => {
            let source = open(root, from, OFlags::RDONLY)?;
            let target = open(root, to, OFlags::WRONLY)?;
            let (mut offset_in, mut offset_out) = (*offset_in, *offset_out);
            let n = rfs::copy_file_range(
                &source,
                Some(&mut offset_in),
                &target,
                Some(&mut offset_out),
                *len,
            )?;
            format!("copied {n}")
        }
        Op::SetAcl {
            path,
            default,
            entries,
        } => {
            let mut value = 2u32.to_le_bytes().to_vec();
            for &(tag, perm, id) in entries {
                value.extend_from_slice(&tag.to_le_bytes());
                value.extend_from_slice(&perm.to_le_bytes());
                value.extend_from_slice(&id.to_le_bytes());
            }
            let name = if *default {
                "system.posix_acl_default"
            } else {
                "system.posix_acl_access"
            };
            rfs::setxattr(at(path), name, &value, XattrFlags::empty())?;
            "set".into()
        }
        Op::SetFlags { path, flags } => {
            let fd = open(root, path, OFlags::RDONLY)?;
            let old = rfs::ioctl_getflags(&fd)?.bits();
            rfs::ioctl_setflags(&fd, IFlags::from_bits_retain(old & !CHATTR_FLAGS | flags))?;
            format!("flags {:x}", rfs::ioctl_getflags(&fd)?.bits())
        }
        Op::Fill => return fill(root),
    })
}

/// Whether two different outcomes are the difference docs/FUSE.md explains: removing (or
/// renaming away) a protected name of the wrong type is EPERM on ext4, whose VFS checks
/// the flags first, and ENOTDIR or EISDIR through FUSE, whose VFS checks the type before
/// the server sees the request.
fn explained(op: &Op, on_kernel: &Outcome, on_e4: &Outcome) -> bool {
    matches!(op, Op::Rmdir { .. } | Op::Unlink { .. } | Op::Rename { .. })
        && *on_kernel == Err(Errno::PERM)
        && matches!(on_e4, Err(Errno::NOTDIR | Errno::ISDIR))
}

fn errno_of(e: std::io::Error) -> Errno {
    Errno::from_io_error(&e).unwrap_or(Errno::IO)
}

/// Everything both sides must agree on under `root`: each path's stat, file contents,
/// link targets and xattrs, one line each, in name order.
fn tree(root: &Path) -> String {
    let mut out = format!(".: {}\n", describe(&rfs::lstat(root).unwrap()));
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let st = rfs::lstat(&path).unwrap();
            let shown = path.strip_prefix(root).unwrap().display().to_string();
            let _ = write!(out, "{shown}: {}", describe(&st));
            let kind = st.st_mode & libc::S_IFMT;
            if kind == libc::S_IFREG {
                let _ = write!(out, " data {:x}", hash_of(&std::fs::read(&path).unwrap()));
            } else if kind == libc::S_IFLNK {
                let _ = write!(out, " -> {:?}", rfs::readlink(&path, Vec::new()).unwrap());
            } else if kind == libc::S_IFDIR {
                dirs.push(path.clone());
            }
            if kind == libc::S_IFREG || kind == libc::S_IFDIR {
                let fd = rfs::open(&path, OFlags::RDONLY | OPEN_ALWAYS, Mode::empty()).unwrap();
                let _ = write!(out, " flags {:x}", rfs::ioctl_getflags(&fd).unwrap().bits());
            }
            let mut list = vec![0; 65536];
            let n = rfs::llistxattr(&path, &mut list[..]).unwrap();
            for name in list[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
                let mut value = vec![0; 65536];
                let len = rfs::lgetxattr(&path, name, &mut value[..]).unwrap();
                let _ = write!(
                    out,
                    " {}={:x}",
                    String::from_utf8_lossy(name),
                    hash_of(&value[..len])
                );
            }
            out.push('\n');
        }
    }
    out
}

/// Blocks an extent tree may take beyond its inode (1 KiB blocks, in 512-byte units).
const TREE_BLOCKS: u64 = 2 * 2;

/// Whether `a` and `b` (stat lines, one per file) are the same but for regular files'
/// st_blocks differing by at most [`TREE_BLOCKS`]: ext4 and e4 allocate alike but not
/// block for block, so one may leave a file in more extents than fit its inode and need
/// a tree block where the other does not.
fn same_but_tree_blocks(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    a.len() == b.len()
        && a.iter().zip(&b).all(|(a, b)| {
            let blocks = |line: &str| -> Option<(String, u64)> {
                let at = line.find(" blocks ")?;
                let rest = &line[at + 8..];
                let end = rest.find(' ')?;
                let others = format!("{}{}", &line[..at], &rest[end..]);
                Some((others, rest[..end].parse().ok()?))
            };
            a == b
                || matches!((blocks(a), blocks(b)), (Some((x, m)), Some((y, n)))
                    if x == y && x.contains("mode 10") && m.abs_diff(n) <= TREE_BLOCKS)
        })
}

/// The seeds to run: environment variable `var` as a count or `from..to`, else
/// `default`.
fn seeds(var: &str, default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    let Ok(given) = std::env::var(var) else {
        return default;
    };
    match given.split_once("..") {
        Some((from, to)) => from.parse().unwrap()..to.parse().unwrap(),
        None => 0..given.parse().unwrap(),
    }
}

#[test]
fn random_system_calls_do_on_e4s_mount_what_they_do_on_the_kernels_ext4() {
    let steps: usize = std::env::var("E4_DIFF_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    for seed in seeds("E4_DIFF_SEEDS", 0..4) {
        let mut rng = StdRng::seed_from_u64(seed);
        let ops = (0..steps).map(|_| random_op(&mut rng));
        let rerun = format!("E4_DIFF_SEEDS={seed}..{}", seed + 1);
        if !compare(&format!("seed {seed}"), &rerun, "", ops) {
            return;
        }
    }
}

/// For the runs from several threads: 64 MiB and 4,096 inodes, so that neither fills up
/// (which thread meets a full disk first would depend on the schedule).
const MKE2FS_THREADS: &[&str] = &["-t", "ext4", "-b", "1024", "-I", "256", "-N", "4096"];
const SIZE_MIB_THREADS: u64 = 64;

/// Several threads of random calls at once, each in a directory of its own (`w0`, `w1`,
/// ...) on both mounts, e4's served by as many FUSE worker threads: the calls of different
/// threads interleave as the scheduler has it, differently on the two mounts, so what is
/// compared is what does not depend on that order. Within its directory each thread's
/// calls meet only each other, so every outcome is compared as in the single-threaded
/// runs, and each directory's tree every 25 calls. Between its random calls each thread
/// also creates, writes, renames, links and unlinks names of its own in one directory all
/// threads share (`s`, which grows into an indexed directory while they race in it):
/// each outcome is compared, and at the end every entry of `s` with its stat and
/// contents (not `s`'s own size: how an indexed directory splits depends on the order of
/// its inserts), before `s` is removed on both; then the free inode counts of both mounts
/// (every unlinked inode freed once its last FORGET came). Then the whole trees,
/// `e2fsck -fn`, the free inode counts of the images and the kernel's view of e4's image. Left out: statfs and filling
/// the disk (both are the whole filesystem's, which every thread changes).
/// `E4_DIFF_THREAD_SEEDS` (a count or `from..to`) and `E4_DIFF_THREAD_STEPS` for longer
/// runs.
#[test]
fn random_calls_from_several_threads_end_on_e4s_mount_where_they_end_on_the_kernels_ext4() {
    let steps: usize = std::env::var("E4_DIFF_THREAD_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(250);
    for seed in seeds("E4_DIFF_THREAD_SEEDS", 0..1) {
        let label = format!("{THREADS} threads, seed {seed}");
        let options = format!("threads={THREADS}");
        let drive = |k: &Path, e: &Path| in_threads(seed, steps, k, e);
        let (mke2fs, size) = (MKE2FS_THREADS, SIZE_MIB_THREADS);
        if !on_both_mounts(&label, mke2fs, size, &options, Ends::Same, drive) {
            return;
        }
    }
}

/// Threads of the run from several threads, and FUSE worker threads of its e4 mount.
const THREADS: u64 = 4;

/// The run from several threads on the kernel's mount `k` and e4's `e`.
fn in_threads(seed: u64, steps: usize, k: &Path, e: &Path) -> Result<u64, String> {
    for root in [k, e] {
        std::fs::create_dir(root.join("s")).unwrap();
        for w in 0..THREADS {
            std::fs::create_dir(root.join(format!("w{w}"))).unwrap();
        }
    }
    let total = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|w| {
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * THREADS + w);
                    let mut shared = shared_dir_calls(w).into_iter();
                    // A random call, then one in the shared directory, while both last.
                    let ops: Vec<Op> = (0..steps)
                        .map(|_| random_op(&mut rng))
                        .filter(|op| !matches!(op, Op::Statfs | Op::Fill))
                        .flat_map(|op| std::iter::once(op).chain(shared.next()))
                        .collect();
                    let ops = ops.into_iter().chain(shared);
                    let rerun = format!("E4_DIFF_THREAD_SEEDS={seed}..{}, thread {w}", seed + 1);
                    let own = format!("w{w}");
                    in_step(&rerun, ops, &k.join(&own), &e.join(&own))
                        .map_err(|failure| format!("thread {w}: {failure}"))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a worker panicked"))
            .sum::<Result<u64, String>>()
    })?;
    // The shared directory's entries: its tree less its own line (the first).
    let entries = |root: &Path| -> String {
        let listed = tree(&root.join("s"));
        listed.lines().skip(1).collect::<Vec<_>>().join("\n")
    };
    let (on_kernel, on_e4) = (entries(k), entries(e));
    if !same_but_tree_blocks(&on_kernel, &on_e4) {
        return Err(format!(
            "the shared directory differs:\nkernel:\n{on_kernel}\ne4:\n{on_e4}"
        ));
    }
    for root in [k, e] {
        std::fs::remove_dir_all(root.join("s")).unwrap();
    }
    // Every unlinked inode freed on both, once the kernel has sent its FORGETs (at most
    // 2 s; dropping unused dentries and inodes makes it send them).
    let free_inodes = |root: &Path| rustix::fs::statvfs(root).unwrap().f_ffree;
    for _ in 0..40 {
        if free_inodes(k) == free_inodes(e) {
            return Ok(total);
        }
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "2");
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "free inodes at the end: the kernel's ext4 {}, e4 {}",
        free_inodes(k),
        free_inodes(e)
    ))
}

/// Thread `w`'s calls in the shared directory `s` (paths from the thread's own directory):
/// 60 names of its own made, written, a third renamed, a quarter linked, a fifth unlinked.
fn shared_dir_calls(w: u64) -> Vec<Op> {
    let name = |i: u64, suffix: &str| format!("../s/w{w}-{i}{suffix}");
    let mut calls = Vec::new();
    for i in 0..60 {
        calls.push(Op::Open {
            path: name(i, ""),
            flags: OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            mode: 0o644,
        });
        calls.push(Op::Write {
            path: name(i, ""),
            offset: 0,
            len: 100 + 37 * i as usize,
            seed: (w * 60 + i) as u8,
            append: false,
        });
        if i % 3 == 0 {
            calls.push(Op::Rename {
                from: name(i, ""),
                to: name(i, "-renamed"),
                flags: RenameFlags::empty(),
            });
        }
        if i % 4 == 1 {
            calls.push(Op::Link {
                from: name(i, ""),
                to: name(i, "-link"),
            });
        }
        if i % 5 == 2 {
            calls.push(Op::Unlink {
                path: name(i - 1, ""),
            });
        }
    }
    calls
}

/// Several threads of random calls at once on the *same* names (the paths of the
/// single-threaded runs, all from the root), on both mounts, e4's served by as many FUSE
/// worker threads. Which call meets which state depends on the schedule, so outcomes are
/// not compared call by call; what must hold under any interleaving is: every result is
/// one the kernel's ext4 gives for that call in some state of these names
/// ([`ext4_could_give`], a table checked against the kernel's own outcomes in the same
/// run, which must fit it too); no call hangs (the mount's guard); and at the end each
/// image passes `e2fsck -fn` and the kernel's view of e4's image is the tree the mount
/// showed. Left out, as in the run above: statfs and filling the disk.
/// `E4_DIFF_SAME_SEEDS` (a count or `from..to`) and `E4_DIFF_SAME_STEPS` for longer runs.
#[test]
fn random_calls_from_several_threads_on_the_same_names_give_what_the_kernels_ext4_could() {
    let steps: usize = std::env::var("E4_DIFF_SAME_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for seed in seeds("E4_DIFF_SAME_SEEDS", 0..1) {
        let label = format!("{THREADS} threads on the same names, seed {seed}");
        let options = format!("threads={THREADS}");
        let (mke2fs, size) = (MKE2FS_THREADS, SIZE_MIB_THREADS);
        let drive = |k: &Path, e: &Path| on_the_same_names(seed, steps, k, e);
        if !on_both_mounts(&label, mke2fs, size, &options, Ends::EachItsOwn, drive) {
            return;
        }
    }
}

/// The run on the same names: each thread makes `steps` random calls, each on the
/// kernel's mount `k`, then on e4's `e`, and checks both outcomes.
fn on_the_same_names(seed: u64, steps: usize, k: &Path, e: &Path) -> Result<u64, String> {
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|w| {
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * THREADS + w);
                    let mut log = Vec::new();
                    let ops = (0..steps)
                        .map(|_| random_op(&mut rng))
                        .filter(|op| !matches!(op, Op::Statfs | Op::Fill));
                    for (step, op) in ops.enumerate() {
                        for (side, root) in [("the kernel's ext4", k), ("e4", e)] {
                            let outcome = run(&op, root);
                            log.push(format!("{step}: {side}: {op:?} -> {outcome:?}"));
                            if outcome
                                .as_ref()
                                .is_err_and(|&errno| !ext4_could_give(&op, errno))
                            {
                                let recent = log[log.len().saturating_sub(20)..].join("\n");
                                return Err(format!(
                                    "thread {w}: {side} answered {outcome:?}, which ext4 gives \
                                     that call in no state (E4_DIFF_SAME_SEEDS={seed}..{}):\n\
                                     {recent}",
                                    seed + 1
                                ));
                            }
                        }
                    }
                    Ok(log.len() as u64 / 2)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a worker panicked"))
            .sum()
    })
}

/// Whether the kernel's ext4 answers `errno` to `op` in some state of the names the
/// random calls use (the errors of `path_resolution(7)` and of each call's manual page
/// that these calls can meet, as root, without inode flags or a full disk... but ENOSPC,
/// which an xattr too large for its block gives).
fn ext4_could_give(op: &Op, errno: Errno) -> bool {
    // Any path: a component missing, or a file where a directory must be, a symlink loop
    // (a symlink "a" to "a/b"), a name of 256 bytes.
    if [Errno::NOENT, Errno::NOTDIR, Errno::LOOP, Errno::NAMETOOLONG].contains(&errno) {
        return true;
    }
    let also: &[Errno] = match op {
        // O_EXCL, writing a directory, a FIFO without a reader (non-blocking), O_CREAT
        // with O_DIRECTORY.
        Op::Open { .. } => &[Errno::EXIST, Errno::ISDIR, Errno::NXIO, Errno::INVAL],
        Op::Write { .. } => &[Errno::ISDIR, Errno::NXIO, Errno::NOSPC],
        // Reading a directory, a FIFO (pread).
        Op::Read { .. } => &[Errno::ISDIR, Errno::SPIPE],
        // A FIFO (ftruncate), a directory or a FIFO without a reader (the open).
        Op::Truncate { .. } => &[Errno::INVAL, Errno::ISDIR, Errno::NXIO],
        Op::Mkdir { .. } | Op::Symlink { .. } | Op::Mkfifo { .. } => &[Errno::EXIST],
        Op::Rmdir { .. } => &[Errno::NOTEMPTY],
        Op::Unlink { .. } => &[Errno::ISDIR],
        // RENAME_NOREPLACE, a non-empty directory replaced, a directory over a file (and
        // back), a directory into itself.
        Op::Rename { .. } => &[Errno::EXIST, Errno::NOTEMPTY, Errno::ISDIR, Errno::INVAL],
        // A hard link to a directory.
        Op::Link { .. } => &[Errno::EXIST, Errno::PERM],
        Op::Readlink { .. } => &[Errno::INVAL],
        // XATTR_REPLACE of none, XATTR_CREATE of one there, a value too large for the
        // inode and its block, user.* on a FIFO or symlink's target that is one.
        Op::SetXattr { .. } => &[Errno::NODATA, Errno::EXIST, Errno::NOSPC, Errno::PERM],
        Op::GetXattr { .. } => &[Errno::NODATA, Errno::RANGE],
        Op::ListXattr { .. } => &[Errno::RANGE],
        Op::RemoveXattr { .. } => &[Errno::NODATA, Errno::PERM],
        // A directory or a FIFO without a reader (the open), a FIFO (fallocate).
        Op::Fallocate { .. } => &[Errno::ISDIR, Errno::NXIO, Errno::SPIPE, Errno::NOSPC],
        // Past the end (SEEK_DATA), a FIFO.
        Op::Seek { .. } => &[Errno::NXIO, Errno::SPIPE],
        _ => &[],
    };
    also.contains(&errno)
}

/// Runs `ops` on both mounts of copies of one fresh image and compares as the module doc
/// says; `label` names the run in messages, `rerun` says how to run it alone. False when
/// a mount is impossible here (reported).
fn compare(label: &str, rerun: &str, e4_options: &str, ops: impl Iterator<Item = Op>) -> bool {
    let options = format!("threads=1,{e4_options}");
    on_both_mounts(label, MKE2FS, SIZE_MIB, &options, Ends::Same, |k, e| {
        in_step(rerun, ops, k, e)
    })
}

/// Runs `ops` on `k` (the kernel's) and `e` (e4's), one call on each in turn, comparing
/// every outcome and, every 25 calls and at the end, the trees; the steps run, or what
/// differed with the last 30 calls and how to rerun them.
fn in_step(rerun: &str, ops: impl Iterator<Item = Op>, k: &Path, e: &Path) -> Result<u64, String> {
    let mut log: Vec<String> = Vec::new();
    let mut failure = None;
    let mut ops = ops.peekable();
    let mut steps = 0;
    while let Some(op) = ops.next() {
        let step = steps;
        steps += 1;
        let (mut on_kernel, mut on_e4) = (run(&op, k), run(&op, e));
        // The free inode count may lag a call by a moment: e4 frees an unlinked inode when
        // the kernel's FORGET for it arrives, which the kernel sends after the call
        // that unlinked it has returned.
        for _ in 0..20 {
            if on_kernel == on_e4 || !matches!(op, Op::Statfs) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            (on_kernel, on_e4) = (run(&op, k), run(&op, e));
        }
        log.push(format!("{step}: {op:?} -> {on_kernel:?}"));
        let same = match (&on_kernel, &on_e4) {
            (Ok(a), Ok(b)) => same_but_tree_blocks(a, b),
            (a, b) => a == b || explained(&op, a, b),
        };
        if !same {
            failure = Some(format!("the kernel's ext4 {on_kernel:?}, e4 {on_e4:?}"));
            break;
        }
        if step % 25 == 24 || ops.peek().is_none() {
            let (tk, te) = (tree(k), tree(e));
            if !same_but_tree_blocks(&tk, &te) {
                failure = Some(format!("trees differ:\nkernel:\n{tk}\ne4:\n{te}"));
                break;
            }
        }
    }
    match failure {
        Some(failure) => {
            let recent = log[log.len().saturating_sub(30)..].join("\n");
            Err(format!("{failure}\nthe last steps ({rerun}):\n{recent}"))
        }
        None => Ok(steps),
    }
}

/// What the two mounts must agree on when a run ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ends {
    /// The same trees and, on the images, the same free inodes.
    Same,
    /// Nothing: calls raced on the same names, so each mount ends where its own schedule
    /// took it.
    EachItsOwn,
}

/// Makes an image with `mke2fs` of `size_mib`, mounts one copy through the kernel's loop
/// device and one through e4 with `e4_options`, runs `drive` on the two mount points
/// (the kernel's, e4's), then unmounts both, which must pass `e2fsck -fn` (with the same
/// trees before and the same free inodes after, as `ends` says), and checks that the
/// kernel reads from e4's image the tree the mount showed. False when a mount is
/// impossible here (reported).
fn on_both_mounts(
    label: &str,
    mke2fs: &[&str],
    size_mib: u64,
    e4_options: &str,
    ends: Ends,
    drive: impl FnOnce(&Path, &Path) -> Result<u64, String>,
) -> bool {
    let pristine = make_empty_image(mke2fs, size_mib);
    let kernel_image = pristine.path.with_extension("kernel");
    let e4_image = pristine.path.with_extension("e4");
    std::fs::copy(&pristine.path, &kernel_image).unwrap();
    std::fs::copy(&pristine.path, &e4_image).unwrap();

    let device = match LoopDevice::attach(&kernel_image) {
        Ok(device) => device,
        Err(reason) => {
            kernel_comparison_skipped("differential test", &reason);
            return false;
        }
    };
    let kernel = match device.mount("rw,noatime,nodelalloc") {
        Ok(kernel) => kernel,
        Err(reason) => {
            kernel_comparison_skipped("differential test", &reason);
            return false;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let options = MountOptions::parse(e4_options).unwrap();
    let mounted = match e4_fuse::mount(&e4_image, dir.path(), &options) {
        Ok(mounted) => mounted,
        Err(e @ MountError::Mount { .. }) => {
            fuse_skipped("differential test", &e.to_string());
            return false;
        }
        Err(e) => panic!("{e}"),
    };
    let guard = FuseGuard::watch(dir.path(), LIMIT);
    let (k, e) = (kernel.path(), dir.path());
    let steps = drive(k, e).unwrap_or_else(|failure| panic!("{label}: {failure}"));
    // The whole trees at the end (a driver compares its own parts as it goes).
    let (tk, shown) = (tree(k), tree(e));
    assert!(
        ends == Ends::EachItsOwn || same_but_tree_blocks(&tk, &shown),
        "{label}: trees differ at the end:\nkernel:\n{tk}\ne4:\n{shown}"
    );
    mounted.unmount().unwrap();
    drop(guard);
    drop(kernel);
    drop(device);
    e2fsck_clean(&kernel_image).unwrap_or_else(|e| panic!("{label}: the kernel's image: {e}"));
    e2fsck_clean(&e4_image).unwrap_or_else(|e| panic!("{label}: e4's image: {e}"));
    // Free inodes, but not free blocks: ext4 shares one xattr block among inodes whose
    // xattrs are the same (its mbcache), e4 gives each its own (docs/FUSE.md).
    let free_inodes = |image: &Path| {
        let fs = e4_fs::Filesystem::open(image, e4_fs::OpenOptions::default()).unwrap();
        fs.statfs().free_inodes
    };
    if ends == Ends::Same {
        assert_eq!(
            free_inodes(&kernel_image),
            free_inodes(&e4_image),
            "{label}: free inodes of the two images"
        );
    }
    // What the mount showed is what the kernel reads from the image it left.
    if let Ok(view) = KernelMount::mount(&e4_image) {
        assert_eq!(
            tree(&view.path()),
            shown,
            "{label}: the kernel's view of e4's image"
        );
    }
    eprintln!("{label}: {steps} steps the same on both");
    true
}

/// Every call a protected inode or directory refuses, on a file and a directory made
/// immutable, then append-only (and a directory with inherited flags): the kernel's ext4
/// is the oracle for each result, as in the random runs.
#[test]
fn immutable_and_append_only_refuse_on_e4s_mount_what_they_refuse_on_the_kernels_ext4() {
    let create = |path: &str| Op::Open {
        path: path.into(),
        flags: OFlags::WRONLY | OFlags::CREATE,
        mode: 0o644,
    };
    let write = |path: &str, offset: u64, append: bool| Op::Write {
        path: path.into(),
        offset,
        len: 3000,
        seed: 7,
        append,
    };
    let set_flags = |path: &str, flags: IFlags| Op::SetFlags {
        path: path.into(),
        flags: flags.bits(),
    };
    let p = |s: &str| s.to_string();
    let mut ops = vec![
        create("f"),
        write("f", 0, false),
        Op::Mkdir {
            path: p("a"),
            mode: 0o755,
        },
        create("a/f"),
        write("a/f", 0, false),
        Op::Mkdir {
            path: p("a/b"),
            mode: 0o755,
        },
        Op::Mkdir {
            path: p("c"),
            mode: 0o755,
        },
        create("c/f"),
        write("c/f", 0, false),
        create("g"),
        write("g", 0, false),
    ];
    // Everything that may be done to a file, then to a directory's names.
    let on_file = |f: &str| -> Vec<Op> {
        let mut ops: Vec<Op> = OPEN_FLAGS
            .iter()
            .map(|&flags| Op::Open {
                path: p(f),
                flags,
                mode: 0o644,
            })
            .collect();
        ops.extend([
            Op::Open {
                path: p(f),
                flags: OFlags::WRONLY | OFlags::APPEND,
                mode: 0,
            },
            Op::Open {
                path: p(f),
                flags: OFlags::RDONLY | OFlags::TRUNC,
                mode: 0,
            },
            write(f, 0, false),
            write(f, 0, true),
            Op::WriteAfterDroppingAppend { path: p(f) },
            Op::CopyRange {
                from: p("g"),
                to: p(f),
                offset_in: 0,
                offset_out: 0,
                len: 1000,
            },
            Op::CopyRange {
                from: p(f),
                to: p("g"),
                offset_in: 10,
                offset_out: 2000,
                len: 5000,
            },
            Op::Read {
                path: p(f),
                offset: 0,
                len: 100,
            },
            Op::Truncate {
                path: p(f),
                size: 10,
            },
            Op::TruncateAppending {
                path: p(f),
                size: 10,
            },
            Op::Chmod {
                path: p(f),
                mode: 0o600,
            },
            Op::Chown {
                path: p(f),
                uid: Some(1000),
                gid: None,
            },
            Op::Utimens {
                path: p(f),
                atime: Time::At(1000, 0),
                mtime: Time::Omit,
            },
            Op::Utimens {
                path: p(f),
                atime: Time::Now,
                mtime: Time::Now,
            },
            Op::SetXattr {
                path: p(f),
                name: p("user.a"),
                len: 5,
                flags: XattrFlags::empty(),
            },
            Op::RemoveXattr {
                path: p(f),
                name: p("user.a"),
            },
            Op::GetXattr {
                path: p(f),
                name: p("user.a"),
                room: 4096,
            },
            Op::Link {
                from: p(f),
                to: p("l"),
            },
            Op::Rename {
                from: p(f),
                to: p("g"),
                flags: RenameFlags::empty(),
            },
            Op::Rename {
                from: p("g"),
                to: p(f),
                flags: RenameFlags::EXCHANGE,
            },
            Op::Rename {
                from: p("g"),
                to: p(f),
                flags: RenameFlags::empty(),
            },
            Op::Unlink { path: p(f) },
            Op::Rmdir { path: p(f) },
            Op::Stat { path: p(f) },
        ]);
        ops.extend(FALLOCATE_MODES.iter().map(|&mode| Op::Fallocate {
            path: p(f),
            mode,
            offset: 100,
            len: 5000,
        }));
        ops.extend(
            FALLOCATE_MODES
                .iter()
                .map(|&mode| Op::FallocateAppending { path: p(f), mode }),
        );
        // Last: it makes an append-only file immutable.
        ops.push(set_flags(f, IFlags::IMMUTABLE | IFlags::NODUMP));
        ops
    };
    let in_dir = |d: &str| -> Vec<Op> {
        let at = |name: &str| format!("{d}/{name}");
        vec![
            write(&at("f"), 0, true),
            create(&at("new")),
            Op::Mkdir {
                path: at("n"),
                mode: 0o755,
            },
            Op::Symlink {
                target: p("f"),
                path: at("s"),
            },
            Op::Mkfifo { path: at("p") },
            Op::Link {
                from: p("c/f"),
                to: at("l"),
            },
            Op::Rename {
                from: p("c/f"),
                to: at("m"),
                flags: RenameFlags::empty(),
            },
            Op::Rename {
                from: at("f"),
                to: p("c/moved"),
                flags: RenameFlags::empty(),
            },
            Op::Rename {
                from: p("g"),
                to: at("f"),
                flags: RenameFlags::empty(),
            },
            Op::Unlink { path: at("f") },
            Op::Rmdir { path: at("b") },
            Op::List { dir: p(d) },
        ]
    };
    for flags in [IFlags::IMMUTABLE, IFlags::APPEND] {
        ops.push(set_flags("f", flags));
        ops.extend(on_file("f"));
        ops.push(set_flags("f", IFlags::empty()));
        ops.push(set_flags("a", flags));
        ops.extend(on_file("a"));
        ops.extend(in_dir("a"));
        ops.push(set_flags("a", IFlags::empty()));
    }
    // Inherited: sync, nodump, noatime and dirsync pass to new inodes (dirsync to
    // directories only).
    ops.push(set_flags(
        "c",
        IFlags::SYNC | IFlags::NODUMP | IFlags::NOATIME | IFlags::DIRSYNC,
    ));
    ops.extend(in_dir("c"));
    compare(
        "the immutable and append-only script",
        "cargo test -p e4-fuse --test differential immutable",
        "",
        ops.into_iter(),
    );
}

/// The random sequences with `chattr` and `copy_file_range` among the calls: a few seeds
/// by default, more with `E4_DIFF_FLAG_SEEDS` (a count or `from..to`).
#[test]
fn random_calls_among_protected_files_do_on_e4s_mount_what_they_do_on_the_kernels_ext4() {
    for seed in seeds("E4_DIFF_FLAG_SEEDS", 0..2) {
        let mut rng = StdRng::seed_from_u64(seed);
        let ops = (0..300).map(|_| match rng.gen_range(0..12) {
            0 => Op::SetFlags {
                path: path(&mut rng),
                flags: chattr_flags(&mut rng),
            },
            1 => Op::CopyRange {
                from: path(&mut rng),
                to: path(&mut rng),
                offset_in: offset(&mut rng),
                offset_out: offset(&mut rng),
                len: rng.gen_range(1..30_000),
            },
            _ => random_op(&mut rng),
        });
        let rerun = format!("E4_DIFF_FLAG_SEEDS={seed}..{}", seed + 1);
        if !compare(&format!("flag seed {seed}"), &rerun, "", ops) {
            return;
        }
    }
}

/// POSIX ACLs on e4's mount with `acl` against the kernel's ext4 (whose `acl` is on by
/// default): access ACLs that set the mode or, saying no more than it, are not stored;
/// default ACLs that new files, directories and FIFOs inherit (the umask ignored, the
/// mode masked by the ACL, the directory passing its default on); chmod moving the owner,
/// mask and other entries; ACLs refused (a default ACL on a file, a malformed one). The
/// trees compared every 25 calls and at the end include every ACL, as `getfacl -R` would
/// show it, and the modes.
#[test]
fn posix_acls_on_e4s_mount_are_what_they_are_on_the_kernels_ext4() {
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const GROUP: u16 = 0x08;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    const NO_ID: u32 = u32::MAX;
    let p = |s: &str| s.to_string();
    let acl = |path: &str, default: bool, entries: &[(u16, u16, u32)]| Op::SetAcl {
        path: p(path),
        default,
        entries: entries.to_vec(),
    };
    let create = |path: &str, mode: u32| Op::Open {
        path: p(path),
        flags: OFlags::WRONLY | OFlags::CREATE,
        mode,
    };
    let mkdir = |path: &str, mode: u32| Op::Mkdir {
        path: p(path),
        mode,
    };
    let stat = |path: &str| Op::Stat { path: p(path) };
    let chmod = |path: &str, mode: u32| Op::Chmod {
        path: p(path),
        mode,
    };
    let get = |path: &str, default: bool| Op::GetXattr {
        path: p(path),
        name: p(if default {
            "system.posix_acl_default"
        } else {
            "system.posix_acl_access"
        }),
        room: 4096,
    };
    let named_default = [
        (USER_OBJ, 7, NO_ID),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, NO_ID),
        (GROUP, 6, 100),
        (MASK, 7, NO_ID),
        (OTHER, 0, NO_ID),
    ];
    let ops = vec![
        mkdir("d", 0o755),
        acl("d", true, &named_default),
        get("d", true),
        stat("d"),
        // Inherited, with the umask ignored and the mode masked.
        create("d/f", 0o666),
        create("d/x", 0o751),
        mkdir("d/s", 0o777),
        mkdir("d/s/deeper", 0o700),
        Op::Mkfifo { path: p("d/p") },
        Op::Symlink {
            target: p("f"),
            path: p("d/l"),
        },
        stat("d/f"),
        stat("d/x"),
        stat("d/s"),
        stat("d/s/deeper"),
        stat("d/p"),
        get("d/f", false),
        get("d/s", true),
        get("d/s/deeper", false),
        // chmod keeps the access ACL in step.
        chmod("d/f", 0o604),
        get("d/f", false),
        chmod("d/s", 0o750),
        stat("d/s"),
        // An access ACL sets the mode; one the mode expresses is not stored.
        create("g", 0o600),
        acl(
            "g",
            false,
            &[
                (USER_OBJ, 7, NO_ID),
                (GROUP_OBJ, 4, NO_ID),
                (OTHER, 1, NO_ID),
            ],
        ),
        stat("g"),
        get("g", false),
        acl(
            "g",
            false,
            &[
                (USER_OBJ, 6, NO_ID),
                (USER, 4, 1000),
                (GROUP_OBJ, 4, NO_ID),
                (MASK, 6, NO_ID),
                (OTHER, 0, NO_ID),
            ],
        ),
        stat("g"),
        get("g", false),
        chmod("g", 0o711),
        get("g", false),
        acl("g", false, &[]),
        stat("g"),
        get("g", false),
        // A default ACL without a mask: the group entry masks the mode.
        mkdir("e", 0o755),
        acl(
            "e",
            true,
            &[
                (USER_OBJ, 7, NO_ID),
                (GROUP_OBJ, 7, NO_ID),
                (OTHER, 5, NO_ID),
            ],
        ),
        create("e/f", 0o666),
        mkdir("e/s", 0o777),
        stat("e/f"),
        stat("e/s"),
        get("e/f", false),
        get("e/s", true),
        // Refused: a default ACL on a file, entries out of order, no mask with named ones.
        acl("g", true, &named_default),
        acl(
            "d",
            false,
            &[
                (GROUP_OBJ, 7, NO_ID),
                (USER_OBJ, 7, NO_ID),
                (OTHER, 0, NO_ID),
            ],
        ),
        acl(
            "d",
            false,
            &[
                (USER_OBJ, 7, NO_ID),
                (USER, 7, 5),
                (GROUP_OBJ, 7, NO_ID),
                (OTHER, 0, NO_ID),
            ],
        ),
        // Removing the default ACL: new entries take the umask again.
        Op::RemoveXattr {
            path: p("d"),
            name: p("system.posix_acl_default"),
        },
        create("d/after", 0o666),
        stat("d/after"),
        get("d/after", false),
        Op::ListXattr {
            path: p("d/s"),
            room: 4096,
        },
    ];
    compare(
        "the POSIX ACL script",
        "cargo test -p e4-fuse --test differential posix_acls",
        "acl",
        ops.into_iter(),
    );
}

/// `copy_file_range` on e4's mount (the FUSE request, copied by the engine) against the
/// kernel's ext4 (which copies through the page cache): within a file and between files,
/// from holes and fallocated ranges, past the source's end, across a block boundary into
/// a hole past the target's end, overlapping ranges of one file, a directory and a FIFO
/// on either side, a target opened O_APPEND; then the trees (contents and st_blocks).
#[test]
fn copy_file_range_on_e4s_mount_copies_what_the_kernels_ext4_copies() {
    let p = |s: &str| s.to_string();
    let copy = |from: &str, to: &str, offset_in: u64, offset_out: u64, len: usize| Op::CopyRange {
        from: p(from),
        to: p(to),
        offset_in,
        offset_out,
        len,
    };
    let write = |path: &str, offset: u64, len: usize| Op::Write {
        path: p(path),
        offset,
        len,
        seed: 3,
        append: false,
    };
    let create = |path: &str| Op::Open {
        path: p(path),
        flags: OFlags::WRONLY | OFlags::CREATE,
        mode: 0o644,
    };
    let ops = vec![
        create("a"),
        write("a", 0, 10_000),
        write("a", 40_000, 3_000),
        Op::Fallocate {
            path: p("a"),
            mode: FallocateFlags::KEEP_SIZE,
            offset: 50_000,
            len: 8_000,
        },
        create("b"),
        copy("a", "b", 0, 0, 10_000),
        copy("a", "b", 5_000, 100_000, 40_000),
        copy("a", "b", 42_000, 3_333, 99_999),
        copy("a", "b", 60_000, 0, 100),
        copy("a", "a", 0, 20_000, 10_000),
        copy("a", "a", 0, 5_000, 10_000),
        copy("b", "b", 100_000, 100_500, 1_000),
        Op::Mkdir {
            path: p("d"),
            mode: 0o755,
        },
        copy("d", "b", 0, 0, 10),
        copy("a", "d", 0, 0, 10),
        Op::Mkfifo { path: p("fifo") },
        copy("a", "fifo", 0, 0, 10),
        Op::Read {
            path: p("b"),
            offset: 0,
            len: 200_000,
        },
        Op::Stat { path: p("b") },
        Op::Stat { path: p("a") },
    ];
    compare(
        "the copy_file_range script",
        "cargo test -p e4-fuse --test differential copy_file_range",
        "",
        ops.into_iter(),
    );
}
