//! Inline data (the inline_data feature): small files and directories keep their content in
//! the inode. The first 60 bytes live in `i_block`; the rest is the value of the
//! `system.data` extended attribute in the inode.
//!
//! An inline directory starts with the parent's inode number (4 bytes) in place of "." and
//! "..", followed by ordinary directory entries filling the rest of `i_block`, and more
//! entries in `system.data`.

/// The attribute holding the part beyond `i_block`.
pub const SYSTEM_DATA: &[u8] = b"system.data";
/// Bytes of an inline directory taken by the parent inode number.
pub const DIR_PARENT_SIZE: usize = 4;

/// Assembles an inline file's content: `i_block` then `system.data`, cut to `size`.
pub fn inline_file_content(i_block: &[u8; 60], system_data: &[u8], size: u64) -> Vec<u8> {
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    let mut out: Vec<u8> = i_block
        .iter()
        .chain(system_data)
        .copied()
        .take(size)
        .collect();
    out.truncate(size);
    out
}

/// The parent inode of an inline directory.
pub fn inline_dir_parent(i_block: &[u8; 60]) -> u32 {
    u32::from_le_bytes([i_block[0], i_block[1], i_block[2], i_block[3]])
}

/// The entry regions of an inline directory: the rest of `i_block`, then `system.data`.
pub fn inline_dir_regions<'a>(i_block: &'a [u8; 60], system_data: &'a [u8]) -> [&'a [u8]; 2] {
    [&i_block[DIR_PARENT_SIZE..], system_data]
}
