//! The jbd2 structures against a journal written by e2fsprogs: debugfs logs a transaction
//! with two blocks (one needing an escape) and a revoke, and every block of the log must
//! parse, with its checksums, to exactly what was written. The filesystem's superblock then
//! says the journal needs recovery (e4-fs's recovery of such images is
//! `journal_recovery`'s subject).

use std::process::Command;

use e4_format::features::IncompatFeatures;
use e4_format::inode::JOURNAL_INO;
use e4_format::journal::{
    logged_block_checksum, CommitBlock, DescriptorBlock, JournalBlockType, JournalHeader,
    JournalSuperblock, RevokeBlock, JOURNAL_MAGIC,
};
use e4_format::{FormatError, Location, MetadataBlock};
use e4_testkit::{e2fsck_clean, make_empty_image, RawImage};

#[test]
fn parses_a_journal_written_by_debugfs() {
    let dir = tempfile::tempdir().unwrap();
    let img = make_empty_image(&["-t", "ext4", "-b", "4096"], 64);
    let image = img.path.clone();

    let mut escaped = vec![0x5Au8; 4096];
    escaped[..4].copy_from_slice(&JOURNAL_MAGIC.to_be_bytes());
    let plain = vec![0xC3u8; 4096];
    std::fs::write(dir.path().join("escaped"), &escaped).unwrap();
    std::fs::write(dir.path().join("plain"), &plain).unwrap();
    let script = format!(
        "jo -c\njw -b 300 {}\njw -b 301 {}\njw -r 302,303\njc\n",
        dir.path().join("escaped").display(),
        dir.path().join("plain").display()
    );
    std::fs::write(dir.path().join("script"), script).unwrap();
    let out = Command::new(e4_testkit::tool("debugfs"))
        .arg("-w")
        .arg("-f")
        .arg(dir.path().join("script"))
        .arg(&image)
        .output()
        .unwrap();
    assert!(out.status.success());

    // The journal's blocks, by their number in the journal (the journal inode's logical
    // blocks), found through its extent tree.
    let raw = RawImage::read(&image).unwrap();
    assert_eq!(raw.superblock().journal_inum, JOURNAL_INO);
    let block = |i: u64| {
        let physical = raw.file_block(JOURNAL_INO, i).unwrap();
        raw.block(physical.expect("a hole in the journal")).unwrap()
    };
    let jsb = JournalSuperblock::decode_checked(block(0)).unwrap();
    JournalSuperblock::verify(block(0), (), Location::JournalBlock(0)).unwrap();
    let f = jsb.features();
    assert!(f.csum_v3 && f.bit64 && f.revoke, "{f:?}");
    assert!(jsb.needs_recovery());
    let mut again = [0u8; JournalSuperblock::SIZE];
    jsb.encode(&mut again);
    JournalSuperblock::seal(&mut again, ());
    assert_eq!(
        again.as_slice(),
        &block(0)[..1024],
        "journal superblock round trip"
    );
    let seed = jsb.csum_seed();

    // Walk the log from s_start, as recovery would.
    let mut logged = Vec::new();
    let mut revoked = Vec::new();
    let mut commits = 0;
    let mut at = u64::from(jsb.start);
    while let Some(header) = JournalHeader::parse(block(at)) {
        let loc = Location::JournalBlock(at);
        match header.block_type(loc).unwrap() {
            JournalBlockType::Descriptor => {
                DescriptorBlock::verify(block(at), seed, loc).unwrap();
                let tags = DescriptorBlock::decode(block(at), &f, loc).unwrap();
                for tag in tags {
                    at += 1;
                    let data = block(at);
                    assert_eq!(
                        tag.checksum,
                        logged_block_checksum(seed, header.sequence, data)
                    );
                    logged.push((tag.block, tag.escaped, data.to_vec()));
                }
            }
            JournalBlockType::Revoke => {
                RevokeBlock::verify(block(at), seed, loc).unwrap();
                revoked.extend(RevokeBlock::decode(block(at), &f, loc).unwrap())
            }
            JournalBlockType::Commit => {
                CommitBlock::verify(block(at), seed, loc).unwrap();
                CommitBlock::decode_checked(block(at), loc).unwrap();
                commits += 1;
            }
            other => panic!("unexpected {other:?} at {at}"),
        }
        at += 1;
    }
    assert!(commits >= 1);
    assert_eq!(revoked, vec![302, 303]);
    assert_eq!(logged.len(), 2);
    let (nr, was_escaped, data) = &logged[0];
    assert_eq!((*nr, *was_escaped), (300, true));
    assert_eq!(
        &data[..4],
        &[0; 4],
        "an escaped block is logged with its magic zeroed"
    );
    assert_eq!(&data[4..], &escaped[4..]);
    assert_eq!(
        (logged[1].0, logged[1].1, &logged[1].2),
        (301, false, &plain)
    );

    // A damaged commit block fails its checksum, and still decodes.
    let commit_at = (0..8).find(|&i| {
        JournalHeader::parse(block(i)).is_some_and(|h| {
            h.block_type(Location::JournalBlock(i)).ok() == Some(JournalBlockType::Commit)
        })
    });
    let mut damaged = block(commit_at.unwrap()).to_vec();
    damaged[0x30] ^= 1;
    let loc = Location::JournalBlock(0);
    assert!(matches!(
        CommitBlock::verify(&damaged, seed, loc),
        Err(FormatError::Checksum { .. })
    ));
    CommitBlock::decode_checked(&damaged, loc).unwrap();

    assert!(
        raw.superblock()
            .incompat()
            .contains(IncompatFeatures::RECOVER),
        "debugfs left a transaction in the journal without marking the filesystem"
    );
    // `e2fsck -n` skips the replay and finds the filesystem itself consistent.
    e2fsck_clean(&image).unwrap();
}
