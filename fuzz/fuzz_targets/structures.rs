//! Every e4-format parser on arbitrary bytes: it may return an error, never panic. Whatever
//! parses must serialize back to the bytes it came from (for structures with a round trip).
#![no_main]

use e4_format::dir_entry::DirEntryIter;
use e4_format::dir_htree::{DxNode, DxRoot};
use e4_format::extent::ExtentNode;
use e4_format::group_descriptor::{GroupChecksum, GroupDescriptor};
use e4_format::inode::Inode;
use e4_format::journal::{parse_descriptor_block, parse_revoke_block, CommitBlock, JournalSuperblock};
use e4_format::superblock::Superblock;
use e4_format::xattr::{parse_inode_xattrs, parse_xattr_block};
use e4_format::Location;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let loc = Location::Block(1);
    if let Ok(sb) = Superblock::parse(data) {
        let again = Superblock::parse(&sb.to_bytes()).unwrap();
        assert_eq!(again, sb);
    }
    for csum in [GroupChecksum::None, GroupChecksum::Crc32c { seed: 1 }] {
        let size = data.len().min(64);
        if let Ok(d) = GroupDescriptor::parse(&data[..size], 3, &csum) {
            assert_eq!(GroupDescriptor::parse(&d.to_bytes(3, size, &csum), 3, &csum).unwrap(), d);
        }
    }
    if data.len() >= 128 {
        let size = if data.len() >= 256 { 256 } else { 128 };
        if let Ok(inode) = Inode::parse(&data[..size], 12, None) {
            assert_eq!(inode.to_bytes(None), &data[..size]);
            let _ = (inode.mtime(), inode.crtime(), inode.device_number(), inode.size());
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
    let _ = parse_xattr_block(data, 9, Some(5), loc);
    if let Ok(jsb) = JournalSuperblock::parse(data) {
        let f = jsb.features();
        let _ = parse_descriptor_block(data, &f, 0, loc);
        let _ = parse_revoke_block(data, &f, 0, loc);
    }
    let _ = CommitBlock::parse(data, Some(1), loc);
});
