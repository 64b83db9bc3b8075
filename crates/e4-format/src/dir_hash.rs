//! Directory name hashes for htree indexes: legacy (`dx_hack_hash`), half-MD4 and TEA, each
//! with a signed-char and an unsigned-char variant (the superblock's `s_flags` says which the
//! filesystem was created with, because the original code depended on the CPU's `char`).

/// `dx_root_info.hash_version` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashVersion {
    Legacy,
    HalfMd4,
    Tea,
    LegacyUnsigned,
    HalfMd4Unsigned,
    TeaUnsigned,
}

impl HashVersion {
    /// Decodes `hash_version`; a signed variant becomes unsigned when the filesystem says
    /// hashes are unsigned (`EXT2_FLAGS_UNSIGNED_HASH`). SipHash (casefold) is not supported.
    pub fn from_disk(raw: u8, unsigned_fs: bool) -> Option<Self> {
        let version = match raw {
            0 => HashVersion::Legacy,
            1 => HashVersion::HalfMd4,
            2 => HashVersion::Tea,
            3 => HashVersion::LegacyUnsigned,
            4 => HashVersion::HalfMd4Unsigned,
            5 => HashVersion::TeaUnsigned,
            _ => return None,
        };
        Some(if unsigned_fs {
            version.unsigned()
        } else {
            version
        })
    }

    fn unsigned(self) -> Self {
        match self {
            HashVersion::Legacy => HashVersion::LegacyUnsigned,
            HashVersion::HalfMd4 => HashVersion::HalfMd4Unsigned,
            HashVersion::Tea => HashVersion::TeaUnsigned,
            other => other,
        }
    }

    fn is_signed(self) -> bool {
        matches!(
            self,
            HashVersion::Legacy | HashVersion::HalfMd4 | HashVersion::Tea
        )
    }
}

/// The (major, minor) hash of a name. The major hash orders htree entries; its low bit is
/// always clear (the index uses it to flag collisions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameHash {
    pub major: u32,
    pub minor: u32,
}

/// The largest major hash, reserved for end-of-directory (`EXT4_HTREE_EOF_32BIT`).
const HTREE_EOF_32BIT: u32 = 0x7FFF_FFFF;

/// Hashes `name` with `version` and the superblock's `s_hash_seed`.
pub fn dir_hash(version: HashVersion, name: &[u8], seed: &[u32; 4]) -> NameHash {
    let mut buf = [0x6745_2301u32, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    if seed.iter().any(|&w| w != 0) {
        buf = *seed;
    }
    let signed = version.is_signed();
    let (major, minor) = match version {
        HashVersion::Legacy | HashVersion::LegacyUnsigned => (legacy_hash(name, signed), 0),
        HashVersion::HalfMd4 | HashVersion::HalfMd4Unsigned => {
            for (i, chunk) in name.chunks(32).enumerate() {
                let remaining = name.len() - 32 * i;
                half_md4_transform(&mut buf, &words::<8>(chunk, remaining, signed));
            }
            (buf[1], buf[2])
        }
        HashVersion::Tea | HashVersion::TeaUnsigned => {
            for (i, chunk) in name.chunks(16).enumerate() {
                let remaining = name.len() - 16 * i;
                tea_transform(&mut buf, &words::<4>(chunk, remaining, signed));
            }
            (buf[0], buf[1])
        }
    };
    let mut major = major & !1;
    if major == HTREE_EOF_32BIT << 1 {
        major = (HTREE_EOF_32BIT - 1) << 1;
    }
    NameHash { major, minor }
}

fn char_value(byte: u8, signed: bool) -> u32 {
    if signed {
        byte as i8 as i32 as u32
    } else {
        u32::from(byte)
    }
}

/// `str2hashbuf`: packs up to `4 * N` bytes into words, padding with a word derived from
/// `len`, the length of the name from this chunk to its end (not the chunk's length).
fn words<const N: usize>(chunk: &[u8], len: usize, signed: bool) -> [u32; N] {
    let mut pad = (len as u32) | ((len as u32) << 8);
    pad |= pad << 16;
    let mut out = [pad; N];
    let mut val = pad;
    let take = chunk.len().min(4 * N);
    let mut filled = 0;
    for (i, &byte) in chunk[..take].iter().enumerate() {
        val = char_value(byte, signed).wrapping_add(val << 8);
        if i % 4 == 3 {
            out[filled] = val;
            filled += 1;
            val = pad;
        }
    }
    if filled < N {
        out[filled] = val;
    }
    out
}

fn legacy_hash(name: &[u8], signed: bool) -> u32 {
    let (mut hash0, mut hash1) = (0x12a3_fe2du32, 0x37ab_e8f9u32);
    for &byte in name {
        let mut hash = hash1.wrapping_add(hash0 ^ char_value(byte, signed).wrapping_mul(7_152_373));
        if hash & 0x8000_0000 != 0 {
            hash = hash.wrapping_sub(0x7fff_ffff);
        }
        hash1 = hash0;
        hash0 = hash;
    }
    hash0 << 1
}

fn tea_transform(buf: &mut [u32; 4], input: &[u32; 4]) {
    const DELTA: u32 = 0x9E37_79B9;
    let (mut b0, mut b1) = (buf[0], buf[1]);
    let [a, b, c, d] = *input;
    let mut sum = 0u32;
    for _ in 0..16 {
        sum = sum.wrapping_add(DELTA);
        b0 = b0.wrapping_add(
            ((b1 << 4).wrapping_add(a)) ^ (b1.wrapping_add(sum)) ^ ((b1 >> 5).wrapping_add(b)),
        );
        b1 = b1.wrapping_add(
            ((b0 << 4).wrapping_add(c)) ^ (b0.wrapping_add(sum)) ^ ((b0 >> 5).wrapping_add(d)),
        );
    }
    buf[0] = buf[0].wrapping_add(b0);
    buf[1] = buf[1].wrapping_add(b1);
}

fn half_md4_transform(buf: &mut [u32; 4], x: &[u32; 8]) {
    const K2: u32 = 0o13240474631;
    const K3: u32 = 0o15666365641;
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    let [mut a, mut b, mut c, mut d] = *buf;
    macro_rules! round {
        ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $x:expr, $s:expr) => {
            $a = $a
                .wrapping_add($f($b, $c, $d))
                .wrapping_add($x)
                .rotate_left($s)
        };
    }
    round!(f, a, b, c, d, x[0], 3);
    round!(f, d, a, b, c, x[1], 7);
    round!(f, c, d, a, b, x[2], 11);
    round!(f, b, c, d, a, x[3], 19);
    round!(f, a, b, c, d, x[4], 3);
    round!(f, d, a, b, c, x[5], 7);
    round!(f, c, d, a, b, x[6], 11);
    round!(f, b, c, d, a, x[7], 19);

    round!(g, a, b, c, d, x[1].wrapping_add(K2), 3);
    round!(g, d, a, b, c, x[3].wrapping_add(K2), 5);
    round!(g, c, d, a, b, x[5].wrapping_add(K2), 9);
    round!(g, b, c, d, a, x[7].wrapping_add(K2), 13);
    round!(g, a, b, c, d, x[0].wrapping_add(K2), 3);
    round!(g, d, a, b, c, x[2].wrapping_add(K2), 5);
    round!(g, c, d, a, b, x[4].wrapping_add(K2), 9);
    round!(g, b, c, d, a, x[6].wrapping_add(K2), 13);

    round!(h, a, b, c, d, x[3].wrapping_add(K3), 3);
    round!(h, d, a, b, c, x[7].wrapping_add(K3), 9);
    round!(h, c, d, a, b, x[2].wrapping_add(K3), 11);
    round!(h, b, c, d, a, x[6].wrapping_add(K3), 15);
    round!(h, a, b, c, d, x[1].wrapping_add(K3), 3);
    round!(h, d, a, b, c, x[5].wrapping_add(K3), 9);
    round!(h, c, d, a, b, x[0].wrapping_add(K3), 11);
    round!(h, b, c, d, a, x[4].wrapping_add(K3), 15);

    buf[0] = buf[0].wrapping_add(a);
    buf[1] = buf[1].wrapping_add(b);
    buf[2] = buf[2].wrapping_add(c);
    buf[3] = buf[3].wrapping_add(d);
}
