//! Every e4-format parser on arbitrary bytes: it may return an error, never panic. Whatever
//! parses must serialize back to the bytes it came from (for structures with a round trip),
//! and every block kind's verifier and sealer take any bytes: a sealed block never fails
//! its checksum (it verifies, or is corrupt in some other way).
#![no_main]

use e4_format::bitmap::{BitmapBlock, BitmapKind, BitmapSeed};
use e4_format::dir_entry::{DirEntryIter, DirLeafBlock};
use e4_format::dir_htree::{DxNode, DxRoot};
use e4_format::extent::ExtentNode;
use e4_format::group_descriptor::{GroupChecksum, GroupDescriptor, GroupSeed};
use e4_format::inode::{Inode, InodeSeed};
use e4_format::journal::{CommitBlock, DescriptorBlock, JournalSuperblock, RevokeBlock};
use e4_format::mmp::MmpBlock;
use e4_format::orphan_file::OrphanBlock;
use e4_format::quota::{data_block_entries, tree_references, QuotaEntry, QuotaHeader};
use e4_format::superblock::Superblock;
use e4_format::xattr::{
    decode_xattr_block, parse_inode_xattrs, xattr_entry_hash_matches, XattrBlockHeader, XattrValue,
};
use e4_format::{BlockSeed, FormatError, Location, MetadataBlock};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let loc = Location::Block(1);
    if let Ok(sb) = Superblock::decode_checked(data) {
        let mut bytes = [0u8; Superblock::SIZE];
        sb.encode(&mut bytes);
        assert_eq!(Superblock::decode_checked(&bytes).unwrap(), sb);
    }
    for csum in [GroupChecksum::None, GroupChecksum::Crc32c { seed: 1 }] {
        let size = data.len().min(64);
        if let Ok(d) = GroupDescriptor::parse(&data[..size], 3, &csum) {
            assert_eq!(
                GroupDescriptor::parse(&d.to_bytes(3, size, &csum), 3, &csum).unwrap(),
                d
            );
        }
    }
    if data.len() >= 128 {
        let size = if data.len() >= 256 { 256 } else { 128 };
        if let Ok(inode) = Inode::parse(&data[..size], 12, None) {
            assert_eq!(inode.to_bytes(None), &data[..size]);
            let _ = (
                inode.mtime(),
                inode.crtime(),
                inode.device_number(),
                inode.size(),
            );
            let _ = parse_inode_xattrs(&inode.xattr_area, loc);
        }
    }
    let _ = ExtentNode::parse(data, loc);
    for entry in DirEntryIter::new(data, 4096, true, loc) {
        if entry.is_err() {
            break;
        }
    }
    let _ = DxRoot::parse(data, true, 3, loc);
    let _ = DxNode::parse(data, false, loc);
    // Every decoded entry's hash can be checked, whatever its name and value.
    if let Ok((_, xattrs)) = decode_xattr_block(data, loc) {
        for x in xattrs {
            if let XattrValue::Inline(value) = &x.value {
                let _ = xattr_entry_hash_matches(x.hash, x.stored_name(), value);
            }
        }
    }
    // The MMP block: whatever decodes has a state and round-trips (its padding is not a
    // field, so the round trip is through the fields).
    if let Ok(mmp) = MmpBlock::decode_checked(data, loc) {
        let _ = mmp.state();
        let mut encoded = [0u8; MmpBlock::SIZE];
        mmp.encode(&mut encoded);
        assert_eq!(MmpBlock::decode(&encoded), mmp);
    }
    // Quota files: the header of each type, tree references and data entries.
    for quota_type in 0..4 {
        let _ = QuotaHeader::decode_checked(data, quota_type, loc);
    }
    let _ = tree_references(data).count();
    for entry in data_block_entries(data) {
        let mut bytes = [0u8; QuotaEntry::SIZE];
        entry.encode(&mut bytes);
        assert_eq!(QuotaEntry::decode(&bytes), entry);
    }
    let _ = OrphanBlock::decode(data, loc);
    let seed = BlockSeed {
        seed: 5,
        block_nr: 9,
    };
    verify_and_seal::<ExtentNode>(data, 7, loc);
    verify_and_seal::<DxNode>(data, 7, loc);
    verify_and_seal::<DirLeafBlock>(data, 7, loc);
    verify_and_seal::<XattrBlockHeader>(data, seed, loc);
    verify_and_seal::<OrphanBlock>(data, seed, loc);
    verify_and_seal::<MmpBlock>(data, 7, loc);
    verify_and_seal::<Inode>(
        data,
        InodeSeed {
            fs_seed: 5,
            ino: 12,
        },
        loc,
    );
    let checksum = GroupChecksum::Crc16 { uuid: [3; 16] };
    verify_and_seal::<GroupDescriptor>(
        &data[..data.len().min(64)],
        GroupSeed { checksum, group: 3 },
        loc,
    );
    verify_and_seal::<Superblock>(data, (), loc);
    verify_and_seal::<JournalSuperblock>(data, (), loc);
    verify_and_seal::<DescriptorBlock>(data, 7, loc);
    verify_and_seal::<CommitBlock>(data, 7, loc);
    verify_and_seal::<RevokeBlock>(data, 7, loc);
    if let Ok(jsb) = JournalSuperblock::decode_checked(data) {
        let f = jsb.features();
        let _ = DescriptorBlock::decode(data, &f, loc);
        let _ = RevokeBlock::decode(data, &f, loc);
    }
    let _ = CommitBlock::decode_checked(data, loc);
    // A bitmap sealed over any bytes verifies; one that is too short is corrupt.
    let bitmap_seed = BitmapSeed {
        fs_seed: 5,
        covered: 512,
        has_hi: data.len() % 2 == 0,
    };
    let mut bitmap = BitmapBlock {
        kind: BitmapKind::Inode,
        group: 3,
        stored: 0,
    };
    bitmap.seal(data, bitmap_seed);
    assert!(!matches!(
        bitmap.verify(data, bitmap_seed),
        Err(FormatError::Checksum { .. })
    ));
});

/// Verifies `data` as block kind `B`, then seals a copy and verifies that: whatever else is
/// wrong with it, its checksum must match.
fn verify_and_seal<B: MetadataBlock>(data: &[u8], seed: B::Seed, loc: Location) {
    let _ = B::verify(data, seed, loc);
    let mut sealed = data.to_vec();
    B::seal(&mut sealed, seed);
    assert!(!matches!(
        B::verify(&sealed, seed, loc),
        Err(FormatError::Checksum { .. })
    ));
}
