//! Directory contents on disk: leaf blocks of entries, the htree index, the editor that
//! keeps both as the kernel would, and inline directories. Mechanisms over
//! [`MetaIo`](crate::io::meta_io::MetaIo) only.

#[cfg(test)]
mod check;
pub(crate) mod editor;
pub(crate) mod entry;
mod htree;
pub(crate) mod inline;
pub(crate) mod leaf;
pub(crate) mod leaf_index;
mod listing;
