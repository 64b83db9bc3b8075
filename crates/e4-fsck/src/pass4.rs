//! Pass 4, "Checking reference counts": every inode in use, in parallel, compares
//! `i_links_count` (read in pass 1) with the references pass 2 counted on its atomic
//! counter. An inode nothing references is unattached (or, with no content, simply
//! leaked).

use rayon::prelude::*;

use e4_format::features::RoCompatFeatures;
use e4_format::inode::ROOT_INO;

use crate::context::Context;
use crate::inode_state::InodeKind;
use crate::problem::{Location, ProblemCode};
use crate::progress::{PassMeter, Progress};

/// Inodes checked between progress reports.
const PROGRESS_CHUNK: usize = 4096;

/// The most links a directory counts before dir_nlink stores 1 (`EXT2_LINK_MAX`).
const LINK_MAX: u32 = 65000;

/// Runs pass 4.
pub fn run(ctx: &Context, progress: Option<&Progress>) {
    let first = ctx.sb.first_ino();
    let dir_nlink = ctx.sb.ro_compat().contains(RoCompatFeatures::DIR_NLINK);
    let inodes: Vec<u32> = std::iter::once(ROOT_INO)
        .chain(first..=ctx.sb.inodes_count)
        .collect();
    let meter = PassMeter::start(progress, 4, inodes.len() as u64);
    inodes
        .par_chunks(PROGRESS_CHUNK)
        .flat_map_iter(|chunk| {
            meter.advance(chunk.len() as u64);
            chunk.iter().copied()
        })
        .for_each(|ino| {
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
        });
}
