#!/usr/bin/env bash
# chain-bench.sh: diskimg rebase and commit against qemu-img's, on the
# first SIZE of the shared benchmark source, in interleaved rounds
# (alternating which tool goes first), printing each case's median time
# ratio (diskimg / qemu-img; below 1 is faster).
#
#   detach   rebase -b "" of an empty overlay: every data cluster of the
#            base is read and written into the overlay
#   same     rebase onto a raw copy of the base: everything is compared,
#            nothing written
#   commit   commit of an overlay holding the base's data into an empty
#            base of the same size
#   sparse-commit  commit of a 1 TiB overlay holding 4 MiB (at 100 and
#            700 GiB) into its empty base
#   sparse-rebase  rebase of a 1 TiB overlay holding 2 MiB, whose empty
#            backing file has a backing file of its own, onto another
#            empty 1 TiB image: only the overlay's data is not compared
#
# Usage: tests/bench/chain-bench.sh [ROUNDS] [SIZE_MIB]   (default 5, 512)
# CASES="..." runs only those cases.  CACHE=unsafe (-t unsafe for both tools) leaves out the final flushes,
# whose time on a shared disk is mostly the other writers' (default:
# writeback, both tools' default).
# Needs /var/tmp/convert-bench/src.raw (see convert-rest.sh); works in
# /var/tmp/chain-bench, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/bench-lib.sh

ROUNDS=${1:-5}
SIZE=${2:-512}
SRC=/var/tmp/convert-bench/src.raw
DIR=/var/tmp/chain-bench
DISKIMG=${DISKIMG:-build/cmd/diskimg}
CACHE=${CACHE:-writeback}
[ -f "$SRC" ] || { echo "chain-bench: $SRC is missing" >&2; exit 1; }
rm -rf "$DIR"
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT

dd if="$SRC" of="$DIR/part.raw" bs=1M count="$SIZE" conv=sparse status=none
qemu-img convert -f raw -O qcow2 "$DIR/part.raw" "$DIR/base.qcow2"
qemu-img create -q -f qcow2 -b base.qcow2 -F qcow2 "$DIR/top.qcow2"
qemu-img create -q -f qcow2 "$DIR/empty.qcow2" "${SIZE}M"
qemu-img convert -f raw -O qcow2 "$DIR/part.raw" "$DIR/full.qcow2"
rm -f "$DIR/part.raw"
qemu-img convert -O raw "$DIR/base.qcow2" "$DIR/same.raw"
qemu-img create -q -f qcow2 "$DIR/big-base.qcow2" 1T
qemu-img create -q -f qcow2 -b big-base.qcow2 -F qcow2 "$DIR/big-top.qcow2"
qemu-io -c "write -P 0x5a 100G 2M" -c "write -P 0x33 700G 2M" "$DIR/big-top.qcow2" >/dev/null
qemu-img create -q -f qcow2 "$DIR/big-other.qcow2" 1T
qemu-img create -q -f qcow2 -b big-base.qcow2 -F qcow2 "$DIR/big-mid.qcow2"
qemu-img create -q -f qcow2 -b big-mid.qcow2 -F qcow2 "$DIR/big-r.qcow2"
qemu-io -c "write -P 0x5a 100G 2M" "$DIR/big-r.qcow2" >/dev/null

# prepare CASE: fresh copies of what CASE changes.
prepare() {
  case $1 in
  detach | same) cp "$DIR/top.qcow2" "$DIR/t.qcow2" ;;
  commit)
    cp "$DIR/empty.qcow2" "$DIR/cb.qcow2"
    cp "$DIR/full.qcow2" "$DIR/ct.qcow2"
    qemu-img rebase -u -b cb.qcow2 -F qcow2 "$DIR/ct.qcow2"
    ;;
  sparse-commit)
    cp "$DIR/big-base.qcow2" "$DIR/bb.qcow2"
    cp "$DIR/big-top.qcow2" "$DIR/bt.qcow2"
    qemu-img rebase -u -b bb.qcow2 -F qcow2 "$DIR/bt.qcow2"
    ;;
  sparse-rebase) cp "$DIR/big-r.qcow2" "$DIR/br.qcow2" ;;
  esac
  sync
}

# run TOOL CASE: one timed run, seconds on stdout.
run() {
  local tool=$1 start end
  local -a cmd
  case $2 in
  detach) cmd=(rebase -t "$CACHE" -b "" "$DIR/t.qcow2") ;;
  same) cmd=(rebase -t "$CACHE" -b same.raw -F raw "$DIR/t.qcow2") ;;
  commit) cmd=(commit -t "$CACHE" -q "$DIR/ct.qcow2") ;;
  sparse-commit) cmd=(commit -t "$CACHE" -q "$DIR/bt.qcow2") ;;
  sparse-rebase) cmd=(rebase -t "$CACHE" -b big-other.qcow2 -F qcow2 "$DIR/br.qcow2") ;;
  esac
  prepare "$2"
  start=$(date +%s.%N)
  if [ "$tool" = diskimg ]; then "$DISKIMG" "${cmd[@]}" >/dev/null; else qemu-img "${cmd[@]}" >/dev/null; fi
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

for c in ${CASES:-detach same commit sparse-commit sparse-rebase}; do
  ratios=()
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then
      d=$(run diskimg "$c")
      q=$(run qemu-img "$c")
    else
      q=$(run qemu-img "$c")
      d=$(run diskimg "$c")
    fi
    ratios+=("$(echo "scale=3; $d / $q" | bc)")
    echo "$c round $r: diskimg ${d}s qemu-img ${q}s" >&2
  done
  awk -v c="$c" -v s="${ratios[*]}" "$MEDIAN_AWK"'BEGIN { printf "%s: median ratio %.2f over %d rounds\n", c, median(s), split(s, t, " ") }'
done
