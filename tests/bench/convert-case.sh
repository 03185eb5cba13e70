#!/usr/bin/env bash
# convert-case.sh - one conversion through an NBD server, as a single command,
# so that the shared convert-bench.sh can time it as a "local:" case in the
# same interleaved rounds as its own cases:
#
#   convert-bench.sh -k \
#     'local:diskimg>diskimg.writeback: tests/bench/convert-case.sh seed-diskimg-writeback %SRC% %DST%'
#
# Usage: convert-case.sh CASE SRC DST
# The server is started here on a private unix socket, the client runs, and
# the server is stopped by its PID and waited for (a server flushes when it
# stops, so that is inside the timed window; the harness then fsyncs DST).
#
# Cases (SRC raw unless said; DST is created here):
#   seed-diskimg-writeback     diskimg convert -p -f raw -O raw -T none -W SRC URI
#   seed-diskimg-writethrough    into diskimg serve --cache=writeback|writethrough
#                                serving a fresh sparse raw DST (issue 4's seed)
#   seed-qemu-writeback        qemu-img convert -f raw -O raw -T none -W SRC URI
#   seed-qemu-writethrough       into qemu-nbd --cache=writeback|writethrough
#   seed-qemu-nbdkit           the same qemu-img command into nbdkit file
#   seed-nbdcopy-nbdkit        nbdcopy --flush SRC URI into nbdkit file
#   qcow2-diskimg              SRC qcow2: diskimg convert -f qcow2 -O raw -T none -W into
#                                diskimg serve (writeback) of a raw DST
#   qcow2-qemu                 SRC qcow2: qemu-img convert -f qcow2 -O raw -T none -W
#                                into qemu-nbd (writeback)
#   from-nbd-diskimg           SRC served read-only by diskimg serve; diskimg
#                                convert -W -O qcow2 URI DST
#   from-nbd-qemu              SRC served read-only by qemu-nbd; qemu-img convert
#                                -O qcow2 -W URI DST
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
DISKIMG=${DISKIMG:-$HERE/../../build/cmd/diskimg}
[ $# -eq 3 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
CASE=$1 SRC=$2 DST=$3
TMP=$(mktemp -d /tmp/convert-case.XXXXXX)
SOCK=$TMP/s.sock URI="nbd+unix:///?socket=$TMP/s.sock"
SERVER=""
cleanup() {
  if [ -n "$SERVER" ]; then kill -KILL "$SERVER" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

serve() { # SERVER-COMMAND...: start it in the background, wait for the socket
  "$@" 2>>"$TMP/server.log" &
  SERVER=$!
  for _ in $(seq 400); do
    [ -S "$SOCK" ] && return 0
    kill -0 "$SERVER" 2>/dev/null || break
    sleep 0.005
  done
  cat "$TMP/server.log" >&2
  exit 1
}

stop() { # SIGTERM: finish, flush, exit; then wait for it
  kill -TERM "$SERVER"
  wait "$SERVER" || { cat "$TMP/server.log" >&2; exit 1; }
  SERVER=""
}

fresh_target() { # a sparse raw DST as large as SRC (virtual size)
  rm -f "$DST"
  truncate -s "$(qemu-img info --output=json "$SRC" | sed -n 's/.*"virtual-size": \([0-9]*\).*/\1/p')" "$DST"
}

case $CASE in
  seed-diskimg-writeback | seed-diskimg-writethrough)
    fresh_target
    serve "$DISKIMG" serve -t -f raw --cache="${CASE#seed-diskimg-}" -k "$SOCK" "$DST"
    "$DISKIMG" convert -p -f raw -O raw -T none -W "$SRC" "$URI" 2>/dev/null
    stop ;;
  seed-qemu-writeback | seed-qemu-writethrough)
    fresh_target
    serve qemu-nbd -t -f raw --cache="${CASE#seed-qemu-}" -k "$SOCK" "$DST"
    qemu-img convert -f raw -O raw -T none -W "$SRC" "$URI"
    stop ;;
  seed-qemu-nbdkit | seed-nbdcopy-nbdkit)
    fresh_target
    serve nbdkit -f -U "$SOCK" file "$DST"
    if [ "$CASE" = seed-qemu-nbdkit ]; then
      qemu-img convert -f raw -O raw -T none -W "$SRC" "$URI"
    else
      nbdcopy --flush "$SRC" "$URI"
    fi
    stop ;;
  qcow2-diskimg)
    fresh_target
    serve "$DISKIMG" serve -t -f raw -k "$SOCK" "$DST"
    "$DISKIMG" convert -f qcow2 -O raw -T none -W "$SRC" "$URI"
    stop ;;
  qcow2-qemu)
    fresh_target
    serve qemu-nbd -t -f raw --cache=writeback -k "$SOCK" "$DST"
    qemu-img convert -f qcow2 -O raw -T none -W "$SRC" "$URI"
    stop ;;
  from-nbd-diskimg)
    rm -f "$DST"
    serve "$DISKIMG" serve -t -r -f raw -k "$SOCK" "$SRC"
    "$DISKIMG" convert -W -f raw -O qcow2 "$URI" "$DST"
    stop ;;
  from-nbd-qemu)
    rm -f "$DST"
    serve qemu-nbd -t -r -f raw -k "$SOCK" "$SRC"
    qemu-img convert -f raw -O qcow2 -W "$URI" "$DST"
    stop ;;
  *)
    echo "convert-case.sh: unknown case '$CASE'" >&2
    exit 2 ;;
esac
