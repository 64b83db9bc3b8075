#!/usr/bin/env bash
# Seeds the journal fuzzer's corpus (fuzz/corpus/journal): one input per base image the
# target makes at its first run (its first byte picks the base; no patches yet).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
mkdir -p corpus/journal
for i in 0 1 2 3 4 5; do
  printf "\\x0$i" > "corpus/journal/base$i"
done
