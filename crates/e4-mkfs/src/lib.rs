//! Making an ext2/3/4 filesystem in an image file, as mke2fs 1.47 makes it: the same
//! defaults (mke2fs.conf or its built-in profile), the same geometry (groups, inode
//! tables, flex_bg packing, reserved GDT blocks, backups, journal size and place) and the
//! same empty filesystem (root, lost+found, resize inode, journal with an empty log), byte
//! for byte but for `s_kbytes_written`, given the same UUID, hash seed and time.
//!
//! ```no_run
//! use e4_mkfs::{make_filesystem, MkfsOptions};
//! let opts = MkfsOptions { size: Some("64M".into()), ..Default::default() };
//! let made = make_filesystem("disk.img".as_ref(), &opts).unwrap();
//! println!("{} blocks of {} bytes", made.blocks, made.block_size);
//! ```
//!
//! Filling the filesystem with a tree is the engine's business (`e4 mkfs -d` opens the
//! made image with e4-fs and imports into it).

mod block_map;
mod error;
mod features;
mod files;
mod layout;
mod params;
mod profile;
mod size;
mod write;

use std::fs::OpenOptions;
use std::path::Path;

pub use error::{MkfsError, Result};
pub use features::FeatureSet;
pub use params::{parse_uuid, MkfsOptions};
pub use profile::{Profile, BUILT_IN as BUILT_IN_PROFILE};
pub use size::parse_size;

/// What was made.
#[derive(Debug, Clone)]
pub struct Made {
    pub block_size: u32,
    pub blocks: u64,
    pub inodes: u32,
    pub groups: u32,
    pub journal_blocks: u64,
}

/// Makes a filesystem in the image at `path`, with the profile mke2fs would read.
pub fn make_filesystem(path: &Path, opts: &MkfsOptions) -> Result<Made> {
    make_filesystem_with(path, opts, &Profile::load_default()?)
}

/// Makes a filesystem in the image at `path` with `profile`. The file is created if it
/// does not exist; an existing one is emptied first (everything mke2fs would zero then
/// reads as zeros) and keeps its size when no SIZE is given.
pub fn make_filesystem_with(path: &Path, opts: &MkfsOptions, profile: &Profile) -> Result<Made> {
    let io = |source| MkfsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let existing = match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_file() => m.len(),
        Ok(_) => {
            return Err(MkfsError::Unsupported(
                "making a filesystem on anything but a regular image file".into(),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io(e)),
    };
    let params = params::decide(opts, profile, existing)?;
    let mut layout = layout::lay_out(&params)?;
    let sb = &mut layout.sb;
    sb.uuid = params.uuid;
    for (i, word) in sb.hash_seed.iter_mut().enumerate() {
        *word = u32::from_le_bytes(
            params.hash_seed[4 * i..4 * i + 4]
                .try_into()
                .unwrap_or_default(),
        );
    }
    sb.def_hash_version = params.hash_version;
    sb.volume_name = params.label;
    sb.last_mounted = params.last_mounted;
    sb.max_mnt_count = u16::MAX;
    sb.mkfs_time = params.now as u32;
    sb.mkfs_time_hi = (params.now >> 32) as u8;
    sb.lastcheck = params.now as u32;
    sb.lastcheck_hi = (params.now >> 32) as u8;
    sb.set_write_time(params.now);
    if sb.has_metadata_csum() {
        sb.checksum_type = 1;
    }
    if sb
        .incompat()
        .contains(e4_format::features::IncompatFeatures::CSUM_SEED)
    {
        sb.checksum_seed = e4_format::checksum::fs_csum_seed(&sb.uuid);
    }
    // mke2fs counts its writes from 1 when any ext4 feature is on.
    let ext4ish = params
        .features
        .has_incompat(e4_format::features::IncompatFeatures::FLEX_BG)
        || params.features.ro_compat
            & (e4_format::features::RoCompatFeatures::HUGE_FILE
                | e4_format::features::RoCompatFeatures::GDT_CSUM
                | e4_format::features::RoCompatFeatures::DIR_NLINK
                | e4_format::features::RoCompatFeatures::METADATA_CSUM
                | e4_format::features::RoCompatFeatures::EXTRA_ISIZE)
                .bits()
            != 0;
    sb.kbytes_written = u64::from(ext4ish);
    // s_overhead_clusters: the group tables, the journal and the blocks before the first
    // group, as mke2fs 1.47 counts them.
    let tables: u64 = (0..layout.groups())
        .map(|g| {
            let first = layout.group_first_block(g);
            let last = layout.group_last_block(g);
            (last + 1 - first) - layout.map.free_in(first, last + 1)
        })
        .sum();
    let files = files::make_files(&mut layout, &params)?;
    layout.sb.overhead_clusters =
        (tables + files.journal_blocks + u64::from(layout.sb.first_data_block)) as u32;
    if let Some((i_block, size)) = files.journal_backup {
        for (i, word) in layout.sb.jnl_blocks.iter_mut().take(15).enumerate() {
            *word = u32::from_le_bytes(i_block[4 * i..4 * i + 4].try_into().unwrap_or_default());
        }
        layout.sb.jnl_blocks[15] = (size >> 32) as u32;
        layout.sb.jnl_blocks[16] = size as u32;
    }

    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(io)?;
    // With a SIZE the file ends where the filesystem does (as mke2fs leaves a file it
    // created: its last write is the zeroing of the filesystem's end).
    let image_bytes = if opts.size.is_some() {
        layout.sb.blocks_count() * u64::from(params.block_size)
    } else {
        existing
    };
    file.set_len(image_bytes).map_err(io)?;
    write::write_image(&mut layout, &files, &file, path, params.lazy_itable_init)?;
    file.sync_all().map_err(io)?;
    Ok(Made {
        block_size: params.block_size,
        blocks: layout.sb.blocks_count(),
        inodes: layout.sb.inodes_count,
        groups: layout.groups(),
        journal_blocks: files.journal_blocks,
    })
}
