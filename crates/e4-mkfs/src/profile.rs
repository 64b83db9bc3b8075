//! mke2fs's configuration (`/etc/mke2fs.conf`, or the file `MKE2FS_CONFIG` names): the
//! `[defaults]` relations, and per filesystem type and usage type the `[fs_types]`
//! subsections that override them. Without a file, mke2fs 1.47's built-in profile (its
//! `mke2fs.conf.in`), which [`BUILT_IN`] reproduces.
//!
//! A lookup walks the type list as mke2fs does (`get_string_from_profile`,
//! `get_int_from_profile`): the last type in the list that sets a relation wins, and
//! `[defaults]` answers when none does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{MkfsError, Result};

/// mke2fs 1.47's built-in profile, used when no configuration file exists.
pub const BUILT_IN: &str = "[defaults]
	base_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr
	default_mntopts = acl,user_xattr
	enable_periodic_fsck = 0
	blocksize = 4096
	inode_size = 256
	inode_ratio = 16384

[fs_types]
	ext3 = {
		features = has_journal
	}
	ext4 = {
		features = has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize
	}
	small = {
		blocksize = 1024
		inode_ratio = 4096
	}
	floppy = {
		blocksize = 1024
		inode_ratio = 8192
	}
	big = {
		inode_ratio = 32768
	}
	huge = {
		inode_ratio = 65536
	}
	news = {
		inode_ratio = 4096
	}
	largefile = {
		inode_ratio = 1048576
		blocksize = -1
	}
	largefile4 = {
		inode_ratio = 4194304
		blocksize = -1
	}
	hurd = {
	     blocksize = 4096
	     inode_size = 128
	     warn_y2038_dates = 0
	}
";

/// The parsed profile.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    defaults: HashMap<String, String>,
    fs_types: HashMap<String, HashMap<String, String>>,
}

impl Profile {
    /// The profile mke2fs would read: `MKE2FS_CONFIG` if set, else `/etc/mke2fs.conf`; the
    /// built-in one when that file does not exist (as mke2fs falls back on `ENOENT`).
    pub fn load_default() -> Result<Profile> {
        let path = std::env::var_os("MKE2FS_CONFIG")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/etc/mke2fs.conf"));
        Profile::load(&path)
    }

    /// Reads `path`, or the built-in profile when it does not exist.
    pub fn load(path: &Path) -> Result<Profile> {
        match std::fs::read_to_string(path) {
            Ok(text) => Profile::parse(&text).map_err(|reason| MkfsError::Profile {
                path: path.to_path_buf(),
                reason,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Profile::built_in()),
            Err(e) => Err(MkfsError::Io {
                path: path.to_path_buf(),
                source: e,
            }),
        }
    }

    pub fn built_in() -> Profile {
        // OK to unwrap: the built-in text is a fixed, valid profile (tested below).
        Profile::parse(BUILT_IN).unwrap()
    }

    /// Parses the profile syntax: `[section]` headers, `name = value` relations, and
    /// `name = {` ... `}` subsections (one level is all mke2fs.conf uses for fs_types;
    /// deeper ones are skipped). Comments start with `#` or `;`.
    pub fn parse(text: &str) -> std::result::Result<Profile, String> {
        let mut profile = Profile::default();
        let mut section = String::new();
        let mut subsection: Vec<String> = Vec::new();
        for (number, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if line.starts_with('[') {
                let end = line
                    .find(']')
                    .ok_or_else(|| format!("line {}: unterminated section header", number + 1))?;
                section = line[1..end].trim().to_string();
                subsection.clear();
                continue;
            }
            if line.starts_with('}') {
                if subsection.pop().is_none() {
                    return Err(format!("line {}: '}}' without a subsection", number + 1));
                }
                continue;
            }
            let Some((name, value)) = line.split_once('=') else {
                return Err(format!("line {}: expected 'name = value'", number + 1));
            };
            let name = name.trim().to_string();
            let value = value.trim();
            if value == "{" {
                subsection.push(name);
                continue;
            }
            let value = value.trim_matches('"').to_string();
            match (section.as_str(), subsection.as_slice()) {
                ("defaults", []) => {
                    profile.defaults.insert(name, value);
                }
                ("fs_types", [fs_type]) => {
                    profile
                        .fs_types
                        .entry(fs_type.clone())
                        .or_default()
                        .insert(name, value);
                }
                _ => {}
            }
        }
        Ok(profile)
    }

    /// Whether `[fs_types]` defines `name`.
    pub fn has_fs_type(&self, name: &str) -> bool {
        self.fs_types.contains_key(name)
    }

    /// The relation `name` for the type list `types`: the last type setting it, else
    /// `[defaults]`.
    pub fn get(&self, types: &[String], name: &str) -> Option<&str> {
        types
            .iter()
            .rev()
            .find_map(|t| self.fs_types.get(t).and_then(|rel| rel.get(name)))
            .or_else(|| self.defaults.get(name))
            .map(String::as_str)
    }

    /// `features` of one type (the list mke2fs applies type by type, in order).
    pub fn type_features(&self, fs_type: &str) -> Option<&str> {
        self.fs_types
            .get(fs_type)
            .and_then(|rel| rel.get("features"))
            .map(String::as_str)
    }

    /// An integer relation, or `default`; a value that is not a number is an error naming
    /// it.
    pub fn get_int(&self, types: &[String], name: &str, default: i64) -> Result<i64> {
        match self.get(types, name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| MkfsError::Profile {
                path: PathBuf::from("mke2fs.conf"),
                reason: format!("{name} = {v:?} is not a number"),
            }),
        }
    }

    /// A boolean relation (`1`, `true`, `yes`, `on` / `0`, `false`, `no`, `off`), or
    /// `default`.
    pub fn get_bool(&self, types: &[String], name: &str, default: bool) -> bool {
        match self
            .get(types, name)
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("1" | "true" | "yes" | "on" | "t" | "y") => true,
            Some("0" | "false" | "no" | "off" | "nil" | "f" | "n") => false,
            _ => default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn built_in_profile_parses_and_later_types_win() {
        let p = Profile::built_in();
        assert_eq!(p.get(&types(&["ext4", "small"]), "blocksize"), Some("1024"));
        assert_eq!(
            p.get(&types(&["ext4", "default"]), "blocksize"),
            Some("4096")
        );
        assert_eq!(
            p.get_int(&types(&["ext4", "news"]), "inode_ratio", 0)
                .unwrap(),
            4096
        );
        assert_eq!(p.type_features("ext3"), Some("has_journal"));
        assert!(p.has_fs_type("ext4"));
        assert!(!p.has_fs_type("default"));
    }

    #[test]
    fn malformed_profiles_are_errors() {
        assert!(Profile::parse("[defaults]\n blocksize 4096\n").is_err());
        assert!(Profile::parse("[fs_types]\n }\n").is_err());
        assert!(Profile::parse("[defaults\n").is_err());
    }
}
