//! Where a file's blocks are (`map_block`): the file's extent tree or block map, looked up
//! through the same mechanism the write path edits it with, over the cache. A lookup
//! returns a whole run, so a reader issues one device read per contiguous extent, not one
//! per block.

use e4_format::inode::{flags, Inode, I_BLOCK_SIZE};

use crate::buffer::read_io::ReadIo;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::map::file_mapping::FileMapping;
use crate::map::run::Mapping;

impl Filesystem {
    /// Maps `logical` of `inode`; the run returned is at most `max_len` blocks. Inline-data
    /// inodes have no blocks to map. A run of data outside the filesystem is corruption.
    pub fn map_block(&self, inode: &Inode, logical: u64, max_len: u64) -> Result<Mapping> {
        if inode.has_flag(flags::INLINE_DATA) {
            return Err(Error::WrongType {
                path: format!("inode {}", inode.ino),
                reason: "its data is inline and has no block mapping",
            });
        }
        let io = ReadIo::new(&self.store);
        let mut root = [0u8; I_BLOCK_SIZE];
        let run = FileMapping::reading(inode, &mut root, &io).run_at(logical, max_len)?;
        if let Mapping::Data { physical, len, .. } = run {
            self.check_mapped_run(physical, len, inode.ino)?;
        }
        Ok(run)
    }
}
