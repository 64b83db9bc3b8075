//! The inode table: where each inode's record lives, and reading and writing records
//! through the block cache (a table block shared by many inodes has one copy, and
//! write-back writes it once).

use e4_format::geometry::Geometry;
use e4_format::inode::Inode;
use e4_format::{FormatError, Location, Problem, Structure};

use std::sync::Arc;

use crate::buffer::cache::{Buffer, BufferRole};
use crate::buffer::store::BlockStore;
use crate::error::Result;
use crate::io::meta_io::BlockKind;
use crate::space::descriptors::GroupDescriptors;

/// Inode-table blocks carry no checksum of their own: each record's is computed when the
/// record is encoded into the block.
const TABLE_ROLE: BufferRole = BufferRole {
    kind: BlockKind::InodeTable,
    owner: None,
};

pub(crate) struct InodeTable {
    geometry: Geometry,
    /// Each group's first inode-table block (fixed at open: read without any lock).
    tables: Box<[u64]>,
    /// `s_inode_size`.
    inode_size: usize,
}

impl InodeTable {
    pub(crate) fn new(
        geometry: &Geometry,
        descriptors: &GroupDescriptors,
        inode_size: usize,
    ) -> Result<Self> {
        Ok(InodeTable {
            geometry: geometry.clone(),
            tables: descriptors.inode_tables()?,
            inode_size,
        })
    }

    /// Where inode `ino`'s record is: its inode-table block and the byte offset there.
    pub(crate) fn slot(&self, ino: u32) -> Result<(u64, usize)> {
        let loc = self.geometry.inode_location(ino).ok_or_else(|| {
            FormatError::corrupt(
                Structure::InodeNumber,
                Location::Inode(ino),
                Problem::NumberOutOfRange,
            )
        })?;
        let table = self.tables[loc.group as usize];
        let bs = u64::from(self.geometry.block_size());
        Ok((
            table + loc.table_offset / bs,
            (loc.table_offset % bs) as usize,
        ))
    }

    /// Reads and parses inode `ino`'s record, whatever it holds. `unwritten` says whether
    /// its slot lies in the part of the table the group descriptor marks as never written,
    /// whose records may hold anything: reading one is corruption (a name leads to it).
    pub(crate) fn read_record(
        &self,
        store: &BlockStore,
        ino: u32,
        unwritten: bool,
    ) -> Result<Inode> {
        let (block_nr, at) = self.slot(ino)?;
        if unwritten {
            let group = self.geometry.inode_location(ino).map_or(0, |l| l.group);
            return Err(FormatError::corrupt(
                Structure::Inode,
                Location::Inode(ino),
                Problem::InUninitializedInodeTable { group },
            )
            .into());
        }
        let block = store.read(block_nr)?;
        store.checked(&block, |block| {
            let record = &block.bytes()[at..at + self.inode_size];
            Ok(Inode::parse(record, ino, store.csum_seed())?)
        })
    }

    /// Encodes `inode` (computing its checksum) into its inode-table block, which the next
    /// commit writes.
    pub(crate) fn write_record(
        &self,
        store: &BlockStore,
        descriptors: &GroupDescriptors,
        inode: &Inode,
    ) -> Result<()> {
        self.record_writer(store, descriptors).write(inode)
    }

    /// A writer of many records, which reads a table block once for a run of records in
    /// it: a commit writes its dirty inodes in number order, sixteen to a 4 KiB block.
    pub(crate) fn record_writer<'a>(
        &'a self,
        store: &'a BlockStore,
        descriptors: &'a GroupDescriptors,
    ) -> RecordWriter<'a> {
        RecordWriter {
            table: self,
            store,
            descriptors,
            block: None,
        }
    }

    /// Whether no inode of the table block holding `ino` was ever in use, as the last
    /// commit left the descriptors (`BG_INODE_UNINIT`, or past `bg_itable_unused`): the
    /// only records that block will hold are ones written since.
    fn block_never_written(&self, descriptors: &GroupDescriptors, ino: u32) -> bool {
        let Some(at) = self.geometry.inode_location(ino) else {
            return false;
        };
        let per_block = (self.geometry.block_size() as usize / self.inode_size).max(1) as u32;
        let first = at.index - at.index % per_block;
        descriptors.past_itable_used(at.group, first, self.geometry.inodes_per_group())
    }

    /// Zeroes the records of group `group`'s inodes `from..to` that `bitmap` shows free
    /// (slots that become visible to e2fsck when `bg_itable_unused` shrinks, in a table
    /// that was never zeroed).
    pub(crate) fn zero_free_slots(
        &self,
        store: &BlockStore,
        group: u32,
        from: u32,
        to: u32,
        bitmap: &[u8],
    ) -> Result<()> {
        let ipg = self.geometry.inodes_per_group();
        for index in from..to.min(ipg) {
            if bitmap[(index / 8) as usize] & (1 << (index % 8)) != 0 {
                continue;
            }
            let (nr, at) = self.slot(group * ipg + index + 1)?;
            let buffer = store.read(nr)?;
            buffer.bytes_mut()[at..at + self.inode_size].fill(0);
            buffer.set_role(TABLE_ROLE);
            store.cache().mark_dirty(&buffer);
        }
        Ok(())
    }
}

/// Records written one after another into their table blocks ([`InodeTable::record_writer`]).
pub(crate) struct RecordWriter<'a> {
    table: &'a InodeTable,
    store: &'a BlockStore,
    descriptors: &'a GroupDescriptors,
    /// The table block the last record went to.
    block: Option<Arc<Buffer>>,
}

impl RecordWriter<'_> {
    /// Encodes `inode` (computing its checksum) into its inode-table block, which the next
    /// commit writes.
    pub(crate) fn write(&mut self, inode: &Inode) -> Result<()> {
        let (nr, at) = self.table.slot(inode.ino)?;
        let buffer = match &self.block {
            Some(buffer) if buffer.nr() == nr => buffer,
            _ => {
                // A block of new inodes only is made, not read: a create's record went
                // to a block the device was read for, a third of a commit's gather.
                let fresh = self.table.block_never_written(self.descriptors, inode.ino);
                let buffer = self.store.read_or_zeros(nr, fresh)?;
                buffer.set_role(TABLE_ROLE);
                self.block.insert(buffer)
            }
        };
        inode.encode_into(
            &mut buffer.bytes_mut()[at..at + self.table.inode_size],
            self.store.csum_seed(),
        );
        self.store.cache().mark_dirty(buffer);
        Ok(())
    }
}
