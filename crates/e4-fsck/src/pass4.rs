//! Pass 4, "Checking reference counts": every inode in use, in parallel, compares
//! `i_links_count` (read in pass 1) with the references pass 2 counted on its atomic
//! counter. An inode nothing references is unattached (or, with no content, simply
//! leaked).

use std::collections::{BTreeSet, HashMap};

use rayon::prelude::*;

use e4_format::features::RoCompatFeatures;

use crate::report::problem::{Location, ProblemCode};
use crate::report::progress::{PassMeter, Progress};
use crate::state::context::Context;
use crate::state::ea_inode_refs::ValueInodeRefs;
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
    let values = ctx.ea_inodes.values();
    // A handful at most (damage): a copy, not a lock per inode.
    let unreadable = ctx
        .checksum_failed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let chunks = inodes.div_ceil(INODES_PER_CHUNK);
    (0..chunks).into_par_iter().for_each(|chunk| {
        let first = chunk * INODES_PER_CHUNK + 1;
        let end = first
            .saturating_add(INODES_PER_CHUNK)
            .min(inodes.saturating_add(1));
        ctx.inodes.for_each_in_use(first..end, |ino| {
            check_links(ctx, ino, dir_nlink, &values, &unreadable)
        });
        meter.advance(u64::from(end - first));
    });
}

/// Compares one in-use inode's `i_links_count` with the references counted, as
/// e2fsck's pass 4 loop does. Reserved inodes (the root aside, which pass 1 records as a
/// directory) are not referenced from directories and are skipped. An inode no entry
/// names counts as one link when it is an xattr value that entries name, which must
/// store their number (`check_ea_inode`); else it is unattached, and declined, e2fsck
/// leaves its links count alone (`disconnect_inode`). Where e2fsck reads the inode again
/// (`check_ea_inode` when no entry names it, and before `PR_4_BAD_REF_COUNT`), one in
/// `unreadable` (its checksum failed in pass 1) stops it, and nothing more is said of it.
fn check_links(
    ctx: &Context,
    ino: u32,
    dir_nlink: bool,
    values: &HashMap<u32, ValueInodeRefs>,
    unreadable: &BTreeSet<u32>,
) {
    let kind = ctx.inodes.kind(ino);
    if !kind.in_use() || kind == InodeKind::Reserved {
        return;
    }
    let on_disk = u32::from(ctx.inodes.links(ino));
    let mut counted = ctx.inodes.refs(ino);
    let loc = Location::Inode(ino);
    let read_again = || {
        let fails = unreadable.contains(&ino);
        if fails {
            ctx.report(
                ProblemCode::EXT2_ET_PASS4_INODE_CSUM_INVALID,
                loc,
                format!("inode checksum does not match inode while reading inode {ino} in pass 4"),
            );
        }
        !fails
    };
    if counted == 0 {
        if !read_again() {
            return;
        }
        match values.get(&ino) {
            Some(value) if value.from_xattrs > 0 => {
                if value.stored_refs != value.from_xattrs && !value.lustre {
                    ctx.report(
                        ProblemCode::PR_4_EA_INODE_REF_COUNT,
                        loc,
                        format!(
                            "extended attribute inode {ino} ref count is {}, should be {}",
                            value.stored_refs, value.from_xattrs
                        ),
                    );
                }
                counted = 1;
            }
            _ => {
                if ctx.inodes.is_zero_length(ino) {
                    ctx.report(
                        ProblemCode::PR_4_ZERO_LEN_INODE,
                        loc,
                        format!("unattached zero-length inode {ino}"),
                    );
                }
                ctx.report(
                    ProblemCode::PR_4_UNATTACHED_INODE,
                    loc,
                    format!("unattached inode {ino}"),
                );
                return;
            }
        }
    }
    if kind == InodeKind::Directory && counted > LINK_MAX && (dir_nlink || on_disk == 1) {
        counted = 1;
    }
    if counted != on_disk && read_again() {
        ctx.report(
            ProblemCode::PR_4_BAD_REF_COUNT,
            loc,
            format!("inode {ino} ref count is {on_disk}, should be {counted}"),
        );
    }
}
