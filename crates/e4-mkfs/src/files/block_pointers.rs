//! Block-mapped files (ext2, ext3, ext4 without extents): direct pointers, then indirect,
//! double and triple indirect blocks, allocated one block at a time as `ext2fs_bmap2` does.

use std::collections::BTreeMap;

use e4_format::inode::Inode;

use super::{Maker, DIND_SLOT, DIRECT_BLOCKS};
use crate::error::Result;
use crate::layout::Layout;

/// `i_block` slots of the indirect and triple indirect blocks.
const IND_SLOT: usize = 12;
const TIND_SLOT: usize = 14;

impl Maker<'_> {
    /// Allocates `count` data blocks of a block-mapped file as `ext2fs_bmap2` does one
    /// block at a time: each from the block before, with an indirect block taken when the
    /// first block it maps is (so pointer blocks sit between the data they map). Fills
    /// `inode`'s pointers and returns the data and pointer blocks.
    pub(super) fn allocate_block_mapped(
        &mut self,
        ino: u32,
        count: u64,
        inode: &mut Inode,
    ) -> Result<(Vec<u64>, Vec<u64>)> {
        let bs = self.layout.block_size();
        let apb = bs / 4;
        let mut goal = self.inode_goal(ino);
        let mut data = Vec::with_capacity(count as usize);
        let mut meta = Vec::new();
        let mut i_block = [0u32; 15];
        // Pointer blocks being filled: index 0 the current IND, 1 the DIND, 2 the TIND.
        let mut pointer_blocks: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let take = |layout: &mut Layout, goal: &mut u64| -> Result<u64> {
            let b = layout.allocate_block(*goal)?;
            *goal = b;
            Ok(b)
        };
        let put = |blocks: &mut BTreeMap<u64, Vec<u8>>, at: u64, index: u64, value: u64| {
            let block = blocks.entry(at).or_insert_with(|| vec![0u8; bs as usize]);
            let i = (index * 4) as usize;
            block[i..i + 4].copy_from_slice(&(value as u32).to_le_bytes());
        };
        let (mut ind, mut dind, mut tind) = (0u64, 0u64, 0u64);
        for n in 0..count {
            if n < DIRECT_BLOCKS as u64 {
                let b = take(self.layout, &mut goal)?;
                i_block[n as usize] = b as u32;
                data.push(b);
                continue;
            }
            let m = n - DIRECT_BLOCKS as u64;
            if m < apb {
                if m == 0 {
                    ind = take(self.layout, &mut goal)?;
                    i_block[IND_SLOT] = ind as u32;
                    meta.push(ind);
                }
                let b = take(self.layout, &mut goal)?;
                put(&mut pointer_blocks, ind, m, b);
                data.push(b);
                continue;
            }
            let m = m - apb;
            if m < apb * apb {
                if m == 0 {
                    dind = take(self.layout, &mut goal)?;
                    i_block[DIND_SLOT] = dind as u32;
                    meta.push(dind);
                }
                if m % apb == 0 {
                    ind = take(self.layout, &mut goal)?;
                    put(&mut pointer_blocks, dind, m / apb, ind);
                    meta.push(ind);
                }
                let b = take(self.layout, &mut goal)?;
                put(&mut pointer_blocks, ind, m % apb, b);
                data.push(b);
                continue;
            }
            let m = m - apb * apb;
            if m == 0 {
                tind = take(self.layout, &mut goal)?;
                i_block[TIND_SLOT] = tind as u32;
                meta.push(tind);
            }
            if m % (apb * apb) == 0 {
                dind = take(self.layout, &mut goal)?;
                put(&mut pointer_blocks, tind, m / (apb * apb), dind);
                meta.push(dind);
            }
            if m % apb == 0 {
                ind = take(self.layout, &mut goal)?;
                put(&mut pointer_blocks, dind, (m / apb) % apb, ind);
                meta.push(ind);
            }
            let b = take(self.layout, &mut goal)?;
            put(&mut pointer_blocks, ind, m % apb, b);
            data.push(b);
        }
        self.files.blocks.extend(pointer_blocks);
        let mut raw = [0u8; 60];
        for (i, p) in i_block.iter().enumerate() {
            raw[4 * i..4 * i + 4].copy_from_slice(&p.to_le_bytes());
        }
        inode.record.block = raw;
        Ok((data, meta))
    }
}
