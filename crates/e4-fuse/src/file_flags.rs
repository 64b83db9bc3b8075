//! `FS_IOC_GETFLAGS` and `FS_IOC_SETFLAGS` (`lsattr`, `chattr`) through FUSE's IOCTL
//! request. The kernel's FUSE turns both into requests of its own (`fuse_fileattr_get`,
//! `fuse_fileattr_set`) after the VFS has checked that the caller owns the file or holds
//! CAP_FOWNER, and, for a change of immutable or append-only, that it holds
//! CAP_LINUX_IMMUTABLE (`fileattr_set_prepare`, comparing with `FS_IOC_FSGETXATTR`'s
//! answer, which is why that one is answered too). The rules of the flags themselves are
//! the engine's (`Filesystem::set_user_flags`).

use e4_format::inode::flags;
use e4_fs::Filesystem;

/// `_IOC(dir, type, nr, size)` of the generic Linux ioctl layout (x86, arm, riscv).
const fn ioc(dir: u32, kind: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((kind as u32) << 8) | nr as u32
}
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// `_IOR('f', 1, long)`.
const FS_IOC_GETFLAGS: u32 = ioc(IOC_READ, b'f', 1, size_of::<libc::c_long>());
/// `_IOW('f', 2, long)`.
const FS_IOC_SETFLAGS: u32 = ioc(IOC_WRITE, b'f', 2, size_of::<libc::c_long>());
/// `struct fsxattr`: xflags, extsize, nextents, projid, cowextsize, 8 bytes of padding.
const FSXATTR_SIZE: usize = 28;
/// `_IOR('X', 31, struct fsxattr)`.
const FS_IOC_FSGETXATTR: u32 = ioc(IOC_READ, b'X', 31, FSXATTR_SIZE);

/// The `FS_XFLAG_*` bit for each inode flag that has one (`fileattr_fill_flags`).
const XFLAGS: [(u32, u32); 7] = [
    (flags::IMMUTABLE, 0x8),
    (flags::APPEND, 0x10),
    (flags::SYNC, 0x20),
    (flags::NOATIME, 0x40),
    (flags::NODUMP, 0x80),
    (flags::PROJINHERIT, 0x200),
    (flags::DAX, 0x8000),
];

/// The reply to ioctl `cmd` on inode `ino` with input `input`: the bytes to return;
/// `None` for a command other than these three (ENOTTY, as ext4 answers an ioctl it does
/// not know). `may_protect` is passed to the engine: the kernel checked the capability
/// before sending SETFLAGS (see the module doc).
pub(crate) fn answer(
    fs: &Filesystem,
    ino: u32,
    cmd: u32,
    input: &[u8],
    may_protect: bool,
) -> e4_fs::Result<Option<Vec<u8>>> {
    Ok(Some(match cmd {
        FS_IOC_GETFLAGS => fs.user_flags(ino)?.to_ne_bytes().to_vec(),
        FS_IOC_SETFLAGS => {
            // The kernel sends an `unsigned int` (4 bytes), whatever the command's size says.
            let bytes: [u8; 4] = input
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| e4_fs::Error::Invalid("FS_IOC_SETFLAGS without flags".into()))?;
            fs.set_user_flags(ino, u32::from_ne_bytes(bytes), may_protect)?;
            Vec::new()
        }
        FS_IOC_FSGETXATTR => {
            let shown = fs.user_flags(ino)?;
            let xflags = XFLAGS
                .iter()
                .filter(|(flag, _)| shown & flag != 0)
                .fold(0u32, |x, (_, bit)| x | bit);
            let mut out = vec![0; FSXATTR_SIZE];
            out[..4].copy_from_slice(&xflags.to_ne_bytes());
            out
        }
        _ => return Ok(None),
    }))
}

/// Whether `cmd` changes the inode (an `errors=remount-ro` mount refuses it).
pub(crate) fn changes(cmd: u32) -> bool {
    cmd == FS_IOC_SETFLAGS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_the_kernels_numbers() {
        assert_eq!(FS_IOC_GETFLAGS, 0x8008_6601);
        assert_eq!(FS_IOC_SETFLAGS, 0x4008_6602);
        assert_eq!(FS_IOC_FSGETXATTR, 0x801c_581f);
    }
}
