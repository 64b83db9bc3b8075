//! The superblock (`struct ext4_super_block`): 1024 bytes at byte offset 1024 of the volume,
//! with backups at the start of some groups. It gives the geometry, the feature set and the
//! summary counters.

use crate::checksum::{crc32c_raw, fs_csum_seed};
use crate::codec::{on_disk_struct, prefix, Le};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

/// Byte offset of the primary superblock from the start of the volume.
pub const SUPERBLOCK_OFFSET: u64 = 1024;
/// `s_magic`.
pub const SUPERBLOCK_MAGIC: u16 = 0xEF53;
/// Where `s_magic` sits inside the superblock, for recognising a filesystem before parsing.
pub const SUPERBLOCK_MAGIC_OFFSET: usize = 0x38;
/// Offset of `s_checksum`, which covers every byte before it.
const CHECKSUM_OFFSET: usize = 0x3FC;
/// `s_checksum_type` value for CRC32C, the only one defined.
const CHECKSUM_TYPE_CRC32C: u8 = 1;
/// `s_rev_level` of the original ext2 format: fixed 128-byte inodes, first inode 11.
const REV_GOOD_OLD: u32 = 0;
/// `s_flags` bit: directory hashes were computed with unsigned `char`.
pub const FLAG_UNSIGNED_HASH: u32 = 0x2;
/// `s_state` bit: cleanly unmounted.
pub const STATE_VALID: u16 = 0x1;
/// `s_state` bit: errors detected.
pub const STATE_ERROR: u16 = 0x2;

on_disk_struct! {
    /// `struct ext4_super_block`, every field in on-disk order. Fields split into `_lo`/`_hi`
    /// halves are combined by the accessor methods below.
    pub struct Superblock(Le, 1024) {
        /// `s_inodes_count`: total inodes.
        inodes_count: u32 = 0x0,
        /// `s_blocks_count_lo`.
        blocks_count_lo: u32 = 0x4,
        /// `s_r_blocks_count_lo`: blocks reserved for the superuser.
        r_blocks_count_lo: u32 = 0x8,
        /// `s_free_blocks_count_lo`.
        free_blocks_count_lo: u32 = 0xC,
        /// `s_free_inodes_count`.
        free_inodes_count: u32 = 0x10,
        /// `s_first_data_block`: 1 for 1 KiB blocks, else 0.
        first_data_block: u32 = 0x14,
        /// `s_log_block_size`: block size is `1024 << this`.
        log_block_size: u32 = 0x18,
        /// `s_log_cluster_size` (bigalloc).
        log_cluster_size: u32 = 0x1C,
        /// `s_blocks_per_group`.
        blocks_per_group: u32 = 0x20,
        /// `s_clusters_per_group`.
        clusters_per_group: u32 = 0x24,
        /// `s_inodes_per_group`.
        inodes_per_group: u32 = 0x28,
        /// `s_mtime`: last mount time.
        mtime: u32 = 0x2C,
        /// `s_wtime`: last write time.
        wtime: u32 = 0x30,
        /// `s_mnt_count`.
        mnt_count: u16 = 0x34,
        /// `s_max_mnt_count`.
        max_mnt_count: u16 = 0x36,
        /// `s_magic`: 0xEF53.
        magic: u16 = 0x38,
        /// `s_state`: `STATE_VALID`, `STATE_ERROR`, orphans being recovered.
        state: u16 = 0x3A,
        /// `s_errors`: behaviour on error.
        errors: u16 = 0x3C,
        /// `s_minor_rev_level`.
        minor_rev_level: u16 = 0x3E,
        /// `s_lastcheck`.
        lastcheck: u32 = 0x40,
        /// `s_checkinterval`.
        checkinterval: u32 = 0x44,
        /// `s_creator_os`.
        creator_os: u32 = 0x48,
        /// `s_rev_level`: 0 original, 1 dynamic inode sizes.
        rev_level: u32 = 0x4C,
        /// `s_def_resuid`.
        def_resuid: u16 = 0x50,
        /// `s_def_resgid`.
        def_resgid: u16 = 0x52,
        /// `s_first_ino`: first non-reserved inode.
        first_ino: u32 = 0x54,
        /// `s_inode_size`.
        inode_size: u16 = 0x58,
        /// `s_block_group_nr`: group holding this copy.
        block_group_nr: u16 = 0x5A,
        /// `s_feature_compat`.
        feature_compat: u32 = 0x5C,
        /// `s_feature_incompat`.
        feature_incompat: u32 = 0x60,
        /// `s_feature_ro_compat`.
        feature_ro_compat: u32 = 0x64,
        /// `s_uuid`.
        uuid: [u8; 16] = 0x68,
        /// `s_volume_name`.
        volume_name: [u8; 16] = 0x78,
        /// `s_last_mounted`.
        last_mounted: [u8; 64] = 0x88,
        /// `s_algorithm_usage_bitmap`.
        algorithm_usage_bitmap: u32 = 0xC8,
        /// `s_prealloc_blocks`.
        prealloc_blocks: u8 = 0xCC,
        /// `s_prealloc_dir_blocks`.
        prealloc_dir_blocks: u8 = 0xCD,
        /// `s_reserved_gdt_blocks`: blocks kept after the GDT for online resize.
        reserved_gdt_blocks: u16 = 0xCE,
        /// `s_journal_uuid`.
        journal_uuid: [u8; 16] = 0xD0,
        /// `s_journal_inum`.
        journal_inum: u32 = 0xE0,
        /// `s_journal_dev`.
        journal_dev: u32 = 0xE4,
        /// `s_last_orphan`: head of the orphan inode list.
        last_orphan: u32 = 0xE8,
        /// `s_hash_seed`: seed for the directory hash.
        hash_seed: [u32; 4] = 0xEC,
        /// `s_def_hash_version`.
        def_hash_version: u8 = 0xFC,
        /// `s_jnl_backup_type`.
        jnl_backup_type: u8 = 0xFD,
        /// `s_desc_size`: group descriptor size when 64bit is set.
        desc_size: u16 = 0xFE,
        /// `s_default_mount_opts`.
        default_mount_opts: u32 = 0x100,
        /// `s_first_meta_bg`.
        first_meta_bg: u32 = 0x104,
        /// `s_mkfs_time`.
        mkfs_time: u32 = 0x108,
        /// `s_jnl_blocks`: backup of the journal inode's `i_block` and size.
        jnl_blocks: [u32; 17] = 0x10C,
        /// `s_blocks_count_hi`.
        blocks_count_hi: u32 = 0x150,
        /// `s_r_blocks_count_hi`.
        r_blocks_count_hi: u32 = 0x154,
        /// `s_free_blocks_count_hi`.
        free_blocks_count_hi: u32 = 0x158,
        /// `s_min_extra_isize`.
        min_extra_isize: u16 = 0x15C,
        /// `s_want_extra_isize`.
        want_extra_isize: u16 = 0x15E,
        /// `s_flags`: signed/unsigned directory hash, test filesystem.
        flags: u32 = 0x160,
        /// `s_raid_stride`.
        raid_stride: u16 = 0x164,
        /// `s_mmp_interval`.
        mmp_interval: u16 = 0x166,
        /// `s_mmp_block`.
        mmp_block: u64 = 0x168,
        /// `s_raid_stripe_width`.
        raid_stripe_width: u32 = 0x170,
        /// `s_log_groups_per_flex`.
        log_groups_per_flex: u8 = 0x174,
        /// `s_checksum_type`: 1 = crc32c.
        checksum_type: u8 = 0x175,
        /// `s_encryption_level`.
        encryption_level: u8 = 0x176,
        /// `s_reserved_pad`.
        reserved_pad: u8 = 0x177,
        /// `s_kbytes_written`.
        kbytes_written: u64 = 0x178,
        /// `s_snapshot_inum`.
        snapshot_inum: u32 = 0x180,
        /// `s_snapshot_id`.
        snapshot_id: u32 = 0x184,
        /// `s_snapshot_r_blocks_count`.
        snapshot_r_blocks_count: u64 = 0x188,
        /// `s_snapshot_list`.
        snapshot_list: u32 = 0x190,
        /// `s_error_count`.
        error_count: u32 = 0x194,
        /// `s_first_error_time`.
        first_error_time: u32 = 0x198,
        /// `s_first_error_ino`.
        first_error_ino: u32 = 0x19C,
        /// `s_first_error_block`.
        first_error_block: u64 = 0x1A0,
        /// `s_first_error_func`.
        first_error_func: [u8; 32] = 0x1A8,
        /// `s_first_error_line`.
        first_error_line: u32 = 0x1C8,
        /// `s_last_error_time`.
        last_error_time: u32 = 0x1CC,
        /// `s_last_error_ino`.
        last_error_ino: u32 = 0x1D0,
        /// `s_last_error_line`.
        last_error_line: u32 = 0x1D4,
        /// `s_last_error_block`.
        last_error_block: u64 = 0x1D8,
        /// `s_last_error_func`.
        last_error_func: [u8; 32] = 0x1E0,
        /// `s_mount_opts`.
        mount_opts: [u8; 64] = 0x200,
        /// `s_usr_quota_inum`.
        usr_quota_inum: u32 = 0x240,
        /// `s_grp_quota_inum`.
        grp_quota_inum: u32 = 0x244,
        /// `s_overhead_clusters`.
        overhead_clusters: u32 = 0x248,
        /// `s_backup_bgs`: groups holding backups with sparse_super2.
        backup_bgs: [u32; 2] = 0x24C,
        /// `s_encrypt_algos`.
        encrypt_algos: [u8; 4] = 0x254,
        /// `s_encrypt_pw_salt`.
        encrypt_pw_salt: [u8; 16] = 0x258,
        /// `s_lpf_ino`: lost+found inode.
        lpf_ino: u32 = 0x268,
        /// `s_prj_quota_inum`.
        prj_quota_inum: u32 = 0x26C,
        /// `s_checksum_seed`: used when metadata_csum_seed is set.
        checksum_seed: u32 = 0x270,
        /// `s_wtime_hi`.
        wtime_hi: u8 = 0x274,
        /// `s_mtime_hi`.
        mtime_hi: u8 = 0x275,
        /// `s_mkfs_time_hi`.
        mkfs_time_hi: u8 = 0x276,
        /// `s_lastcheck_hi`.
        lastcheck_hi: u8 = 0x277,
        /// `s_first_error_time_hi`.
        first_error_time_hi: u8 = 0x278,
        /// `s_last_error_time_hi`.
        last_error_time_hi: u8 = 0x279,
        /// `s_first_error_errcode`.
        first_error_errcode: u8 = 0x27A,
        /// `s_last_error_errcode`.
        last_error_errcode: u8 = 0x27B,
        /// `s_encoding`: filename charset encoding (casefold).
        encoding: u16 = 0x27C,
        /// `s_encoding_flags`.
        encoding_flags: u16 = 0x27E,
        /// `s_orphan_file_inum`.
        orphan_file_inum: u32 = 0x280,
        /// `s_reserved`: padding, kept verbatim.
        reserved: [u32; 94] = 0x284,
        /// `s_checksum`: crc32c of bytes 0..0x3FC.
        checksum: u32 = 0x3FC,
    }
}

const LOC: Location = Location::Superblock;

impl Superblock {
    /// Decodes a superblock from its 1024 bytes, whatever its checksum says, and checks what
    /// makes it unusable: the magic, and that the geometry is self-consistent (so later
    /// arithmetic cannot overflow or divide by zero). The checksum is
    /// [`MetadataBlock::verify`]'s business, so the checker can decode a superblock whose
    /// checksum is wrong.
    pub fn decode_checked(bytes: &[u8]) -> Result<Self> {
        let sb = Superblock::decode(superblock_bytes(bytes, LOC)?);
        sb.validate()?;
        Ok(sb)
    }

    fn validate(&self) -> Result<()> {
        let bad = |problem| Err(FormatError::corrupt(Structure::Superblock, LOC, problem));
        let out_of_range = |field, value: u64| bad(Problem::FieldOutOfRange { field, value });
        if self.magic != SUPERBLOCK_MAGIC {
            return bad(Problem::BadMagic {
                found: self.magic.into(),
                expected: SUPERBLOCK_MAGIC.into(),
            });
        }
        // Block sizes from 1 KiB to 64 KiB.
        if self.log_block_size > 6 {
            return out_of_range("s_log_block_size", self.log_block_size.into());
        }
        // Clusters of up to 2^16 blocks (EXT4_MAX_CLUSTER_LOG_SIZE is 30, in bytes).
        if self.ro_compat().contains(RoCompatFeatures::BIGALLOC)
            && (self.log_cluster_size < self.log_block_size
                || self.log_cluster_size > self.log_block_size + 16)
        {
            return out_of_range("s_log_cluster_size", self.log_cluster_size.into());
        }
        // Without bigalloc a cluster is a block: libext2fs's `ext2fs_open2` calls any other
        // cluster size a corrupt superblock (e2fsck then turns to a backup), and the kernel
        // refuses to mount it ("fragment/cluster size != block size", ext4_handle_clustersize).
        if !self.ro_compat().contains(RoCompatFeatures::BIGALLOC)
            && self.log_cluster_size != self.log_block_size
        {
            return bad(Problem::FieldMismatch {
                field: "s_log_cluster_size",
                found: self.log_cluster_size.into(),
                expected: self.log_block_size.into(),
            });
        }
        let block_size = self.block_size();
        let bits_per_block = 8 * block_size;
        // A block bitmap has one bit per cluster, so the limit is on clusters per group
        // (ext4_fill_super: "#clusters per group too big"); blocks per group is that many
        // clusters exactly.
        let ratio = self.cluster_ratio();
        let clusters_per_group = self.blocks_per_group / ratio;
        if self.blocks_per_group == 0
            || clusters_per_group > bits_per_block
            || self.blocks_per_group % ratio != 0
            || (ratio > 1 && self.clusters_per_group != clusters_per_group)
        {
            return out_of_range("s_blocks_per_group", self.blocks_per_group.into());
        }
        if self.inodes_per_group == 0 || self.inodes_per_group > bits_per_block {
            return out_of_range("s_inodes_per_group", self.inodes_per_group.into());
        }
        let inode_size = self.inode_size();
        if inode_size < 128 || !inode_size.is_power_of_two() || inode_size > block_size {
            return out_of_range("s_inode_size", inode_size.into());
        }
        if self.incompat().contains(IncompatFeatures::BIT64) {
            let d = self.desc_size;
            if !(32..=1024).contains(&d) || !d.is_power_of_two() {
                return out_of_range("s_desc_size", d.into());
            }
        }
        // The first data block is the one holding the superblock with 1 KiB blocks, except
        // under bigalloc, where it is always 0 (ext4_fill_super, e2fsprogs' initialize).
        let bigalloc = self.ro_compat().contains(RoCompatFeatures::BIGALLOC);
        let expected_first = u32::from(block_size == 1024 && !bigalloc);
        if self.first_data_block != expected_first {
            return bad(Problem::FieldMismatch {
                field: "s_first_data_block",
                found: self.first_data_block.into(),
                expected: expected_first.into(),
            });
        }
        if self.blocks_count() <= u64::from(self.first_data_block) {
            return out_of_range("s_blocks_count", self.blocks_count());
        }
        let groups = self.group_count();
        if u64::from(self.inodes_count) > groups * u64::from(self.inodes_per_group) {
            return bad(Problem::InodesExceedGroups {
                inodes: self.inodes_count,
                groups,
                per_group: self.inodes_per_group,
            });
        }
        if groups > u64::from(u32::MAX) {
            return out_of_range("block group count", groups);
        }
        if self.first_ino() < 11 || self.first_ino() > self.inodes_count {
            return out_of_range("s_first_ino", self.first_ino().into());
        }
        Ok(())
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        1024 << self.log_block_size
    }

    /// Cluster size in blocks (1 unless bigalloc).
    pub fn cluster_ratio(&self) -> u32 {
        if self.ro_compat().contains(RoCompatFeatures::BIGALLOC) {
            1 << (self.log_cluster_size - self.log_block_size)
        } else {
            1
        }
    }

    fn is_64bit(&self) -> bool {
        self.incompat().contains(IncompatFeatures::BIT64)
    }

    fn join(&self, lo: u32, hi: u32) -> u64 {
        if self.is_64bit() {
            u64::from(lo) | (u64::from(hi) << 32)
        } else {
            u64::from(lo)
        }
    }

    /// Total blocks (`s_blocks_count_lo` and `_hi`).
    pub fn blocks_count(&self) -> u64 {
        self.join(self.blocks_count_lo, self.blocks_count_hi)
    }

    /// Blocks reserved for the superuser.
    pub fn reserved_blocks_count(&self) -> u64 {
        self.join(self.r_blocks_count_lo, self.r_blocks_count_hi)
    }

    /// Free blocks as last recorded (the per-group counts are authoritative).
    pub fn free_blocks_count(&self) -> u64 {
        self.join(self.free_blocks_count_lo, self.free_blocks_count_hi)
    }

    /// Number of block groups.
    pub fn group_count(&self) -> u64 {
        (self.blocks_count() - u64::from(self.first_data_block))
            .div_ceil(u64::from(self.blocks_per_group))
    }

    /// Inode record size in bytes.
    pub fn inode_size(&self) -> u32 {
        if self.rev_level == REV_GOOD_OLD {
            128
        } else {
            u32::from(self.inode_size)
        }
    }

    /// First inode number available to files.
    pub fn first_ino(&self) -> u32 {
        if self.rev_level == REV_GOOD_OLD {
            11
        } else {
            self.first_ino
        }
    }

    /// Group descriptor size: 32 bytes unless 64bit is set.
    pub fn desc_size(&self) -> u32 {
        if self.is_64bit() {
            u32::from(self.desc_size)
        } else {
            32
        }
    }

    /// Groups per flex group (1 without flex_bg). Capped so a corrupt value cannot overflow.
    pub fn groups_per_flex(&self) -> u32 {
        if self.incompat().contains(IncompatFeatures::FLEX_BG) {
            1 << self.log_groups_per_flex.min(31)
        } else {
            1
        }
    }

    pub fn compat(&self) -> CompatFeatures {
        CompatFeatures::from_bits_retain(self.feature_compat)
    }

    pub fn incompat(&self) -> IncompatFeatures {
        IncompatFeatures::from_bits_retain(self.feature_incompat)
    }

    pub fn ro_compat(&self) -> RoCompatFeatures {
        RoCompatFeatures::from_bits_retain(self.feature_ro_compat)
    }

    /// Whether metadata blocks carry crc32c checksums.
    pub fn has_metadata_csum(&self) -> bool {
        self.ro_compat().contains(RoCompatFeatures::METADATA_CSUM)
    }

    /// The seed every metadata checksum starts from.
    pub fn csum_seed(&self) -> u32 {
        if self.incompat().contains(IncompatFeatures::CSUM_SEED) {
            self.checksum_seed
        } else {
            fs_csum_seed(&self.uuid)
        }
    }

    /// Whether directory hashes treat name bytes as unsigned.
    pub fn unsigned_dir_hash(&self) -> bool {
        self.flags & FLAG_UNSIGNED_HASH != 0
    }

    /// Whether group `group` holds a superblock backup (and so a GDT backup).
    pub fn group_has_superblock(&self, group: u32) -> bool {
        if group == 0 {
            return true;
        }
        if self.compat().contains(CompatFeatures::SPARSE_SUPER2) {
            return self.backup_bgs.contains(&group);
        }
        if group <= 1 || !self.ro_compat().contains(RoCompatFeatures::SPARSE_SUPER) {
            return true;
        }
        if group & 1 == 0 {
            return false;
        }
        [3u32, 5, 7].iter().any(|&base| is_power_of(group, base))
    }

    /// Records the free block count (both halves on 64bit filesystems).
    pub fn set_free_blocks_count(&mut self, free: u64) {
        self.free_blocks_count_lo = free as u32;
        if self.is_64bit() {
            self.free_blocks_count_hi = (free >> 32) as u32;
        }
    }

    /// Records the last write time (with the extended-epoch high byte).
    pub fn set_write_time(&mut self, seconds: i64) {
        self.wtime = seconds as u32;
        self.wtime_hi = (seconds >> 32) as u8;
    }

    /// Records the last mount time (with the extended-epoch high byte).
    pub fn set_mount_time(&mut self, seconds: i64) {
        self.mtime = seconds as u32;
        self.mtime_hi = (seconds >> 32) as u8;
    }

    /// Last write time, with the extended-epoch high byte.
    pub fn write_time(&self) -> i64 {
        i64::from(self.wtime) | (i64::from(self.wtime_hi) << 32)
    }

    /// Creation time, with the extended-epoch high byte.
    pub fn mkfs_time(&self) -> i64 {
        i64::from(self.mkfs_time) | (i64::from(self.mkfs_time_hi) << 32)
    }

    /// Last mount time, with the extended-epoch high byte.
    pub fn mount_time(&self) -> i64 {
        i64::from(self.mtime) | (i64::from(self.mtime_hi) << 32)
    }

    /// The volume label, up to its first NUL.
    pub fn volume_label(&self) -> String {
        c_string(&self.volume_name)
    }

    /// The directory last mounted on, up to its first NUL.
    pub fn last_mounted_on(&self) -> String {
        c_string(&self.last_mounted)
    }
}

/// The first 1024 bytes of `bytes`, or a [`Problem::TooShort`] at `loc`.
fn superblock_bytes(bytes: &[u8], loc: Location) -> Result<&[u8; 1024]> {
    prefix::<1024>(bytes).ok_or_else(|| {
        FormatError::corrupt(
            Structure::Superblock,
            loc,
            Problem::TooShort {
                len: bytes.len(),
                need: 1024,
            },
        )
    })
}

/// `s_checksum`: crc32c from `~0` over every byte before it.
fn superblock_checksum(raw: &[u8; 1024]) -> u32 {
    crc32c_raw(!0, &raw[..CHECKSUM_OFFSET])
}

/// The superblock, primary or backup: with metadata_csum, `s_checksum` is crc32c over the
/// bytes before it, and `s_checksum_type` must say crc32c (`ext4_superblock_csum_verify`,
/// "Unknown checksum type" in `ext4_fill_super`). Without metadata_csum there is nothing
/// to verify or seal. Nothing seeds it: the superblock is where seeds come from.
impl MetadataBlock for Superblock {
    type Seed = ();

    fn verify(bytes: &[u8], (): (), loc: Location) -> Result<()> {
        let raw = superblock_bytes(bytes, loc)?;
        let sb = Superblock::decode(raw);
        if !sb.has_metadata_csum() {
            return Ok(());
        }
        if sb.checksum_type != CHECKSUM_TYPE_CRC32C {
            return Err(FormatError::corrupt(
                Structure::Superblock,
                loc,
                Problem::UnknownChecksumType {
                    found: sb.checksum_type,
                },
            ));
        }
        verify_checksum(
            Structure::Superblock,
            loc,
            sb.checksum,
            superblock_checksum(raw),
        )
    }

    fn seal(bytes: &mut [u8], (): ()) {
        let Some(raw) = prefix::<1024>(bytes) else {
            return;
        };
        if Superblock::decode(raw).has_metadata_csum() {
            let sum = superblock_checksum(raw);
            bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&sum.to_le_bytes());
        }
    }
}

fn is_power_of(mut n: u32, base: u32) -> bool {
    while n % base == 0 {
        n /= base;
    }
    n == 1
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Formats a 16-byte UUID the usual way.
pub fn format_uuid(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A valid superblock of one group of 32768 4 KiB blocks and 8192 inodes, with the
/// `ro_compat` features, for tests.
#[cfg(test)]
pub(crate) fn test_superblock(ro_compat: RoCompatFeatures) -> Superblock {
    let mut sb = Superblock::decode(&[0; 1024]);
    sb.magic = SUPERBLOCK_MAGIC;
    sb.log_block_size = 2;
    sb.log_cluster_size = 2;
    sb.blocks_count_lo = 32768;
    sb.blocks_per_group = 32768;
    sb.clusters_per_group = 32768;
    sb.inodes_per_group = 8192;
    sb.inodes_count = 8192;
    sb.rev_level = 1;
    sb.first_ino = 11;
    sb.inode_size = 256;
    sb.feature_ro_compat = ro_compat.bits();
    sb.checksum_type = CHECKSUM_TYPE_CRC32C;
    sb.uuid = [7; 16];
    sb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_super_backup_groups() {
        let mut raw = [0u8; 1024];
        raw[0x64..0x68].copy_from_slice(&RoCompatFeatures::SPARSE_SUPER.bits().to_le_bytes());
        let sb = Superblock::decode(&raw);
        let with: Vec<u32> = (0..50).filter(|&g| sb.group_has_superblock(g)).collect();
        assert_eq!(with, vec![0, 1, 3, 5, 7, 9, 25, 27, 49]);
    }

    fn encoded(sb: &Superblock) -> Vec<u8> {
        let mut raw = [0u8; 1024];
        sb.encode(&mut raw);
        raw.to_vec()
    }

    #[test]
    fn without_metadata_csum_there_is_nothing_to_verify_or_seal() {
        let mut raw = encoded(&test_superblock(RoCompatFeatures::empty()));
        raw[CHECKSUM_OFFSET] = 0x5A;
        let before = raw.clone();
        Superblock::seal(&mut raw, ());
        assert_eq!(raw, before);
        Superblock::verify(&raw, (), LOC).unwrap();
    }

    #[test]
    fn a_checksum_type_other_than_crc32c_is_corrupt() {
        let mut sb = test_superblock(RoCompatFeatures::METADATA_CSUM);
        sb.checksum_type = 2;
        let mut raw = encoded(&sb);
        Superblock::seal(&mut raw, ());
        assert_eq!(
            Superblock::verify(&raw, (), LOC),
            Err(FormatError::corrupt(
                Structure::Superblock,
                LOC,
                Problem::UnknownChecksumType { found: 2 }
            ))
        );
        // Decoding does not look at it: the checker decodes such a superblock.
        Superblock::decode_checked(&raw).unwrap();
    }

    #[test]
    fn a_cluster_size_other_than_the_block_size_needs_bigalloc() {
        let mut sb = test_superblock(RoCompatFeatures::empty());
        Superblock::decode_checked(&encoded(&sb)).unwrap();
        sb.log_cluster_size = 3;
        assert_eq!(
            Superblock::decode_checked(&encoded(&sb)),
            Err(FormatError::corrupt(
                Structure::Superblock,
                LOC,
                Problem::FieldMismatch {
                    field: "s_log_cluster_size",
                    found: 3,
                    expected: 2
                }
            ))
        );
        sb.feature_ro_compat = RoCompatFeatures::BIGALLOC.bits();
        sb.blocks_per_group = 2 * sb.clusters_per_group;
        Superblock::decode_checked(&encoded(&sb)).unwrap();
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Superblock::decode_checked(&[0u8; 10]).is_err());
        assert!(Superblock::decode_checked(&[0xFFu8; 1024]).is_err());
    }
}
