//! A file's logical-to-physical block mapping: the extent tree (ext4), the indirect block
//! map (ext2/ext3), and the one type that chooses between them. Mechanisms over
//! [`MetaIo`](crate::io::meta_io::MetaIo) only.

pub(crate) mod block_map;
pub(crate) mod extent_tree;
pub(crate) mod file_mapping;
pub(crate) mod run;
pub(crate) mod run_cache;
