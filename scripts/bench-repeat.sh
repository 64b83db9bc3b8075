#!/usr/bin/env bash
# Repeats short `e4 bench` runs and prints the median, min and max of ops/s per workload,
# target and thread count, with the 2/1-thread ratio of medians: one `e4 bench` run is a
# single sample, and on the 2-vCPU VM two identical runs can differ by a third.
#
# Usage: scripts/bench-repeat.sh [--runs N] [--duration S] [--threads "1 2"]
#                                [--targets e4,kernel-ext4] [--binaries "BIN..."] [--samples]
#                                [--settle] WORKLOAD...
#
# The runs are interleaved (run 1 of every cell, then run 2, ...), so a slow minute on the
# machine spreads over every cell instead of landing on one. kernel-ext4 needs root.
# --binaries compares builds (A/B): each run runs every given `e4` binary in turn instead of
# building this tree, and the target column names the binary (`e4@NAME`), e.g.
# `git worktree add /tmp/base HEAD~1 && cargo build --release` there, then
# `--targets e4 --binaries "/tmp/base/target/release/e4 target/release/e4"` (copy them to
# distinct names first: the column uses the file name). --samples adds a column with every
# run's ops/s in run order, to tell a bimodal spread from a steady drift. --settle passes
# `e4 bench --settle` (each point's clock stops after the filesystem is written back).
set -euo pipefail

runs=5 duration=2 threads="1 2" targets=e4,kernel-ext4 binaries="" samples=0 settle=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --binaries) binaries=$2; shift 2 ;;
    --samples) samples=1; shift ;;
    --settle) settle=(--settle); shift ;;
    -*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 16 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "name at least one workload" >&2; exit 16; }

repo=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$binaries" ]; then
  cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p e4 --bin e4
  binaries=$(cargo metadata --format-version 1 --no-deps --manifest-path "$repo/Cargo.toml" |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/e4
  label() { echo ""; }
else
  label() { basename "$1"; }
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), e4 at $(git -C "$repo" rev-parse --short HEAD)," \
  "$(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq "$runs"); do
  for workload in "$@"; do
    for t in $threads; do
      for e4 in $binaries; do
        "$e4" bench "$workload" --targets "$targets" --threads "$t" --duration "$duration" \
          --baseline "${targets%%,*}" ${settle[@]+"${settle[@]}"} --json "$out/$(label "$e4")@$workload-$t-$run.json" \
          > "$out/log" 2>&1 || { cat "$out/log" >&2; exit 1; }
      done
    done
  done
done
jq -r '(input_filename | split("/") | last | split("@") | first) as $binary | .records[] |
    [.workload, (if $binary == "" then .target else .target + "@" + $binary end), .threads,
     .ops_per_sec, (input_filename | split("-") | last | rtrimstr(".json"))] | @tsv' "$out"/*.json |
  sort -k1,1 -k2,2 -k3,3n -k5,5n |
  awk -F'\t' -v samples="$samples" '
    # Whole ops/s, but three decimals below 100 (the tree workloads do a few trees a second).
    function rate(x) { return x >= 100 ? sprintf("%.0f", x) : sprintf("%.3f", x) }
    { key = $1 "\t" $2 "\t" $3
      in_order[key] = in_order[key] ($4 >= 1000 ? sprintf(" %.0fk", $4 / 1000) : " " rate($4)) }
    { v[key, ++n[key]] = $4; if (!(key in seen)) { seen[key]; order[++k] = key } }
    END {
      for (key in n) { c = n[key]; for (i = 2; i <= c; i++) { x = v[key, i]
        for (j = i - 1; j >= 1 && v[key, j] > x; j--) v[key, j + 1] = v[key, j]; v[key, j + 1] = x } }
      print "| workload | target | threads | runs | median ops/s | min | max | median / 1 thread |" (samples ? " runs in order |" : "")
      print "|---|---|---:|---:|---:|---:|---:|---:|" (samples ? "---|" : "")
      for (i = 1; i <= k; i++) {
        key = order[i]; c = n[key]
        med = (c % 2) ? v[key, (c + 1) / 2] : (v[key, c / 2] + v[key, c / 2 + 1]) / 2
        split(key, f, "\t"); one = f[1] "\t" f[2] "\t1"
        if (f[3] == 1) base[f[1], f[2]] = med
        ratio = ((f[1], f[2]) in base) ? sprintf("%.2fx", med / base[f[1], f[2]]) : "-"
        printf "| %s | %s | %s | %d | %s | %s | %s | %s |%s\n", f[1], f[2], f[3], c, rate(med), rate(v[key, 1]), rate(v[key, c]), ratio, (samples ? in_order[key] " |" : "")
      }
    }'
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
