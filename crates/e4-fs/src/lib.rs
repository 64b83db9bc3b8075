//! The e4 engine: a thread-safe handle on an ext2/ext3/ext4 filesystem that reads and
//! writes it.
//!
//! [`Filesystem`] is `Send + Sync` and every operation takes `&self`, so one handle serves
//! any number of threads. Operations name inodes by number. Metadata goes through a sharded
//! buffer cache that verifies a block's checksum once and seals it once at write-back; file
//! data goes straight to and from the device. How writing works is in docs/WRITE-PATH.md.
//!
//! ```no_run
//! use e4_fs::{Creator, Filesystem, OpenOptions};
//! let fs = Filesystem::open("disk.img", OpenOptions::writable())?;
//! let etc = fs.resolve("/etc", true)?;
//! let me = Creator { permissions: 0o644, uid: 0, gid: 0, umask: 0 };
//! let ino = fs.create(etc, b"hostname", me)?;
//! fs.write_at(ino, 0, b"e4\n")?;
//! let mut buf = vec![0u8; fs.metadata(ino)?.size as usize];
//! fs.read_at(ino, 0, &mut buf)?;
//! fs.unmount()?;
//! # Ok::<(), e4_fs::Error>(())
//! ```

#![forbid(unsafe_code)]

mod buffer;
mod dir;
mod error;
mod filesystem;
mod inode;
mod io;
mod journal;
mod map;
mod names;
mod ops;
mod space;
mod time;
mod txn;
mod xattr;

pub use dir::entry::DirEntry;
pub use e4_format::inode::{FileType, Inode, Timestamp};
pub use error::{Error, Holder, InUse, Result, Shortage};
pub use filesystem::{Filesystem, OpenOptions};
pub use inode::user_flags::OpenIntent;
pub use io::device;
pub use io::kernel_mount;
pub use io::recording_device;
pub use journal::log::JournalStats;
pub use journal::JournalOnDisk;
pub use map::run::Mapping;
pub use ops::create::Creator;
pub use ops::fallocate::FallocateMode;
pub use ops::lock_stats::LockReport;
pub use ops::readdir::DirCookie;
pub use ops::rename::RenameMode;
pub use ops::reserved_data::DataReservation;
pub use ops::setattr::SetAttributes;
pub use ops::stat::{Metadata, StatFs};
pub use ops::xattr_write::XattrSet;
pub use space::caller::Caller;

/// The mechanisms below the public API, for e4-fs's own integration tests, which drive
/// the extent tree, the block map and the directory editor on an in-memory store. Behind
/// the `testing` feature so that no other crate builds on them: the FUSE mount, mkfs and
/// the CLI use [`Filesystem`] only.
/// Stops (with `Some(seconds)`) or restarts the clock of every timestamp e4 writes in this
/// process, inodes and journal commits alike, so the same work writes the same bytes.
/// `e4 mkfs -d` stops it at `SOURCE_DATE_EPOCH`.
pub use crate::time::frozen::freeze_clock;

#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing {
    pub use crate::dir::editor::{DirectoryBlocks, DirectoryEditor};
    pub use crate::dir::entry::DirFormat;
    pub use crate::io::derived::Derived;
    pub use crate::io::meta_io::{BlockKind, MetaIo, Owner};
    pub use crate::map::block_map::BlockMapTree;
    pub use crate::map::extent_tree::ExtentTree;
    pub use crate::time::frozen::freeze_clock;
    pub use crate::txn::credit_ledger::CreditOverrun;
}
