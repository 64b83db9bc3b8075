//! The feature set a filesystem is made with, edited as mke2fs edits it
//! (`e2p_edit_feature2`): a list of names separated by commas or blanks, `^name` (or
//! `-name`) to clear, `none`/`clear` to clear everything. Names are e4-format's, with the
//! aliases e2p accepts. Also the default mount options (`e2p_edit_mntopts`).

use e4_format::features::{
    feature_names, CompatFeatures, FeatureKind, IncompatFeatures, RoCompatFeatures,
};

use crate::error::{invalid, MkfsError, Result};

/// The three feature words of the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeatureSet {
    pub compat: u32,
    pub incompat: u32,
    pub ro_compat: u32,
}

const KINDS: [FeatureKind; 3] = [
    FeatureKind::Compat,
    FeatureKind::Incompat,
    FeatureKind::RoCompat,
];

/// Names e2p accepts besides e4-format's own.
const ALIASES: [(&str, FeatureKind, u32); 3] = [
    (
        "extents",
        FeatureKind::Incompat,
        IncompatFeatures::EXTENTS.bits(),
    ),
    (
        "gdt_csum",
        FeatureKind::RoCompat,
        RoCompatFeatures::GDT_CSUM.bits(),
    ),
    (
        "uninit_groups",
        FeatureKind::RoCompat,
        RoCompatFeatures::GDT_CSUM.bits(),
    ),
];

/// The features e4 mkfs makes. Anything else is refused by name: its structures (quota
/// inodes, an orphan file, MMP block, meta_bg descriptors, clusters, sparse_super2 backup
/// placement, casefold or encryption settings, a journal device) are not written.
const SUPPORTED: FeatureSet = FeatureSet {
    compat: CompatFeatures::HAS_JOURNAL
        .union(CompatFeatures::EXT_ATTR)
        .union(CompatFeatures::RESIZE_INODE)
        .union(CompatFeatures::DIR_INDEX)
        .union(CompatFeatures::STABLE_INODES)
        .bits(),
    incompat: IncompatFeatures::FILETYPE
        .union(IncompatFeatures::EXTENTS)
        .union(IncompatFeatures::BIT64)
        .union(IncompatFeatures::FLEX_BG)
        .union(IncompatFeatures::CSUM_SEED)
        .union(IncompatFeatures::LARGEDIR)
        .union(IncompatFeatures::INLINE_DATA)
        .bits(),
    ro_compat: RoCompatFeatures::SPARSE_SUPER
        .union(RoCompatFeatures::LARGE_FILE)
        .union(RoCompatFeatures::HUGE_FILE)
        .union(RoCompatFeatures::GDT_CSUM)
        .union(RoCompatFeatures::DIR_NLINK)
        .union(RoCompatFeatures::EXTRA_ISIZE)
        .union(RoCompatFeatures::METADATA_CSUM)
        .bits(),
};

fn lookup(name: &str) -> Option<(FeatureKind, u32)> {
    for (alias, kind, bit) in ALIASES {
        if alias.eq_ignore_ascii_case(name) {
            return Some((kind, bit));
        }
    }
    KINDS.into_iter().find_map(|kind| {
        (0..32).map(|i| 1u32 << i).find_map(|bit| {
            let known = feature_names(kind, bit);
            known[0]
                .eq_ignore_ascii_case(name)
                .then_some((kind, bit))
                .filter(|_| !known[0].starts_with("FEATURE_"))
        })
    })
}

impl FeatureSet {
    fn word(&mut self, kind: FeatureKind) -> &mut u32 {
        match kind {
            FeatureKind::Compat => &mut self.compat,
            FeatureKind::Incompat => &mut self.incompat,
            FeatureKind::RoCompat => &mut self.ro_compat,
        }
    }

    /// Applies an edit list (`has_journal,^resize_inode`); `option` names where it came
    /// from, for the message on an unknown name.
    pub fn edit(&mut self, list: &str, option: &str) -> Result<()> {
        for word in list
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty())
        {
            if word.eq_ignore_ascii_case("none") || word.eq_ignore_ascii_case("clear") {
                *self = FeatureSet::default();
                continue;
            }
            let (clear, name) = match word.as_bytes()[0] {
                b'^' | b'-' => (true, &word[1..]),
                b'+' => (false, &word[1..]),
                _ => (false, word),
            };
            let (kind, bit) =
                lookup(name).ok_or_else(|| invalid(option, format!("unknown feature {name:?}")))?;
            if clear {
                *self.word(kind) &= !bit;
            } else {
                *self.word(kind) |= bit;
            }
        }
        Ok(())
    }

    pub fn compat(&self) -> CompatFeatures {
        CompatFeatures::from_bits_retain(self.compat)
    }

    pub fn incompat(&self) -> IncompatFeatures {
        IncompatFeatures::from_bits_retain(self.incompat)
    }

    pub fn ro_compat(&self) -> RoCompatFeatures {
        RoCompatFeatures::from_bits_retain(self.ro_compat)
    }

    pub fn has_compat(&self, f: CompatFeatures) -> bool {
        self.compat().contains(f)
    }

    pub fn has_incompat(&self, f: IncompatFeatures) -> bool {
        self.incompat().contains(f)
    }

    pub fn has_ro_compat(&self, f: RoCompatFeatures) -> bool {
        self.ro_compat().contains(f)
    }

    pub fn clear_compat(&mut self, f: CompatFeatures) {
        self.compat &= !f.bits();
    }

    pub fn clear_ro_compat(&mut self, f: RoCompatFeatures) {
        self.ro_compat &= !f.bits();
    }

    pub fn set_compat(&mut self, f: CompatFeatures) {
        self.compat |= f.bits();
    }

    /// Whether descriptors carry checksums (metadata_csum or uninit_bg), which is what lets
    /// groups be left uninitialized (`ext2fs_has_group_desc_csum`).
    pub fn group_desc_csum(&self) -> bool {
        self.has_ro_compat(RoCompatFeatures::METADATA_CSUM)
            || self.has_ro_compat(RoCompatFeatures::GDT_CSUM)
    }

    /// Refuses, in one message naming them all, the features e4 mkfs does not make.
    pub fn check_supported(&self) -> Result<()> {
        let unsupported: Vec<String> = [
            (FeatureKind::Compat, self.compat & !SUPPORTED.compat),
            (FeatureKind::Incompat, self.incompat & !SUPPORTED.incompat),
            (FeatureKind::RoCompat, self.ro_compat & !SUPPORTED.ro_compat),
        ]
        .into_iter()
        .flat_map(|(kind, bits)| feature_names(kind, bits))
        .collect();
        if unsupported.is_empty() {
            Ok(())
        } else {
            Err(MkfsError::Unsupported(format!(
                "feature {}",
                unsupported.join(", ")
            )))
        }
    }
}

/// `s_default_mount_opts` from a list of mount option names (`acl,user_xattr`), as
/// `e2p_edit_mntopts` reads them.
pub fn edit_mount_options(list: &str, mut opts: u32) -> Result<u32> {
    const NAMES: [(&str, u32); 12] = [
        ("debug", 0x1),
        ("bsdgroups", 0x2),
        ("user_xattr", 0x4),
        ("acl", 0x8),
        ("uid16", 0x10),
        ("journal_data", 0x20),
        ("journal_data_ordered", 0x40),
        ("journal_data_writeback", 0x60),
        ("nobarrier", 0x100),
        ("block_validity", 0x200),
        ("discard", 0x400),
        ("nodelalloc", 0x800),
    ];
    for word in list
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
    {
        let (clear, name) = match word.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, word),
        };
        let (_, bit) = NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .ok_or_else(|| invalid("default_mntopts", format!("unknown mount option {name:?}")))?;
        if clear {
            opts &= !bit;
        } else {
            opts |= bit;
        }
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_set_clear_and_reset() {
        let mut f = FeatureSet::default();
        f.edit("sparse_super,extents,metadata_csum", "-O").unwrap();
        assert!(f.has_incompat(IncompatFeatures::EXTENTS));
        f.edit("^metadata_csum", "-O").unwrap();
        assert!(!f.has_ro_compat(RoCompatFeatures::METADATA_CSUM));
        f.edit("none,has_journal", "-O").unwrap();
        assert_eq!(f.compat, CompatFeatures::HAS_JOURNAL.bits());
        assert_eq!((f.incompat, f.ro_compat), (0, 0));
        assert!(f.edit("frobnicate", "-O").is_err());
    }

    #[test]
    fn unsupported_features_are_named() {
        let mut f = FeatureSet::default();
        f.edit("bigalloc,quota,extent", "-O").unwrap();
        let msg = f.check_supported().unwrap_err().to_string();
        assert!(msg.contains("bigalloc") && msg.contains("quota"), "{msg}");
        assert!(!msg.contains("extent"), "{msg}");
    }

    #[test]
    fn mount_options() {
        assert_eq!(edit_mount_options("acl,user_xattr", 0).unwrap(), 0xC);
        assert!(edit_mount_options("fast", 0).is_err());
    }
}
