//! Feature flags from the superblock (`s_feature_compat`, `s_feature_incompat`,
//! `s_feature_ro_compat`), with their mke2fs names, and the rules for opening.
//!
//! An INCOMPAT feature changes how structures must be read: if e4 does not implement one, the
//! filesystem is refused. An RO_COMPAT feature only changes how it must be written: if e4 does
//! not know one, the filesystem may be read but not written.

use bitflags::bitflags;

bitflags! {
    /// `s_feature_compat`: safe to ignore for both reading and writing.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CompatFeatures: u32 {
        const DIR_PREALLOC = 0x1;
        const IMAGIC_INODES = 0x2;
        const HAS_JOURNAL = 0x4;
        const EXT_ATTR = 0x8;
        const RESIZE_INODE = 0x10;
        const DIR_INDEX = 0x20;
        const LAZY_BG = 0x40;
        const EXCLUDE_INODE = 0x80;
        const EXCLUDE_BITMAP = 0x100;
        const SPARSE_SUPER2 = 0x200;
        const FAST_COMMIT = 0x400;
        const STABLE_INODES = 0x800;
        const ORPHAN_FILE = 0x1000;
    }
}

bitflags! {
    /// `s_feature_incompat`: must be understood to read the filesystem at all.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct IncompatFeatures: u32 {
        const COMPRESSION = 0x1;
        const FILETYPE = 0x2;
        const RECOVER = 0x4;
        const JOURNAL_DEV = 0x8;
        const META_BG = 0x10;
        const EXTENTS = 0x40;
        const BIT64 = 0x80;
        const MMP = 0x100;
        const FLEX_BG = 0x200;
        const EA_INODE = 0x400;
        const DIRDATA = 0x1000;
        const CSUM_SEED = 0x2000;
        const LARGEDIR = 0x4000;
        const INLINE_DATA = 0x8000;
        const ENCRYPT = 0x10000;
        const CASEFOLD = 0x20000;
    }
}

bitflags! {
    /// `s_feature_ro_compat`: must be understood to write the filesystem.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct RoCompatFeatures: u32 {
        const SPARSE_SUPER = 0x1;
        const LARGE_FILE = 0x2;
        const BTREE_DIR = 0x4;
        const HUGE_FILE = 0x8;
        const GDT_CSUM = 0x10;
        const DIR_NLINK = 0x20;
        const EXTRA_ISIZE = 0x40;
        const HAS_SNAPSHOT = 0x80;
        const QUOTA = 0x100;
        const BIGALLOC = 0x200;
        const METADATA_CSUM = 0x400;
        const REPLICA = 0x800;
        const READONLY = 0x1000;
        const PROJECT = 0x2000;
        const SHARED_BLOCKS = 0x4000;
        const VERITY = 0x8000;
        const ORPHAN_PRESENT = 0x10000;
    }
}

/// The mke2fs name of each flag, for messages and `e4 info`.
fn name_of(kind: FeatureKind, bit: u32) -> String {
    let known = match (kind, bit) {
        (FeatureKind::Compat, 0x1) => "dir_prealloc",
        (FeatureKind::Compat, 0x2) => "imagic_inodes",
        (FeatureKind::Compat, 0x4) => "has_journal",
        (FeatureKind::Compat, 0x8) => "ext_attr",
        (FeatureKind::Compat, 0x10) => "resize_inode",
        (FeatureKind::Compat, 0x20) => "dir_index",
        (FeatureKind::Compat, 0x40) => "lazy_bg",
        (FeatureKind::Compat, 0x80) => "snapshot_exclude_inode",
        (FeatureKind::Compat, 0x100) => "snapshot_exclude_bitmap",
        (FeatureKind::Compat, 0x200) => "sparse_super2",
        (FeatureKind::Compat, 0x400) => "fast_commit",
        (FeatureKind::Compat, 0x800) => "stable_inodes",
        (FeatureKind::Compat, 0x1000) => "orphan_file",
        (FeatureKind::Incompat, 0x1) => "compression",
        (FeatureKind::Incompat, 0x2) => "filetype",
        (FeatureKind::Incompat, 0x4) => "needs_recovery",
        (FeatureKind::Incompat, 0x8) => "journal_dev",
        (FeatureKind::Incompat, 0x10) => "meta_bg",
        (FeatureKind::Incompat, 0x40) => "extent",
        (FeatureKind::Incompat, 0x80) => "64bit",
        (FeatureKind::Incompat, 0x100) => "mmp",
        (FeatureKind::Incompat, 0x200) => "flex_bg",
        (FeatureKind::Incompat, 0x400) => "ea_inode",
        (FeatureKind::Incompat, 0x1000) => "dirdata",
        (FeatureKind::Incompat, 0x2000) => "metadata_csum_seed",
        (FeatureKind::Incompat, 0x4000) => "large_dir",
        (FeatureKind::Incompat, 0x8000) => "inline_data",
        (FeatureKind::Incompat, 0x10000) => "encrypt",
        (FeatureKind::Incompat, 0x20000) => "casefold",
        (FeatureKind::RoCompat, 0x1) => "sparse_super",
        (FeatureKind::RoCompat, 0x2) => "large_file",
        (FeatureKind::RoCompat, 0x4) => "btree_dir",
        (FeatureKind::RoCompat, 0x8) => "huge_file",
        (FeatureKind::RoCompat, 0x10) => "uninit_bg",
        (FeatureKind::RoCompat, 0x20) => "dir_nlink",
        (FeatureKind::RoCompat, 0x40) => "extra_isize",
        (FeatureKind::RoCompat, 0x80) => "snapshot",
        (FeatureKind::RoCompat, 0x100) => "quota",
        (FeatureKind::RoCompat, 0x200) => "bigalloc",
        (FeatureKind::RoCompat, 0x400) => "metadata_csum",
        (FeatureKind::RoCompat, 0x800) => "replica",
        (FeatureKind::RoCompat, 0x1000) => "read-only",
        (FeatureKind::RoCompat, 0x2000) => "project",
        (FeatureKind::RoCompat, 0x4000) => "shared_blocks",
        (FeatureKind::RoCompat, 0x8000) => "verity",
        (FeatureKind::RoCompat, 0x10000) => "orphan_present",
        _ => "",
    };
    if known.is_empty() {
        let prefix = match kind {
            FeatureKind::Compat => "FEATURE_C",
            FeatureKind::Incompat => "FEATURE_I",
            FeatureKind::RoCompat => "FEATURE_R",
        };
        // e2fsprogs spells unknown bits as FEATURE_<kind><bit index>.
        format!("{prefix}{}", bit.trailing_zeros())
    } else {
        known.to_string()
    }
}

/// Which of the three feature words a flag lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureKind {
    Compat,
    Incompat,
    RoCompat,
}

/// Names of the bits set in `bits`, lowest first.
pub fn feature_names(kind: FeatureKind, bits: u32) -> Vec<String> {
    (0..32)
        .map(|i| 1u32 << i)
        .filter(|bit| bits & bit != 0)
        .map(|bit| name_of(kind, bit))
        .collect()
}

/// INCOMPAT features the read path implements. Everything else is refused by name:
/// compression and dirdata were never merged into the kernel; encrypt and casefold change how
/// names are stored and compared, which e4 does not implement yet; journal_dev marks an
/// external journal, not a filesystem; needs_recovery is handled by the journal layer.
pub const READABLE_INCOMPAT: IncompatFeatures = IncompatFeatures::FILETYPE
    .union(IncompatFeatures::META_BG)
    .union(IncompatFeatures::EXTENTS)
    .union(IncompatFeatures::BIT64)
    .union(IncompatFeatures::MMP)
    .union(IncompatFeatures::FLEX_BG)
    .union(IncompatFeatures::EA_INODE)
    .union(IncompatFeatures::CSUM_SEED)
    .union(IncompatFeatures::LARGEDIR)
    .union(IncompatFeatures::INLINE_DATA)
    .union(IncompatFeatures::RECOVER);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_known_and_unknown_bits() {
        assert_eq!(
            feature_names(FeatureKind::Incompat, 0x2 | 0x40),
            vec!["filetype", "extent"]
        );
        assert_eq!(
            feature_names(FeatureKind::Incompat, 1 << 20),
            vec!["FEATURE_I20"]
        );
    }
}
