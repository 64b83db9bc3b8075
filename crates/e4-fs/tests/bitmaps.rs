//! Block and inode bitmap checksums (metadata_csum) as mke2fs writes them, for 32- and
//! 64-byte group descriptors (16- and 32-bit stored checksums).

use e4_format::bitmap::{BitmapBlock, BitmapKind, BitmapSeed};
use e4_format::group_descriptor::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use e4_fs::{Filesystem, OpenOptions};
use e4_testkit::make_empty_image;

#[test]
fn bitmap_checksums_from_mke2fs() {
    for args in [
        &["-t", "ext4", "-b", "1024"][..],
        &["-t", "ext4", "-O", "^64bit", "-b", "4096"],
    ] {
        let img = make_empty_image(args, 64);
        let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
        let sb = fs.superblock();
        let bytes = std::fs::read(&img.path).unwrap();
        let bs = fs.block_size() as usize;
        let block = |nr: u64| &bytes[nr as usize * bs..(nr as usize + 1) * bs];
        let mut checked = 0;
        for (g, desc) in fs.group_descriptors().iter().enumerate() {
            let verify = |kind, bitmap: &[u8]| {
                let seed = BitmapSeed::for_superblock(sb, kind).unwrap();
                BitmapBlock::of(desc, kind, g as u32).verify(bitmap, seed)
            };
            if desc.flags & BG_BLOCK_UNINIT == 0 {
                let bitmap = block(desc.block_bitmap());
                verify(BitmapKind::Block, bitmap).unwrap();
                let mut damaged = bitmap.to_vec();
                damaged[0] ^= 0x80;
                assert!(verify(BitmapKind::Block, &damaged).is_err());
                checked += 1;
            }
            if desc.flags & BG_INODE_UNINIT == 0 {
                verify(BitmapKind::Inode, block(desc.inode_bitmap())).unwrap();
                checked += 1;
            }
        }
        assert!(checked >= 2, "{args:?}: no initialized bitmaps to check");
    }
}
