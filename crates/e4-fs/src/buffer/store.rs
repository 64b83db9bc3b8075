//! The block store: the device, the metadata cache in front of it and the verifier, owned
//! together, so that every metadata block the engine uses was read through the cache and
//! verified in its role, and every one it writes goes home through one method
//! ([`BlockStore::write_home`], called by write-back only). File data bypasses the cache
//! and goes straight to and from the device ([`BlockStore::read_data`],
//! [`BlockStore::write_data`]).

use std::sync::Arc;

use e4_format::{FormatError, Location, Problem, Structure};

use crate::buffer::cache::{Buffer, BufferCache, BufferRole};
use crate::buffer::verifier::BlockVerifier;
use crate::error::{Error, Result};
use crate::io::device::Device;
use crate::io::meta_io::LookWithDerived;

pub(crate) struct BlockStore {
    device: Arc<dyn Device>,
    cache: BufferCache,
    verifier: BlockVerifier,
    block_size: u32,
    /// `s_blocks_count`: no block at or past it is read.
    blocks: u64,
}

impl BlockStore {
    /// A store over `device` of `blocks` blocks of `block_size` bytes, caching up to
    /// `cache_blocks` clean metadata blocks.
    pub(crate) fn new(
        device: Arc<dyn Device>,
        block_size: u32,
        blocks: u64,
        cache_blocks: usize,
        verifier: BlockVerifier,
    ) -> Self {
        BlockStore {
            device,
            cache: BufferCache::new(cache_blocks, block_size as usize),
            verifier,
            block_size,
            blocks,
        }
    }

    pub(crate) fn block_size(&self) -> u32 {
        self.block_size
    }

    /// The metadata cache: dirty marks, the dirty list a commit takes, forgetting freed
    /// blocks, new blocks written whole.
    pub(crate) fn cache(&self) -> &BufferCache {
        &self.cache
    }

    /// The checksum seed, when checksums are verified and sealed.
    pub(crate) fn csum_seed(&self) -> Option<u32> {
        self.verifier.csum_seed()
    }

    /// The device, for the allocators' lazy bitmap loads (they read whole bitmap blocks
    /// the cache never holds: e4-alloc keeps its own copy).
    pub(crate) fn device(&self) -> Arc<dyn Device> {
        Arc::clone(&self.device)
    }

    /// Metadata block `nr` through the cache, unverified: the caller verifies it in the
    /// role it uses it for ([`Self::verify`]).
    pub(crate) fn read(&self, nr: u64) -> Result<Arc<Buffer>> {
        self.read_or_zeros(nr, false)
    }

    /// [`Self::read`], but a miss makes the block from zeros instead of reading it when
    /// `never_written`: an inode-table block in the part of its table no inode was ever
    /// used in, whose records the caller is about to write (as the kernel's
    /// `__ext4_get_inode_loc` makes a block of new inodes in memory).
    pub(crate) fn read_or_zeros(&self, nr: u64, never_written: bool) -> Result<Arc<Buffer>> {
        if nr >= self.blocks {
            return Err(FormatError::corrupt(
                Structure::BlockPointer,
                Location::Block(nr),
                Problem::OutsideFilesystem { block: nr },
            )
            .into());
        }
        let offset = nr * u64::from(self.block_size);
        self.cache.get_or_read(nr, |buf| {
            if never_written {
                buf.fill(0);
                return Ok(());
            }
            self.device
                .read_exact_at(buf, offset)
                .map_err(|e| Error::io(format!("read of block {nr}"), e))
        })
    }

    /// Metadata block `nr` through the cache, verified as `role`.
    pub(crate) fn read_as(&self, nr: u64, role: BufferRole) -> Result<Arc<Buffer>> {
        let buffer = self.read(nr)?;
        self.checked(&buffer, |b| self.verify(b, role))?;
        Ok(buffer)
    }

    /// Runs `check` on `buffer` and returns what it makes. A block that fails its check
    /// leaves the cache (unless this transaction changed it): damage on the way from the
    /// device is read afresh next time, and damage on the disk is found again, not kept
    /// for every later reader.
    pub(crate) fn checked<T>(
        &self,
        buffer: &Buffer,
        check: impl FnOnce(&Buffer) -> Result<T>,
    ) -> Result<T> {
        let result = check(buffer);
        if result.is_err() && !buffer.is_dirty() {
            self.cache.forget(buffer.nr());
        }
        result
    }

    /// Shows `look` block `nr` verified as `role`, without copying it: the block's bytes
    /// are borrowed under its buffer's read lock.
    pub(crate) fn visit(
        &self,
        nr: u64,
        role: BufferRole,
        look: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let buffer = self.read_as(nr, role)?;
        let bytes = buffer.bytes();
        look(&bytes)
    }

    /// [`Self::visit`] with what was derived from the bytes beside them.
    pub(crate) fn visit_with_derived(
        &self,
        nr: u64,
        role: BufferRole,
        look: &mut LookWithDerived<'_>,
    ) -> Result<()> {
        let buffer = self.read_as(nr, role)?;
        let contents = buffer.contents();
        look(&contents.bytes, Some(&contents.derived))
    }

    /// Verifies `buffer` as `role`, unless it was verified or written in that role before.
    pub(crate) fn verify(&self, buffer: &Buffer, role: BufferRole) -> Result<()> {
        self.verifier.verify(buffer, role)
    }

    /// Seals `bytes`, the contents of block `nr` about to be written, by `role`, the role
    /// they were written in.
    pub(crate) fn seal(&self, nr: u64, role: Option<BufferRole>, bytes: &mut [u8]) {
        self.verifier.seal(nr, role, bytes)
    }

    /// Reads file data at byte `offset` straight from the device.
    pub(crate) fn read_data(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.device
            .read_exact_at(buf, offset)
            .map_err(|e| Error::io(format!("read of {} bytes at byte {offset}", buf.len()), e))
    }

    /// Writes file data at byte `offset` straight to the device, to blocks the file owns.
    pub(crate) fn write_data(&self, data: &[u8], offset: u64) -> Result<()> {
        self.device
            .write_all_at(data, offset)
            .map_err(|e| Error::io(format!("write of {} bytes at byte {offset}", data.len()), e))
    }

    /// Makes `len` bytes of file data from byte `offset` read as zeros (a hole punched in
    /// an image file; zeros written elsewhere), in blocks the file owns.
    pub(crate) fn zero_data(&self, offset: u64, len: u64) -> Result<()> {
        self.device
            .zero_range(offset, len)
            .map_err(|e| Error::io(format!("zeroing {len} bytes at byte {offset}"), e))
    }

    /// Writes metadata to its home at byte `offset` (`what` names it in an error): the one
    /// way metadata reaches the device, called by write-back alone (and, with
    /// [`Self::write_uncached_home`], for blocks the cache does not own).
    pub(crate) fn write_home(&self, offset: u64, bytes: &[u8], what: &str) -> Result<()> {
        self.device
            .write_all_at(bytes, offset)
            .map_err(|e| Error::io(format!("write of {what}"), e))
    }

    /// Writes `blocks`, adjacent, from byte `offset` in one device write (`what` names them
    /// in an error): for write-back and the journal, as [`Self::write_home`].
    pub(crate) fn write_home_gathered(
        &self,
        offset: u64,
        blocks: &[&[u8]],
        what: &str,
    ) -> Result<()> {
        self.device
            .write_gathered_at(blocks, offset)
            .map_err(|e| Error::io(format!("write of {what}"), e))
    }

    /// Writes block `nr` whole to its home, for a block the engine keeps in its own
    /// structures rather than in the cache (bitmaps, descriptor blocks): a copy the cache
    /// holds from an earlier read is dropped first, so none is read stale later.
    pub(crate) fn write_uncached_home(&self, nr: u64, bytes: &[u8]) -> Result<()> {
        self.cache.forget(nr);
        self.write_home(
            nr * u64::from(self.block_size),
            bytes,
            &format!("block {nr}"),
        )
    }

    /// Makes everything written so far durable.
    pub(crate) fn flush(&self, when: &str) -> Result<()> {
        self.device
            .flush()
            .map_err(|e| Error::io(format!("flush {when}"), e))
    }
}
