#!/usr/bin/env bash
# Builds `e4` with profile-guided optimisation: an instrumented build runs a training set
# (every `e4 bench` workload of the in-process engine at one and two threads, `e4 mkfs -d`
# of a source tree, `e4 fsck` and `e4 export` of the result), the profiles are merged,
# and the release build is made again with them. The engine's hot paths are long chains
# of small functions: a create or an unlink runs about 11,000 instructions spread over
# enough code to miss the instruction cache some 400 times (callgrind), which is what a
# profile lets the compiler lay out. docs/BENCHMARKS.md, "A profile-guided build", has
# what it changes. The plain `cargo build --release` stays what CI builds and tests.
#
# Usage: scripts/pgo-build.sh [OUT]   (default target/pgo/e4; prints the binary's path)
#
# Needs llvm-profdata of the compiler's LLVM: `rustup component add llvm-tools` (or set
# LLVM_PROFDATA). The training images live in a temporary directory under /dev/shm when it
# exists, and are removed.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/target/pgo/e4}
sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata=${LLVM_PROFDATA:-$sysroot/lib/rustlib/$host/bin/llvm-profdata}
[ -x "$profdata" ] || {
  echo "pgo-build: no llvm-profdata at $profdata (rustup component add llvm-tools)" >&2
  exit 1
}
tree=${PGO_TREE:-/usr/include}
work=$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo /tmp )/e4-pgo.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "pgo-build: instrumented build" >&2
RUSTFLAGS="-Cprofile-generate=$work/profiles" \
  cargo build --release -p e4 --target-dir "$repo/target/pgo-generate" \
    --manifest-path "$repo/Cargo.toml" >&2
trained=$repo/target/pgo-generate/release/e4

echo "pgo-build: training" >&2
"$trained" bench --targets e4 --threads 1,2 --duration 1 --size 64M \
  fallocate2 append create unlink create-shared unlink-shared dwsl seqwrite seqread >&2
"$trained" mkfs -q -d "$tree" "$work/tree.img" 256M >&2
"$trained" fsck -n "$work/tree.img" >&2
"$trained" export "$work/tree.img" "$work/exported" >&2

echo "pgo-build: optimised build" >&2
"$profdata" merge -o "$work/merged.profdata" "$work/profiles"
RUSTFLAGS="-Cprofile-use=$work/merged.profdata" \
  cargo build --release -p e4 --target-dir "$repo/target/pgo-use" \
    --manifest-path "$repo/Cargo.toml" >&2
mkdir -p "$(dirname "$out")"
cp "$repo/target/pgo-use/release/e4" "$out"
echo "$out"
