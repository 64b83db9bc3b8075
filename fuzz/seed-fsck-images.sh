#!/usr/bin/env bash
# Seeds the checker fuzzer's corpus (fuzz/corpus/fsck) with small images (256 KiB) whose
# features reach the checker's own readers: the MMP block, the three quota trees, an
# inline directory and file, an xattr value held in an inode, an xattr block, and a
# directory of several blocks, linear and indexed (for holes and htree references).
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
seed xattr_block -O ^metadata_csum
debugfs -w -R "write $src/d/f f" corpus/fsck/xattr_block.img >/dev/null
head -c 300 /dev/zero | tr '\0' b > "$src/b300"
debugfs -w -R "ea_set -f $src/b300 /f user.big" corpus/fsck/xattr_block.img >/dev/null
debugfs -w -R "ea_set -f $src/b300 /f trusted.other" corpus/fsck/xattr_block.img >/dev/null
# 100 entries, three blocks, in a tree of their own (more inodes than the seeds above).
many=$(mktemp -d)
trap 'rm -rf "$src" "$many"' EXIT
for i in $(seq 1 100); do : > "$many/entry_with_a_longish_name_$i"; done
for name in dirs htree; do
  features=^metadata_csum
  [ "$name" = dirs ] && features=^metadata_csum,^dir_index
  mke2fs -q -F -t ext4 -b 1024 -N 128 -O "$features" -d "$many" "corpus/fsck/$name.img" 256K
done
e2fsck -fyD corpus/fsck/htree.img >/dev/null 2>&1 || true
