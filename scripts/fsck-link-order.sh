#!/usr/bin/env bash
# Writes crates/e4/fsck-link-order.txt: the functions of the e4 program that `e4 fsck`
# runs, by their linker names, which crates/e4/build.rs hands to the linker
# (`--symbol-ordering-file`) so that they lie together at the start of the program's code
# and a check maps fewer pages of it (docs/BENCHMARKS.md, "A link order from a profile").
# The profile: callgrind (valgrind) on a release build, `e4 fsck -fn` at one and at two
# threads, of an image mke2fs fills from this repository's crates/ (its directories,
# extent files, symlinks and xattr-free files are the common case). Run it again after a
# large change to the checker or a new compiler: names the program no longer has are
# skipped by the linker, so a stale list only saves fewer pages.
#
# Usage: scripts/fsck-link-order.sh
set -euo pipefail
PATH="$PATH:/usr/sbin:/sbin"
repo=$(cd "$(dirname "$0")/.." && pwd)
cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p e4 --bin e4
target=$(cargo metadata --format-version 1 --no-deps --manifest-path "$repo/Cargo.toml" |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A copy, so that the profile names the program by a path of its own.
cp "$target/release/e4" "$work/e4"
truncate -s 256M "$work/fs.img"
mke2fs -q -F -t ext4 -d "$repo/crates" "$work/fs.img"
for threads in 1 2; do
  valgrind --tool=callgrind --demangle=no --compress-strings=no --compress-pos=no \
    --callgrind-out-file="$work/profile-$threads" \
    "$work/e4" fsck -fn -j "$threads" "$work/fs.img" > /dev/null 2> "$work/valgrind.log"
done
# The functions whose object is the program itself (not libc, not the loader), by name.
awk -v program="ob=$work/e4" '
  /^ob=/ { inside = ($0 == program) }
  /^fn=/ && inside { name = substr($0, 4); if (name !~ /^0x/ && name !~ /^\(/) print name }
' "$work"/profile-* | sort -u > "$repo/crates/e4/fsck-link-order.txt"
echo "$(wc -l < "$repo/crates/e4/fsck-link-order.txt") functions in crates/e4/fsck-link-order.txt"
