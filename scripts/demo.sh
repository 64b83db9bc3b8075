#!/usr/bin/env bash
# Makes a sample ext4 image with mke2fs, then reads it with e4: info, ls, cat, and export of
# the whole tree, which must equal the source tree. Uses `e4` from PATH, or target/release.
set -euo pipefail
# mke2fs lives in /sbin, which a non-root user's PATH may lack on Debian.
PATH="$PATH:/usr/sbin:/sbin"
e4=$(command -v e4 || echo "$(dirname "$0")/../target/release/e4")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { printf '\n== %s\n' "$*"; }
mkdir -p "$work/src/docs/deep/er"
echo "hello from e4" > "$work/src/hello.txt"
head -c 3000000 /dev/urandom > "$work/src/random.bin"
ln -s hello.txt "$work/src/link"
echo nested > "$work/src/docs/deep/er/file.txt"
# The image file exists before mke2fs runs, so mke2fs does not announce creating it.
truncate -s 32M "$work/sample.img"
mke2fs -q -F -t ext4 -d "$work/src" "$work/sample.img"
step "e4 info sample.img   (the superblock, like dumpe2fs -h)"
"$e4" info "$work/sample.img"
step "e4 ls -lh sample.img /"
"$e4" ls -lh "$work/sample.img" /
step "e4 cat sample.img /link   (follows the symlink)"
"$e4" cat "$work/sample.img" /link
step "e4 export sample.img out/   (the whole tree, in parallel)"
"$e4" export "$work/sample.img" "$work/out"
diff -r --no-dereference "$work/src" "$work/out" --exclude=lost+found
echo "export matches the source tree"
