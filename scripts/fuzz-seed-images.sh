#!/usr/bin/env bash
# Seeds the image fuzzer's corpus with small images (256 KiB) in a few feature sets.
set -euo pipefail
# e2fsprogs is in /usr/sbin and /sbin, off a normal user's PATH.
PATH="$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/../fuzz"
mkdir -p corpus/image
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
mkdir -p "$src/d"
echo hi > "$src/d/f"
ln -s d/f "$src/l"
for opts in "-t ext4 -b 1024" "-t ext2" "-t ext4 -O inline_data -b 1024"; do
  name=$(echo "$opts" | tr -d ' -')
  mke2fs -q -F $opts -N 64 -d "$src" "corpus/image/$name.img" 256K
done
