//! How engine inodes look to the kernel: node numbers (the root swapped), attributes,
//! times, device numbers and the owner mapping of `uid=`/`gid=`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use e4_fs::{FileType, Metadata, Timestamp};
use fuser::{FileAttr, Generation, INodeNo};

/// ext4's root directory (`EXT4_ROOT_INO`).
pub(crate) const EXT4_ROOT: u32 = 2;

/// The ext4 inode a FUSE node number names. FUSE's root is node 1 (`FUSE_ROOT_ID`) and
/// ext4's is inode 2, so 1 and 2 are swapped both ways; every other number is its own.
/// Node 2 never reaches the kernel, because ext4 inode 1 (the bad-blocks list) is never
/// linked into the tree. A node number past 32 bits names no inode: it becomes 0, which
/// the engine refuses.
pub(crate) fn ext4_ino(node: INodeNo) -> u32 {
    match node.0 {
        1 => EXT4_ROOT,
        2 => 1,
        n => u32::try_from(n).unwrap_or(0),
    }
}

/// The FUSE node number of ext4 inode `ino` (the inverse of [`ext4_ino`]): what entry
/// replies name it by. `stat` shows the ext4 number all the same ([`file_attr`]).
pub(crate) fn node_of(ino: u32) -> INodeNo {
    INodeNo(match ino {
        EXT4_ROOT => 1,
        1 => 2,
        n => u64::from(n),
    })
}

/// The generation the kernel pairs with a node number: ext4's `i_generation`, except for
/// the root, which the kernel made with generation 0 before it asked anything.
pub(crate) fn generation_of(m: &Metadata) -> Generation {
    Generation(if m.ino == EXT4_ROOT {
        0
    } else {
        u64::from(m.generation)
    })
}

pub(crate) fn kind_of(t: FileType) -> fuser::FileType {
    match t {
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::Directory => fuser::FileType::Directory,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Socket => fuser::FileType::Socket,
    }
}

/// The file type in a `mode` from a mknod request.
pub(crate) fn file_type_of_mode(mode: u32) -> Option<FileType> {
    match mode & libc::S_IFMT {
        libc::S_IFREG => Some(FileType::Regular),
        libc::S_IFDIR => Some(FileType::Directory),
        libc::S_IFLNK => Some(FileType::Symlink),
        libc::S_IFIFO => Some(FileType::Fifo),
        libc::S_IFCHR => Some(FileType::CharDevice),
        libc::S_IFBLK => Some(FileType::BlockDevice),
        libc::S_IFSOCK => Some(FileType::Socket),
        _ => None,
    }
}

/// Linux's `dev_t` encoding (`new_encode_dev`) of (major, minor).
pub(crate) fn encode_rdev((major, minor): (u32, u32)) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// (major, minor) of a `dev_t` (`new_decode_dev`).
pub(crate) fn decode_rdev(rdev: u32) -> (u32, u32) {
    (
        (rdev >> 8) & 0xfff,
        (rdev & 0xff) | ((rdev >> 12) & 0xfff00),
    )
}

pub(crate) fn system_time(t: Timestamp) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nanoseconds));
    if t.seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.seconds as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(t.seconds.unsigned_abs()) + nanos
    }
}

pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            seconds: d.as_secs() as i64,
            nanoseconds: d.subsec_nanos(),
        },
        Err(before) => {
            let d = before.duration();
            let (seconds, nanoseconds) = match d.subsec_nanos() {
                0 => (-(d.as_secs() as i64), 0),
                n => (-(d.as_secs() as i64) - 1, 1_000_000_000 - n),
            };
            Timestamp {
                seconds,
                nanoseconds,
            }
        }
    }
}

/// `uid=`/`gid=`: one id of the image shown as the mounting user's, and that user's id
/// stored as it. Every other id passes unchanged both ways.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdMap {
    /// The id in the image.
    pub image: u32,
    /// The id it is shown as (the mounting user's).
    pub host: u32,
}

impl IdMap {
    pub(crate) fn shown(map: Option<IdMap>, stored: u32) -> u32 {
        match map {
            Some(m) if stored == m.image => m.host,
            _ => stored,
        }
    }

    pub(crate) fn stored(map: Option<IdMap>, shown: u32) -> u32 {
        match map {
            Some(m) if shown == m.host => m.image,
            _ => shown,
        }
    }
}

/// The owner mappings of a mount.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Owners {
    pub uid: Option<IdMap>,
    pub gid: Option<IdMap>,
}

/// The attributes the kernel is given for `m` in an attribute reply or a listing: their
/// `ino` is ext4's number, which the kernel takes as the `st_ino` that `stat` shows (it
/// sets the inode's `i_ino` from every attribute reply), so the root shows 2 as on the
/// kernel's ext4 although its node is 1. Entry replies, whose `ino` fuser sends as the
/// node number, take [`entry_attr`].
pub(crate) fn file_attr(m: &Metadata, block_size: u32, owners: Owners) -> FileAttr {
    FileAttr {
        ino: INodeNo(u64::from(m.ino)),
        size: m.size,
        blocks: m.blocks,
        atime: system_time(m.atime),
        mtime: system_time(m.mtime),
        ctime: system_time(m.ctime),
        crtime: m.crtime.map_or(UNIX_EPOCH, system_time),
        kind: kind_of(m.file_type),
        perm: m.permissions,
        nlink: u32::from(m.nlink),
        uid: IdMap::shown(owners.uid, m.uid),
        gid: IdMap::shown(owners.gid, m.gid),
        rdev: encode_rdev(m.rdev),
        blksize: block_size,
        flags: 0,
    }
}

/// The attributes of an entry reply for `m`: as [`file_attr`], named by node number.
pub(crate) fn entry_attr(m: &Metadata, block_size: u32, owners: Owners) -> FileAttr {
    FileAttr {
        ino: node_of(m.ino),
        ..file_attr(m, block_size, owners)
    }
}

/// The attributes of a negative entry reply (a name that is not there): node 0, which
/// the kernel takes for "no such name, and remember that"; the rest is not read.
pub(crate) fn negative_entry_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_swapped_and_every_other_inode_is_its_own_node() {
        assert_eq!(node_of(EXT4_ROOT), INodeNo::ROOT);
        assert_eq!(ext4_ino(INodeNo::ROOT), EXT4_ROOT);
        for ino in [1, 3, 11, 12, u32::MAX] {
            assert_eq!(ext4_ino(node_of(ino)), ino);
        }
        assert_eq!(ext4_ino(INodeNo(1 << 32)), 0);
    }

    #[test]
    fn times_before_and_after_the_epoch_round_trip() {
        for (seconds, nanoseconds) in [(0, 0), (1_700_000_000, 5), (-1, 999_999_999), (-5, 0)] {
            let t = Timestamp {
                seconds,
                nanoseconds,
            };
            assert_eq!(timestamp(system_time(t)), t);
        }
    }

    #[test]
    fn device_numbers_round_trip_through_dev_t() {
        for dev in [(8, 1), (259, 0x12345), (0, 0)] {
            assert_eq!(decode_rdev(encode_rdev(dev)), dev);
        }
        assert_eq!(encode_rdev((8, 1)), 0x801);
    }

    #[test]
    fn an_id_map_swaps_one_id_and_passes_the_rest() {
        let m = Some(IdMap {
            image: 0,
            host: 1000,
        });
        assert_eq!(IdMap::shown(m, 0), 1000);
        assert_eq!(IdMap::stored(m, 1000), 0);
        assert_eq!(IdMap::shown(m, 5), 5);
        assert_eq!(IdMap::stored(None, 1000), 1000);
    }
}
