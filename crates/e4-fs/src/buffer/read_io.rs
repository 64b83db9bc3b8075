//! The mechanisms' block access for reading: [`MetaIo`] over the block store, outside any
//! transaction. The read path walks extent trees, block maps and directories through the
//! same mechanisms the write path edits them with, seeing each block as the cache holds it,
//! verified in its role once. Nothing can be written, allocated or freed through it.

use crate::buffer::cache::BufferRole;
use crate::buffer::store::BlockStore;
use crate::error::{Error, Result};
use crate::io::meta_io::{BlockKind, LookWithDerived, MetaIo, Owner};

pub(crate) struct ReadIo<'a> {
    store: &'a BlockStore,
}

impl<'a> ReadIo<'a> {
    pub(crate) fn new(store: &'a BlockStore) -> Self {
        ReadIo { store }
    }
}

/// What a mechanism that tried to change something through a [`ReadIo`] gets: a bug in the
/// engine (a read path that edits), reported as such.
fn read_only(what: &str, nr: u64) -> Error {
    Error::Internal(format!("{what} of block {nr} through the read path"))
}

impl MetaIo for ReadIo<'_> {
    fn block_size(&self) -> usize {
        self.store.block_size() as usize
    }

    fn visit(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        look: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        self.store.visit(nr, BufferRole::of(kind, owner), look)
    }

    fn visit_with_derived(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        look: &mut LookWithDerived<'_>,
    ) -> Result<()> {
        self.store
            .visit_with_derived(nr, BufferRole::of(kind, owner), look)
    }

    fn modify(
        &self,
        nr: u64,
        _kind: BlockKind,
        _owner: Owner,
        _edit: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        Err(read_only("a change", nr))
    }

    fn write(&self, nr: u64, _kind: BlockKind, _owner: Owner, _bytes: &[u8]) -> Result<()> {
        Err(read_only("a write", nr))
    }

    fn allocate(&self, goal: u64, _owner: Owner) -> Result<u64> {
        Err(read_only("an allocation near", goal))
    }

    fn free(&self, start: u64, _len: u64, _owner: Owner) -> Result<()> {
        Err(read_only("a free", start))
    }
}
