//! Owners of an imported tree: kept, all one (`--owner`), or mapped through ranges as a
//! user namespace maps them (`--uid-map`, `--gid-map`), so that a tree unpacked by a
//! rootless container build, owned on the host by the ids the namespace maps to, becomes
//! the image the container's root would have made.

/// The kernel's overflow id: what a process in a user namespace sees as the owner of a
/// file whose host id its namespace does not map (`/proc/sys/kernel/overflowuid`).
pub const OVERFLOW_ID: u32 = 65534;

/// How a host id (a uid, or a gid) becomes the image's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum IdRule {
    /// The host's id, as it is.
    #[default]
    Keep,
    /// This id, whatever the host's.
    All(u32),
    /// Through the ranges of a map.
    Map(IdMap),
}

impl IdRule {
    pub fn apply(&self, host: u32) -> u32 {
        match self {
            IdRule::Keep => host,
            IdRule::All(id) => *id,
            IdRule::Map(map) => map.inside(host),
        }
    }
}

/// Ranges as `/proc/PID/uid_map` lists them, written `INSIDE:OUTSIDE:COUNT[,...]`: the
/// host (outside) ids `OUTSIDE..OUTSIDE+COUNT` are the image's (inside) `INSIDE..`; a
/// host id in no range is the [`OVERFLOW_ID`], as a process in the namespace sees it.
/// Ranges may not overlap on either side, as the kernel refuses such maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdMap {
    ranges: Vec<IdRange>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IdRange {
    inside: u32,
    outside: u32,
    count: u32,
}

impl IdMap {
    /// Parses `INSIDE:OUTSIDE:COUNT[,INSIDE:OUTSIDE:COUNT...]` (decimal ids).
    pub fn parse(text: &str) -> Result<IdMap, String> {
        let mut ranges = Vec::new();
        for piece in text.split(',') {
            let bad = || format!("{piece:?} is not INSIDE:OUTSIDE:COUNT (decimal numbers)");
            let numbers: Vec<u32> = piece
                .split(':')
                .map(|n| n.parse::<u32>().map_err(|_| bad()))
                .collect::<Result<_, _>>()?;
            let [inside, outside, count] = numbers[..] else {
                return Err(bad());
            };
            // The last id a range reaches must be below u32::MAX (-1: "no id").
            let fits = |first: u32| first.checked_add(count).is_some();
            if count == 0 || !fits(inside) || !fits(outside) {
                return Err(format!(
                    "{piece:?}: a range holds 1 or more ids and ends at 4294967294 or below"
                ));
            }
            ranges.push(IdRange {
                inside,
                outside,
                count,
            });
        }
        for (i, a) in ranges.iter().enumerate() {
            for b in &ranges[i + 1..] {
                let overlap = |a0: u32, b0: u32| {
                    u64::from(a0) < u64::from(b0) + u64::from(b.count)
                        && u64::from(b0) < u64::from(a0) + u64::from(a.count)
                };
                if overlap(a.inside, b.inside) || overlap(a.outside, b.outside) {
                    return Err(format!(
                        "the ranges {}:{}:{} and {}:{}:{} overlap",
                        a.inside, a.outside, a.count, b.inside, b.outside, b.count
                    ));
                }
            }
        }
        Ok(IdMap { ranges })
    }

    /// The image's id for host id `outside`.
    pub fn inside(&self, outside: u32) -> u32 {
        self.ranges
            .iter()
            .find(|r| outside >= r.outside && outside - r.outside < r.count)
            .map_or(OVERFLOW_ID, |r| r.inside + (outside - r.outside))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_through_their_range_and_others_overflow() {
        let map = IdMap::parse("0:100000:65536,65536:1000:1").unwrap();
        assert_eq!(map.inside(100000), 0);
        assert_eq!(map.inside(165535), 65535);
        assert_eq!(map.inside(165536), OVERFLOW_ID);
        assert_eq!(map.inside(99999), OVERFLOW_ID);
        assert_eq!(map.inside(1000), 65536);
        assert_eq!(map.inside(1001), OVERFLOW_ID);
    }

    #[test]
    fn bad_maps_are_refused_with_the_range_named() {
        for (text, said) in [
            ("0:100000", "\"0:100000\" is not INSIDE:OUTSIDE:COUNT"),
            ("0:x:1", "is not INSIDE:OUTSIDE:COUNT"),
            ("0:1:0", "a range holds 1 or more ids"),
            ("4294967290:0:10", "ends at 4294967294 or below"),
            ("0:4294967295:1", "ends at 4294967294 or below"),
            (
                "0:100:10,5:200:10",
                "the ranges 0:100:10 and 5:200:10 overlap",
            ),
            (
                "0:100:10,50:105:1",
                "the ranges 0:100:10 and 50:105:1 overlap",
            ),
        ] {
            let err = IdMap::parse(text).unwrap_err();
            assert!(err.contains(said), "{text}: {err}");
        }
        assert!(
            IdMap::parse("0:100:10,10:110:10").is_ok(),
            "adjacent ranges"
        );
        assert!(IdMap::parse("0:4294967294:1").is_ok(), "the last id");
    }
}
