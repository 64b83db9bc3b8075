//! Linear directory entries (`struct ext4_dir_entry_2`) and the checksum tail
//! (`struct ext4_dir_entry_tail`) that ends each directory block under metadata_csum.

use crate::checksum::crc32c_raw;
use crate::codec::{le16, le32};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

/// Bytes before the name: inode, rec_len, name_len, file_type.
pub const ENTRY_HEADER_SIZE: usize = 8;
/// Size of the checksum tail at the end of a leaf block.
pub const TAIL_SIZE: usize = 12;
/// `det_reserved_ft` marking the tail.
const TAIL_FILE_TYPE: u8 = 0xDE;
/// The longest name ext4 stores.
pub const MAX_NAME_LEN: usize = 255;

/// `file_type` values in directory entries (the filetype feature).
pub mod file_type {
    pub const UNKNOWN: u8 = 0;
    pub const REGULAR: u8 = 1;
    pub const DIRECTORY: u8 = 2;
    pub const CHAR_DEVICE: u8 = 3;
    pub const BLOCK_DEVICE: u8 = 4;
    pub const FIFO: u8 = 5;
    pub const SOCKET: u8 = 6;
    pub const SYMLINK: u8 = 7;

    use crate::inode::FileType;

    /// The code a directory entry records for a file of type `t`.
    pub fn from_file_type(t: FileType) -> u8 {
        match t {
            FileType::Regular => REGULAR,
            FileType::Directory => DIRECTORY,
            FileType::CharDevice => CHAR_DEVICE,
            FileType::BlockDevice => BLOCK_DEVICE,
            FileType::Fifo => FIFO,
            FileType::Socket => SOCKET,
            FileType::Symlink => SYMLINK,
        }
    }

    /// The file type a directory entry's code names; `None` for `UNKNOWN` and for codes
    /// ext4 does not define.
    pub fn to_file_type(code: u8) -> Option<FileType> {
        Some(match code {
            REGULAR => FileType::Regular,
            DIRECTORY => FileType::Directory,
            CHAR_DEVICE => FileType::CharDevice,
            BLOCK_DEVICE => FileType::BlockDevice,
            FIFO => FileType::Fifo,
            SOCKET => FileType::Socket,
            SYMLINK => FileType::Symlink,
            _ => return None,
        })
    }
}

/// One entry, borrowing its name from the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// `inode`: 0 for an unused slot.
    pub inode: u32,
    /// `rec_len`: bytes to the next entry.
    pub rec_len: usize,
    /// `file_type`, or `UNKNOWN` without the filetype feature.
    pub file_type: u8,
    /// `name`, `name_len` bytes.
    pub name: &'a [u8],
}

/// Decodes `rec_len` as the kernel does: 64 KiB blocks need 17 bits, so the low two bits
/// (always zero for a 4-byte-aligned length) carry bits 16 and 17.
pub fn rec_len_from_disk(raw: u16, block_size: usize) -> usize {
    let len = usize::from(raw);
    if block_size < 65536 {
        len
    } else if raw == u16::MAX || raw == 0 {
        block_size
    } else {
        (len & 65532) | ((len & 3) << 16)
    }
}

/// The space an entry with an `n`-byte name needs.
pub fn entry_size(name_len: usize) -> usize {
    (ENTRY_HEADER_SIZE + name_len + 3) & !3
}

/// Bytes of the hash pair (`struct ext4_dir_entry_hash`) that an encrypted and
/// casefolded directory keeps after each entry's name: the kernel hashes such names
/// with SipHash keyed from the encryption key, so a reader without the key (a lookup by
/// a no-key name, e2fsck) takes the hash from the entry instead of computing it.
pub const ENTRY_HASH_SIZE: usize = 8;

/// The space an entry with an `n`-byte name needs in a directory that keeps hashes in
/// its entries (the kernel's `ext4_dir_rec_len` with `ext4_hash_in_dirent`).
pub fn hashed_entry_size(name_len: usize) -> usize {
    entry_size(name_len) + ENTRY_HASH_SIZE
}

/// An entry's stored hashes (`EXT4_DIRENT_HASH`, `EXT4_DIRENT_MINOR_HASH`): the major
/// hash orders the htree, the minor one only readdir's cookies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHashes {
    pub hash: u32,
    pub minor_hash: u32,
}

impl EntryHashes {
    /// The hashes after the `name_len`-byte name of the entry that `record` begins
    /// with, at the name's end rounded up to four bytes. A byte past `record` reads as
    /// zero: only a damaged entry puts its hashes there.
    pub fn read(record: &[u8], name_len: usize) -> Self {
        let at = entry_size(name_len);
        let word = |at: usize| {
            let mut bytes = [0u8; 4];
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = record.get(at + i).copied().unwrap_or(0);
            }
            u32::from_le_bytes(bytes)
        };
        EntryHashes {
            hash: word(at),
            minor_hash: word(at + 4),
        }
    }

    /// Writes the hashes after the `name_len`-byte name of the entry that `record`
    /// begins with (which must hold [`hashed_entry_size`] bytes).
    pub fn write(&self, record: &mut [u8], name_len: usize) {
        let at = entry_size(name_len);
        record[at..at + 4].copy_from_slice(&self.hash.to_le_bytes());
        record[at + 4..at + 8].copy_from_slice(&self.minor_hash.to_le_bytes());
    }
}

/// Walks the entries of a linear directory region: a leaf block (without its tail) or the
/// inline-data area. Stops at the first malformed entry with an error naming it.
pub struct DirEntryIter<'a> {
    region: &'a [u8],
    offset: usize,
    block_size: usize,
    filetype: bool,
    loc: Location,
}

impl<'a> DirEntryIter<'a> {
    /// `filetype` says whether the name_len high byte is a file type (the filetype feature)
    /// or the high byte of a 16-bit name length (ext2 without it).
    pub fn new(region: &'a [u8], block_size: usize, filetype: bool, loc: Location) -> Self {
        DirEntryIter {
            region,
            offset: 0,
            block_size,
            filetype,
            loc,
        }
    }

    /// Decodes the record at `at`. The checks are the kernel's `ext4_check_dir_entry`
    /// bounds; the error is built out of line, as this runs for every record of every
    /// directory block a lookup or insert reads.
    #[inline(always)]
    fn parse_at(&self, at: usize) -> Result<DirEntry<'a>> {
        let rest = &self.region[at..];
        let Some(header) = rest.first_chunk::<ENTRY_HEADER_SIZE>() else {
            return Err(self.fault(Problem::EntryHeaderPastEnd {
                offset: at,
                left: rest.len(),
            }));
        };
        let inode = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let rec_len =
            rec_len_from_disk(u16::from_le_bytes([header[4], header[5]]), self.block_size);
        let (name_len, file_type) = if self.filetype {
            (usize::from(header[6]), header[7])
        } else {
            (
                usize::from(u16::from_le_bytes([header[6], header[7]])),
                file_type::UNKNOWN,
            )
        };
        if rec_len < ENTRY_HEADER_SIZE || rec_len % 4 != 0 {
            return Err(self.fault(Problem::BadRecLen {
                offset: at,
                rec_len,
            }));
        }
        if rec_len > rest.len() {
            return Err(self.fault(Problem::RecLenPastEnd {
                offset: at,
                rec_len,
            }));
        }
        // A live entry with a zero-length name still decodes: the kernel's
        // `ext4_check_dir_entry` accepts it (only its readdir refuses to list it), and
        // e2fsck parses it and reports `PR_2_NULL_NAME`, so it is a problem to check, not a
        // block that cannot be read.
        if inode != 0 && entry_size(name_len) > rec_len {
            return Err(self.fault(Problem::NameLenExceedsRecLen {
                offset: at,
                name_len,
                rec_len,
            }));
        }
        let name = if inode == 0 {
            &rest[..0]
        } else {
            &rest[ENTRY_HEADER_SIZE..ENTRY_HEADER_SIZE + name_len]
        };
        Ok(DirEntry {
            inode,
            rec_len,
            file_type,
            name,
        })
    }

    /// Checks every remaining record without yielding them (a block read from disk is
    /// checked once, whole, before it is edited), also requiring each record to be at least
    /// `min_rec_len` bytes (the kernel's `ext4_check_dir_entry` wants room for a one-byte
    /// name: 12).
    pub fn check_rest(mut self, min_rec_len: usize) -> Result<()> {
        while self.offset < self.region.len() {
            let at = self.offset;
            let rec_len = self.parse_at(at)?.rec_len;
            if rec_len < min_rec_len {
                return Err(self.fault(Problem::BadRecLen {
                    offset: at,
                    rec_len,
                }));
            }
            self.offset = at + rec_len;
        }
        Ok(())
    }

    /// The error for a malformed record, built out of line.
    #[cold]
    #[inline(never)]
    fn fault(&self, problem: Problem) -> FormatError {
        FormatError::corrupt(Structure::DirectoryEntry, self.loc, problem)
    }
}

impl<'a> Iterator for DirEntryIter<'a> {
    type Item = Result<DirEntry<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.offset >= self.region.len() {
            return None;
        }
        match self.parse_at(self.offset) {
            Ok(entry) => {
                self.offset += entry.rec_len;
                Some(Ok(entry))
            }
            Err(e) => {
                self.offset = self.region.len();
                Some(Err(e))
            }
        }
    }
}

/// Encodes `rec_len` for the disk: the inverse of [`rec_len_from_disk`].
pub fn rec_len_to_disk(rec_len: usize) -> u16 {
    if rec_len >= 65536 {
        // 64 KiB blocks: bits 16 and 17 go in the low two bits.
        if rec_len == 65536 {
            u16::MAX
        } else {
            ((rec_len & 65532) | ((rec_len >> 16) & 3)) as u16
        }
    } else {
        rec_len as u16
    }
}

/// Encodes an entry at the start of `out` (which must hold `rec_len` bytes).
pub fn encode_entry(out: &mut [u8], inode: u32, rec_len: usize, file_type: u8, name: &[u8]) {
    out[0..4].copy_from_slice(&inode.to_le_bytes());
    out[4..6].copy_from_slice(&rec_len_to_disk(rec_len).to_le_bytes());
    out[6] = name.len() as u8;
    out[7] = file_type;
    out[ENTRY_HEADER_SIZE..ENTRY_HEADER_SIZE + name.len()].copy_from_slice(name);
}

/// Whether `block` ends with a checksum tail (`det_rec_len` 12, `det_reserved_ft` 0xDE).
pub fn has_tail(block: &[u8]) -> bool {
    let Some(at) = block.len().checked_sub(TAIL_SIZE) else {
        return false;
    };
    le32(block, at) == Some(0)
        && le16(block, at + 4) == Some(TAIL_SIZE as u16)
        && block[at + 6] == 0
        && block[at + 7] == TAIL_FILE_TYPE
}

/// A linear directory (leaf) block, for its checksum: its entries decode with
/// [`DirEntryIter`], whatever the checksum says.
pub struct DirLeafBlock;

/// The `ext4_dir_entry_tail` at the end of the block holds crc32c, seeded with the directory
/// inode's seed, over everything before the tail.
impl MetadataBlock for DirLeafBlock {
    /// The directory inode's checksum seed.
    type Seed = u32;

    fn verify(block: &[u8], inode_seed: u32, loc: Location) -> Result<()> {
        if !has_tail(block) {
            return Err(FormatError::corrupt(
                Structure::DirectoryBlock,
                loc,
                Problem::NoChecksumTail,
            ));
        }
        let at = block.len() - TAIL_SIZE;
        // OK to unwrap: has_tail checked the length.
        let stored = le32(block, at + 8).unwrap();
        verify_checksum(
            Structure::DirectoryBlock,
            loc,
            stored,
            crc32c_raw(inode_seed, &block[..at]),
        )
    }

    /// Writes an empty tail and its checksum at the end of `block`.
    fn seal(block: &mut [u8], inode_seed: u32) {
        if block.len() < TAIL_SIZE {
            return;
        }
        init_leaf_tail(block);
        let at = block.len() - TAIL_SIZE;
        let sum = crc32c_raw(inode_seed, &block[..at]);
        block[at + 8..].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Writes the tail entry at the end of `block` with a zero checksum: a leaf built in memory
/// carries its tail from the start, and [`DirLeafBlock`]'s seal fills the checksum when the
/// block is sealed at write-back.
pub fn init_leaf_tail(block: &mut [u8]) {
    let at = block.len() - TAIL_SIZE;
    block[at..].fill(0);
    encode_entry(&mut block[at..], 0, TAIL_SIZE, TAIL_FILE_TYPE, &[]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_block_with_tail() {
        let mut block = vec![0u8; 1024];
        encode_entry(&mut block, 2, 12, file_type::DIRECTORY, b".");
        encode_entry(&mut block[12..], 2, 12, file_type::DIRECTORY, b"..");
        encode_entry(
            &mut block[24..],
            11,
            1024 - 24 - TAIL_SIZE,
            file_type::REGULAR,
            b"hello",
        );
        DirLeafBlock::seal(&mut block, 5);
        DirLeafBlock::verify(&block, 5, Location::Block(1)).unwrap();
        let names: Vec<_> =
            DirEntryIter::new(&block[..1024 - TAIL_SIZE], 1024, true, Location::Block(1))
                .map(|e| e.unwrap().name.to_vec())
                .collect();
        assert_eq!(
            names,
            vec![b".".to_vec(), b"..".to_vec(), b"hello".to_vec()]
        );
    }

    #[test]
    fn rec_len_for_64k_blocks() {
        for len in [12usize, 4096, 65532, 65536] {
            let mut buf = vec![0u8; 65536];
            encode_entry(&mut buf, 0, len, 0, &[]);
            assert_eq!(
                rec_len_from_disk(u16::from_le_bytes([buf[4], buf[5]]), 65536),
                len
            );
        }
    }

    #[test]
    fn truncated_header_is_an_error() {
        let region = [0x93u8, 0x93, 0x2a, 0x93, 0x2a, 0x2a];
        let mut it = DirEntryIter::new(&region, 4096, true, Location::Block(3));
        assert!(it.next().unwrap().is_err());
    }

    #[test]
    fn live_entry_with_empty_name_decodes() {
        let mut block = vec![0u8; 64];
        encode_entry(&mut block, 11, 12, file_type::REGULAR, &[]);
        encode_entry(&mut block[12..], 12, 52, file_type::REGULAR, b"next");
        let entries: Vec<_> = DirEntryIter::new(&block, 1024, true, Location::Block(3))
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[0].inode, entries[0].name), (11, &b""[..]));
        assert_eq!(entries[1].name, b"next");
        DirEntryIter::new(&block, 1024, true, Location::Block(3))
            .check_rest(12)
            .unwrap();
    }

    #[test]
    fn hashes_follow_the_padded_name() {
        let mut block = vec![0u8; 64];
        let hashes = EntryHashes {
            hash: 0x1234_5678,
            minor_hash: 0x9abc_def0,
        };
        encode_entry(
            &mut block,
            11,
            hashed_entry_size(5),
            file_type::REGULAR,
            b"hello",
        );
        hashes.write(&mut block, 5);
        assert_eq!(hashed_entry_size(5), 24);
        assert_eq!(block[16..20], 0x1234_5678u32.to_le_bytes());
        assert_eq!(EntryHashes::read(&block, 5), hashes);
        assert_eq!(
            EntryHashes::read(&block[..18], 5),
            EntryHashes {
                hash: 0x5678,
                minor_hash: 0
            },
            "bytes past the record read as zero"
        );
    }

    #[test]
    fn zero_rec_len_is_an_error() {
        let block = vec![0u8; 64];
        let mut it = DirEntryIter::new(&block, 1024, true, Location::Block(3));
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }
}
