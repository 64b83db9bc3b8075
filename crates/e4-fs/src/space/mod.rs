//! Space on disk: e4-alloc's allocators loaded from the bitmaps and descriptors, and what
//! they decide encoded back as bitmaps, descriptors and the superblock.

pub(crate) mod caller;
