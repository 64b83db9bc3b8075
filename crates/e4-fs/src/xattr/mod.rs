//! Extended attributes on disk: where they are stored (in the inode, then one shared xattr
//! block) and inline data's `system.data` value. Mechanisms over
//! [`MetaIo`](crate::io::meta_io::MetaIo) only.

pub(crate) mod block_locks;
pub(crate) mod inline_data;
pub(crate) mod store;
