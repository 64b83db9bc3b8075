//! Concurrent space management for e4, in memory: per-group state, the free-space index,
//! the block and inode allocators, and the limit counter for free blocks and inodes. It knows
//! nothing of files or disks; e4-fs loads on-disk bitmaps into it and persists what changes.
//!
//! Every piece is built so that independent work never meets on a shared lock or a shared
//! written cache line (../shared/DESIGN.md, S1–S4), and every lock and shared atomic on the
//! hot paths is counted ([`stats`]).

pub mod block_allocator;
mod block_flex_sums;
pub mod block_group;
pub mod dirty_groups;
mod flex_tree;
pub mod free_space_index;
pub mod group_damage;
pub mod group_loading;
mod group_state;
pub mod inode_allocator;
mod inode_flex_counts;
mod inode_group;
pub mod inode_group_loading;
mod inode_placement;
mod instrumented_lock;
pub mod limit_counter;
pub mod pending_frees;
pub mod reservation_window;
mod reserve_pool;
pub mod shard;
pub mod small_file_packing;
pub mod stats;
mod sync;

pub use block_allocator::{
    AllocError, AllocRequest, AllocatorConfig, BadFree, BlockAllocator, Extent, Geometry,
    GoalPolicy, GroupLocking, Reserve,
};
pub use free_space_index::{AtomicBitset, FreeSpaceIndex};
pub use group_damage::{BitmapProblem, GroupDamage};
pub use group_loading::{BlockBitmapSource, DirtyGroup, GroupSummary};
pub use inode_allocator::{
    InodeAllocator, InodeError, InodeGeometry, InodeKind, InodeRequest, NewInode,
};
pub use inode_flex_counts::FlexInodeSummary;
pub use inode_group::InodeGroupSnapshot;
pub use inode_group_loading::{InodeBitmapSource, InodeGroupSummary};
pub use limit_counter::LimitCounter;
pub use pending_frees::TransactionFrees;
pub use reservation_window::ReservationWindow;
