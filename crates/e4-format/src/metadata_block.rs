//! The verifier contract (DESIGN.md, "Verifier contract"; libxfs's `xfs_buf_ops`): every
//! checksummed metadata block kind has three separate steps. *Decode* (each kind's own
//! `decode`/`parse`, whose inputs differ by kind) turns bytes into a typed value and never
//! looks at the checksum, so the checker can decode what the engine would refuse. *Verify*
//! checks the stored checksum and *seal* writes it; both go through [`MetadataBlock`], so the
//! engine verifies at read and seals at write-back with one call per block kind, and e4-fsck
//! uses the same verifier.
//!
//! `verify` reads only what locating the checksum needs (a header, a tail), never the whole
//! structure, so a caller that also decodes parses the block once.
//!
//! Under the contract: [`crate::superblock::Superblock`], [`crate::extent::ExtentNode`],
//! [`crate::dir_htree::DxNode`] (root and interior index blocks),
//! [`crate::dir_entry::DirLeafBlock`], [`crate::xattr::XattrBlockHeader`] (xattr blocks),
//! [`crate::orphan_file::OrphanBlock`], [`crate::mmp::MmpBlock`], [`crate::inode::Inode`],
//! [`crate::group_descriptor::GroupDescriptor`], and the journal's
//! [`crate::journal::JournalSuperblock`], [`crate::journal::DescriptorBlock`],
//! [`crate::journal::CommitBlock`] and [`crate::journal::RevokeBlock`]. A bitmap's checksum
//! lives in its group descriptor, not in the bitmap, so bitmaps take the same two steps
//! through a [`crate::bitmap::BitmapBlock`] instead of this trait.

use crate::error::{Location, Result};

/// A block kind with a checksum of its own (metadata_csum).
pub trait MetadataBlock {
    /// What the checksum is seeded with besides the block's bytes.
    type Seed: Copy;

    /// Checks the checksum stored in `block` against its contents. A block too damaged to
    /// locate its checksum is [`crate::FormatError::Corrupt`]; a mismatch is
    /// [`crate::FormatError::Checksum`].
    fn verify(block: &[u8], seed: Self::Seed, loc: Location) -> Result<()>;

    /// Writes the checksum of `block` into it. A block whose checksum cannot be located is
    /// left as it is: e4 did not build it, and `verify` names it when it is read back.
    fn seal(block: &mut [u8], seed: Self::Seed);
}

/// The seed of a block whose checksum covers its own block number (xattr blocks, orphan
/// file blocks): a block copied elsewhere does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSeed {
    /// The filesystem's seed (xattr blocks) or the owning inode's (orphan file blocks).
    pub seed: u32,
    /// Where the block lives.
    pub block_nr: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dir_entry::{encode_entry, file_type, init_leaf_tail, DirEntryIter, DirLeafBlock};
    use crate::dir_htree::{DxEntry, DxNode, DxRoot, MAX_LEVELS};
    use crate::extent::{ExtentEntries, ExtentHeader, ExtentLeaf, ExtentNode, EXTENT_MAGIC};
    use crate::features::RoCompatFeatures;
    use crate::group_descriptor::{GroupChecksum, GroupDescriptor, GroupSeed};
    use crate::inode::{Inode, InodeSeed};
    use crate::journal::{
        CommitBlock, DescriptorBlock, JournalFeatures, JournalSuperblock, RevokeBlock,
        JOURNAL_MAGIC,
    };
    use crate::orphan_file::{OrphanBlock, ORPHAN_BLOCK_MAGIC};
    use crate::superblock::{test_superblock, Superblock};
    use crate::xattr::{decode_xattr_block, encode_xattr_block, XattrBlockHeader, XattrEntry};
    use crate::{FormatError, Structure};

    const BS: usize = 1024;
    const LOC: Location = Location::Block(40);

    /// The contract for block kind `B` on `block`, an unsealed block of that kind: sealing
    /// makes it verify; flipping the byte at `covered` (one the checksum covers but decoding
    /// does not reject) makes verify report a checksum mismatch naming `structure` and the
    /// location, and `decode` still decodes it; the same block under another seed (for kinds
    /// with one) does not verify.
    fn check_contract<B: MetadataBlock>(
        mut block: Vec<u8>,
        structure: Structure,
        seed: B::Seed,
        other_seed: Option<B::Seed>,
        covered: usize,
        decode: impl Fn(&[u8]) -> Result<()>,
    ) {
        let mismatch = |r: Result<()>| {
            matches!(r, Err(FormatError::Checksum { structure: s, location, .. })
                if s == structure && location == LOC)
        };
        B::seal(&mut block, seed);
        B::verify(&block, seed, LOC).unwrap();
        decode(&block).unwrap();
        if let Some(other_seed) = other_seed {
            assert!(mismatch(B::verify(&block, other_seed, LOC)));
        }
        let mut flipped = block.clone();
        flipped[covered] ^= 0x40;
        let got = B::verify(&flipped, seed, LOC);
        assert!(mismatch(got.clone()), "{got:?}");
        // The sentence names the structure and where it is.
        let message = got.unwrap_err().to_string();
        assert!(
            message.starts_with(&format!("{structure} {LOC} has an invalid checksum")),
            "{message}"
        );
        decode(&flipped).unwrap();
        // Sealing again repairs exactly what the flip broke.
        B::seal(&mut flipped, seed);
        B::verify(&flipped, seed, LOC).unwrap();
    }

    #[test]
    fn extent_node() {
        let node = ExtentNode {
            header: ExtentHeader {
                magic: EXTENT_MAGIC,
                entries: 1,
                max: 84,
                depth: 0,
                generation: 0,
            },
            entries: ExtentEntries::Leaf(vec![ExtentLeaf {
                block: 0,
                len: 3,
                start_hi: 0,
                start_lo: 700,
            }]),
        };
        let mut block = vec![0u8; BS];
        node.encode_into(&mut block);
        // Byte 100 is an unused entry slot: covered by the checksum, ignored by decoding.
        check_contract::<ExtentNode>(block, Structure::ExtentNode, 11, Some(12), 100, |b| {
            ExtentNode::parse(b, LOC).map(drop)
        });
    }

    #[test]
    fn htree_root() {
        let mut block = vec![0u8; BS];
        encode_entry(&mut block, 2, 12, file_type::DIRECTORY, b".");
        encode_entry(&mut block[12..], 2, BS - 12, file_type::DIRECTORY, b"..");
        DxRoot::new(BS, true, 1, 1).encode_into(&mut block);
        // Byte 0x24 is the first entry's block pointer.
        check_contract::<DxNode>(block, Structure::HtreeRoot, 11, Some(12), 0x24, |b| {
            DxRoot::parse(b, true, MAX_LEVELS, LOC).map(drop)
        });
    }

    #[test]
    fn htree_interior_node() {
        let entries = vec![
            DxEntry { hash: 0, block: 1 },
            DxEntry {
                hash: 0x500,
                block: 2,
            },
        ];
        let block = DxNode::new_interior(BS, true, entries).encode_interior(BS);
        // Byte 12 is the first entry's block pointer.
        check_contract::<DxNode>(block, Structure::HtreeNode, 11, Some(12), 12, |b| {
            DxNode::parse(b, true, LOC).map(drop)
        });
    }

    #[test]
    fn directory_leaf() {
        let mut block = vec![0u8; BS];
        encode_entry(&mut block, 2, 12, file_type::DIRECTORY, b".");
        encode_entry(&mut block[12..], 2, 12, file_type::DIRECTORY, b"..");
        encode_entry(
            &mut block[24..],
            13,
            BS - 24 - 12,
            file_type::REGULAR,
            b"name",
        );
        init_leaf_tail(&mut block);
        // Byte 32 is the first byte of "name".
        check_contract::<DirLeafBlock>(block, Structure::DirectoryBlock, 11, Some(12), 32, |b| {
            DirEntryIter::new(&b[..BS - 12], BS, true, LOC).try_for_each(|e| e.map(drop))
        });
    }

    #[test]
    fn xattr_block() {
        let entries = [XattrEntry {
            index: 1,
            name: b"color".to_vec(),
            value: b"blue".to_vec(),
        }];
        let block = encode_xattr_block(&entries, 1, BS).unwrap();
        let seed = |block_nr| BlockSeed { seed: 9, block_nr };
        // The value sits at the end of the block.
        check_contract::<XattrBlockHeader>(
            block,
            Structure::XattrBlock,
            seed(40),
            Some(seed(41)),
            BS - 4,
            |b| decode_xattr_block(b, LOC).map(drop),
        );
    }

    #[test]
    fn orphan_block() {
        let mut block = vec![0u8; BS];
        block[BS - 8..BS - 4].copy_from_slice(&ORPHAN_BLOCK_MAGIC.to_le_bytes());
        block[..4].copy_from_slice(&12u32.to_le_bytes());
        let seed = |block_nr| BlockSeed { seed: 9, block_nr };
        check_contract::<OrphanBlock>(
            block,
            Structure::OrphanBlock,
            seed(40),
            Some(seed(41)),
            1,
            |b| OrphanBlock::decode(b, LOC).map(drop),
        );
    }

    #[test]
    fn mmp_block() {
        use crate::mmp::{MmpBlock, MMP_MAGIC};
        let mut block = vec![0u8; BS];
        block[..4].copy_from_slice(&MMP_MAGIC.to_le_bytes());
        // Byte 0x10 is the first byte of mmp_nodename: any name decodes.
        check_contract::<MmpBlock>(block, Structure::MmpBlock, 11, Some(12), 0x10, |b| {
            MmpBlock::decode_checked(b, LOC).map(drop)
        });
    }

    #[test]
    fn inode_record() {
        // A 256-byte record with i_checksum_hi (extra size 32), and a 128-byte one without.
        for (size, extra) in [(256usize, 32u16), (128, 0)] {
            let mut record = vec![0u8; size];
            record[..2].copy_from_slice(&0o100644u16.to_le_bytes());
            if size > 128 {
                record[0x80..0x82].copy_from_slice(&extra.to_le_bytes());
            }
            let seed = |ino| InodeSeed { fs_seed: 9, ino };
            // Byte 0x30 lies in i_block, which decoding takes as it is.
            check_contract::<Inode>(
                record,
                Structure::Inode,
                seed(12),
                Some(seed(13)),
                0x30,
                |b| Inode::decode(b, 12).map(drop),
            );
        }
    }

    #[test]
    fn group_descriptor() {
        let mut raw = [0u8; 64];
        raw[8..12].copy_from_slice(&300u32.to_le_bytes());
        let desc = GroupDescriptor::from_bytes(&raw, 5).unwrap();
        for checksum in [
            GroupChecksum::Crc32c { seed: 9 },
            GroupChecksum::Crc16 { uuid: [7; 16] },
        ] {
            for size in [32, 64] {
                let bytes = desc.to_bytes(5, size, &GroupChecksum::None);
                let seed = |group| GroupSeed { checksum, group };
                // Byte 0x0C is bg_free_blocks_count_lo: any value decodes.
                check_contract::<GroupDescriptor>(
                    bytes,
                    Structure::GroupDescriptor,
                    seed(5),
                    Some(seed(6)),
                    0x0C,
                    |b| GroupDescriptor::from_bytes(b, 5).map(drop),
                );
            }
        }
    }

    #[test]
    fn superblock() {
        let sb = test_superblock(RoCompatFeatures::METADATA_CSUM);
        let mut raw = [0u8; 1024];
        sb.encode(&mut raw);
        // Byte 0x78 is s_volume_name: any label decodes.
        check_contract::<Superblock>(raw.to_vec(), Structure::Superblock, (), None, 0x78, |b| {
            Superblock::decode_checked(b).map(drop)
        });
    }

    /// A journal block of `blocktype` for transaction 7, its header filled in.
    fn journal_block(blocktype: u32) -> Vec<u8> {
        let mut block = vec![0u8; BS];
        block[..4].copy_from_slice(&JOURNAL_MAGIC.to_be_bytes());
        block[4..8].copy_from_slice(&blocktype.to_be_bytes());
        block[8..12].copy_from_slice(&7u32.to_be_bytes());
        block
    }

    /// Journal features with checksums v3 and 64-bit block numbers, as mke2fs makes them.
    const CSUM_V3: JournalFeatures = JournalFeatures {
        revoke: true,
        bit64: true,
        async_commit: false,
        csum_v2: false,
        csum_v3: true,
        fast_commit: false,
    };

    #[test]
    fn journal_superblock() {
        let mut block = journal_block(4);
        block[0x0C..0x10].copy_from_slice(&1024u32.to_be_bytes());
        block[0x10..0x14].copy_from_slice(&1024u32.to_be_bytes());
        block[0x14..0x18].copy_from_slice(&1u32.to_be_bytes());
        // INCOMPAT_CSUM_V3 and s_checksum_type crc32c.
        block[0x28..0x2C].copy_from_slice(&0x10u32.to_be_bytes());
        block[0x50] = 4;
        // Byte 0x30 is s_uuid.
        check_contract::<JournalSuperblock>(
            block.clone(),
            Structure::JournalSuperblock,
            (),
            None,
            0x30,
            |b| JournalSuperblock::decode_checked(b).map(drop),
        );
        // A v1 superblock has no checksum, whatever its feature words say.
        block[4..8].copy_from_slice(&3u32.to_be_bytes());
        block[0xFC] ^= 1;
        JournalSuperblock::verify(&block, (), LOC).unwrap();
    }

    #[test]
    fn journal_descriptor() {
        let mut block = journal_block(1);
        // One v3 tag: block 300, LAST_TAG, followed by its UUID.
        block[12..16].copy_from_slice(&300u32.to_be_bytes());
        block[16..20].copy_from_slice(&8u32.to_be_bytes());
        // Byte 30 lies in the tag's UUID, which decoding skips.
        check_contract::<DescriptorBlock>(
            block,
            Structure::JournalDescriptor,
            11,
            Some(12),
            30,
            |b| {
                let tags = DescriptorBlock::decode(b, &CSUM_V3, LOC)?;
                assert_eq!(tags.len(), 1);
                assert_eq!(tags[0].block, 300);
                Ok(())
            },
        );
    }

    #[test]
    fn journal_commit() {
        let block = journal_block(2);
        // Byte 0x37 is the low byte of h_commit_sec.
        check_contract::<CommitBlock>(block, Structure::JournalCommit, 11, Some(12), 0x37, |b| {
            CommitBlock::decode_checked(b, LOC).map(drop)
        });
    }

    #[test]
    fn journal_revoke() {
        let mut block = journal_block(5);
        // r_count: the header and one 64-bit record, block 0x1234.
        block[12..16].copy_from_slice(&24u32.to_be_bytes());
        block[16..24].copy_from_slice(&0x1234u64.to_be_bytes());
        // Byte 23 is the record's low byte: any block can be revoked.
        check_contract::<RevokeBlock>(block, Structure::JournalRevoke, 11, Some(12), 23, |b| {
            RevokeBlock::decode(b, &CSUM_V3, LOC).map(drop)
        });
    }

    #[test]
    fn a_block_too_damaged_to_find_its_checksum_is_corrupt_not_a_mismatch() {
        let block = vec![0u8; BS];
        let corrupt = |r: Result<()>| matches!(r, Err(FormatError::Corrupt { .. }));
        assert!(corrupt(ExtentNode::verify(&block, 1, LOC)));
        assert!(corrupt(DirLeafBlock::verify(&block, 1, LOC)));
        let seed = BlockSeed {
            seed: 1,
            block_nr: 40,
        };
        assert!(corrupt(XattrBlockHeader::verify(&block, seed, LOC)));
        assert!(corrupt(OrphanBlock::verify(&block, seed, LOC)));
        let mut short_root = vec![0u8; BS];
        short_root[0x20..0x22].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(corrupt(DxNode::verify(&short_root, 1, LOC)));
        let header_only = journal_block(1);
        assert!(corrupt(Superblock::verify(&block[..100], (), LOC)));
        assert!(corrupt(JournalSuperblock::verify(
            &header_only[..100],
            (),
            LOC
        )));
        assert!(corrupt(DescriptorBlock::verify(&header_only[..15], 1, LOC)));
        assert!(corrupt(RevokeBlock::verify(&header_only[..15], 1, LOC)));
        assert!(corrupt(CommitBlock::verify(&header_only[..0x3B], 1, LOC)));
    }
}
