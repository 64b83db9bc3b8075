//! Inodes in use: one shared handle per inode (its lock and state), the inode table the
//! records live in, and what the flags users set (`chattr`) allow.

pub(crate) mod cache;
pub(crate) mod dirty_set;
pub(crate) mod table;
pub(crate) mod user_flags;
