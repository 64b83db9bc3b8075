//! The public operations of [`Filesystem`](crate::Filesystem), a file per group. With
//! `filesystem.rs`, the only place with `impl Filesystem`.

pub(crate) mod acl_inheritance;
pub(crate) mod copy_range;
pub(crate) mod create;
pub(crate) mod directory_blocks;
pub(crate) mod fallocate;
pub(crate) mod inline_directory;
pub(crate) mod inline_file;
pub(crate) mod link;
pub(crate) mod lock_stats;
pub(crate) mod mapping;
pub(crate) mod namespace;
pub(crate) mod orphan_cleanup;
pub(crate) mod path;
pub(crate) mod read;
pub(crate) mod readdir;
pub(crate) mod remove;
pub(crate) mod rename;
pub(crate) mod reserved_data;
pub(crate) mod setattr;
pub(crate) mod stat;
pub(crate) mod steps;
pub(crate) mod truncate;
pub(crate) mod user_flags;
pub(crate) mod write;
pub(crate) mod xattr_read;
pub(crate) mod xattr_write;
