//! The superblock as mke2fs writes it, in every feature set e4 reads: the primary and the
//! first backup decode, verify (metadata_csum), and encode and seal back to the bytes
//! stored. A checksum computed over the wrong bytes by both `seal` and `verify` passes the
//! unit tests' round trips; only bytes e2fsprogs wrote catch it.

use e4_format::geometry::Geometry;
use e4_format::superblock::Superblock;
use e4_format::{Location, MetadataBlock};
use e4_testkit::{make_empty_image, RawImage, PROFILES};

#[test]
fn superblocks_from_mke2fs_verify_and_round_trip() {
    let mut verified = 0;
    for profile in PROFILES {
        // Small groups, so a small image has backups.
        let args = [profile.mke2fs_args, &["-g", "4096"]].concat();
        let img = make_empty_image(&args, 32);
        let raw = RawImage::read(&img.path).unwrap();
        let geometry = Geometry::new(raw.superblock());
        assert!(
            geometry.has_superblock(1),
            "{}: no backup in group 1",
            profile.name
        );
        let backup_at = raw.block(geometry.group_first_block(1)).unwrap();
        for (what, bytes) in [
            ("primary", raw.superblock_bytes()),
            ("backup", &backup_at[..Superblock::SIZE]),
        ] {
            let sb = Superblock::decode_checked(bytes).unwrap();
            Superblock::verify(bytes, (), Location::Superblock)
                .unwrap_or_else(|e| panic!("{} {what}: {e}", profile.name));
            let mut again = [0u8; Superblock::SIZE];
            sb.encode(&mut again);
            Superblock::seal(&mut again, ());
            assert_eq!(again.as_slice(), bytes, "{} {what}", profile.name);
            verified += usize::from(sb.has_metadata_csum());
        }
    }
    assert!(verified >= 2, "no profile with metadata_csum");
}
