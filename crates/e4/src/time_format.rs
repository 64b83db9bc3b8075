//! Timestamps shown as UTC dates, without pulling in a calendar crate.

use e4_fs::Timestamp;

/// `YYYY-MM-DD HH:MM:SS.nnnnnnnnn +0000`, as `stat` prints in UTC.
pub fn format_timestamp(t: Timestamp) -> String {
    let days = t.seconds.div_euclid(86_400);
    let secs = t.seconds.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:09} +0000",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        t.nanoseconds
    )
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM` (for `ls -l`).
pub fn format_short(seconds: i64) -> String {
    format_timestamp(Timestamp {
        seconds,
        nanoseconds: 0,
    })[..16]
        .to_string()
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        let t = |s| {
            format_timestamp(Timestamp {
                seconds: s,
                nanoseconds: 5,
            })
        };
        assert_eq!(t(0), "1970-01-01 00:00:00.000000005 +0000");
        assert_eq!(t(951_782_400), "2000-02-29 00:00:00.000000005 +0000");
        assert_eq!(t(-1), "1969-12-31 23:59:59.000000005 +0000");
        assert_eq!(t(4_102_444_800), "2100-01-01 00:00:00.000000005 +0000");
    }
}
