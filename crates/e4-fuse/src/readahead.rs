//! The mount's readahead window. The kernel's FUSE reads ahead at most the mount's
//! backing-device (bdi) window, 128 KiB by default, whatever the server asks for in INIT:
//! it offers that window as `max_readahead` and keeps the smaller of the two. So a
//! sequential read arrived as READs of 128 KiB, eight round trips per MiB. The window is
//! the bdi's `read_ahead_kb` in sysfs (`/sys/class/bdi/MAJOR:MINOR`, the mount's device
//! number), which root may raise once INIT is done; READs are then as large as the
//! kernel sends any request (1 MiB, `fs.fuse.max_pages_limit`). Files opened before the
//! raise keep the old window (it is copied at open), so it happens before `e4 mount`
//! reports the mount up. Without root the window stays at the kernel's default.

use std::io;
use std::path::Path;

/// The window asked for, in KiB: the largest READ the kernel's FUSE sends.
pub(crate) const READAHEAD_KIB: u32 = 1024;

/// Raises the readahead window of the FUSE mount on `dir` to [`READAHEAD_KIB`]. Call it
/// once a request has been answered on the mount (after INIT, whose reply would lower the
/// window again).
pub(crate) fn raise_readahead(dir: &Path) -> io::Result<()> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let (major, minor) = mount_device(&info, dir).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no mount on {} in /proc/self/mountinfo", dir.display()),
        )
    })?;
    std::fs::write(
        format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"),
        READAHEAD_KIB.to_string(),
    )
}

/// The device number (`major:minor`) of the last mount on `dir` in a mountinfo listing,
/// whose mount points escape space, tab, newline and backslash as octal (`\040`).
fn mount_device<'a>(mountinfo: &'a str, dir: &Path) -> Option<(&'a str, &'a str)> {
    let mut escaped = String::new();
    for c in dir.to_str()?.chars() {
        match c {
            ' ' | '\t' | '\n' | '\\' => escaped.push_str(&format!("\\{:03o}", c as u32)),
            c => escaped.push(c),
        }
    }
    mountinfo.lines().rev().find_map(|line| {
        // Mount id, parent id, MAJOR:MINOR, root within the filesystem, mount point, ...
        let mut fields = line.split(' ');
        let device = fields.nth(2)?;
        (fields.nth(1)? == escaped).then(|| device.split_once(':'))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
97 29 0:52 / /tmp/a\\040b rw,nosuid,nodev - fuse.e4 /img/a rw,user_id=0
98 29 0:53 / /tmp/a rw,nosuid,nodev - fuse.e4 /img/b rw,user_id=0
99 98 0:54 / /tmp/a rw,nosuid,nodev - fuse.e4 /img/c rw,user_id=0
";

    #[test]
    fn the_last_mount_on_a_directory_names_the_device() {
        assert_eq!(
            mount_device(MOUNTINFO, Path::new("/tmp/a")),
            Some(("0", "54"))
        );
        assert_eq!(
            mount_device(MOUNTINFO, Path::new("/tmp/a b")),
            Some(("0", "52"))
        );
        assert_eq!(mount_device(MOUNTINFO, Path::new("/tmp")), None);
    }
}
