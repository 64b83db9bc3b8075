//! What the host has mounted where, read from `/proc/self/mountinfo` without touching
//! any mount (a FUSE mount whose daemon has stopped answering blocks whatever looks into
//! it): for unmounting a mount only while it is still the one that was made, and for
//! telling whether a test's or a benchmark's mount is there.

use std::path::Path;

/// The `major:minor` of the top mount on `dir` (absolute and canonical, as the table names
/// it), if anything is mounted there.
pub fn mounted_device(dir: &Path) -> Option<(u32, u32)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dir = dir.to_str()?;
    info.lines().rev().find_map(|line| {
        // mount ID, parent ID, major:minor, root, mount point, ...
        let mut fields = line.split(' ');
        let device = fields.nth(2)?;
        if unescape(fields.nth(1)?) != dir {
            return None;
        }
        let (major, minor) = device.split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    })
}

/// Whether anything is mounted on `dir` ([`mounted_device`]).
pub fn is_mounted(dir: &Path) -> bool {
    mounted_device(dir).is_some()
}

/// A mountinfo path with its octal escapes (`\040` for a space, ...) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|_| bytes[i] == b'\\')
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match code {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/tmp/a\040b\134c"), r"/tmp/a b\c");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }

    #[test]
    fn the_root_is_mounted_and_a_fresh_directory_is_not() {
        assert!(is_mounted(Path::new("/")));
        let dir = std::env::temp_dir().join(format!("e4-mount-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = is_mounted(&dir);
        std::fs::remove_dir(&dir).unwrap();
        assert!(!mounted);
    }
}
