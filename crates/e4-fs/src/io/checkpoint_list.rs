//! Lazy checkpointing (jbd2's checkpoint list): a block a commit logged goes home once, when
//! the log's space is taken back, however many commits logged it in between. A directory
//! block that ten transactions change is logged ten times and written home once; an inode
//! table block an fsync-heavy workload commits a thousand times, once.
//!
//! Until that checkpoint the block's home holds an older copy, so nothing of a writable
//! filesystem reads the device around this list: [`CheckpointedDevice`] is the device the
//! block store, the allocators' bitmap loads and file data all go through, and it serves
//! each block from the list while the list holds it. A block is found here or is home
//! already: the checkpoint writes a block home before it leaves the list, and a read looks
//! in the list before it reads the device.
//!
//! Writes pass through to the device. No write may land on a block the list holds: such
//! a block is metadata in use, which only commits change (through the list), or a block a
//! committed transaction freed, which [`CheckpointedDevice::forget`] drops before the
//! allocator may hand it out as file data. A write over a held block would be undone by
//! the checkpoint's older copy; debug builds check every write for it.
//!
//! Who writes the list: commits, and checkpoints, which write a stripe's blocks home under
//! its lock while later commits go on (a commit's copy replaces a held one under the same
//! lock). Who reads it: every device read, from any thread. The blocks are spread over [`SHARDS`] locks by stripes of 256 blocks, so a
//! read takes one lock, two when it crosses a stripe, and reads of different places take
//! different locks; when the list is empty (no journal, or just after a checkpoint) a read
//! or write takes none.

use std::collections::BTreeMap;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use e4_alloc::stats::LockStats;
use e4_alloc::Extent;
use parking_lot::{Mutex, MutexGuard};

use crate::io::device::Device;

/// Locks the held copies are spread over.
const SHARDS: usize = 64;
/// Blocks `1 << STRIPE_SHIFT` in a row share a shard: a read of up to a megabyte (at 4 KiB
/// blocks) takes one or two locks.
const STRIPE_SHIFT: u32 = 8;

/// Held copies by block number, the blocks of the stripes that map to one shard.
type Copies = BTreeMap<u64, Box<[u8]>>;

/// The device with the checkpoint list in front of it.
pub(crate) struct CheckpointedDevice {
    home: Arc<dyn Device>,
    block_size: u64,
    shards: Box<[CachePadded<Mutex<Copies>>]>,
    /// Blocks held: changed only by commits and checkpoints, read by every I/O to skip the
    /// locks while nothing is held.
    held: AtomicUsize,
    locks: LockStats,
    /// Copies a checkpoint wrote home, kept for the next blocks to hold: a fresh
    /// allocation per block, page faults included, cost more than the home writes saved.
    /// At most [`SPARES`].
    spares: Mutex<Vec<Box<[u8]>>>,
}

/// The most spare copies kept (16 MiB at 4 KiB blocks).
const SPARES: usize = 4096;

impl CheckpointedDevice {
    pub(crate) fn new(home: Arc<dyn Device>, block_size: u32) -> Self {
        CheckpointedDevice {
            home,
            block_size: u64::from(block_size),
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(Copies::new())))
                .collect(),
            held: AtomicUsize::new(0),
            locks: LockStats::default(),
            spares: Mutex::new(Vec::new()),
        }
    }

    /// Lock traffic of the shards, for the engine's lock report.
    pub(crate) fn lock_stats(&self) -> &LockStats {
        &self.locks
    }

    /// Blocks waiting for their checkpoint.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Whether block `nr` is held (for tests).
    #[cfg(feature = "testing")]
    pub(crate) fn holds(&self, nr: u64) -> bool {
        self.lock(nr >> STRIPE_SHIFT).contains_key(&nr)
    }

    /// Holds `blocks` (block number, contents as committed), sorted by block number, until
    /// the checkpoint, each in place of an older copy of it. For a commit whose commit block
    /// is durable: from here on the list, not the device, answers for these blocks.
    pub(crate) fn hold(&self, blocks: &[(u64, &[u8])]) {
        let mut added = 0;
        let mut spares = std::mem::take(&mut *self.spares.lock());
        let mut copy_of = |bytes: &[u8]| match spares.pop() {
            Some(mut spare) => {
                spare.copy_from_slice(bytes);
                spare
            }
            None => Box::from(bytes),
        };
        let mut rest = blocks;
        while let Some(&(first, _)) = rest.first() {
            let stripe = first >> STRIPE_SHIFT;
            let len = rest
                .iter()
                .take_while(|(nr, _)| nr >> STRIPE_SHIFT == stripe)
                .count();
            let (these, after) = rest.split_at(len);
            rest = after;
            let mut copies = self.lock(stripe);
            for &(nr, bytes) in these {
                match copies.get_mut(&nr) {
                    Some(held) => held.copy_from_slice(bytes),
                    None => {
                        copies.insert(nr, copy_of(bytes));
                        added += 1;
                    }
                }
            }
        }
        self.held.fetch_add(added, Ordering::AcqRel);
        *self.spares.lock() = spares;
    }

    /// Drops the held copies of blocks in `runs` (sorted, disjoint): blocks a committed
    /// transaction freed, before the allocator may hand them out again. A copy written
    /// home later would land on whatever the block holds by then (another file's data).
    pub(crate) fn forget(&self, runs: &[Extent]) {
        if self.held() == 0 {
            return;
        }
        let mut dropped = 0;
        for run in runs {
            if run.len == 0 {
                continue;
            }
            let end = run.end();
            for stripe in (run.start >> STRIPE_SHIFT)..=((end - 1) >> STRIPE_SHIFT) {
                let mut copies = self.lock(stripe);
                let range = stripe_blocks(stripe, run.start..end);
                let gone: Vec<u64> = copies.range(range).map(|(nr, _)| *nr).collect();
                for nr in gone {
                    copies.remove(&nr);
                    dropped += 1;
                }
            }
        }
        self.held.fetch_sub(dropped, Ordering::AcqRel);
    }

    /// The checkpoint's writes: every held block home, a stripe at a time, each under its
    /// stripe's lock and leaving the list once written (adjacent blocks in one device
    /// write). Returns how many were written. Commits may go on meanwhile: a stripe
    /// visited after a commit held newer copies in it writes those too (committed as
    /// well), and a block a commit freed is either written before the commit's
    /// [`Self::forget`] takes the lock or gone when the checkpoint gets it. On an error the
    /// blocks not yet written stay held (the log still has them: the tail has not moved).
    /// The caller flushes before it moves the log's tail.
    pub(crate) fn write_home(&self) -> io::Result<u64> {
        if self.held() == 0 {
            return Ok(0);
        }
        let mut stripes: Vec<u64> = self
            .shards
            .iter()
            .flat_map(|shard| {
                let copies = self.locks.take(|| shard.try_lock(), || shard.lock());
                copies
                    .keys()
                    .map(|nr| nr >> STRIPE_SHIFT)
                    .collect::<Vec<_>>()
            })
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut written = 0;
        let mut spares = Vec::new();
        for stripe in stripes {
            let mut copies = self.lock(stripe);
            let blocks = stripe_blocks(stripe, 0..u64::MAX);
            let mut these = copies.split_off(&blocks.start);
            copies.append(&mut these.split_off(&blocks.end));
            if let Err(e) = self.write_run_by_run(&these) {
                copies.append(&mut these);
                return Err(e);
            }
            drop(copies);
            self.held.fetch_sub(these.len(), Ordering::AcqRel);
            written += these.len() as u64;
            spares.extend(these.into_values());
        }
        let mut kept = self.spares.lock();
        let room = SPARES.saturating_sub(kept.len());
        kept.extend(spares.into_iter().take(room));
        Ok(written)
    }

    /// Writes `copies` (of one stripe) home, adjacent blocks in one device write.
    fn write_run_by_run(&self, copies: &Copies) -> io::Result<()> {
        let mut run: Vec<&[u8]> = Vec::new();
        let mut first = 0;
        for (&nr, bytes) in copies {
            if first + run.len() as u64 != nr {
                self.write_run(first, &run)?;
                run.clear();
                first = nr;
            }
            run.push(bytes);
        }
        self.write_run(first, &run)
    }

    fn write_run(&self, first: u64, run: &[&[u8]]) -> io::Result<()> {
        match run.is_empty() {
            true => Ok(()),
            false => self.home.write_gathered_at(run, first * self.block_size),
        }
    }

    fn lock(&self, stripe: u64) -> MutexGuard<'_, Copies> {
        let shard = &self.shards[(stripe % SHARDS as u64) as usize];
        self.locks.take(|| shard.try_lock(), || shard.lock())
    }

    /// Calls `each` with every held block overlapping the `len` bytes at `offset`: the
    /// byte range of the overlap within those `len` bytes, and the held copy (locked) for
    /// that range.
    fn each_held(&self, offset: u64, len: u64, mut each: impl FnMut(Range<usize>, &[u8])) {
        if len == 0 {
            return;
        }
        let end = offset + len;
        let blocks = offset / self.block_size..(end - 1) / self.block_size + 1;
        for stripe in (blocks.start >> STRIPE_SHIFT)..=((blocks.end - 1) >> STRIPE_SHIFT) {
            let copies = self.lock(stripe);
            for (nr, held) in copies.range(stripe_blocks(stripe, blocks.clone())) {
                let at = nr * self.block_size;
                let (from, to) = (offset.max(at), end.min(at + self.block_size));
                // OK to cast: within the caller's bytes (a buffer in memory, or a range a
                // 64-bit usize spans).
                each((from - offset) as usize..(to - offset) as usize, held);
            }
        }
    }

    /// Debug builds: panics if the `len` bytes at `offset` overlap a held block.
    fn check_not_held(&self, offset: u64, len: u64) {
        if cfg!(debug_assertions) && self.held() > 0 {
            self.each_held(offset, len, |range, _| {
                let nr = (offset + range.start as u64) / self.block_size;
                panic!("a write at byte {offset} over block {nr}, which waits for its checkpoint");
            });
        }
    }

    /// Where `range` of the bytes at `offset` lies in its block (a range within one block).
    fn within_block(&self, offset: u64, range: &Range<usize>) -> Range<usize> {
        // OK to cast: less than a block.
        let start = ((offset + range.start as u64) % self.block_size) as usize;
        start..start + range.len()
    }
}

/// The blocks of `blocks` that lie in `stripe`.
fn stripe_blocks(stripe: u64, blocks: Range<u64>) -> Range<u64> {
    let first = stripe << STRIPE_SHIFT;
    blocks.start.max(first)..blocks.end.min(first + (1 << STRIPE_SHIFT))
}

impl Device for CheckpointedDevice {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.held() == 0 {
            return self.home.read_exact_at(buf, offset);
        }
        // The held copies first, then the device for the rest: a block not held now is
        // home already (a checkpoint writes before it releases).
        let mut from_list: Vec<Range<usize>> = Vec::new();
        self.each_held(offset, buf.len() as u64, |range, held| {
            buf[range.clone()].copy_from_slice(&held[self.within_block(offset, &range)]);
            from_list.push(range);
        });
        let mut at = 0;
        for range in from_list
            .iter()
            .chain(std::iter::once(&(buf.len()..buf.len())))
        {
            if range.start > at {
                self.home
                    .read_exact_at(&mut buf[at..range.start], offset + at as u64)?;
            }
            at = at.max(range.end);
        }
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_not_held(offset, buf.len() as u64);
        self.home.write_all_at(buf, offset)
    }

    fn write_gathered_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.check_not_held(offset, bufs.iter().map(|b| b.len() as u64).sum());
        self.home.write_gathered_at(bufs, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.home.flush()
    }

    fn size(&self) -> u64 {
        self.home.size()
    }

    fn zero_range(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check_not_held(offset, len);
        self.home.zero_range(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::device::MemoryDevice;

    const BLOCK: usize = 1024;

    /// A device of `blocks` blocks, block `n` filled with byte `n`, behind an empty list.
    fn device(blocks: usize) -> (Arc<MemoryDevice>, CheckpointedDevice) {
        let bytes = (0..blocks).flat_map(|n| [n as u8; BLOCK]).collect();
        let home = Arc::new(MemoryDevice::new(bytes));
        let list = CheckpointedDevice::new(home.clone(), BLOCK as u32);
        (home, list)
    }

    fn read(device: &dyn Device, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        device.read_exact_at(&mut buf, offset).unwrap();
        buf
    }

    /// Reads see the held copies, whole or in part and across stripes, and the device
    /// around them; the device itself is untouched until the checkpoint's writes, which
    /// put each block home once, as last held, and empty the list.
    #[test]
    fn reads_see_held_blocks_until_the_checkpoint_writes_them_home() {
        let stripe = 1usize << STRIPE_SHIFT;
        let (home, list) = device(3 * stripe);
        let held = [
            3u64,
            4,
            stripe as u64 - 1,
            stripe as u64,
            2 * stripe as u64 + 7,
        ];
        let old: Vec<(u64, Vec<u8>)> = held.iter().map(|&nr| (nr, vec![0xA0; BLOCK])).collect();
        let new: Vec<(u64, Vec<u8>)> = held.iter().map(|&nr| (nr, vec![0xB0; BLOCK])).collect();
        for copies in [&old, &new] {
            let refs: Vec<(u64, &[u8])> = copies.iter().map(|(nr, b)| (*nr, &b[..])).collect();
            list.hold(&refs);
        }
        assert_eq!(list.held(), held.len(), "a block held twice is held once");
        let expected = |nr: u64| if held.contains(&nr) { 0xB0 } else { nr as u8 };
        // Everything at once, then pieces that start and end inside blocks.
        let all = read(&list, 0, 3 * stripe * BLOCK);
        for (nr, block) in all.chunks(BLOCK).enumerate() {
            assert!(
                block.iter().all(|&b| b == expected(nr as u64)),
                "block {nr}"
            );
        }
        for (offset, len) in [
            (3 * BLOCK + 100, 2 * BLOCK),
            ((stripe - 1) * BLOCK + 5, BLOCK),
        ] {
            assert_eq!(read(&list, offset as u64, len), all[offset..offset + len]);
        }
        assert_eq!(
            read(home.as_ref(), 3 * BLOCK as u64, 1),
            [3],
            "home before the checkpoint"
        );
        assert_eq!(list.write_home().unwrap(), held.len() as u64);
        assert_eq!(list.held(), 0);
        assert_eq!(read(home.as_ref(), 0, all.len()), all, "home after it");
    }

    /// Forgotten runs leave the list whole, and only they: their blocks read from the device
    /// again and the checkpoint does not write them.
    #[test]
    fn forgotten_runs_leave_the_list_and_are_never_written_home() {
        let (home, list) = device(600);
        let copy = vec![0xC0u8; BLOCK];
        let held: Vec<(u64, &[u8])> = (250..270)
            .chain(500..505)
            .map(|nr| (nr, &copy[..]))
            .collect();
        list.hold(&held);
        list.forget(&[
            Extent { start: 254, len: 4 },
            Extent {
                start: 262,
                len: 300,
            },
        ]);
        let left: Vec<u64> = (250..254).chain(258..262).collect();
        assert_eq!(list.held(), left.len());
        assert_eq!(read(&list, 255 * BLOCK as u64, 1), [255u8]);
        assert_eq!(list.write_home().unwrap(), left.len() as u64);
        for nr in 240..600u64 {
            let want = if left.contains(&nr) { 0xC0 } else { nr as u8 };
            assert_eq!(
                read(home.as_ref(), nr * BLOCK as u64, 1),
                [want],
                "block {nr}"
            );
        }
    }

    /// A write over a held block is the engine breaking its own rule: debug builds stop it.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "over block 9, which waits for its checkpoint")]
    fn a_write_over_a_held_block_is_refused_in_debug_builds() {
        let (_, list) = device(16);
        list.hold(&[(9, &[0u8; BLOCK][..])]);
        list.write_all_at(&[1; 10], 8 * BLOCK as u64 + 1020)
            .unwrap();
    }
}
