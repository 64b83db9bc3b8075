//! Which shard of a sharded table a key falls in.

/// The shard of `key` among `shards` (a power of two), by Fibonacci hashing: neighbouring
/// keys land in different shards, and so do keys a multiple of the shard count apart (two
/// threads creating at the same pace in different groups use inode numbers that far
/// apart: taken modulo the shard count, they would meet in one shard at every step). The
/// block allocator's stream goals and e4-fs's buffer cache, inode cache and dirty inodes
/// all place keys by it.
pub fn shard_of(key: u64, shards: usize) -> usize {
    debug_assert!(shards.is_power_of_two());
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - shards.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_a_shard_count_apart_spread_over_shards() {
        let shards: std::collections::HashSet<usize> =
            (0..64u64).map(|i| shard_of(7 + i * 256, 256)).collect();
        assert!(shards.len() > 48, "{} shards", shards.len());
        assert!((0..10_000).all(|k| shard_of(k, 256) < 256));
    }
}
