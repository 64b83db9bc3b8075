//! The small interface every on-disk mechanism (extent tree, block map, directory blocks,
//! htree) works through, so each mechanism is a unit that can be tested on an in-memory store
//! and knows nothing of caches, transactions or allocators.
//!
//! Reads show the block as the running transaction sees it, borrowed ([`MetaIo::visit`], for
//! a lookup that only looks) or copied ([`MetaIo::read`], for a rebuild); a small change is
//! made where the block lies ([`MetaIo::modify`]); writes record whole new contents. Changes
//! reach the disk when the transaction commits. Checksums are not the
//! mechanism's business: a block is *sealed* (its checksum computed) at write-back, by the
//! [`BlockKind`] it was written as and its [`Owner`] (DESIGN.md, concurrency rule 4).

use crate::error::Result;
use crate::io::derived::Derived;

/// What a metadata block holds: decides how it is verified when read and sealed when written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockKind {
    /// A non-root extent tree node (header, entries, `ext4_extent_tail`).
    ExtentNode,
    /// A block of an indirect block map (no checksum).
    IndirectBlock,
    /// A directory block holding entries (with a checksum tail under metadata_csum).
    DirectoryLeaf,
    /// An htree interior node or root (with a `dx_tail` under metadata_csum).
    HtreeNode,
    /// An extended attribute block.
    XattrBlock,
    /// A block of an inode table: each record carries its own checksum, computed when the
    /// inode is written into the block.
    InodeTable,
}

/// The inode a block belongs to: its checksum is seeded with the inode's number and
/// generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner {
    pub ino: u32,
    pub generation: u32,
}

impl Owner {
    /// The owner of `inode`'s blocks.
    pub fn of(inode: &e4_format::inode::Inode) -> Owner {
        Owner {
            ino: inode.ino,
            generation: inode.record.generation,
        }
    }
}

/// A look at a block's bytes and what the store derived from them
/// ([`MetaIo::visit_with_derived`]).
pub type LookWithDerived<'a> = dyn FnMut(&[u8], Option<&Derived>) -> Result<()> + 'a;
/// An edit of a block's bytes that keeps what was derived from them true
/// ([`MetaIo::modify_with_derived`]).
pub type EditWithDerived<'a> = dyn FnMut(&mut [u8], Option<&mut Derived>) -> Result<()> + 'a;
/// Told by an edit, before it changes them, which bytes it changes: their offset in the
/// block and what they hold ([`MetaIo::modify_in_ranges`]).
pub type BeforeChange<'a> = dyn FnMut(usize, &[u8]) + 'a;
/// An edit that says which bytes it changes ([`MetaIo::modify_in_ranges`]).
pub type EditInRanges<'a> =
    dyn FnMut(&mut [u8], Option<&mut Derived>, &mut BeforeChange<'_>) -> Result<()> + 'a;

/// Block-level access inside one transaction, as a mechanism needs it.
pub trait MetaIo {
    /// Block size in bytes.
    fn block_size(&self) -> usize;
    /// Shows `look` metadata block `nr` as this transaction sees it (verified as `kind` the
    /// first time it comes from the disk), without copying it: a lookup through an htree
    /// reads two or three blocks per operation and keeps none of them. `look` runs with
    /// the block's buffer locked for reading, so it must not use this `MetaIo`.
    fn visit(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        look: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()>;
    /// [`MetaIo::visit`], with the structure derived from the block's bytes that the store
    /// keeps beside its cached copy ([`Derived`]); `None` from a store that keeps none.
    fn visit_with_derived(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        look: &mut LookWithDerived<'_>,
    ) -> Result<()> {
        self.visit(nr, kind, owner, &mut |bytes| look(bytes, None))
    }
    /// [`MetaIo::modify`], with the block's derived structure where the store keeps one:
    /// `edit` keeps it true of the bytes it leaves, or clears it.
    fn modify_with_derived(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        edit: &mut EditWithDerived<'_>,
    ) -> Result<()> {
        self.modify(nr, kind, owner, &mut |bytes| edit(bytes, None))
    }
    /// [`MetaIo::modify_with_derived`] for an edit that changes a few bytes of a block and
    /// says which: before it changes a range it calls the [`BeforeChange`] it is given with
    /// the range's offset and bytes, and it changes no byte it has not named. A store that
    /// can put an operation back keeps those bytes instead of a copy of the whole block (a
    /// directory entry removed changes a few dozen bytes of 4 KiB, and the copy was what
    /// an unlink waited on most). This default keeps nothing.
    fn modify_in_ranges(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        edit: &mut EditInRanges<'_>,
    ) -> Result<()> {
        self.modify_with_derived(nr, kind, owner, &mut |bytes, kept| {
            edit(bytes, kept, &mut |_, _| {})
        })
    }
    /// A copy of metadata block `nr`, for a caller that rebuilds it and writes it back.
    fn read(&self, nr: u64, kind: BlockKind, owner: Owner) -> Result<Vec<u8>> {
        look_at(self, nr, kind, owner, |bytes| Ok(bytes.to_vec()))
    }
    /// Lets `edit` change metadata block `nr` where it lies, as this transaction sees it
    /// (verified as `kind` the first time it comes from the disk); the block is then
    /// written at commit, sealed as `kind`. A directory entry added or removed changes a
    /// few dozen bytes of a block: copying the block out and back in was a tenth of an
    /// unlink. `edit` runs with the block's buffer locked for writing, so it must not use
    /// this `MetaIo`; when it fails the block counts as unchanged, so it must fail before
    /// changing anything. This default reads a copy, edits it and writes it back.
    fn modify(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        edit: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let mut bytes = self.read(nr, kind, owner)?;
        edit(&mut bytes)?;
        self.write(nr, kind, owner, &bytes)
    }
    /// Replaces the contents of block `nr` (a whole block); it is sealed as `kind` and
    /// written at commit.
    fn write(&self, nr: u64, kind: BlockKind, owner: Owner, bytes: &[u8]) -> Result<()>;
    /// A new block for `owner`'s metadata, near `goal` (0: no preference). Fails with
    /// [`crate::Error::NoSpace`] when the filesystem is full.
    fn allocate(&self, goal: u64, owner: Owner) -> Result<u64>;
    /// Gives back `len` blocks from `start` that `owner` no longer uses; they become
    /// reusable once the transaction commits.
    fn free(&self, start: u64, len: u64, owner: Owner) -> Result<()>;
    /// Declares that the operation may dirty `credits` more metadata blocks
    /// ([`crate::io::credits`]) than it declared when it began: a mechanism calls this before
    /// a change whose size it learns only while it runs (a re-pack of a tree, a shift of
    /// every leaf after a point). Stores outside a transaction have nothing to declare.
    fn extend_credits(&self, _credits: u32) {}
    /// Checks `len` blocks from `start` that `owner` names (a run of its data, a block of
    /// its mapping's own, its xattr block) before they are read as its or written: they
    /// must lie inside the filesystem and clear of its system zone (superblocks and
    /// descriptors, bitmaps, inode tables, the journal), or a write through a damaged
    /// pointer would land on them (the kernel's `ext4_inode_block_valid`). Stores outside a transaction only
    /// read, and check nothing here.
    fn check_mapped(&self, _start: u64, _len: u64, _owner: Owner) -> Result<()> {
        Ok(())
    }
}

/// [`MetaIo::visit`] for a look that yields a value (the trait method takes a `dyn` closure
/// so that mechanisms can hold a `&dyn MetaIo`).
pub(crate) fn look_at<T>(
    io: &(impl MetaIo + ?Sized),
    nr: u64,
    kind: BlockKind,
    owner: Owner,
    look: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    look_with_derived(io, nr, kind, owner, |bytes, _| look(bytes))
}

/// [`MetaIo::visit_with_derived`] for a look that yields a value.
pub(crate) fn look_with_derived<T>(
    io: &(impl MetaIo + ?Sized),
    nr: u64,
    kind: BlockKind,
    owner: Owner,
    look: impl FnOnce(&[u8], Option<&Derived>) -> Result<T>,
) -> Result<T> {
    let mut look = Some(look);
    let mut seen = None;
    io.visit_with_derived(nr, kind, owner, &mut |bytes, kept| {
        let look = look.take().expect("visit shows the block once");
        seen = Some(look(bytes, kept)?);
        Ok(())
    })?;
    Ok(seen.expect("visit returned Ok without showing the block"))
}

/// [`MetaIo::modify_in_ranges`] for an edit that yields a value.
pub(crate) fn edit_in_ranges<T>(
    io: &(impl MetaIo + ?Sized),
    nr: u64,
    kind: BlockKind,
    owner: Owner,
    edit: impl FnOnce(&mut [u8], Option<&mut Derived>, &mut BeforeChange<'_>) -> Result<T>,
) -> Result<T> {
    let mut edit = Some(edit);
    let mut made = None;
    io.modify_in_ranges(nr, kind, owner, &mut |bytes, kept, before| {
        let edit = edit.take().expect("modify edits the block once");
        made = Some(edit(bytes, kept, before)?);
        Ok(())
    })?;
    Ok(made.expect("modify returned Ok without editing the block"))
}

#[cfg(test)]
pub(crate) mod memory {
    //! A [`MetaIo`] over a map of blocks with a bump allocator, for mechanism unit tests.

    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Mutex;

    use super::*;
    use crate::error::Error;

    /// A check of a directory leaf's bytes, at the location given.
    pub(crate) type LeafCheck = Box<dyn Fn(&[u8], e4_format::Location) -> Result<()> + Send + Sync>;

    /// Blocks in memory; allocation hands out increasing numbers from `first`, up to `limit`.
    pub(crate) struct MemoryMetaIo {
        pub block_size: usize,
        pub blocks: Mutex<BTreeMap<u64, (BlockKind, Vec<u8>)>>,
        pub allocated: Mutex<BTreeSet<u64>>,
        next: Mutex<u64>,
        limit: u64,
        /// Blocks read so far (every `visit`, and so every `read` and `modify`), for tests
        /// of how much of a structure an operation touches.
        pub reads: std::sync::atomic::AtomicU64,
        /// A check run on every directory leaf read, as the engine's verifier runs one (its
        /// entry chain), for tests that plant damaged leaves.
        leaf_check: Option<LeafCheck>,
        /// Blocks' derived structures (directory leaves' indexes), kept as the buffer cache
        /// keeps them: by the edits that keep them true, dropped by every other write.
        derived: Mutex<BTreeMap<u64, Derived>>,
    }

    impl MemoryMetaIo {
        pub(crate) fn new(block_size: usize, first: u64, limit: u64) -> Self {
            MemoryMetaIo {
                block_size,
                blocks: Mutex::default(),
                allocated: Mutex::default(),
                next: Mutex::new(first),
                limit,
                reads: Default::default(),
                leaf_check: None,
                derived: Mutex::default(),
            }
        }

        /// Runs `check` on every directory leaf read.
        pub(crate) fn verifying_leaves(mut self, check: LeafCheck) -> Self {
            self.leaf_check = Some(check);
            self
        }

        /// Blocks allocated and not freed.
        pub(crate) fn live_blocks(&self) -> usize {
            self.allocated.lock().unwrap().len()
        }
    }

    impl MetaIo for MemoryMetaIo {
        fn block_size(&self) -> usize {
            self.block_size
        }

        fn visit(
            &self,
            nr: u64,
            kind: BlockKind,
            _owner: Owner,
            look: &mut dyn FnMut(&[u8]) -> Result<()>,
        ) -> Result<()> {
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match self.blocks.lock().unwrap().get(&nr) {
                Some((written_as, bytes)) => {
                    assert_eq!(*written_as, kind, "block {nr} read as another kind");
                    if let (BlockKind::DirectoryLeaf, Some(check)) = (kind, &self.leaf_check) {
                        check(bytes, e4_format::Location::Block(nr))?;
                    }
                    look(bytes)
                }
                None => look(&vec![0; self.block_size]),
            }
        }

        fn visit_with_derived(
            &self,
            nr: u64,
            kind: BlockKind,
            owner: Owner,
            look: &mut LookWithDerived<'_>,
        ) -> Result<()> {
            let mut derived = self.derived.lock().unwrap();
            let kept = derived.entry(nr).or_default();
            self.visit(nr, kind, owner, &mut |bytes| look(bytes, Some(kept)))
        }

        fn modify_with_derived(
            &self,
            nr: u64,
            kind: BlockKind,
            owner: Owner,
            edit: &mut EditWithDerived<'_>,
        ) -> Result<()> {
            let mut kept = self.derived.lock().unwrap().remove(&nr).unwrap_or_default();
            let mut bytes = self.read(nr, kind, owner)?;
            edit(&mut bytes, Some(&mut kept))?;
            self.write(nr, kind, owner, &bytes)?;
            self.derived.lock().unwrap().insert(nr, kept);
            Ok(())
        }

        fn write(&self, nr: u64, kind: BlockKind, _owner: Owner, bytes: &[u8]) -> Result<()> {
            assert_eq!(bytes.len(), self.block_size);
            self.derived.lock().unwrap().remove(&nr);
            assert!(
                self.allocated.lock().unwrap().contains(&nr),
                "write to block {nr}, which is not allocated"
            );
            self.blocks
                .lock()
                .unwrap()
                .insert(nr, (kind, bytes.to_vec()));
            Ok(())
        }

        fn allocate(&self, _goal: u64, _owner: Owner) -> Result<u64> {
            let mut next = self.next.lock().unwrap();
            if *next >= self.limit {
                return Err(Error::NoSpace(crate::error::Shortage::Blocks));
            }
            let nr = *next;
            *next += 1;
            self.allocated.lock().unwrap().insert(nr);
            Ok(nr)
        }

        fn free(&self, start: u64, len: u64, _owner: Owner) -> Result<()> {
            let mut allocated = self.allocated.lock().unwrap();
            for nr in start..start + len {
                self.derived.lock().unwrap().remove(&nr);
                assert!(
                    allocated.remove(&nr),
                    "free of block {nr}, which is not allocated"
                );
                self.blocks.lock().unwrap().remove(&nr);
            }
            Ok(())
        }
    }
}
