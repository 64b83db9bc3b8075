//! Inodes in use: one shared handle per inode (its lock and state), and the inode table
//! the records live in.

pub(crate) mod cache;
pub(crate) mod table;
