//! The engine's [`MetaIo`]: the mechanisms' block access inside the running transaction.
//! Reads go through the buffer cache (verified in the role asked for); writes replace the
//! cached copy and mark it dirty with its role, so write-back seals it; allocations come from
//! e4-alloc near the goal; frees wait for the commit.

use e4_alloc::{AllocRequest, Reserve};

use crate::buffer::cache::BufferRole;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::io::meta_io::{BlockKind, MetaIo, Owner};
use crate::txn::writer::{TxnHandle, Writer};

pub(crate) struct TxnIo<'a> {
    pub fs: &'a Filesystem,
    pub writer: &'a Writer,
    /// The caller's thread slot (limit counters, pending-free list).
    pub slot: usize,
    /// The set-aside blocks the mechanisms' own blocks (tree nodes) may come from: the
    /// handle's ([`Writer::reserve`]), or the metadata reserve when removing space.
    reserve: Reserve,
}

impl<'a> TxnIo<'a> {
    /// Block access for an operation holding `txn` on `fs`'s running transaction.
    pub fn new(fs: &'a Filesystem, writer: &'a Writer, txn: &TxnHandle<'_>) -> Self {
        TxnIo {
            fs,
            writer,
            slot: txn.slot,
            reserve: writer.reserve,
        }
    }

    /// Block access for an operation that splits extents without adding data (truncate,
    /// punch, collapse, insert): the tree blocks a split needs may come from the metadata
    /// reserve, as
    /// the kernel's `EXT4_GET_BLOCKS_METADATA_NOFAIL` lets them, so that freeing space on a
    /// full filesystem does not fail for want of one block.
    pub fn removing_space(self) -> Self {
        TxnIo {
            reserve: Reserve::Metadata,
            ..self
        }
    }
}

impl MetaIo for TxnIo<'_> {
    fn block_size(&self) -> usize {
        self.fs.block_size() as usize
    }

    fn visit(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        look: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let buffer = self.fs.store.read_as(nr, BufferRole::of(kind, owner))?;
        let bytes = buffer.bytes();
        look(&bytes)
    }

    fn modify(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        edit: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        // Verifying records the role write-back seals by (where there is a checksum to
        // seal), so the edit needs no second lock to set it.
        let buffer = self.fs.store.read_as(nr, BufferRole::of(kind, owner))?;
        edit(&mut buffer.bytes_mut())?;
        self.fs.store.cache().mark_dirty(&buffer);
        Ok(())
    }

    fn write(&self, nr: u64, kind: BlockKind, owner: Owner, bytes: &[u8]) -> Result<()> {
        let buffer = self.fs.store.cache().get_new(nr, bytes);
        buffer.set_role(BufferRole::of(kind, owner));
        self.fs.store.cache().mark_dirty(&buffer);
        Ok(())
    }

    fn allocate(&self, goal: u64, owner: Owner) -> Result<u64> {
        let extent = self
            .writer
            .blocks
            .allocate(AllocRequest {
                goal: (goal != 0).then_some(goal),
                len: 1,
                min_len: 1,
                slot: self.slot,
                stream: u64::from(owner.ino),
                reserve: self.reserve,
            })
            .map_err(Error::from_block_allocation)?;
        Ok(extent.start)
    }

    fn free(&self, start: u64, len: u64, _owner: Owner) -> Result<()> {
        self.writer.free_blocks(start, len, self.slot)?;
        for nr in start..start + len {
            self.fs.store.cache().forget(nr);
        }
        Ok(())
    }
}
