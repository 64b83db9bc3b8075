//! Cached metadata blocks: one shared copy of each, verified once as the kind of block it is
//! read as, and sealed once when it is written back.

pub(crate) mod cache;
pub(crate) mod read_io;
pub(crate) mod store;
pub(crate) mod verifier;
