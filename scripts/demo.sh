#!/usr/bin/env bash
# Makes a sample ext4 image with mke2fs, then reads it with e4: info, ls, cat, and export of
# the whole tree, which must equal the source tree. Uses `e4` from PATH, or target/release.
set -euo pipefail
e4=$(command -v e4 || echo "$(dirname "$0")/../target/release/e4")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/docs/deep/er"
echo "hello from e4" > "$work/src/hello.txt"
head -c 3000000 /dev/urandom > "$work/src/random.bin"
ln -s hello.txt "$work/src/link"
echo nested > "$work/src/docs/deep/er/file.txt"
mke2fs -q -F -t ext4 -d "$work/src" "$work/sample.img" 32M
"$e4" info "$work/sample.img"
"$e4" ls -l "$work/sample.img" /
"$e4" cat "$work/sample.img" /link
"$e4" export "$work/sample.img" "$work/out"
diff -r --no-dereference "$work/src" "$work/out" --exclude=lost+found && echo "export matches the source tree"
