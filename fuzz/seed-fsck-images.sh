#!/usr/bin/env bash
# Seeds the checker fuzzer's corpus (fuzz/corpus/fsck) with small images (256 KiB) whose
# features reach the checker's own readers: the MMP block, the three quota trees, an
# inline directory and file, and an xattr value held in an inode.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p corpus/fsck
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
mkdir -p "$src/d"
echo hi > "$src/d/f"
head -c 2000 /dev/zero | tr '\0' v > "$src/value"
seed() {
  local name=$1
  shift
  mke2fs -q -F -t ext4 -b 1024 -N 64 "$@" "corpus/fsck/$name.img" 256K
}
seed mmp -O mmp -d "$src"
seed quota -O quota -E quotatype=usrquota:grpquota:prjquota -d "$src"
seed inline -O inline_data -d "$src"
seed ea_inode -O ea_inode
debugfs -w -R "write $src/d/f f" corpus/fsck/ea_inode.img >/dev/null
debugfs -w -R "ea_set -f $src/value /f user.big" corpus/fsck/ea_inode.img >/dev/null
