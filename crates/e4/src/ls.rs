//! `e4 ls [-l]`.

use std::os::unix::ffi::OsStrExt;

use e4_fs::{FileType, Filesystem, Metadata};

use crate::time_format::format_short;

pub fn run(fs: &Filesystem, path: &str, long: bool) -> Result<(), String> {
    let fail = |e: e4_fs::Error| e.to_string();
    let ino = fs.resolve(path, true).map_err(fail)?;
    let meta = fs.metadata(ino).map_err(fail)?;
    if meta.file_type != FileType::Directory {
        let name = path.rsplit('/').find(|s| !s.is_empty()).unwrap_or(path);
        print_entry(fs, name.as_bytes(), &meta, long).map_err(fail)?;
        return Ok(());
    }
    let dir = fs.read_inode(ino).map_err(fail)?;
    let mut entries = fs.read_dir(&dir).map_err(fail)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for entry in entries {
        let meta = fs.metadata(entry.ino).map_err(fail)?;
        print_entry(fs, &entry.name, &meta, long).map_err(fail)?;
    }
    Ok(())
}

/// `drwxr-xr-x`-style mode string.
pub fn mode_string(meta: &Metadata) -> String {
    let p = meta.permissions;
    let mut s = String::with_capacity(10);
    s.push(meta.file_type.ls_char());
    for (shift, special, lower, upper) in [
        (6, 0o4000, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (p >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, p & special != 0) {
            (true, true) => lower,
            (false, true) => upper,
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    s
}

fn print_entry(fs: &Filesystem, name: &[u8], meta: &Metadata, long: bool) -> e4_fs::Result<()> {
    let shown = String::from_utf8_lossy(name);
    if !long {
        println!("{shown}");
        return Ok(());
    }
    let size = match meta.file_type {
        FileType::CharDevice | FileType::BlockDevice => format!("{}, {}", meta.rdev.0, meta.rdev.1),
        _ => meta.size.to_string(),
    };
    let mut line = format!(
        "{} {:>3} {:>5} {:>5} {:>10} {} {shown}",
        mode_string(meta),
        meta.nlink,
        meta.uid,
        meta.gid,
        size,
        format_short(meta.mtime.seconds),
    );
    if meta.file_type == FileType::Symlink {
        let target = fs.read_link(&fs.read_inode(meta.ino)?)?;
        line.push_str(" -> ");
        line.push_str(&std::ffi::OsStr::from_bytes(&target).to_string_lossy());
    }
    println!("{line}");
    Ok(())
}
