//! The files every new filesystem has, made as mke2fs makes them and in its order (so
//! every block lands where mke2fs puts it): the reserved inodes, the root directory,
//! lost+found grown to 16 KiB, the bad-block inode, the resize inode over the reserved GDT
//! blocks, and the journal with an empty log.

use std::collections::BTreeMap;

use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::{encode_entry, entry_size, file_type, DirLeafBlock};
use e4_format::extent::{ExtentHeader, ExtentLeaf, EXTENT_MAGIC, MAX_INIT_LEN};
use e4_format::features::{CompatFeatures, IncompatFeatures};
use e4_format::inode::{flags, Inode, Timestamp, ROOT_INO};
use e4_format::xattr::XATTR_MAGIC;
use e4_format::MetadataBlock;

use crate::error::Result;
use crate::layout::{Layout, FIRST_INO};
use crate::params::Params;

mod block_pointers;
mod journal_inode;
mod resize_inode;

/// `EXT2_BAD_INO`.
const BAD_INO: u32 = 1;
/// `EXT2_RESIZE_INO`.
const RESIZE_INO: u32 = 7;
/// The lost+found inode: the first one after the reserved.
const LOST_FOUND_INO: u32 = FIRST_INO;
/// Direct block pointers in `i_block`.
const DIRECT_BLOCKS: usize = 12;
/// `i_block` slot of the double indirect block (the resize inode's only pointer).
const DIND_SLOT: usize = 13;
/// Extents in the inode's own `i_block` (a tree of depth 0).
const ROOT_EXTENTS: usize = 4;
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
    /// The journal's runs of blocks `(start, length)`: they must read as zeros, so a log
    /// left on a device by an earlier filesystem is never taken for this one's.
    pub journal_runs: Vec<(u64, u64)>,
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
        let mut group = self.layout.group_of_inode(ino);
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
        // mke2fs makes lost+found with `ext2fs_new_inode` when only the root's inode is in
        // use, and a scan that reaches a group whose inode bitmap is still uninitialized
        // counts its block bitmap as initialized too (`check_inode_uninit`: "mkfs might
        // have set this flag; clear it too"). With fewer than 11 inodes a group,
        // lost+found's group is not the root's and is such a group.
        let lost_found_group = self.layout.group_of_inode(LOST_FOUND_INO);
        if lost_found_group != self.layout.group_of_inode(ROOT_INO) {
            self.layout.initialize_block_bitmap(lost_found_group);
        }
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
        // Each directory counts in its own group: with fewer than 11 inodes a group
        // (a small `-N`), lost+found is in the second.
        for ino in [ROOT_INO, LOST_FOUND_INO] {
            let group = self.layout.group_of_inode(ino) as usize;
            let desc = &mut self.layout.descriptors[group];
            desc.set_used_dirs_count(desc.used_dirs_count() + 1);
        }
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
