//! A fixed-length array of atomics whose memory is allocated a chunk at a time, on the first
//! write into that chunk: per-inode state sized by the superblock's inode count costs what
//! the image uses, not what it claims (an empty 16 TiB image claims half a billion inodes,
//! 5.5 GB of per-inode arrays that would be all zeros). A slot never written reads as zero.
//!
//! `CHUNK` slots make a chunk: 64 Ki by default, so a per-inode chunk is at most 256 KiB
//! and an image with a few thousand inodes in use allocates a few chunks. The per-block
//! bitmaps use far smaller chunks (see [`AtomicBitmap`](super::atomic_bitmap::AtomicBitmap)),
//! because what an empty filesystem uses is spread over the whole device.

use e4_format::table::{try_table_from, TableTooLarge};
use e4_format::Location;
use once_cell::race::OnceBox;
use rayon::prelude::*;

/// Entries of the chunk table one parallel task looks at: a small table is walked on one
/// thread.
const CHUNKS_PER_TASK: usize = 1 << 12;

/// A chunk: a fixed-size array behind a set-once thin pointer, so a table entry is 8 bytes.
/// A slice's fat pointer in a `OnceLock` made it 24, a thin one 16 (the lock's state word
/// beside the pointer): each 8 bytes is 2 MiB per block map of an empty 16 TiB image, and
/// the table is written when it is made, so it is resident whatever the image holds. Two
/// threads first writing into one chunk at once may both allocate it; one allocation is
/// kept and the other dropped before anything is written into it.
type Chunk<A, const CHUNK: usize> = OnceBox<[A; CHUNK]>;

#[derive(Debug)]
pub struct LazySlots<A, const CHUNK: usize = { 1 << 16 }> {
    chunks: Box<[Chunk<A, CHUNK>]>,
    len: usize,
}

impl<A: Default, const CHUNK: usize> LazySlots<A, CHUNK> {
    /// `len` slots, none allocated: only the chunk table, reserved fallibly (`len` is a
    /// count the superblock claims; `table` names it in the error).
    pub fn new(len: usize, table: &'static str) -> Result<Self, TableTooLarge> {
        let chunks = try_table_from(
            len.div_ceil(CHUNK) as u64,
            table,
            Location::Superblock,
            |_| OnceBox::new(),
        )?;
        Ok(LazySlots { chunks, len })
    }

    /// Slot `i` to read, or None if it is past the end or was never written (reads as zero).
    pub fn get(&self, i: usize) -> Option<&A> {
        if i >= self.len {
            return None;
        }
        self.chunks[i / CHUNK].get().map(|chunk| &chunk[i % CHUNK])
    }

    /// Slot `i` to write, its chunk allocated if needed; None past the end.
    pub fn get_or_alloc(&self, i: usize) -> Option<&A> {
        if i >= self.len {
            return None;
        }
        let chunk = self.chunks[i / CHUNK].get_or_init(|| {
            let slots: Box<[A]> = (0..CHUNK).map(|_| A::default()).collect();
            // OK to unwrap: exactly CHUNK slots were made.
            slots.try_into().ok().unwrap()
        });
        Some(&chunk[i % CHUNK])
    }

    /// The chunks allocated so far, walked in parallel (order unspecified).
    pub fn par_allocated(&self) -> impl ParallelIterator<Item = &[A]>
    where
        A: Sync + Send,
    {
        self.chunks
            .par_iter()
            .with_min_len(CHUNKS_PER_TASK)
            .filter_map(|chunk| chunk.get().map(|slots| &slots[..]))
    }

    /// Bytes of memory held (the allocated chunks and the chunk table).
    pub fn memory_bytes(&self) -> usize {
        let allocated = self.chunks.iter().filter(|c| c.get().is_some()).count();
        allocated * CHUNK * size_of::<A>() + self.chunks.len() * size_of::<Chunk<A, CHUNK>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn unwritten_slots_read_as_absent_and_cost_nothing() {
        let slots: LazySlots<AtomicU32> = LazySlots::new(1 << 30, "test slots").unwrap();
        assert!(slots.get(12345).is_none());
        assert!(
            slots.memory_bytes() < 1 << 20,
            "only the chunk table is held"
        );
        slots
            .get_or_alloc(12345)
            .unwrap()
            .store(7, Ordering::Relaxed);
        assert_eq!(slots.get(12345).unwrap().load(Ordering::Relaxed), 7);
        assert_eq!(slots.get(12346).unwrap().load(Ordering::Relaxed), 0);
        assert!(slots.get((1 << 30) - 1).is_none());
        assert!(slots.get_or_alloc(1 << 30).is_none(), "past the end");
        assert!(slots.memory_bytes() < 2 << 20, "one chunk allocated");
    }
}
