//! Pass 4, "Checking reference counts": every inode in use, in parallel, compares
//! `i_links_count` (read in pass 1) with the references pass 2 counted on its atomic
//! counter. An inode nothing references is unattached (or, with no content, simply
//! leaked).

use rayon::prelude::*;

use e4_format::features::RoCompatFeatures;

use crate::report::problem::{Location, ProblemCode};
use crate::report::progress::{PassMeter, Progress};
use crate::state::context::Context;
use crate::state::inode_state::InodeKind;

/// Inodes per task and between progress reports: a multiple of 64, so each task reads
/// whole words of the in-use bitmap.
const INODES_PER_CHUNK: u32 = 4096;

/// The most links a directory counts before dir_nlink stores 1 (`EXT2_LINK_MAX`).
const LINK_MAX: u32 = 65000;

/// Runs pass 4.
pub fn run(ctx: &Context, progress: Option<&Progress>) {
    let dir_nlink = ctx.sb.ro_compat().contains(RoCompatFeatures::DIR_NLINK);
    let inodes = ctx.sb.inodes_count;
    let meter = PassMeter::start(progress, 4, u64::from(inodes));
    // Chunks of the in-use bitmap, not a list of inode numbers: most inodes of a large
    // filesystem are unused, and a clear word skips 64 of them.
    let chunks = inodes.div_ceil(INODES_PER_CHUNK);
    (0..chunks).into_par_iter().for_each(|chunk| {
        let first = chunk * INODES_PER_CHUNK + 1;
        let end = first
            .saturating_add(INODES_PER_CHUNK)
            .min(inodes.saturating_add(1));
        ctx.inodes
            .for_each_in_use(first..end, |ino| check_links(ctx, ino, dir_nlink));
        meter.advance(u64::from(end - first));
    });
    check_value_inodes(ctx);
}

/// Pass 4 for value inodes (e2fsck's `check_ea_inode`, then the link count): one no
/// entry names is unattached, unless a directory names it; one that entries name
/// counts as one link, and must store their number.
fn check_value_inodes(ctx: &Context) {
    for value in ctx.ea_inodes.found() {
        let ino = value.ino;
        let loc = Location::Inode(ino);
        let from_dirs = ctx.inodes.refs(ino);
        let from_xattrs = value.from_xattrs;
        let counted = if from_dirs > 0 {
            from_dirs
        } else if from_xattrs > 0 {
            if value.stored_refs != from_xattrs && !value.lustre {
                ctx.report(
                    ProblemCode::PR_4_EA_INODE_REF_COUNT,
                    loc,
                    format!(
                        "extended attribute inode {ino} ref count is {}, should be {from_xattrs}",
                        value.stored_refs
                    ),
                );
            }
            1
        } else {
            // Declined, e2fsck leaves the links count alone.
            let (code, what) = if ctx.inodes.is_zero_length(ino) {
                (ProblemCode::PR_4_ZERO_LEN_INODE, "zero-length inode")
            } else {
                (ProblemCode::PR_4_UNATTACHED_INODE, "inode")
            };
            ctx.report(code, loc, format!("unattached {what} {ino}"));
            continue;
        };
        let on_disk = u32::from(ctx.inodes.links(ino));
        if counted != on_disk {
            ctx.report(
                ProblemCode::PR_4_BAD_REF_COUNT,
                loc,
                format!("inode {ino} ref count is {on_disk}, should be {counted}"),
            );
        }
    }
}

/// Compares one in-use inode's `i_links_count` with the references counted. Reserved
/// inodes (the root aside, which pass 1 records as a directory) are not referenced from
/// directories and are skipped.
fn check_links(ctx: &Context, ino: u32, dir_nlink: bool) {
    let kind = ctx.inodes.kind(ino);
    if !kind.in_use() || kind == InodeKind::Reserved {
        return;
    }
    let on_disk = u32::from(ctx.inodes.links(ino));
    let mut counted = ctx.inodes.refs(ino);
    let loc = Location::Inode(ino);
    if counted == 0 {
        if ctx.inodes.is_zero_length(ino) {
            ctx.report(
                ProblemCode::PR_4_ZERO_LEN_INODE,
                loc,
                format!("unattached zero-length inode {ino}"),
            );
        } else {
            ctx.report(
                ProblemCode::PR_4_UNATTACHED_INODE,
                loc,
                format!("unattached inode {ino}"),
            );
        }
    }
    if kind == InodeKind::Directory && counted > LINK_MAX && (dir_nlink || on_disk == 1) {
        counted = 1;
    }
    if counted != on_disk {
        ctx.report(
            ProblemCode::PR_4_BAD_REF_COUNT,
            loc,
            format!("inode {ino} ref count is {on_disk}, should be {counted}"),
        );
    }
}
