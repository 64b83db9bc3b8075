//! Which byte ranges of an image file are known to read as zeros: its holes when it was
//! opened (SEEK_DATA/SEEK_HOLE), less every range written through the device since.
//!
//! A reservation makes its blocks read as zeros before mapping them
//! ([`super::device::Device::zero_range`]): on an image file, a punched hole. On the fresh
//! sparse image `e4 mkfs -d` fills, almost every reserved block is still a hole, and the
//! punch costs a system call that takes the image file's inode lock, which the fill
//! threads' data writes hold: on two CPUs the walk spun on it for a tenth of its time. With
//! [`crate::OpenOptions::skip_zeroing_holes`] the device keeps this map and skips a
//! zeroing that would change nothing.
//!
//! Sound because a range is taken off the map before the write to it starts (a zeroing of
//! blocks another thread still writes cannot happen: a file's blocks are freed only once
//! its writes are over, under its lock), and because a hole the host reports reads as
//! zeros. Ranges are never put back on the map (a punched range would be a hole again),
//! which only costs a punch more.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;

use parking_lot::Mutex;
use rustix::fs::SeekFrom;
use rustix::io::Errno;

/// The ranges of an image file that may hold data; everything else reads as zeros.
pub(crate) struct HoleMap {
    /// Start → end (exclusive) of each range that may hold data: disjoint, and never
    /// touching (adjacent ranges are merged, so a file written front to back is one).
    data: Mutex<BTreeMap<u64, u64>>,
}

impl HoleMap {
    /// The map of `file` (`size` bytes) as it stands: its data regions as the host reports
    /// them. A host that cannot report them (EINVAL) leaves the whole file as data.
    pub(crate) fn of_file(file: &File, size: u64) -> io::Result<Self> {
        let mut data = BTreeMap::new();
        let mut offset = 0;
        while offset < size {
            let start = match rustix::fs::seek(file, SeekFrom::Data(offset)) {
                Ok(start) => start,
                Err(Errno::NXIO) => break,
                Err(Errno::INVAL) => {
                    insert(&mut data, offset, size);
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            if start >= size {
                break;
            }
            let end = match rustix::fs::seek(file, SeekFrom::Hole(start)) {
                Ok(end) => end.min(size),
                Err(Errno::NXIO) => size,
                Err(e) => return Err(e.into()),
            };
            // A hole at the data's start would be a host's error; a byte of data keeps
            // the scan moving.
            let end = end.max(start + 1);
            insert(&mut data, start, end);
            offset = end;
        }
        Ok(HoleMap {
            data: Mutex::new(data),
        })
    }

    /// `len` bytes from `offset` are about to be written: they may hold data from now on.
    pub(crate) fn written(&self, offset: u64, len: u64) {
        insert(&mut self.data.lock(), offset, offset.saturating_add(len));
    }

    /// Whether all `len` bytes from `offset` read as zeros (no range that may hold data
    /// meets them).
    pub(crate) fn reads_as_zeros(&self, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        let data = self.data.lock();
        // The last range starting before `end` is the only one that may reach `offset`.
        data.range(..end)
            .next_back()
            .is_none_or(|(_, &data_end)| data_end <= offset)
    }
}

/// Adds [start, end) to `data`, merging the ranges it overlaps or touches.
fn insert(data: &mut BTreeMap<u64, u64>, mut start: u64, mut end: u64) {
    if start >= end {
        return;
    }
    while let Some((&s, &e)) = data.range(..=end).next_back() {
        if e < start {
            break;
        }
        data.remove(&s);
        start = start.min(s);
        end = end.max(e);
    }
    data.insert(start, end);
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Against a byte-by-byte model: after any writes, a range reads as zeros exactly
        /// when no write met it, and the map's ranges stay disjoint and apart.
        #[test]
        fn a_range_reads_as_zeros_exactly_when_nothing_was_written_to_it(
            writes in prop::collection::vec((0u64..200, 0u64..40), 0..30),
            queries in prop::collection::vec((0u64..240, 1u64..40), 1..30),
        ) {
            let map = HoleMap { data: Mutex::new(BTreeMap::new()) };
            let mut model = [false; 300];
            for &(offset, len) in &writes {
                map.written(offset, len);
                model[offset as usize..(offset + len) as usize].fill(true);
            }
            for &(offset, len) in &queries {
                let expected = !model[offset as usize..(offset + len) as usize].contains(&true);
                prop_assert_eq!(map.reads_as_zeros(offset, len), expected, "{}+{}", offset, len);
            }
            let data = map.data.lock();
            let ranges: Vec<_> = data.iter().map(|(&s, &e)| (s, e)).collect();
            prop_assert!(ranges.iter().all(|&(s, e)| s < e));
            prop_assert!(ranges.windows(2).all(|w| w[0].1 < w[1].0), "{:?}", ranges);
        }
    }

    /// At open, the file's data regions are data and its holes read as zeros.
    #[test]
    fn the_map_starts_from_the_files_data_regions() {
        let file = tempfile::tempfile().unwrap();
        let size = 64 << 20;
        file.set_len(size).unwrap();
        file.write_all_at(&[1; 4096], 8 << 20).unwrap();
        file.write_all_at(&[1; 4096], 40 << 20).unwrap();
        let map = HoleMap::of_file(&file, size).unwrap();
        for at in [8 << 20, 40 << 20] {
            assert!(!map.reads_as_zeros(at, 4096), "data at {at}");
            assert!(!map.reads_as_zeros(at - 4096, 8192), "data at {at}");
        }
        // Where the host keeps holes (tmpfs, ext4, xfs, btrfs do), the rest reads as
        // zeros; a host that reports the whole file as data leaves nothing to skip.
        let holes = rustix::fs::seek(&file, SeekFrom::Hole(0)).unwrap() < size;
        assert_eq!(map.reads_as_zeros(0, 8 << 20), holes);
        assert_eq!(map.reads_as_zeros(20 << 20, 4096), holes);
    }
}
