//! One writer per image: how a [`FileDevice`](super::device::FileDevice) opens an image file
//! or block device so that no one else changes it while e4 writes, and e4 changes nothing
//! the kernel is using.
//!
//! **The lock.** Every open takes an OFD lock (`fcntl(F_OFD_SETLK)`) on the whole file:
//! exclusive (`F_WRLCK`) to write, shared (`F_RDLCK`) to read, never waiting for a holder
//! beyond a moment ([`HANDOVER`]). OFD rather than flock(2) or classic POSIX locks because:
//! - it belongs to the open file description, as flock(2)'s does: two opens in one process
//!   exclude each other too, and closing another descriptor of the same file does not drop
//!   it (a process-wide POSIX lock, which rustix's `fcntl_lock` takes, has both faults);
//! - `F_OFD_GETLK` says whether the holder reads or writes, so the refusal says which
//!   (flock(2) cannot be asked). It gives no pid for an OFD lock (-1: an open file
//!   description may be shared by several processes), so a refusal looks for the holder
//!   in `/proc/*/fdinfo/*`, whose `lock:` lines name the locks each open file holds: one
//!   read per open file on the machine, paid only when an open is refused, and only the
//!   processes this user may inspect (else the message names no process);
//! - fcntl locks are what other image users take: QEMU holds OFD locks on the disks of a
//!   running VM, so e4 will not write one (flock and fcntl locks do not see each other).
//!
//! A shared lock needs only read access, so an image e4 may not write can still be read.
//! Where the filesystem holding the image cannot lock (ENOLCK: NFS without a lock
//! manager), e4 goes on without the lock: it protects against mistakes, and refusing would
//! make such images unusable.
//!
//! **The kernel.** The kernel takes no part in these locks, so e4 also looks at what the
//! kernel holds: `/proc/self/mountinfo` for mounts (a block device's own `st_rdev`; for an
//! image file, the loop devices it backs, found by `/sys/block/loop*/loop/backing_file`
//! compared by device and inode, partitions included), and a writer opens a block device
//! with `O_EXCL`, as the kernel's mount and e2fsprogs' writers do: EBUSY while it is
//! mounted, in a device-mapper or md array, or opened exclusively by another e4 writer.
//!
//! | the image is ...                               | a writer   | a reader   |
//! |------------------------------------------------|------------|------------|
//! | open for writing by another e4                 | refused    | refused    |
//! | open for reading by another e4                 | refused    | allowed    |
//! | mounted read-write by the kernel               | refused    | refused    |
//! | mounted read-only by the kernel                | refused    | allowed    |
//! | a file backing a loop device, not mounted      | refused    | allowed    |
//! | a block device held exclusively (EBUSY)        | refused    | allowed    |
//!
//! Why: a reader must see a consistent image or a clear refusal, never one half-written.
//! Another e4 writer, or a kernel with the image mounted read-write, changes blocks under
//! it and keeps newer metadata in memory; e2fsck -n only warns there, and reports the
//! writes in flight as damage. A read-only mount changes nothing (and the kernel
//! comparisons in the tests read an image the kernel has mounted read-only, as debugfs and
//! dumpe2fs read mounted filesystems). A writer needs the image to itself: even a
//! read-only mount caches metadata the writer would make stale, and an attached loop
//! device lets the kernel write the file whenever anything mounts or writes the loop.
//!
//! Not covered: a kernel that mounts or a program that attaches a loop device after e4
//! opened an image file (the kernel does not ask; a block device is safe, the kernel's
//! mount then fails with EBUSY); e4 opening `/dev/loopN` while another e4 has the file
//! behind it open (two names, two locks).

use std::fs::{File, Metadata, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::libc;

use crate::error::{Error, Holder, InUse, Result};

/// Opens the image file or block device at `path` (for writing too when `writable`) and
/// takes its lock, or says who is using it (see the module doc). The lock lives as long as
/// the returned file.
pub(crate) fn open_image(path: &Path, writable: bool) -> Result<File> {
    let cannot_open = |e| Error::io("cannot open the image", e);
    let is_block_device = std::fs::metadata(path)
        .map_err(cannot_open)?
        .file_type()
        .is_block_device();
    let mut options = OpenOptions::new();
    options.read(true).write(writable);
    if writable && is_block_device {
        options.custom_flags(OFlag::O_EXCL.bits());
    }
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) if is_block_device && e.raw_os_error() == Some(libc::EBUSY) => {
            // Name the mount, if a mount is why.
            let rdev = std::fs::metadata(path).map_err(cannot_open)?.rdev();
            let device = path.display().to_string();
            return Err(Error::InUse(
                mount_of(&mountinfo(), &[(device, device_number(rdev))], true)
                    .unwrap_or(InUse::DeviceBusy),
            ));
        }
        Err(e) => return Err(cannot_open(e)),
    };
    let metadata = file.metadata().map_err(cannot_open)?;
    if metadata.is_dir() {
        return Err(cannot_open(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory",
        )));
    }
    lock(&file, writable)?;
    check_kernel_use(&metadata, path, writable)?;
    Ok(file)
}

/// A whole-file lock request of `kind` (`F_RDLCK`, `F_WRLCK`).
fn whole_file(kind: libc::c_int) -> libc::flock {
    libc::flock {
        // OK to cast: the F_*LCK constants are 0, 1 and 2.
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        // Zero: to the end of the file, however it grows.
        l_len: 0,
        // Must be 0 for OFD locks.
        l_pid: 0,
    }
}

/// How long a refused lock is tried again before the refusal stands. A lock belongs to an
/// open file description, which lives while any descriptor of it does, and a process that
/// forks (to run a command) hands its children copies of every descriptor until they exec
/// (close-on-exec): so a lock its holder has just let go may still be held for that
/// moment, and a program that closes an image and opens it again would be refused by its
/// own past. Waiting this long costs a real refusal no more than the user notices.
const HANDOVER: Duration = Duration::from_millis(200);

/// Takes `file`'s OFD lock: exclusive to write, shared to read; never waits for a holder
/// longer than [`HANDOVER`].
fn lock(file: &File, writable: bool) -> Result<()> {
    let kind = if writable {
        libc::F_WRLCK
    } else {
        libc::F_RDLCK
    };
    let try_lock = || fcntl(file.as_raw_fd(), FcntlArg::F_OFD_SETLK(&whole_file(kind)));
    let mut result = try_lock();
    let give_up = Instant::now() + HANDOVER;
    while matches!(result, Err(Errno::EAGAIN | Errno::EACCES)) && Instant::now() < give_up {
        std::thread::sleep(HANDOVER / 20);
        result = try_lock();
    }
    match result {
        Ok(_) => Ok(()),
        Err(Errno::EAGAIN | Errno::EACCES) => {
            // Ask who holds it. A reader is refused only by a writer; a writer by either
            // (when the holder let go in between, GETLK says F_UNLCK: say writer).
            let mut held = whole_file(kind);
            let asked = fcntl(file.as_raw_fd(), FcntlArg::F_OFD_GETLK(&mut held)).is_ok();
            let holder_writes = !writable || !asked || i32::from(held.l_type) != libc::F_RDLCK;
            let holder = match u32::try_from(held.l_pid) {
                // A classic POSIX lock names its process.
                Ok(pid) if asked && pid > 0 => Some(holder_named(pid)),
                _ => file
                    .metadata()
                    .ok()
                    .and_then(|m| holder_from_fdinfo(m.dev(), m.ino(), holder_writes)),
            };
            Err(Error::InUse(InUse::Locked {
                holder_writes,
                holder,
                for_writing: writable,
            }))
        }
        // The filesystem holding the image cannot lock (see the module doc).
        Err(Errno::ENOLCK | Errno::EOPNOTSUPP) => Ok(()),
        Err(e) => Err(Error::io("cannot lock the image", e.into())),
    }
}

/// Process `pid`, with its command name.
fn holder_named(pid: u32) -> Holder {
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or_else(|_| "?".to_string(), |c| c.trim_end().to_string());
    Holder { pid, command }
}

/// The first process with an open file holding a lock on the file with device `dev` and
/// inode `ino` (a write lock when `writes`, else any), from the `lock:` lines of
/// `/proc/*/fdinfo/*` (proc(5): `lock: 1: OFDLCK ADVISORY WRITE -1 fe:00:1234 0 EOF`).
fn holder_from_fdinfo(dev: u64, ino: u64, writes: bool) -> Option<Holder> {
    let (major, minor) = device_number(dev);
    let file = format!(" {major:02x}:{minor:02x}:{ino} ");
    let holds = |info: &str| {
        info.lines().any(|line| {
            line.starts_with("lock:")
                && line.contains(&file)
                && (!writes || line.contains(" WRITE "))
        })
    };
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|process| {
            let pid: u32 = process.file_name().to_str()?.parse().ok()?;
            let fds = std::fs::read_dir(process.path().join("fdinfo")).ok()?;
            fds.flatten()
                .any(|fd| std::fs::read_to_string(fd.path()).is_ok_and(|info| holds(&info)))
                .then(|| holder_named(pid))
        })
}

/// A device number as mountinfo writes it: (major, minor).
type DeviceNumber = (u64, u64);

fn device_number(dev: u64) -> DeviceNumber {
    (nix::sys::stat::major(dev), nix::sys::stat::minor(dev))
}

/// Where the kernel has the image at `path` mounted, read-only or read-write, if it does
/// (a block device itself, or an image file through the loop devices it backs). For
/// checkers: `e4 fsck` reads a mounted image, as `e2fsck -n` does, and says so.
pub fn kernel_mount(path: &Path) -> Option<InUse> {
    let metadata = std::fs::metadata(path).ok()?;
    mount_of(&mountinfo(), &kernel_devices(&metadata, path), true)
}

/// The block devices through which the kernel may use the image: the device itself, or
/// the loop devices an image file backs (the whole device first, then its partitions).
fn kernel_devices(metadata: &Metadata, path: &Path) -> Vec<(String, DeviceNumber)> {
    if metadata.file_type().is_block_device() {
        vec![(path.display().to_string(), device_number(metadata.rdev()))]
    } else if metadata.is_file() {
        loop_devices_backed_by(metadata.dev(), metadata.ino())
    } else {
        Vec::new()
    }
}

/// Refuses what the kernel is using (see the module doc's table).
fn check_kernel_use(metadata: &Metadata, path: &Path, writable: bool) -> Result<()> {
    let devices = kernel_devices(metadata, path);
    if devices.is_empty() {
        return Ok(());
    }
    if let Some(mounted) = mount_of(&mountinfo(), &devices, writable) {
        return Err(Error::InUse(mounted));
    }
    if writable && metadata.is_file() {
        // The first is the whole loop device (its partitions follow).
        return Err(Error::InUse(InUse::LoopAttached {
            device: devices[0].0.clone(),
        }));
    }
    Ok(())
}

/// `/proc/self/mountinfo`, or nothing where /proc is not mounted (then no mount is seen;
/// a block device is still opened exclusively to write).
fn mountinfo() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()
}

/// The mount in `mountinfo` of any of `devices` (name, number) that refuses an open for
/// writing (`for_writing`: any mount) or reading (a read-write one).
fn mount_of(
    mountinfo: &str,
    devices: &[(String, DeviceNumber)],
    for_writing: bool,
) -> Option<InUse> {
    mountinfo.lines().find_map(|line| {
        let entry = MountEntry::parse(line)?;
        let (device, _) = devices.iter().find(|(_, number)| *number == entry.device)?;
        (for_writing || entry.read_write).then(|| InUse::Mounted {
            device: device.clone(),
            mount_point: entry.mount_point,
            read_write: entry.read_write,
            for_writing,
        })
    })
}

/// What e4 needs of one line of mountinfo (proc(5)): `36 35 98:0 /root /mnt rw,noatime
/// master:1 - ext4 /dev/sda1 rw,errors=continue`.
#[derive(Debug, PartialEq, Eq)]
struct MountEntry {
    /// Field 3, `major:minor`.
    device: DeviceNumber,
    /// Field 5, unescaped.
    mount_point: String,
    /// The superblock's options (after ` - `, the third) start with `rw`: the kernel may
    /// write the device, whatever this one mount's own options say.
    read_write: bool,
}

impl MountEntry {
    fn parse(line: &str) -> Option<Self> {
        let (mount, superblock) = line.split_once(" - ")?;
        let mut fields = mount.split(' ');
        let (major, minor) = fields.nth(2)?.split_once(':')?;
        let mount_point = unescape(fields.nth(1)?);
        let super_options = superblock.split(' ').nth(2)?;
        Some(MountEntry {
            device: (major.parse().ok()?, minor.parse().ok()?),
            mount_point,
            read_write: super_options.split(',').next() == Some("rw"),
        })
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|digits| {
            let digits = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(digits, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The loop devices whose backing file is the file with device `dev` and inode `ino`,
/// each followed by its partitions: (`/dev/loopN`, its number), ... Read from sysfs,
/// which any user may read; nothing where sysfs is not mounted.
fn loop_devices_backed_by(dev: u64, ino: u64) -> Vec<(String, DeviceNumber)> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let sys = entry.path();
        // Only an attached loop device has a backing file; its path is as the kernel
        // last knew it (" (deleted)" added when unlinked), so compare what it names.
        let Ok(backing) = std::fs::read_to_string(sys.join("loop/backing_file")) else {
            continue;
        };
        let backs_ours = std::fs::metadata(backing.trim_end_matches('\n'))
            .is_ok_and(|m| m.dev() == dev && m.ino() == ino);
        if !backs_ours {
            continue;
        }
        let mut named = vec![name.clone()];
        if let Ok(parts) = std::fs::read_dir(&sys) {
            let mut parts: Vec<String> = parts
                .flatten()
                .map(|p| p.file_name().to_string_lossy().into_owned())
                .filter(|p| p.starts_with(&name) && p.len() > name.len())
                .collect();
            parts.sort();
            named.extend(parts);
        }
        for (i, part) in named.iter().enumerate() {
            let dir = if i == 0 { sys.clone() } else { sys.join(part) };
            if let Some(number) = read_device_number(&dir.join("dev")) {
                found.push((format!("/dev/{part}"), number));
            }
        }
    }
    found
}

/// A sysfs `dev` file: `7:3`.
fn read_device_number(path: &Path) -> Option<DeviceNumber> {
    let text = std::fs::read_to_string(path).ok()?;
    let (major, minor) = text.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
98 22 7:3 / /mnt/with\\040space rw,relatime shared:50 - ext4 /dev/loop3 rw
99 22 7:4 / /mnt/ro ro,relatime - ext2 /dev/loop4 ro
100 22 7:3 / /mnt/bind ro,relatime shared:50 - ext4 /dev/loop3 rw
";

    fn device(name: &str, number: DeviceNumber) -> Vec<(String, DeviceNumber)> {
        vec![(name.to_string(), number)]
    }

    #[test]
    fn mountinfo_lines_parse() {
        let entry = MountEntry::parse(MOUNTINFO.lines().nth(1).unwrap()).unwrap();
        assert_eq!(
            entry,
            MountEntry {
                device: (7, 3),
                mount_point: "/mnt/with space".into(),
                read_write: true,
            }
        );
        assert_eq!(MountEntry::parse("garbage"), None);
    }

    #[test]
    fn a_read_write_mount_refuses_everyone_a_read_only_one_only_writers() {
        let rw = device("/dev/loop3", (7, 3));
        for for_writing in [true, false] {
            assert_eq!(
                mount_of(MOUNTINFO, &rw, for_writing),
                Some(InUse::Mounted {
                    device: "/dev/loop3".into(),
                    mount_point: "/mnt/with space".into(),
                    read_write: true,
                    for_writing,
                })
            );
        }
        let ro = device("/dev/loop4", (7, 4));
        assert!(mount_of(MOUNTINFO, &ro, true).is_some());
        assert_eq!(mount_of(MOUNTINFO, &ro, false), None);
        assert_eq!(mount_of(MOUNTINFO, &device("/dev/sdz", (8, 0)), true), None);
    }

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b\011c\134d"), "/a b\tc\\d");
        assert_eq!(unescape(r"/trailing\04"), r"/trailing\04");
    }
}
