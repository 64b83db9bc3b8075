//! Whole blocks of a device, as e4-journal reads them.

use std::io;

use e4_journal::BlockReader;

use crate::io::device::Device;

/// Whole blocks of a device, for e4-journal.
pub(crate) struct DeviceBlocks<'a> {
    pub device: &'a dyn Device,
    pub block_size: u64,
}

impl BlockReader for DeviceBlocks<'_> {
    fn read_block(&self, nr: u64, buf: &mut [u8]) -> io::Result<()> {
        let offset = nr
            .checked_mul(self.block_size)
            .ok_or_else(|| io::Error::other(format!("block {nr} is past any device")))?;
        self.device.read_exact_at(buf, offset)
    }
}
