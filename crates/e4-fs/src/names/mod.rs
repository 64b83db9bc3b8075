//! Names already looked up: the dentry cache.

pub(crate) mod dentry_cache;
