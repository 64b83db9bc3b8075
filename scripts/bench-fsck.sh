#!/usr/bin/env bash
# The fsck speed benchmark of issue 9 §5: `e2fsck -fn` against `e4 fsck -fn -j N` on three
# images on tmpfs, cache warm.
#
#   small       about 2 million small files and directories (64 entries per directory)
#   fragmented  4 files of 8,000,000 blocks, every other block punched: 4 million one-block
#               extents each (the case where e2fsck's parallel pass 1 fell apart)
#   mixed       a mixed tree of 1 million entries: four large hash-tree directories holding
#               half of them, the rest files (some multi-extent), symlinks, hard links, xattrs
#
# The images are made by mke2fs and filled through e4's own write path
# (crates/e4-fsck/examples/bench_image.rs), which unmounts them cleanly: every checker must
# exit 0 on them, and the script stops if one does not. Each (image, checker) pair runs once
# to warm up, then RUNS times (e4's thread counts in rounds, e2fsck after them): wall time
# min/median/max and the median and largest peak RSS (GNU time -v). With --callgrind, both checkers (e4 at one thread) also run under callgrind on the
# images of `--scale dev`, and their instruction counts are printed.
#
# Usage: scripts/bench-fsck.sh [--scale dev|mid|full] [--runs N] [--threads "1 2 4 8"]
#                              [--dir DIR] [--only "small fragmented mixed"] [--callgrind]
#
#   --scale dev (default) makes images of seconds, for developing on a shared machine:
#   20,000 entries; 2 files of 100,000 blocks; 40,000 entries. --scale mid: 300,000
#   entries; 2 files of 600,000 blocks; 200,000 entries (about 1.5 GiB of tmpfs, tens of
#   seconds to make). --scale full makes the benchmark's images (about 6 GiB of tmpfs in
#   all; making them takes minutes).
#   Images are kept in DIR (default /dev/shm/e4-fsck-bench) and reused by later runs of the
#   same scale; delete DIR to make them again. Results go to stdout and DIR/results-SCALE.md.
set -euo pipefail
# e2fsprogs is in /usr/sbin and /sbin, off a normal user's PATH.
PATH="$PATH:/usr/sbin:/sbin"

scale=dev runs=5 threads="1 2 4 8" dir=/dev/shm/e4-fsck-bench only="small fragmented mixed"
callgrind=0
while [ $# -gt 0 ]; do
  case $1 in
    --scale) scale=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --callgrind) callgrind=1; shift ;;
    *) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 16 ;;
  esac
done
case $scale in dev | mid | full) ;; *) echo "--scale must be dev, mid or full" >&2; exit 16 ;; esac

repo=$(cd "$(dirname "$0")/.." && pwd)
cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p e4 --bin e4
cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p e4-fsck --example bench_image
target=$(cargo metadata --format-version 1 --no-deps --manifest-path "$repo/Cargo.toml" |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
e4=$target/release/e4
maker=$target/release/examples/bench_image
mkdir -p "$dir"
results=$dir/results-$scale.md
make_threads=$(nproc)

# make_image NAME SCALE: mke2fs, then bench_image; skipped if DIR/NAME-SCALE.img is complete.
make_image() {
  local name=$1 at=$2 img=$dir/$1-$2.img
  if [ -e "$img.done" ]; then echo "$img"; return; fi
  rm -f "$img" "$img.done"
  local mkfs fill
  case $name-$at in
    small-full) mkfs=(-N 2200000 "$img" 16G); fill=(small "$img" 2000000) ;;
    small-dev) mkfs=(-N 24000 "$img" 1G); fill=(small "$img" 20000) ;;
    fragmented-full) mkfs=(-N 65536 "$img" 160G); fill=(fragmented "$img" 4 8000000) ;;
    fragmented-dev) mkfs=("$img" 4G); fill=(fragmented "$img" 2 100000) ;;
    mixed-full) mkfs=(-N 1100000 "$img" 12G); fill=(mixed "$img" 1000000) ;;
    mixed-dev) mkfs=(-N 48000 "$img" 2G); fill=(mixed "$img" 40000) ;;
    small-mid) mkfs=(-N 330000 "$img" 4G); fill=(small "$img" 300000) ;;
    fragmented-mid) mkfs=("$img" 8G); fill=(fragmented "$img" 2 600000) ;;
    mixed-mid) mkfs=(-N 220000 "$img" 4G); fill=(mixed "$img" 200000) ;;
  esac
  mke2fs -q -F -t ext4 "${mkfs[@]}" >&2
  /usr/bin/time -f "made $name-$at in %e s" "$maker" "${fill[@]}" -j "$make_threads" >&2
  touch "$img.done"
  echo "$img"
}

# timed_run LOG COMMAND...: runs COMMAND once under GNU time and appends "WALL PEAK_KIB" to
# LOG; stops the script if it fails (every image is clean).
timed_run() {
  local log=$1; shift
  local start end
  # GNU time's elapsed time has 10 ms steps: the wall time is taken around it instead.
  start=$(date +%s%N)
  if ! /usr/bin/time -v -o "$log.time" "$@" > /dev/null 2>&1; then
    echo "$*: non-zero exit on a clean image:" >&2; cat "$log.time" >&2; exit 1
  fi
  end=$(date +%s%N)
  echo "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f", (b - a) / 1e9 }') $(awk -F': ' '/Maximum resident set size/ { print $2 }' "$log.time")" >> "$log"
}

# table_row LABEL LOG: the row for the runs in LOG (wall min, median, max; median and
# largest peak).
table_row() {
  local median_peak
  median_peak=$(sort -n -k2 "$2" | awk '{ p[NR] = $2 }
    END { printf "%.1f", (NR % 2 ? p[(NR + 1) / 2] : (p[NR / 2] + p[NR / 2 + 1]) / 2) / 1024 }')
  sort -g "$2" | awk -v label="$1" -v median_peak="$median_peak" '
    { w[NR] = $1; if ($2 > peak) peak = $2 }
    END { printf "| %s | %d | %.4f | %.4f | %.4f | %s | %.1f |\n", label, NR, w[1], (NR % 2 ? w[(NR + 1) / 2] : (w[NR / 2] + w[NR / 2 + 1]) / 2), w[NR], median_peak, peak / 1024 }'
}

{
  echo "## fsck benchmark, scale $scale, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "$(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/Mem:/ {print $2}') GiB;"
  echo "$(e2fsck -V 2>&1 | head -1); e4 at $(git -C "$repo" rev-parse --short HEAD);"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$results"

for name in $only; do
  img=$(make_image "$name" "$scale")
  cat "$img" > /dev/null # tmpfs pages are resident; this only touches them once
  {
    echo
    echo "### $name: $(e2fsck -fn "$img" 2>/dev/null | tail -1)"
    echo
    echo "| checker | runs | wall min s | wall median s | wall max s | peak RSS median MiB | peak RSS max MiB |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
  } | tee -a "$results"
  logs=$(mktemp -d)
  # e4's rows run in rounds (one run of each thread count, RUNS times, after a warm-up run
  # of each), so a slow stretch of the machine spreads over every row instead of landing on
  # one. e2fsck goes last: a process started just after another has freed hundreds of MiB
  # runs slower on this VM (the freed pages are being handed back to the host), and
  # e2fsck's hundreds of MiB would land on whichever e4 row came next.
  for t in $threads; do timed_run "$logs/warm-up" "$e4" fsck -fn -j "$t" "$img"; done
  for _ in $(seq "$runs"); do
    for t in $threads; do timed_run "$logs/j$t" "$e4" fsck -fn -j "$t" "$img"; done
  done
  for t in $threads; do table_row "e4 fsck -fn -j $t" "$logs/j$t" | tee -a "$results"; done
  timed_run "$logs/warm-up" e2fsck -fn "$img"
  for _ in $(seq "$runs"); do timed_run "$logs/e2fsck" e2fsck -fn "$img"; done
  table_row "e2fsck -fn" "$logs/e2fsck" | tee -a "$results"
  first=${threads%% *}
  for t in $threads; do
    [ "$t" = "$first" ] && continue
    # Paired: the runs of one round are seconds apart, so their ratio cancels a slow
    # stretch that the medians of the whole batch keep.
    paste -d' ' "$logs/j$first" "$logs/j$t" | awk '{ print $1 / $3 }' | sort -g |
      awk -v a="$first" -v b="$t" '{ r[NR] = $1 } END {
        printf "\n-j %s time / -j %s time, round by round: median %.2fx (%.2fx-%.2fx)\n",
          a, b, (NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2), r[1], r[NR] }'
  done | tee -a "$results"
  rm -rf "$logs"
done

if [ "$callgrind" = 1 ]; then
  {
    echo
    echo "### Instructions (callgrind, images of --scale dev, e4 at one thread)"
    echo
    echo "| image | e2fsck -fn | e4 fsck -fn -j 1 | e4 / e2fsck |"
    echo "|---|---:|---:|---:|"
  } | tee -a "$results"
  for name in $only; do
    img=$(make_image "$name" dev)
    count() { # COMMAND...: total instructions, all threads
      local out; out=$(mktemp -d)
      valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" "$@" > /dev/null 2> "$out/log" || true
      awk '/^summary:/ { s += $2 } END { print s }' "$out"/cg.* ; rm -rf "$out"
    }
    theirs=$(count e2fsck -fn "$img"); ours=$(count "$e4" fsck -fn -j 1 "$img")
    awk -v n="$name" -v a="$theirs" -v b="$ours" \
      'BEGIN { printf "| %s | %d | %d | %.2f |\n", n, a, b, b / a }' | tee -a "$results"
  done
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$results"
