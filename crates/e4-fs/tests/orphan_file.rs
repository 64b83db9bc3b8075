//! Orphan-file blocks as mke2fs writes them: every block carries the tail magic and a
//! checksum seeded by the orphan inode, and holds no orphans on a fresh filesystem.

use e4_format::checksum::inode_csum_seed;
use e4_format::orphan_file::OrphanBlock;
use e4_format::Location;
use e4_format::{BlockSeed, MetadataBlock};
use e4_fs::{Filesystem, Mapping, OpenOptions};
use e4_testkit::make_empty_image;

#[test]
fn orphan_file_blocks_from_mke2fs() {
    let img = make_empty_image(&["-t", "ext4", "-b", "4096", "-O", "orphan_file"], 64);
    let image = img.path.clone();
    let fs = Filesystem::open(&image, OpenOptions::default()).unwrap();
    let sb = fs.superblock();
    let ino = sb.orphan_file_inum;
    assert_ne!(ino, 0, "mke2fs made no orphan file");
    let inode = fs.read_inode(ino).unwrap();
    let seed = inode_csum_seed(sb.csum_seed(), ino, inode.record.generation);
    let blocks = inode.size() / u64::from(fs.block_size());
    assert!(blocks > 0);
    let bytes = std::fs::read(&image).unwrap();
    let bs = fs.block_size() as usize;
    for logical in 0..blocks {
        let Mapping::Data { physical, .. } = fs.map_block(&inode, logical, 1).unwrap() else {
            panic!("orphan file has a hole at {logical}");
        };
        let block = &bytes[physical as usize * bs..(physical as usize + 1) * bs];
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
