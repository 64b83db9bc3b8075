//! `e4 cat`.

use std::io::{self, Write};

use e4_fs::{FileType, Filesystem};

/// Bytes read per call: large enough that a contiguous file is one device read per MiB.
const CHUNK: usize = 1 << 20;

pub fn run(fs: &Filesystem, path: &str) -> Result<(), String> {
    let fail = |e: e4_fs::Error| e.to_string();
    let ino = fs.resolve(path, true).map_err(fail)?;
    let inode = fs.read_inode(ino).map_err(fail)?;
    if inode.file_type() != Some(FileType::Regular) {
        return Err(format!("{path}: not a regular file"));
    }
    let mut out = io::stdout().lock();
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    loop {
        let n = fs.read_at(&inode, offset, &mut buf).map_err(fail)?;
        if n == 0 {
            break;
        }
        match out.write_all(&buf[..n]) {
            // The reader went away (`e4 cat ... | head`): that is not an error.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(format!("writing standard output: {e}")),
            Ok(()) => {}
        }
        offset += n as u64;
    }
    out.flush().or_else(|e| {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Ok(())
        } else {
            Err(format!("writing standard output: {e}"))
        }
    })
}
