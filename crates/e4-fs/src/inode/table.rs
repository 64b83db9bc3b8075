//! Writing inode records into their inode-table blocks (through the buffer cache, so a
//! table block shared by many inodes has one copy), and raw blocks that live outside the
//! cache (bitmaps, descriptor blocks).

use e4_format::inode::Inode;

use crate::buffer::cache::BufferRole;
use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::io::meta_io::BlockKind;

const TABLE_ROLE: BufferRole = BufferRole {
    kind: BlockKind::InodeTable,
    owner: None,
};

impl Filesystem {
    /// Encodes `inode` (computing its checksum) into its inode-table block.
    pub(crate) fn write_inode_record(&self, inode: &Inode) -> Result<()> {
        let (nr, at) = self.inode_slot(inode.ino)?;
        let buffer = self.store.read(nr)?;
        let bytes = inode.to_bytes(self.store.csum_seed());
        buffer.bytes_mut()[at..at + bytes.len()].copy_from_slice(&bytes);
        buffer.set_role(TABLE_ROLE);
        self.store.cache().mark_dirty(&buffer);
        Ok(())
    }

    /// Zeroes the records of group `group`'s inodes `from..to` that `bitmap` shows free
    /// (slots that become visible to e2fsck when `bg_itable_unused` shrinks, in a table
    /// that was never zeroed).
    pub(crate) fn zero_inode_slots(
        &self,
        group: u32,
        from: u32,
        to: u32,
        bitmap: &[u8],
    ) -> Result<()> {
        let ipg = self.geometry.inodes_per_group();
        let inode_size = self.superblock().inode_size() as usize;
        for index in from..to.min(ipg) {
            if bitmap[(index / 8) as usize] & (1 << (index % 8)) != 0 {
                continue;
            }
            let ino = group * ipg + index + 1;
            let (nr, at) = self.inode_slot(ino)?;
            let buffer = self.store.read(nr)?;
            buffer.bytes_mut()[at..at + inode_size].fill(0);
            buffer.set_role(TABLE_ROLE);
            self.store.cache().mark_dirty(&buffer);
        }
        Ok(())
    }
}
