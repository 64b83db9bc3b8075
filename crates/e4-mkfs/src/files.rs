//! The files every new filesystem has, made as mke2fs makes them and in its order (so
//! every block lands where mke2fs puts it): the reserved inodes, the root directory,
//! lost+found grown to 16 KiB, the bad-block inode, the resize inode over the reserved GDT
//! blocks, and the journal with an empty log.

use std::collections::BTreeMap;

use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::{encode_entry, entry_size, file_type, DirLeafBlock};
use e4_format::extent::{
    ExtentHeader, ExtentIndex, ExtentLeaf, ExtentNode, EXTENT_MAGIC, MAX_INIT_LEN,
};
use e4_format::features::{CompatFeatures, IncompatFeatures};
use e4_format::inode::{flags, Inode, Timestamp, JOURNAL_INO, ROOT_INO};
use e4_format::journal::{JournalSuperblock, JOURNAL_MAGIC};
use e4_format::xattr::XATTR_MAGIC;
use e4_format::MetadataBlock;

use crate::error::{MkfsError, Result};
use crate::layout::{Layout, FIRST_INO};
use crate::params::Params;

/// `EXT2_BAD_INO`.
const BAD_INO: u32 = 1;
/// `EXT2_RESIZE_INO`.
const RESIZE_INO: u32 = 7;
/// The lost+found inode: the first one after the reserved.
const LOST_FOUND_INO: u32 = FIRST_INO;
/// Direct block pointers in `i_block`.
const DIRECT_BLOCKS: usize = 12;
/// `i_block` slots of the indirect, double and triple indirect blocks.
const IND_SLOT: usize = 12;
const DIND_SLOT: usize = 13;
const TIND_SLOT: usize = 14;
/// Extents in the inode's own `i_block` (a tree of depth 0).
const ROOT_EXTENTS: usize = 4;
/// `JBD2_SUPERBLOCK_V2`.
const JOURNAL_SUPERBLOCK_V2: u32 = 4;
/// `EXT3_JNL_BACKUP_BLOCKS`: `s_jnl_blocks` holds a copy of the journal's `i_block`.
const JOURNAL_BACKUP_BLOCKS: u8 = 1;
/// lost+found is grown until it holds this many bytes (and at least two blocks), so
/// e2fsck has room to reconnect files without allocating.
const LOST_FOUND_BYTES: u64 = 16 * 1024;

/// What the files add to the image: inode records and blocks to write, and the journal's
/// facts for the superblock.
#[derive(Default)]
pub struct Files {
    pub inodes: BTreeMap<u32, Vec<u8>>,
    pub blocks: BTreeMap<u64, Vec<u8>>,
    pub journal_blocks: u64,
    /// `i_block` of the journal and its size, for `s_jnl_blocks`.
    pub journal_backup: Option<([u8; 60], u64)>,
}

struct Maker<'a> {
    layout: &'a mut Layout,
    files: Files,
    fs_seed: Option<u32>,
    now: Timestamp,
    filetype: bool,
    /// Files are mapped by extent trees (else by block pointers).
    extents: bool,
}

/// Makes the files of a new filesystem on `layout`.
pub fn make_files(layout: &mut Layout, p: &Params) -> Result<Files> {
    let fs_seed = layout.sb.has_metadata_csum().then(|| layout.sb.csum_seed());
    let extents = p.features.has_incompat(IncompatFeatures::EXTENTS);
    let mut maker = Maker {
        filetype: layout.sb.incompat().contains(IncompatFeatures::FILETYPE),
        layout,
        files: Files::default(),
        fs_seed,
        now: Timestamp {
            seconds: p.now,
            nanoseconds: 0,
        },
        extents,
    };
    maker.reserved_inodes();
    maker.root_and_lost_found(p.root_owner)?;
    maker.bad_block_inode();
    if p.features.has_compat(CompatFeatures::RESIZE_INODE) {
        maker.resize_inode()?;
    }
    if p.journal {
        maker.journal(p)?;
    }
    Ok(maker.files)
}

impl Maker<'_> {
    fn inode_size(&self) -> usize {
        self.layout.sb.inode_size() as usize
    }

    fn block_size(&self) -> usize {
        self.layout.block_size() as usize
    }

    fn store(&mut self, inode: &Inode) {
        let bytes = inode.to_bytes(self.fs_seed);
        self.files.inodes.insert(inode.ino, bytes);
    }

    /// A new inode as `ext2fs_write_new_inode` writes it: extra fields sized for today's
    /// fields and every time (creation included) set to now.
    fn new_inode(&self, ino: u32, mode: u16) -> Inode {
        let mut inode = Inode::new(ino, self.inode_size(), mode, 0);
        inode.set_atime(self.now);
        inode.set_ctime(self.now);
        inode.set_mtime(self.now);
        inode.set_crtime(self.now);
        inode
    }

    /// Inodes 1 to 10 written as zeroed records with valid checksums
    /// (`write_reserved_inodes`), so e2fsck finds no checksum error in an unused one.
    fn reserved_inodes(&mut self) {
        for ino in 1..FIRST_INO {
            self.layout.use_inode_group(ino);
            // OK to unwrap: a zeroed record of the inode size decodes.
            let zero = Inode::decode(&vec![0; self.inode_size()], ino).unwrap();
            self.store(&zero);
        }
    }

    /// `ext2fs_find_inode_goal` for a file with no blocks yet: the first block of its
    /// flex group.
    fn inode_goal(&self, ino: u32) -> u64 {
        let mut group = (ino - 1) / self.layout.sb.inodes_per_group;
        let log_flex = self.layout.sb.log_groups_per_flex;
        if log_flex != 0 {
            group &= !((1u32 << log_flex) - 1);
        }
        self.layout.group_first_block(group)
    }

    fn dir_block(&self, ino: u32, entries: &[(u32, &[u8])]) -> Vec<u8> {
        let bs = self.block_size();
        let tail = if self.fs_seed.is_some() { 12 } else { 0 };
        let mut block = vec![0u8; bs];
        let ft = if self.filetype {
            file_type::DIRECTORY
        } else {
            0
        };
        let mut at = 0;
        for (i, (entry_ino, name)) in entries.iter().enumerate() {
            let rec_len = if i + 1 == entries.len() {
                bs - tail - at
            } else {
                entry_size(name.len())
            };
            let t = if *entry_ino == 0 { 0 } else { ft };
            encode_entry(&mut block[at..], *entry_ino, rec_len, t, name);
            at += rec_len;
        }
        if let Some(fs_seed) = self.fs_seed {
            DirLeafBlock::seal(&mut block, inode_csum_seed(fs_seed, ino, 0));
        }
        block
    }

    fn root_and_lost_found(&mut self, owner: (u32, u32)) -> Result<()> {
        let mut root = self.new_inode(ROOT_INO, 0o040755);
        root.record.links_count = 3;
        root.set_uid(owner.0);
        root.set_gid(owner.1);
        let root_block = self.layout.allocate_block(self.inode_goal(ROOT_INO))?;
        self.layout.use_inode_group(ROOT_INO);
        let mut lost_found = self.new_inode(LOST_FOUND_INO, 0o040700);
        lost_found.record.links_count = 2;
        self.layout.use_inode_group(LOST_FOUND_INO);
        let first = self
            .layout
            .allocate_block(self.inode_goal(LOST_FOUND_INO))?;
        let mut lost_found_blocks = vec![first];
        let bs = self.layout.block_size();
        let mut size = 0;
        // Under inline_data lost+found starts inline and the first growth only moves it
        // into a block: one block fewer.
        let inline = self
            .layout
            .sb
            .incompat()
            .contains(IncompatFeatures::INLINE_DATA);
        for round in 1..DIRECT_BLOCKS {
            size += bs;
            if size >= LOST_FOUND_BYTES && size >= 2 * bs {
                break;
            }
            if inline && round == 1 {
                continue;
            }
            // OK to unwrap: the vector starts with one block.
            let last = *lost_found_blocks.last().unwrap();
            lost_found_blocks.push(self.layout.allocate_block(last)?);
        }
        let root_dir = self.dir_block(
            ROOT_INO,
            &[
                (ROOT_INO, b"."),
                (ROOT_INO, b".."),
                (LOST_FOUND_INO, b"lost+found"),
            ],
        );
        self.files.blocks.insert(root_block, root_dir);
        self.map_file(&mut root, &[root_block], &[]);
        for (i, &block) in lost_found_blocks.iter().enumerate() {
            let contents = if i == 0 && inline {
                // `ext2fs_inline_data_expand` writes the inline entries, then the rest of
                // the block as one empty entry.
                let entries = [(LOST_FOUND_INO, &b"."[..]), (ROOT_INO, b".."), (0, b"")];
                self.dir_block(LOST_FOUND_INO, &entries)
            } else if i == 0 {
                self.dir_block(LOST_FOUND_INO, &[(LOST_FOUND_INO, b"."), (ROOT_INO, b"..")])
            } else {
                self.dir_block(LOST_FOUND_INO, &[(0, b"")])
            };
            self.files.blocks.insert(block, contents);
        }
        self.map_file(&mut lost_found, &lost_found_blocks, &[]);
        if inline {
            // Moving the inline data out removed `system.data` and left the in-inode
            // attribute area's header behind.
            lost_found.xattr_area[..4].copy_from_slice(&XATTR_MAGIC.to_le_bytes());
        }
        self.store(&root);
        self.store(&lost_found);
        self.layout.descriptors[0].set_used_dirs_count(2);
        Ok(())
    }

    /// Records in `inode` where its data blocks are (`data`, contiguous runs or not) and
    /// what it occupies (`data` and the pointer blocks `meta`), as extents or block
    /// pointers.
    fn map_file(&mut self, inode: &mut Inode, data: &[u64], meta: &[u64]) {
        let bs = self.layout.block_size();
        let size = data.len() as u64 * bs;
        inode.set_size(size);
        let huge_file = self
            .layout
            .sb
            .ro_compat()
            .contains(e4_format::features::RoCompatFeatures::HUGE_FILE);
        inode.set_blocks_512((data.len() + meta.len()) as u64 * bs / 512, huge_file);
        if self.extents {
            inode.record.flags |= flags::EXTENTS;
            // With a leaf block (`meta`), the caller points the root at it.
            if meta.is_empty() {
                inode.record.block = extent_root(&runs(data));
            }
        } else if meta.is_empty() {
            // A directory of at most 12 blocks: direct pointers only.
            for (i, &b) in data.iter().enumerate() {
                inode.record.block[4 * i..4 * i + 4].copy_from_slice(&(b as u32).to_le_bytes());
            }
        }
    }

    fn bad_block_inode(&mut self) {
        // `ext2fs_update_bb_inode` rewrites the reserved record's base with the times: the
        // extra fields stay as the zeroed record had them.
        // OK to unwrap: a zeroed record of the inode size decodes.
        let mut inode = Inode::decode(&vec![0; self.inode_size()], BAD_INO).unwrap();
        inode.record.atime = self.now.seconds as u32;
        inode.record.mtime = self.now.seconds as u32;
        inode.record.ctime = self.now.seconds as u32;
        self.store(&inode);
    }

    /// `ext2fs_create_resize_inode`: a double-indirect block whose pointers are the primary
    /// reserved GDT blocks, each of which lists its backups in the backup groups.
    fn resize_inode(&mut self) -> Result<()> {
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
                0..2048 => 0,
                2048..32768 => 1024,
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
    fn journal(&mut self, p: &Params) -> Result<()> {
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

    /// Allocates `count` data blocks of a block-mapped file as `ext2fs_bmap2` does one
    /// block at a time: each from the block before, with an indirect block taken when the
    /// first block it maps is (so pointer blocks sit between the data they map). Fills
    /// `inode`'s pointers and returns the data and pointer blocks.
    fn allocate_block_mapped(
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

/// Contiguous runs `(first physical block, length)` of `blocks`, each at most
/// [`MAX_INIT_LEN`] long.
fn runs(blocks: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &b in blocks {
        match out.last_mut() {
            Some((start, len)) if *start + *len == b && *len < u64::from(MAX_INIT_LEN) => *len += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

/// An extent tree of depth 0 in `i_block` mapping `runs` from logical block 0.
fn extent_root(runs: &[(u64, u64)]) -> [u8; 60] {
    let mut raw = [0u8; 60];
    let header = ExtentHeader {
        magic: EXTENT_MAGIC,
        entries: runs.len() as u16,
        max: ROOT_EXTENTS as u16,
        depth: 0,
        generation: 0,
    };
    let mut chunk = [0u8; 12];
    header.encode(&mut chunk);
    raw[..12].copy_from_slice(&chunk);
    let mut logical = 0u64;
    for (i, &(start, len)) in runs.iter().enumerate() {
        let leaf = ExtentLeaf {
            block: logical as u32,
            len: len as u16,
            start_hi: (start >> 32) as u16,
            start_lo: start as u32,
        };
        leaf.encode(&mut chunk);
        raw[12 * (i + 1)..12 * (i + 2)].copy_from_slice(&chunk);
        logical += len;
    }
    raw
}
