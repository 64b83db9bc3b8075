//! What a run left on disk, read back from the image by e4's own reader after the target is
//! unmounted, so the kernel's layout and e4's are measured the same way: extents per file,
//! the mean extent, a free-extent histogram (as `e2freefrag` prints it) and the
//! fragmentation score `e4defrag -c` computes.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use e4_format::features::RoCompatFeatures;
use e4_format::group_descriptor::BG_BLOCK_UNINIT;
use e4_fs::{FileType, Filesystem, Mapping, OpenOptions};
use serde::Serialize;

/// The root directory's inode.
const ROOT_INO: u32 = 2;
/// `e4defrag` skips what is under lost+found, and so do we.
const LOST_AND_FOUND: &[u8] = b"lost+found";

/// One regular file's extents, as FIEMAP (and so `e4defrag` and `filefrag -e`) lists them:
/// one per on-disk extent record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileExtent {
    pub logical: u64,
    pub physical: u64,
    pub len: u64,
}

/// Free extents whose size in blocks lies in `[2^order, 2^(order+1))`, as one line of
/// e2freefrag's "HISTOGRAM OF FREE EXTENT SIZES".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FreeExtentBucket {
    /// Smallest extent size of the bucket, in bytes.
    pub min_bytes: u64,
    /// Free extents in the bucket.
    pub extents: u64,
    /// Free blocks in those extents.
    pub blocks: u64,
}

/// The layout of a whole image.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutReport {
    /// Regular files with at least one block (lost+found excluded).
    pub files: u64,
    /// Their extent records.
    pub extents: u64,
    /// Their blocks.
    pub blocks: u64,
    /// `extents / files`.
    pub extents_per_file: f64,
    /// `blocks * block size / extents`.
    pub mean_extent_bytes: f64,
    /// The fewest extents the files could have (e4defrag's `get_best_count`, summed).
    pub best_extents: u64,
    /// e4defrag -c's "Fragmentation score": 0-30 no problem, 31-55 a little fragmented,
    /// 56 and up needs defragmentation.
    pub fragmentation_score: f64,
    /// Free blocks, from the block bitmaps.
    pub free_blocks: u64,
    /// Free extents (maximal runs of free blocks, across group boundaries as e2freefrag
    /// counts them).
    pub free_extents: u64,
    /// e2freefrag's histogram, empty buckets left out.
    pub free_extent_histogram: Vec<FreeExtentBucket>,
}

/// Why the layout could not be read.
#[derive(Debug)]
pub struct LayoutError(pub String);

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LayoutError {}

impl LayoutReport {
    /// Reads the layout of the (unmounted) image at `image`.
    pub fn read(image: &Path) -> Result<LayoutReport, LayoutError> {
        let fail = |e: e4_fs::Error| LayoutError(format!("{}: {e}", image.display()));
        let fs = Filesystem::open(image, OpenOptions::default()).map_err(fail)?;
        let mut files = Vec::new();
        collect_files(&fs, ROOT_INO, &mut files).map_err(fail)?;
        let mut per_file = Vec::with_capacity(files.len());
        for ino in files {
            let extents = file_extents(&fs, ino).map_err(fail)?;
            if !extents.is_empty() {
                per_file.push(extents);
            }
        }
        let device = File::open(image)
            .map_err(|e| LayoutError(format!("{}: cannot open: {e}", image.display())))?;
        let free_runs = free_runs(&fs, &device)
            .map_err(|e| LayoutError(format!("{}: {e}", image.display())))?;
        Ok(Self::from_parts(
            &per_file,
            &free_runs,
            fs.block_size(),
            best_count_unit(&fs),
        ))
    }

    /// The report for files with these extents and these free runs (lengths in blocks).
    /// `best_unit` is how many blocks one extent could cover at best (see
    /// [`best_count_unit`]).
    pub fn from_parts(
        per_file: &[Vec<FileExtent>],
        free_runs: &[u64],
        block_size: u32,
        best_unit: u64,
    ) -> LayoutReport {
        let bs = u64::from(block_size);
        let files = per_file.len() as u64;
        let extents: u64 = per_file.iter().map(|f| f.len() as u64).sum();
        let blocks: u64 = per_file.iter().flatten().map(|e| e.len).sum();
        let best_extents: u64 = per_file
            .iter()
            .map(|f| best_count(f.iter().map(|e| e.len).sum(), best_unit))
            .sum();
        let mut histogram: Vec<FreeExtentBucket> = Vec::new();
        for &run in free_runs {
            let order = run.ilog2();
            let min_bytes = bs << order;
            match histogram.iter_mut().find(|b| b.min_bytes == min_bytes) {
                Some(bucket) => {
                    bucket.extents += 1;
                    bucket.blocks += run;
                }
                None => histogram.push(FreeExtentBucket {
                    min_bytes,
                    extents: 1,
                    blocks: run,
                }),
            }
        }
        histogram.sort_by_key(|b| b.min_bytes);
        LayoutReport {
            files,
            extents,
            blocks,
            extents_per_file: ratio(extents, files),
            mean_extent_bytes: ratio(blocks * bs, extents),
            best_extents,
            fragmentation_score: fragmentation_score(extents, best_extents, blocks),
            free_blocks: free_runs.iter().sum(),
            free_extents: free_runs.len() as u64,
            free_extent_histogram: histogram,
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// e4defrag's `get_best_count`: a file of `blocks` blocks needs at least one extent per
/// block group (per flex group with flex_bg) it spans.
fn best_count(blocks: u64, unit: u64) -> u64 {
    if blocks == 0 {
        return 0;
    }
    (blocks - 1) / unit.max(1) + 1
}

/// The blocks one extent can cover at best, as e4defrag reckons it: a block group, or a
/// flex group with flex_bg.
pub fn best_count_unit(fs: &Filesystem) -> u64 {
    // groups_per_flex is 1 without flex_bg, as e4defrag's two cases reduce to.
    u64::from(fs.geometry().blocks_per_group()) * u64::from(fs.superblock().groups_per_flex())
}

/// e4defrag -c's device-wide score: the share of extents beyond the best count, per 100
/// blocks, through `CALC_SCORE` (`ratio > 10 ? 80 + 20 * ratio / 100 : 8 * ratio`).
fn fragmentation_score(extents: u64, best: u64, blocks: u64) -> f64 {
    if blocks == 0 {
        return 0.0;
    }
    let ratio = (extents as f64 - best as f64) * 100.0 / blocks as f64;
    if ratio > 10.0 {
        80.0 + 20.0 * ratio / 100.0
    } else {
        8.0 * ratio
    }
}

/// Every regular file under `dir`, lost+found excluded.
fn collect_files(fs: &Filesystem, dir: u32, out: &mut Vec<u32>) -> e4_fs::Result<()> {
    for entry in fs.read_dir(dir)? {
        if entry.name == b"." || entry.name == b".." {
            continue;
        }
        if dir == ROOT_INO && entry.name == LOST_AND_FOUND {
            continue;
        }
        match fs.metadata(entry.ino)?.file_type {
            FileType::Directory => collect_files(fs, entry.ino, out)?,
            FileType::Regular => out.push(entry.ino),
            _ => {}
        }
    }
    Ok(())
}

/// Inode `ino`'s extent records in logical order; none for inline or empty files.
pub fn file_extents(fs: &Filesystem, ino: u32) -> e4_fs::Result<Vec<FileExtent>> {
    let inode = fs.read_inode(ino)?;
    let meta = fs.metadata(ino)?;
    if meta.blocks == 0 || inode.has_flag(e4_format::inode::flags::INLINE_DATA) {
        return Ok(Vec::new());
    }
    // Preallocated blocks past EOF count too (e4defrag's FIEMAP walk sees them).
    let mut extents = Vec::new();
    let mut logical = 0u64;
    let limit = u64::from(u32::MAX);
    while logical < limit {
        match fs.map_block(&inode, logical, u64::MAX)? {
            Mapping::Data { physical, len, .. } => {
                extents.push(FileExtent {
                    logical,
                    physical,
                    len,
                });
                logical += len;
            }
            Mapping::Hole { len } if len == u64::MAX => break,
            Mapping::Hole { len } => logical += len,
        }
    }
    Ok(extents)
}

/// Lengths of the maximal runs of free blocks, in block order; a run goes on across a group
/// boundary as in e2freefrag's whole-filesystem scan.
fn free_runs(fs: &Filesystem, device: &File) -> Result<Vec<u64>, String> {
    let geo = fs.geometry();
    let bs = u64::from(fs.block_size());
    let descriptors = fs.group_descriptors();
    let sb = fs.superblock();
    // BLOCK_UNINIT means something only when descriptors are checksummed.
    let checksummed = sb.has_metadata_csum() || sb.ro_compat().contains(RoCompatFeatures::GDT_CSUM);
    let mut runs = Vec::new();
    let mut current = 0u64;
    for (g, desc) in descriptors.iter().enumerate() {
        let g = g as u32;
        let count = geo.group_blocks(g);
        let bitmap = if checksummed && desc.flags & BG_BLOCK_UNINIT != 0 {
            uninit_bitmap(fs, g, count)
        } else {
            let mut bytes = vec![0u8; bs as usize];
            device
                .read_exact_at(&mut bytes, desc.block_bitmap() * bs)
                .map_err(|e| {
                    format!(
                        "cannot read group {g}'s block bitmap at block {}: {e}",
                        desc.block_bitmap()
                    )
                })?;
            bytes
        };
        for i in 0..count {
            let used = bitmap[(i / 8) as usize] & (1 << (i % 8)) != 0;
            if used {
                if current > 0 {
                    runs.push(current);
                    current = 0;
                }
            } else {
                current += 1;
            }
        }
    }
    if current > 0 {
        runs.push(current);
    }
    Ok(runs)
}

/// A BLOCK_UNINIT group's bitmap as libext2fs computes it (`mark_uninit_bg_group_blocks`):
/// the superblock copy and descriptor blocks, and the group's own bitmaps and inode table
/// where they fall inside it.
fn uninit_bitmap(fs: &Filesystem, group: u32, count: u64) -> Vec<u8> {
    let geo = fs.geometry();
    let first = geo.group_first_block(group);
    let mut bytes = vec![0u8; count.div_ceil(8) as usize];
    let mut mark = |start: u64, len: u64| {
        for b in start..start + len {
            if let Some(i) = b.checked_sub(first).filter(|&i| i < count) {
                bytes[(i / 8) as usize] |= 1 << (i % 8);
            }
        }
    };
    let base = geo.base_metadata(group);
    mark(base.start, base.len);
    let desc = &fs.group_descriptors()[group as usize];
    mark(desc.block_bitmap(), 1);
    mark(desc.inode_bitmap(), 1);
    mark(desc.inode_table(), geo.inode_table_blocks());
    bytes
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
