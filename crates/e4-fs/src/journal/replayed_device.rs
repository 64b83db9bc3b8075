//! A read-only view of an image as recovery would leave it: the device's bytes, with each
//! block the log replays read from its log copy instead, and the journal's superblock as
//! emptied. A read-only open of an image whose journal needs recovery reads through it, so
//! `ls`, `cat`, `export` and `fsck` see the committed state while the image stays untouched.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use e4_journal::{Journal, LogCopy, Recovery};

use crate::io::device::Device;
use crate::journal::device_blocks::DeviceBlocks;

pub(crate) struct ReplayedDevice {
    base: Arc<dyn Device>,
    journal: Journal,
    replay: BTreeMap<u64, LogCopy>,
    /// Journal block 0's place and bytes once emptied.
    journal_superblock: (u64, Vec<u8>),
    block_size: u64,
}

impl ReplayedDevice {
    pub(crate) fn new(base: Arc<dyn Device>, journal: &Journal, recovery: Recovery) -> Self {
        let emptied = journal.emptied(&recovery);
        ReplayedDevice {
            journal_superblock: (
                journal.superblock_block(),
                emptied.encode_superblock(emptied.superblock()),
            ),
            block_size: journal.block_size() as u64,
            journal: journal.clone(),
            replay: recovery.replay,
            base,
        }
    }

    fn block(&self, nr: u64) -> io::Result<Option<Vec<u8>>> {
        if nr == self.journal_superblock.0 {
            return Ok(Some(self.journal_superblock.1.clone()));
        }
        let Some(copy) = self.replay.get(&nr) else {
            return Ok(None);
        };
        let reader = DeviceBlocks {
            device: self.base.as_ref(),
            block_size: self.block_size,
        };
        self.journal
            .replayed(&reader, copy)
            .map(Some)
            .map_err(|e| io::Error::other(e.to_string()))
    }
}

impl Device for ReplayedDevice {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.base.read_exact_at(buf, offset)?;
        let end = offset + buf.len() as u64;
        let first = offset / self.block_size;
        let last = (end - 1) / self.block_size;
        let patched = self
            .replay
            .range(first..=last)
            .map(|(&nr, _)| nr)
            .chain(Some(self.journal_superblock.0).filter(|nr| (first..=last).contains(nr)));
        for nr in patched {
            let Some(bytes) = self.block(nr)? else {
                continue;
            };
            let start = nr * self.block_size;
            // The overlap of the block and the range read.
            let from = start.max(offset);
            let to = (start + self.block_size).min(end);
            // OK to cast: offsets inside `buf` and inside one block.
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&bytes[(from - start) as usize..(to - start) as usize]);
        }
        Ok(())
    }

    fn write_all_at(&self, _: &[u8], offset: u64) -> io::Result<()> {
        Err(io::Error::other(format!(
            "write at byte {offset} to an image read as its journal would recover it"
        )))
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.base.size()
    }
}
