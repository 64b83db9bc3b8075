//! How a walk over an inode's blocks records them. Pass 1 claims each block in the one
//! shared ownership bitmap; a claim that finds the bit already set marks the block in the
//! duplicate bitmap at that moment. Pass 1B walks again, reporting nothing new, only
//! counting which of each inode's blocks are duplicates.

use std::collections::HashSet;
use std::sync::Mutex;

use e4_format::features::RoCompatFeatures;

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_tally::BlockTally;
use crate::state::context::Context;

/// Why the blocks are being walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkMode {
    /// Pass 1: check everything, claim every block.
    Claim,
    /// Pass 1B: count blocks that are claimed twice; report nothing.
    CountShared,
}

/// One walk over one inode's blocks.
#[derive(Debug, Clone, Copy)]
pub struct BlockWalk<'a> {
    /// Shared state.
    pub ctx: &'a Context,
    /// The inode walked.
    pub ino: u32,
    /// Pass 1 or pass 1B.
    pub mode: WalkMode,
    /// Tree blocks (extent nodes, indirect blocks) already entered in this walk. A
    /// corrupt tree may name one block from many entries; entering it once keeps the
    /// walk linear in the distinct blocks instead of exponential in the depth.
    pub entered: &'a Mutex<HashSet<u64>>,
}

impl BlockWalk<'_> {
    /// Whether tree block `block` is entered for the first time in this walk.
    pub fn enter(&self, block: u64) -> bool {
        self.entered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(block)
    }

    /// Reports a problem in pass 1; pass 1B has already reported it.
    pub fn report(&self, code: ProblemCode, location: Location, message: impl Into<String>) {
        if self.mode == WalkMode::Claim {
            self.ctx.report(code, location, message);
        }
    }

    /// Reports a problem of this inode that e2fsck leaves to pass 2's
    /// `process_bad_inode`, marking the inode bad (pass 1 only).
    pub fn report_bad_inode(&self, code: ProblemCode, message: impl Into<String>) {
        if self.mode == WalkMode::Claim {
            self.ctx
                .bad_inodes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(self.ino);
            self.ctx.report(code, Location::Inode(self.ino), message);
        }
    }

    /// Claims `start..start + count` (already checked to be inside the filesystem) for
    /// this inode and counts it in `tally`'s shared blocks where it is a duplicate.
    pub fn claim(&self, start: u64, count: u64, tally: &mut BlockTally) {
        match self.mode {
            WalkMode::Claim => {
                // Under shared_blocks a block may belong to many inodes: e2fsck's
                // `mark_block_used` lets a second claim pass.
                let shared_allowed = self
                    .ctx
                    .sb
                    .ro_compat()
                    .contains(RoCompatFeatures::SHARED_BLOCKS);
                let dup = &self.ctx.block_dup;
                self.ctx.block_found.set_range(start, count, |b| {
                    if !shared_allowed {
                        dup.set(b);
                    }
                });
            }
            WalkMode::CountShared => {
                tally.shared += (start..start + count)
                    .filter(|&b| self.ctx.block_dup.get(b))
                    .count() as u64;
            }
        }
    }
}
