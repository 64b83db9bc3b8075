//! A fixed-length array of atomics whose memory is allocated a chunk at a time, on the first
//! write into that chunk: per-inode state sized by the superblock's inode count costs what
//! the image uses, not what it claims (an empty 16 TiB image claims half a billion inodes,
//! 5.5 GB of per-inode arrays that would be all zeros). A slot never written reads as zero.

use std::sync::OnceLock;

/// Slots per chunk: 64 Ki, so a chunk is at most 256 KiB and an image with a few thousand
/// inodes in use allocates a few chunks.
const SLOTS_PER_CHUNK: usize = 1 << 16;

#[derive(Debug)]
pub struct LazySlots<A> {
    chunks: Box<[OnceLock<Box<[A]>>]>,
    len: usize,
}

impl<A: Default> LazySlots<A> {
    /// `len` slots, none allocated.
    pub fn new(len: usize) -> Self {
        let chunks = (0..len.div_ceil(SLOTS_PER_CHUNK))
            .map(|_| OnceLock::new())
            .collect();
        LazySlots { chunks, len }
    }

    /// Slot `i` to read, or None if it is past the end or was never written (reads as zero).
    pub fn get(&self, i: usize) -> Option<&A> {
        if i >= self.len {
            return None;
        }
        self.chunks[i / SLOTS_PER_CHUNK]
            .get()
            .map(|chunk| &chunk[i % SLOTS_PER_CHUNK])
    }

    /// Slot `i` to write, its chunk allocated if needed; None past the end.
    pub fn get_or_alloc(&self, i: usize) -> Option<&A> {
        if i >= self.len {
            return None;
        }
        let chunk = self.chunks[i / SLOTS_PER_CHUNK]
            .get_or_init(|| (0..SLOTS_PER_CHUNK).map(|_| A::default()).collect());
        Some(&chunk[i % SLOTS_PER_CHUNK])
    }

    /// Bytes of memory held (the allocated chunks and the chunk table).
    pub fn memory_bytes(&self) -> usize {
        let allocated = self.chunks.iter().filter(|c| c.get().is_some()).count();
        allocated * SLOTS_PER_CHUNK * size_of::<A>()
            + self.chunks.len() * size_of::<OnceLock<Box<[A]>>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn unwritten_slots_read_as_absent_and_cost_nothing() {
        let slots: LazySlots<AtomicU32> = LazySlots::new(1 << 30);
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
