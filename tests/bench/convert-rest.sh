#!/usr/bin/env bash
# convert-rest.sh - diskimg convert against its peers, every case starting
# from the same machine state.
#
# The shared convert-bench.sh runs its cases back to back, so each one
# inherits what the previous one left: on a VM with free page reporting
# (virtio-balloon; this dev VM reports free blocks of 8 MiB and more to
# the host within seconds), memory freed just before a case (the last
# target deleted, the source evicted) is still backed by the host and
# cheap to refill, while memory freed earlier has gone back to the host
# and costs a host fault per page when the page cache takes it again.  A
# case that follows one that left little in the page cache runs up to 2x
# slower.  Here every case starts the same way: the previous target
# deleted, the source evicted (or, with -w, read into the page cache),
# then REST seconds of idle time (default 8: the freed memory has been
# reported, as on a machine that has been up a while).
#
# Usage: convert-rest.sh [-r ROUNDS] [-s REST] [-w] [-x] [-d DIR] [-n REGEX] [-k]
#   -r N      interleaved rounds (default 3); the first case of a round
#             rotates, so no case is always first
#   -s REST   seconds of rest before each case (default 8; 0 for none)
#   -w        warm source: read it into the page cache before each case
#   -x        shuffle the order within a pair every round instead of
#             rotating it: with more than two cases, a rotation puts each
#             case after the same one in every round, and what ran before
#             decides a case's memory state (the seed pair)
#   -d DIR    scratch directory (default /var/tmp/convert-bench, the
#             shared harness's, whose source images are reused)
#   -n REGEX  only the pairs whose name matches
#   -k        keep the source images
#
# Pairs (diskimg, then its peers), durable seconds (the command, then
# sync of the target; NBD servers are started and stopped inside the
# timed command by convert-case.sh):
#   qcow2->raw, raw->qcow2, raw->raw, raw->qcow2-c   vs qemu-img convert
#   seed (raw->NBD, -T none -W, writeback server)    vs qemu-img into
#        qemu-nbd and into nbdkit, nbdcopy into nbdkit
#   seed-writethrough                                vs qemu-img into qemu-nbd
#   qcow2->nbd, nbd->qcow2                           vs qemu-img with qemu-nbd
#   raw->FMT, FMT->raw for FMT in vpc vmdk vhdx vdi, and
#   raw->vmdk-stream (streamOptimized)               vs qemu-img convert
#        (the FMT sources are made once from the raw one by qemu-img,
#        with its default options, in DIR/src.FMT)
# The summary gives each case's median and the median of the per-round
# ratios peer/diskimg (above 1: diskimg is faster).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/bench/bench-lib.sh
. "$HERE/bench-lib.sh"
B=${DISKIMG:-$HERE/../../build/cmd/diskimg}
C=$HERE/convert-case.sh
ROUNDS=3 REST=8 WARM=0 SHUFFLE=0 DIR=/var/tmp/convert-bench NAME_RE="" KEEP=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while getopts "r:s:wxd:n:kh" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; s) REST=$OPTARG ;; w) WARM=1 ;; x) SHUFFLE=1 ;; d) DIR=$OPTARG ;;
    n) NAME_RE=$OPTARG ;; k) KEEP=1 ;; h) usage 0 ;; *) usage 1 >&2 ;;
  esac
done
SRC=$DIR/src.raw SRCQ=$DIR/src.qcow2 DST=$DIR/rest-dst.img
OUT=$DIR/convert-rest.tsv

# PAIRS: "name|diskimg command|peer name=command|..." (%SRC% %SRCQ% %DST%)
PAIRS=(
  "qcow2->raw|$B convert -f qcow2 -O raw %SRCQ% %DST%|qemu-img=qemu-img convert -f qcow2 -O raw %SRCQ% %DST%"
  "raw->qcow2|$B convert -f raw -O qcow2 %SRC% %DST%|qemu-img=qemu-img convert -f raw -O qcow2 %SRC% %DST%"
  "raw->raw|$B convert -f raw -O raw %SRC% %DST%|qemu-img=qemu-img convert -f raw -O raw %SRC% %DST%"
  "raw->qcow2-c|$B convert -c -f raw -O qcow2 %SRC% %DST%|qemu-img=qemu-img convert -c -f raw -O qcow2 %SRC% %DST%"
  "seed|$C seed-diskimg-writeback %SRC% %DST%|qemu-img>qemu-nbd=$C seed-qemu-writeback %SRC% %DST%|qemu-img>nbdkit=$C seed-qemu-nbdkit %SRC% %DST%|nbdcopy>nbdkit=$C seed-nbdcopy-nbdkit %SRC% %DST%"
  "seed-writethrough|$C seed-diskimg-writethrough %SRC% %DST%|qemu-img>qemu-nbd=$C seed-qemu-writethrough %SRC% %DST%"
  "qcow2->nbd|$C qcow2-diskimg %SRCQ% %DST%|qemu-img>qemu-nbd=$C qcow2-qemu %SRCQ% %DST%"
  "nbd->qcow2|$C from-nbd-diskimg %SRC% %DST%|qemu-img<qemu-nbd=$C from-nbd-qemu %SRC% %DST%"
)
FORMATS=(vpc vmdk vhdx vdi)
for f in "${FORMATS[@]}"; do
  PAIRS+=("raw->$f|$B convert -f raw -O $f %SRC% %DST%|qemu-img=qemu-img convert -f raw -O $f %SRC% %DST%"
          "$f->raw|$B convert -f $f -O raw $DIR/src.$f %DST%|qemu-img=qemu-img convert -f $f -O raw $DIR/src.$f %DST%")
done
PAIRS+=("raw->vmdk-stream|$B convert -f raw -O vmdk -o subformat=streamOptimized %SRC% %DST%|qemu-img=qemu-img convert -f raw -O vmdk -o subformat=streamOptimized %SRC% %DST%")

cleanup() {
  rm -f "$DST"
  if [ "$KEEP" = 0 ]; then rm -f "$SRC" "$SRCQ" "$SRC.ok" "${FORMATS[@]/#/$DIR/src.}"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! [ -f "$SRC.ok" ]; then
  # The shared harness builds the source (ext4 image of /usr, random data,
  # zeroes, holes) and runs nothing with this filter.
  /work/shared/bench/convert-bench.sh -k -r 1 -d "$DIR" -n '^$' > /dev/null
fi

evict() { sync "$1"; dd if="$1" iflag=nocache count=0 status=none; }
now() { date +%s.%N; }

# run_case NAME CMD ROUND
run_case() {
  local name=$1 cmd=$2 round=$3 t0 t1
  cmd=${cmd//%SRCQ%/$SRCQ}; cmd=${cmd//%SRC%/$SRC}; cmd=${cmd//%DST%/$DST}
  rm -f "$DST"
  sync
  local srcs=("$SRC" "$SRCQ") f
  for f in "${FORMATS[@]}"; do [ -f "$DIR/src.$f" ] && srcs+=("$DIR/src.$f"); done
  if [ "$WARM" = 1 ]; then cat "${srcs[@]}" > /dev/null; else for f in "${srcs[@]}"; do evict "$f"; done; fi
  sleep "$REST"
  t0=$(now)
  if ! bash -c "$cmd" > "$DIR/rest-case.log" 2>&1; then
    echo "FAILED: $name: $(tail -3 "$DIR/rest-case.log")" >&2
    return 0
  fi
  [ -e "$DST" ] && sync "$DST"
  t1=$(now)
  local mib
  mib=$(du -B1M "$DST" 2>/dev/null | cut -f1)
  printf '%s\t%s\t%s\t%.3f\t%s\n' "$(date -Is)" "$name" "$round" "$(echo "$t1 - $t0" | bc)" "${mib:-0}" >> "$OUT"
  printf '%-36s r%-2s durable %7.2f s  out %5s MiB\n' "$name" "$round" "$(echo "$t1 - $t0" | bc)" "${mib:-0}"
}

: > "$OUT"
echo "rest ${REST}s, $([ "$WARM" = 1 ] && echo warm || echo cold) source, $ROUNDS rounds -> $OUT"
selected=()
for p in "${PAIRS[@]}"; do
  [ -z "$NAME_RE" ] || grep -qE -- "$NAME_RE" <<< "${p%%|*}" || continue
  selected+=("$p")
done
# Sources in the other formats, made once by qemu-img for the pairs that
# read them.
for p in "${selected[@]}"; do
  f=${p%%->raw|*}
  if [[ " ${FORMATS[*]} " == *" $f "* ]] && ! [ -f "$DIR/src.$f" ]; then
    qemu-img convert -f raw -O "$f" "$SRC" "$DIR/src.$f.tmp" && mv "$DIR/src.$f.tmp" "$DIR/src.$f"
  fi
done
for round in $(seq "$ROUNDS"); do
  for p in "${selected[@]}"; do
    IFS='|' read -r -a parts <<< "$p"
    cases=("diskimg=${parts[1]}" "${parts[@]:2}")
    n=${#cases[@]}
    order=()
    for i in $(seq 0 $((n - 1))); do order+=($(((i + round - 1) % n))); done # rotate
    [ "$SHUFFLE" = 0 ] || mapfile -t order < <(printf '%s\n' "${order[@]}" | shuf)
    for i in "${order[@]}"; do
      c=${cases[$i]}
      run_case "${parts[0]} ${c%%=*}" "${c#*=}" "$round"
    done
  done
done

echo
printf '%-36s %7s  %s\n' case median 'peer/diskimg per round (median)'
awk -F'\t' "$MEDIAN_AWK"'
  { split($2, a, " "); pair = a[1]; who = a[2]; t[pair, who, $3] = $4; v[pair, who] = v[pair, who] " " $4
    if (!((pair, who) in seen)) { seen[pair, who] = 1; order[++n] = pair SUBSEP who }
    rounds[$3] = 1 }
  END {
    for (i = 1; i <= n; i++) {
      split(order[i], k, SUBSEP); r = ""
      if (k[2] != "diskimg")
        for (q in rounds) if (((k[1], k[2], q) in t) && ((k[1], "diskimg", q) in t))
          r = r " " t[k[1], k[2], q] / t[k[1], "diskimg", q]
      printf "%-36s %7.2f  %s\n", k[1] " " k[2], median(v[k[1], k[2]]), r == "" ? "" : sprintf("%.2fx", median(r))
    } }' "$OUT"
