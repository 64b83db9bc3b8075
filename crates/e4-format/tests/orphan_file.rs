//! Orphan-file blocks as mke2fs writes them: every block carries the tail magic and a
//! checksum seeded by the orphan inode, and holds no orphans on a fresh filesystem.

use e4_format::checksum::inode_csum_seed;
use e4_format::orphan_file::OrphanBlock;
use e4_format::Location;
use e4_format::{BlockSeed, MetadataBlock};
use e4_testkit::{make_empty_image, RawImage};

#[test]
fn orphan_file_blocks_from_mke2fs() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096", "-O", "orphan_file"], 64);
    let raw = RawImage::read(&img.path).unwrap();
    let sb = raw.superblock();
    let ino = sb.orphan_file_inum;
    assert_ne!(ino, 0, "mke2fs made no orphan file");
    let inode = raw.inode(ino).unwrap();
    let seed = inode_csum_seed(sb.csum_seed(), ino, inode.record.generation);
    let blocks = inode.size() / raw.block_size() as u64;
    assert!(blocks > 0);
    for logical in 0..blocks {
        let Some(physical) = raw.file_block(ino, logical).unwrap() else {
            panic!("orphan file has a hole at {logical}");
        };
        let block = raw.block(physical).unwrap();
        let loc = Location::InodeBlock {
            inode: ino,
            block: physical,
        };
        let seed_at = |block_nr| BlockSeed { seed, block_nr };
        OrphanBlock::verify(block, seed_at(physical), loc).unwrap();
        assert_eq!(OrphanBlock::decode(block, loc).unwrap(), Vec::<u32>::new());
        assert!(OrphanBlock::verify(block, seed_at(physical + 1), loc).is_err());
    }
}
