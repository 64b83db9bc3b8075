//! The ext4 and jbd2 on-disk format: bytes to typed structures and back, checksums and
//! directory hashes. No I/O, no locks, no `unsafe`; every parse failure is a
//! [`FormatError`] naming the structure and where it was.
//!
//! Each structure is declared once (see [`codec`]), so its decoder and encoder cannot
//! disagree:
//!
//! ```
//! use e4_format::inode::Inode;
//! let mut raw = vec![0u8; 256];
//! raw[0..2].copy_from_slice(&0o100644u16.to_le_bytes());
//! let inode = Inode::parse(&raw, 12, None).unwrap();
//! assert_eq!(inode.permissions(), 0o644);
//! assert_eq!(inode.to_bytes(None), raw);
//! ```

#![forbid(unsafe_code)]

pub mod bitmap;
pub mod block_map;
pub mod casefold;
pub mod casefold_12_1;
pub mod checksum;
pub mod codec;
pub mod dir_entry;
pub mod dir_hash;
pub mod dir_htree;
pub mod error;
pub mod extent;
pub mod features;
pub mod geometry;
pub mod group_descriptor;
pub mod inline_data;
pub mod inode;
pub mod journal;
pub mod metadata_block;
pub mod mmp;
pub mod orphan_file;
pub mod posix_acl;
pub mod problem;
pub mod quota;
pub mod superblock;
pub mod table;
pub mod xattr;

pub use error::{FormatError, Location, Result};
pub use metadata_block::{BlockSeed, MetadataBlock};
pub use problem::{Problem, Structure};
