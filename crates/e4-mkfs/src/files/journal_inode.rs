//! The journal (inode 8) as `ext2fs_add_journal_inode` makes it: its size from the
//! filesystem's (or `-J size=`), its blocks from the middle of the filesystem in extents
//! (a leaf block when they outgrow the inode), or block-mapped after the files before it,
//! and an empty jbd2 log whose superblock says so.

use e4_format::checksum::inode_csum_seed;
use e4_format::extent::{
    ExtentHeader, ExtentIndex, ExtentLeaf, ExtentNode, EXTENT_MAGIC, MAX_INIT_LEN,
};
use e4_format::features::CompatFeatures;
use e4_format::inode::{Inode, JOURNAL_INO};
use e4_format::journal::{JournalSuperblock, JOURNAL_MAGIC};
use e4_format::MetadataBlock;

use super::{extent_root, runs, Maker, ROOT_EXTENTS};
use crate::error::{MkfsError, Result};
use crate::params::Params;

/// `JBD2_SUPERBLOCK_V2`.
const JOURNAL_SUPERBLOCK_V2: u32 = 4;
/// `EXT3_JNL_BACKUP_BLOCKS`: `s_jnl_blocks` holds a copy of the journal's `i_block`.
const JOURNAL_BACKUP_BLOCKS: u8 = 1;

impl Maker<'_> {
    /// `get_midpoint_journal_block`: the first block of the group, around the middle of the
    /// filesystem, with the most free blocks.
    fn journal_goal(&self) -> u64 {
        let l = &*self.layout;
        let groups = l.groups();
        let mut group = l.group_of((l.sb.blocks_count() - u64::from(l.sb.first_data_block)) / 2);
        let log_flex = 1u32 << l.sb.log_groups_per_flex;
        let start;
        if l.sb.log_groups_per_flex != 0 && group > log_flex {
            group &= !(log_flex - 1);
            while group < groups && l.group_free_blocks(group) == 0 {
                group += 1;
            }
            if group == groups {
                group = 0;
            }
            start = group;
        } else {
            start = group.saturating_sub(1);
        }
        let end = if group + 1 < groups { group + 1 } else { group };
        let mut best = start;
        for g in start + 1..=end {
            if l.group_free_blocks(g) > l.group_free_blocks(best) {
                best = g;
            }
        }
        l.group_first_block(best)
    }

    /// `figure_journal_size`: `-J size=` or `ext2fs_default_journal_size`.
    fn journal_size(&self, p: &Params) -> Result<u64> {
        let blocks = self.layout.sb.blocks_count();
        let bs = self.layout.block_size();
        // `ext2fs_get_journal_params` first: under 2048 blocks there is no journal, even
        // one asked for with -J (mke2fs says "Filesystem too small for a journal" and goes
        // on without one; `Made::journal_blocks` is then 0).
        if blocks < 2048 {
            return Ok(0);
        }
        let size = match p.journal_size_mib {
            Some(mib) => {
                let j = mib * 1024 / (bs / 1024);
                if !(1024..=10_240_000).contains(&j) {
                    return Err(MkfsError::InvalidOption {
                        option: "-J size".into(),
                        reason: format!(
                            "{mib} MiB is {j} blocks; a journal has 1024 to 10,240,000"
                        ),
                    });
                }
                let free: u64 = (0..self.layout.groups())
                    .map(|g| self.layout.group_free_blocks(g))
                    .sum();
                if j > free / 2 {
                    return Err(MkfsError::InvalidOption {
                        option: "-J size".into(),
                        reason: format!("{mib} MiB is more than half the free space"),
                    });
                }
                j
            }
            None => match blocks {
                0..32768 => 1024,
                32768..262_144 => 4096,
                262_144..524_288 => 8192,
                524_288..4_194_304 => 16384,
                4_194_304..8_388_608 => 32768,
                8_388_608..16_777_216 => 65536,
                16_777_216..33_554_432 => 131_072,
                _ => 262_144,
            },
        };
        Ok(size)
    }

    /// The journal inode (`write_journal_inode`): its blocks from the middle of the
    /// filesystem (extents) or after the files before it (block map), an empty jbd2 log
    /// whose superblock says so.
    pub(super) fn journal(&mut self, p: &Params) -> Result<()> {
        let count = self.journal_size(p)?;
        if count == 0 {
            // mke2fs: a filesystem under 2048 blocks gets no journal.
            self.layout.sb.feature_compat &= !CompatFeatures::HAS_JOURNAL.bits();
            return Ok(());
        }
        let mut inode = self.new_inode(JOURNAL_INO, 0o100600);
        inode.record.links_count = 1;
        let (data, meta) = match self.extents {
            true => self.allocate_journal_extents(count)?,
            false => self.allocate_block_mapped(JOURNAL_INO, count, &mut inode)?,
        };
        let bs = self.block_size();
        let mut jsb = JournalSuperblock::decode(&[0; 1024]);
        jsb.header[..4].copy_from_slice(&JOURNAL_MAGIC.to_be_bytes());
        jsb.header[4..8].copy_from_slice(&JOURNAL_SUPERBLOCK_V2.to_be_bytes());
        jsb.blocksize = bs as u32;
        jsb.maxlen = count as u32;
        jsb.nr_users = 1;
        jsb.first = 1;
        jsb.sequence = 1;
        jsb.uuid = self.layout.sb.uuid;
        let mut block = vec![0u8; bs];
        let mut raw = [0u8; 1024];
        jsb.encode(&mut raw);
        block[..1024].copy_from_slice(&raw);
        self.files.blocks.insert(data[0], block);
        self.map_file(&mut inode, &data, &meta);
        if let (true, Some(&leaf)) = (self.extents, meta.first()) {
            self.extent_leaf(&mut inode, leaf, &runs(&data));
        }
        self.files.journal_blocks = count;
        self.files.journal_runs = runs(&data);
        self.files.journal_backup = Some((inode.record.block, inode.size()));
        self.store(&inode);
        self.layout.sb.journal_inum = JOURNAL_INO;
        self.layout.sb.jnl_backup_type = JOURNAL_BACKUP_BLOCKS;
        Ok(())
    }

    /// The journal's blocks as `ext_falloc_helper` takes them: free runs from the middle of
    /// the filesystem, each at most [`MAX_INIT_LEN`] blocks. A fifth extent does not fit in
    /// the inode: the tree grows a leaf block, placed as `ext2fs_extent_node_split` places
    /// it, just before the first extent if that block is free (else the first free after).
    /// Returns the data blocks and the leaf, if any.
    fn allocate_journal_extents(&mut self, count: u64) -> Result<(Vec<u64>, Vec<u64>)> {
        let blocks = self.layout.sb.blocks_count();
        let first_data_block = u64::from(self.layout.sb.first_data_block);
        let mut goal = self.journal_goal();
        let mut extents: Vec<(u64, u64)> = Vec::new();
        let mut leaf = Vec::new();
        let mut left = count;
        while left > 0 {
            let start = self.layout.allocate_block(goal)?;
            let mut len = 1;
            while len < left.min(u64::from(MAX_INIT_LEN))
                && start + len < blocks
                && !self.layout.map.is_used(start + len)
            {
                self.layout.use_block(start + len);
                len += 1;
            }
            extents.push((start, len));
            left -= len;
            goal = if start + len >= blocks {
                first_data_block
            } else {
                start + len
            };
            if extents.len() == ROOT_EXTENTS + 1 && leaf.is_empty() {
                leaf.push(self.layout.allocate_block(extents[0].0 - 1)?);
            }
        }
        let per_leaf = (self.block_size() - 12) / 12;
        if extents.len() > per_leaf {
            return Err(MkfsError::Unsupported(format!(
                "a journal of {} extents (more than one extent block holds); give a smaller -J size",
                extents.len()
            )));
        }
        let data = extents
            .iter()
            .flat_map(|&(start, len)| start..start + len)
            .collect();
        Ok((data, leaf))
    }

    /// Moves `runs` into the leaf block `leaf`, the inode's `i_block` becoming an index
    /// node of depth 1 that points at it.
    fn extent_leaf(&mut self, inode: &mut Inode, leaf: u64, runs: &[(u64, u64)]) {
        let bs = self.block_size();
        let mut block = vec![0u8; bs];
        let mut chunk = [0u8; 12];
        ExtentHeader {
            magic: EXTENT_MAGIC,
            entries: runs.len() as u16,
            max: ((bs - 12) / 12) as u16,
            depth: 0,
            generation: 0,
        }
        .encode(&mut chunk);
        block[..12].copy_from_slice(&chunk);
        let mut logical = 0u64;
        for (i, &(start, len)) in runs.iter().enumerate() {
            ExtentLeaf {
                block: logical as u32,
                len: len as u16,
                start_hi: (start >> 32) as u16,
                start_lo: start as u32,
            }
            .encode(&mut chunk);
            block[12 * (i + 1)..12 * (i + 2)].copy_from_slice(&chunk);
            logical += len;
        }
        if let Some(fs_seed) = self.fs_seed {
            ExtentNode::seal(&mut block, inode_csum_seed(fs_seed, inode.ino, 0));
        }
        self.files.blocks.insert(leaf, block);
        // The split rewrites the root's header and first slot; the other slots keep the
        // extents they held before (libext2fs does not clear them), and so does the copy in
        // `s_jnl_blocks`.
        let mut root = extent_root(&runs[..ROOT_EXTENTS]);
        ExtentHeader {
            magic: EXTENT_MAGIC,
            entries: 1,
            max: ROOT_EXTENTS as u16,
            depth: 1,
            generation: 0,
        }
        .encode(&mut chunk);
        root[..12].copy_from_slice(&chunk);
        ExtentIndex {
            block: 0,
            leaf_lo: leaf as u32,
            leaf_hi: (leaf >> 32) as u16,
            unused: 0,
        }
        .encode(&mut chunk);
        root[12..24].copy_from_slice(&chunk);
        inode.record.block = root;
    }
}
