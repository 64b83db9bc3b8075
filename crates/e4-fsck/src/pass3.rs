//! Pass 3, "Checking directory connectivity": every directory's parent is the first
//! entry naming it, in physical order (later ones were reported in pass 2 as extra links);
//! every directory must reach the root through its parents, and its `..` must name its
//! parent. Directories are resolved in parallel; each walk records what it learns in a
//! shared array of atomic states, so no chain is followed twice to the root.

use std::sync::atomic::{AtomicU8, Ordering};

use rayon::prelude::*;

use e4_format::inode::ROOT_INO;

use crate::report::problem::{Location, ProblemCode};
use crate::report::progress::{PassMeter, Progress};
use crate::state::context::Context;
use crate::state::directories::{Directories, Directory, Pass2Result};
use crate::state::inode_state::InodeKind;

const UNKNOWN: u8 = 0;
const CONNECTED: u8 = 1;
const DETACHED: u8 = 2;

/// Runs pass 3.
pub fn run(ctx: &Context, dirs: &Directories, pass2: &Pass2Result, progress: Option<&Progress>) {
    let dirs = dirs.records();
    let meter = PassMeter::start(progress, 3, dirs.len() as u64);
    if ctx.inodes.kind(ROOT_INO) != InodeKind::Directory {
        ctx.report(
            ProblemCode::PR_3_NO_ROOT_INODE,
            Location::Inode(ROOT_INO),
            "root inode not allocated",
        );
        return;
    }
    let parents = choose_parents(ctx, dirs, pass2);
    let parent_of = |ino: u32| -> u32 {
        if ino == ROOT_INO {
            return ROOT_INO;
        }
        dirs.binary_search_by_key(&ino, |d| d.ino)
            .map_or(0, |i| parents[i])
    };
    let state: Vec<AtomicU8> = dirs.iter().map(|_| AtomicU8::new(UNKNOWN)).collect();
    let index_of = |ino: u32| dirs.binary_search_by_key(&ino, |d| d.ino).ok();
    dirs.par_iter().for_each(|dir| {
        if dir.ino == ROOT_INO {
            return;
        }
        // Walk up until the root, a directory already resolved, or a repeat.
        let mut path = vec![dir.ino];
        let mut ino = dir.ino;
        let outcome = loop {
            let parent = parent_of(ino);
            if parent == ROOT_INO {
                break CONNECTED;
            }
            let Some(at) = index_of(parent) else {
                break DETACHED;
            };
            match state[at].load(Ordering::Relaxed) {
                UNKNOWN => {}
                known => break known,
            }
            if path.contains(&parent) || path.len() > dirs.len() {
                break DETACHED;
            }
            path.push(parent);
            ino = parent;
        };
        for ino in path {
            if let Some(at) = index_of(ino) {
                state[at].store(outcome, Ordering::Relaxed);
            }
        }
    });
    dirs.par_iter().for_each(|dir| {
        meter.advance(1);
        let ino = dir.ino;
        let parent = parent_of(ino);
        let detached =
            index_of(ino).is_some_and(|at| state[at].load(Ordering::Relaxed) == DETACHED);
        if detached && is_chain_top(ino, &parent_of) {
            let code = if parent == 0 {
                ProblemCode::PR_3_UNCONNECTED_DIR
            } else {
                ProblemCode::PR_3_LOOPED_DIR
            };
            let what = if parent == 0 {
                "unconnected"
            } else {
                "recursively looped"
            };
            ctx.report(
                code,
                Location::Inode(ino),
                format!("{what} directory inode {ino} (was in {parent})"),
            );
        }
        let dotdot = ctx.inodes.dotdot(ino);
        if dotdot != parent {
            ctx.report(
                ProblemCode::PR_3_BAD_DOT_DOT,
                Location::Inode(ino),
                format!("'..' in directory {ino} is {dotdot}, should be {parent}"),
            );
        }
    });
}

/// The first entry (in physical order) naming each directory is its parent; every later
/// one is a second hard link to a directory.
fn choose_parents(ctx: &Context, dirs: &[Directory], pass2: &Pass2Result) -> Vec<u32> {
    let mut parents = vec![0u32; dirs.len()];
    let links = &pass2.subdir_links;
    let mut i = 0;
    while i < links.len() {
        let child = links[i].child;
        let mut j = i;
        while j < links.len() && links[j].child == child {
            if j > i {
                let l = links[j];
                ctx.report(
                    ProblemCode::PR_2_LINK_DIR,
                    Location::DirEntry {
                        dir: l.parent,
                        logical: 0,
                        offset: l.offset(),
                    },
                    format!(
                        "entry in directory {} is a link to directory {child}, already in {}",
                        l.parent, links[i].parent
                    ),
                );
            }
            j += 1;
        }
        if let Ok(at) = dirs.binary_search_by_key(&child, |d| d.ino) {
            parents[at] = links[i].parent;
        }
        i = j;
    }
    parents
}

/// Whether `ino` is where e2fsck stops and reports a detached chain: it has no parent, or
/// it is the smallest-numbered directory of the loop it sits on.
fn is_chain_top(ino: u32, parent_of: &impl Fn(u32) -> u32) -> bool {
    let parent = parent_of(ino);
    if parent == 0 {
        return true;
    }
    // Follow the loop from ino; it is the top if it comes back to itself and is smallest.
    let mut at = parent;
    let mut smallest = ino;
    for _ in 0..1_000_000 {
        if at == ino {
            return smallest == ino;
        }
        if at == 0 || at == ROOT_INO {
            return false;
        }
        smallest = smallest.min(at);
        at = parent_of(at);
    }
    false
}
