//! Write-back, the one place metadata goes home: dirty inodes into their inode-table blocks
//! (while the commit holds every operation back), then the gathered metadata blocks, the
//! bitmaps and descriptor blocks, and the superblock to the device (while the next
//! transaction runs; `commit.rs` says when). With the journal, this is the seam where
//! a commit's blocks go to the log first. A large commit shares the work
//! between threads, and adjacent dirty blocks (inode tables are contiguous) go to the
//! device in one write each instead of one per block: a two-thread unlink run once spent a
//! fifth of its time here.

use std::sync::Arc;

use e4_alloc::InodeAllocator;
use e4_format::superblock::{Superblock, SUPERBLOCK_OFFSET};

use crate::buffer::cache::Buffer;
use crate::buffer::store::BlockStore;
use crate::error::Result;
use crate::inode::cache::{InodeCache, InodeHandle};
use crate::inode::table::InodeTable;
use crate::space::descriptors::GroupDescriptors;

/// Below this many items a commit works on its own thread: starting threads costs tens of
/// microseconds, and an fsync-driven commit holds a handful of blocks.
const PARALLEL_FROM: usize = 2048;
/// The most blocks gathered into one device write (1 MiB at 4 KiB).
const RUN_LIMIT: usize = 256;

/// Writes each dirty inode's record into its inode-table block and marks the handle
/// clean. `handles` are sorted by inode number, so each thread's share touches its own
/// range of table blocks.
pub(crate) fn write_inode_records(
    store: &BlockStore,
    descriptors: &GroupDescriptors,
    allocator: &InodeAllocator,
    table: &InodeTable,
    inodes: &InodeCache,
    handles: &[Arc<InodeHandle>],
) -> Result<()> {
    in_chunks(handles, |chunk| {
        let mut records = table.record_writer(store);
        // The handles whose records share a table block, together.
        for these in chunk.chunk_by(|a, b| table.block_of(a.ino) == table.block_of(b.ino)) {
            // A block the cache lacks holds no inode deleted in this transaction (its
            // last record went into the cached block), so all of `these` are written below.
            let writers = these.len() as u32;
            records.make_block_of_new(these[0].ino, writers, descriptors, allocator);
            for handle in these {
                let state = handle.lock(inodes);
                // A deleted inode's last record went into the table when it was freed; its
                // number may already belong to a new inode.
                if !state.deleted {
                    records.write(&state.inode)?;
                }
                handle.mark_clean(&state);
            }
        }
        Ok(())
    })
}

/// Seals each buffer a commit took by its role and writes it as the commit left it;
/// `buffers` are sorted by block number.
pub(crate) fn write_buffers(store: &BlockStore, buffers: &[Arc<Buffer>]) -> Result<()> {
    let block_size = store.block_size() as usize;
    in_chunks(buffers, |chunk| {
        let mut gathered = Vec::new();
        for run in adjacent_runs(chunk) {
            let first = run[0].nr();
            gathered.clear();
            for buffer in run {
                buffer.with_committed_bytes(|bytes, role| {
                    store.seal(buffer.nr(), role, bytes);
                    gathered.extend_from_slice(bytes);
                });
            }
            let last = first + run.len() as u64 - 1;
            store.write_home(
                first * block_size as u64,
                &gathered,
                &format!("blocks {first}-{last}"),
            )?;
        }
        Ok(())
    })
}

/// Each of `buffers` as the commit leaves it, sealed by its role, one after another in
/// `room` (emptied first): the copies a journal logs and then writes home.
pub(crate) fn seal_into(store: &BlockStore, buffers: &[Arc<Buffer>], room: &mut Vec<u8>) {
    room.clear();
    for buffer in buffers {
        buffer.with_committed_bytes(|bytes, role| {
            store.seal(buffer.nr(), role, bytes);
            room.extend_from_slice(bytes);
        });
    }
}

/// Writes `blocks` (sorted by block number) home, adjacent ones in one device write each.
pub(crate) fn write_copies(store: &BlockStore, blocks: &[(u64, &[u8])]) -> Result<()> {
    let block_size = u64::from(store.block_size());
    let mut rest = blocks;
    while let Some(&(first, _)) = rest.first() {
        let len = rest
            .iter()
            .take(RUN_LIMIT)
            .enumerate()
            .take_while(|(i, (nr, _))| *nr == first + *i as u64)
            .count();
        let (run, after) = rest.split_at(len);
        rest = after;
        let pieces: Vec<&[u8]> = run.iter().map(|(_, bytes)| *bytes).collect();
        let last = first + len as u64 - 1;
        store.write_home_gathered(
            first * block_size,
            &pieces,
            &format!("blocks {first}-{last}"),
        )?;
    }
    Ok(())
}

/// Writes whole blocks the cache does not own (bitmaps, descriptor blocks) home.
pub(crate) fn write_uncached(
    store: &BlockStore,
    blocks: impl IntoIterator<Item = (u64, Vec<u8>)>,
) -> Result<()> {
    blocks
        .into_iter()
        .try_for_each(|(nr, bytes)| store.write_uncached_home(nr, &bytes))
}

/// Writes the primary superblock home.
pub(crate) fn write_superblock(store: &BlockStore, bytes: &[u8; Superblock::SIZE]) -> Result<()> {
    store.write_home(SUPERBLOCK_OFFSET, bytes, "the superblock")
}

/// Splits sorted `buffers` into runs of consecutive block numbers, each at most
/// [`RUN_LIMIT`] long.
fn adjacent_runs(buffers: &[Arc<Buffer>]) -> impl Iterator<Item = &[Arc<Buffer>]> {
    let mut rest = buffers;
    std::iter::from_fn(move || {
        let first = rest.first()?.nr();
        let len = rest
            .iter()
            .take(RUN_LIMIT)
            .enumerate()
            .take_while(|(i, b)| b.nr() == first + *i as u64)
            .count();
        let (run, after) = rest.split_at(len);
        rest = after;
        Some(run)
    })
}

/// Runs `work` over `items` in contiguous chunks, one per available CPU when there are at
/// least [`PARALLEL_FROM`] items, else on this thread. Every chunk runs to its end or its
/// first error; the first error (in item order) is returned.
fn in_chunks<T: Sync>(items: &[T], work: impl Fn(&[T]) -> Result<()> + Sync) -> Result<()> {
    if items.len() < PARALLEL_FROM || cpus() == 1 {
        return work(items);
    }
    let threads = cpus();
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let work = &work;
        let workers: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || work(part)))
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    })
}

/// The CPUs this process may use, asked once: `available_parallelism` reads the cgroup
/// quota files on every call, and asking on every commit made an fsync-driven commit
/// (a few blocks) spend four fifths of its time opening files in /sys.
fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::cache::BufferCache;
    use crate::error::Error;

    #[test]
    fn runs_are_adjacent_blocks_and_no_longer_than_the_limit() {
        let cache = BufferCache::new(4096, 16);
        let numbers: Vec<u64> = [1, 2, 3, 5, 6, 9]
            .into_iter()
            .chain(100..100 + RUN_LIMIT as u64 + 44)
            .collect();
        let buffers: Vec<_> = numbers
            .iter()
            .map(|&nr| cache.get_new(nr, &[0; 16]))
            .collect();
        let runs: Vec<Vec<u64>> = adjacent_runs(&buffers)
            .map(|run| run.iter().map(|b| b.nr()).collect())
            .collect();
        let lens: Vec<usize> = runs.iter().map(Vec::len).collect();
        assert_eq!(lens, [3, 2, 1, RUN_LIMIT, 44]);
        assert_eq!(runs.concat(), numbers, "every buffer once, in order");
        for run in &runs {
            assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "{run:?}");
        }
    }

    #[test]
    fn chunks_cover_every_item_once_and_report_the_first_error() {
        let items: Vec<u32> = (0..3 * PARALLEL_FROM as u32).collect();
        let seen = std::sync::Mutex::new(Vec::new());
        in_chunks(&items, |chunk| {
            seen.lock().unwrap().extend_from_slice(chunk);
            Ok(())
        })
        .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, items);
        let bad = 2 * PARALLEL_FROM as u32;
        let failed = in_chunks(&items, |chunk| match chunk.contains(&bad) {
            false => Ok(()),
            true => Err(Error::Invalid(format!("item {bad}"))),
        });
        assert!(matches!(failed, Err(Error::Invalid(m)) if m == format!("item {bad}")));
    }
}
