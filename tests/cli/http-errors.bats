#!/usr/bin/env bats
# http(s) sources that fail, from a real nginx (scripts/web-dev.sh) and
# its flaky companion: each failure is one line on stderr, "diskimg: URL:
# cause", with the URL's query shown as "?..." (a pre-signed URL's
# signature is never printed), exit status 1 (diskimg(1), EXIT STATUS),
# and a convert that fails leaves no output.  HTTP statuses, a server
# that ignores Range, TLS verification, redirects, transient failures
# (retried) and a refused connection; serve refuses writes; a remote
# qcow2's backing file names; a file replaced while it is served.

load '../helpers'
load '../interop/lib'
load 'web-lib'
bats_require_minimum_version 1.5.0

SIG='X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=5ecre7519'

setup_file() {
    web_start
    truncate -s 1M "$WEB_ROOT/disk.raw"
    head -c 64k /dev/urandom | dd of="$WEB_ROOT/disk.raw" conv=notrunc status=none
    qemu-img convert -f raw -O qcow2 "$WEB_ROOT/disk.raw" "$WEB_ROOT/disk.qcow2"
}

teardown_file() {
    web_stop
}

setup() { setup_test; }
teardown() { cleanup_test; }

# fails_with TEXT CMD...: CMD exits 1 (STATUS, when set: compare's errors
# are 2) with exactly one line on stderr, nothing on stdout, that starts
# "diskimg: " and has TEXT (a glob pattern), and no part of the query.
fails_with() {
    local text=$1
    shift
    run "-${STATUS:-1}" --separate-stderr "$@"
    printf '%s\n' "$stderr" >&2
    assert_equal "$output" ""
    assert_equal "$(wc -l <<<"$stderr")" 1
    [[ $stderr == "diskimg: "* && $stderr == *$text* ]]
    [[ $stderr != *5ecre7519* && $stderr != *AKIDEXAMPLE* ]]
}

@test "HTTP 404 and 403: one line with the status and the URL in every subcommand, no output left" {
    local u t want out=$TEST_DIR/out.raw
    for u in "$WEB_HTTP/missing.qcow2" "$WEB_HTTPS/forbidden/disk.qcow2"; do
        t=--tls-creds=$WEB_TLS_CREDS
        [[ $u == https* ]] && want="$u?...: HTTP 403 Forbidden" || want="$u?...: HTTP 404 Not Found"
        fails_with "$want" "$DISKIMG" info "$t" "$u?$SIG"
        fails_with "$want" "$DISKIMG" info "$t" -f qcow2 "$u?$SIG"
        fails_with "$want" "$DISKIMG" map "$t" "$u?$SIG"
        fails_with "$want" "$DISKIMG" checksum "$t" "$u?$SIG"
        STATUS=2 fails_with "$want" "$DISKIMG" compare "$t" "$u?$SIG" "$WEB_ROOT/disk.raw"
        fails_with "$want" "$DISKIMG" convert "$t" -O raw "$u?$SIG" "$out"
        [[ ! -e $out ]]
        # (serve's --tls-creds are its own, the NBD server's)
        [[ $u == https* ]] || fails_with "$want" "$DISKIMG" serve -r -k "$SOCK" "$u?$SIG"
    done
    # without a query, the URL as given
    fails_with "$WEB_HTTP/missing.qcow2: HTTP 404 Not Found" "$DISKIMG" info "$WEB_HTTP/missing.qcow2"
}

@test "a server that ignores Range is an error that says so; nothing is downloaded whole" {
    local out=$TEST_DIR/out.raw
    # (files larger than the first request's 256 KiB: a smaller one sent
    # whole is taken as it is)
    [[ $(stat -c %s "$WEB_ROOT/disk.qcow2") -gt 262144 ]]
    fails_with "$WEB_HTTP/norange/disk.raw?...: the server ignores Range requests*" \
        "$DISKIMG" info "$WEB_HTTP/norange/disk.raw?$SIG"
    fails_with "the server ignores Range requests*" \
        "$DISKIMG" convert --tls-creds="$WEB_TLS_CREDS" -O raw "$WEB_HTTPS/norange/disk.qcow2" "$out"
    [[ ! -e $out ]]
    # a file that fits the first request, sent whole, is read as it is
    head -c 102400 /dev/urandom >"$WEB_ROOT/tiny.raw"
    run -0 "$DISKIMG" convert -O raw "$WEB_HTTP/norange/tiny.raw" "$out"
    cmp "$out" "$WEB_ROOT/tiny.raw"
}

@test "TLS is verified: refused without the CA or with another, accepted with --tls-creds" {
    local u=$WEB_HTTPS/disk.qcow2
    fails_with "$u?...: TLS: the server's certificate is not trusted*" \
        "$DISKIMG" info "$u?$SIG"
    fails_with "$u: TLS: the server's certificate is not trusted*" \
        "$DISKIMG" info --tls-creds="$WEB_OTHER_CA" "$u"
    fails_with "not trusted" "$DISKIMG" convert -O raw "$u" "$TEST_DIR/out.raw"
    [[ ! -e $TEST_DIR/out.raw ]]
    run -0 "$DISKIMG" info --tls-creds="$WEB_TLS_CREDS" "$u?$SIG"
    assert_line "file format: qcow2"
    # a --tls-creds directory without ca-cert.pem names the file
    mkdir "$TEST_DIR/empty"
    run -1 --separate-stderr "$DISKIMG" info --tls-creds="$TEST_DIR/empty" "$u"
    assert_equal "$(wc -l <<<"$stderr")" 1
    [[ $stderr == *"$TEST_DIR/empty/ca-cert.pem"* ]]
}

@test "redirects are followed only to https: to http refused, a loop stops, http -> https works" {
    local t=--tls-creds=$WEB_TLS_CREDS
    fails_with "$WEB_HTTPS/to-http/disk.qcow2?...: *redirects are followed only to https*" \
        "$DISKIMG" info "$t" "$WEB_HTTPS/to-http/disk.qcow2?$SIG"
    fails_with "$WEB_HTTP/chain/disk.qcow2: *followed only to https*" \
        "$DISKIMG" info "$WEB_HTTP/chain/disk.qcow2"
    fails_with "$WEB_HTTPS/loop/disk.qcow2: *redirects*" "$DISKIMG" info "$t" "$WEB_HTTPS/loop/disk.qcow2"
    run -0 "$DISKIMG" info "$t" "$WEB_HTTP/to-https/chain/disk.qcow2?$SIG"
    assert_line "file format: qcow2"
    refute_output --partial 5ecre7519
}

@test "transient failures are retried (503, dropped connections); a server that stays down or refuses gives up" {
    local u=$WEB_FLAKY out=$TEST_DIR/out.raw log=$BATS_FILE_TMPDIR/web/flaky.log
    # the slow ones (every retry, with backoff) run meanwhile
    "$DISKIMG" info "$u/fail/1000/disk.qcow2?$SIG" >"$TEST_DIR/down.out" 2>"$TEST_DIR/down.err" &
    local down=$!
    "$DISKIMG" info "$WEB_REFUSED/disk.qcow2?$SIG" >"$TEST_DIR/refused.out" 2>"$TEST_DIR/refused.err" &
    local refused=$!
    run -0 "$DISKIMG" convert -O raw "$u/fail/2/disk.qcow2?$SIG" "$out"
    cmp "$out" "$WEB_ROOT/disk.raw"
    run -0 "$DISKIMG" convert -O raw "$u/drop/2/disk.qcow2?t=2" "$out"
    cmp "$out" "$WEB_ROOT/disk.raw"
    # the failures happened: two 503s and two drops
    assert_equal "$(grep -c "^503 /fail/2/disk.qcow2?$SIG " "$log")" 2
    assert_equal "$(grep -c '^dropped /drop/2/disk.qcow2?t=2 ' "$log")" 2
    local st=0
    wait "$down" || st=$?
    assert_equal "$st" 1
    assert_equal "$(cat "$TEST_DIR/down.out")" ""
    run cat "$TEST_DIR/down.err"
    assert_output "diskimg: $u/fail/1000/disk.qcow2?...: HTTP 503 Service Unavailable (gave up after 6 attempts)"
    st=0
    wait "$refused" || st=$?
    assert_equal "$st" 1
    run cat "$TEST_DIR/refused.err"
    assert_equal "${#lines[@]}" 1
    assert_output --regexp "^diskimg: $WEB_REFUSED/disk.qcow2\?\.\.\.: .*(onnect|refused)"
}

@test "Retry-After: a transient answer's pause is waited for, a long one gives up at once" {
    local u=$WEB_FLAKY out=$TEST_DIR/out.raw log=$BATS_FILE_TMPDIR/web/flaky.log
    local t="/busy/1/2/disk.qcow2?ra=2"
    run -0 "$DISKIMG" convert -O raw "$u$t" "$out"
    cmp "$out" "$WEB_ROOT/disk.raw"
    # the second request came at least the 2 s asked for after the 429
    # (without Retry-After the first pause is 0.1 s)
    local times
    times=$(grep -F " $t " "$log" | head -2 | awk '{print $1, $NF}')
    assert_equal "$(echo "$times" | cut -d' ' -f1 | tr '\n' ' ')" "429 206 "
    echo "$times" | awk 'NR == 1 {t = $2} NR == 2 {exit !($2 - t >= 2)}'
    # an hour is not waited for: one request, one line, exit 1
    t="/busy/1/3600/disk.qcow2?ra=3600"
    run -1 "$DISKIMG" info "$u$t"
    assert_output "diskimg: $u/busy/1/3600/disk.qcow2?...: HTTP 429 Too Many Requests (the server asks to retry after 3600 s, more than 30 s)"
    assert_equal "$(grep -cF " $t " "$log")" 1
}

@test "serve refuses an http image without -r" {
    fails_with "$WEB_HTTP/disk.qcow2?...: HTTP images are read-only*" \
        "$DISKIMG" serve -k "$SOCK" "$WEB_HTTP/disk.qcow2?$SIG"
    [[ ! -e $SOCK ]]
    # and every other writer: a convert into it, a resize
    fails_with "read-only" "$DISKIMG" resize "$WEB_HTTP/disk.raw" 2M
}

@test "a qcow2 on a web server that names a backing file: neither a relative nor a local file opens" {
    local out=$TEST_DIR/out.raw
    truncate -s 1M "$TEST_DIR/local.raw"
    qemu-img create -q -f qcow2 -b "$TEST_DIR/local.raw" -F raw "$WEB_ROOT/abs.qcow2"
    qemu-img create -q -f qcow2 -b disk.raw -F raw "$WEB_ROOT/rel.qcow2"
    # a relative name has no directory to be found in (qemu-img would ask
    # the web server for it)
    fails_with "$WEB_HTTP/rel.qcow2?...: qcow2: backing file 'disk.raw' is relative*" \
        "$DISKIMG" convert -O raw "$WEB_HTTP/rel.qcow2?$SIG" "$out"
    [[ ! -e $out ]]
    # a remote image opens no local file it names (qemu-img would copy
    # the local file's bytes into the output), trusted or not
    fails_with "$WEB_HTTP/abs.qcow2?...: qcow2: backing file '$TEST_DIR/local.raw' is not opened: an image read from a server (http) may not name files or images of this host*" \
        "$DISKIMG" convert -O raw "$WEB_HTTP/abs.qcow2?$SIG" "$out"
    [[ ! -e $out ]]
    fails_with "refusing to open backing file '$TEST_DIR/local.raw'*" \
        "$DISKIMG" convert --untrusted -O raw "$WEB_HTTP/abs.qcow2?$SIG" "$out"
    [[ ! -e $out ]]
    # nor a cluster image
    qemu-img create -q -f qcow2 -u -b rbd:rbd/base -F raw "$WEB_ROOT/rbd.qcow2" 1M
    fails_with "*backing file 'rbd:rbd/base' is not opened: an image read from a server (http)*" \
        "$DISKIMG" convert -f qcow2 -O raw "$WEB_HTTP/rbd.qcow2" "$out"
    [[ ! -e $out ]]
    # info still shows the names, as qemu-img does
    "$DISKIMG" info --output=json "$WEB_HTTP/abs.qcow2" | jq -e --arg f "$TEST_DIR/local.raw" \
        '."backing-filename" == $f and ."full-backing-filename" == $f'
}

@test "a file replaced on the server while served: reads fail (412), never a mix of two files" {
    require_tool nbdsh
    head -c 4M /dev/urandom >"$WEB_ROOT/moving.raw"
    start_server -r -t -f raw "$WEB_HTTP/moving.raw?$SIG"
    WANT=$WEB_ROOT/moving.raw nbdsh -u "$URI" -c '
import os
want = open(os.environ["WANT"], "rb").read()
assert h.pread(65536, 0) == want[:65536]
'
    # the same size, new bytes and a new time: nginx's ETag changes
    head -c 4M /dev/urandom >"$WEB_ROOT/moving.new"
    touch -d '2020-01-01' "$WEB_ROOT/moving.new"
    mv "$WEB_ROOT/moving.new" "$WEB_ROOT/moving.raw"
    nbdsh -u "$URI" -c '
try:
    h.pread(65536, 3 * 1048576)
    raise SystemExit("a read of the replaced file succeeded")
except nbd.Error:
    pass
'
    kill -0 "$SERVER_PID"
    stop_server
    grep -q "HTTP 412 Precondition Failed" "$SERVER_LOG" || { cat "$SERVER_LOG" >&2 && false; }
    ! grep -q 5ecre7519 "$SERVER_LOG"
}
