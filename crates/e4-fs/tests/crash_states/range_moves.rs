//! What FALLOC_FL_INSERT_RANGE and FALLOC_FL_COLLAPSE_RANGE may leave a file holding after
//! a crash, in whole blocks.
//!
//! The kernel (`ext4_insert_range`, `ext4_collapse_range`, `fs/ext4/extents.c`) moves
//! extents with `ext4_ext_shift_extents`, which restarts its handle a leaf at a time
//! (`ext4_datasem_ensure_credits`), so a large move spans transactions and a crash can
//! fall between two of them: nothing finishes the move at the next mount (no orphan, no
//! log record), and the file stays partly moved, its tree valid. What the kernel keeps
//! is the order: an insert grows `i_disksize` before it shifts anything ("to avoid data
//! loss if there is error while shifting") and shifts from the last extent down, so no
//! block is ever past the end; a collapse removes the range's blocks, shifts from the
//! range's end up, and shrinks the size last.
//!
//! e4 (`ops/fallocate.rs`) does the same in pieces of whole leaves, each piece a step of
//! its own with commits between them as the log's pressure asks, and promises exactly
//! this of a crash (each state also e2fsck-clean, every block owned once):
//! - a move that fits one transaction: the file before it or after it, whole;
//! - a collapse whose range lies in more groups than a step may touch, between the steps
//!   that punch it (`ops/fallocate.rs`, as the kernel's `ext4_ext_remove_space` restarts
//!   its handle): the range's blocks from `o` up to some step's cut `x < e` freed, holes,
//!   nothing moved, the size unchanged (the step that frees the rest moves the first
//!   piece with it);
//! - an insert of `n` blocks at block `o`, between pieces: the size grown by `n` blocks
//!   (its first transaction grows it and moves the last piece), the extents from some
//!   leaf's first block `p > o` on moved up by `n`, those below at their own places: the
//!   file as if `n` blocks had been inserted at `p` instead of `o`;
//! - a collapse of `n` blocks at `o` (its range ending at `e = o + n`), between pieces:
//!   the range's blocks freed and the extents in `e..p` moved down by `n` (its first
//!   transaction frees the range and moves the first piece), for some leaf's first block
//!   `p > e`, those from `p` on at their own places, so blocks `p - n..p` a hole, and the
//!   size unchanged (its last transaction shrinks it).
//!
//! Never a block lost (a hole where data was, beyond the gap these shapes name) or
//! doubled (data at its old and its new place): the check below compares every byte.

use super::model::BLOCK;

/// Which way a range move goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shift {
    /// FALLOC_FL_INSERT_RANGE: a hole opens, everything from it on moves up.
    Insert,
    /// FALLOC_FL_COLLAPSE_RANGE: the range goes, everything after it moves down.
    Collapse,
}

/// An insert or a collapse of `count` blocks at block `at`.
#[derive(Debug, Clone, Copy)]
pub struct RangeMove {
    pub shift: Shift,
    pub at: usize,
    pub count: usize,
}

impl RangeMove {
    /// What a file holding `before` holds once the move is done.
    pub fn apply(&self, before: &[u8]) -> Vec<u8> {
        let (at, len) = (self.at * BLOCK, self.count * BLOCK);
        let mut after = before[..at].to_vec();
        match self.shift {
            Shift::Insert => {
                after.resize(at + len, 0);
                after.extend_from_slice(&before[at..]);
            }
            Shift::Collapse => after.extend_from_slice(&before[at + len..]),
        }
        after
    }

    /// Where a crash between two of the move's pieces or steps left the unchanged part of a
    /// file that held `before` and now holds `bytes` (the block `p` or `x` of the module's
    /// shapes: from it on, every byte is as before), or `None` if `bytes` are no such
    /// state. The file before and after the move are not
    /// such states: the caller matches those whole.
    pub fn part_way(&self, before: &[u8], bytes: &[u8]) -> Option<usize> {
        let len = self.count * BLOCK;
        let zeros = |range: std::ops::Range<usize>| bytes[range].iter().all(|&b| b == 0);
        // Blocks from `p` on hold what they held before, where a block of `before` is.
        let last = before.len().div_ceil(BLOCK);
        match self.shift {
            Shift::Insert => {
                if bytes.len() != before.len() + len {
                    return None;
                }
                let same = common_prefix(bytes, before);
                let tail = common_suffix(bytes, before);
                (self.at + 1..last.min(same / BLOCK + 1)).find(|&p| {
                    let gap = p * BLOCK;
                    before.len() - gap <= tail && zeros(gap..gap + len)
                })
            }
            Shift::Collapse => {
                let at = self.at * BLOCK;
                if bytes.len() != before.len() || bytes[..at] != before[..at] {
                    return None;
                }
                let tail = common_suffix(bytes, before);
                let end = self.at + self.count;
                // Punched from the range's start to a step's cut `x`, nothing moved.
                let x = (before.len() - tail).div_ceil(BLOCK).max(self.at + 1);
                if x < end && zeros(at..x * BLOCK) {
                    return Some(x);
                }
                let moved = common_prefix(&bytes[at..], &before[end * BLOCK..]);
                (end + 1..last.min(end + moved / BLOCK + 1)).find(|&p| {
                    let gap = p * BLOCK;
                    before.len() - gap <= tail && zeros(gap - len..gap)
                })
            }
        }
    }
}

/// How many bytes `a` and `b` agree on from their starts.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How many bytes `a` and `b` agree on from their ends.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Block `i` of a file filled with `i + 1` (0: a hole).
    fn file(blocks: &[u8]) -> Vec<u8> {
        blocks.iter().flat_map(|&b| vec![b; BLOCK]).collect()
    }

    #[test]
    fn an_insert_part_way_is_an_insert_higher_up() {
        let before = file(&[1, 2, 3, 4, 5]);
        let insert = RangeMove {
            shift: Shift::Insert,
            at: 1,
            count: 2,
        };
        assert_eq!(insert.apply(&before), file(&[1, 0, 0, 2, 3, 4, 5]));
        assert_eq!(
            insert.part_way(&before, &file(&[1, 2, 3, 0, 0, 4, 5])),
            Some(3)
        );
        // Not part-way: the whole move, the size grown alone, a block doubled or lost.
        for wrong in [
            file(&[1, 0, 0, 2, 3, 4, 5]),
            file(&[1, 2, 3, 4, 5, 0, 0]),
            file(&[1, 2, 3, 0, 3, 4, 5]),
            file(&[1, 2, 0, 0, 0, 4, 5]),
        ] {
            assert_eq!(insert.part_way(&before, &wrong), None);
        }
    }

    #[test]
    fn a_collapse_part_way_leaves_the_gap_after_what_moved() {
        let before = file(&[1, 2, 3, 4, 5, 6]);
        let collapse = RangeMove {
            shift: Shift::Collapse,
            at: 1,
            count: 2,
        };
        assert_eq!(collapse.apply(&before), file(&[1, 4, 5, 6]));
        assert_eq!(
            collapse.part_way(&before, &file(&[1, 4, 0, 0, 5, 6])),
            Some(4)
        );
        // Punched in steps up to a cut, nothing moved yet.
        assert_eq!(
            collapse.part_way(&before, &file(&[1, 0, 3, 4, 5, 6])),
            Some(2)
        );
        // Not part-way: the whole range freed with nothing moved, the range punched from
        // its end, the size shrunk early, a block doubled or lost.
        for wrong in [
            file(&[1, 0, 0, 4, 5, 6]),
            file(&[1, 2, 0, 4, 5, 6]),
            file(&[1, 4, 0, 0]),
            file(&[1, 4, 0, 4, 5, 6]),
            file(&[1, 4, 0, 0, 0, 6]),
        ] {
            assert_eq!(collapse.part_way(&before, &wrong), None);
        }
    }
}
