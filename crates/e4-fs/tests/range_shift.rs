//! fallocate's COLLAPSE_RANGE and INSERT_RANGE against a model of the file's bytes (a
//! `Vec<u8>`): removing and inserting ranges at several places, in shallow and depth-2
//! extent trees, an inline file, and the kernel's refusals. Every image ends with
//! `e2fsck -fn`, and where loop mounts work the kernel reads the files e4 left.

use e4_fs::{Creator, Error, FallocateMode, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image, KernelMount};

const ROOT: u32 = 2;
const ME: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// Bytes that differ in every block and every position, so a block moved to the wrong place
/// shows.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The file after `op` on it, as the model sees it.
fn apply(model: &mut Vec<u8>, mode: FallocateMode, offset: u64, len: u64) {
    let (offset, len) = (offset as usize, len as usize);
    match mode {
        FallocateMode::CollapseRange => {
            model.drain(offset..offset + len);
        }
        FallocateMode::InsertRange => {
            model.splice(offset..offset, std::iter::repeat_n(0, len));
        }
        other => panic!("not a range shift: {other:?}"),
    }
}

/// Runs `ops` (mode, offset, length, in blocks) on file `ino`, checking its bytes and size
/// against `model` after each.
fn run(fs: &Filesystem, ino: u32, model: &mut Vec<u8>, ops: &[(FallocateMode, u64, u64)]) {
    let bs = u64::from(fs.block_size());
    for (step, &(mode, offset, len)) in ops.iter().enumerate() {
        fs.fallocate(ino, mode, offset * bs, len * bs)
            .unwrap_or_else(|e| panic!("step {step}: {mode:?} {offset}+{len}: {e}"));
        apply(model, mode, offset * bs, len * bs);
        assert_eq!(
            fs.metadata(ino).unwrap().size,
            model.len() as u64,
            "step {step}"
        );
        let got = fs.read_file(ino, 1 << 30).unwrap();
        assert!(
            got == *model,
            "step {step}: {mode:?} {offset}+{len}: bytes differ"
        );
    }
}

/// After unmount: e2fsck passes, a read-only reopen reads `expected`, and so does the
/// kernel where it can mount the image.
fn check_image(path: &std::path::Path, files: &[(&str, &[u8])]) {
    e2fsck_clean(path).unwrap();
    let fs = Filesystem::open(path, OpenOptions::default()).unwrap();
    for (name, expected) in files {
        let ino = fs.resolve(&format!("/{name}"), true).unwrap();
        assert!(fs.read_file(ino, 1 << 30).unwrap() == *expected, "{name}");
    }
    drop(fs);
    if let Ok(mount) = KernelMount::mount(path) {
        for (name, expected) in files {
            let got = std::fs::read(mount.path().join(name)).unwrap();
            assert!(got == *expected, "the kernel reads other bytes in {name}");
        }
    }
}

use FallocateMode::{CollapseRange as Collapse, InsertRange as Insert};

#[test]
fn collapsing_and_inserting_ranges_match_the_model() {
    for args in [&["-t", "ext4"][..], &["-t", "ext4", "-b", "1024"]] {
        let img = make_empty_image(args, 64);
        let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
        let bs = u64::from(fs.block_size());
        let ino = fs.create(ROOT, b"f", ME).unwrap();
        // 300 blocks and a partial one, written in pieces so the file has several extents,
        // and blocks preallocated past the end (they move too).
        let mut model = pattern(300 * bs as usize + 123, 1);
        for piece in model.chunks(37 * bs as usize).enumerate() {
            fs.write_at(ino, (piece.0 * 37) as u64 * bs, piece.1)
                .unwrap();
        }
        fs.fallocate(ino, FallocateMode::KeepSize, 301 * bs, 20 * bs)
            .unwrap();
        let ops = [
            (Collapse, 0, 1),
            (Collapse, 10, 30),
            (Insert, 0, 2),
            (Insert, 5, 100),
            (Collapse, 5, 100),
            (Insert, 36, 1),
            (Collapse, 200, 40),
            (Insert, 1, 5000),
            (Collapse, 3, 4900),
        ];
        run(&fs, ino, &mut model, &ops);
        // The last whole block (the range must end before the end of the file).
        let last = model.len() as u64 / bs - 1;
        run(&fs, ino, &mut model, &[(Collapse, last, 1)]);
        fs.unmount().unwrap();
        check_image(&img.path, &[("f", &model)]);
    }
}

#[test]
fn shifts_in_a_depth_2_tree_made_by_punching_every_third_block() {
    let img = make_empty_image(&["-t", "ext4", "-b", "1024"], 64);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"holes", ME).unwrap();
    // 3,000 blocks, every third one punched: 1,000 two-block extents, 84 per 1 KiB leaf,
    // depth 2.
    let blocks = 3000u64;
    let mut model = pattern(blocks as usize * 1024, 2);
    fs.write_at(ino, 0, &model).unwrap();
    for b in (0..blocks).step_by(3) {
        fs.fallocate(ino, FallocateMode::PunchHole, b * 1024, 1024)
            .unwrap();
        model[b as usize * 1024..(b as usize + 1) * 1024].fill(0);
    }
    let depth = || {
        e4_format::extent::ExtentNode::parse(
            &fs.read_inode(ino).unwrap().record.block,
            e4_format::Location::Inode(ino),
        )
        .unwrap()
        .header
        .depth
    };
    assert_eq!(depth(), 2);
    // Inserting inside two-block extents splits them (in full leaves: a new leaf), and
    // collapsing the same ranges makes the halves adjacent again, to merge.
    let inside: Vec<u64> = (0..blocks / 3).step_by(37).map(|k| 3 * k + 2).collect();
    let splits: Vec<_> = inside.iter().rev().map(|&b| (Insert, b, 5)).collect();
    run(&fs, ino, &mut model, &splits);
    let joins: Vec<_> = inside.iter().rev().map(|&b| (Collapse, b, 5)).collect();
    run(&fs, ino, &mut model, &joins);
    // Odd lengths make holes and data meet, and leaves' keys cross their parents'.
    let ops = [
        (Collapse, 1, 2),
        (Collapse, 100, 1),
        (Insert, 0, 1),
        (Insert, 333, 7),
        (Collapse, 170, 500),
        (Insert, 900, 90_000),
        (Collapse, 5, 90_000),
        (Collapse, 50, 1),
        (Insert, 1200, 3),
    ];
    run(&fs, ino, &mut model, &ops);
    assert!(depth() >= 1);
    fs.unmount().unwrap();
    check_image(&img.path, &[("holes", &model)]);
}

#[test]
fn an_inline_file_moves_out_of_its_inode_first() {
    let img = make_empty_image(&["-t", "ext4", "-O", "inline_data"], 32);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"small", ME).unwrap();
    let mut model = pattern(40, 3);
    fs.write_at(ino, 0, &model).unwrap();
    let inline = e4_format::inode::flags::INLINE_DATA;
    assert!(fs.read_inode(ino).unwrap().has_flag(inline));
    run(&fs, ino, &mut model, &[(Insert, 0, 1)]);
    assert!(!fs.read_inode(ino).unwrap().has_flag(inline));
    run(&fs, ino, &mut model, &[(Collapse, 0, 1)]);
    fs.unmount().unwrap();
    check_image(&img.path, &[("small", &model)]);
}

#[test]
fn the_kernels_refusals_change_nothing() {
    let img = make_empty_image(&["-t", "ext4"], 32);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"f", ME).unwrap();
    let content = pattern(10 * 4096 + 5, 4);
    fs.write_at(ino, 0, &content).unwrap();
    let invalid = |mode, offset, len| {
        let got = fs.fallocate(ino, mode, offset, len);
        assert!(
            matches!(got, Err(Error::Invalid(_))),
            "{mode:?} {offset}+{len}: {got:?}"
        );
    };
    // Not whole blocks.
    invalid(Collapse, 1, 4096);
    invalid(Collapse, 4096, 100);
    invalid(Insert, 4096, 4097);
    // A collapse must end before the end of the file (10 blocks + 5 bytes).
    invalid(Collapse, 4096, 10 * 4096);
    invalid(Collapse, 8 * 4096, 4 * 4096);
    // An insert must start inside the file.
    invalid(Insert, 11 * 4096, 4096);
    // With a size of whole blocks: a collapse may not reach the end, an insert may not
    // start there.
    let whole = fs.create(ROOT, b"whole", ME).unwrap();
    fs.write_at(whole, 0, &content[..4 * 4096]).unwrap();
    for (mode, offset, len) in [(Collapse, 0, 4), (Collapse, 3, 1), (Insert, 4, 1)] {
        let got = fs.fallocate(whole, mode, offset * 4096, len * 4096);
        assert!(
            matches!(got, Err(Error::Invalid(_))),
            "{mode:?} {offset}+{len}: {got:?}"
        );
    }
    fs.fallocate(whole, Insert, 3 * 4096, 4096).unwrap();
    // An insert must keep the size within the maximum (2^32 - 1 blocks for extent files).
    let max = ((1u64 << 32) - 1) * 4096;
    let got = fs.fallocate(ino, Insert, 0, max - 8 * 4096);
    assert!(matches!(got, Err(Error::FileTooBig(_))), "{got:?}");
    // Directories are not files.
    let dir = fs.mkdir(ROOT, b"d", ME).unwrap();
    let got = fs.fallocate(dir, Collapse, 0, 4096);
    assert!(matches!(got, Err(Error::IsADirectory(_))), "{got:?}");
    assert!(fs.read_file(ino, 1 << 20).unwrap() == content);
    // Only the end of the file may be collapsed away... by truncate; 4 KiB short of it works.
    fs.fallocate(ino, Collapse, 0, 9 * 4096).unwrap();
    assert!(fs.read_file(ino, 1 << 20).unwrap() == content[9 * 4096..]);
    fs.unmount().unwrap();
    let mut whole = content[..4 * 4096].to_vec();
    whole.splice(3 * 4096..3 * 4096, [0; 4096]);
    check_image(&img.path, &[("f", &content[9 * 4096..]), ("whole", &whole)]);
}

#[test]
fn block_mapped_files_are_refused_with_eopnotsupp() {
    let img = make_empty_image(&["-t", "ext3"], 32);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"old", ME).unwrap();
    let content = pattern(8 * 4096, 5);
    fs.write_at(ino, 0, &content).unwrap();
    // EOPNOTSUPP comes before the alignment check, as in ext4_collapse_range.
    for (mode, offset) in [(Collapse, 0), (Insert, 0), (Collapse, 1)] {
        let got = fs.fallocate(ino, mode, offset, 4096);
        assert!(
            matches!(got, Err(Error::NotSupported(_))),
            "{mode:?}: {got:?}"
        );
    }
    fs.unmount().unwrap();
    check_image(&img.path, &[("old", &content)]);
}
