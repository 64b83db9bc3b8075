//! e2fsck as the oracle for extent trees and block maps built by `ExtentTree` and
//! `BlockMapTree`: the trees are written into a real image (extent nodes sealed with the
//! inode's checksum seed), inode 12 is pointed at them with debugfs, and `e2fsck -fn` must
//! find nothing to say about the inode through passes 1-4 (including pass 1E's "could be
//! narrower/shorter"). Pass 5 is not judged: debugfs `setb` does not keep free counts.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use e4_format::checksum::inode_csum_seed;
use e4_format::extent::{Extent, ExtentNode};
use e4_format::inode::I_BLOCK_SIZE;
use e4_format::superblock::Superblock;
use e4_format::MetadataBlock;
use e4_fs::testing::BlockMapTree;
use e4_fs::testing::ExtentTree;
use e4_fs::testing::{BlockKind, MetaIo, Owner};
use e4_fs::{Error, Result, Shortage};
use e4_testkit::make_empty_image;

const BLOCK_SIZE: usize = 1024;
const INO: u32 = 12;
/// Free and initialised in a fresh 64 MiB, 1 KiB-block ext4 image (groups 2 and 7).
const NODE_REGION: std::ops::Range<u64> = 20_481..24_577;
const DATA_REGION_START: u64 = 57_603;

/// Tree blocks in the image file, allocated from `NODE_REGION`, sealed when written.
struct ImageIo {
    file: File,
    inode_seed: u32,
    next: Cell<u64>,
    free: RefCell<Vec<u64>>,
    live: RefCell<BTreeSet<u64>>,
}

impl MetaIo for ImageIo {
    fn block_size(&self) -> usize {
        BLOCK_SIZE
    }
    fn visit(
        &self,
        nr: u64,
        _kind: BlockKind,
        _owner: Owner,
        look: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut bytes = vec![0; BLOCK_SIZE];
        self.file
            .read_exact_at(&mut bytes, nr * BLOCK_SIZE as u64)
            .unwrap();
        look(&bytes)
    }
    fn write(&self, nr: u64, kind: BlockKind, _owner: Owner, bytes: &[u8]) -> Result<()> {
        let mut bytes = bytes.to_vec();
        if kind == BlockKind::ExtentNode {
            ExtentNode::seal(&mut bytes, self.inode_seed);
        }
        self.file
            .write_all_at(&bytes, nr * BLOCK_SIZE as u64)
            .unwrap();
        Ok(())
    }
    fn allocate(&self, _goal: u64, _owner: Owner) -> Result<u64> {
        let nr = match self.free.borrow_mut().pop() {
            Some(nr) => nr,
            None => {
                let nr = self.next.get();
                if !NODE_REGION.contains(&nr) {
                    return Err(Error::NoSpace(Shortage::Blocks));
                }
                self.next.set(nr + 1);
                nr
            }
        };
        self.live.borrow_mut().insert(nr);
        Ok(nr)
    }
    fn free(&self, start: u64, len: u64, _owner: Owner) -> Result<()> {
        for nr in start..start + len {
            assert!(self.live.borrow_mut().remove(&nr));
            self.free.borrow_mut().push(nr);
        }
        Ok(())
    }
}

fn image_io(image: &Path) -> ImageIo {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .unwrap();
    let mut sb = vec![0u8; 1024];
    file.read_exact_at(&mut sb, 1024).unwrap();
    let sb = Superblock::decode_checked(&sb).unwrap();
    assert!(
        sb.has_metadata_csum(),
        "mke2fs.conf should turn metadata_csum on"
    );
    ImageIo {
        file,
        inode_seed: inode_csum_seed(sb.csum_seed(), INO, 0),
        next: Cell::new(NODE_REGION.start),
        free: RefCell::new(Vec::new()),
        live: RefCell::new(BTreeSet::new()),
    }
}

fn debugfs(image: &Path, commands: &[String]) {
    let script = image.with_extension("debugfs");
    std::fs::write(&script, commands.join("\n") + "\n").unwrap();
    let out = Command::new(e4_testkit::tool("debugfs"))
        .arg("-w")
        .arg("-f")
        .arg(&script)
        .arg(image)
        .output()
        .expect("debugfs must be installed (e2fsprogs)");
    // debugfs -f carries on past a bad command and exits 0; its complaints go to stderr
    // after the version banner.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let complaints: Vec<&str> = stderr
        .lines()
        .filter(|line| !line.starts_with("debugfs "))
        .collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "debugfs: {}",
        complaints.join("\n")
    );
}

/// Points inode 12 at `i_block`, marks its blocks in use, and runs `e2fsck -fn`; returns
/// the lines passes 1-4 printed beyond their headers.
fn install_and_check(
    image: &Path,
    i_block: &[u8; I_BLOCK_SIZE],
    flags: u32,
    used_blocks: &BTreeSet<u64>,
    last_logical: u64,
) -> Vec<String> {
    let mut commands: Vec<String> = (0..15)
        .map(|i| {
            let word = u32::from_le_bytes(i_block[4 * i..4 * i + 4].try_into().unwrap());
            // debugfs names the last three words by their block-map role.
            let name = match i {
                12 => "IND".to_owned(),
                13 => "DIND".to_owned(),
                14 => "TIND".to_owned(),
                _ => i.to_string(),
            };
            format!("sif <{INO}> block[{name}] {word:#x}")
        })
        .collect();
    commands.push(format!("sif <{INO}> flags {flags:#x}"));
    commands.push(format!(
        "sif <{INO}> size {}",
        (last_logical + 1) * BLOCK_SIZE as u64
    ));
    commands.push(format!(
        "sif <{INO}> blocks {}",
        used_blocks.len() * BLOCK_SIZE / 512
    ));
    for block in used_blocks {
        commands.push(format!("setb {block}"));
    }
    debugfs(image, &commands);
    let out = Command::new(e4_testkit::tool("e2fsck"))
        .arg("-fn")
        .arg(image)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .take_while(|line| !line.starts_with("Pass 5"))
        .filter(|line| !line.starts_with("Pass ") && !line.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn run_extent_scenario(build: impl FnOnce(&mut ExtentTree)) {
    let image = make_empty_image(&["-t", "ext4", "-b", "1024"], 64);
    debugfs(&image.path, &["write /dev/null f".to_owned()]);
    let io = image_io(&image.path);
    let owner = Owner {
        ino: INO,
        generation: 0,
    };
    let mut root = [0u8; I_BLOCK_SIZE];
    ExtentTree::init_empty(&mut root);
    let mut tree = ExtentTree::new(&mut root, &io, owner);
    build(&mut tree);
    let extents = tree.extents().unwrap();
    let nodes = tree.node_blocks_change();
    assert_eq!(nodes, io.live.borrow().len() as i64);
    let mut used = io.live.borrow().clone();
    for e in &extents {
        used.extend(e.physical..e.physical + u64::from(e.len));
    }
    let last = extents
        .last()
        .map_or(0, |e| u64::from(e.logical + e.len - 1));
    let complaints = install_and_check(&image.path, &root, 0x80000, &used, last);
    assert!(
        complaints.is_empty(),
        "e2fsck -fn on a tree of {} extents in {nodes} nodes:\n{}",
        extents.len(),
        complaints.join("\n")
    );
}

/// Maps logical block `l` (one block, never mergeable with its neighbours: every physical
/// block is two apart) unless mapped.
fn put(tree: &mut ExtentTree, logical: u32, unwritten: bool) {
    if tree.find(logical).unwrap().is_none() {
        tree.insert(Extent {
            logical,
            len: 1,
            physical: DATA_REGION_START + 2 * u64::from(logical),
            unwritten,
        })
        .unwrap();
    }
}

#[test]
fn random_inserts_in_the_middle_stay_packed() {
    run_extent_scenario(|tree| {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2500 {
            let logical = rng.below(3900) as u32;
            put(tree, logical, rng.below(4) == 0);
        }
    });
}

#[test]
fn punching_a_deep_tree_leaves_a_narrow_one() {
    run_extent_scenario(|tree| {
        for logical in 0..3900 {
            put(tree, logical, false);
        }
        let mut rng = Rng(42);
        for _ in 0..120 {
            let start = rng.below(3900) as u32;
            tree.remove(start, rng.below(40) + 1).unwrap();
        }
        tree.remove(2000, u64::MAX).unwrap();
    });
}

#[test]
fn converting_unwritten_extents_merges_them() {
    run_extent_scenario(|tree| {
        // Contiguous unwritten runs of 8, then random conversions inside them.
        for run in 0..400u32 {
            tree.insert(Extent {
                logical: run * 9,
                len: 8,
                physical: DATA_REGION_START + u64::from(run) * 9,
                unwritten: true,
            })
            .unwrap();
        }
        let mut rng = Rng(7);
        for _ in 0..600 {
            let start = rng.below(3600) as u32;
            tree.mark_written(start, rng.below(12) + 1).unwrap();
        }
    });
}

#[test]
fn truncating_to_a_few_extents_returns_to_the_inode() {
    run_extent_scenario(|tree| {
        for logical in 0..2000 {
            put(tree, logical, false);
        }
        tree.remove(3, u64::MAX).unwrap();
    });
}

#[test]
fn block_map_with_holes_across_all_levels() {
    let image = make_empty_image(&["-t", "ext4", "-b", "1024"], 64);
    debugfs(&image.path, &["write /dev/null f".to_owned()]);
    let io = image_io(&image.path);
    let owner = Owner {
        ino: INO,
        generation: 0,
    };
    let mut root = [0u8; I_BLOCK_SIZE];
    let mut map = BlockMapTree::new(&mut root, &io, owner);
    let mut data = BTreeSet::new();
    let mut physical = DATA_REGION_START;
    for (logical, len) in [(0, 20), (200, 300), (65_700, 200), (70_000, 3)] {
        map.insert(logical, physical, len).unwrap();
        data.extend(physical..physical + len);
        physical += len + 1;
    }
    let runs = map.remove(100, 250).unwrap();
    for (start, len) in runs {
        for block in start..start + len {
            assert!(data.remove(&block));
        }
    }
    assert_eq!(map.node_blocks_change(), io.live.borrow().len() as i64);
    let mut used = io.live.borrow().clone();
    used.extend(&data);
    let complaints = install_and_check(&image.path, &root, 0, &used, 70_002);
    assert!(complaints.is_empty(), "{}", complaints.join("\n"));
}
