//! The layout of an xattr block, walked as e2fsck's `check_ext_attr` walks it under `-n`:
//! the header's magic (`PR_1_BAD_EA_BLOCK`) and `h_blocks` (`PR_1_EA_MULTI_BLOCK`), then
//! each entry record with its name, taken from the block with e2fsck's region allocator
//! (`PR_1_EA_ALLOC_COLLISION`), its name index (`PR_1_EA_BAD_NAME`), and its value, which
//! must end inside the block (`PR_1_EA_BAD_VALUE`) and overlap nothing taken before; then
//! the four zero bytes that end the list. A collision of a record, a bad name or a bad
//! value ends the walk there (e2fsck's `break`); a colliding value does not, and its
//! entry's hash is still checked. Every problem is declined, so e2fsck goes on to use
//! the block whatever it found: its refcount, its block and its entries' hashes count.

use e4_format::codec::{le32, prefix};
use e4_format::xattr::{
    entry_len, value_len, Xattr, XattrBlockHeader, XattrEntryRecord, XattrValue, XATTR_MAGIC,
    XATTR_MAGIC_V1,
};

use crate::report::problem::ProblemCode;
use crate::xattr::entries::xattr_of;
use crate::xattr::region::Regions;

/// What is wrong with an xattr block's layout; offsets are bytes into the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockProblem {
    /// `h_magic` is not the one e2fsck expects (it reads version 2 blocks).
    BadMagic(u32),
    /// `h_blocks` is not 1.
    MultiBlock(u32),
    /// The piece at this offset overlaps one taken before, or passes the block's end.
    Collision(usize),
    /// The entry at this offset has name index 0.
    BadName(usize),
    /// The value of the entry at this offset ends past the block.
    BadValue(usize),
}

impl BlockProblem {
    /// e2fsck's code for it.
    pub fn code(self) -> ProblemCode {
        match self {
            BlockProblem::BadMagic(_) => ProblemCode::PR_1_BAD_EA_BLOCK,
            BlockProblem::MultiBlock(_) => ProblemCode::PR_1_EA_MULTI_BLOCK,
            BlockProblem::Collision(_) => ProblemCode::PR_1_EA_ALLOC_COLLISION,
            BlockProblem::BadName(_) => ProblemCode::PR_1_EA_BAD_NAME,
            BlockProblem::BadValue(_) => ProblemCode::PR_1_EA_BAD_VALUE,
        }
    }

    /// e2fsck's message for block `block` of inode `ino`, with the offset where the walk
    /// found it (so two collisions in one block stay two reports, as e2fsck prints them).
    pub fn describe(self, ino: u32, block: u64) -> String {
        match self {
            BlockProblem::BadMagic(magic) => {
                format!("inode {ino} has a bad extended attribute block {block} (magic {magic:#x})")
            }
            BlockProblem::MultiBlock(n) => {
                format!("extended attribute block {block} has h_blocks > 1 ({n})")
            }
            BlockProblem::Collision(at) => format!(
                "extended attribute block {block} is corrupt (allocation collision at byte {at})"
            ),
            BlockProblem::BadName(at) => format!(
                "extended attribute block {block} is corrupt (invalid name at byte {at})"
            ),
            BlockProblem::BadValue(at) => format!(
                "extended attribute block {block} is corrupt (invalid value of the entry at byte {at})"
            ),
        }
    }
}

/// What the walk of one xattr block found.
#[derive(Debug)]
pub struct BlockLayout {
    /// The header, as stored.
    pub header: XattrBlockHeader,
    /// Whether libext2fs's `ext2fs_read_ext_attr3` accepts the header (either magic,
    /// `h_blocks` 1): only then does it look at the checksum, and only then can e2fsck
    /// read the block again to fix its refcount.
    pub header_readable: bool,
    /// The entries the walk passed, in order, for their hashes and value inodes.
    pub xattrs: Vec<Xattr>,
    /// What it found wrong, in e2fsck's order.
    pub problems: Vec<BlockProblem>,
}

/// Walks `block`, a whole xattr block (at least the 32 bytes of its header; a block is
/// never smaller than 1 KiB).
pub fn walk(block: &[u8]) -> BlockLayout {
    let mut problems = Vec::new();
    let mut xattrs = Vec::new();
    let header = XattrBlockHeader::decode(prefix(block).unwrap_or(&[0u8; XattrBlockHeader::SIZE]));
    if header.magic != XATTR_MAGIC {
        problems.push(BlockProblem::BadMagic(header.magic));
    }
    if header.blocks != 1 {
        problems.push(BlockProblem::MultiBlock(header.blocks));
    }
    let header_readable =
        matches!(header.magic, XATTR_MAGIC | XATTR_MAGIC_V1) && header.blocks == 1;
    let len = block.len();
    let mut regions = Regions::new(len);
    // The header: nothing is taken before it.
    regions.allocate(0, XattrBlockHeader::SIZE);
    let mut at = XattrBlockHeader::SIZE;
    while at < len && le32(block, at).is_some_and(|word| word != 0) {
        let name_len = usize::from(block[at]);
        if !regions.allocate(at, entry_len(name_len)) {
            problems.push(BlockProblem::Collision(at));
            break;
        }
        // OK to unwrap: the record and its name were just taken inside the block.
        let record = XattrEntryRecord::decode(prefix(&block[at..]).unwrap());
        if record.name_index == 0 {
            problems.push(BlockProblem::BadName(at));
            break;
        }
        let name_start = at + XattrEntryRecord::SIZE;
        let stored_name = &block[name_start..name_start + name_len];
        let value = if record.value_inum != 0 {
            XattrValue::InInode {
                inode: record.value_inum,
                size: record.value_size,
            }
        } else {
            let start = usize::from(record.value_offs);
            // e2fsck adds these in 32 bits; a sum that wraps there needs a size within
            // 64 KiB of 4 GiB, which no bit flip of a sound entry makes.
            let end = start as u64 + u64::from(record.value_size);
            if end > len as u64 {
                problems.push(BlockProblem::BadValue(at));
                break;
            }
            let size = record.value_size as usize;
            if size != 0 && !regions.allocate(start, value_len(size)) {
                problems.push(BlockProblem::Collision(start));
            }
            XattrValue::Inline(block[start..start + size].to_vec())
        };
        xattrs.push(xattr_of(&record, stored_name, value));
        at += entry_len(name_len);
    }
    // The four zero bytes that end the list, or the entry the walk stopped at.
    if !regions.allocate(at, 4) {
        problems.push(BlockProblem::Collision(at));
    }
    BlockLayout {
        header,
        header_readable,
        xattrs,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use e4_format::xattr::{encode_xattr_block, XattrEntry};

    /// A 1 KiB block with `user.a` = "hello" (the entry at 32) and `user.bb` = "xyz"
    /// (at 52).
    fn block() -> Vec<u8> {
        let user = |name: &str, value: &[u8]| XattrEntry {
            index: 1,
            name: name.as_bytes().to_vec(),
            value: value.to_vec(),
        };
        encode_xattr_block(&[user("a", b"hello"), user("bb", b"xyz")], 1, 1024).unwrap()
    }

    fn value_offs(block: &[u8], entry: usize) -> u16 {
        u16::from_le_bytes([block[entry + 2], block[entry + 3]])
    }

    fn set_u32(block: &mut [u8], at: usize, value: u32) {
        block[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    #[test]
    fn a_sound_block_walks_to_its_end() {
        let layout = walk(&block());
        assert_eq!(layout.problems, []);
        assert!(layout.header_readable);
        let names: Vec<_> = layout.xattrs.iter().map(|x| x.name.clone()).collect();
        assert_eq!(names, [b"user.a".to_vec(), b"user.bb".to_vec()]);
        assert_eq!(
            layout.xattrs[0].value,
            XattrValue::Inline(b"hello".to_vec())
        );
    }

    /// The header's problems do not stop the walk; libext2fs reads the first version's
    /// magic, not `h_blocks` other than 1.
    #[test]
    fn header_problems() {
        let mut bad = block();
        set_u32(&mut bad, 0, 0x1234_5678);
        let layout = walk(&bad);
        assert_eq!(layout.problems, [BlockProblem::BadMagic(0x1234_5678)]);
        assert!(!layout.header_readable);
        assert_eq!(layout.xattrs.len(), 2);
        set_u32(&mut bad, 0, XATTR_MAGIC_V1);
        assert!(walk(&bad).header_readable);
        let mut multi = block();
        set_u32(&mut multi, 8, 2);
        let layout = walk(&multi);
        assert_eq!(layout.problems, [BlockProblem::MultiBlock(2)]);
        assert!(!layout.header_readable);
    }

    /// A bad name or value ends the walk at its entry, whose record then collides with
    /// the four bytes e2fsck takes there.
    #[test]
    fn name_and_value_problems_end_the_walk() {
        let mut name = block();
        name[52 + 1] = 0;
        let layout = walk(&name);
        assert_eq!(
            layout.problems,
            [BlockProblem::BadName(52), BlockProblem::Collision(52)]
        );
        assert_eq!(layout.xattrs.len(), 1);
        let mut value = block();
        value[32 + 2..32 + 4].copy_from_slice(&1020u16.to_le_bytes());
        let layout = walk(&value);
        assert_eq!(
            layout.problems,
            [BlockProblem::BadValue(32), BlockProblem::Collision(32)]
        );
        assert!(layout.xattrs.is_empty());
    }

    /// A value moved onto another collides, and the walk goes on to the next entry.
    #[test]
    fn overlapping_values_do_not_end_the_walk() {
        let mut moved = block();
        let first = value_offs(&moved, 32);
        moved[52 + 2..52 + 4].copy_from_slice(&first.to_le_bytes());
        let layout = walk(&moved);
        assert_eq!(
            layout.problems,
            [BlockProblem::Collision(usize::from(first))]
        );
        assert_eq!(layout.xattrs.len(), 2);
        assert_eq!(layout.xattrs[1].value, XattrValue::Inline(b"hel".to_vec()));
    }

    /// A record whose name runs past the block collides (its room is taken first), and
    /// so does a list with no end before the block's.
    #[test]
    fn records_past_the_end() {
        let mut long = block();
        // Bytes after the records non-zero up to 1000: no end of the list there, and
        // the second record, given the longest name, swallows them up to 324.
        for byte in &mut long[72..1000] {
            *byte = 0x41;
        }
        long[52] = 255;
        let layout = walk(&long);
        // Records of 84 bytes (name length 0x41) from 324, the one at 996 passing 1024.
        assert_eq!(layout.problems, [BlockProblem::Collision(996)]);
        assert_eq!(layout.xattrs.len(), 2 + (996 - 324) / 84);
        // An empty list only takes its four zero bytes.
        let mut empty = vec![0u8; 1024];
        empty[..32].copy_from_slice(&block()[..32]);
        assert_eq!(walk(&empty).problems, []);
        // Short input (never a real block) neither panics nor passes.
        assert!(!walk(&[0u8; 8]).problems.is_empty());
    }
}
