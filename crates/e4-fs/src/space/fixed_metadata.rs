//! Where the fixed metadata lies (superblock and descriptor copies, reserved GDT blocks,
//! bitmaps, inode tables), as sorted, merged runs: one binary search tells whether a run of
//! blocks a file's mapping names lands on it. The kernel checks every mapped run so, reads
//! included (`ext4_map_blocks` and `check_block_validity` against its system zone): a
//! damaged mapping must not show the inode table as a file's data, nor a journal's log be
//! written over the descriptors.

use e4_format::geometry::Geometry;
use e4_format::group_descriptor::GroupDescriptor;

/// The fixed metadata's runs, `(start, end)`, sorted and disjoint.
pub(crate) struct FixedMetadata {
    runs: Vec<(u64, u64)>,
}

impl FixedMetadata {
    /// Every group's fixed metadata, from the geometry and the descriptors (where a
    /// group's bitmaps and inode table are never changes while the filesystem is open).
    pub(crate) fn new(geometry: &Geometry, descriptors: &[GroupDescriptor]) -> Self {
        let mut zone = super::system_zone(geometry, descriptors, &[]);
        zone.sort_by_key(|e| e.start);
        let mut runs: Vec<(u64, u64)> = Vec::with_capacity(zone.len());
        for e in zone {
            match runs.last_mut() {
                Some((_, end)) if e.start <= *end => *end = (*end).max(e.end()),
                _ => runs.push((e.start, e.end())),
            }
        }
        FixedMetadata { runs }
    }

    /// The first block of the `len` blocks from `start` that is fixed metadata, if one is.
    pub(crate) fn first_in(&self, start: u64, len: u64) -> Option<u64> {
        let end = start.saturating_add(len);
        let i = self.runs.partition_point(|&(_, run_end)| run_end <= start);
        let &(run_start, _) = self.runs.get(i)?;
        (run_start < end).then(|| run_start.max(start))
    }
}
