//! The state every pass shares (`context`: the image, superblock, descriptors, the
//! block-ownership bitmap, per-inode arrays, the problem list) and the records one pass
//! hands to a later one (`directories`, `ea_inode_refs`, `quota_usage`,
//! `encryption_policies`), so that no pass
//! imports another. Imports only `report/`.

pub mod atomic_bitmap;
pub mod block_claim;
pub mod block_tally;
pub mod context;
pub mod directories;
pub mod ea_inode_refs;
pub mod encryption_policies;
pub mod extent_levels;
pub mod image;
pub mod inode_state;
pub mod lazy_slots;
pub mod problem_list;
pub mod quota_usage;
pub mod reserved_inodes;
