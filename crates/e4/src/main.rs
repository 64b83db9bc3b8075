//! `e4`: inspect, read, export and edit ext2/3/4 images in user space.
//!
//! Exit status: 0 on success, 1 when a command fails (one line on stderr), 2 for bad
//! arguments. See [`output`].

use std::process::ExitCode;

use clap::{ArgAction, Parser, Subcommand};

mod acl_edit;
mod acl_text;
mod attribute_edit;
mod bench;
mod cat;
mod edit_session;
mod export;
mod file_contexts;
mod fs_config;
mod fsck;
mod host_copy;
mod host_metadata;
mod id_map;
mod import;
mod info;
mod inode_flags;
mod interrupt;
mod journal;
mod ls;
mod mkfs;
mod mount;
mod output;
mod put;
mod read_ahead;
mod stat;
mod time_format;
mod tree_edit;

use std::ffi::OsString;
use std::path::PathBuf;

use edit_session::{with_writable_image, ImagePath};

/// mimalloc instead of glibc's malloc. With glibc, a block buffer one thread allocates and
/// another frees (the buffer cache's blocks outlive the operation that read them) takes the
/// allocating thread's arena lock: under `e4 bench create` at two threads, 12 % of the time
/// went to waiting on those locks. mimalloc frees to the owning thread's page without a lock.
/// The price is memory: its arenas are committed eagerly, which on Linux lets them be
/// backed by transparent huge pages: about 17-23 MiB more peak RSS for `e4 fsck`
/// (docs/BENCHMARKS.md), and e4 fsck promises a peak no higher than e2fsck's. So eager
/// commit is off ([`COMMIT_ARENAS_LAZILY`]), as `MIMALLOC_ARENA_EAGER_COMMIT=0` would
/// set it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sets mimalloc's `arena_eager_commit` to 0 before anything allocates: the first arena
/// is reserved by the first allocation, which the Rust runtime makes before `main`, so
/// this runs as an ELF constructor (`.init_array`), as the C library runs them.
#[used]
#[link_section = ".init_array"]
static COMMIT_ARENAS_LAZILY: extern "C" fn() = {
    extern "C" fn commit_arenas_lazily() {
        /// `mi_option_arena_eager_commit` in mimalloc.h (v2 and v3 alike).
        const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
        // SAFETY: mi_option_set stores one option value; it takes no pointer and runs
        // before any thread of the program is started.
        unsafe { libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0) }
    }
    commit_arenas_lazily
};

/// Sets mimalloc's `purge_delay` to 0: memory freed is given back to the system at once
/// instead of a second later. For `e4 fsck`, whose passes free what the pass before built
/// (pass 1's per-piece directory lists, the block reads, the growing vectors' old
/// buffers), the delay kept 2-3 MiB of freed memory resident at the peak, which e4 fsck
/// promises to hold no higher than e2fsck's (docs/BENCHMARKS.md). The engine keeps the
/// delay, which spares it the system calls of returning and taking back its buffers.
fn purge_freed_memory_at_once() {
    /// `mi_option_purge_delay` in mimalloc.h (v2 and v3 alike).
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: mi_option_set stores one option value and takes no pointer; mimalloc reads
    // it when it next schedules a purge.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) }
}

use output::{CliError, EXIT_RUNTIME, EXIT_USAGE};

/// The most worker threads `-j` may ask for. Each thread reserves its stack and its
/// signal stack when it starts, and a start that cannot get them aborts the process
/// instead of failing (`-j 65535` did, under any memory limit); 256 is far past what any
/// of these commands can use and a few hundred MiB of address space at most.
const MAX_WORKER_THREADS: i64 = 256;

#[derive(Parser)]
#[command(
    name = "e4",
    version,
    about = "ext4 in user space: read, export and edit ext2/3/4 images without root",
    after_help = "Exit status: 0 on success, 1 when the command fails, 2 for bad arguments."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure e4 beside the kernel's ext4 (and fuse2fs, tmpfs, any directory): throughput
    /// per thread count, ratios against a baseline, and the layout each left on disk.
    /// With no arguments: a short run (about a minute) of fallocate2, append, create and
    /// unlink at 1, 2 and 4 threads on e4 and, when run as root, kernel-ext4.
    Bench {
        /// Workloads: fallocate2, append, create, unlink, create-shared, unlink-shared, dwol,
        /// dwtl, dwsl, mrpl, mrdl, mwrl, mwrm, near-full, seqwrite (1 MiB writes of a new
        /// file up to --size, then fsync), seqread (1 MiB reads of a file of --size, dropped
        /// from the page cache first), untar, rm-tree, git-status (a copy of --tree per
        /// thread, through the system's tar, rm and git; not on the e4 target).
        #[arg(value_parser = |s: &str| s.parse::<e4_bench::Workload>())]
        workloads: Vec<e4_bench::Workload>,
        /// Comma-separated: e4, e4-nojournal (e4 on an image without a journal), kernel-ext4, kernel-ext4:MOUNT-OPTIONS (e.g.
        /// kernel-ext4:nodelalloc), fuse2fs, e4-fuse (this program's `e4 mount`),
        /// e4-fuse:MOUNT-OPTIONS (e.g. e4-fuse:threads=1; + between options), tmpfs, posix:DIR.
        #[arg(long, value_parser = bench::parse_targets)]
        targets: Option<std::vec::Vec<e4_bench::Target>>,
        /// Comma-separated thread counts (default 1,2,4).
        #[arg(long, value_parser = bench::parse_threads)]
        threads: Option<std::vec::Vec<usize>>,
        /// Seconds per point (default 2). A workload with a set share of work per thread
        /// (unlink, unlink-shared, mwrm, append, seqwrite and seqread to --size, dwtl) ends its point sooner, when
        /// the first thread has done its share, so every counted second has all the threads
        /// working; near-full races until every thread has found the filesystem full.
        #[arg(long, value_parser = bench::parse_duration)]
        duration: Option<f64>,
        /// Bytes each append, seqwrite and seqread thread moves at most, and dwtl's
        /// starting size: a number with
        /// an optional K, M or G (default 256M).
        #[arg(long, value_parser = bench::parse_size)]
        size: Option<u64>,
        /// How append grows its files: write or fallocate.
        #[arg(long, default_value = "write", value_parser = bench::parse_append_by)]
        by: e4_bench::AppendBy,
        /// Stop each point's clock only after the filesystem is written back (syncfs;
        /// e4's sync), so targets that write back later pay inside the clock too.
        #[arg(long)]
        settle: bool,
        /// The directory untar, rm-tree and git-status copy, packed once with tar before
        /// any point (default /usr/include: a real source tree wherever e4 can be built).
        #[arg(long, value_name = "DIR")]
        tree: Option<String>,
        /// Target the ratios are against (default kernel-ext4).
        #[arg(long, value_parser = |s: &str| s.parse::<e4_bench::Target>())]
        baseline: Option<e4_bench::Target>,
        /// Write every record as JSON to FILE.
        #[arg(long, value_name = "FILE")]
        json: Option<String>,
        /// Draw ops/s against threads, a panel per workload, to FILE (SVG).
        #[arg(long, value_name = "FILE")]
        chart: Option<String>,
        /// Make and leave each target's image in DIR (a tmpfs keeps timings comparable).
        #[arg(long, value_name = "DIR")]
        keep: Option<String>,
        /// CPU placement, over the CPUs this process may use: none (the scheduler decides);
        /// same (the workload threads and fuse2fs all on the first CPU: every hand-off is a
        /// context switch); split (fuse2fs on the first CPU, the workload threads
        /// round-robin over the others: every hand-off is a cross-CPU wake; needs 2 CPUs).
        /// Targets without a daemon (e4, kernel-ext4, tmpfs, posix) pin only the workload
        /// threads, the same way. fuse2fs is pinned with taskset (util-linux).
        #[arg(long, default_value = "none", value_parser = |s: &str| s.parse::<e4_bench::Pin>())]
        pin: e4_bench::Pin,
    },
    /// Print the superblock summary (like `dumpe2fs -h`); with -g, every block group too.
    Info {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Also list every block group's descriptor.
        #[arg(short, long)]
        groups: bool,
    },
    /// Show the journal's state without changing the image (like a `debugfs logdump`
    /// summary): its format and features, where the log starts, whether it needs recovery,
    /// and the transactions a recovery would replay. With --recover, replay it in place, as
    /// `e2fsck -E journal_only` does: exit 0 when the image is left consistent, 1 (one line)
    /// when the journal cannot be used or the replay met damage that needs e2fsck.
    Journal {
        /// The ext3/4 image file or block device.
        image: String,
        /// Replay the journal in place.
        #[arg(long)]
        recover: bool,
    },
    /// List a directory (or show one file).
    #[command(disable_help_flag = true)]
    Ls {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Path inside the image, from its root; `/` by default.
        #[arg(default_value = "/")]
        path: String,
        /// Long listing: mode, links, owner, group, size, time.
        #[arg(short)]
        long: bool,
        /// With -l, sizes in powers of 1024 (1.5K, 12M), as `ls -lh`.
        #[arg(short = 'h', long = "human-readable")]
        human: bool,
        /// Print help.
        #[arg(long, action = ArgAction::Help)]
        help: Option<bool>,
    },
    /// Mount an image with FUSE until `fusermount3 -u DIR` or `umount DIR` (or, with -f,
    /// SIGINT, SIGTERM or SIGHUP); the image is then written back and marked clean.
    /// Without -f the mount runs in the background once it is up.
    Mount {
        /// Comma-separated: ro, rw (the default), fakeroot, allow_other,
        /// default_permissions, uid=N, gid=N, threads=N (default: the CPUs), commit=SECS
        /// (default 5), norecovery or noload (read-only, the journal not replayed),
        /// errors=continue|remount-ro|panic (default: the superblock's). May be given more
        /// than once.
        #[arg(short = 'o', value_name = "OPTIONS", value_parser = mount::parse_options)]
        options: Vec<String>,
        /// Stay in the foreground until unmounted.
        #[arg(short = 'f')]
        foreground: bool,
        /// Run as the daemon a plain `e4 mount` starts (internal).
        #[arg(long, hide = true)]
        daemon: bool,
        /// The ext2/3/4 image file or block device.
        image: PathBuf,
        /// The directory to mount it on.
        dir: PathBuf,
    },
    /// Show an inode's attributes (like `stat`; the last symlink is not followed).
    Stat {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Path inside the image, from its root.
        path: String,
    },
    /// Write a file's contents to standard output.
    Cat {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Path of a regular file inside the image (symlinks are followed).
        path: String,
    },
    /// Extract the whole tree into DIR with modes, owners, times, symlinks, hard links,
    /// device nodes and xattrs. Goes on past files the host refuses, reports each one, and
    /// exits 1 at the end if any failed.
    ///
    /// Modes are kept with their setuid and setgid bits, and as root the owners and device
    /// nodes are made as the image has them (as `tar -p` does): for an image you do not
    /// trust, pass --no-devices and --no-setuid, export as an ordinary user (owners become
    /// yours, device nodes fail and are named), or export into a filesystem mounted
    /// nodev,nosuid.
    Export {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Destination directory; created if missing, must be empty if present.
        dir: String,
        /// Make no character or block device nodes (they are counted in one line at the
        /// end); fifos and sockets are still made.
        #[arg(long)]
        no_devices: bool,
        /// Clear the setuid and setgid bits of every file that is not a directory.
        #[arg(long)]
        no_setuid: bool,
        /// Worker threads; all cores by default.
        #[arg(short = 'j', long, value_parser = clap::value_parser!(u16).range(1..=MAX_WORKER_THREADS))]
        threads: Option<u16>,
    },
    /// Check the filesystem without changing it, as `e2fsck -n` does, on every core.
    /// Exit status as e2fsck's: 0 clean, 4 errors found, 8 cannot check, 12 errors found
    /// and a check that stopped where e2fsck -n stops (8 with 4), 16 usage.
    Fsck {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Open read-only and answer "no" to every question (required: no repair yet).
        #[arg(short = 'n')]
        no_changes: bool,
        /// Check even if the filesystem is marked clean.
        #[arg(short = 'f')]
        force: bool,
        /// Worker threads, at most one per core; all cores by default.
        #[arg(short = 'j', long, value_parser = clap::value_parser!(u16).range(1..=MAX_WORKER_THREADS))]
        threads: Option<u16>,
        /// Print the result as JSON records instead of text.
        #[arg(long)]
        json: bool,
        /// Show progress on stderr: a bar on a terminal, else "pass done total device"
        /// lines as `e2fsck -C 0` prints.
        #[arg(short = 'C')]
        progress: bool,
        /// Print how long each step of the check took to stderr (for profiling).
        #[arg(long)]
        timings: bool,
    },
    /// Copy a host directory's contents into the image, on all cores.
    ///
    /// Into PATH (`/` by default; made if missing), with modes, owners, times, symlinks,
    /// hard links, device nodes and xattrs; a directory that exists is merged into. Goes on
    /// past paths that fail, names each one, and exits 1 at the end if any did; stops at
    /// once when the filesystem is full.
    Import {
        /// The ext4 image file or block device to change.
        image: String,
        /// The host directory whose contents are copied.
        host_dir: PathBuf,
        /// Directory inside the image that receives them.
        #[arg(default_value = "/")]
        path: OsString,
        /// Worker threads; all cores by default.
        #[arg(short = 'j', long, value_parser = clap::value_parser!(u16).range(1..=MAX_WORKER_THREADS))]
        threads: Option<u16>,
    },
    /// Make an ext2/3/4 filesystem in an image file, as mke2fs 1.47 makes it (same
    /// defaults from /etc/mke2fs.conf or MKE2FS_CONFIG, same geometry), and with -d fill it
    /// from a host directory with all cores.
    ///
    /// SOURCE_DATE_EPOCH in the environment sets every time written and derives the UUID
    /// and hash seed (unless -U / -E hash_seed= give them), so the same inputs make the
    /// same image.
    ///
    /// As with mke2fs, an option given twice takes its last value; -O, -E and -J add up.
    #[command(args_override_self = true)]
    Mkfs(Box<mkfs::MkfsArgs>),
    /// Copy one host file into the image.
    ///
    /// Into PATH if it is a directory, keeping the file's mode, owner, times and xattrs. An
    /// existing file is not replaced.
    Put {
        /// The ext4 image file or block device to change.
        image: String,
        /// The host file to copy (a symlink is followed).
        host_file: PathBuf,
        /// Where it goes inside the image.
        path: OsString,
    },
    /// Make a directory (mode 755, owned by the caller).
    Mkdir {
        /// The ext4 image file or block device to change.
        image: String,
        /// The new directory's path inside the image.
        path: OsString,
        /// Make missing parents too, and accept an existing directory.
        #[arg(short, long)]
        parents: bool,
    },
    /// Remove a file, symlink or special file; with -r, a directory and all it holds.
    Rm {
        /// The ext4 image file or block device to change.
        image: String,
        /// The path inside the image (a symlink is removed, not its target).
        path: OsString,
        /// Remove directories and their contents.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Rename or move FROM to TO (into TO if it is a directory).
    ///
    /// A file or an empty directory already at the destination is replaced.
    Mv {
        /// The ext4 image file or block device to change.
        image: String,
        /// The path to move.
        from: OsString,
        /// The new path, or an existing directory to move into.
        to: OsString,
    },
    /// Make a hard link PATH to TARGET; with -s, a symlink to TARGET as written.
    ///
    /// If PATH is a directory, the link goes into it under TARGET's last name.
    Ln {
        /// The ext4 image file or block device to change.
        image: String,
        /// The existing path to link to (with -s: any text).
        target: OsString,
        /// The new name.
        path: OsString,
        /// Make a symbolic link.
        #[arg(short, long)]
        symbolic: bool,
    },
    /// Set permission bits (octal, up to 7777).
    Chmod {
        /// The ext4 image file or block device to change.
        image: String,
        /// Octal mode, e.g. 755 or 4755.
        #[arg(value_parser = attribute_edit::parse_mode)]
        mode: u16,
        /// The path inside the image (a symlink is followed).
        path: OsString,
    },
    /// Set the owner: UID:GID, UID or :GID (numeric).
    Chown {
        /// The ext4 image file or block device to change.
        image: String,
        /// Numeric owner and group.
        #[arg(value_parser = attribute_edit::parse_owner)]
        owner: attribute_edit::Owner,
        /// The path inside the image (a symlink is followed).
        path: OsString,
    },
    /// Show inode flags as lsattr does: FLAGS PATH per line (a directory's entries unless -d).
    Lsattr {
        /// The ext4 image file or block device to read.
        image: String,
        /// A directory's own flags, not its entries'.
        #[arg(short = 'd')]
        directories: bool,
        /// Entries whose names start with '.' too.
        #[arg(short = 'a')]
        all: bool,
        /// Directories' entries too, recursively, each under a "PATH:" heading.
        #[arg(short = 'R')]
        recursive: bool,
        /// Paths inside the image (a symlink is not followed).
        #[arg(required = true)]
        paths: Vec<OsString>,
    },
    /// Change inode flags as chattr does: chattr IMG [-R] +i -a =e PATH...
    ///
    /// Modes: +FLAGS adds, -FLAGS removes, =FLAGS sets exactly; letters aAcCdDeijPsStTuFxm.
    /// -R among the modes: directories' entries too, recursively.
    #[command(allow_hyphen_values = true)]
    Chattr {
        /// The ext4 image file or block device to change.
        image: String,
        /// Modes, then paths inside the image (a symlink is not followed).
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<OsString>,
    },
    /// Show POSIX ACLs as getfacl -n does (numeric owners: the image's users are not the host's).
    Getfacl {
        /// The ext4 image file or block device to read.
        image: String,
        /// Paths inside the image (a symlink is followed).
        #[arg(required = true)]
        paths: Vec<OsString>,
    },
    /// Change POSIX ACLs as setfacl does: setfacl IMG [-b] [-k] [-d] [-n] [-m SPEC] [-x SPEC] PATH...
    ///
    /// SPEC: entries like u:1000:rwx,g::r-x,m::rw,o::-,d:u:1000:rx (numeric ids).
    /// -M FILE and -X FILE: -m and -x with the entries of a host file (one or more per line,
    /// # comments, getfacl's listing as it is). --set SPEC and --set-file FILE: the ACL
    /// (and, with default entries, the default ACL) replaced whole. -R: directories'
    /// entries too, recursively (symlinks met on the way skipped).
    #[command(allow_hyphen_values = true)]
    Setfacl {
        /// The ext4 image file or block device to change.
        image: String,
        /// Options in order, then paths inside the image (a symlink is followed).
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<OsString>,
    },
    /// Set a regular file's size: shrinking drops data, growing adds a hole.
    Truncate {
        /// The new size in bytes, or with a K, M, G or T suffix (powers of 1024).
        #[arg(short, long, value_parser = attribute_edit::parse_size)]
        size: u64,
        /// The ext4 image file or block device to change.
        image: String,
        /// The path of an existing file inside the image (a symlink is followed).
        path: OsString,
    },
}

fn run(cli: Cli) -> Result<(), CliError> {
    let open = |image: &str| {
        let fs = e4_fs::Filesystem::open(image, e4_fs::OpenOptions::default())
            .map_err(|e| CliError::Message(format!("{image}: {e}")))?;
        // Damage read around (a bad primary superblock, descriptor checksums): one line
        // each, and the command goes on, as the kernel's read-only mount does.
        for warning in fs.warnings() {
            eprintln!("e4: warning: {image}: {warning}");
        }
        Ok::<_, CliError>(fs)
    };
    match cli.command {
        Command::Info { image, groups } => info::run(&open(&image)?, groups),
        Command::Journal { image, recover } => match recover {
            true => journal::recover(&image),
            false => journal::show(&image),
        },
        Command::Ls {
            image,
            path,
            long,
            human,
            help: _,
        } => ls::run(&open(&image)?, &path, ls::Listing { long, human }),
        Command::Stat { image, path } => stat::run(&open(&image)?, &path),
        Command::Mount {
            options,
            foreground,
            daemon,
            image,
            dir,
        } => mount::run(mount::MountArgs {
            options,
            foreground,
            daemon,
            image,
            dir,
        }),
        Command::Cat { image, path } => cat::run(&open(&image)?, &path),
        Command::Export {
            image,
            dir,
            no_devices,
            no_setuid,
            threads,
        } => export::run(
            &open(&image)?,
            std::path::Path::new(&dir),
            export::Untrusted {
                no_devices,
                no_setuid,
            },
            threads.map(usize::from),
        ),
        Command::Bench {
            workloads,
            targets,
            threads,
            duration,
            size,
            by,
            baseline,
            json,
            chart,
            keep,
            pin,
            settle,
            tree,
        } => bench::run(bench::BenchArgs {
            workloads,
            targets,
            threads,
            duration,
            size,
            by,
            baseline,
            json: json.map(Into::into),
            chart: chart.map(Into::into),
            keep: keep.map(Into::into),
            pin,
            settle,
            tree: tree.map(Into::into),
        }),
        Command::Fsck { .. } => unreachable!("fsck is dispatched by main"),
        Command::Import {
            image,
            host_dir,
            path,
            threads,
        } => {
            interrupt::catch();
            with_writable_image(&image, |fs| {
                import::run(
                    fs,
                    std::path::Path::new(&image),
                    &host_dir,
                    ImagePath(&path),
                    threads.map(usize::from),
                )
            })
        }
        Command::Mkfs(args) => mkfs::run(*args, mkfs::source_date_epoch()?),
        Command::Put {
            image,
            host_file,
            path,
        } => with_writable_image(&image, |fs| put::run(fs, &host_file, ImagePath(&path))),
        Command::Mkdir {
            image,
            path,
            parents,
        } => with_writable_image(&image, |fs| tree_edit::mkdir(fs, ImagePath(&path), parents)),
        Command::Rm {
            image,
            path,
            recursive,
        } => {
            if recursive {
                interrupt::catch();
            }
            with_writable_image(&image, |fs| tree_edit::rm(fs, ImagePath(&path), recursive))
        }
        Command::Mv { image, from, to } => with_writable_image(&image, |fs| {
            tree_edit::mv(fs, ImagePath(&from), ImagePath(&to))
        }),
        Command::Ln {
            image,
            target,
            path,
            symbolic,
        } => with_writable_image(&image, |fs| {
            tree_edit::ln(fs, ImagePath(&target), ImagePath(&path), symbolic)
        }),
        Command::Chmod { image, mode, path } => with_writable_image(&image, |fs| {
            attribute_edit::chmod(fs, mode, ImagePath(&path))
        }),
        Command::Chown { image, owner, path } => with_writable_image(&image, |fs| {
            attribute_edit::chown(fs, owner, ImagePath(&path))
        }),
        Command::Lsattr {
            image,
            directories,
            all,
            recursive,
            paths,
        } => inode_flags::lsattr(
            &open(&image)?,
            inode_flags::LsattrOptions {
                directories,
                all,
                recursive,
            },
            &paths,
        ),
        Command::Chattr { image, args } => {
            let (change, paths) = inode_flags::parse_chattr(&args).map_err(usage_error)?;
            with_writable_image(&image, |fs| inode_flags::chattr(fs, &change, paths))
        }
        Command::Getfacl { image, paths } => acl_edit::getfacl(&open(&image)?, &paths),
        Command::Setfacl { image, args } => {
            let args = acl_edit::parse_setfacl(&args).map_err(usage_error)?;
            with_writable_image(&image, |fs| acl_edit::setfacl(fs, &args))
        }
        Command::Truncate { size, image, path } => with_writable_image(&image, |fs| {
            attribute_edit::truncate(fs, size, ImagePath(&path))
        }),
    }
}

/// A usage error found after clap parsed (a command that parses its own arguments, as
/// chattr's modes): one line, exit status 2, as clap's own.
fn usage_error(message: String) -> CliError {
    eprintln!("e4: {message} (see 'e4 --help')");
    CliError::Reported(EXIT_USAGE)
}

fn main() -> ExitCode {
    // A panic is a bug in e4; report it on one line rather than with a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string().replace('\n', " ");
        eprintln!("e4: internal error (please report): {message}");
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap prints them to stdout.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's first paragraph, on one line: a missing argument's name is on the
            // lines after "the following required arguments were not provided:".
            let rendered = e.render().to_string();
            let paragraph: Vec<&str> = rendered
                .lines()
                .take_while(|line| !line.trim().is_empty())
                .map(str::trim)
                .collect();
            let joined = paragraph.join(" ");
            let message = joined.strip_prefix("error: ").unwrap_or(&joined);
            eprintln!("e4: {message} (see 'e4 --help')");
            // fsck keeps e2fsck's usage status, 16.
            let fsck = std::env::args().nth(1).is_some_and(|a| a == "fsck");
            return ExitCode::from(if fsck {
                e4_fsck::report::EXIT_USAGE
            } else {
                EXIT_USAGE
            });
        }
    };
    if let Command::Fsck {
        image,
        no_changes,
        force,
        threads,
        json,
        progress,
        timings,
    } = cli.command
    {
        purge_freed_memory_at_once();
        return ExitCode::from(fsck::run(&fsck::FsckArgs {
            image,
            no_changes,
            force,
            threads: threads.map(usize::from),
            json,
            progress,
            timings,
        }));
    }
    match run(cli) {
        Ok(()) | Err(CliError::StdoutClosed) => ExitCode::SUCCESS,
        Err(CliError::Message(message)) => {
            eprintln!("e4: {message}");
            ExitCode::from(EXIT_RUNTIME)
        }
        Err(CliError::Reported(status)) => ExitCode::from(status),
    }
}
