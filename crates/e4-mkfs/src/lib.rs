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
mod fit;
mod layout;
mod params;
mod profile;
mod size;
mod write;

use std::fs::OpenOptions;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

pub use error::{MkfsError, Result};
pub use features::FeatureSet;
pub use fit::{size_to_fit, TreeUsage};
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

/// Makes a filesystem in the image at `path` with `profile`. An image file is created if it
/// does not exist; an existing one is emptied first (everything mke2fs would zero then
/// reads as zeros) and keeps its size when no SIZE is given. A block device keeps its size
/// when no SIZE is given, and what must read as zeros is zeroed on it first.
pub fn make_filesystem_with(path: &Path, opts: &MkfsOptions, profile: &Profile) -> Result<Made> {
    let io = |source| MkfsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (device, existing) = match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_file() => (false, m.len()),
        Ok(m) if m.file_type().is_block_device() => (true, device_size(path).map_err(io)?),
        Ok(_) => {
            return Err(MkfsError::Unsupported(
                "making a filesystem on anything but an image file or a block device".into(),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (false, 0),
        Err(e) => return Err(io(e)),
    };
    let (params, mut layout, files) = build(opts, profile, existing)?;
    if device && params.blocks * u64::from(params.block_size) > existing {
        return Err(MkfsError::Geometry(format!(
            "the size asked for is larger than the device ({existing} bytes)"
        )));
    }

    let (file, zeros) = if device {
        // A device keeps whatever an earlier filesystem left: what must read as zeros is
        // zeroed first (mke2fs does the same, or discards).
        let file = OpenOptions::new().write(true).open(path).map_err(io)?;
        let zeros = device_zeros(&layout, &files, params.lazy_itable_init);
        (file, zeros)
    } else {
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
        (file, Vec::new())
    };
    write::write_image(
        &mut layout,
        &files,
        &file,
        path,
        params.lazy_itable_init,
        &zeros,
    )?;
    file.sync_all().map_err(io)?;
    Ok(Made {
        block_size: params.block_size,
        blocks: layout.sb.blocks_count(),
        inodes: layout.sb.inodes_count,
        groups: layout.groups(),
        journal_blocks: files.journal_blocks,
    })
}

/// Decides the parameters and makes the filesystem in memory: the layout with its
/// superblock and descriptors, and the files' inodes and blocks, nothing written yet.
/// `existing` is the target's size, used when no SIZE is given.
fn build(
    opts: &MkfsOptions,
    profile: &Profile,
    existing: u64,
) -> Result<(params::Params, layout::Layout, files::Files)> {
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

    Ok((params, layout, files))
}

/// The size of the block device at `path`.
fn device_size(path: &Path) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    std::fs::File::open(path)?.seek(SeekFrom::End(0))
}

/// Byte ranges `(offset, length)` of a device that must read as zeros before the
/// filesystem's blocks go on it: the rest of the superblock's first 4 KiB (mke2fs's
/// `zap_sector`), the journal, the inode tables the kernel and e2fsck will read (all of
/// them unless they are left for lazy initialization under group checksums), the reserved
/// GDT blocks' backups, and the last 64 KiB or more (where RAID and other signatures live,
/// as mke2fs wipes them).
fn device_zeros(
    layout: &layout::Layout,
    files: &files::Files,
    lazy_itable_init: bool,
) -> Vec<(u64, u64)> {
    let bs = layout.block_size();
    let blocks = layout.sb.blocks_count();
    let mut out = vec![(1024, 3072)];
    out.extend(
        files
            .journal_runs
            .iter()
            .map(|&(start, len)| (start * bs, len * bs)),
    );
    let csum = layout.sb.has_metadata_csum()
        || layout
            .sb
            .ro_compat()
            .contains(e4_format::features::RoCompatFeatures::GDT_CSUM);
    if !lazy_itable_init || !csum {
        for desc in &layout.descriptors {
            out.push((desc.inode_table() * bs, layout.inode_blocks_per_group * bs));
        }
    }
    let rsv = u64::from(layout.sb.reserved_gdt_blocks);
    for g in 1..layout.groups() {
        if layout.sb.group_has_superblock(g) {
            let start = layout.group_first_block(g) + 1 + layout.desc_blocks;
            out.push((start * bs, rsv * bs));
        }
    }
    let wipe = (65536 / bs).max(1);
    let mut start = blocks & !(wipe - 1);
    if start > wipe {
        start -= wipe;
    }
    if start > 0 {
        out.push((start * bs, (blocks - start) * bs));
    }
    out
}
