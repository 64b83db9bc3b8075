//! What a transaction credit is, and what the common changes cost in credits: the
//! vocabulary every layer uses to declare what an operation may dirty before it dirties it
//! (the ledger that sums the declarations is `txn/credit_ledger.rs`).
//!
//! A credit is one metadata block a commit may write: an inode-table block, a tree or
//! directory block, a bitmap, a descriptor block. An operation declares its worst case when
//! it joins the running transaction, and a loop or mechanism that learns its length only
//! while it runs declares each step before taking it ([`crate::io::meta_io::MetaIo::extend_credits`]),
//! as jbd2's handles do with `jbd2_journal_start` and `jbd2_journal_extend`. The superblock
//! is the transaction's own: one per commit, declared by no handle.

/// One inode record: its inode-table block.
pub(crate) const INODE: u32 = 1;
/// One allocation or free of a run of blocks, or of an inode, in one group: the group's
/// bitmap and the descriptor block holding its counts.
pub(crate) const GROUP: u32 = 2;
/// A new inode: its table block, its group's inode bitmap and descriptor, and the table
/// slots before it that the commit zeroes when it is the first past `bg_itable_unused`
/// (they lie in its own block or the one before).
pub(crate) const NEW_INODE: u32 = INODE + GROUP + 1;
/// An inode going on or off the orphan list: the neighbour whose `i_dtime` link changes
/// (the list's head is in the superblock).
pub(crate) const ORPHAN: u32 = INODE;
/// One new metadata block of a mechanism: the block and its allocation.
pub(crate) const NEW_BLOCK: u32 = 1 + GROUP;
