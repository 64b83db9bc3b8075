//! The inode table: where each inode's record lives, and reading and writing records
//! through the block cache (a table block shared by many inodes has one copy, and
//! write-back writes it once).

use e4_alloc::InodeAllocator;
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
    pub(crate) fn write_record(&self, store: &BlockStore, inode: &Inode) -> Result<()> {
        self.record_writer(store).write(inode)
    }

    /// A writer of many records, which reads a table block once for a run of records in
    /// it: a commit writes its dirty inodes in number order, sixteen to a 4 KiB block.
    pub(crate) fn record_writer<'a>(&'a self, store: &'a BlockStore) -> RecordWriter<'a> {
        RecordWriter {
            table: self,
            store,
            block: None,
        }
    }

    /// The table block holding inode `ino`'s record; `None` for a number outside the table.
    pub(crate) fn block_of(&self, ino: u32) -> Option<u64> {
        self.slot(ino).ok().map(|(nr, _)| nr)
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
    /// The table block the last record went to.
    block: Option<Arc<Buffer>>,
}

impl RecordWriter<'_> {
    /// Makes the table block of inode `ino` from zeros instead of reading it, when the
    /// cache does not hold it and the only inodes in use in it are the `writers` whose
    /// records the caller (a commit's gather) is about to write: it lies past its group's
    /// `bg_itable_unused` as the last commit left it, and the inode bitmap, with this
    /// transaction's claims, shows exactly `writers` of its inodes in use. As the kernel's
    /// `__ext4_get_inode_loc`, which makes a new inode's block in memory when every other
    /// inode of it is free: a read per sixteen creates, with every operation stopped, is a
    /// disk's seek each. (The bitmap, not the descriptor alone: a damaged image may have
    /// inodes in use past `bg_itable_unused`, whose records a made block would wipe.)
    pub(crate) fn make_block_of_new(
        &mut self,
        ino: u32,
        writers: u32,
        descriptors: &GroupDescriptors,
        allocator: &InodeAllocator,
    ) {
        let geometry = &self.table.geometry;
        let (Some(nr), Some(at)) = (self.table.block_of(ino), geometry.inode_location(ino)) else {
            return;
        };
        if self.store.cache().peek(nr).is_some() {
            return;
        }
        let per_block = (geometry.block_size() as usize / self.table.inode_size).max(1) as u32;
        let first = at.index - at.index % per_block;
        let unused = descriptors.past_itable_used(at.group, first, geometry.inodes_per_group())
            && allocator.used_between(at.group, first, first + per_block) == Some(writers);
        if unused {
            if let Ok(buffer) = self.store.read_or_zeros(nr, true) {
                buffer.set_role(TABLE_ROLE);
                self.block = Some(buffer);
            }
        }
    }

    /// Encodes `inode` (computing its checksum) into its inode-table block, which the next
    /// commit writes.
    pub(crate) fn write(&mut self, inode: &Inode) -> Result<()> {
        let (nr, at) = self.table.slot(inode.ino)?;
        let buffer = match &self.block {
            Some(buffer) if buffer.nr() == nr => buffer,
            _ => {
                let buffer = self.store.read(nr)?;
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
