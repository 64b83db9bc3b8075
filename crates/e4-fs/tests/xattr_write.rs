//! Writing extended attributes and POSIX ACLs: many attributes of many sizes set, replaced
//! and removed on every profile (in the inode and in a block), blocks the kernel shares
//! between inodes copied on write, inline data kept, and random sequences against a model.
//! After each run `e2fsck -fn` must pass, and the attributes read back by e4 (after
//! reopening) and by the kernel (where loop mounts work) must equal what was set.

use std::collections::BTreeMap;
use std::path::Path;

use e4_format::features::CompatFeatures;
use e4_format::xattr::{entry_len, split_name, value_len};
use e4_fs::{Creator, Error, Filesystem, OpenOptions, XattrSet};
use e4_testkit::{e2fsck_clean, make_empty_image, make_image, KernelMount, Profile};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROOT: u32 = 2;
const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";

/// The profiles attributes are written on: (name, mke2fs arguments).
const XATTR_PROFILES: &[(&str, &[&str])] = &[
    ("4k-metadata-csum", &["-t", "ext4", "-b", "4096"]),
    ("128-byte-inodes", &["-t", "ext4", "-I", "128"]),
    ("1k", &["-t", "ext4", "-b", "1024"]),
    (
        "uninit-bg",
        &["-t", "ext4", "-O", "^metadata_csum,uninit_bg"],
    ),
];

fn creator() -> Creator {
    Creator {
        permissions: 0o644,
        uid: 0,
        gid: 0,
        umask: 0,
    }
}

/// Attributes by inode, then by full name.
type Model = BTreeMap<u32, BTreeMap<Vec<u8>, Vec<u8>>>;

/// An ACL in the xattr form (version 2): (tag, perm, id) per entry.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

const NO_ID: u32 = u32::MAX;

/// An ACL with named entries (so it is stored): owner rw, user `uid` r, group r, group
/// `gid` rw, mask `mask`, other r.
fn named_acl(uid: u32, gid: u32, mask: u16) -> Vec<u8> {
    acl(&[
        (1, 6, NO_ID),
        (2, 4, uid),
        (4, 4, NO_ID),
        (8, 6, gid),
        (0x10, mask, NO_ID),
        (0x20, 4, NO_ID),
    ])
}

/// Bytes an attribute takes in a block or inode: entry, stored name, value.
fn footprint(name: &[u8], size: usize) -> usize {
    let (_, stored) = split_name(name).unwrap();
    entry_len(stored.len()) + value_len(size)
}

/// Sets `name` on `ino` and checks the outcome against the model: errors where the model
/// says so, the value read back at once, NoSpace only when the value cannot fit one block
/// beside the inode's other attributes.
fn set(fs: &Filesystem, model: &mut Model, ino: u32, name: &[u8], value: &[u8], how: XattrSet) {
    let attrs = model.entry(ino).or_default();
    let exists = attrs.contains_key(name);
    let result = fs.set_xattr(ino, name, value, how);
    let what = format!(
        "set {} ({} bytes, {how:?}) on inode {ino}",
        String::from_utf8_lossy(name),
        value.len()
    );
    match (how, exists, result) {
        (XattrSet::Create, true, Err(Error::Exists(_))) => {}
        (XattrSet::Replace, false, Err(Error::NoAttribute(_))) => {}
        (XattrSet::Create, true, r) | (XattrSet::Replace, false, r) => {
            panic!("{what}: expected an error, got {r:?}")
        }
        (_, _, Ok(())) => {
            attrs.insert(name.to_vec(), value.to_vec());
        }
        (_, _, Err(Error::NoSpace(_))) => {
            let block_size = fs.block_size() as usize;
            let others: usize = attrs
                .iter()
                .filter(|(n, _)| n.as_slice() != name)
                .map(|(n, v)| footprint(n, v.len()))
                .sum();
            assert!(
                others + footprint(name, value.len()) > block_size - 36,
                "{what}: NoSpace although it fits one block"
            );
        }
        (_, _, Err(e)) => panic!("{what}: {e}"),
    }
    assert_eq!(
        fs.get_xattr(ino, name).unwrap().as_deref(),
        attrs.get(name).map(Vec::as_slice),
        "{what}: read back"
    );
}

fn remove(fs: &Filesystem, model: &mut Model, ino: u32, name: &[u8]) {
    let attrs = model.entry(ino).or_default();
    let result = fs.remove_xattr(ino, name);
    let what = format!("remove {} from inode {ino}", String::from_utf8_lossy(name));
    match (attrs.remove(name), result) {
        (Some(_), Ok(())) | (None, Err(Error::NoAttribute(_))) => {}
        (had, r) => panic!("{what}: had {:?}, got {r:?}", had.map(|v| v.len())),
    }
    assert_eq!(fs.get_xattr(ino, name).unwrap(), None, "{what}");
}

/// What e4 (through `fs`) shows for `ino` must equal the model.
fn check_e4(fs: &Filesystem, model: &Model, ino: u32, what: &str) {
    let want = model.get(&ino).cloned().unwrap_or_default();
    let mut names = fs.list_xattrs(ino).unwrap();
    names.sort();
    assert_eq!(
        names,
        want.keys().cloned().collect::<Vec<_>>(),
        "{what}: names of inode {ino}"
    );
    for (name, value) in &want {
        assert_eq!(
            fs.get_xattr(ino, name).unwrap().as_ref(),
            Some(value),
            "{what}: {} of inode {ino}",
            String::from_utf8_lossy(name)
        );
    }
}

/// What the kernel shows for `path` must equal the model's attributes of `ino`.
fn check_kernel(path: &Path, model: &Model, ino: u32, what: &str) {
    use std::os::unix::ffi::OsStrExt;
    let want = model.get(&ino).cloned().unwrap_or_default();
    let mut names: Vec<Vec<u8>> = xattr::list(path)
        .unwrap()
        .map(|n| n.as_bytes().to_vec())
        .collect();
    names.sort();
    assert_eq!(
        names,
        want.keys().cloned().collect::<Vec<_>>(),
        "{what}: kernel's names of {}",
        path.display()
    );
    for (name, value) in &want {
        let os_name = std::ffi::OsStr::from_bytes(name);
        assert_eq!(
            xattr::get(path, os_name).unwrap().as_ref(),
            Some(value),
            "{what}: kernel's {} of {}",
            String::from_utf8_lossy(name),
            path.display()
        );
    }
}

/// Unmounts, runs `e2fsck -fn`, and compares what e4 (reopened) and the kernel read with
/// the model; `paths` names each inode under the root.
fn check_image(fs: Filesystem, image: &Path, model: &Model, paths: &[(&str, u32)], what: &str) {
    fs.unmount().unwrap();
    e2fsck_clean(image).unwrap_or_else(|e| panic!("{what}: {e}"));
    let fs = Filesystem::open(image, OpenOptions::default()).unwrap();
    for &(_, ino) in paths {
        check_e4(&fs, model, ino, what);
    }
    if let Ok(mount) = KernelMount::mount(image) {
        for &(path, ino) in paths {
            check_kernel(&mount.path().join(path), model, ino, what);
        }
    }
}

/// Mode bits of `ino`'s record.
fn mode(fs: &Filesystem, ino: u32) -> u16 {
    fs.read_inode(ino).unwrap().record.mode
}

#[test]
fn many_attributes_of_many_sizes_on_every_profile() {
    let names: Vec<Vec<u8>> = (0..12)
        .map(|i| format!("user.attr{i}").into_bytes())
        .chain([
            b"trusted.t".to_vec(),
            b"security.s".to_vec(),
            format!("user.{}", "n".repeat(250)).into_bytes(),
        ])
        .collect();
    let sizes = [0, 1, 3, 4, 5, 17, 60, 100, 250, 500, 900, 1500, 3000, 4000];
    for &(profile, args) in XATTR_PROFILES {
        let img = make_empty_image(args, 16);
        let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
        let mut paths = Vec::new();
        for name in ["a", "b", "c"] {
            paths.push((name, fs.create(ROOT, name.as_bytes(), creator()).unwrap()));
        }
        let dir = fs.mkdir(ROOT, b"d", creator()).unwrap();
        paths.push(("d", dir));
        let mut model = Model::new();
        let mut rng = StdRng::seed_from_u64(7);
        for step in 0..600 {
            let ino = paths[rng.gen_range(0..paths.len())].1;
            let name = &names[rng.gen_range(0..names.len())];
            if rng.gen_bool(0.3) {
                remove(&fs, &mut model, ino, name);
            } else {
                let size = sizes[rng.gen_range(0..sizes.len())];
                let value: Vec<u8> = (0..size).map(|_| rng.gen()).collect();
                let how = [XattrSet::Either, XattrSet::Create, XattrSet::Replace][step % 3];
                set(&fs, &mut model, ino, name, &value, how);
            }
            if step % 97 == 0 {
                fs.sync().unwrap();
            }
        }
        // ACLs: stored ones (named entries), on files and the directory's default.
        let file = paths[0].1;
        set(
            &fs,
            &mut model,
            file,
            ACCESS,
            &named_acl(1000, 50, 5),
            XattrSet::Either,
        );
        assert_eq!(
            mode(&fs, file) & 0o777,
            0o654,
            "{profile}: mask sets group bits"
        );
        set(
            &fs,
            &mut model,
            dir,
            DEFAULT,
            &named_acl(1001, 51, 7),
            XattrSet::Either,
        );
        set(
            &fs,
            &mut model,
            dir,
            ACCESS,
            &named_acl(1002, 52, 6),
            XattrSet::Either,
        );
        // Errors that leave everything as it was.
        let long = format!("user.{}", "x".repeat(251)).into_bytes();
        assert!(matches!(
            fs.set_xattr(file, &long, b"v", XattrSet::Either),
            Err(Error::NameTooLong(_))
        ));
        assert!(matches!(
            fs.set_xattr(file, b"user.huge", &vec![1; 70_000], XattrSet::Either),
            Err(Error::NoSpace(_))
        ));
        assert!(matches!(
            fs.set_xattr(file, b"system.data", b"", XattrSet::Either),
            Err(Error::NotSupported(_))
        ));
        assert!(matches!(
            fs.set_xattr(file, b"other.x", b"", XattrSet::Either),
            Err(Error::NotSupported(_))
        ));
        assert!(matches!(
            fs.set_xattr(file, DEFAULT, &named_acl(1, 2, 7), XattrSet::Either),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(
            fs.set_xattr(
                file,
                ACCESS,
                &acl(&[(1, 6, NO_ID), (0x20, 4, NO_ID)]),
                XattrSet::Either
            ),
            Err(Error::Invalid(_))
        ));
        // A named user or group with id (uid_t)-1, which the kernel refuses to set.
        for no_id in [named_acl(NO_ID, 2, 7), named_acl(1, NO_ID, 7)] {
            assert!(matches!(
                fs.set_xattr(file, ACCESS, &no_id, XattrSet::Either),
                Err(Error::Invalid(_))
            ));
        }
        check_image(fs, &img.path, &model, &paths, profile);
    }
}

#[test]
fn access_acl_equivalent_to_the_mode_sets_the_mode_and_is_not_stored() {
    let img = make_empty_image(XATTR_PROFILES[0].1, 16);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let file = fs.create(ROOT, b"f", creator()).unwrap();
    let mut model = Model::new();
    set(
        &fs,
        &mut model,
        file,
        ACCESS,
        &named_acl(7, 8, 4),
        XattrSet::Either,
    );
    assert_eq!(mode(&fs, file), 0o100644);
    let plain = acl(&[(1, 7, NO_ID), (4, 5, NO_ID), (0x20, 1, NO_ID)]);
    fs.set_xattr(file, ACCESS, &plain, XattrSet::Either)
        .unwrap();
    model.get_mut(&file).unwrap().remove(ACCESS);
    assert_eq!(mode(&fs, file), 0o100751);
    assert_eq!(fs.get_xattr(file, ACCESS).unwrap(), None);
    // An ACL with no entries removes a stored default ACL.
    let dir = fs.mkdir(ROOT, b"d", creator()).unwrap();
    set(
        &fs,
        &mut model,
        dir,
        DEFAULT,
        &named_acl(7, 8, 4),
        XattrSet::Either,
    );
    fs.set_xattr(dir, DEFAULT, &acl(&[]), XattrSet::Either)
        .unwrap();
    model.get_mut(&dir).unwrap().remove(DEFAULT);
    check_image(
        fs,
        &img.path,
        &model,
        &[("f", file), ("d", dir)],
        "equivalent ACL",
    );
}

#[test]
fn the_first_attribute_turns_on_ext_attr() {
    for args in [
        &["-t", "ext4", "-O", "^ext_attr", "-I", "128"][..],
        &["-t", "ext4", "-O", "^ext_attr"],
    ] {
        let img = make_empty_image(args, 8);
        let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
        assert!(!fs.superblock().compat().contains(CompatFeatures::EXT_ATTR));
        let file = fs.create(ROOT, b"f", creator()).unwrap();
        let mut model = Model::new();
        set(&fs, &mut model, file, b"user.x", b"value", XattrSet::Create);
        check_image(fs, &img.path, &model, &[("f", file)], "ext_attr");
        let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
        assert!(fs.superblock().compat().contains(CompatFeatures::EXT_ATTR));
    }
}

/// `h_refcount` of xattr block `nr`, read from the image.
fn refcount(image: &Path, block_size: u64, nr: u64) -> u32 {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(image).unwrap();
    let mut raw = [0u8; 4];
    file.read_exact_at(&mut raw, nr * block_size + 4).unwrap();
    u32::from_le_bytes(raw)
}

/// Files the kernel gave identical attributes, so they share one xattr block; `names` of
/// the files, the attributes set on each.
fn kernel_shared_block(image: &Path, names: &[&str], attrs: &[(&str, Vec<u8>)]) -> Option<()> {
    let mount = KernelMount::mount_writable(image).ok()?;
    for name in names {
        std::fs::write(mount.path().join(name), name.as_bytes()).unwrap();
        for (attr, value) in attrs {
            xattr::set(mount.path().join(name), attr, value).unwrap();
        }
    }
    Some(())
}

#[test]
fn blocks_shared_by_the_kernel_are_copied_on_write() {
    // 128-byte inodes: every attribute goes to the block.
    let img = make_empty_image(&["-t", "ext4", "-I", "128", "-b", "1024"], 16);
    let attrs = [
        ("user.shared", vec![b's'; 50]),
        ("user.two", vec![b't'; 20]),
    ];
    if kernel_shared_block(&img.path, &["a", "b", "c"], &attrs).is_none() {
        return;
    }
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let inos: Vec<u32> = ["a", "b", "c"]
        .iter()
        .map(|n| fs.lookup(ROOT, n.as_bytes()).unwrap().unwrap())
        .collect();
    let shared = fs.read_inode(inos[0]).unwrap().file_acl();
    for &ino in &inos {
        assert_eq!(fs.read_inode(ino).unwrap().file_acl(), shared);
    }
    assert_eq!(
        refcount(&img.path, 1024, shared),
        3,
        "the kernel shares the block"
    );
    let mut model = Model::new();
    for &ino in &inos {
        for (name, value) in &attrs {
            model
                .entry(ino)
                .or_default()
                .insert(name.as_bytes().to_vec(), value.clone());
        }
    }
    let (a, b, c) = (inos[0], inos[1], inos[2]);
    set(
        &fs,
        &mut model,
        a,
        b"user.mine",
        b"only a",
        XattrSet::Create,
    );
    remove(&fs, &mut model, b, b"user.shared");
    let a_block = fs.read_inode(a).unwrap().file_acl();
    let b_block = fs.read_inode(b).unwrap().file_acl();
    assert!(a_block != shared && b_block != shared && a_block != b_block);
    assert_eq!(fs.read_inode(c).unwrap().file_acl(), shared);
    // c is now the block's only user: changed in place, then freed with its last attribute.
    set(
        &fs,
        &mut model,
        c,
        b"user.two",
        b"changed",
        XattrSet::Replace,
    );
    assert_eq!(fs.read_inode(c).unwrap().file_acl(), shared);
    fs.sync().unwrap();
    assert_eq!(refcount(&img.path, 1024, shared), 1);
    remove(&fs, &mut model, c, b"user.shared");
    remove(&fs, &mut model, c, b"user.two");
    assert_eq!(fs.read_inode(c).unwrap().file_acl(), 0);
    check_image(
        fs,
        &img.path,
        &model,
        &[("a", a), ("b", b), ("c", c)],
        "shared",
    );
}

#[test]
fn concurrent_copies_of_one_shared_block_keep_its_count() {
    let img = make_empty_image(&["-t", "ext4", "-I", "128"], 32);
    let names: Vec<String> = (0..320).map(|i| format!("f{i}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let attrs = [("user.shared", vec![b's'; 100])];
    const COPIED: usize = 256;
    if kernel_shared_block(&img.path, &name_refs, &attrs).is_none() {
        return;
    }
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let inos: Vec<u32> = names
        .iter()
        .map(|n| fs.lookup(ROOT, n.as_bytes()).unwrap().unwrap())
        .collect();
    let shared = fs.read_inode(inos[0]).unwrap().file_acl();
    let block_size = u64::from(fs.block_size());
    assert_eq!(
        refcount(&img.path, block_size, shared),
        320,
        "one block for all"
    );
    // Each of 8 threads copies the block for its 32 files; the last 64 files keep it.
    std::thread::scope(|s| {
        for chunk in inos[..COPIED].chunks(COPIED / 8) {
            let fs = &fs;
            s.spawn(move || {
                for &ino in chunk {
                    fs.set_xattr(ino, b"user.own", &ino.to_le_bytes(), XattrSet::Create)
                        .unwrap();
                }
            });
        }
    });
    let mut model = Model::new();
    for (i, &ino) in inos.iter().enumerate() {
        let attrs = model.entry(ino).or_default();
        attrs.insert(b"user.shared".to_vec(), vec![b's'; 100]);
        if i < COPIED {
            attrs.insert(b"user.own".to_vec(), ino.to_le_bytes().to_vec());
        }
    }
    let paths: Vec<(&str, u32)> = name_refs
        .iter()
        .copied()
        .zip(inos.iter().copied())
        .collect();
    // e2fsck counts the block's referrers against h_refcount (PR_1_EXTATTR_REFCOUNT).
    check_image(fs, &img.path, &model, &paths, "concurrent copies");
}

#[test]
fn inline_data_survives_attribute_changes() {
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("small"), b"hello inline").unwrap();
    let medium: Vec<u8> = (0..100u8).collect();
    std::fs::write(src.path().join("medium"), &medium).unwrap();
    std::fs::create_dir(src.path().join("dir")).unwrap();
    std::fs::write(src.path().join("dir/inner"), b"x").unwrap();
    let profile = Profile {
        name: "inline-data",
        mke2fs_args: &["-t", "ext4", "-O", "inline_data"],
        mke2fs_miscopies: &[],
    };
    let img = make_image(src.path(), &profile, 16, 0);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let mut model = Model::new();
    let mut paths = Vec::new();
    for name in ["small", "medium", "dir"] {
        let ino = fs.lookup(ROOT, name.as_bytes()).unwrap().unwrap();
        paths.push((name, ino));
        set(
            &fs,
            &mut model,
            ino,
            b"user.first",
            b"in the inode",
            XattrSet::Create,
        );
        set(
            &fs,
            &mut model,
            ino,
            b"user.big",
            &[9; 300],
            XattrSet::Create,
        );
        set(
            &fs,
            &mut model,
            ino,
            b"user.first",
            b"changed",
            XattrSet::Replace,
        );
        remove(&fs, &mut model, ino, b"user.big");
    }
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let small = fs.resolve("/small", true).unwrap();
    assert_eq!(fs.read_file(small, 1 << 20).unwrap(), b"hello inline");
    let medium_ino = fs.resolve("/medium", true).unwrap();
    assert_eq!(fs.read_file(medium_ino, 1 << 20).unwrap(), medium);
    assert!(fs.resolve("/dir/inner", true).is_ok());
    check_image(fs, &img.path, &model, &paths, "inline data");
}

/// One step of a random sequence: on which inode (by position), which name, what.
#[derive(Debug, Clone)]
enum Step {
    Set {
        target: usize,
        name: usize,
        size: usize,
        how: XattrSet,
    },
    Remove {
        target: usize,
        name: usize,
    },
}

const STEP_NAMES: &[&[u8]] = &[
    b"user.a",
    b"user.bb",
    b"user.longer_name_here",
    b"trusted.x",
    b"security.y",
    b"user.z",
];

fn step() -> impl Strategy<Value = Step> {
    let how = prop_oneof![
        Just(XattrSet::Either),
        Just(XattrSet::Create),
        Just(XattrSet::Replace)
    ];
    let size = prop_oneof![0usize..8, 8usize..120, 120usize..700];
    prop_oneof![
        3 => (0usize..3, 0..STEP_NAMES.len(), size, how).prop_map(|(target, name, size, how)| {
            Step::Set { target, name, size, how }
        }),
        1 => (0usize..3, 0..STEP_NAMES.len())
            .prop_map(|(target, name)| Step::Remove { target, name }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_sequences_match_a_model(
        profile in 0..XATTR_PROFILES.len(),
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let (name, args) = XATTR_PROFILES[profile];
        let img = make_empty_image(args, 8);
        let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
        let paths = [
            ("f", fs.create(ROOT, b"f", creator()).unwrap()),
            ("g", fs.create(ROOT, b"g", creator()).unwrap()),
            ("d", fs.mkdir(ROOT, b"d", creator()).unwrap()),
        ];
        let mut model = Model::new();
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Step::Set { target, name, size, how } => {
                    let value: Vec<u8> = (0..size).map(|b| (b * 31 + i) as u8).collect();
                    set(&fs, &mut model, paths[target].1, STEP_NAMES[name], &value, how);
                }
                Step::Remove { target, name } => {
                    remove(&fs, &mut model, paths[target].1, STEP_NAMES[name]);
                }
            }
        }
        check_image(fs, &img.path, &model, &paths, name);
    }
}
