//! `e4 ls [-l]`.

use std::os::unix::ffi::OsStrExt;

use e4_fs::{FileType, Filesystem, Metadata};

use crate::output::{CliError, Output};
use crate::time_format::format_short;

/// How `e4 ls` shows each entry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Listing {
    /// `-l`: mode, links, owner, group, size, time.
    pub long: bool,
    /// `-h`: sizes as 1.5K, 12M, 3.1G (powers of 1024, as `ls -lh`).
    pub human: bool,
}

pub fn run(fs: &Filesystem, path: &str, listing: Listing) -> Result<(), CliError> {
    let ino = fs.resolve(path, true)?;
    let meta = fs.metadata(ino)?;
    let mut out = Output::new();
    if meta.file_type != FileType::Directory {
        let name = path.rsplit('/').find(|s| !s.is_empty()).unwrap_or(path);
        print_entry(&mut out, fs, name.as_bytes(), &meta, listing)?;
        return out.finish();
    }
    let mut entries = fs.read_dir(ino)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for entry in entries {
        let meta = fs.metadata(entry.ino)?;
        print_entry(&mut out, fs, &entry.name, &meta, listing)?;
    }
    out.finish()
}

/// `ls -h` style: the size in the largest power-of-1024 unit that keeps it at or above 1,
/// with one decimal below 10 (rounded up, as GNU ls does).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [char; 6] = ['K', 'M', 'G', 'T', 'P', 'E'];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 {
        let tenths = (value * 10.0).ceil() / 10.0;
        if tenths < 10.0 {
            return format!("{tenths:.1}{}", UNITS[unit]);
        }
    }
    format!("{}{}", value.ceil() as u64, UNITS[unit])
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

fn print_entry(
    out: &mut Output,
    fs: &Filesystem,
    name: &[u8],
    meta: &Metadata,
    listing: Listing,
) -> Result<(), CliError> {
    let shown = String::from_utf8_lossy(name);
    if !listing.long {
        return out.line(format_args!("{shown}"));
    }
    let size = match meta.file_type {
        FileType::CharDevice | FileType::BlockDevice => format!("{}, {}", meta.rdev.0, meta.rdev.1),
        _ if listing.human => human_size(meta.size),
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
        let target = fs.read_link(meta.ino)?;
        line.push_str(" -> ");
        line.push_str(&std::ffi::OsStr::from_bytes(&target).to_string_lossy());
    }
    out.line(format_args!("{line}"))
}

#[cfg(test)]
mod tests {
    use super::human_size;

    #[test]
    fn human_sizes_match_gnu_ls() {
        // Expected values are what `ls -lh` (coreutils 9) prints for files of these sizes.
        for (bytes, shown) in [
            (0, "0"),
            (1023, "1023"),
            (1024, "1.0K"),
            (1025, "1.1K"),
            (10 * 1024 - 1, "10K"),
            (12_582_912, "12M"),
            (3_000_000_000, "2.8G"),
        ] {
            assert_eq!(human_size(bytes), shown, "{bytes}");
        }
    }
}
