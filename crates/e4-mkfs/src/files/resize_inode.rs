//! The resize inode (inode 7): what lets the kernel grow the descriptor table online. A
//! double-indirect block whose pointers are the primary reserved GDT blocks, each listing
//! its copies in the backup groups, as `ext2fs_create_resize_inode` writes them.

use super::{Maker, DIND_SLOT, DIRECT_BLOCKS, RESIZE_INO};
use crate::error::Result;

impl Maker<'_> {
    /// `ext2fs_create_resize_inode`: a double-indirect block whose pointers are the primary
    /// reserved GDT blocks, each of which lists its backups in the backup groups.
    pub(super) fn resize_inode(&mut self) -> Result<()> {
        let sb = &self.layout.sb;
        let bs = self.layout.block_size();
        let apb = bs / 4;
        let sb_block = u64::from(sb.first_data_block);
        let rsv = u64::from(sb.reserved_gdt_blocks);
        let goal =
            sb_block + self.layout.desc_blocks + rsv + 2 + self.layout.inode_blocks_per_group;
        let dind = self.layout.allocate_block(goal)?;
        let mut inode = self.new_inode(RESIZE_INO, 0o100600);
        inode.record.links_count = 1;
        let mut dind_block = vec![0u8; bs as usize];
        let backups: Vec<u32> = (1..self.layout.groups())
            .filter(|&g| self.layout.sb.group_has_superblock(g))
            .collect();
        let mut blocks = 1;
        for i in 0..rsv {
            let gdt_block = sb_block + 1 + self.layout.desc_blocks + i;
            let slot = ((self.layout.desc_blocks + i) % apb) as usize;
            dind_block[4 * slot..4 * slot + 4].copy_from_slice(&(gdt_block as u32).to_le_bytes());
            let mut list = vec![0u8; bs as usize];
            for (n, &g) in backups.iter().enumerate() {
                let backup = gdt_block + u64::from(g) * u64::from(self.layout.sb.blocks_per_group);
                list[4 * n..4 * n + 4].copy_from_slice(&(backup as u32).to_le_bytes());
            }
            blocks += 1 + backups.len() as u64;
            self.files.blocks.insert(gdt_block, list);
        }
        self.files.blocks.insert(dind, dind_block);
        let mut i_block = [0u8; 60];
        i_block[4 * DIND_SLOT..4 * DIND_SLOT + 4].copy_from_slice(&(dind as u32).to_le_bytes());
        inode.record.block = i_block;
        inode.set_size((apb * apb + apb + DIRECT_BLOCKS as u64) * bs);
        let huge_file = self
            .layout
            .sb
            .ro_compat()
            .contains(e4_format::features::RoCompatFeatures::HUGE_FILE);
        inode.set_blocks_512(blocks * bs / 512, huge_file);
        self.store(&inode);
        Ok(())
    }
}
