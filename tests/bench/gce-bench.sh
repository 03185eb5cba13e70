#!/usr/bin/env bash
# gce-bench.sh - `diskimg convert --target=gce` against the pipeline users
# run today to make a GCE image archive, and diskimg on 1 core against 2.
#
# Usage: gce-bench.sh [-r ROUNDS] [-s SRC] [-d DIR] [-c CASES]
#   -r N     rounds (default 5); the case order is reversed every other round
#   -s SRC   raw source (default /var/tmp/convert-bench/src.raw: 4 GiB, 1.6 GiB data)
#   -d DIR   scratch directory (default /var/tmp/gce-bench)
#   -c LIST  comma-separated cases (default: all below)
#
# Cases (each ends with its archive durable: the time includes an fsync):
#   diskimg        diskimg convert --target=gce SRC OUT (every core)
#   diskimg-1cpu   the same under taskset -c 0
#   diskimg-2cpu   the same under taskset -c 0,1
#   gnu            cp --sparse=always SRC disk.raw; truncate -s to a GiB multiple;
#                  tar --format=oldgnu -Sczf OUT disk.raw   (gzip, one core)
#   gnu-pigz       the same with tar -I pigz, when pigz is installed
# Before each case the source leaves the page cache (posix_fadvise
# DONTNEED), so every case reads it cold.  The first round checks each
# archive with `diskimg check --target=gce` and `gzip -t`.
#
# Output: one line per case and round, then the median of each case and
# the median (min-max) of the per-round ratios gnu/diskimg, gnu-pigz/diskimg
# and diskimg-1cpu against diskimg-2cpu and diskimg (above 1: the second is
# faster).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
DISKIMG=${DISKIMG:-$HERE/../../build/cmd/diskimg}
ROUNDS=5 SRC=/var/tmp/convert-bench/src.raw DIR=/var/tmp/gce-bench
ONLY=""
while getopts "r:s:d:c:h" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; s) SRC=$OPTARG ;; d) DIR=$OPTARG ;; c) ONLY=$OPTARG ;;
    h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
[ -x "$DISKIMG" ] || { echo "gce-bench: no diskimg at $DISKIMG" >&2; exit 2; }
[ -f "$SRC" ] || { echo "gce-bench: no source $SRC" >&2; exit 2; }
mkdir -p "$DIR"
trap 'rm -rf "$DIR/work"' EXIT

CASES=(diskimg diskimg-1cpu diskimg-2cpu gnu)
command -v pigz >/dev/null && CASES+=(gnu-pigz)
[ -z "$ONLY" ] || IFS=, read -r -a CASES <<<"$ONLY"
has() { [[ " ${CASES[*]} " == *" $1 "* ]]; }
SIZE=$(stat -c %s "$SRC")
GIB=1073741824
ROUNDED=$(((SIZE + GIB - 1) / GIB * GIB))

evict() {
  /usr/bin/python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}

# run_case CASE OUT: make the archive OUT.
run_case() {
  case $1 in
    diskimg) "$DISKIMG" convert -q --target=gce "$SRC" "$2" ;;
    diskimg-1cpu) taskset -c 0 "$DISKIMG" convert -q --target=gce "$SRC" "$2" ;;
    diskimg-2cpu) taskset -c 0,1 "$DISKIMG" convert -q --target=gce "$SRC" "$2" ;;
    gnu | gnu-pigz)
      cp --sparse=always "$SRC" "$DIR/work/disk.raw"
      truncate -s "$ROUNDED" "$DIR/work/disk.raw"
      if [ "$1" = gnu ]; then
        tar --format=oldgnu -Sczf "$2" -C "$DIR/work" disk.raw
      else
        tar --format=oldgnu -S -I pigz -cf "$2" -C "$DIR/work" disk.raw
      fi
      rm -f "$DIR/work/disk.raw" ;;
  esac
  sync "$2"
}

declare -A T
printf '%-6s %-14s %9s %12s\n' round case seconds bytes
for ((r = 1; r <= ROUNDS; r++)); do
  order=("${CASES[@]}")
  if ((r % 2 == 0)); then
    mapfile -t order < <(printf '%s\n' "${CASES[@]}" | tac)
  fi
  for c in "${order[@]}"; do
    rm -rf "$DIR/work" && mkdir -p "$DIR/work"
    out=$DIR/work/$c.tar.gz
    evict "$SRC"
    sync
    t0=$(date +%s.%N)
    run_case "$c" "$out"
    t1=$(date +%s.%N)
    T[$c,$r]=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
    printf '%-6s %-14s %9.2f %12s\n' "$r" "$c" "${T[$c,$r]}" "$(stat -c %s "$out")"
    if ((r == 1)); then
      gzip -t "$out"
      "$DISKIMG" check -q --target=gce "$out" || echo "gce-bench: $c's archive fails the lint" >&2
    fi
  done
done
rm -rf "$DIR/work"

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo
echo "median seconds:"
for c in "${CASES[@]}"; do
  printf '  %-14s %8.2f\n' "$c" "$(for ((r = 1; r <= ROUNDS; r++)); do echo "${T[$c,$r]}"; done | median)"
done
ratio() { # SLOW FAST: per-round SLOW/FAST, median (min-max)
  local vals
  vals=$(for ((r = 1; r <= ROUNDS; r++)); do
    awk -v a="${T[$1,$r]}" -v b="${T[$2,$r]}" 'BEGIN {printf "%.4f\n", a / b}'
  done)
  printf '  %-28s %.2f (%.2f-%.2f)\n' "$1/$2" "$(median <<<"$vals")" \
    "$(sort -g <<<"$vals" | head -1)" "$(sort -g <<<"$vals" | tail -1)"
}
echo "per-round ratios, median (min-max):"
if has gnu && has diskimg; then ratio gnu diskimg; fi
if has gnu-pigz && has diskimg; then ratio gnu-pigz diskimg; fi
if has diskimg-1cpu && has diskimg-2cpu; then ratio diskimg-1cpu diskimg-2cpu; fi
if has diskimg-1cpu && has diskimg; then ratio diskimg-1cpu diskimg; fi
