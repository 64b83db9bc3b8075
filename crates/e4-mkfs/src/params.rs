//! From options to parameters: what mke2fs's `PRS` decides before it lays anything out. The
//! type list (`-t`, the size type or `-T`), the block size, features, inode size and ratio,
//! flex_bg size, reserved blocks and the journal request, each from the options, else the
//! profile, else mke2fs's built-in default.

use e4_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};

use crate::error::{invalid, MkfsError, Result};
use crate::features::{edit_mount_options, FeatureSet};
use crate::profile::Profile;
use crate::size::parse_size;

/// The options of `e4 mkfs`, with mke2fs's meanings. `None` is "not given".
#[derive(Debug, Clone, Default)]
pub struct MkfsOptions {
    /// `-t`: ext2, ext3 or ext4 (default ext4).
    pub fs_type: Option<String>,
    /// `-T`: usage types, comma-separated (default: by size, floppy/small/default/big/huge).
    pub usage_types: Option<String>,
    /// `-b`: block size in bytes.
    pub block_size: Option<u32>,
    /// `-I`: inode size in bytes.
    pub inode_size: Option<u32>,
    /// `-N`: number of inodes wanted.
    pub inodes: Option<u64>,
    /// `-i`: bytes per inode.
    pub bytes_per_inode: Option<u64>,
    /// `-m`: percentage of blocks reserved for the superuser.
    pub reserved_percent: Option<f64>,
    /// `-O`: feature edits.
    pub features: Option<String>,
    /// `-L`: volume label.
    pub label: Option<String>,
    /// `-U`: the UUID, `clear` or `random`.
    pub uuid: Option<String>,
    /// `-E`: extended options, comma-separated.
    pub extended: Option<String>,
    /// `-J`: journal options (`size=MB`).
    pub journal: Option<String>,
    /// SIZE: the filesystem size (bytes with a suffix; a bare number counts `-b` blocks or
    /// KiB). `None`: the image's current size.
    pub size: Option<String>,
    /// `-e`: behaviour on errors (continue, remount-ro, panic).
    pub errors_behavior: Option<String>,
    /// `-G`: groups per flex group.
    pub flex_bg_size: Option<u32>,
    /// `-g`: blocks per group.
    pub blocks_per_group: Option<u32>,
    /// `-M`: the directory recorded as last mounted on.
    pub last_mounted: Option<String>,
    /// `SOURCE_DATE_EPOCH`: the time written everywhere, and the seed of the UUID and hash
    /// seed when `-U` / `-E hash_seed=` are not given.
    pub source_date_epoch: Option<i64>,
}

/// Everything decided before the layout.
#[derive(Debug, Clone)]
pub struct Params {
    pub block_size: u32,
    /// Blocks requested (the layout may drop a too-small last group).
    pub blocks: u64,
    pub features: FeatureSet,
    pub inode_size: u32,
    /// Inodes requested (the layout rounds to whole inode-table blocks per group).
    pub inodes: u64,
    pub reserved_blocks: u64,
    pub log_groups_per_flex: u8,
    pub default_mount_opts: u32,
    pub hash_version: u8,
    /// `-J size=` in MiB, if given.
    pub journal_size_mib: Option<u64>,
    /// Whether a journal is made (has_journal, or `-J`).
    pub journal: bool,
    /// Inode tables are left for the kernel to zero (`lazy_itable_init`), so groups are not
    /// marked `ITABLE_ZEROED`.
    pub lazy_itable_init: bool,
    pub uuid: [u8; 16],
    pub hash_seed: [u8; 16],
    pub label: [u8; 16],
    /// The time of creation written to the superblock and the inodes.
    pub now: i64,
    /// `s_errors`.
    pub errors: u16,
    /// Owner of the root directory (`-E root_owner=`).
    pub root_owner: (u32, u32),
    /// Blocks per group, if `-g` gave it.
    pub blocks_per_group: Option<u64>,
    /// `s_last_mounted`.
    pub last_mounted: [u8; 64],
}

const MIB: u64 = 1 << 20;

/// Decides the parameters for an image whose current size is `existing_bytes` (used when
/// no SIZE is given).
pub fn decide(opts: &MkfsOptions, profile: &Profile, existing_bytes: u64) -> Result<Params> {
    // A bare SIZE and the size type count blocks of the -b size, or KiB without it.
    if let Some(b) = opts.block_size {
        if !(1024..=65536).contains(&b) || !b.is_power_of_two() {
            return Err(invalid(
                "block size (-b)",
                format!("{b} is not a power of two from 1024 to 65536"),
            ));
        }
    }
    let provisional = u64::from(opts.block_size.unwrap_or(1024));
    let bytes = match &opts.size {
        Some(text) => parse_size(text, provisional)?,
        None => existing_bytes,
    };
    if bytes == 0 {
        return Err(MkfsError::Geometry(
            "the image is empty and no SIZE was given".into(),
        ));
    }
    let mut fs_blocks = bytes / provisional;

    let ext_type = opts.fs_type.clone().unwrap_or_else(|| "ext4".into());
    if !matches!(ext_type.as_str(), "ext2" | "ext3" | "ext4") {
        return Err(invalid(
            "filesystem type (-t)",
            format!("{ext_type:?}: e4 mkfs makes ext2, ext3 and ext4"),
        ));
    }
    if ext_type != "ext2" && !profile.has_fs_type(&ext_type) {
        return Err(MkfsError::Profile {
            path: "mke2fs.conf".into(),
            reason: format!("the profile does not define the {ext_type} filesystem type"),
        });
    }
    let meg = MIB / provisional;
    let size_type = if fs_blocks < 3 * meg {
        "floppy"
    } else if fs_blocks < 512 * meg {
        "small"
    } else if fs_blocks < 4 * 1024 * 1024 * meg {
        "default"
    } else if fs_blocks < 16 * 1024 * 1024 * meg {
        "big"
    } else {
        "huge"
    };
    let mut types = vec![ext_type.clone()];
    let usage = opts.usage_types.as_deref().unwrap_or(size_type);
    for t in usage.split(',').filter(|t| !t.is_empty()) {
        if profile.has_fs_type(t) {
            types.push(t.to_string());
        } else if t != "default" {
            return Err(invalid(
                "usage type (-T)",
                format!("{t:?} is not defined in mke2fs.conf"),
            ));
        }
    }

    let mut features = FeatureSet::default();
    features.edit(
        profile
            .get(&types, "base_features")
            .unwrap_or("sparse_super,large_file,filetype,resize_inode,dir_index"),
        "base_features",
    )?;
    let default_mount_opts = edit_mount_options(
        profile
            .get(&types, "default_mntopts")
            .unwrap_or("acl,user_xattr"),
        0,
    )?;
    for t in &types {
        if let Some(list) = profile.type_features(t) {
            features.edit(list, "features")?;
        }
    }
    match &opts.features {
        Some(edits) => features.edit(edits, "-O")?,
        None => features.edit(
            profile.get(&types, "default_features").unwrap_or(""),
            "default_features",
        )?,
    }

    let journal_size_mib = match &opts.journal {
        None => None,
        Some(j) => Some(parse_journal_options(j)?),
    };
    let journal = features.has_compat(CompatFeatures::HAS_JOURNAL) || journal_size_mib.is_some();
    if journal {
        features.set_compat(CompatFeatures::HAS_JOURNAL);
    }

    let block_size = match opts.block_size {
        Some(b) => b,
        None => {
            let from_profile = profile.get_int(&types, "blocksize", 4096)?;
            // -1: the page size (4096 on the machines e4 runs on).
            let b = if from_profile <= 0 {
                4096
            } else {
                from_profile
            };
            if !(1024..=65536).contains(&b) || !(b as u64).is_power_of_two() {
                return Err(invalid("blocksize in mke2fs.conf", b.to_string()));
            }
            fs_blocks /= b as u64 / 1024;
            b as u32
        }
    };

    if features.has_ro_compat(RoCompatFeatures::METADATA_CSUM) {
        features.clear_ro_compat(RoCompatFeatures::GDT_CSUM);
    }
    if features.has_compat(CompatFeatures::RESIZE_INODE)
        && !features.has_ro_compat(RoCompatFeatures::SPARSE_SUPER)
    {
        return Err(invalid(
            "features",
            "reserved online resize blocks (resize_inode) need sparse_super",
        ));
    }
    // mke2fs's own refusals of feature pairs.
    if features.has_incompat(IncompatFeatures::BIT64)
        && !features.has_incompat(IncompatFeatures::EXTENTS)
    {
        return Err(invalid(
            "features",
            "64bit needs extent (a block-mapped file cannot address 64-bit blocks); add -O extent or -O ^64bit",
        ));
    }
    if features.has_incompat(IncompatFeatures::CSUM_SEED)
        && !features.has_ro_compat(RoCompatFeatures::METADATA_CSUM)
    {
        return Err(invalid(
            "features",
            "metadata_csum_seed needs metadata_csum",
        ));
    }
    if fs_blocks > u64::from(u32::MAX) && !features.has_incompat(IncompatFeatures::BIT64) {
        return Err(MkfsError::Geometry(format!(
            "{fs_blocks} blocks need the 64bit feature"
        )));
    }
    if fs_blocks > u64::from(u32::MAX) {
        // mke2fs: no resize inode past 2^32 blocks (it cannot address the reserved blocks).
        features.clear_compat(CompatFeatures::RESIZE_INODE);
    }
    features.check_supported()?;

    let mut lazy_itable_init =
        std::path::Path::new("/sys/fs/ext4/features/lazy_itable_init").exists();
    lazy_itable_init = profile.get_bool(&types, "lazy_itable_init", lazy_itable_init);
    let mut hash_seed = None;
    let mut root_owner = (0, 0);
    if let Some(ext) = &opts.extended {
        for word in ext.split(',').filter(|w| !w.is_empty()) {
            let (name, value) = word.split_once('=').unwrap_or((word, ""));
            match name {
                "hash_seed" => hash_seed = Some(parse_uuid(value, "-E hash_seed")?),
                "lazy_itable_init" => lazy_itable_init = value != "0",
                // Nothing to discard or to zero lazily: e4 writes a fresh file.
                "lazy_journal_init" | "nodiscard" | "discard" => {}
                "root_owner" => root_owner = parse_owner(value)?,
                _ => return Err(MkfsError::Unsupported(format!("extended option -E {name}"))),
            }
        }
    }

    let flex_bg_size = match (
        opts.flex_bg_size,
        features.has_incompat(IncompatFeatures::FLEX_BG),
    ) {
        (Some(_), false) => {
            return Err(invalid(
                "flex_bg size (-G)",
                "the flex_bg feature is not enabled",
            ))
        }
        (Some(size), true) => i64::from(size),
        (None, true) => profile.get_int(&types, "flex_bg_size", 16)?,
        (None, false) => 0,
    };
    if flex_bg_size != 0 && (flex_bg_size < 1 || !(flex_bg_size as u64).is_power_of_two()) {
        return Err(invalid("flex_bg_size", "must be a power of two"));
    }
    let log_groups_per_flex = if flex_bg_size > 0 {
        flex_bg_size.trailing_zeros() as u8
    } else {
        0
    };

    let inode_size = match opts.inode_size {
        Some(s) => s,
        None => profile.get_int(&types, "inode_size", 128)? as u32,
    };
    if inode_size < 128 || inode_size > block_size || !inode_size.is_power_of_two() {
        return Err(invalid(
            "inode size (-I)",
            format!("{inode_size} is not a power of two from 128 to the block size {block_size}"),
        ));
    }
    if features.has_incompat(IncompatFeatures::INLINE_DATA) && inode_size == 128 {
        return Err(invalid(
            "inode size (-I)",
            "inline_data needs inodes larger than 128 bytes",
        ));
    }

    let inode_ratio = match opts.bytes_per_inode {
        Some(r) => {
            if !(1024..=(64 << 20)).contains(&r) {
                return Err(invalid(
                    "bytes per inode (-i)",
                    format!("{r} is not from 1024 to 67108864"),
                ));
            }
            r
        }
        None => (profile.get_int(&types, "inode_ratio", 8192)? as u64).max(u64::from(block_size)),
    };
    let inodes = match opts.inodes {
        Some(n) => n,
        None => {
            let n = fs_blocks * u64::from(block_size) / inode_ratio;
            n.min(u64::from(u32::MAX))
        }
    };
    if inodes * u64::from(inode_size) >= fs_blocks * u64::from(block_size) {
        return Err(MkfsError::Geometry(format!(
            "inode_size ({inode_size}) * inodes_count ({inodes}) too big for a filesystem with {fs_blocks} blocks"
        )));
    }

    let reserved_percent = match opts.reserved_percent {
        Some(m) => m,
        None => profile
            .get(&types, "reserved_ratio")
            .map(|v| v.parse::<f64>().map_err(|_| invalid("reserved_ratio", v)))
            .transpose()?
            .unwrap_or(5.0),
    };
    if !(0.0..=50.0).contains(&reserved_percent) {
        return Err(invalid(
            "reserved blocks percentage (-m)",
            format!("{reserved_percent} is not from 0 to 50"),
        ));
    }
    let reserved_blocks = (reserved_percent * fs_blocks as f64 / 100.0) as u64;

    let hash_version = match profile.get(&types, "hash_alg").unwrap_or("half_md4") {
        "legacy" => 0,
        "half_md4" => 1,
        "tea" => 2,
        other => return Err(invalid("hash_alg", format!("{other:?}"))),
    };
    let errors_name = opts
        .errors_behavior
        .as_deref()
        .or(profile.get(&types, "errors"));
    let errors = match errors_name {
        None | Some("continue") => 1,
        Some("remount-ro") => 2,
        Some("panic") => 3,
        Some(other) => return Err(invalid("errors", format!("{other:?}"))),
    };

    // The tick's time, as mke2fs's time(2): a finer clock runs up to a tick ahead of it
    // just after a second begins, and an e2fsck started within that tick found the
    // superblock's times in the future.
    let now = opts.source_date_epoch.unwrap_or_else(tick_seconds);
    let uuid = match opts.uuid.as_deref() {
        Some("clear") => [0; 16],
        Some("random") | None => derived_uuid(opts.source_date_epoch, b"uuid")?,
        Some(text) => parse_uuid(text, "-U")?,
    };
    let hash_seed = match hash_seed {
        Some(seed) => seed,
        None => derived_uuid(opts.source_date_epoch, b"hash_seed")?,
    };
    let blocks_per_group = match opts.blocks_per_group {
        None => None,
        Some(g) if g < 256 || g > 8 * block_size || g % 8 != 0 => {
            return Err(invalid(
                "blocks per group (-g)",
                format!("{g} is not a multiple of 8 from 256 to {}", 8 * block_size),
            ))
        }
        Some(g) => Some(u64::from(g)),
    };
    let mut last_mounted = [0u8; 64];
    if let Some(dir) = &opts.last_mounted {
        let n = dir.len().min(64);
        last_mounted[..n].copy_from_slice(&dir.as_bytes()[..n]);
    }
    let mut label = [0u8; 16];
    if let Some(l) = &opts.label {
        if l.len() > 16 {
            return Err(invalid(
                "volume label (-L)",
                format!("{l:?} is longer than 16 bytes"),
            ));
        }
        label[..l.len()].copy_from_slice(l.as_bytes());
    }

    Ok(Params {
        block_size,
        blocks: fs_blocks,
        features,
        inode_size,
        inodes,
        reserved_blocks,
        log_groups_per_flex,
        default_mount_opts,
        hash_version,
        journal_size_mib,
        journal,
        lazy_itable_init,
        uuid,
        hash_seed,
        label,
        now,
        errors,
        root_owner,
        blocks_per_group,
        last_mounted,
    })
}

/// `-J size=MB` (the only journal option e4 takes).
fn parse_journal_options(text: &str) -> Result<u64> {
    let mut size = None;
    for word in text.split(',').filter(|w| !w.is_empty()) {
        match word.split_once('=') {
            Some(("size", v)) => {
                size = Some(v.parse::<u64>().map_err(|_| invalid("-J size", v))?);
            }
            _ => return Err(MkfsError::Unsupported(format!("journal option -J {word}"))),
        }
    }
    size.ok_or_else(|| invalid("-J", "expected size=MB"))
}

/// A UUID in its usual text form.
pub fn parse_uuid(text: &str, option: &str) -> Result<[u8; 16]> {
    let hex: String = text.chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 || text.len() != 36 {
        return Err(invalid(option, format!("{text:?} is not a UUID")));
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| invalid(option, format!("{text:?} is not a UUID")))?;
    }
    Ok(out)
}

fn parse_owner(text: &str) -> Result<(u32, u32)> {
    let bad = || invalid("-E root_owner", format!("{text:?} is not UID:GID"));
    let (u, g) = text.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

/// A version-4 UUID: derived from `SOURCE_DATE_EPOCH` and `purpose` when the epoch is set
/// (so the same inputs make the same image), else random from the kernel.
fn derived_uuid(epoch: Option<i64>, purpose: &[u8]) -> Result<[u8; 16]> {
    let mut out = [0u8; 16];
    match epoch {
        Some(epoch) => {
            let mut state = crc32c::crc32c(purpose);
            for (i, chunk) in out.chunks_mut(4).enumerate() {
                let mut input = epoch.to_le_bytes().to_vec();
                input.extend_from_slice(purpose);
                input.push(i as u8);
                state = crc32c::crc32c_append(state, &input);
                chunk.copy_from_slice(&state.to_le_bytes());
            }
        }
        None => {
            use std::io::Read;
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut out))
                .map_err(|source| MkfsError::Io {
                    path: "/dev/urandom".into(),
                    source,
                })?;
        }
    }
    out[6] = (out[6] & 0x0F) | 0x40;
    out[8] = (out[8] & 0x3F) | 0x80;
    Ok(out)
}

/// The seconds of the last timer tick, as `time(2)` reads them (the coarse clock always
/// exists on Linux; the fine one stands in should it not).
fn tick_seconds() -> i64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE).map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        },
        |t| t.tv_sec(),
    )
}
