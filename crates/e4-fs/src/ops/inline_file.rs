//! Inline regular files (write-path.md §4, `fs/ext4/inline.c`): on an inline_data
//! filesystem a new file starts with EXTENTS_FL like any other, and its first write goes
//! into the inode when the bytes fit (`ext4_try_to_write_inline_data`,
//! `ext4_create_inline_data`). Writes, truncates and fallocate keep an inline file inline
//! while its new content fits `i_block` plus the free in-inode attribute space; when it
//! does not, the file grows out of the inode (`ext4_convert_inline_data`): `system.data`
//! goes, EXTENTS_FL and an empty root come, and the old bytes are written to its first
//! block before the operation continues on blocks.
//!
//! e4 keeps the inline content exactly `i_size` bytes: `i_block` up to 60 (zero-padded),
//! the value the rest, as the kernel keeps it.

use e4_format::features::IncompatFeatures;
use e4_format::inode::{flags, FileType, Inode};

use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::inode::cache::InodeState;
use crate::map::file_mapping::give_empty_mapping;
use crate::txn::txn_io::TxnIo;
use crate::xattr::inline_data::InlineData;

impl Filesystem {
    /// Whether regular file `inode` may take its first write inline: the filesystem has
    /// inline_data and the file is still empty and owns no block (the kernel's
    /// EXT4_STATE_MAY_INLINE_DATA, which only new inodes carry).
    fn may_start_inline(&self, inode: &Inode) -> bool {
        self.superblock()
            .incompat()
            .contains(IncompatFeatures::INLINE_DATA)
            && inode.file_type() == Some(FileType::Regular)
            && !inode.has_flag(flags::INLINE_DATA)
            && inode.size() == 0
            && inode.blocks_512(false, self.block_size()) == 0
    }

    /// Changes an inline file's content in place: the content is cut or zero-extended to
    /// `new_len` bytes, then `edit` changes it. True when done inline (the caller sets
    /// `i_size` to `new_len`). False when the caller must do the operation on blocks: the
    /// file is not inline (and, with `may_start`, could not start inline), or the new
    /// content does not fit, in which case the file has been moved out of the inode first.
    pub(crate) fn change_inline(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        new_len: u64,
        may_start: bool,
        edit: impl FnOnce(&mut [u8]),
    ) -> Result<bool> {
        let inline = state.inode.has_flag(flags::INLINE_DATA);
        let starts = may_start && self.may_start_inline(&state.inode);
        if !inline && !starts {
            return Ok(false);
        }
        let mut data = InlineData::load(&state.inode)?;
        let fits = data
            .capacity()
            .and_then(|c| usize::try_from(new_len).ok().filter(|&len| len <= c));
        let mut content = if inline {
            data.content(&state.inode)
        } else {
            Vec::new()
        };
        // Bytes past i_size must read as zeros if the file grows again, and another writer
        // may leave the inline region longer than the size (e2fsck accepts that), so the
        // content is cut to the size. OK to cast: the minimum is an in-memory length.
        content.resize(state.inode.size().min(content.len() as u64) as usize, 0);
        if let Some(len) = fits {
            let mut changed = content.clone();
            changed.resize(len, 0);
            edit(&mut changed);
            if data.store(&mut state.inode, &changed) {
                return Ok(true);
            }
        }
        if inline {
            self.move_out_of_inode(io, state, &mut data, &content)?;
        }
        Ok(false)
    }

    /// Moves inline file `state` to a block (`ext4_convert_inline_data`): `system.data`
    /// removed, the empty mapping a new file has, then `content` written from byte 0. A
    /// failure (a full filesystem) leaves the inode as it was.
    fn move_out_of_inode(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        data: &mut InlineData,
        content: &[u8],
    ) -> Result<()> {
        let saved = state.inode.clone();
        data.remove(&mut state.inode)?;
        give_empty_mapping(self.superblock(), &mut state.inode);
        if !content.is_empty() {
            if let Err(e) = self.write_first_blocks(io, state, content) {
                state.inode = saved;
                return Err(e);
            }
        }
        Ok(())
    }
}
