//! `e4 cat`.

use e4_fs::{FileType, Filesystem};

use crate::output::{CliError, Output};

/// Bytes read per call: large enough that a contiguous file is one device read per MiB.
const CHUNK: usize = 1 << 20;

pub fn run(fs: &Filesystem, path: &str) -> Result<(), CliError> {
    let ino = fs.resolve(path, true)?;
    let inode = fs.read_inode(ino)?;
    if inode.file_type() != Some(FileType::Regular) {
        return Err(format!("{path}: not a regular file").into());
    }
    let mut out = Output::new();
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    loop {
        let n = fs.read_at(inode.ino, offset, &mut buf)?;
        if n == 0 {
            break;
        }
        out.bytes(&buf[..n])?;
        offset += n as u64;
    }
    out.finish()
}
