#!/usr/bin/env bash
# http-convert.sh - converting a 1 GiB qcow2 from a local web server to
# raw: diskimg against qemu-img reading the same URL (its curl driver,
# qemu-block-extra) and against curl downloading the file and qemu-img
# converting the copy.
#
# The image: the first GiB of the shared src.raw (an ext4 image; 882 MiB
# of data in that GiB) converted to qcow2 by qemu-img, served by nginx
# from scripts/web-dev.sh on 127.0.0.1 (plain http; -T: https).  The
# served file stays in the page cache (it is read once before the rounds), so the server's disk
# is not what is measured.  The cases:
#   diskimg       diskimg convert -O raw URL out.raw
#   qemu-img      qemu-img convert -m 1 -O raw URL out.raw: one
#                 coroutine, because qemu-img 7.2's curl driver stalls
#                 with its default 8 here (and with -m 2): every try
#                 timed out, one sat at 2 MB for 15 minutes.  Before the
#                 rounds, one try of the default `qemu-img convert -O raw
#                 URL` with a timeout (-t) says whether it still does.
#   curl+qemu-img curl -o dl.qcow2 URL, then qemu-img convert -O raw
#                 dl.qcow2 out.raw
# Time is wall-clock seconds until the output is durable: the command,
# then sync of out.raw.  Before each case out.raw (and dl.qcow2) are
# deleted, written back, then REST seconds of idle time; the order of
# the cases rotates from round to round.  The first round checks every
# output (diskimg checksum equal to the local qcow2's).  The summary
# gives each case's median and the median of the per-round ratios
# case / diskimg (above 1x: diskimg is faster).
#
# Usage: http-convert.sh [-r ROUNDS] [-s REST] [-t TIMEOUT] [-T] [-d DIR] [-i SRC]
#   -r N      interleaved rounds (default 5)
#   -T        over https: diskimg with --tls-creds (the test CA), curl with
#             --cacert, qemu-img with sslverify=off (it takes no CA file)
#   -t S      timeout of the default qemu-img try (default 60; 0: skip it)
#   -s REST   seconds of rest before each case (default 2)
#   -d DIR    work directory (default /var/tmp/http-bench): DIR/www/img.qcow2
#             is made once and kept, the outputs are deleted at the end
#   -i SRC    raw image whose first GiB is the source (default
#             /var/tmp/convert-bench/src.raw, made by the shared
#             convert-bench.sh; only read)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/bench/bench-lib.sh
. "$HERE/bench-lib.sh"
B=${DISKIMG:-$HERE/../../build/cmd/diskimg}
ROUNDS=5 REST=2 PROBE=60 TLS=0 DIR=/var/tmp/http-bench SRC=/var/tmp/convert-bench/src.raw
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while getopts "r:s:t:Td:i:h" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; s) REST=$OPTARG ;; t) PROBE=$OPTARG ;; T) TLS=1 ;; d) DIR=$OPTARG ;; i) SRC=$OPTARG ;;
    h) usage 0 ;; *) usage 1 >&2 ;;
  esac
done
[ -f "$SRC" ] || { echo "$(basename "$0"): $SRC is missing (run /work/shared/bench/convert-bench.sh -k)" >&2; exit 1; }
mkdir -p "$DIR/www"
IMG=$DIR/www/img.qcow2 OUT=$DIR/out.raw DL=$DIR/dl.qcow2 TSV=$DIR/http-convert.tsv
if [ ! -s "$IMG" ]; then
  echo "making $IMG from the first GiB of $SRC"
  dd if="$SRC" of="$DIR/slice.raw" bs=1M count=1024 conv=sparse status=none
  qemu-img convert -f raw -O qcow2 "$DIR/slice.raw" "$IMG.tmp"
  rm -f "$DIR/slice.raw"
  mv "$IMG.tmp" "$IMG"
fi

tls=(--no-tls)
[ "$TLS" = 0 ] || tls=()
"$HERE/../../scripts/web-dev.sh" start "$DIR/web" --root "$DIR/www" "${tls[@]}" --no-flaky > /dev/null
trap '"$HERE/../../scripts/web-dev.sh" stop "$DIR/web"; rm -f "$OUT" "$DL"' EXIT
# shellcheck source=/dev/null
. "$DIR/web/web.env"
URL=$WEB_HTTP/img.qcow2 QURL=$URL DOPT="" COPT=""
if [ "$TLS" = 1 ]; then
  URL=$WEB_HTTPS/img.qcow2 DOPT="--tls-creds=$WEB_TLS_CREDS" COPT="--cacert $WEB_TLS_CREDS/ca-cert.pem"
  QURL="json:{\"file.driver\":\"https\",\"file.url\":\"$URL\",\"file.sslverify\":\"off\"}"
fi
cat "$IMG" > /dev/null
want=$("$B" checksum "$IMG" | cut -d' ' -f1)
q() { printf '%q' "$1"; }
echo "$URL: $(($(stat -c %s "$IMG") >> 20)) MiB qcow2, 1024 MiB virtual; $("$B" --version | head -1); $(qemu-img --version | head -1); $(curl --version | head -1 | cut -d' ' -f1-2)"

CASES=(
  "diskimg=$B convert $DOPT -O raw $URL $OUT && sync $OUT"
  "qemu-img=qemu-img convert -m 1 -O raw $(q "$QURL") $OUT && sync $OUT"
  "curl+qemu-img=curl -sSf $COPT -o $DL $URL && qemu-img convert -O raw $DL $OUT && sync $OUT"
)
now() { date +%s.%N; }

if [ "$PROBE" != 0 ]; then
  rm -f "$OUT"
  t0=$(now)
  if timeout "$PROBE" qemu-img convert -O raw "$QURL" "$OUT"; then
    echo "qemu-img convert with its default -m 8: $(echo "$(now) - $t0" | bc | cut -c1-6) s (not synced)"
  else
    echo "qemu-img convert with its default -m 8: no result in $PROBE s ($(du -m "$OUT" | cut -f1) MiB written)"
  fi
fi

: > "$TSV"
n=${#CASES[@]}
for round in $(seq "$ROUNDS"); do
  for i in $(seq 0 $((n - 1))); do
    c=${CASES[$(((i + round - 1) % n))]}
    name=${c%%=*}
    rm -f "$OUT" "$DL"
    sync
    sleep "$REST"
    t0=$(now)
    bash -c "${c#*=}" > /dev/null
    t1=$(now)
    if [ "$round" = 1 ]; then
      got=$("$B" checksum -f raw "$OUT" | cut -d' ' -f1)
      [ "$got" = "$want" ] || { echo "$name: the output differs from the served image" >&2; exit 1; }
    fi
    printf '%s\t%s\t%.3f\n' "$name" "$round" "$(echo "$t1 - $t0" | bc)" | tee -a "$TSV"
  done
done

echo
printf '%-16s %8s  %s\n' case median "case/diskimg per round (median)"
awk -F'\t' -v base=diskimg "$MEDIAN_AWK"'
  { t[$1, $2] = $3; v[$1] = v[$1] " " $3; rounds[$2] = 1
    if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  END {
    for (i = 1; i <= n; i++) {
      c = order[i]; r = ""
      if (c != base)
        for (q in rounds) if (((c, q) in t) && ((base, q) in t)) r = r " " t[c, q] / t[base, q]
      printf "%-16s %8.2f  %s\n", c, median(v[c]), r == "" ? "" : sprintf("%.2fx", median(r))
    } }' "$TSV"
