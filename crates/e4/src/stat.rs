//! `e4 stat`.

use e4_fs::Filesystem;

use crate::ls::mode_string;
use crate::outln;
use crate::output::{CliError, Output};
use crate::time_format::format_timestamp;

pub fn run(fs: &Filesystem, path: &str) -> Result<(), CliError> {
    let ino = fs.resolve(path, false)?;
    let m = fs.metadata(ino)?;
    let mut out = Output::new();
    outln!(out, "  File: {path}")?;
    outln!(
        out,
        "  Size: {:<15} Blocks: {:<10} Type: {:?}",
        m.size,
        m.blocks,
        m.file_type
    )?;
    outln!(
        out,
        "Inode: {:<15} Links: {:<10} Generation: {}",
        m.ino,
        m.nlink,
        m.generation
    )?;
    outln!(
        out,
        "Access: ({:04o}/{})  Uid: {:>5}  Gid: {:>5}",
        m.permissions,
        mode_string(&m),
        m.uid,
        m.gid
    )?;
    if m.rdev != (0, 0) {
        outln!(out, "Device: {},{}", m.rdev.0, m.rdev.1)?;
    }
    outln!(out, "Flags: {:#x}", m.flags)?;
    outln!(out, "Access: {}", format_timestamp(m.atime))?;
    outln!(out, "Modify: {}", format_timestamp(m.mtime))?;
    outln!(out, "Change: {}", format_timestamp(m.ctime))?;
    match m.crtime {
        Some(t) => outln!(out, " Birth: {}", format_timestamp(t))?,
        None => outln!(out, " Birth: -")?,
    }
    out.finish()
}
