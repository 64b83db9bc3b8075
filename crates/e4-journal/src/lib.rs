//! The jbd2 journal as a mechanism: where the log lives and what its superblock says
//! ([`journal`]), reading it back after a crash ([`recovery`]), and writing transactions
//! into it ([`log_writer`]). The block formats are e4-format's (`e4_format::journal`).
//!
//! There is no filesystem here: a caller gives the journal inode's block runs and a way to
//! read blocks ([`BlockReader`]), and does its own writes. So e4-fs, which writes, and
//! e4-fsck, which only reads, share one recovery, as e2fsprogs builds the kernel's
//! `recovery.c` into e2fsck.

#![forbid(unsafe_code)]

pub mod journal;
pub mod log_writer;
pub mod recovery;
mod revoke_table;

use std::io;

pub use journal::{Journal, JournalLayout, PhysicalRun};
pub use log_writer::{EncodedTransaction, FilesystemFeatures, LogWrite, LogWriter};
pub use recovery::{LogCopy, Recovery};

/// Reads whole filesystem blocks: the journal's, through its layout.
pub trait BlockReader {
    /// Fills `buf` (one block) from filesystem block `nr`.
    fn read_block(&self, nr: u64, buf: &mut [u8]) -> io::Result<()>;
}

/// Why the journal cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A journal structure is damaged (the superblock, a revoke block, the inode's map).
    #[error(transparent)]
    Format(#[from] e4_format::FormatError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// A journal e4 does not handle: one line saying which and what to do instead.
    #[error("{0}")]
    Unsupported(String),
}

pub type Result<T> = std::result::Result<T, JournalError>;

/// jbd2's wrap-safe tid order (`tid_gt`): `a` is later than `b`.
pub fn tid_gt(a: u32, b: u32) -> bool {
    // OK to cast: the difference's sign is the order, modulo 2^32.
    (a.wrapping_sub(b) as i32) > 0
}
