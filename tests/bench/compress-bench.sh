#!/usr/bin/env bash
# compress-bench.sh - compression and inflating: diskimg against qemu-img,
# and how each scales from one CPU to all of them.
#
# Cases (durable seconds: the command, then sync of its target; the
# target deleted and every source evicted from the page cache before each
# case, then REST seconds of idle time, as convert-rest.sh does):
#   zlib     convert -c -O qcow2                              (compress)
#   zstd     convert -c -O qcow2 -o compression_type=zstd     (compress)
#   stream   convert -O vmdk -o subformat=streamOptimized     (compress)
#   read-zlib, read-zstd, read-stream: convert -O raw of qemu-img's
#            compressed image of the source                   (inflate)
#   scale-*  the zlib case under taskset: one CPU and all of them
# diskimg runs with its defaults; qemu-img with its defaults and, where
# it compresses, with -m 16 -W, its fastest (not for stream: a stream is
# written in order).
# Each round runs every group, the first case of a group rotating, so no
# case is always first.  The summary gives each case's median, its output
# size, the median CPU time (user + system: what the work costs, which
# the machine's noise moves less than the elapsed time), and the median
# of the per-round ratios case/first case of the group: above 1, the
# first case (diskimg, or "all CPUs") is faster.
#
# Usage: compress-bench.sh [-r ROUNDS] [-s REST] [-g GIB] [-d DIR] [-n REGEX]
#   -r N      rounds (default 5)
#   -s REST   seconds of rest before each case (default 3)
#   -g GIB    use only the first GIB GiB of the source (a quick run while
#             the machine is shared; default: all of it)
#   -d DIR    scratch directory (default /var/tmp/compress-bench)
#   -n REGEX  only the groups whose name matches
#   -S        only print the summary of the last run's TSV (also of a
#             run cut short: every case is written as it ends)
# The source is /var/tmp/convert-bench/src.raw (SRC= to change it), the
# shared harness's 4 GiB image with 1.6 GiB of data; it is never deleted.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
B=${DISKIMG:-$HERE/../../build/cmd/diskimg}
SRC=${SRC:-/var/tmp/convert-bench/src.raw}
ROUNDS=5 REST=3 GIB="" DIR=/var/tmp/compress-bench NAME_RE="" SUMMARY_ONLY=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while getopts "r:s:g:d:n:Sh" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; s) REST=$OPTARG ;; g) GIB=$OPTARG ;; d) DIR=$OPTARG ;;
    n) NAME_RE=$OPTARG ;; S) SUMMARY_ONLY=1 ;; h) usage 0 ;; *) usage 1 >&2 ;;
  esac
done
# summary: medians, output sizes and per-round ratios from $OUT.
summary() {
  echo
  printf '%-20s %-16s %8s %8s %9s  %s\n' group case median 'cpu s' 'out MiB' 'case/first per round (median)'
  awk -F'\t' "$MEDIAN_AWK"'
    { key = $2 SUBSEP $3; t[key, $4] = $5; v[key] = v[key] " " $5; size[key] = $6; cpu[key] = cpu[key] " " $7
      if (!(key in seen)) { seen[key] = 1; order[++n] = key; if (!($2 in first)) first[$2] = $3 }
      rounds[$4] = 1 }
    END {
      for (i = 1; i <= n; i++) {
        split(order[i], k, SUBSEP); g = k[1]; r = ""
        if (k[2] != first[g])
          for (q in rounds) if (((order[i], q) in t) && ((g SUBSEP first[g], q) in t))
            r = r " " t[order[i], q] / t[g SUBSEP first[g], q]
        printf "%-20s %-16s %8.2f %8.2f %9.1f  %s\n", g, k[2], median(v[order[i]]), median(cpu[order[i]]),
          size[order[i]] / 1048576,
          r == "" ? "" : sprintf("%.2fx", median(r))
      } }' "$OUT"
}

# shellcheck source=tests/bench/bench-lib.sh
. "$HERE/bench-lib.sh"
mkdir -p "$DIR"
OUT=$DIR/compress-bench.tsv
if [ "$SUMMARY_ONLY" = 1 ]; then summary; exit 0; fi
[ -f "$SRC" ] || { echo "$(basename "$0"): no source $SRC" >&2; exit 1; }
if [ -n "$GIB" ]; then
  slice=$DIR/slice-${GIB}g.raw
  if ! [ -f "$slice" ]; then
    dd if="$SRC" of="$slice.tmp" bs=1M count=$((GIB * 1024)) conv=sparse status=none
    mv "$slice.tmp" "$slice"
  fi
  SRC=$slice
fi
tag=$(basename "$SRC" .raw)
DST=$DIR/dst.img
ALL=$(seq -s, 0 $(($(nproc) - 1)))

# Compressed sources for the read cases, made once by qemu-img.
make_src() { # NAME qemu-img-convert-options...
  local f=$DIR/$tag.$1
  shift
  [ -f "$f" ] || { qemu-img convert "$@" "$SRC" "$f.tmp" && mv "$f.tmp" "$f"; }
}

QZ="-c -O qcow2 -o compression_type=zlib" QS="-c -O qcow2 -o compression_type=zstd"
QV="-O vmdk -o subformat=streamOptimized"
# GROUPS: "group|label=command|label=command..." (%DST% is the target)
GROUPS_=(
  "zlib|diskimg=$B convert $QZ $SRC %DST%|qemu-img=qemu-img convert $QZ $SRC %DST%|qemu-img -m16 -W=qemu-img convert -m 16 -W $QZ $SRC %DST%"
  "zstd|diskimg=$B convert $QS $SRC %DST%|qemu-img=qemu-img convert $QS $SRC %DST%|qemu-img -m16 -W=qemu-img convert -m 16 -W $QS $SRC %DST%"
  "stream|diskimg=$B convert $QV $SRC %DST%|qemu-img=qemu-img convert $QV $SRC %DST%"
  "read-zlib|diskimg=$B convert -O raw $DIR/$tag.zlib.qcow2 %DST%|qemu-img=qemu-img convert -O raw $DIR/$tag.zlib.qcow2 %DST%"
  "read-zstd|diskimg=$B convert -O raw $DIR/$tag.zstd.qcow2 %DST%|qemu-img=qemu-img convert -O raw $DIR/$tag.zstd.qcow2 %DST%"
  "read-stream|diskimg=$B convert -O raw $DIR/$tag.stream.vmdk %DST%|qemu-img=qemu-img convert -O raw $DIR/$tag.stream.vmdk %DST%"
  "scale-diskimg-zlib|all CPUs=taskset -c $ALL $B convert $QZ $SRC %DST%|1 CPU=taskset -c 0 $B convert $QZ $SRC %DST%"
  "scale-qemu-img-zlib|all CPUs=taskset -c $ALL qemu-img convert -m 16 -W $QZ $SRC %DST%|1 CPU=taskset -c 0 qemu-img convert -m 16 -W $QZ $SRC %DST%"
)

selected=()
for g in "${GROUPS_[@]}"; do
  [ -z "$NAME_RE" ] || grep -qE -- "$NAME_RE" <<< "${g%%|*}" || continue
  selected+=("$g")
done
for g in "${selected[@]}"; do
  case ${g%%|*} in
    read-zlib) make_src zlib.qcow2 $QZ ;; read-zstd) make_src zstd.qcow2 $QS ;;
    read-stream) make_src stream.vmdk $QV ;;
  esac
done
trap 'rm -f "$DST" "$DIR"/*.tmp' EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }

# run_case GROUP LABEL CMD ROUND
run_case() {
  local cmd=${3//%DST%/$DST} t0 t1 bytes
  rm -f "$DST"
  sync
  evict_files "$SRC" "$DIR/$tag".*
  sleep "$REST"
  t0=$(now)
  if ! /usr/bin/time -f '%U %S' -o "$DIR/cpu.txt" bash -c "$cmd" > "$DIR/case.log" 2>&1; then
    echo "FAILED: $1 $2: $(tail -3 "$DIR/case.log")" >&2
    return 0
  fi
  sync "$DST"
  t1=$(now)
  bytes=$(stat -c %s "$DST")
  cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$DIR/cpu.txt")
  printf '%s\t%s\t%s\t%s\t%.3f\t%s\t%s\n' "$(date -Is)" "$1" "$2" "$4" "$(echo "$t1 - $t0" | bc)" "$bytes" "$cpu" >> "$OUT"
  printf '%-20s %-16s r%-2s durable %7.2f s  cpu %7.2f s  out %6s MiB\n' "$1" "$2" "$4" \
    "$(echo "$t1 - $t0" | bc)" "$cpu" "$((bytes >> 20))"
}

: > "$OUT"
echo "$B vs qemu-img, $(basename "$SRC"), $ROUNDS rounds, rest ${REST}s, $(nproc) CPUs -> $OUT"
for round in $(seq "$ROUNDS"); do
  for g in "${selected[@]}"; do
    IFS='|' read -r -a parts <<< "$g"
    cases=("${parts[@]:1}")
    n=${#cases[@]}
    for i in $(seq 0 $((n - 1))); do
      c=${cases[$(((i + round - 1) % n))]}
      run_case "${parts[0]}" "${c%%=*}" "${c#*=}" "$round"
    done
  done
done
summary
