//! Metadata block checksums by role: verified once when a block is first used in a role
//! (the buffer remembers it), and sealed at write-back, once, just before a dirty block is
//! written, according to the role it was written in (DESIGN.md, concurrency rule 4).
//! Nothing is verified or sealed without metadata_csum.

use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::{has_tail, DirLeafBlock};
use e4_format::dir_htree::DxNode;
use e4_format::extent::ExtentNode;
use e4_format::features::IncompatFeatures;
use e4_format::xattr::XattrBlockHeader;
use e4_format::{BlockSeed, Location, MetadataBlock};

use crate::buffer::cache::{Buffer, BufferRole};
use crate::dir::leaf::check_leaf_chain;
use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::io::meta_io::BlockKind;

impl Filesystem {
    /// Verifies `buffer` for `role` unless it was verified (or written) in that role
    /// before: its checksum, and for a directory leaf its entry chain (with or without
    /// checksums), which editors then trust.
    pub(crate) fn verify_block(&self, buffer: &Buffer, role: BufferRole) -> Result<()> {
        let csum_seed = self.csum_seed();
        if csum_seed.is_none() && role.kind != BlockKind::DirectoryLeaf {
            return Ok(());
        }
        let nr = buffer.nr();
        let loc = match role.owner {
            Some(o) => Location::InodeBlock {
                inode: o.ino,
                block: nr,
            },
            None => Location::Block(nr),
        };
        let filetype = || {
            self.superblock()
                .incompat()
                .contains(IncompatFeatures::FILETYPE)
        };
        buffer.verify_as(role, |bytes| -> Result<()> {
            let Some(fs_seed) = csum_seed else {
                return check_leaf_chain(bytes, filetype(), false, loc);
            };
            // Computed here, not before: most reads find the buffer verified already.
            let inode_seed = role
                .owner
                .map(|o| inode_csum_seed(fs_seed, o.ino, o.generation));
            match (role.kind, inode_seed) {
                (BlockKind::ExtentNode, Some(seed)) => ExtentNode::verify(bytes, seed, loc)?,
                (BlockKind::DirectoryLeaf, Some(seed)) => {
                    if has_tail(bytes) {
                        DirLeafBlock::verify(bytes, seed, loc)?;
                    }
                    check_leaf_chain(bytes, filetype(), true, loc)?
                }
                (BlockKind::HtreeNode, Some(seed)) => DxNode::verify(bytes, seed, loc)?,
                (BlockKind::XattrBlock, _) => {
                    let seed = BlockSeed {
                        seed: fs_seed,
                        block_nr: nr,
                    };
                    XattrBlockHeader::verify(bytes, seed, loc)?
                }
                _ => {}
            }
            Ok(())
        })
    }

    /// Computes the checksum of `bytes` (the contents of `buffer`) per its role.
    pub(crate) fn seal(&self, buffer: &Buffer, bytes: &mut [u8]) {
        let Some(fs_seed) = self.csum_seed() else {
            return;
        };
        let Some(role) = buffer.role() else {
            return;
        };
        let inode_seed = role
            .owner
            .map(|o| inode_csum_seed(fs_seed, o.ino, o.generation));
        match (role.kind, inode_seed) {
            (BlockKind::ExtentNode, Some(seed)) => ExtentNode::seal(bytes, seed),
            (BlockKind::DirectoryLeaf, Some(seed)) if has_tail(bytes) => {
                DirLeafBlock::seal(bytes, seed)
            }
            (BlockKind::HtreeNode, Some(seed)) => DxNode::seal(bytes, seed),
            (BlockKind::XattrBlock, _) => {
                let seed = BlockSeed {
                    seed: fs_seed,
                    block_nr: buffer.nr(),
                };
                XattrBlockHeader::seal(bytes, seed)
            }
            _ => {}
        }
    }
}
