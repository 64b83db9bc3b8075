//! Metadata block checksums by role: verified once when a block is first used in a role
//! (the buffer remembers it), and sealed at write-back, once, just before a dirty block is
//! written, according to the role it was written in (DESIGN.md, concurrency rule 4).
//! Nothing is verified or sealed without metadata_csum.

use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::{has_tail, verify_leaf_checksum, write_leaf_tail};
use e4_format::dir_htree::{seal_htree_block, DxNode, DxRoot, MAX_LEVELS_LARGEDIR};
use e4_format::extent::{seal_node, ExtentNode};
use e4_format::xattr::{parse_xattr_block, xattr_block_checksum};
use e4_format::Location;

use crate::buffer_cache::{Buffer, BufferRole};
use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::meta_io::BlockKind;

/// Where `h_checksum` sits in an xattr block header.
const XATTR_CHECKSUM_OFFSET: usize = 0x10;

impl Filesystem {
    /// Verifies `buffer`'s checksum for `role` unless it was verified (or written) in that
    /// role before.
    pub(crate) fn verify_block(&self, buffer: &Buffer, role: BufferRole) -> Result<()> {
        let Some(fs_seed) = self.csum_seed() else {
            return Ok(());
        };
        let nr = buffer.nr();
        let loc = match role.owner {
            Some(o) => Location::InodeBlock {
                inode: o.ino,
                block: nr,
            },
            None => Location::Block(nr),
        };
        buffer.verify_as(role, |bytes| -> Result<()> {
            // Computed here, not before: most reads find the buffer verified already.
            let inode_seed = role
                .owner
                .map(|o| inode_csum_seed(fs_seed, o.ino, o.generation));
            match (role.kind, inode_seed) {
                (BlockKind::ExtentNode, Some(seed)) => {
                    ExtentNode::parse(bytes, loc)?.verify_checksum(bytes, seed, loc)?
                }
                (BlockKind::DirectoryLeaf, Some(seed)) if has_tail(bytes) => {
                    verify_leaf_checksum(bytes, seed, loc)?
                }
                (BlockKind::HtreeNode, Some(seed)) => {
                    if bytes[..4] == [0, 0, 0, 0] {
                        DxNode::parse(bytes, true, loc)?.verify_checksum(bytes, seed, loc)?
                    } else {
                        DxRoot::parse(bytes, true, MAX_LEVELS_LARGEDIR, loc)?
                            .node
                            .verify_checksum(bytes, seed, loc)?
                    }
                }
                (BlockKind::XattrBlock, _) => {
                    parse_xattr_block(bytes, nr, Some(fs_seed), loc)?;
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
            (BlockKind::ExtentNode, Some(seed)) => seal_node(bytes, seed),
            (BlockKind::DirectoryLeaf, Some(seed)) if has_tail(bytes) => {
                write_leaf_tail(bytes, seed)
            }
            (BlockKind::HtreeNode, Some(seed)) => seal_htree_block(bytes, seed),
            (BlockKind::XattrBlock, _) => {
                let sum = xattr_block_checksum(bytes, buffer.nr(), fs_seed);
                bytes[XATTR_CHECKSUM_OFFSET..XATTR_CHECKSUM_OFFSET + 4]
                    .copy_from_slice(&sum.to_le_bytes());
            }
            _ => {}
        }
    }
}
