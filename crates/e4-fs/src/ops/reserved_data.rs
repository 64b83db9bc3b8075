//! Data blocks chosen before their contents are written: [`Filesystem::reserve_data`] maps
//! the blocks a new file's data will take (written extents, placed as [`Filesystem::write_at`]
//! would place them) and sets its size, and [`DataReservation::fill`] later writes the data
//! into exactly those blocks, changing no metadata.
//!
//! Why: `e4 mkfs -d` with `SOURCE_DATE_EPOCH` must make the same image whatever the thread
//! count. The engine's allocators place blocks by the order calls arrive, so every placement
//! must be decided by one thread in a fixed order; copying the data, the bulk of the work, then
//! needs no decision at all and runs on every core. Each fill's writes go only to blocks its
//! file still maps, checked under the inode's lock at each write, so a fill can never write
//! into blocks another file owns (a file truncated or removed since its reservation refuses the
//! write).
//!
//! Written extents say the blocks hold the file's data before the fill has written it, so
//! the reservation makes them read as zeros first ([`crate::io::device::Device::zero_range`]:
//! a hole punched in an image file, which writes nothing; zeros written on a block device),
//! in the transaction that maps them and durable before its commit: until the fill, after a
//! crash before it, and where a fill stops short (a failed read, a dropped reservation), the
//! file reads zeros, never what the disk held there (another file's old data).

use std::sync::Arc;

use e4_format::inode::flags;

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::cache::InodeHandle;
use crate::inode::user_flags;
use crate::io::credits::{GROUP, INODE};
use crate::map::extent_tree::Previous;
use crate::map::run::Mapping;

/// Most blocks one fill write covers: bounds the caller's buffer (1 MiB at 4 KiB blocks).
const FILL_BLOCKS: u64 = 256;

/// Blocks `physical..physical + len` reserved for logical blocks `logical..logical + len`.
#[derive(Debug, Clone, Copy)]
struct ReservedRun {
    logical: u64,
    physical: u64,
    len: u64,
}

/// The blocks [`Filesystem::reserve_data`] mapped for a file's data (reading as zeros until
/// then), waiting for [`DataReservation::fill`].
pub struct DataReservation<'fs> {
    fs: &'fs Filesystem,
    ino: u32,
    /// The inode's cache handle when reserved: marked deleted if the inode is freed, so a
    /// later file with the same number is never mistaken for this one.
    handle: Arc<InodeHandle>,
    size: u64,
    runs: Vec<ReservedRun>,
}

impl std::fmt::Debug for DataReservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataReservation")
            .field("ino", &self.ino)
            .field("size", &self.size)
            .field("runs", &self.runs)
            .finish()
    }
}

impl Filesystem {
    /// Maps blocks for the byte ranges `regions` (ascending, within `size`; the blocks they
    /// touch, whole) of empty regular file `ino` as written extents, placed as `write_at`
    /// would place them, sets its size to `size` and its mtime and ctime to now, and returns
    /// the reservation whose [`DataReservation::fill`] writes the data. Bytes outside
    /// `regions` stay holes.
    ///
    /// The file must be empty (size 0, no blocks, not inline: whether a small file should
    /// go inline is the caller's choice, by writing it instead). Large reservations run in
    /// steps of at most half the groups one transaction may change, as an allocating
    /// fallocate does; a failure (a full filesystem) keeps the steps before it, and the
    /// returned error drops their reservation, which zeroes their blocks.
    pub fn reserve_data(
        &self,
        ino: u32,
        size: u64,
        regions: &[std::ops::Range<u64>],
    ) -> Result<DataReservation<'_>> {
        self.check_caller_ino(ino)?;
        let bs = u64::from(self.block_size());
        let handle = self.inode_handle(ino)?;
        {
            let state = handle.read(&self.inodes);
            self.require_regular(&state)?;
            let inode = &state.inode;
            let blocks = inode.blocks_512(false, self.block_size());
            if inode.size() != 0 || blocks != 0 || inode.has_flag(flags::INLINE_DATA) {
                return Err(Error::Invalid(format!(
                    "inode {ino}: blocks are reserved only for an empty file (it holds {} bytes)",
                    inode.size()
                )));
            }
            if size > self.max_file_size(inode) {
                return Err(Error::FileTooBig(format!("inode {ino}")));
            }
        }
        let mut previous_end = 0;
        for region in regions {
            if region.start < previous_end || region.start > region.end || region.end > size {
                return Err(Error::Invalid(format!(
                    "inode {ino}: data regions must ascend within the size ({size} bytes); \
                     {}..{} does not",
                    region.start, region.end
                )));
            }
            previous_end = region.end;
        }
        let mut reservation = DataReservation {
            fs: self,
            ino,
            handle,
            size,
            runs: Vec::new(),
        };
        let step = self.step_groups().map_or(u64::MAX, |groups| {
            (groups / 2).max(1) * u64::from(self.geometry.blocks_per_group())
        });
        let mut steps = Vec::new();
        let mut mapped_to = 0;
        for region in regions.iter().filter(|r| r.start < r.end) {
            let mut first = (region.start / bs).max(mapped_to);
            let end = region.end.div_ceil(bs);
            while first < end {
                let to = end.min(first.saturating_add(step));
                steps.push(first..to);
                first = to;
            }
            mapped_to = mapped_to.max(end);
        }
        if steps.is_empty() {
            // Nothing to map; the step still sets the size and times.
            steps.push(0..0);
        }
        for blocks in steps {
            let runs = self.retry_when_full(|| self.reserve_step(ino, size, blocks.clone()))?;
            reservation.runs.extend(runs);
        }
        Ok(reservation)
    }

    /// One transaction of [`Filesystem::reserve_data`]: maps logical `blocks` and sets the
    /// size; all or nothing.
    fn reserve_step(
        &self,
        ino: u32,
        size: u64,
        blocks: std::ops::Range<u64>,
    ) -> Result<Vec<ReservedRun>> {
        let writer = self.writer()?;
        let bs = u64::from(self.block_size());
        let runs = {
            // The inode; each allocation and mapping edit declares its own, within the
            // step's room.
            let mut txn = writer.begin_step(self, INODE)?;
            let handle = self.inode_handle(ino)?;
            let mut state = self.lock_for_change(&mut txn, &handle, None)?;
            self.require_regular(&state)?;
            user_flags::refuse_write(&state.inode, 0)?;
            let io = writer.io(self, &txn);
            let runs = io.all_or_nothing(&mut state, |state| {
                let mut runs = Vec::new();
                let window = &mut state.window;
                self.edit_mapping(&io, &mut state.inode, |map, data_blocks| {
                    let mut logical = blocks.start;
                    while logical < blocks.end {
                        let want =
                            map.hole_len(logical, (blocks.end - logical).min(map.max_run()))?;
                        if want == 0 {
                            return Err(Error::Invalid(format!(
                                "inode {ino}: logical block {logical} was mapped while blocks \
                                 were reserved for it"
                            )));
                        }
                        io.txn.extend(GROUP);
                        // OK to cast: at most `max_run`, an extent's length.
                        let got = self.allocate_data_blocks(
                            &io,
                            map,
                            window,
                            ino,
                            logical,
                            want as u32,
                            size.div_ceil(bs),
                            Previous::Unknown,
                        )?;
                        // Zeros before the commit that maps them (its flush makes them
                        // durable first): until the fill, and after a crash before it, the
                        // blocks read as zeros, never as what the disk held.
                        self.store
                            .zero_data(got.start * bs, u64::from(got.len) * bs)
                            .map_err(|e| io.unmapped(got, e))?;
                        if let Err(e) = map.insert(logical, got.start, u64::from(got.len), false) {
                            return Err(io.unmapped(got, e));
                        }
                        io.took_data(got);
                        *data_blocks += i64::from(got.len);
                        runs.push(ReservedRun {
                            logical,
                            physical: got.start,
                            len: u64::from(got.len),
                        });
                        logical += u64::from(got.len);
                    }
                    Ok(())
                })?;
                if state.inode.size() != size {
                    self.set_file_size(&mut state.inode, size);
                }
                Ok(runs)
            })?;
            // Blocks held ahead for appends: this file gets no more.
            io.space
                .blocks
                .release_window(&mut state.window, io.txn.slot);
            Self::touch(&mut state, true);
            drop(state);
            self.inodes.mark_dirty(&handle);
            runs
        };
        self.commit_if_needed()?;
        Ok(runs)
    }
}

impl DataReservation<'_> {
    /// The inode the blocks are reserved for.
    pub fn ino(&self) -> u32 {
        self.ino
    }

    /// Writes the file's data into its reserved blocks, in order, each block once and whole,
    /// changing no metadata: `read(offset, buf)` fills `buf` with the file's bytes from byte
    /// `offset` (bytes past the size are zeros). `buf` is the caller's, grown as needed (to
    /// 1 MiB at 4 KiB blocks). Returns the bytes of data written (those within the size).
    ///
    /// A failure of `read` or of a write stops the fill; the blocks not written read as
    /// zeros. A write refuses blocks the file no longer maps as reserved (it was truncated
    /// or removed since): [`Error::Invalid`].
    pub fn fill<E: From<Error>>(
        self,
        buf: &mut Vec<u8>,
        mut read: impl FnMut(u64, &mut [u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<u64, E> {
        let bs = u64::from(self.fs.block_size());
        let mut bytes = 0;
        for &run in &self.runs {
            let mut done = 0;
            while done < run.len {
                let blocks = (run.len - done).min(FILL_BLOCKS);
                // OK to cast: at most FILL_BLOCKS blocks.
                let chunk = (blocks * bs) as usize;
                if buf.len() < chunk {
                    buf.resize(chunk, 0);
                }
                let start = (run.logical + done) * bs;
                let data = (self.size.saturating_sub(start) as usize).min(chunk);
                read(start, &mut buf[..data])?;
                buf[data..chunk].fill(0);
                self.write_owned(run.logical + done, run.physical + done, &buf[..chunk])?;
                bytes += data as u64;
                done += blocks;
            }
        }
        Ok(bytes)
    }

    /// Writes whole blocks `bytes` at logical block `logical`, which must still map to
    /// `physical` onwards, written, for the file this reservation was made for. The inode's
    /// read lock is held across the check and the write, so no truncate frees the blocks
    /// in between.
    fn write_owned(&self, logical: u64, physical: u64, bytes: &[u8]) -> Result<()> {
        let fs = self.fs;
        let bs = u64::from(fs.block_size());
        let blocks = bytes.len() as u64 / bs;
        let state = self.handle.read(&fs.inodes);
        let still_reserved = !state.deleted
            && matches!(
                fs.map_block(&state.inode, logical, blocks)?,
                Mapping::Data { physical: p, len, unwritten: false } if p == physical && len >= blocks
            );
        if !still_reserved {
            return Err(Error::Invalid(format!(
                "inode {}: logical blocks {logical}..{} no longer map to the blocks reserved \
                 for them ({physical}..): truncated or removed since",
                self.ino,
                logical + blocks
            )));
        }
        fs.store.write_data(bytes, physical * bs)
    }
}
