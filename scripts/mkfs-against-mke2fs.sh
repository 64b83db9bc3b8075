#!/usr/bin/env bash
# Random sets of mke2fs options, each given to mke2fs and to `e4 mkfs`: both must succeed or
# both fail (e4 may refuse what it does not support, by name), e4's image must pass
# `e2fsck -fn`, and `dumpe2fs` must show the same layout (times, checksums and the mount
# fields aside). Prints one line per disagreement and the count of sets tried. A search
# for bugs, not a test: what it finds becomes a case in crates/e4-mkfs/tests/mke2fs_equal.rs
# or crates/e4/tests/mkfs_cli.rs (on 2026-12-07 it found six mkfs bugs in 600 sets).
#
# Usage: scripts/mkfs-against-mke2fs.sh [SETS] [E4]   (default 150, target/release/e4)
set -uo pipefail

sets=${1:-150}
e4=${2:-target/release/e4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
uuid=11111111-2222-3333-4444-555555555555
opts=("-b 4096" "-b 2048" "-b 1024" "-t ext2" "-t ext3" "-t ext4" "-I 128" "-I 512" "-N 30"
  "-N 5000" "-i 4096" "-i 16384" "-m 0" "-m 20" "-O ^has_journal" "-O inline_data" "-O ^64bit"
  "-O ^metadata_csum" "-O ^flex_bg" "-O ^resize_inode" "-O ^sparse_super" "-O ^dir_index"
  "-O ^huge_file" "-O ^extent" "-O ^uninit_bg" "-O ^dir_nlink" "-O ^extra_isize" "-J size=4"
  "-J size=16" "-T small" "-T floppy" "-T huge" "-T news" "-T largefile" "-T largefile4"
  "-G 4" "-G 32" "-g 4096" "-g 16384" "-E lazy_itable_init=1" "-E lazy_itable_init=0"
  "-L lbl" "-e remount-ro" "-O metadata_csum_seed" "-E root_owner=5:6")
sizes=(64K 300K 1M 5M 17M 65M 129M 300M 1025M)
layout() {
  dumpe2fs "$1" 2>/dev/null |
    grep -v -i "time\|checksum\|csum\|lifetime\|created\|mount\|write\|checked"
}
for _ in $(seq "$sets"); do
  a=${opts[RANDOM % ${#opts[@]}]} b=${opts[RANDOM % ${#opts[@]}]} c=${opts[RANDOM % ${#opts[@]}]}
  size=${sizes[RANDOM % ${#sizes[@]}]}
  # e4 mkfs makes ext4 without -t; mke2fs (by that name) makes ext2.
  type=""
  case " $a $b $c " in *" -t "*) ;; *) type="-t ext4" ;; esac
  rm -f "$work/m.img" "$work/e.img"
  # shellcheck disable=SC2086 # the option sets are meant to split
  mke2fs -q -F $type $a $b $c -U $uuid -E hash_seed=$uuid "$work/m.img" "$size" >/dev/null 2>&1
  theirs=$?
  # shellcheck disable=SC2086
  out=$(timeout 60 "$e4" mkfs -q $a $b $c -U $uuid -E hash_seed=$uuid "$work/e.img" "$size" 2>&1)
  ours=$?
  said="$a $b $c $size"
  if [ $ours -gt 2 ] || grep -q "internal error" <<<"$out"; then
    echo "CRASH ($said): exit $ours: $out"
  elif [ $theirs -eq 0 ] && [ $ours -ne 0 ] && ! grep -q "not supported" <<<"$out"; then
    echo "ONLY E4 REFUSES ($said): $out"
  elif [ $theirs -ne 0 ] && [ $ours -eq 0 ]; then
    echo "ONLY MKE2FS REFUSES ($said)"
  elif [ $ours -eq 0 ]; then
    e2fsck -fn "$work/e.img" >/dev/null 2>&1 || echo "E2FSCK ($said)"
    if [ $theirs -eq 0 ] && ! diff -q <(layout "$work/e.img") <(layout "$work/m.img") >/dev/null; then
      echo "LAYOUT ($said): $(diff <(layout "$work/e.img") <(layout "$work/m.img") | head -4 | tr '\n' ' ')"
    fi
  fi
done
echo "$sets option sets tried"
