//! A multi-threaded FUSE mount of an ext2/3/4 image over the e4 engine: what `e4 mount`
//! runs. The engine's [`Filesystem`](e4_fs::Filesystem) takes every operation by `&self`
//! from any thread, so fuser's worker threads (one per CPU by default, each reading its
//! own clone of `/dev/fuse`) serve requests in parallel with no lock of the mount's own
//! around them.
//!
//! ```no_run
//! use e4_fuse::{mount, MountOptions};
//! let options = MountOptions::parse("rw,threads=4")?;
//! let mounted = mount("disk.img".as_ref(), "/mnt/disk".as_ref(), &options)?;
//! // ... use /mnt/disk ...
//! mounted.unmount()?; // written back and marked clean
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! How to use it and what works: docs/FUSE.md.

#![forbid(unsafe_code)]

mod attrs;
mod daemon;
mod dir_listing;
mod error_policy;
mod file_flags;
mod kill_privileges;
mod lookup_counts;
mod ops;
mod options;
mod readahead;
mod seek;
mod session;
mod shards;
mod unmount;
mod warnings;

pub use daemon::{report_mounted, start_daemon};
pub use error_policy::ErrorPolicy;
pub use options::{MountOptions, OptionError};
pub use session::{mount, mount_until_signal, MountError, Mounted, UNMOUNT_PATIENCE};
pub use unmount::unmount_dir;
