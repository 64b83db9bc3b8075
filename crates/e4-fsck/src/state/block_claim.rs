//! How a walk over an inode's blocks records them. Pass 1 claims each block in the one
//! shared ownership bitmap; a claim that finds the bit already set marks the block in the
//! duplicate bitmap at that moment. Pass 1B walks again, reporting nothing new, only
//! counting which of each inode's blocks are duplicates.

use std::collections::HashSet;
use std::sync::Mutex;

use e4_format::features::RoCompatFeatures;
use e4_format::inode::ROOT_INO;

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_tally::{BlockTally, ClusterCursor};
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
    /// `process_bad_inode`, marking the inode bad (pass 1 only). For a reserved inode
    /// other than the root the problem is not reported: e2fsck's pass 2 stops at an
    /// entry naming one (`PR_2_BAD_INO`) and its pass 4 skips them, so
    /// `process_bad_inode` never runs for it (found by the sweep: a bad xattr block
    /// number in the boot loader inode).
    pub fn report_bad_inode(&self, code: ProblemCode, message: impl Into<String>) {
        if self.mode == WalkMode::Claim {
            self.ctx
                .bad_inodes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(self.ino);
            if self.ino == ROOT_INO || self.ino >= self.ctx.sb.first_ino() {
                self.ctx.report(code, Location::Inode(self.ino), message);
            }
        }
    }

    /// Claims `start..start + count` (already checked to be inside the filesystem), with
    /// the clusters holding them, for this inode and counts it in `tally`'s shared blocks
    /// where it is a duplicate.
    pub fn claim(&self, start: u64, count: u64, tally: &mut BlockTally) {
        if count == 0 {
            return;
        }
        let first = self.ctx.cluster_of(start);
        let last = self.ctx.cluster_of(start + count - 1);
        self.claim_clusters(first, last - first + 1, tally);
    }

    /// Claims clusters `first..first + count` (blocks, without bigalloc).
    fn claim_clusters(&self, first: u64, count: u64, tally: &mut BlockTally) {
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
                self.ctx.block_found.set_range(first, count, |c| {
                    if !shared_allowed {
                        dup.set(c);
                    }
                });
            }
            WalkMode::CountShared => {
                tally.shared += (first..first + count)
                    .filter(|&c| self.ctx.block_dup.get(c))
                    .count() as u64;
            }
        }
    }

    /// Claims and counts an extent's `len` data blocks from `physical`, mapped from
    /// `logical`, as e2fsck's `scan_extent_node` does. Under bigalloc a cluster the
    /// previous extent ended in is the inode's already (the kernel maps a logical
    /// cluster to one physical cluster), so only the clusters after it are claimed and
    /// counted; a run whose offsets in its clusters differ from the logical ones, or that
    /// moves to another physical cluster inside one logical cluster, is
    /// `PR_1_MISALIGNED_CLUSTER` and its clusters are claimed twice, which makes them
    /// duplicates for pass 1B.
    pub fn claim_extent(&self, logical: u64, physical: u64, len: u64, tally: &mut BlockTally) {
        let ctx = self.ctx;
        if ctx.cluster_bits == 0 {
            self.claim(physical, len, tally);
            tally.blocks += len;
            return;
        }
        if self.misaligned(&tally.cursor, physical, logical) {
            self.report_misaligned(logical, physical, len);
            if self.mode == WalkMode::Claim {
                self.claim(physical, len, tally);
                self.claim(physical, len, tally);
            }
        }
        let cursor = &tally.cursor;
        let mut first = ctx.cluster_of(physical);
        if cursor.previous_block != 0 && first == ctx.cluster_of(cursor.previous_block) {
            first += 1;
        }
        let end = ctx.cluster_of(physical + len - 1) + 1;
        if first < end {
            self.claim_clusters(first, end - first, tally);
            tally.blocks += end - first;
        }
        tally.cursor.last_block = logical + len - 1;
        tally.cursor.previous_block = physical + len - 1;
    }

    /// Claims and counts one block of a block map as e2fsck's `process_block` does:
    /// `blockcnt` is the logical block, or -1, -2, -3 for a single, double or triple
    /// indirect block. Under bigalloc a block in the cluster of the block before it, at
    /// the same offset as its logical block, is the inode's already; any other block is
    /// claimed, so one in an owned cluster at another offset is a duplicate. (e2fsck's
    /// `has_unaligned_cluster_map` branch there cannot fire: it is reached only for a
    /// block in the previous block's cluster at its logical offset.)
    pub fn claim_mapped_block(&self, blockcnt: i64, block: u64, tally: &mut BlockTally) {
        let ctx = self.ctx;
        let cursor = tally.cursor;
        // libext2fs's e2_blkcnt_t converted to blk64_t, as e2fsck compares them.
        let logical = blockcnt as u64;
        let mask = ctx.cluster_ratio() - 1;
        let same_cluster = ctx.cluster_bits != 0
            && cursor.previous_block != 0
            && ctx.cluster_of(block) == ctx.cluster_of(cursor.previous_block);
        if !(same_cluster && block & mask == logical & mask) {
            self.claim(block, 1, tally);
            tally.blocks += 1;
        }
        if ctx.cluster_bits != 0 {
            if blockcnt >= 0 {
                tally.cursor.last_block = logical;
            }
            tally.cursor.previous_block = block;
        }
    }

    /// e2fsck's `has_unaligned_cluster_map`: block `physical` mapped from `logical` sits
    /// at another offset in its cluster, or leaves the physical cluster the logical
    /// cluster began in.
    fn misaligned(&self, cursor: &ClusterCursor, physical: u64, logical: u64) -> bool {
        let ctx = self.ctx;
        let mask = ctx.cluster_ratio() - 1;
        if ctx.cluster_bits == 0 {
            return false;
        }
        if logical & mask != physical & mask {
            return true;
        }
        cursor.previous_block != 0
            && logical & mask != 0
            && ctx.cluster_of(logical) == ctx.cluster_of(cursor.last_block)
            && ctx.cluster_of(physical) != ctx.cluster_of(cursor.previous_block)
    }

    fn report_misaligned(&self, logical: u64, physical: u64, len: u64) {
        // e2fsck prints this once per block; once per run says the same.
        self.report(
            ProblemCode::PR_1_MISALIGNED_CLUSTER,
            Location::Inode(self.ino),
            format!(
                "inode {} logical block {} (physical block {physical}, {len} block(s)) violates cluster allocation rules",
                self.ino, logical as i64
            ),
        );
    }
}
