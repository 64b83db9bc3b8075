//! The host's tools e4 runs beside itself: e2fsprogs (`mke2fs`, `e2fsck`, `debugfs`,
//! `dumpe2fs`) for the benchmark's images and the tests' oracles, and `fuse2fs` for the
//! benchmark. Debian installs e2fsprogs in `/usr/sbin` and `/sbin`, which are on root's
//! PATH but not on a normal user's, so a tool looked up by its bare name was "not
//! installed" for a user who had it (`e4 bench` skipped every target, the tests panicked
//! with "mke2fs must be installed"). Every caller takes its path from [`tool`]. And what
//! the host has mounted where ([`mount_table`]), for the mount, its tests and the
//! benchmark.

pub mod mount_table;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Where a tool is looked for after PATH.
const SYSTEM_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin"];

/// The path to run tool `name` by: the first executable file of that name on PATH, else in
/// `/usr/sbin`, `/sbin`, `/usr/local/sbin` or `/usr/bin`; else the bare name, so that running
/// it fails with the system's "not found" and the caller says what is missing.
pub fn tool(name: &str) -> PathBuf {
    find(name, std::env::var_os("PATH").as_deref()).unwrap_or_else(|| PathBuf::from(name))
}

/// Whether tool `name` is installed (see [`tool`]).
pub fn has_tool(name: &str) -> bool {
    find(name, std::env::var_os("PATH").as_deref()).is_some()
}

/// Tool `name` on `path` (a PATH value), else in [`SYSTEM_DIRS`].
fn find(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    let on_path = path.into_iter().flat_map(std::env::split_paths);
    on_path
        .chain(SYSTEM_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_off_path_is_found_in_the_system_directories() {
        // `sh` is in /usr/bin on every Debian (and /bin links there).
        let found = find("sh", Some(OsStr::new("/nonexistent"))).unwrap();
        assert!(
            found.starts_with("/usr/bin") || found.starts_with("/bin"),
            "{found:?}"
        );
    }

    #[test]
    fn path_comes_first() {
        let dir = std::env::temp_dir().join(format!("e4-host-tools-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("sh");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let found = find("sh", Some(dir.as_os_str()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, Some(fake));
    }

    #[test]
    fn a_missing_tool_is_its_bare_name() {
        assert_eq!(
            find("no-such-tool-e4", Some(OsStr::new("/nonexistent"))),
            None
        );
        assert_eq!(tool("no-such-tool-e4"), PathBuf::from("no-such-tool-e4"));
    }

    #[test]
    fn e2fsprogs_is_found_without_sbin_on_path() {
        // The development and CI machines have e2fsprogs installed in /usr/sbin or /sbin.
        let found = find("mke2fs", Some(OsStr::new("/usr/bin:/bin"))).unwrap();
        assert!(found.ends_with("mke2fs"), "{found:?}");
    }
}
