//! `e4 mkfs`: parses mke2fs's options and hands them to e4-mkfs; with `-d`, fills the new
//! filesystem from a host tree through the engine, as `e4 import` does.

use std::path::{Path, PathBuf};

use clap::ArgAction;
use e4_mkfs::{make_filesystem, size_to_fit, MkfsOptions, Profile, TreeUsage};

use e4_fs::OpenOptions;

use crate::edit_session::{with_writable_image_options, ImagePath};
use crate::file_contexts::FileContexts;
use crate::fs_config::FsConfig;
use crate::id_map::{IdMap, IdRule};
use crate::import::ImportPolicy;
use crate::output::CliError;

/// The options of `e4 mkfs`, with mke2fs's letters and meanings.
#[derive(clap::Args)]
pub struct MkfsArgs {
    /// The image file (created if missing) or block device.
    image: PathBuf,
    /// Filesystem size: bytes with a suffix K, M, G, T, or a count of -b blocks (KiB
    /// without -b). Default: the image's or the device's current size.
    size: Option<String>,
    /// Filesystem type: ext2, ext3 or ext4 (default ext4); once, as mke2fs takes it.
    #[arg(short = 't', action = ArgAction::Append)]
    fs_type: Vec<String>,
    /// Usage types from mke2fs.conf (news, largefile, ...), comma-separated; once, as
    /// mke2fs takes them.
    #[arg(short = 'T', action = ArgAction::Append)]
    usage_types: Vec<String>,
    /// Block size in bytes.
    #[arg(short = 'b')]
    block_size: Option<u32>,
    /// Inode size in bytes.
    #[arg(short = 'I')]
    inode_size: Option<u32>,
    /// Number of inodes.
    #[arg(short = 'N')]
    inodes: Option<u64>,
    /// Bytes per inode.
    #[arg(short = 'i')]
    bytes_per_inode: Option<u64>,
    /// Percentage of blocks reserved for the superuser.
    #[arg(short = 'm')]
    reserved_percent: Option<f64>,
    /// Features to set or (with ^) clear, comma-separated; repeated -O add up, as in
    /// mke2fs.
    #[arg(short = 'O', action = ArgAction::Append)]
    features: Vec<String>,
    /// Volume label.
    #[arg(short = 'L')]
    label: Option<String>,
    /// UUID (or clear, random).
    #[arg(short = 'U')]
    uuid: Option<String>,
    /// Extended options: hash_seed=UUID, lazy_itable_init=0|1, root_owner=UID:GID;
    /// repeated -E add up, as in mke2fs.
    #[arg(short = 'E', action = ArgAction::Append)]
    extended: Vec<String>,
    /// Journal options: size=MiB; repeated -J add up (the last size wins), as in mke2fs.
    #[arg(short = 'J', action = ArgAction::Append)]
    journal: Vec<String>,
    /// Behaviour on errors: continue, remount-ro or panic.
    #[arg(short = 'e')]
    errors_behavior: Option<String>,
    /// Groups per flex group (a power of two).
    #[arg(short = 'G')]
    flex_bg_size: Option<u32>,
    /// Blocks per group.
    #[arg(short = 'g')]
    blocks_per_group: Option<u32>,
    /// The directory recorded as last mounted on.
    #[arg(short = 'M')]
    last_mounted: Option<String>,
    /// mke2fs options e4 mkfs does not implement (-c, -l, -C, -D, -n, -o, -r, -S, -z):
    /// accepted by the parser only to be refused by name.
    #[arg(short = 'c', hide = true, action = ArgAction::Count)]
    check_bad_blocks: u8,
    #[arg(short = 'l', hide = true)]
    bad_blocks_file: Option<String>,
    #[arg(short = 'C', hide = true)]
    cluster_size: Option<String>,
    #[arg(short = 'D', hide = true)]
    direct_io: bool,
    #[arg(short = 'n', hide = true)]
    dry_run: bool,
    #[arg(short = 'o', hide = true)]
    creator_os: Option<String>,
    #[arg(short = 'r', hide = true)]
    revision: Option<String>,
    #[arg(short = 'S', hide = true)]
    super_only: bool,
    #[arg(short = 'z', hide = true)]
    undo_file: Option<String>,
    /// Copy this directory's tree into the new filesystem.
    #[arg(short = 'd')]
    source: Option<PathBuf>,
    /// With -d: every file owned by UID:GID (numeric), whoever owns it on the host.
    #[arg(long, value_parser = parse_owner, requires = "source")]
    owner: Option<(u32, u32)>,
    /// With -d: host uids mapped as a user namespace maps them (the lines of
    /// /proc/PID/uid_map, comma-separated): host uids OUTSIDE.. become INSIDE.. in the
    /// image, and a uid in no range becomes 65534, as the namespace sees it.
    #[arg(
        long,
        value_name = "INSIDE:OUTSIDE:COUNT[,...]",
        value_parser = IdMap::parse,
        requires = "source",
        conflicts_with = "owner"
    )]
    uid_map: Option<IdMap>,
    /// With -d: host gids mapped as --uid-map maps uids.
    #[arg(
        long,
        value_name = "INSIDE:OUTSIDE:COUNT[,...]",
        value_parser = IdMap::parse,
        requires = "source",
        conflicts_with = "owner"
    )]
    gid_map: Option<IdMap>,
    /// With -d: each entry's owner, mode and file capabilities from FILE, in the canned
    /// fs_config format e2fsdroid reads (-C): `PATH UID GID MODE [capabilities=N]` per line,
    /// PATH relative to the image's root; every entry but the root must have a line.
    #[arg(long, value_name = "FILE", value_parser = FsConfig::load, requires = "source")]
    fs_config: Option<FsConfig>,
    /// With -d: each entry's SELinux label (security.selinux) from FILE, in the
    /// file_contexts format libselinux and e2fsdroid (-S) read: `REGEX [TYPE] CONTEXT` per
    /// line, matched against the entry's absolute path in the image, the last match winning
    /// (an exact path over any pattern).
    #[arg(long, value_name = "FILE", value_parser = FileContexts::load, requires = "source")]
    file_contexts: Option<FileContexts>,
    /// With -d and no SIZE: free space and inodes left beyond what the tree takes, in percent
    /// (default 10).
    #[arg(long, default_value_t = 10)]
    margin: u64,
    /// Worker threads for -d; all cores by default.
    #[arg(short = 'j', long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Print nothing on success.
    #[arg(short = 'q')]
    quiet: bool,
    /// Accepted for mke2fs compatibility: e4 mkfs always writes the image it is given.
    #[arg(short = 'F', action = ArgAction::Count)]
    force: u8,
}

/// Refuses, in one line naming them, the mke2fs options given that e4 mkfs does not
/// implement (`(option, given)` pairs).
fn refuse_unsupported(options: &[(&str, bool)]) -> Result<(), CliError> {
    let given: Vec<&str> = options
        .iter()
        .filter(|(_, g)| *g)
        .map(|(o, _)| *o)
        .collect();
    if given.is_empty() {
        Ok(())
    } else {
        Err(CliError::Message(format!(
            "not supported by e4 mkfs: mke2fs option {}",
            given.join(", ")
        )))
    }
}

/// Runs `e4 mkfs`; `source_date_epoch` is the environment's `SOURCE_DATE_EPOCH`.
pub fn run(args: MkfsArgs, source_date_epoch: Option<i64>) -> Result<(), CliError> {
    refuse_unsupported(&[
        ("-c", args.check_bad_blocks > 0),
        ("-l", args.bad_blocks_file.is_some()),
        ("-C", args.cluster_size.is_some()),
        ("-D", args.direct_io),
        ("-n", args.dry_run),
        ("-o", args.creator_os.is_some()),
        ("-r", args.revision.is_some()),
        ("-S", args.super_only),
        ("-z", args.undo_file.is_some()),
    ])?;

    let options = MkfsOptions {
        fs_type: Some(only_once(args.fs_type, "-t")?.unwrap_or_else(|| "ext4".into())),
        usage_types: only_once(args.usage_types, "-T")?,
        block_size: args.block_size,
        inode_size: args.inode_size,
        inodes: args.inodes,
        bytes_per_inode: args.bytes_per_inode,
        reserved_percent: args.reserved_percent,
        features: joined(args.features),
        label: args.label,
        uuid: args.uuid,
        extended: joined(args.extended),
        journal: joined(args.journal),
        size: args.size,
        errors_behavior: args.errors_behavior,
        flex_bg_size: args.flex_bg_size,
        blocks_per_group: args.blocks_per_group,
        last_mounted: args.last_mounted,
        source_date_epoch,
    };
    let image = args.image.display().to_string();
    let fitting = match &args.source {
        // -d without SIZE on a new (or empty) image file: size it to the tree.
        Some(source) if options.size.is_none() && image_is_new(&args.image) => {
            let usage = measure_tree(source)?;
            let profile = Profile::load_default().map_err(|e| CliError::Message(e.to_string()))?;
            Some(
                size_to_fit(&options, &profile, &usage, args.margin)
                    .map_err(|e| CliError::Message(format!("{image}: {e}")))?,
            )
        }
        _ => None,
    };
    let options = fitting.unwrap_or(options);
    let journal_asked = options.journal.is_some();
    let made = make_filesystem(&args.image, &options)
        .map_err(|e| CliError::Message(format!("{image}: {e}")))?;
    if journal_asked && made.journal_blocks == 0 {
        // As mke2fs, which goes on without the journal (and says so even with -q).
        eprintln!("e4: {image}: the filesystem is too small for a journal (under 2048 blocks); made without one");
    }
    if !args.quiet {
        println!(
            "{image}: {} blocks of {} bytes, {} inodes, {} groups, journal {} blocks",
            made.blocks, made.block_size, made.inodes, made.groups, made.journal_blocks
        );
    }
    if let Some(source) = &args.source {
        let rule = |one: Option<u32>, map: &Option<IdMap>| match (one, map) {
            (Some(id), _) => IdRule::All(id),
            (None, Some(map)) => IdRule::Map(map.clone()),
            (None, None) => IdRule::Keep,
        };
        let policy = ImportPolicy {
            reproducible_at: source_date_epoch,
            ordered: true,
            uids: rule(args.owner.map(|(uid, _)| uid), &args.uid_map),
            gids: rule(args.owner.map(|(_, gid)| gid), &args.gid_map),
            fs_config: args.fs_config.clone(),
            file_contexts: args.file_contexts.clone(),
        };
        fill(
            &args.image,
            &image,
            source,
            args.threads.map(usize::from),
            &policy,
        )?;
    }
    Ok(())
}

/// Copies `source`'s tree into the root of the new filesystem. A tree that does not fit
/// leaves no image behind: a half-filled one would claim to be the filesystem asked for.
///
/// With `SOURCE_DATE_EPOCH` the fill is reproducible: the engine's clock stands at the
/// epoch (every ctime, crtime, generation seed and journal commit time), commits come only
/// from the work itself (no interval commits), and the import runs one operation at a time
/// in name order with host times clamped to the epoch.
fn fill(
    path: &Path,
    image: &str,
    source: &Path,
    threads: Option<usize>,
    policy: &ImportPolicy,
) -> Result<(), CliError> {
    let mut options = OpenOptions::writable();
    // The image was just made: on an image file, nearly every block a reservation zeroes
    // is still a hole, and the punch is skipped.
    options.skip_zeroing_holes = true;
    if let Some(epoch) = policy.reproducible_at {
        e4_fs::freeze_clock(Some(epoch));
        options.commit_interval = std::time::Duration::ZERO;
        // Commits where the tree's size puts them: the log's blocks are part of the image.
        options.commit_thread = false;
    }
    let root = ImagePath(std::ffi::OsStr::new("/"));
    let result = with_writable_image_options(image, options, |fs| {
        crate::import::run_with(fs, path, source, root, threads, policy)?;
        label_lost_found(fs, policy)
    });
    if result.is_err() {
        discard_half_filled(path);
    }
    result
}

/// Labels lost+found, which mkfs made and the import did not, as e2fsdroid does under
/// `--file-contexts`.
fn label_lost_found(fs: &e4_fs::Filesystem, policy: &ImportPolicy) -> Result<(), CliError> {
    let Some(contexts) = &policy.file_contexts else {
        return Ok(());
    };
    let path = b"/lost+found";
    let Some(label) = contexts.lookup(path, crate::file_contexts::FileKind::Directory) else {
        return Ok(());
    };
    let value = crate::file_contexts::selinux_xattr(label);
    fs.resolve_bytes(path, false)
        .and_then(|ino| fs.set_xattr(ino, b"security.selinux", &value, e4_fs::XattrSet::Either))
        .map_err(|e| CliError::Message(format!("/lost+found: {e}")))
}

/// `SOURCE_DATE_EPOCH`, as reproducible-builds.org defines it: seconds since the epoch.
pub fn source_date_epoch() -> Result<Option<i64>, CliError> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Err(_) => Ok(None),
        Ok(v) => v.trim().parse().map(Some).map_err(|_| {
            CliError::Message(format!(
                "SOURCE_DATE_EPOCH={v:?} is not a number of seconds"
            ))
        }),
    }
}

/// An option mke2fs takes only once (`-t`, `-T`): a second is refused, as mke2fs refuses it.
fn only_once(given: Vec<String>, option: &str) -> Result<Option<String>, CliError> {
    if given.len() > 1 {
        return Err(CliError::Message(format!(
            "the {option} option may only be used once"
        )));
    }
    Ok(given.into_iter().next())
}

/// Repeated options that add up (`-O`, `-E`, `-J`), as one comma-separated list.
fn joined(given: Vec<String>) -> Option<String> {
    (!given.is_empty()).then(|| given.join(","))
}

/// `--owner UID:GID`.
fn parse_owner(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{text:?} is not UID:GID (numbers)");
    let (uid, gid) = text.split_once(':').ok_or_else(bad)?;
    let id = |part: &str| {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        crate::attribute_edit::parse_id(part).map_err(|why| format!("{}: {why}", bad()))
    };
    Ok((id(uid)?, id(gid)?))
}

/// Leaves nothing at `path` that claims to be the filesystem asked for: an image file is
/// removed; on a block device (which cannot be removed) the first 4 KiB, primary
/// superblock included, are zeroed, so neither mount nor blkid takes it for a filesystem.
fn discard_half_filled(path: &Path) {
    use std::os::unix::fs::FileExt;
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => {
            let _ = std::fs::remove_file(path);
        }
        Ok(_) => {
            if let Ok(device) = std::fs::OpenOptions::new().write(true).open(path) {
                let _ = device.write_all_at(&[0u8; 4096], 0);
                let _ = device.sync_all();
            }
        }
        Err(_) => {}
    }
}

/// Whether `path` is missing or an empty file (no size to keep).
fn image_is_new(path: &Path) -> bool {
    std::fs::metadata(path).map_or(true, |m| m.is_file() && m.len() == 0)
}

/// Bytes an entry of `name_len` bytes takes in a directory block (`ext4_dir_entry_2`).
fn dir_entry_bytes(name_len: usize) -> u64 {
    (8 + name_len as u64).div_ceil(4) * 4
}

/// What the tree at `root` takes in a filesystem, for each block size: each file's
/// allocated blocks (a sparse file's holes take none; a hard-linked file counts once), each
/// directory's entry blocks, long symlinks' blocks, and a block for attributes too large
/// for the inode; and one inode per distinct host inode.
fn measure_tree(root: &Path) -> Result<TreeUsage, CliError> {
    use std::collections::HashSet;
    use std::os::unix::fs::MetadataExt;
    let mut usage = TreeUsage::default();
    let mut seen = HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    let add = |usage: &mut TreeUsage, bytes: u64| {
        for (i, blocks) in usage.blocks.iter_mut().enumerate() {
            *blocks += bytes.div_ceil(1024 << i);
        }
    };
    while let Some(dir) = stack.pop() {
        let mut entry_bytes = dir_entry_bytes(1) + dir_entry_bytes(2);
        let listing = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in listing {
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            let path = entry.path();
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            entry_bytes += dir_entry_bytes(entry.file_name().len());
            if !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            usage.inodes += 1;
            let kind = meta.file_type();
            if kind.is_dir() {
                stack.push(path.clone());
            } else if kind.is_file() {
                add(
                    &mut usage,
                    (meta.blocks() * 512).min(meta.len().next_multiple_of(4096)),
                );
            } else if kind.is_symlink() && meta.len() > 59 {
                add(&mut usage, meta.len());
            }
            let xattr_bytes: u64 = xattr::list(&path)
                .map(|names| {
                    names
                        .map(|n| {
                            let value = xattr::get(&path, &n).ok().flatten().unwrap_or_default();
                            16 + n.len() as u64 + value.len() as u64
                        })
                        .sum()
                })
                .unwrap_or(0);
            if xattr_bytes > 96 {
                add(&mut usage, xattr_bytes);
            }
        }
        // Leaf blocks lose 12 bytes to the checksum tail; an indexed directory adds a root.
        add(&mut usage, entry_bytes + entry_bytes / 8 + 4096);
    }
    usage.inodes += 1;
    Ok(usage)
}
