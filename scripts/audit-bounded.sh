#!/usr/bin/env bash
# Issue 23's cases, each run as a user runs it: a release build of e4, every command under
# `ulimit -v 4194304` (4 GiB of address space) and a timeout, its peak resident memory
# taken by GNU time, e2fsck beside e4 fsck where both check the same image. Prints one
# markdown row per command: the case, the command, its exit status, the line it ended
# with (its first line on stderr, else its last on stdout) and the peak in KiB; then
# whether an image an edit left behind is e2fsck-clean. docs/ARCHITECTURE.md ("Issue
# 23's audit") holds a run of it.
#
# Usage: scripts/audit-bounded.sh [--dir DIR]
#   DIR (default /dev/shm/e4-audit, tmpfs: the images are sparse files of up to 32 PiB)
#   is made and removed again. Takes two to three minutes.
set -euo pipefail
PATH="$PATH:/usr/sbin:/sbin"

dir=/dev/shm/e4-audit
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    *) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 16 ;;
  esac
done

repo=$(cd "$(dirname "$0")/.." && pwd)
cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p e4 --bin e4
target=$(cargo metadata --format-version 1 --no-deps --manifest-path "$repo/Cargo.toml" |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
e4=$target/release/e4
rm -rf "$dir"
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
cd "$dir"

# measure CASE COMMAND...: runs COMMAND under the address-space limit and a 300 s timeout
# and prints its row.
measure() {
  local case=$1 status
  shift
  set +e
  bash -c 'ulimit -v 4194304; exec timeout 300 /usr/bin/time -f %M -o m.peak "$@"' bash "$@" \
    > m.out 2> m.err
  status=$?
  set -e
  local line
  # GNU time's own line and e2fsck's version line say nothing of the result.
  line=$(grep -v -e '^Command exited with non-zero status' -e '^e2fsck [0-9.]* (' m.err |
    head -n 1 || true)
  [ -n "$line" ] || line=$(grep -v '^$' m.out | tail -n 1 || true)
  [ -n "$line" ] || line="(nothing printed)"
  local shown=${*//$e4/e4}
  shown=${shown//$dir\//}
  printf '| %s | `%s` | %s | %s | %s |\n' "$case" "${shown:0:90}" "$status" \
    "${line:0:110}" "$(tail -n 1 m.peak)"
}

# clean CASE IMAGE: e2fsck's verdict on an image an edit wrote.
clean() {
  local status=0
  e2fsck -fn "$2" > /dev/null 2>&1 || status=$?
  printf '| %s | `e2fsck -fn` after it | %s | %s | |\n' "$1" "$status" \
    "$([ $status = 0 ] && echo clean || echo NOT CLEAN)"
}

# image NAME SIZE MKE2FS-ARGS...: an empty image made by mke2fs.
image() {
  local name=$1 size=$2
  shift 2
  truncate -s "$size" "$name"
  mke2fs -q -F -t ext4 "$@" "$name"
}

echo "| case | command | exit | result | peak KiB |"
echo "|---|---|---:|---|---:|"

# Item 1: an inline file whose i_size claims 2 GiB, then 1 TiB (both checkers: clean).
mkdir -p src && printf 'forty bytes of inline data, then nothing' > src/f
for claim in 2147483648 1099511627776; do
  truncate -s 32M inline.img
  mke2fs -q -F -t ext4 -O inline_data -d src inline.img
  debugfs -w -R "sif /f size $claim" inline.img > /dev/null 2>&1
  measure "1 inline, i_size $claim" "$e4" export inline.img out
  printf '| | exported file | | %s bytes long, %s KiB allocated | |\n' \
    "$(stat -c %s out/f)" "$(du -k out/f | cut -f1)"
  rm -rf out
  measure "1 inline, i_size $claim" "$e4" fsck -fn inline.img
  measure "1 inline, i_size $claim" e2fsck -fn inline.img
done

# Item 2: a 20,000-level tree made by `e4 mkdir -p`: export, fsck, rm -r.
image deep.img 256M -N 21000
deep=$(printf '/d%.0s' $(seq 20000))
measure "2 mkdir -p 20,000 levels" "$e4" mkdir -p deep.img "$deep"
clean "2 mkdir -p 20,000 levels" deep.img
measure "2 export 20,000 levels" "$e4" export deep.img out
printf '| | exported levels | | %s | |\n' "$(find out -type d | wc -l)"
rm -rf out
measure "2 fsck 20,000 levels" "$e4" fsck -fn deep.img
measure "2 fsck 20,000 levels" e2fsck -fn deep.img
measure "2 rm -r 20,000 levels" "$e4" rm -r deep.img /d
clean "2 rm -r 20,000 levels" deep.img
# A 20,000-level host tree imported.
python3 -c '
import os
os.mkdir("host"); os.chdir("host")
for _ in range(20000):
    os.mkdir("d"); os.chdir("d")
open("bottom", "w").write("at the bottom\n")'
measure "2 import 20,000 host levels" "$e4" import deep.img host
clean "2 import 20,000 host levels" deep.img
rm -rf host deep.img
# A directory hard-linked into its own subtree.
image cycle.img 32M
"$e4" mkdir -p cycle.img /d/d/d
debugfs -w -R "ln /d /d/d/d/loop" cycle.img > /dev/null 2>&1
measure "2 cycle" "$e4" rm -r cycle.img /d
measure "2 cycle" "$e4" export cycle.img out
rm -rf out
measure "2 cycle" "$e4" fsck -fn cycle.img
measure "2 cycle" e2fsck -fn cycle.img
rm -f cycle.img

# Item 3: an empty 16 TiB image straight from mke2fs.
image big.img 16T -E lazy_itable_init=1,lazy_journal_init=1
measure "3 empty 16 TiB" "$e4" fsck -fn big.img
measure "3 empty 16 TiB" e2fsck -fn big.img
measure "3 empty 16 TiB" "$e4" export big.img out
rm -rf out big.img
# About 2.5 billion inodes (10 TiB, 32,768 inodes a group).
image inodes.img 10T -N 2500000000 -E lazy_itable_init=1,lazy_journal_init=1
measure "3 2.5e9 inodes" "$e4" fsck -fn inodes.img
measure "3 2.5e9 inodes" e2fsck -fn inodes.img
measure "3 2.5e9 inodes" "$e4" export inodes.img out
rm -rf out inodes.img
# A 32 MiB file whose superblock claims (2^32 - 1) * 32768 blocks (about 1 EiB).
image claim.img 32M -b 4096 -O 64bit
debugfs -w -R "ssv blocks_count $(((2 ** 32 - 1) * 32768))" claim.img > /dev/null 2>&1
measure "3 1 EiB claimed" "$e4" info claim.img
measure "3 1 EiB claimed" "$e4" fsck -fn claim.img
measure "3 1 EiB claimed" e2fsck -fn claim.img
rm -f claim.img
# Sparse files made as large as a claim of G groups of 128 MiB (16 inodes each), so that
# no size check refuses it: every table sized by groups is as large as the claim.
claim_groups() {
  image "$2" 32M -b 4096 -O 64bit
  printf 'ssv blocks_count %s\nssv inodes_per_group 16\nssv inodes_count %s\n' \
    $(($1 * 32768)) $(($1 * 16)) > claims.debugfs
  debugfs -w -f claims.debugfs "$2" > /dev/null 2>&1
  truncate -s $(($1 * 32768 * 4096)) "$2"
}
claim_groups $((2 ** 28 - 1)) groups.img
measure "3 2^28-1 groups claimed" "$e4" info groups.img
measure "3 2^28-1 groups claimed" "$e4" export groups.img out
measure "3 2^28-1 groups claimed" "$e4" fsck -fn groups.img
measure "3 2^28-1 groups claimed" e2fsck -fn groups.img
rm -rf out groups.img
claim_groups $((2 ** 16)) groups.img
measure "3 2^16 groups of garbage descriptors" "$e4" fsck -fn groups.img
measure "3 2^16 groups of garbage descriptors" e2fsck -fn groups.img
rm -f groups.img

# Item 6: the CLI's smaller defects that a command shows.
image small.img 32M
measure "6 ls without arguments" "$e4" ls
measure "6 export -j 65535" "$e4" export -j 65535 small.img out
measure "6 import -j 65535" "$e4" import -j 65535 small.img src
measure "6 put /proc/cpuinfo" "$e4" put small.img /proc/cpuinfo /cpuinfo
printf '| | copied | | %s bytes in the image, %s read from /proc/cpuinfo | |\n' \
  "$("$e4" cat small.img /cpuinfo | wc -c)" "$(wc -c < /proc/cpuinfo)"
clean "6 put /proc/cpuinfo" small.img
