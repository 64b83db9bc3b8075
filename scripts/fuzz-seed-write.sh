#!/usr/bin/env bash
# Seeds the write fuzzer's corpus (fuzz/corpus/write). An input is an image (whole KiBs)
# followed by up to 1,023 bytes that drive the operations; each seed is a small mke2fs
# image (mostly without metadata_csum, so mutations get past the checksums a writable open
# verifies) and a tail of pseudo-random operation bytes. Images: files, a symlink, an xattr
# block and in-inode xattrs, a directory of several blocks (linear and indexed),
# inline_data, ext2 (block maps), and ext3/ext4 with a journal.
set -euo pipefail
# e2fsprogs is in /usr/sbin and /sbin, off a normal user's PATH.
PATH="$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/../fuzz"
mkdir -p corpus/write
src=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$src" "$work"' EXIT
mkdir -p "$src/d" "$src/many"
echo hi > "$src/d/f"
head -c 5000 /dev/zero | tr '\0' z > "$src/d/big"
ln -s d/f "$src/l"
for i in $(seq 1 60); do : > "$src/many/entry_with_a_longish_name_$i"; done
head -c 300 /dev/zero | tr '\0' v > "$work/v300"
# debugfs, writing, quiet but for its errors.
dfs() {
  debugfs -w "$@" 2>&1 >/dev/null | grep -v '^debugfs [0-9]' >&2 || true
}
# name size mke2fs-options...
seed() {
  local name=$1 size=$2
  shift 2
  local out
  out=$(mke2fs -q -F -b 1024 -N 128 "$@" -d "$src" "$work/$name.img" "$size" 2>&1) || {
    echo "$out" >&2
    exit 1
  }
  dfs -R "ea_set /d/f user.small 12345" "$work/$name.img"
  dfs -R "ea_set -f $work/v300 /d/big user.big" "$work/$name.img"
}
seed plain 256K -t ext4 -O ^metadata_csum
seed linear 256K -t ext4 -O ^metadata_csum,^dir_index
seed htree 256K -t ext4 -O ^metadata_csum
e2fsck -fyD "$work/htree.img" >/dev/null 2>&1 || true
seed inline 256K -t ext4 -O ^metadata_csum,inline_data
seed csum 256K -t ext4
seed ext2 256K -t ext2
# Small ones: the more of an image is metadata, the more of its mutations reach it.
seed tiny4 128K -t ext4 -O ^metadata_csum,^resize_inode -N 80
seed tiny2 128K -t ext2 -O ^resize_inode -N 80
seed journal4 2M -t ext4 -O ^metadata_csum
seed journal3 2M -t ext3
# A file with indirect blocks (block maps), one whose extents need an index block
# (every other block punched out), an orphan list to finish at the open, and an xattr
# value in an inode of its own.
seed indirect 512K -t ext2
head -c 100000 /dev/zero | tr '\0' i > "$work/i100k"
dfs -R "write $work/i100k ind" "$work/indirect.img"
seed extents 512K -t ext4 -O ^metadata_csum
dfs -R "write $work/i100k frag" "$work/extents.img"
for b in $(seq 1 2 40); do
  dfs -R "punch frag $b $b" "$work/extents.img"
done
seed orphan 256K -t ext4 -O ^metadata_csum
dfs -R "write $work/i100k o" "$work/orphan.img"
ino=$(debugfs -R "stat o" "$work/orphan.img" 2>/dev/null | sed -n 's/^Inode: \([0-9]*\).*/\1/p')
dfs -f - "$work/orphan.img" <<EOS
unlink o
sif <$ino> links_count 0
ssv last_orphan $ino
EOS
seed ea_inode 256K -t ext4 -O ^metadata_csum,ea_inode
head -c 2000 /dev/zero | tr '\0' e > "$work/v2000"
dfs -R "ea_set -f $work/v2000 /d/f user.huge" "$work/ea_inode.img"
n=0
for img in "$work"/*.img; do
  n=$((n + 1))
  out="corpus/write/$(basename "$img" .img)"
  cp "$img" "$out"
  python3 -c "import random, sys; random.seed($n); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(400)))" >> "$out"
done
