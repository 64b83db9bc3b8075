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
//! let me = Creator { permissions: 0o644, uid: 0, gid: 0 };
//! let ino = fs.create(etc, b"hostname", me)?;
//! fs.write_at(ino, 0, b"e4\n")?;
//! let mut buf = vec![0u8; fs.metadata(ino)?.size as usize];
//! fs.read_at(ino, 0, &mut buf)?;
//! fs.unmount()?;
//! # Ok::<(), e4_fs::Error>(())
//! ```

#![forbid(unsafe_code)]

mod attributes;
mod block_checksums;
pub mod block_map_tree;
pub mod buffer_cache;
mod caller;
mod dentry_cache;
pub mod device;
mod dir_block;
#[cfg(test)]
mod dir_check;
mod dir_index;
pub mod dir_write;
mod directory;
mod directory_blocks;
mod engine_stats;
mod error;
pub mod extent_tree;
mod file_map;
mod file_mapping;
mod file_read;
mod file_write;
mod filesystem;
mod inline_data;
mod inline_dir;
mod inline_file;
mod inode_cache;
mod inode_table;
mod interval_commit;
pub mod meta_io;
mod metadata;
mod namespace;
mod path;
mod time;
mod txn_io;
mod write_back;
mod writer;
mod xattr;
mod xattr_store;
mod xattr_write;

pub use attributes::SetAttributes;
pub use caller::Caller;
pub use directory::DirEntry;
pub use e4_format::inode::{FileType, Inode, Timestamp};
pub use engine_stats::LockReport;
pub use error::{Error, Result};
pub use file_map::Mapping;
pub use file_write::FallocateMode;
pub use filesystem::{Filesystem, OpenOptions};
pub use metadata::{Metadata, StatFs};
pub use namespace::{Creator, RenameMode};
pub use xattr_write::XattrSet;
