//! `--fs-config FILE`: per-path owner, mode and capabilities in the "canned fs_config"
//! format Android's e2fsdroid reads (`-C`, libcutils `load_canned_fs_config`), so an
//! unprivileged build gives each file the owner, mode and file capabilities a root build
//! of the same Android image would.
//!
//! Each line is `PATH UID GID MODE [capabilities=N] ...`: PATH relative to the image's root
//! (a leading `/` is dropped; a line starting with a space is the root), UID and GID
//! decimal, MODE octal, N a number in C's notation (0x.. hex, 0.. octal, else decimal);
//! other tokens (`selabel=...`) are ignored, as libcutils ignores them. When a path has
//! several lines the last one wins. Every imported entry but the root must have a line,
//! as e2fsdroid requires ("failed to find PATH in canned fs_config").
//!
//! Differences from e2fsdroid, on purpose: a line e2fsdroid's `atoi`/`strtol` would read as
//! 0 (a word for a number) is refused with its line number; uid and gid keep 32 bits where
//! e2fsdroid keeps the low 16; MODE sets the permission bits (07777) and any higher bits in
//! it are refused rather than or-ed into the file type.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// What one path gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsConfigEntry {
    pub uid: u32,
    pub gid: u32,
    /// Permission bits, setuid, setgid and sticky.
    pub permissions: u16,
    /// The file capabilities' permitted set (bit N is capability N); 0 for none.
    pub capabilities: u64,
}

/// A loaded fs_config file, by path relative to the image's root.
#[derive(Debug, Clone)]
pub struct FsConfig {
    entries: Arc<HashMap<Vec<u8>, FsConfigEntry>>,
}

impl FsConfig {
    /// Reads and parses `path` (as clap's value parser: one line naming the file and the
    /// bad line).
    pub fn load(path: &str) -> Result<FsConfig, String> {
        let text = std::fs::read(Path::new(path)).map_err(|e| format!("{path}: {e}"))?;
        Self::parse(&text).map_err(|e| format!("{path}: {e}"))
    }

    fn parse(text: &[u8]) -> Result<FsConfig, String> {
        let mut entries = HashMap::new();
        for (number, line) in text.split(|&b| b == b'\n').enumerate() {
            let bad = |what: &str| {
                format!(
                    "line {}: {what} (want PATH UID GID MODE [capabilities=N]): {:?}",
                    number + 1,
                    String::from_utf8_lossy(line)
                )
            };
            let root = line.first() == Some(&b' ');
            let mut tokens = line
                .split(|&b| b == b' ' || b == b'\t' || b == b'\r')
                .filter(|t| !t.is_empty());
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            let path: &[u8] = if root {
                b""
            } else {
                // OK to unwrap: the line holds a non-space byte.
                let path = tokens.next().unwrap();
                path.strip_prefix(b"/").unwrap_or(path)
            };
            let mut number_of = |what: &str, radix: u32| -> Result<u32, String> {
                let token = tokens.next().ok_or_else(|| bad(&format!("no {what}")))?;
                std::str::from_utf8(token)
                    .ok()
                    .and_then(|t| u32::from_str_radix(t, radix).ok())
                    .ok_or_else(|| bad(&format!("{what} is not a number")))
            };
            let uid = number_of("UID", 10)?;
            let gid = number_of("GID", 10)?;
            let mode = number_of("MODE", 8)?;
            let permissions = u16::try_from(mode)
                .ok()
                .filter(|&m| m <= 0o7777)
                .ok_or_else(|| bad("MODE has bits above 07777"))?;
            let mut capabilities = 0;
            for token in tokens {
                if let Some(value) = token.strip_prefix(b"capabilities=") {
                    capabilities =
                        c_number(value).ok_or_else(|| bad("capabilities= is not a number"))?;
                }
            }
            entries.insert(
                path.to_vec(),
                FsConfigEntry {
                    uid,
                    gid,
                    permissions,
                    capabilities,
                },
            );
        }
        Ok(FsConfig {
            entries: Arc::new(entries),
        })
    }

    /// The entry for `path` (relative to the image's root, no leading `/`).
    pub fn lookup(&self, path: &[u8]) -> Option<&FsConfigEntry> {
        self.entries.get(path)
    }
}

/// A number as `strtoull(text, NULL, 0)` reads it when all of it is the number: `0x` hex,
/// a leading `0` octal, else decimal.
fn c_number(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None if text.len() > 1 && text.starts_with('0') => (&text[1..], 8),
        None => (text, 10),
    };
    u64::from_str_radix(digits, radix).ok()
}

/// The `security.capability` value for the permitted set `capabilities`, as e2fsdroid writes
/// it: `struct vfs_cap_data` revision 2 with the effective flag, the permitted set in
/// `data[0].permitted` (low 32 bits) and `data[1].permitted` (high), inheritable empty.
pub fn capability_xattr(capabilities: u64) -> [u8; 20] {
    /// `VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE`.
    const MAGIC_EFFECTIVE: u32 = 0x0200_0001;
    let mut value = [0u8; 20];
    value[0..4].copy_from_slice(&MAGIC_EFFECTIVE.to_le_bytes());
    // OK to cast: the low and high halves of a u64.
    value[4..8].copy_from_slice(&(capabilities as u32).to_le_bytes());
    value[12..16].copy_from_slice(&((capabilities >> 32) as u32).to_le_bytes());
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_as_libcutils_reads_them_and_the_last_line_for_a_path_wins() {
        let config = FsConfig::parse(
            b" 0 0 0755\n/system/bin/sh 0 2000 0755 selabel=u:object_r:shell_exec:s0\n\
              system/bin/ping 0 0 0750 capabilities=0x2000\n\nsystem/bin/sh 1000 2000 04750\n",
        )
        .unwrap();
        assert_eq!(config.lookup(b"").unwrap().permissions, 0o755);
        let sh = config.lookup(b"system/bin/sh").unwrap();
        assert_eq!((sh.uid, sh.gid, sh.permissions), (1000, 2000, 0o4750));
        assert_eq!(
            config.lookup(b"system/bin/ping").unwrap().capabilities,
            1 << 13
        );
        assert!(config.lookup(b"system/bin").is_none());
        assert_eq!(c_number(b"010"), Some(8));
        assert_eq!(c_number(b"12"), Some(12));
    }

    #[test]
    fn a_bad_line_is_refused_with_its_number() {
        for (text, want) in [
            (&b"a 0 0\n"[..], "line 1: no MODE"),
            (b"a 0 0 0644\nb x 0 0644\n", "line 2: UID is not a number"),
            (b"a 0 0 0899\n", "line 1: MODE is not a number"),
            (b"a 0 0 0100644\n", "line 1: MODE has bits above 07777"),
            (
                b"a 0 0 0644 capabilities=zz\n",
                "line 1: capabilities= is not",
            ),
        ] {
            let error = FsConfig::parse(text).unwrap_err();
            assert!(error.starts_with(want), "{error}");
        }
    }

    #[test]
    fn capabilities_are_written_as_e2fsdroid_writes_them() {
        let value = capability_xattr((1 << 13) | (1 << 33));
        assert_eq!(
            value,
            [1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]
        );
    }
}
