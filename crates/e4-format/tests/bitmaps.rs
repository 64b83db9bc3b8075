//! Block and inode bitmap checksums (metadata_csum) as mke2fs writes them, for 32- and
//! 64-byte group descriptors (16- and 32-bit stored checksums).

use e4_format::bitmap::{BitmapBlock, BitmapKind, BitmapSeed};
use e4_format::group_descriptor::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use e4_testkit::{make_empty_image, RawImage};

#[test]
fn bitmap_checksums_from_mke2fs() {
    for args in [
        &["-t", "ext4", "-b", "1024"][..],
        &["-t", "ext4", "-O", "^64bit", "-b", "4096"],
    ] {
        let img = make_empty_image(args, 64);
        let raw = RawImage::read(&img.path).unwrap();
        let sb = raw.superblock();
        let mut checked = 0;
        for g in 0..raw.geometry().groups() {
            let desc = raw.group_descriptor(g).unwrap();
            let verify = |kind, bitmap: &[u8]| {
                let seed = BitmapSeed::for_superblock(sb, kind).unwrap();
                BitmapBlock::of(&desc, kind, g).verify(bitmap, seed)
            };
            if desc.flags & BG_BLOCK_UNINIT == 0 {
                let bitmap = raw.block(desc.block_bitmap()).unwrap();
                verify(BitmapKind::Block, bitmap).unwrap();
                let mut damaged = bitmap.to_vec();
                damaged[0] ^= 0x80;
                assert!(verify(BitmapKind::Block, &damaged).is_err());
                checked += 1;
            }
            if desc.flags & BG_INODE_UNINIT == 0 {
                let bitmap = raw.block(desc.inode_bitmap()).unwrap();
                verify(BitmapKind::Inode, bitmap).unwrap();
                checked += 1;
            }
        }
        assert!(checked >= 2, "{args:?}: no initialized bitmaps to check");
    }
}
