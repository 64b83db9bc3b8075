//! The kernel's view of an image: a read-only loop mount, when the machine allows one.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A read-only loop mount, unmounted on drop.
pub struct KernelMount {
    dir: tempfile::TempDir,
}

impl KernelMount {
    /// Mounts `image` read-only, or explains why it cannot (not root, no loop devices, no
    /// ext2/3 driver). Callers report the reason and skip only the kernel comparison.
    pub fn mount(image: &Path) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-o", "loop,ro,noload"])
            .arg(image)
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "loop mount unavailable: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(KernelMount { dir })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for KernelMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}
