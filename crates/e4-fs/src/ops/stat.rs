//! What `stat` and `statfs` report.

use e4_format::features::RoCompatFeatures;
use e4_format::inode::{FileType, Timestamp};
use e4_format::{FormatError, Location, Problem, Structure};

use crate::error::Result;
use crate::filesystem::Filesystem;

/// An inode's attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub ino: u32,
    pub file_type: FileType,
    /// Permission bits including setuid, setgid, sticky.
    pub permissions: u16,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u16,
    /// Space used, in 512-byte units.
    pub blocks: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    /// Creation time, when the inode has room for it.
    pub crtime: Option<Timestamp>,
    /// `i_flags`.
    pub flags: u32,
    pub generation: u32,
    /// (major, minor) for device files.
    pub rdev: (u32, u32),
}

/// Filesystem-wide counts, as `statfs` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub free_blocks: u64,
    /// Free blocks an unprivileged user may use: free, less the superuser's reserve and the
    /// kernel's metadata reserve.
    pub available_blocks: u64,
    pub inodes: u64,
    pub free_inodes: u64,
    pub name_max: u32,
}

impl Filesystem {
    /// Attributes of inode `ino`.
    pub fn metadata(&self, ino: u32) -> Result<Metadata> {
        let inode = self.caller_inode(ino)?;
        let file_type = inode.file_type().ok_or_else(|| {
            FormatError::corrupt(
                Structure::Inode,
                Location::Inode(ino),
                Problem::BadFileType {
                    mode: inode.record.mode,
                },
            )
        })?;
        let huge = self
            .superblock()
            .ro_compat()
            .contains(RoCompatFeatures::HUGE_FILE);
        let is_device = matches!(file_type, FileType::CharDevice | FileType::BlockDevice);
        let mut blocks = inode.blocks_512(huge, self.block_size());
        if file_type == FileType::Regular && inode.has_flag(e4_format::inode::flags::INLINE_DATA) {
            // Like the kernel (ext4_file_getattr), report the inline bytes as sectors, so tools that look for
            // sparse files (tar, rsync) do not take an inline file for an empty one.
            blocks += inode.size().div_ceil(512);
        }
        Ok(Metadata {
            ino,
            file_type,
            permissions: inode.permissions(),
            uid: inode.uid(),
            gid: inode.gid(),
            size: inode.size(),
            nlink: inode.links_count(),
            blocks,
            atime: inode.atime(),
            mtime: inode.mtime(),
            ctime: inode.ctime(),
            crtime: inode.crtime(),
            flags: inode.flags(),
            generation: inode.record.generation,
            rdev: if is_device {
                inode.device_number()
            } else {
                (0, 0)
            },
        })
    }

    /// Filesystem-wide counts: from the allocators when open for writing, else from the group
    /// descriptors, which are authoritative (the superblock's summary is only refreshed at
    /// unmount).
    pub fn statfs(&self) -> StatFs {
        let sb = self.superblock();
        if let Some(w) = &self.writer {
            // Open for writing: the allocators' counters are the truth (descriptors are
            // only brought up to date at each commit).
            let free_blocks = w.space.blocks.free_blocks_for_statfs();
            return StatFs {
                block_size: self.block_size(),
                blocks: sb.blocks_count(),
                free_blocks,
                // Both reserves are pools outside the allocator's free count.
                available_blocks: w
                    .space
                    .blocks
                    .available_blocks_for_statfs()
                    .min(free_blocks),
                inodes: u64::from(sb.inodes_count),
                free_inodes: w.space.inodes.free_inodes() + w.txns.pending_inodes(),
                name_max: e4_format::dir_entry::MAX_NAME_LEN as u32,
            };
        }
        let groups = self.group_descriptors();
        let free_blocks: u64 = groups
            .iter()
            .map(|g| u64::from(g.free_blocks_count()))
            .sum::<u64>()
            .saturating_mul(u64::from(sb.cluster_ratio()));
        let free_inodes: u64 = groups
            .iter()
            .map(|g| u64::from(g.free_inodes_count()))
            .sum();
        StatFs {
            block_size: self.block_size(),
            blocks: sb.blocks_count(),
            free_blocks,
            available_blocks: free_blocks
                .saturating_sub(sb.reserved_blocks_count())
                .saturating_sub(crate::space::metadata_reserve(sb)),
            inodes: u64::from(sb.inodes_count),
            free_inodes,
            name_max: e4_format::dir_entry::MAX_NAME_LEN as u32,
        }
    }
}
