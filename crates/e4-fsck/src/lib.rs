//! `e4-fsck`: a read-only checker for ext2/3/4 images that checks what e2fsck checks, in
//! parallel in every pass, and agrees with it. It reads through `e4-format` only, so it is
//! a second opinion on what e4's engine writes.
//!
//! Every thread shares one state ([`state::context::Context`]): one atomic bitmap of block
//! ownership, where a `fetch_or` that finds its bit set reveals a block claimed twice at
//! that moment; per-inode arrays; atomic reference counters. Nothing is kept per thread,
//! so nothing is merged, and the problems are sorted before they are printed, so the
//! output is the same for any thread count.
//!
//! ```no_run
//! let report = e4_fsck::check(std::path::Path::new("fs.img"), &e4_fsck::Options::default())?;
//! for problem in &report.problems {
//!     println!("{problem}");
//! }
//! std::process::exit(report.exit_code().into());
//! # Ok::<(), e4_fsck::FsckError>(())
//! ```

#![forbid(unsafe_code)]

mod pass0;
mod pass1;
mod pass2;
mod pass3;
mod pass4;
mod pass5;
mod quota;
pub mod report;
mod state;
mod walk;
mod xattr;

use std::path::Path;

use e4_format::superblock::{STATE_ERROR, STATE_VALID};

pub use report::{phase_times, problem, progress};

use phase_times::PhaseClock;

pub use pass0::superblock::FsckError;
pub use phase_times::{PhaseTime, PhaseTimes};
pub use problem::{Location, Problem, ProblemClass, ProblemCode, Repair};
pub use progress::{Progress, ProgressUpdate};
pub use report::{Report, Summary};
/// The checker's concurrent bitmap, its memory taken as bits are set: the CLI's export
/// remembers the directories it entered in one, sized by the inode count an image claims.
pub use state::atomic_bitmap::AtomicBitmap;

/// How to check.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Worker threads; all cores when `None`.
    pub threads: Option<usize>,
    /// Check even a clean filesystem (`-f`).
    pub force: bool,
    /// Called as each pass advances (`-C`).
    pub progress: Option<Progress>,
    /// The calling thread is one of the workers, so one thread fewer is started: its stack
    /// and its allocator pages were 0.35 MiB of `e4 fsck -j 1`'s peak on the small-file
    /// benchmark image (docs/BENCHMARKS.md), where the peak is measured against e2fsck's.
    /// A thread can do this once in its life (rayon keeps it registered with the first
    /// pool, and a second check from it fails to start its workers), so it is for a caller
    /// that checks once, as the CLI does.
    pub use_calling_thread: bool,
}

/// Checks the image at `path`.
pub fn check(path: &Path, options: &Options) -> Result<Report, FsckError> {
    let mut clock = PhaseClock::start();
    let mut pool = rayon::ThreadPoolBuilder::new();
    if let Some(n) = options.threads {
        pool = pool.num_threads(n.max(1));
    }
    if options.use_calling_thread {
        pool = pool.use_current_thread();
    }
    let pool = pool
        .build()
        .map_err(|e| FsckError::Io(format!("starting worker threads: {e}")))?;
    clock.lap("start worker threads");
    pool.install(|| check_in_pool(path, options, clock))
}

fn check_in_pool(
    path: &Path,
    options: &Options,
    mut clock: PhaseClock,
) -> Result<Report, FsckError> {
    let ctx = pass0::superblock::open_and_check(path, &mut clock)?;
    if !options.force && is_clean(&ctx) {
        let sb = &ctx.sb;
        // A skipped check still says that the journal was not replayed, as e2fsck -n does.
        let journal_note = ctx
            .take_problems()?
            .into_iter()
            .filter(|p| p.code == ProblemCode::PR_0_JOURNAL_RUN)
            .collect();
        return Ok(Report {
            problems: journal_note,
            summary: Summary {
                inodes_used: u64::from(sb.inodes_count - sb.free_inodes_count.min(sb.inodes_count)),
                inodes_count: u64::from(sb.inodes_count),
                blocks_used: sb.blocks_count().saturating_sub(sb.free_blocks_count()),
                blocks_count: sb.blocks_count(),
                state_bytes: ctx.state_bytes(),
            },
            skipped: true,
            phases: clock.finish(),
        });
    }
    let unscannable = pass1::unscannable_group(&ctx);
    let pieces = pass1::plan_pieces(&ctx, unscannable);
    clock.lap("plan pass 1");
    let progress = options.progress.as_ref();
    let (mut dirs, xattrs) = pass1::run(&ctx, &pieces, progress)?;
    clock.lap("pass 1");
    // Where libext2fs's inode scan stops, e2fsck stops; so does e4, though it goes on
    // past other fatal problems: the inodes of the later groups were never read, so
    // passes 2 to 5 would call everything in them missing, and an image claiming 2^16
    // groups of garbage descriptors made 11 million lines of that.
    let links = match unscannable {
        Some(group) => {
            pass1::report_unscannable(&ctx, group);
            None
        }
        None => {
            pass1::find_shared_owners(&ctx, &pieces, &xattrs);
            clock.lap("pass 1B");
            let links = pass2::run(&ctx, &mut dirs, progress);
            clock.lap("pass 2");
            pass3::run(&ctx, &dirs, &links, progress);
            clock.lap("pass 3");
            pass4::run(&ctx, progress);
            clock.lap("pass 4");
            pass5::run(&ctx, progress);
            clock.lap("pass 5");
            quota::check(&ctx);
            Some(links)
        }
    };
    ctx.problems_fit()?;
    clock.lap("quota");
    // Inodes below s_first_ino count as used whatever pass 1 found in them.
    let reserved_unused = (1..ctx
        .sb
        .first_ino()
        .min(ctx.sb.inodes_count.saturating_add(1)))
        .filter(|&ino| !ctx.inodes.kind(ino).in_use())
        .count() as u64;
    let inodes_used = ctx.inodes.count_in_use() + reserved_unused;
    // Block 0 of a 1 KiB filesystem (the boot block) is outside every group but in use.
    let blocks_used =
        ctx.block_found.count_ones() * ctx.cluster_ratio() + ctx.geo.first_data_block();
    clock.lap("totals");
    let problems = ctx.take_problems()?;
    clock.lap("sort problems");
    let summary = Summary {
        inodes_used,
        inodes_count: u64::from(ctx.sb.inodes_count),
        blocks_used,
        blocks_count: ctx.geo.blocks(),
        state_bytes: ctx.state_bytes(),
    };
    drop((ctx, pieces, dirs, xattrs, links));
    clock.lap("free state");
    Ok(Report {
        problems,
        summary,
        skipped: false,
        phases: clock.finish(),
    })
}

/// e2fsck's `check_if_skip`: cleanly unmounted, no errors recorded, no orphans, under the
/// mount count and time limits, and no error already found in the superblock or
/// descriptors.
fn is_clean(ctx: &state::context::Context) -> bool {
    let sb = &ctx.sb;
    sb.state & STATE_VALID != 0
        && sb.state & STATE_ERROR == 0
        && sb.last_orphan == 0
        && (sb.max_mnt_count == 0
            || sb.max_mnt_count as i16 <= 0
            || sb.mnt_count < sb.max_mnt_count)
        && ctx.has_no_errors()
        && !check_is_due(sb)
}

/// e2fsck's time rules: a last-check time in the future, or `s_checkinterval` seconds
/// since it, force a check.
fn check_is_due(sb: &e4_format::superblock::Superblock) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let last = i64::from(sb.lastcheck) | (i64::from(sb.lastcheck_hi) << 32);
    last > now || (sb.checkinterval != 0 && now >= last + i64::from(sb.checkinterval))
}
