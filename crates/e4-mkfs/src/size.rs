//! Sizes as mke2fs reads them (`parse_num_blocks2`): a number with an optional suffix
//! K, M, G, T, P or E (powers of 1024, case-insensitive, an optional trailing "B" or
//! "iB"); a bare number counts blocks of the size given with `-b`, or KiB without it.

use crate::error::{invalid, Result};

/// Parses `text` into bytes. `block_size` is what a bare number counts (mke2fs: the `-b`
/// block size, else 1024).
pub fn parse_size(text: &str, block_size: u64) -> Result<u64> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, suffix) = trimmed.split_at(digits_end);
    let number: u64 = digits.parse().map_err(|_| {
        invalid(
            "size",
            format!("{text:?} is not a number of bytes or blocks"),
        )
    })?;
    let suffix = suffix.to_ascii_uppercase();
    let suffix = suffix
        .strip_suffix("IB")
        .or_else(|| suffix.strip_suffix('B').filter(|s| !s.is_empty()))
        .unwrap_or(&suffix);
    let unit: u64 = match suffix {
        "" => block_size,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        "P" => 1 << 50,
        "E" => 1 << 60,
        "S" => 512,
        _ => return Err(invalid("size", format!("{text:?} has an unknown suffix"))),
    };
    number
        .checked_mul(unit)
        .ok_or_else(|| invalid("size", format!("{text:?} is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_and_bare_numbers() {
        assert_eq!(parse_size("64M", 1024).unwrap(), 64 << 20);
        assert_eq!(parse_size("1g", 1024).unwrap(), 1 << 30);
        assert_eq!(parse_size("2GiB", 1024).unwrap(), 2 << 30);
        assert_eq!(parse_size("100", 1024).unwrap(), 102_400);
        assert_eq!(parse_size("100", 4096).unwrap(), 409_600);
        assert!(parse_size("12Q", 1024).is_err());
        assert!(parse_size("M", 1024).is_err());
        assert!(parse_size("99999999999E", 1024).is_err());
    }
}
