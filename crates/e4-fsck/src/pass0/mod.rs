//! Before pass 1, as e2fsck's `check_super_block` and what it calls: the superblock and
//! descriptors (`superblock`, which opens the image and makes the shared state), the
//! journal superblock (`journal`), the MMP block (`mmp`) and the resize inode
//! (`resize_inode`). Imports only the layers below the passes.

pub mod journal;
pub mod mmp;
pub mod resize_inode;
pub mod superblock;
