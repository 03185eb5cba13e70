#!/usr/bin/env bash
# checksum-bench.sh - diskimg checksum against sha256sum (and blksum, when
# installed) on the shared 4 GiB source, every case from the same state.
#
# The cases read the same disk: `diskimg checksum` of src.raw and of
# src.qcow2 (block status skips the holes, data is hashed on every core),
# `sha256sum src.raw` (every byte, holes included, on one core) and, if
# blksum (blkhash) is on PATH, `blksum src.raw`.  Before each case every
# source is evicted from the page cache (as convert-rest.sh does), then
# REST seconds of idle time; the order of the cases rotates from round to
# round, so none always goes first.  Time is wall-clock seconds of the
# command.  The summary gives each case's median and the median of the
# per-round ratios peer / diskimg on the raw file (above 1x: diskimg is
# faster).  The issue's target: sha256sum / diskimg >= virtual size / data
# (4096 / 1604 MiB = 2.55x).
#
# With -c, the cost of convert --checksum instead: `diskimg convert -O
# qcow2` of src.raw with and without --checksum (the target deleted
# before each case; durable time: the command, then sync of the target),
# and the ratio with / without.
#
# Usage: checksum-bench.sh [-r ROUNDS] [-s REST] [-c] [-d DIR]
#   -r N      interleaved rounds (default 5)
#   -s REST   seconds of rest before each case (default 2)
#   -c        convert with --checksum against convert without
#   -d DIR    where src.raw and src.qcow2 are (default /var/tmp/convert-bench,
#             made by the shared convert-bench.sh)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/bench/bench-lib.sh
. "$HERE/bench-lib.sh"
B=${DISKIMG:-$HERE/../../build/cmd/diskimg}
ROUNDS=5 REST=2 DIR=/var/tmp/convert-bench CONVERT=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while getopts "r:s:cd:h" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; s) REST=$OPTARG ;; c) CONVERT=1 ;; d) DIR=$OPTARG ;;
    h) usage 0 ;; *) usage 1 >&2 ;;
  esac
done
SRC=$DIR/src.raw SRCQ=$DIR/src.qcow2 OUT=$DIR/checksum-bench.tsv DST=$DIR/checksum-dst.qcow2
for f in "$SRC" "$SRCQ"; do
  [ -f "$f" ] || { echo "$(basename "$0"): $f is missing (run /work/shared/bench/convert-bench.sh -k)" >&2; exit 1; }
done

CASES=(
  "diskimg-raw=$B checksum -f raw $SRC"
  "diskimg-qcow2=$B checksum -f qcow2 $SRCQ"
  "sha256sum-raw=sha256sum $SRC"
)
command -v blksum > /dev/null && CASES+=("blksum-raw=blksum $SRC")
BASE=diskimg-raw
if [ "$CONVERT" = 1 ]; then
  CASES=(
    "convert=$B convert -f raw -O qcow2 $SRC $DST && sync $DST"
    "convert-checksum=$B convert -f raw -O qcow2 --checksum $SRC $DST && sync $DST"
  )
  BASE=convert
fi
trap 'rm -f "$DST"' EXIT

evict() { sync "$1"; dd if="$1" iflag=nocache count=0 status=none; }
now() { date +%s.%N; }

# The two diskimg values must agree (one disk, two formats).
a=$("$B" checksum -f raw "$SRC" | cut -d' ' -f1)
b=$("$B" checksum -f qcow2 "$SRCQ" | cut -d' ' -f1)
[ "$a" = "$b" ] || { echo "checksum differs: raw $a, qcow2 $b" >&2; exit 1; }
data=$(du -B1M "$SRC" | cut -f1)
echo "src.raw: $(($(stat -c %s "$SRC") >> 20)) MiB virtual, $data MiB data; checksum $a"

: > "$OUT"
n=${#CASES[@]}
for round in $(seq "$ROUNDS"); do
  for i in $(seq 0 $((n - 1))); do
    c=${CASES[$(((i + round - 1) % n))]}
    name=${c%%=*}
    rm -f "$DST"
    sync
    evict "$SRC"
    evict "$SRCQ"
    sleep "$REST"
    t0=$(now)
    bash -c "${c#*=}" > /dev/null
    t1=$(now)
    printf '%s\t%s\t%.3f\n' "$name" "$round" "$(echo "$t1 - $t0" | bc)" | tee -a "$OUT"
  done
done

echo
printf '%-16s %8s  %s\n' case median "case/$BASE per round (median)"
awk -F'\t' -v base="$BASE" "$MEDIAN_AWK"'
  { t[$1, $2] = $3; v[$1] = v[$1] " " $3; rounds[$2] = 1
    if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  END {
    for (i = 1; i <= n; i++) {
      c = order[i]; r = ""
      if (c != base)
        for (q in rounds) if (((c, q) in t) && ((base, q) in t)) r = r " " t[c, q] / t[base, q]
      printf "%-16s %8.2f  %s\n", c, median(v[c]), r == "" ? "" : sprintf("%.2fx", median(r))
    } }' "$OUT"
