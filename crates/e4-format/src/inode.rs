//! Inode records (`struct ext4_inode`): a 128-byte base, then `i_extra_isize` bytes of extra
//! fields (high checksum, nanosecond times, creation time, project), then in-inode extended
//! attributes up to `s_inode_size`.

use crate::checksum::{crc32c_raw, inode_csum_seed};
use crate::codec::{le16, le32};
use crate::codec::{on_disk_struct, Le};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

/// Size of the original ext2 inode; the extra fields start here.
pub const GOOD_OLD_INODE_SIZE: usize = 128;
/// Bytes of `i_block`: extent root, block map or inline data.
pub const I_BLOCK_SIZE: usize = 60;
/// The record this module decodes: base plus all extra fields known today.
const RECORD_SIZE: usize = 0xA0;
/// Offset of `l_i_checksum_lo` in the base inode.
const CHECKSUM_LO_OFFSET: usize = 0x7C;
/// Offset of `i_checksum_hi` in the extra fields.
const CHECKSUM_HI_OFFSET: usize = 0x82;

/// Reserved inode numbers.
pub const ROOT_INO: u32 = 2;
pub const JOURNAL_INO: u32 = 8;

/// `i_flags` bits (`EXT4_*_FL` in fs/ext4/ext4.h; the low ones are also the `FS_*_FL` of
/// `FS_IOC_GETFLAGS`, what `lsattr` shows).
pub mod flags {
    /// Secure deletion (`s`; not implemented by ext4, only kept).
    pub const SECRM: u32 = 0x1;
    /// Undelete (`u`; only kept).
    pub const UNRM: u32 = 0x2;
    /// Compress (`c`; only kept).
    pub const COMPR: u32 = 0x4;
    /// Synchronous updates (`S`).
    pub const SYNC: u32 = 0x8;
    /// Immutable (`i`): no change to the inode, its data or its names.
    pub const IMMUTABLE: u32 = 0x10;
    /// Append-only (`a`): data only added at the end, names not removed.
    pub const APPEND: u32 = 0x20;
    /// Not dumped (`d`).
    pub const NODUMP: u32 = 0x40;
    /// No access-time updates (`A`).
    pub const NOATIME: u32 = 0x80;
    /// Compression: dirty (reserved).
    pub const DIRTY: u32 = 0x100;
    /// Compression: compressed clusters (reserved).
    pub const COMPRBLK: u32 = 0x200;
    /// Do not compress (`m`).
    pub const NOCOMPR: u32 = 0x400;
    /// The inode stores its encrypted content (encrypt feature).
    pub const ENCRYPT: u32 = 0x800;
    /// Directory uses hashed indexes (htree).
    pub const INDEX: u32 = 0x1000;
    /// Data journaling (`j`).
    pub const JOURNAL_DATA: u32 = 0x4000;
    /// No tail merging (`t`).
    pub const NOTAIL: u32 = 0x8000;
    /// Synchronous directory updates (`D`, directories only).
    pub const DIRSYNC: u32 = 0x10000;
    /// Top of a directory hierarchy for the Orlov allocator (`T`, directories only).
    pub const TOPDIR: u32 = 0x20000;
    /// `i_blocks` counts filesystem blocks, not 512-byte sectors.
    pub const HUGE_FILE: u32 = 0x40000;
    /// `i_block` holds an extent tree.
    pub const EXTENTS: u32 = 0x80000;
    /// fs-verity protected (`V`).
    pub const VERITY: u32 = 0x100000;
    /// The inode holds a large extended attribute value (ea_inode).
    pub const EA_INODE: u32 = 0x200000;
    /// Formerly `EXT4_EOFBLOCKS_FL`: still user-modifiable, so old images round-trip.
    pub const EOFBLOCKS: u32 = 0x400000;
    /// Direct access (`x`).
    pub const DAX: u32 = 0x0200_0000;
    /// Data lives in `i_block` and the `system.data` attribute.
    pub const INLINE_DATA: u32 = 0x1000_0000;
    /// New inodes take the directory's project id (`P`, directories only).
    pub const PROJINHERIT: u32 = 0x2000_0000;
    /// A directory whose names are compared and hashed case-folded (casefold feature).
    pub const CASEFOLD: u32 = 0x4000_0000;
}

/// File type bits of `i_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    Fifo,
    CharDevice,
    Directory,
    BlockDevice,
    Regular,
    Symlink,
    Socket,
}

impl FileType {
    /// The type in `i_mode`'s top four bits, if it is a valid one.
    pub fn from_mode(mode: u16) -> Option<Self> {
        Some(match mode & 0xF000 {
            0x1000 => FileType::Fifo,
            0x2000 => FileType::CharDevice,
            0x4000 => FileType::Directory,
            0x6000 => FileType::BlockDevice,
            0x8000 => FileType::Regular,
            0xA000 => FileType::Symlink,
            0xC000 => FileType::Socket,
            _ => return None,
        })
    }

    /// The letter `ls -l` shows.
    pub fn ls_char(self) -> char {
        match self {
            FileType::Fifo => 'p',
            FileType::CharDevice => 'c',
            FileType::Directory => 'd',
            FileType::BlockDevice => 'b',
            FileType::Regular => '-',
            FileType::Symlink => 'l',
            FileType::Socket => 's',
        }
    }
}

on_disk_struct! {
    /// `struct ext4_inode` up to the last extra field defined today. Extra fields beyond
    /// `i_extra_isize` are not present on disk and decode as zero.
    pub struct InodeRecord(Le, 0xA0) {
        /// `i_mode`: file type and permissions.
        mode: u16 = 0x0,
        /// `i_uid`: low 16 bits of the owner.
        uid_lo: u16 = 0x2,
        /// `i_size_lo`.
        size_lo: u32 = 0x4,
        /// `i_atime`.
        atime: u32 = 0x8,
        /// `i_ctime`.
        ctime: u32 = 0xC,
        /// `i_mtime`.
        mtime: u32 = 0x10,
        /// `i_dtime`: deletion time, or the next orphan.
        dtime: u32 = 0x14,
        /// `i_gid`: low 16 bits of the group.
        gid_lo: u16 = 0x18,
        /// `i_links_count`.
        links_count: u16 = 0x1A,
        /// `i_blocks_lo`.
        blocks_lo: u32 = 0x1C,
        /// `i_flags`.
        flags: u32 = 0x20,
        /// `l_i_version` (osd1).
        version_lo: u32 = 0x24,
        /// `i_block`: extent root, block map or inline data.
        block: [u8; 60] = 0x28,
        /// `i_generation`.
        generation: u32 = 0x64,
        /// `i_file_acl_lo`: xattr block.
        file_acl_lo: u32 = 0x68,
        /// `i_size_high`.
        size_high: u32 = 0x6C,
        /// `i_obso_faddr`.
        obso_faddr: u32 = 0x70,
        /// `l_i_blocks_high`.
        blocks_high: u16 = 0x74,
        /// `l_i_file_acl_high`.
        file_acl_high: u16 = 0x76,
        /// `l_i_uid_high`.
        uid_high: u16 = 0x78,
        /// `l_i_gid_high`.
        gid_high: u16 = 0x7A,
        /// `l_i_checksum_lo`.
        checksum_lo: u16 = 0x7C,
        /// `l_i_reserved`.
        osd2_reserved: u16 = 0x7E,
        /// `i_extra_isize`: bytes of extra fields in use after the base.
        extra_isize: u16 = 0x80,
        /// `i_checksum_hi`.
        checksum_hi: u16 = 0x82,
        /// `i_ctime_extra`: epoch bits and nanoseconds.
        ctime_extra: u32 = 0x84,
        /// `i_mtime_extra`.
        mtime_extra: u32 = 0x88,
        /// `i_atime_extra`.
        atime_extra: u32 = 0x8C,
        /// `i_crtime`: creation time.
        crtime: u32 = 0x90,
        /// `i_crtime_extra`.
        crtime_extra: u32 = 0x94,
        /// `i_version_hi`.
        version_hi: u32 = 0x98,
        /// `i_projid`.
        projid: u32 = 0x9C,
    }
}

/// A timestamp with nanoseconds, seconds relative to the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    pub seconds: i64,
    pub nanoseconds: u32,
}

/// A parsed inode: the record, plus the in-inode xattr area that follows the extra fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    /// The inode's number.
    pub ino: u32,
    /// The fixed fields.
    pub record: InodeRecord,
    /// `s_inode_size`: how many bytes the record occupies on disk.
    pub inode_size: usize,
    /// Extra-field bytes past the last field e4 knows (`i_extra_isize` can be larger than
    /// today's fields), kept verbatim.
    pub unknown_extra: Vec<u8>,
    /// Bytes from the end of the extra fields to `s_inode_size` (in-inode xattrs).
    pub xattr_area: Vec<u8>,
}

/// The seed of an inode record's checksum (metadata_csum): the filesystem's seed and the
/// inode's number (the generation is read from the record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeSeed {
    pub fs_seed: u32,
    pub ino: u32,
}

impl Inode {
    /// Decodes inode `ino` and, with `csum_seed` (metadata_csum), verifies its checksum.
    pub fn parse(bytes: &[u8], ino: u32, csum_seed: Option<u32>) -> Result<Self> {
        let inode = Self::decode(bytes, ino)?;
        if let Some(fs_seed) = csum_seed {
            Self::verify(bytes, InodeSeed { fs_seed, ino }, Location::Inode(ino))?;
        }
        Ok(inode)
    }

    /// Decodes inode `ino` from its `inode_size` bytes, whatever its checksum says.
    pub fn decode(bytes: &[u8], ino: u32) -> Result<Self> {
        let loc = Location::Inode(ino);
        let inode_size = bytes.len();
        if inode_size < GOOD_OLD_INODE_SIZE {
            return Err(FormatError::corrupt(
                Structure::Inode,
                loc,
                Problem::TooShort {
                    len: inode_size,
                    need: GOOD_OLD_INODE_SIZE,
                },
            ));
        }
        let mut raw = [0u8; RECORD_SIZE];
        let known = inode_size.min(RECORD_SIZE);
        raw[..known].copy_from_slice(&bytes[..known]);
        let extra_isize = if inode_size > GOOD_OLD_INODE_SIZE {
            usize::from(u16::from_le_bytes([raw[0x80], raw[0x81]]))
        } else {
            0
        };
        if GOOD_OLD_INODE_SIZE + extra_isize > inode_size || extra_isize % 4 != 0 {
            return Err(FormatError::corrupt(
                Structure::Inode,
                loc,
                Problem::BadExtraIsize {
                    extra_isize,
                    inode_size,
                },
            ));
        }
        // Extra fields past i_extra_isize are xattr bytes, not fields.
        let fields_end = GOOD_OLD_INODE_SIZE + extra_isize;
        if fields_end < RECORD_SIZE {
            raw[fields_end..].fill(0);
        }
        let inode = Inode {
            ino,
            record: InodeRecord::decode(&raw),
            inode_size,
            unknown_extra: bytes
                .get(RECORD_SIZE..fields_end)
                .unwrap_or_default()
                .to_vec(),
            xattr_area: bytes[fields_end..].to_vec(),
        };
        Ok(inode)
    }

    /// Serializes to `inode_size` bytes, recomputing the checksum when `csum_seed` is given.
    pub fn to_bytes(&self, csum_seed: Option<u32>) -> Vec<u8> {
        let mut out = vec![0u8; self.inode_size];
        self.encode_into(&mut out, csum_seed);
        out
    }

    /// Encodes the record into `out` (`s_inode_size` bytes, e.g. its slot in an inode-table
    /// block), sealed with its checksum when `csum_seed` is given: what
    /// [`Inode::to_bytes`] returns, without a buffer of its own (a commit encodes every
    /// dirty inode, with every operation stopped).
    pub fn encode_into(&self, out: &mut [u8], csum_seed: Option<u32>) {
        let mut raw = [0u8; RECORD_SIZE];
        self.record.encode(&mut raw);
        let head = RECORD_SIZE.min(self.inode_size);
        out[..head].copy_from_slice(&raw[..head]);
        if self.inode_size > RECORD_SIZE {
            out[RECORD_SIZE..self.inode_size].fill(0);
            let unknown_end = RECORD_SIZE + self.unknown_extra.len();
            out[RECORD_SIZE..unknown_end].copy_from_slice(&self.unknown_extra);
            let fields_end = self.fields_end();
            out[fields_end..fields_end + self.xattr_area.len()].copy_from_slice(&self.xattr_area);
        }
        if let Some(fs_seed) = csum_seed {
            Self::seal(
                &mut out[..self.inode_size],
                InodeSeed {
                    fs_seed,
                    ino: self.ino,
                },
            );
        }
    }

    fn fields_end(&self) -> usize {
        if self.inode_size > GOOD_OLD_INODE_SIZE {
            GOOD_OLD_INODE_SIZE + usize::from(self.record.extra_isize)
        } else {
            GOOD_OLD_INODE_SIZE
        }
    }

    /// Whether an extra field ending at byte `end` of the record is present on disk.
    fn has_extra(&self, end: usize) -> bool {
        self.fields_end() >= end
    }

    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.record.mode)
    }

    /// Permission bits, including setuid, setgid and sticky.
    pub fn permissions(&self) -> u16 {
        self.record.mode & 0o7777
    }

    pub fn size(&self) -> u64 {
        u64::from(self.record.size_lo) | (u64::from(self.record.size_high) << 32)
    }

    pub fn uid(&self) -> u32 {
        u32::from(self.record.uid_lo) | (u32::from(self.record.uid_high) << 16)
    }

    pub fn gid(&self) -> u32 {
        u32::from(self.record.gid_lo) | (u32::from(self.record.gid_high) << 16)
    }

    pub fn links_count(&self) -> u16 {
        self.record.links_count
    }

    pub fn flags(&self) -> u32 {
        self.record.flags
    }

    pub fn has_flag(&self, flag: u32) -> bool {
        self.record.flags & flag != 0
    }

    /// The xattr block, 0 if none.
    pub fn file_acl(&self) -> u64 {
        u64::from(self.record.file_acl_lo) | (u64::from(self.record.file_acl_high) << 32)
    }

    /// Space used in 512-byte units, as `stat` reports it. `huge_file` says whether the
    /// high 16 bits and `HUGE_FILE` flag are honoured (the huge_file feature).
    pub fn blocks_512(&self, huge_file: bool, block_size: u32) -> u64 {
        if !huge_file {
            return u64::from(self.record.blocks_lo);
        }
        let n = u64::from(self.record.blocks_lo) | (u64::from(self.record.blocks_high) << 32);
        if self.has_flag(flags::HUGE_FILE) {
            n * u64::from(block_size / 512)
        } else {
            n
        }
    }

    fn time(&self, seconds: u32, extra: u32, extra_end: usize) -> Timestamp {
        let base = i64::from(seconds as i32);
        if self.has_extra(extra_end) {
            Timestamp {
                seconds: base + (i64::from(extra & 3) << 32),
                nanoseconds: (extra >> 2).min(999_999_999),
            }
        } else {
            Timestamp {
                seconds: base,
                nanoseconds: 0,
            }
        }
    }

    pub fn atime(&self) -> Timestamp {
        self.time(self.record.atime, self.record.atime_extra, 0x90)
    }

    pub fn mtime(&self) -> Timestamp {
        self.time(self.record.mtime, self.record.mtime_extra, 0x8C)
    }

    pub fn ctime(&self) -> Timestamp {
        self.time(self.record.ctime, self.record.ctime_extra, 0x88)
    }

    /// Creation time, if the record has room for it.
    pub fn crtime(&self) -> Option<Timestamp> {
        self.has_extra(0x94)
            .then(|| self.time(self.record.crtime, self.record.crtime_extra, 0x98))
    }

    /// A fresh record for inode `ino` in an `inode_size`-byte slot: `mode`, `generation`,
    /// the extra fields sized for today's fields when the slot has room (`i_extra_isize` 32,
    /// as the kernel makes them), everything else zero.
    pub fn new(ino: u32, inode_size: usize, mode: u16, generation: u32) -> Self {
        let mut record = InodeRecord::decode(&[0; RECORD_SIZE]);
        record.mode = mode;
        record.generation = generation;
        if inode_size > GOOD_OLD_INODE_SIZE {
            record.extra_isize = (RECORD_SIZE - GOOD_OLD_INODE_SIZE) as u16;
        }
        let fields_end = if inode_size > GOOD_OLD_INODE_SIZE {
            RECORD_SIZE.min(inode_size)
        } else {
            GOOD_OLD_INODE_SIZE
        };
        Inode {
            ino,
            record,
            inode_size,
            unknown_extra: Vec::new(),
            xattr_area: vec![0; inode_size - fields_end],
        }
    }

    pub fn set_size(&mut self, size: u64) {
        self.record.size_lo = size as u32;
        self.record.size_high = (size >> 32) as u32;
    }

    pub fn set_uid(&mut self, uid: u32) {
        self.record.uid_lo = uid as u16;
        self.record.uid_high = (uid >> 16) as u16;
    }

    pub fn set_gid(&mut self, gid: u32) {
        self.record.gid_lo = gid as u16;
        self.record.gid_high = (gid >> 16) as u16;
    }

    /// Sets the space used, in 512-byte units (`huge_file` allows the high 16 bits; counts
    /// past 2^48 would need `HUGE_FILE` block units, which e4 does not write). Returns false
    /// when the count does not fit.
    pub fn set_blocks_512(&mut self, blocks: u64, huge_file: bool) -> bool {
        let limit = if huge_file { 1u64 << 48 } else { 1u64 << 32 };
        if blocks >= limit {
            return false;
        }
        self.record.blocks_lo = blocks as u32;
        self.record.blocks_high = (blocks >> 32) as u16;
        self.record.flags &= !flags::HUGE_FILE;
        true
    }

    /// Encodes a time as the kernel does: the low 32 bits of the seconds, and in the extra
    /// field (when the record has one) two epoch bits and the nanoseconds.
    fn encode_time(&self, t: Timestamp, extra_end: usize) -> (u32, u32) {
        let extra = if self.has_extra(extra_end) {
            let epoch = ((t.seconds - i64::from(t.seconds as i32)) >> 32) as u32 & 3;
            (t.nanoseconds.min(999_999_999) << 2) | epoch
        } else {
            0
        };
        (t.seconds as u32, extra)
    }

    pub fn set_atime(&mut self, t: Timestamp) {
        (self.record.atime, self.record.atime_extra) = self.encode_time(t, 0x90);
    }

    pub fn set_mtime(&mut self, t: Timestamp) {
        (self.record.mtime, self.record.mtime_extra) = self.encode_time(t, 0x8C);
    }

    pub fn set_ctime(&mut self, t: Timestamp) {
        (self.record.ctime, self.record.ctime_extra) = self.encode_time(t, 0x88);
    }

    /// Sets the creation time where the record has room for it.
    pub fn set_crtime(&mut self, t: Timestamp) {
        (self.record.crtime, self.record.crtime_extra) = self.encode_time(t, 0x98);
    }

    /// The `(major, minor)` device number of a character or block special file, decoded
    /// as the kernel does from `i_block` (old 16-bit form in word 0, new form in word 1).
    pub fn device_number(&self) -> (u32, u32) {
        let word = |i: usize| {
            u32::from_le_bytes([
                self.record.block[4 * i],
                self.record.block[4 * i + 1],
                self.record.block[4 * i + 2],
                self.record.block[4 * i + 3],
            ])
        };
        let old = word(0);
        if old != 0 {
            ((old >> 8) & 0xFF, old & 0xFF)
        } else {
            let new = word(1);
            ((new & 0xFFF00) >> 8, (new & 0xFF) | ((new >> 12) & 0xFFF00))
        }
    }
}

/// What a record's checksum depends on besides its bytes: its generation (part of the
/// seed), and whether its `i_extra_isize` leaves room for `i_checksum_hi` (a 32-bit sum)
/// or only `i_checksum_lo` (the low 16 bits). `None` for a record too short to have
/// a checksum.
fn checksum_layout(bytes: &[u8]) -> Option<(u32, bool)> {
    if bytes.len() < GOOD_OLD_INODE_SIZE {
        return None;
    }
    let generation = le32(bytes, 0x64)?;
    let extra_isize = if bytes.len() > GOOD_OLD_INODE_SIZE {
        usize::from(le16(bytes, 0x80)?)
    } else {
        0
    };
    let has_hi = GOOD_OLD_INODE_SIZE + extra_isize >= CHECKSUM_HI_OFFSET + 2
        && bytes.len() >= CHECKSUM_HI_OFFSET + 2;
    Some((generation, has_hi))
}

/// The checksum of an inode record, read from its bytes: (stored, computed, whether the
/// record has `i_checksum_hi`). The checksum is crc32c seeded with the inode's seed over the
/// whole record with both checksum fields zeroed; without `i_checksum_hi` (an extra area too
/// small for it) only its low 16 bits are stored. `None` for a record shorter than 128 bytes.
fn record_checksum(bytes: &[u8], seed: InodeSeed) -> Option<(u32, u32, bool)> {
    let (generation, has_hi) = checksum_layout(bytes)?;
    let seed = inode_csum_seed(seed.fs_seed, seed.ino, generation);
    let mut sum = crc32c_raw(seed, &bytes[..CHECKSUM_LO_OFFSET]);
    sum = crc32c_raw(sum, &[0, 0]);
    let lo = u32::from(le16(bytes, CHECKSUM_LO_OFFSET)?);
    if has_hi {
        sum = crc32c_raw(sum, &bytes[CHECKSUM_LO_OFFSET + 2..CHECKSUM_HI_OFFSET]);
        sum = crc32c_raw(sum, &[0, 0]);
        sum = crc32c_raw(sum, &bytes[CHECKSUM_HI_OFFSET + 2..]);
        let hi = u32::from(le16(bytes, CHECKSUM_HI_OFFSET)?);
        Some((lo | (hi << 16), sum, true))
    } else {
        sum = crc32c_raw(sum, &bytes[CHECKSUM_LO_OFFSET + 2..]);
        Some((lo, sum & 0xFFFF, false))
    }
}

/// An inode record (`i_checksum_lo`, `i_checksum_hi`): not a block, but decoded, verified
/// and sealed under the same contract.
impl MetadataBlock for Inode {
    type Seed = InodeSeed;

    fn verify(bytes: &[u8], seed: InodeSeed, loc: Location) -> Result<()> {
        let (stored, computed, _) = record_checksum(bytes, seed).ok_or_else(|| {
            FormatError::corrupt(
                Structure::Inode,
                loc,
                Problem::TooShort {
                    len: bytes.len(),
                    need: GOOD_OLD_INODE_SIZE,
                },
            )
        })?;
        verify_checksum(Structure::Inode, loc, stored, computed)
    }

    /// The sum [`record_checksum`] computes, over the record with its checksum fields
    /// zeroed in place first, so one pass of crc32c covers it (sealing runs for every
    /// dirty inode of every commit).
    fn seal(bytes: &mut [u8], seed: InodeSeed) {
        let Some((generation, has_hi)) = checksum_layout(bytes) else {
            return;
        };
        bytes[CHECKSUM_LO_OFFSET..CHECKSUM_LO_OFFSET + 2].fill(0);
        if has_hi {
            bytes[CHECKSUM_HI_OFFSET..CHECKSUM_HI_OFFSET + 2].fill(0);
        }
        let sum = crc32c_raw(inode_csum_seed(seed.fs_seed, seed.ino, generation), bytes);
        bytes[CHECKSUM_LO_OFFSET..CHECKSUM_LO_OFFSET + 2]
            .copy_from_slice(&(sum as u16).to_le_bytes());
        if has_hi {
            bytes[CHECKSUM_HI_OFFSET..CHECKSUM_HI_OFFSET + 2]
                .copy_from_slice(&((sum >> 16) as u16).to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(inode_size: usize) -> Vec<u8> {
        let mut b = vec![0u8; inode_size];
        b[0..2].copy_from_slice(&0o100644u16.to_le_bytes());
        b[4..8].copy_from_slice(&12345u32.to_le_bytes());
        if inode_size > 128 {
            b[0x80..0x82].copy_from_slice(&32u16.to_le_bytes());
            b[0x88..0x8C].copy_from_slice(&((500u32 << 2) | 1).to_le_bytes());
            b[0xA0..0xA4].copy_from_slice(&0xEA02_0000u32.to_le_bytes());
        }
        b
    }

    #[test]
    fn round_trip_with_checksum() {
        for size in [128usize, 256, 512] {
            let plain = Inode::parse(&sample(size), 12, None).unwrap();
            let with_sum = plain.to_bytes(Some(0xABCD));
            let back = Inode::parse(&with_sum, 12, Some(0xABCD)).unwrap();
            assert_eq!(back.to_bytes(Some(0xABCD)), with_sum);
            assert_eq!(back.size(), 12345);
            let mut bad = with_sum.clone();
            bad[5] ^= 0x40;
            assert!(Inode::parse(&bad, 12, Some(0xABCD)).is_err());
        }
    }

    #[test]
    fn extended_epoch_and_nanoseconds() {
        let inode = Inode::parse(&sample(256), 12, None).unwrap();
        let m = inode.mtime();
        assert_eq!(m.seconds, 1 << 32);
        assert_eq!(m.nanoseconds, 500);
    }

    #[test]
    fn setters_round_trip() {
        for size in [128usize, 256] {
            let mut inode = Inode::new(12, size, 0o100600, 7);
            inode.set_size(5 << 32 | 3);
            inode.set_uid(70_000);
            inode.set_gid(65_536 + 5);
            assert!(inode.set_blocks_512(1 << 33, true));
            assert!(!inode.set_blocks_512(1 << 33, false));
            let t = Timestamp {
                seconds: (1 << 32) + 17,
                nanoseconds: 123_456_789,
            };
            inode.set_mtime(t);
            let back = Inode::parse(&inode.to_bytes(Some(1)), 12, Some(1)).unwrap();
            assert_eq!(back.size(), 5 << 32 | 3);
            assert_eq!((back.uid(), back.gid()), (70_000, 65_541));
            assert_eq!(back.blocks_512(true, 4096), 1 << 33);
            if size > 128 {
                assert_eq!(back.mtime(), t);
            } else {
                assert_eq!(back.mtime().seconds, 17);
            }
        }
    }

    #[test]
    fn bad_extra_isize() {
        let mut b = sample(256);
        b[0x80..0x82].copy_from_slice(&200u16.to_le_bytes());
        assert!(Inode::parse(&b, 12, None).is_err());
    }
}
