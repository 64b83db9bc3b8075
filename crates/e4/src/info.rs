//! `e4 info`: the superblock and group summary, in the spirit of `dumpe2fs -h`.

use e4_format::features::{feature_names, FeatureKind};
use e4_format::superblock::{format_uuid, STATE_ERROR, STATE_VALID};
use e4_fs::{Filesystem, Timestamp};

use crate::outln;
use crate::output::{CliError, Output};
use crate::time_format::format_timestamp;

pub fn run(fs: &Filesystem, groups: bool) -> Result<(), CliError> {
    let mut out = Output::new();
    let sb = fs.superblock();
    let stat = fs.statfs();
    let time = |s: i64| {
        if s == 0 {
            "n/a".to_string()
        } else {
            format_timestamp(Timestamp {
                seconds: s,
                nanoseconds: 0,
            })
        }
    };
    let mut features = feature_names(FeatureKind::Compat, sb.feature_compat);
    features.extend(feature_names(FeatureKind::Incompat, sb.feature_incompat));
    features.extend(feature_names(FeatureKind::RoCompat, sb.feature_ro_compat));
    let state = match (sb.state & STATE_VALID != 0, sb.state & STATE_ERROR != 0) {
        (_, true) => "with errors",
        (true, false) => "clean",
        (false, false) => "not clean",
    };
    let rows: Vec<(&str, String)> = vec![
        ("Filesystem volume name", or_none(sb.volume_label())),
        ("Last mounted on", or_none(sb.last_mounted_on())),
        ("Filesystem UUID", format_uuid(&sb.uuid)),
        ("Filesystem magic number", format!("{:#06X}", sb.magic)),
        ("Filesystem revision #", sb.rev_level.to_string()),
        ("Filesystem features", features.join(" ")),
        ("Filesystem state", state.to_string()),
        ("Inode count", sb.inodes_count.to_string()),
        ("Block count", sb.blocks_count().to_string()),
        (
            "Reserved block count",
            sb.reserved_blocks_count().to_string(),
        ),
        ("Free blocks", stat.free_blocks.to_string()),
        ("Free inodes", stat.free_inodes.to_string()),
        ("First block", sb.first_data_block.to_string()),
        ("Block size", sb.block_size().to_string()),
        ("Group count", sb.group_count().to_string()),
        ("Blocks per group", sb.blocks_per_group.to_string()),
        ("Inodes per group", sb.inodes_per_group.to_string()),
        ("Flex block group size", sb.groups_per_flex().to_string()),
        ("Inode size", sb.inode_size().to_string()),
        ("Group descriptor size", sb.desc_size().to_string()),
        ("Reserved GDT blocks", sb.reserved_gdt_blocks.to_string()),
        ("First inode", sb.first_ino().to_string()),
        ("Filesystem created", time(sb.mkfs_time())),
        ("Last mount time", time(sb.mount_time())),
        ("Last write time", time(sb.write_time())),
        ("Mount count", sb.mnt_count.to_string()),
        (
            "Default directory hash",
            hash_name(sb.def_hash_version).to_string(),
        ),
        ("Journal inode", sb.journal_inum.to_string()),
        (
            "Checksum",
            if sb.has_metadata_csum() {
                format!("{:#010x} (crc32c)", sb.checksum)
            } else {
                "none".into()
            },
        ),
    ];
    let mut rows = rows;
    if let Some(state) = journal_state(fs) {
        rows.push(("Journal state", state));
    }
    for (label, value) in rows {
        outln!(out, "{:<26}{value}", format!("{label}:"))?;
    }
    if let Some(reason) = fs.read_only_reason() {
        outln!(out, "{:<26}{reason}", "Read-only because:")?;
    }
    if groups {
        for (g, desc) in fs.group_descriptors().iter().enumerate() {
            outln!(
                out,
                "Group {g}: block bitmap {}, inode bitmap {}, inode table {}; {} free blocks, {} free inodes, {} directories, flags {:#x}",
                desc.block_bitmap(),
                desc.inode_bitmap(),
                desc.inode_table(),
                desc.free_blocks_count(),
                desc.free_inodes_count(),
                desc.used_dirs_count(),
                desc.flags
            )?;
        }
    }
    out.finish()
}

fn or_none(s: String) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s
    }
}

fn hash_name(version: u8) -> &'static str {
    match version {
        0 => "legacy",
        1 => "half_md4",
        2 => "tea",
        3 => "legacy_unsigned",
        4 => "half_md4_unsigned",
        5 => "tea_unsigned",
        6 => "siphash",
        _ => "unknown",
    }
}

/// Whether the journal needs recovery, and so whether what this shows is the image as it is
/// or as recovery would leave it (a read-only open replays it in memory).
fn journal_state(fs: &Filesystem) -> Option<String> {
    match fs.journal_on_disk() {
        Ok(None) => None,
        Err(e) => Some(format!("cannot be used ({e}); shown as the image is")),
        Ok(Some(found)) if found.recovery_wanted && found.journal.needs_recovery() => {
            Some(format!(
                "needs recovery; shown as recovery would leave it ({})",
                fs.journal_note().unwrap_or("replayed in memory")
            ))
        }
        Ok(Some(found)) => Some(format!(
            "recovery needed: {}",
            crate::journal::recovery_state(found)
        )),
    }
}
