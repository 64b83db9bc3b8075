//! The six directory hash variants against e2fsprogs' own implementation, via
//! `debugfs dx_hash`, on random names (high bytes included, so signed and unsigned differ;
//! lengths crossing the 16- and 32-byte chunk boundaries), with and without a seed.

use std::process::Command;

use e4_format::dir_hash::{dir_hash, HashVersion};
use rand::{Rng, SeedableRng};

const VERSIONS: [(u8, HashVersion); 6] = [
    (0, HashVersion::Legacy),
    (1, HashVersion::HalfMd4),
    (2, HashVersion::Tea),
    (3, HashVersion::LegacyUnsigned),
    (4, HashVersion::HalfMd4Unsigned),
    (5, HashVersion::TeaUnsigned),
];

fn random_name(rng: &mut impl Rng) -> String {
    let len = rng.gen_range(0..=80);
    // A leading letter keeps debugfs from reading the name as an option.
    let mut name = String::from("n");
    for _ in 0..len {
        let c = match rng.gen_range(0..10) {
            0 => 'é',
            1 => '語',
            _ => rng.gen_range(b'!'..=b'~') as char,
        };
        if !matches!(c, '"' | '\\' | '\'' | '#') {
            name.push(c);
        }
    }
    name
}

#[test]
fn matches_debugfs_dx_hash() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("hash.img");
    let ok = Command::new(e4_testkit::tool("mke2fs"))
        .args(["-q", "-F", "-t", "ext4"])
        .arg(&image)
        .arg("4M")
        .status()
        .expect("mke2fs must be installed");
    assert!(ok.success());
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let seed_bytes: [u8; 16] = rng.gen();
    let seed_uuid = {
        let h: String = seed_bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    };
    let seed_words: [u32; 4] = std::array::from_fn(|i| {
        u32::from_le_bytes(seed_bytes[4 * i..4 * i + 4].try_into().unwrap())
    });

    let mut cases = Vec::new();
    let mut script = String::new();
    for i in 0..300 {
        let name = random_name(&mut rng);
        let (code, version) = VERSIONS[i % VERSIONS.len()];
        let seeded = i % 2 == 0;
        script.push_str(&format!(
            "dx_hash -h {code} {} {name}\n",
            if seeded {
                format!("-s {seed_uuid}")
            } else {
                String::new()
            }
        ));
        cases.push((name, version, seeded));
    }
    let script_path = dir.path().join("script");
    std::fs::write(&script_path, script).unwrap();
    let out = Command::new(e4_testkit::tool("debugfs"))
        .arg("-f")
        .arg(&script_path)
        .arg(&image)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let results: Vec<(u32, u32)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.rsplit_once(" is 0x")?.1;
            let (major, minor) = rest.split_once(" (minor 0x")?;
            Some((
                u32::from_str_radix(major, 16).ok()?,
                u32::from_str_radix(minor.trim_end_matches(')'), 16).ok()?,
            ))
        })
        .collect();
    assert_eq!(results.len(), cases.len(), "debugfs output:\n{text}");
    for ((name, version, seeded), (major, minor)) in cases.iter().zip(results) {
        let seed = if *seeded { seed_words } else { [0; 4] };
        let ours = dir_hash(*version, name.as_bytes(), &seed);
        assert_eq!(
            (ours.major, ours.minor),
            (major, minor),
            "{version:?} of {name:?} (seeded: {seeded})"
        );
    }
}
