//! The two checksum families ext4 uses.
//!
//! ext4's `ext4_chksum(seed, data)` is the raw CRC32C register update: no inversion before or
//! after. The `crc32c` crate implements the standard CRC32C (inverted in and out), so the raw
//! form is `!crc32c_append(!seed, data)`. Chained calls compose: `raw(raw(s, a), b) == raw(s, a ++ b)`.

/// The raw CRC32C update ext4 and jbd2 use for metadata_csum and journal checksum v2/v3.
pub fn crc32c_raw(seed: u32, data: &[u8]) -> u32 {
    !crc32c::crc32c_append(!seed, data)
}

const CRC32_BE: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_MPEG_2);

/// Linux's `crc32_be(seed, data)`: the big-endian (unreflected) CRC-32, polynomial
/// 0x04C11DB7, with no final inversion. jbd2's checksum v1 chains it over a transaction's
/// descriptor and logged blocks, starting from `!0`.
pub fn crc32_be(seed: u32, data: &[u8]) -> u32 {
    let mut digest = CRC32_BE.digest_with_initial(seed);
    digest.update(data);
    digest.finalize()
}

/// The filesystem-wide checksum seed: CRC32C of the UUID, unless the superblock stores one
/// (`INCOMPAT_CSUM_SEED`, `s_checksum_seed`).
pub fn fs_csum_seed(uuid: &[u8; 16]) -> u32 {
    crc32c_raw(!0, uuid)
}

/// The per-inode seed that extent, directory, xattr and inode checksums start from.
pub fn inode_csum_seed(fs_seed: u32, inode: u32, generation: u32) -> u32 {
    // One pass over both words: the same sum as one after the other.
    let mut words = [0u8; 8];
    words[..4].copy_from_slice(&inode.to_le_bytes());
    words[4..].copy_from_slice(&generation.to_le_bytes());
    crc32c_raw(fs_seed, &words)
}

const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_MODBUS);

/// crc16 (poly 0x8005 reflected, register starting at 0xffff) over several pieces, as used by
/// `gdt_csum`/`uninit_bg` group descriptor checksums (e2fsprogs `ext2fs_crc16(~0, ...)`).
pub fn crc16(pieces: &[&[u8]]) -> u16 {
    let mut digest = CRC16.digest();
    for piece in pieces {
        digest.update(piece);
    }
    digest.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_be_is_linux_crc32_be_from_all_ones() {
        // CRC-32/MPEG-2's check value: crc32_be(~0, "123456789") with no final inversion.
        assert_eq!(crc32_be(!0, b"123456789"), 0x0376_E6E7);
        let split = crc32_be(crc32_be(!0, b"12345"), b"6789");
        assert_eq!(split, 0x0376_E6E7, "chains across pieces");
    }

    #[test]
    fn raw_crc32c_chains() {
        let whole = crc32c_raw(0x1234_5678, b"hello world");
        let split = crc32c_raw(crc32c_raw(0x1234_5678, b"hello "), b"world");
        assert_eq!(whole, split);
    }

    #[test]
    fn crc16_known_value() {
        // CRC-16/MODBUS check value for "123456789".
        assert_eq!(crc16(&[b"1234", b"56789"]), 0x4b37);
    }
}
