//! Writing the made filesystem: each group's bitmaps and descriptor sealed, the
//! superblock and descriptor table with their backups, and the files' inodes and blocks,
//! into an image file that was empty (a fresh sparse file reads as zeros everywhere
//! mke2fs would have zeroed).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use e4_format::bitmap::{BitmapBlock, BitmapKind, BitmapSeed};
use e4_format::group_descriptor::{
    GroupChecksum, BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED,
};
use e4_format::superblock::{Superblock, STATE_VALID};
use e4_format::MetadataBlock;

use crate::error::{MkfsError, Result};
use crate::files::Files;
use crate::layout::{Layout, FIRST_INO};

/// Finishes the descriptors and superblock of `layout` from its bitmap and `files`, and
/// writes everything to `file`, after zeroing the byte ranges `zeros` (on a device; a
/// fresh file reads as zeros already). `lazy_itable_init`: the groups are not marked
/// `ITABLE_ZEROED` (the kernel zeroes the tables in the background, as after mke2fs).
pub fn write_image(
    layout: &mut Layout,
    files: &Files,
    file: &File,
    path: &Path,
    lazy_itable_init: bool,
    zeros: &[(u64, u64)],
) -> Result<()> {
    let bs = layout.block_size() as usize;
    let io = |source| MkfsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut blocks: BTreeMap<u64, Vec<u8>> = files.blocks.clone();
    let csum = layout.sb.has_metadata_csum()
        || layout
            .sb
            .ro_compat()
            .contains(e4_format::features::RoCompatFeatures::GDT_CSUM);

    // Inode records, in their table blocks.
    let ipg = layout.sb.inodes_per_group;
    let isz = layout.sb.inode_size() as u64;
    for (&ino, record) in &files.inodes {
        let group = (ino - 1) / ipg;
        let offset = u64::from((ino - 1) % ipg) * isz;
        let table = layout.descriptors[group as usize].inode_table();
        let block = table + offset / bs as u64;
        let at = (offset % bs as u64) as usize;
        let b = blocks.entry(block).or_insert_with(|| vec![0; bs]);
        b[at..at + record.len()].copy_from_slice(record);
    }

    // Bitmaps and descriptor counts.
    let block_seed = BitmapSeed::for_superblock(&layout.sb, BitmapKind::Block);
    let inode_seed = BitmapSeed::for_superblock(&layout.sb, BitmapKind::Inode);
    let groups = layout.groups();
    let bpg = u64::from(layout.sb.blocks_per_group);
    let mut free_blocks = 0;
    let mut free_inodes = 0;
    for g in 0..groups {
        let first = layout.group_first_block(g);
        let free = layout.group_free_blocks(g);
        free_blocks += free;
        let used_inodes = (1..=FIRST_INO).filter(|&i| (i - 1) / ipg == g).count() as u32;
        free_inodes += u64::from(ipg - used_inodes);
        let mut desc = layout.descriptors[g as usize].clone();
        desc.set_free_blocks_count(free as u32);
        desc.set_free_inodes_count(ipg - used_inodes);
        if !lazy_itable_init {
            desc.flags |= BG_INODE_ZEROED;
        }
        if !csum || desc.flags & BG_BLOCK_UNINIT == 0 {
            let mut bitmap = vec![0xFFu8; bs];
            bitmap[..(bpg / 8) as usize].fill(0);
            layout.map.bitmap_bytes(first, bpg, &mut bitmap);
            if g == groups - 1 {
                let rem = (layout.sb.blocks_count() - u64::from(layout.sb.first_data_block)) % bpg;
                if rem != 0 {
                    for bit in rem as usize..bs * 8 {
                        bitmap[bit / 8] |= 1 << (bit % 8);
                    }
                }
            }
            if let Some(seed) = block_seed {
                let mut sealed = BitmapBlock::of(&desc, BitmapKind::Block, g);
                sealed.seal(&bitmap, seed);
                sealed.store_in(&mut desc);
            }
            blocks.insert(desc.block_bitmap(), bitmap);
        }
        if !csum || desc.flags & BG_INODE_UNINIT == 0 {
            let mut bitmap = vec![0xFFu8; bs];
            bitmap[..(ipg as usize).div_ceil(8)].fill(0);
            for i in 0..used_inodes as usize {
                bitmap[i / 8] |= 1 << (i % 8);
            }
            if let Some(seed) = inode_seed {
                let mut sealed = BitmapBlock::of(&desc, BitmapKind::Inode, g);
                sealed.seal(&bitmap, seed);
                sealed.store_in(&mut desc);
            }
            blocks.insert(desc.inode_bitmap(), bitmap);
        }
        layout.descriptors[g as usize] = desc;
    }
    let sb = &mut layout.sb;
    sb.set_free_blocks_count(free_blocks);
    sb.free_inodes_count = free_inodes as u32;

    // The descriptor table, as every copy holds it.
    let checksum = GroupChecksum::for_superblock(sb);
    let desc_size = sb.desc_size() as usize;
    let mut table = vec![0u8; layout.desc_blocks as usize * bs];
    for (g, desc) in layout.descriptors.iter().enumerate() {
        let bytes = desc.to_bytes(g as u32, desc_size, &checksum);
        table[g * desc_size..(g + 1) * desc_size].copy_from_slice(&bytes);
    }

    let mut written: u64 = 0;
    let zero_chunk = vec![0u8; 1 << 20];
    for &(start, len) in zeros {
        let mut at = start;
        while at < start + len {
            let n = (start + len - at).min(zero_chunk.len() as u64);
            file.write_all_at(&zero_chunk[..n as usize], at)
                .map_err(io)?;
            at += n;
        }
        written += len;
    }
    for (&block, bytes) in &blocks {
        file.write_all_at(bytes, block * bs as u64).map_err(io)?;
        written += bytes.len() as u64;
    }
    // Backups first, then the primary, as `ext2fs_flush` does; backups say "not clean"
    // so a filesystem found through one is checked.
    let sb = &layout.sb;
    let mut copies: Vec<(u32, u64)> = (1..groups)
        .filter(|&g| sb.group_has_superblock(g))
        .map(|g| (g, layout.group_first_block(g)))
        .collect();
    copies.push((0, u64::from(sb.first_data_block)));
    written += (copies.len() * (1024 + table.len())) as u64;
    let mut sb = layout.sb.clone();
    sb.kbytes_written += written.div_ceil(1024);
    for (group, block) in copies {
        let mut copy = sb.clone();
        copy.block_group_nr = group as u16;
        if group != 0 {
            copy.state &= !STATE_VALID;
        }
        let mut raw = [0u8; 1024];
        copy.encode(&mut raw);
        Superblock::seal(&mut raw, ());
        let offset = if group == 0 { 1024 } else { block * bs as u64 };
        file.write_all_at(&raw, offset).map_err(io)?;
        let table_at = (block + 1) * bs as u64;
        file.write_all_at(&table, table_at).map_err(io)?;
    }
    layout.sb = sb;
    Ok(())
}
