//! A directory listed in pieces (`read_dir_from`, readdir's cookies) while it changes between
//! pieces: every name that stays in the directory throughout is listed exactly once, no name
//! is listed twice, and nothing is listed that was never there. Linear, htree-indexed and
//! inline directories, with the changes that move entries the most (an htree leaf split,
//! inline data growing out of the inode).

use std::collections::{BTreeMap, BTreeSet};

use e4_fs::{Creator, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image};

const CREATOR: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// Pages a listing may take before the test calls it endless.
const MAX_PAGES: usize = 2000;

fn name(i: usize) -> Vec<u8> {
    format!("entry-{i:06}-with-a-longer-name").into_bytes()
}

/// Lists `dir` in pages of `page` entries; between pages, adds `grow` names and removes
/// every seventh name still unlisted-or-listed (never one of `keep`). Returns every name
/// listed, with how often.
fn list_while_changing(
    fs: &Filesystem,
    dir: u32,
    page: usize,
    grow: usize,
    next: &mut usize,
    keep: &BTreeSet<Vec<u8>>,
    ever: &mut BTreeSet<Vec<u8>>,
) -> BTreeMap<Vec<u8>, usize> {
    let mut listed: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    let mut cookie = 0;
    let mut round = 0;
    loop {
        let mut taken = 0;
        let mut last = None;
        fs.read_dir_from(dir, cookie, |entry, next_cookie| {
            *listed.entry(entry.name).or_default() += 1;
            last = Some(next_cookie);
            taken += 1;
            taken < page
        })
        .unwrap();
        let Some(resume) = last else { break };
        cookie = resume;
        round += 1;
        // A correct listing ends within a few dozen pages here; one whose cookies do not
        // advance would go on while the directory grows.
        assert!(round <= MAX_PAGES, "no end after {round} pages");
        for _ in 0..grow {
            let n = name(*next);
            *next += 1;
            fs.create(dir, &n, CREATOR).unwrap();
            ever.insert(n);
        }
        let victims: Vec<Vec<u8>> = fs
            .read_dir(dir)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| !keep.contains(n))
            .enumerate()
            .filter(|(i, _)| (i + round) % 7 == 0)
            .map(|(_, n)| n)
            .collect();
        for v in victims {
            fs.unlink(dir, &v).unwrap();
        }
    }
    listed
}

fn check_listing(mke2fs: &[&str], size_mib: u64, initial: usize, page: usize, grow: usize) {
    let img = make_empty_image(mke2fs, size_mib);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let dir = fs.mkdir(2, b"d", CREATOR).unwrap();
    let mut ever = BTreeSet::new();
    for i in 0..initial {
        fs.create(dir, &name(i), CREATOR).unwrap();
        ever.insert(name(i));
    }
    // Every third initial name stays the whole time.
    let keep: BTreeSet<Vec<u8>> = (0..initial).step_by(3).map(name).collect();
    let mut next = initial;
    let listed = list_while_changing(&fs, dir, page, grow, &mut next, &keep, &mut ever);
    for (n, times) in &listed {
        assert_eq!(
            *times,
            1,
            "{} listed {times} times",
            String::from_utf8_lossy(n)
        );
        assert!(
            ever.contains(n),
            "{} was never created",
            String::from_utf8_lossy(n)
        );
    }
    for n in &keep {
        assert!(
            listed.contains_key(n),
            "{} stayed in the directory but was not listed",
            String::from_utf8_lossy(n)
        );
    }
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

#[test]
fn a_linear_directory_lists_each_staying_name_once_while_it_changes() {
    check_listing(
        &["-t", "ext4", "-O", "^dir_index", "-b", "1024"],
        32,
        300,
        9,
        5,
    );
}

#[test]
fn an_indexed_directory_lists_each_staying_name_once_through_leaf_splits() {
    // 1 KiB blocks: a few hundred names fill many leaves, and every page's creates split
    // some of them.
    check_listing(&["-t", "ext4", "-b", "1024"], 64, 1500, 40, 60);
}

#[test]
fn an_inline_directory_lists_each_staying_name_once_as_it_grows_out_of_the_inode() {
    check_listing(
        &["-t", "ext4", "-O", "inline_data", "-I", "512", "-b", "1024"],
        32,
        4,
        2,
        3,
    );
}

/// Cookies start past "." and ".."; a cookie past the end lists nothing; a listing of a
/// file is refused.
#[test]
fn cookies_cover_the_whole_directory_and_nothing_else() {
    let img = make_empty_image(&["-t", "ext4"], 16);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let dir = fs.mkdir(2, b"d", CREATOR).unwrap();
    let file = fs.create(dir, b"f", CREATOR).unwrap();
    let mut all = Vec::new();
    fs.read_dir_from(dir, 0, |e, c| {
        all.push((e.name, c));
        true
    })
    .unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].0, b"f");
    let mut after = 0;
    fs.read_dir_from(dir, all[0].1, |_, _| {
        after += 1;
        true
    })
    .unwrap();
    assert_eq!(after, 0);
    assert!(matches!(
        fs.read_dir_from(file, 0, |_, _| true),
        Err(e4_fs::Error::NotADirectory(_))
    ));
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}
