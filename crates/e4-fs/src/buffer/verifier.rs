//! The verify and seal steps of every metadata block kind, in one table: a block is verified
//! once when it is first used in a role (the buffer remembers it), and sealed at write-back,
//! once, just before a dirty block is written, according to the role it was written in
//! (DESIGN.md, concurrency rule 4). Without metadata_csum nothing is sealed, and only the
//! structure is verified: a directory leaf's entry chain and an index node's entries.

use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::{has_tail, DirEntryIter, DirLeafBlock, TAIL_SIZE};
use e4_format::dir_htree::{check_index_block, DxNode};
use e4_format::extent::ExtentNode;
use e4_format::xattr::XattrBlockHeader;
use e4_format::{BlockSeed, Location, MetadataBlock};

use crate::buffer::cache::{Buffer, BufferRole};
use crate::error::Result;
use crate::io::meta_io::{BlockKind, Owner};

/// The shortest directory record: an 8-byte header and a name rounded up to 4 bytes.
pub(crate) const MIN_REC_LEN: usize = 12;

impl BufferRole {
    /// The role a block of `kind` has when `owner` reads or writes it. An xattr block has
    /// no owner: several inodes may share it, its checksum is seeded by its block number
    /// alone, and a role with an owner would make one inode verify again a block another
    /// wrote in this transaction, whose checksum is only sealed at write-back.
    pub(crate) fn of(kind: BlockKind, owner: Owner) -> BufferRole {
        let owner = (kind != BlockKind::XattrBlock).then_some(owner);
        BufferRole { kind, owner }
    }
}

/// How this filesystem's metadata blocks are verified and sealed.
pub(crate) struct BlockVerifier {
    /// The checksum seed, when metadata_csum is on and verification is wanted.
    csum_seed: Option<u32>,
    directories: DirectoryLayout,
}

/// The features directory blocks are laid out by, checked whether or not checksums are.
pub(crate) struct DirectoryLayout {
    /// INCOMPAT_FILETYPE: directory records carry a file type.
    pub filetype: bool,
    /// RO_COMPAT_METADATA_CSUM: index blocks end with a `dx_tail` (which shortens `limit`).
    pub metadata_csum: bool,
    /// Index levels an htree may have, the root included (2, or 3 with large_dir).
    pub max_index_levels: u8,
}

impl BlockVerifier {
    pub(crate) fn new(csum_seed: Option<u32>, directories: DirectoryLayout) -> Self {
        BlockVerifier {
            csum_seed,
            directories,
        }
    }

    /// The checksum seed, when checksums are verified and sealed.
    pub(crate) fn csum_seed(&self) -> Option<u32> {
        self.csum_seed
    }

    /// Verifies `buffer` for `role` unless it was verified (or written) in that role
    /// before: its checksum, and with or without checksums a directory leaf's entry chain
    /// and an index node's entries in hash order, which editors and lookups then trust.
    pub(crate) fn verify(&self, buffer: &Buffer, role: BufferRole) -> Result<()> {
        let structural = matches!(role.kind, BlockKind::DirectoryLeaf | BlockKind::HtreeNode);
        if self.csum_seed.is_none() && !structural {
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
        let dirs = &self.directories;
        let check_index = |bytes: &[u8]| -> Result<()> {
            Ok(check_index_block(
                bytes,
                dirs.metadata_csum,
                dirs.max_index_levels,
                loc,
            )?)
        };
        buffer.verify_as(role, |bytes| -> Result<()> {
            let Some(fs_seed) = self.csum_seed else {
                return match role.kind {
                    BlockKind::HtreeNode => check_index(bytes),
                    _ => check_leaf_chain(bytes, dirs.filetype, false, loc),
                };
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
                    check_leaf_chain(bytes, dirs.filetype, true, loc)?
                }
                (BlockKind::HtreeNode, Some(seed)) => {
                    DxNode::verify(bytes, seed, loc)?;
                    check_index(bytes)?
                }
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

    /// Computes the checksum of `bytes` (the contents of block `nr`) per `role`, the role
    /// they were written in.
    pub(crate) fn seal(&self, nr: u64, role: Option<BufferRole>, bytes: &mut [u8]) {
        let Some(fs_seed) = self.csum_seed else {
            return;
        };
        let Some(role) = role else {
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
                    block_nr: nr,
                };
                XattrBlockHeader::seal(bytes, seed)
            }
            _ => {}
        }
    }
}

/// Checks the entry chain of a directory block as read from the disk: every record whole
/// and at least [`MIN_REC_LEN`] long (the kernel's `ext4_check_dir_entry`), up to the
/// checksum tail when there is one. This is the structural half of a leaf's verify step,
/// run once per buffer; the directory editor then trusts it.
pub(crate) fn check_leaf_chain(
    bytes: &[u8],
    filetype: bool,
    metadata_csum: bool,
    loc: Location,
) -> Result<()> {
    let end = if metadata_csum && has_tail(bytes) {
        bytes.len() - TAIL_SIZE
    } else {
        bytes.len()
    };
    check_chain_region(&bytes[..end], bytes.len(), filetype, loc)
}

/// Checks the entry chain of `region`, part of a block of `block_size` bytes.
pub(crate) fn check_chain_region(
    region: &[u8],
    block_size: usize,
    filetype: bool,
    loc: Location,
) -> Result<()> {
    DirEntryIter::new(region, block_size, filetype, loc).check_rest(MIN_REC_LEN)?;
    Ok(())
}
