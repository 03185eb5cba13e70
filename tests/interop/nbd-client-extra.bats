#!/usr/bin/env bats
# More of diskimg's NBD client (see nbd-client.bats for the basics):
# bench and map on every server, multi-conn (how many connections, and
# servers that take fewer clients than the client opens), block status on
# exports with a minimum block size, a server without flush/FUA/trim
# (nbd-server's plain config), the EXPORT_NAME and simple-reply fallbacks,
# an oldstyle server, an X.509 TLS-only server, SIGINT while a server
# stalls the handshake, a server dying under convert -n, and the shape of
# an NBD -> NBD copy (request size, flushes as it goes).

load '../helpers'
load 'lib'
load 'nbd-servers'
load 'tls-lib'

setup() { setup_test; }
teardown() {
    stop_peers
    kill_extra_servers
    [[ -z "${FAKE_PID:-}" ]] || { kill -KILL "$FAKE_PID" 2>/dev/null; wait "$FAKE_PID" 2>/dev/null; } || true
    cleanup_test
}

MiB=1048576

# json_get JSON EXPR: python EXPR with d bound to the JSON text.
json_get() {
    "$PYTHON3" -c 'import json, sys
d = json.loads(sys.argv[1])
print(eval(sys.argv[2]))' "$1" "$2"
}

# bench_ok URI ARGS...: bench --output=json succeeds and reports sane numbers.
bench_ok() {
    local uri=$1 out
    shift
    out=$("$DISKIMG" bench -f raw --output=json "$@" "$uri") || {
        echo "bench $* $uri failed" >&2
        return 1
    }
    [[ $(json_get "$out" 'd["iops"] > 0 and d["mbps"] > 0 and d["seconds"] > 0') == True ]] || {
        echo "bench $* $uri: $out" >&2
        return 1
    }
    BENCH_JSON=$out
}

# readback URI FILE: the export's content, read by qemu-img (not by us).
readback() {
    rm -f "$2"
    qemu-img convert -f raw -O raw "$1" "$2"
}

# same_map URI: diskimg map and qemu-img map agree on URI (data/zero runs).
same_map() {
    local ours theirs
    ours=$("$DISKIMG" map -f raw --output=json "$1" | norm_map)
    theirs=$(qemu-img map -f raw --output=json "$1" | norm_map)
    [[ -n "$ours" && "$ours" == "$theirs" ]] || {
        echo "map of $1:" >&2
        diff <(echo "$theirs") <(echo "$ours") >&2
        return 1
    }
}

# bench_server URI: read and write benches against URI (a 4 MiB export
# holding ref.raw), then check with qemu-img that the writes landed where
# bench says and nothing else changed.
bench_server() {
    local uri=$1
    same_map "$uri"
    bench_ok "$uri" -c 300 -d 8
    [[ $(json_get "$BENCH_JSON" 'd["operation"], d["requests"], d["request-size"]') == "('read', 300, 4096)" ]]
    bench_ok "$uri" -c 200 -d 4 -s 64k --pattern=rand
    bench_ok "$uri" -w -c 64 -s 4k -o 64k -d 8
    [[ $(json_get "$BENCH_JSON" 'd["operation"]') == write ]]
    bench_ok "$uri" -w --fua -c 16 -s 4k -o 1M -d 4
    [[ $(json_get "$BENCH_JSON" 'd["operation"]') == write-fua ]]
    bench_ok "$uri" -w --flush-interval=8 -c 32 -s 4k -o 2M -d 4
    [[ $(json_get "$BENCH_JSON" 'd["flushes"] > 0') == True ]]
    readback "$uri" "$TEST_DIR/chk.raw"
    range_is "$TEST_DIR/chk.raw" 65536 $((64 * 4096)) a5
    range_is "$TEST_DIR/chk.raw" $MiB $((16 * 4096)) a5
    range_is "$TEST_DIR/chk.raw" $((2 * MiB)) $((32 * 4096)) a5
    cmp -n 65536 "$TEST_DIR/ref.raw" "$TEST_DIR/chk.raw"
    cmp -i $((65536 + 64 * 4096)) -n $((MiB - 65536 - 64 * 4096)) "$TEST_DIR/ref.raw" "$TEST_DIR/chk.raw"
    cmp -i $((2 * MiB + 32 * 4096)) "$TEST_DIR/ref.raw" "$TEST_DIR/chk.raw"
}

# make_ref: ref.raw, 4 MiB: data, a hole, data.
make_ref() {
    truncate -s 4M "$TEST_DIR/ref.raw"
    make_pattern "$TEST_DIR/pat" $MiB
    dd if="$TEST_DIR/pat" of="$TEST_DIR/ref.raw" bs=64k count=16 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$TEST_DIR/ref.raw" bs=64k seek=40 count=8 conv=notrunc status=none
}

@test "bench and map on every server: diskimg serve, qemu-nbd, nbdkit file and memory, nbd-server" {
    require_tool qemu-nbd qemu-img nbdkit nbd-server jq
    make_ref
    local s
    for s in d q kf km n; do
        cp --sparse=always "$TEST_DIR/ref.raw" "$TEST_DIR/$s.raw"
    done
    start_extra_server "$TEST_DIR/d.sock" -t -e 0 "$TEST_DIR/d.raw"
    bench_server "nbd+unix:///?socket=$TEST_DIR/d.sock"
    start_qemu_nbd "$TEST_DIR/q.sock" -t -f raw "$TEST_DIR/q.raw"
    bench_server "$(unix_uri "$TEST_DIR/q.sock")"
    start_nbdkit "$TEST_DIR/kf.sock" file "$TEST_DIR/kf.raw"
    bench_server "$(unix_uri "$TEST_DIR/kf.sock")"
    start_nbdkit "$TEST_DIR/km.sock" memory 4M
    "$DISKIMG" convert -f raw "$TEST_DIR/ref.raw" "$(unix_uri "$TEST_DIR/km.sock")"
    bench_server "$(unix_uri "$TEST_DIR/km.sock")"
    start_nbd_server "$TEST_DIR/n.sock" disk "$TEST_DIR/n.raw" "flush = true" "fua = true"
    bench_server "$(unix_uri "$TEST_DIR/n.sock" disk)"
}

# conns_of STATS_FILE: the "connections" count of a --stats document.
conns_of() {
    stats_get "$1" 'd["connections"]'
}

@test "multi-conn: every open of a diskimg serve -e 0 export uses several connections; -e 1 exactly one" {
    make_ref
    truncate -s 4M "$TEST_DIR/t.raw"
    local n
    # Not persistent: the server exits when the command's last connection
    # closes, and its statistics are that one command's.
    start_server -e 0 -v --stats="$TEST_DIR/in.json" "$TEST_DIR/t.raw"
    "$DISKIMG" convert -f raw "$TEST_DIR/ref.raw" "$URI"
    wait_exit "$SERVER_PID" 30
    SERVER_PID=
    [[ $EXIT_STATUS -eq 0 ]]
    cmp "$TEST_DIR/ref.raw" "$TEST_DIR/t.raw"
    n=$(conns_of "$TEST_DIR/in.json")
    [[ $n -ge 2 ]] || { echo "convert into a multi-conn export used $n connection(s)" >&2; return 1; }
    # the -v log has one line per connection too
    [[ $(grep -c "connection from" "$SERVER_LOG") -eq $n ]]

    : >"$SERVER_LOG"
    start_server -e 0 -r --stats="$TEST_DIR/out.json" "$TEST_DIR/t.raw"
    "$DISKIMG" convert -f raw "$URI" "$TEST_DIR/out.raw"
    wait_exit "$SERVER_PID" 30
    SERVER_PID=
    cmp "$TEST_DIR/ref.raw" "$TEST_DIR/out.raw"
    [[ $(conns_of "$TEST_DIR/out.json") -ge 2 ]]

    # Without CAN_MULTI_CONN (default -e 1): one connection.
    start_server --stats="$TEST_DIR/one.json" "$TEST_DIR/t.raw"
    "$DISKIMG" compare -f raw "$TEST_DIR/ref.raw" "$URI"
    wait_exit "$SERVER_PID" 30
    SERVER_PID=
    [[ $(conns_of "$TEST_DIR/one.json") -eq 1 ]]
}

@test "multi-conn to a server that takes fewer clients than the client opens: no handshake stall" {
    require_tool qemu-nbd
    make_ref
    cp --sparse=always "$TEST_DIR/ref.raw" "$TEST_DIR/d.raw"
    cp --sparse=always "$TEST_DIR/ref.raw" "$TEST_DIR/q.raw"
    # Both advertise CAN_MULTI_CONN but serve two clients at a time; a
    # third connection waits in the listen backlog.  The client must not
    # wait out its 30 s handshake timeout on it (every command would take
    # 30 s longer); a few seconds is plenty even under ASan.
    start_extra_server "$TEST_DIR/d.sock" -t -e 2 "$TEST_DIR/d.raw"
    start_qemu_nbd "$TEST_DIR/q.sock" -t -e 2 -f raw "$TEST_DIR/q.raw"
    local uri
    for uri in "nbd+unix:///?socket=$TEST_DIR/d.sock" "$(unix_uri "$TEST_DIR/q.sock")"; do
        run --separate-stderr timeout 15 "$DISKIMG" compare -f raw "$TEST_DIR/ref.raw" "$uri"
        [[ $status -eq 0 ]] || { echo "compare $uri: exit $status (124 = timed out): $stderr" >&2; return 1; }
    done
}

@test "block status respects the export's minimum block size (unaligned compare and map ranges)" {
    require_tool nbdkit qemu-img jq
    # 3 MiB + 12345 bytes of data: shorter than the 8 MiB export, so the
    # common part compare asks about ends off a 4k boundary.
    make_pattern "$TEST_DIR/odd.raw" $((3 * MiB + 12345))
    start_nbdkit "$TEST_DIR/k.sock" --filter=blocksize-policy memory 8M \
        blocksize-minimum=4096 blocksize-preferred=65536 blocksize-maximum=65536 \
        blocksize-error-policy=error
    local uri
    uri=$(unix_uri "$TEST_DIR/k.sock")
    run "$DISKIMG" convert -f raw "$TEST_DIR/odd.raw" "$uri"
    assert_success
    run qemu-img compare -f raw -F raw "$TEST_DIR/odd.raw" "$uri"
    assert_success
    run --separate-stderr "$DISKIMG" compare -f raw -F raw "$TEST_DIR/odd.raw" "$uri"
    [[ $status -eq 0 ]] || { echo "compare: exit $status: $stderr" >&2; return 1; }
    [[ "$output" == *"Images are identical."* ]]
    # map of unaligned ranges, as qemu-img map sees them
    local ours theirs
    ours=$("$DISKIMG" map -f raw --output=json --start-offset=100 --max-length=5000 "$uri" | norm_map)
    theirs=$(qemu-img map -f raw --output=json --start-offset=100 --max-length=5000 "$uri" | norm_map)
    [[ -n "$ours" && "$ours" == "$theirs" ]] || {
        echo "map: ours '$ours', qemu-img '$theirs'" >&2
        return 1
    }
}

@test "a server without flush, FUA or trim (nbd-server plain config): writes are still right" {
    require_tool nbd-server qemu-img nbdinfo
    make_ref
    make_pattern "$TEST_DIR/n.raw" $((4 * MiB))
    start_nbd_server "$TEST_DIR/n.sock" plain "$TEST_DIR/n.raw"
    local uri
    uri=$(unix_uri "$TEST_DIR/n.sock" plain)
    run nbdinfo "$uri"
    assert_output --partial "can_flush: false"
    assert_output --partial "can_fua: false"
    assert_output --partial "can_trim: false"
    # writethrough asks for FUA on every write: emulated by a flush the
    # server does not have, so skipped; the data must still be exact, and
    # the old pattern in ref.raw's hole must be zeroed.
    run "$DISKIMG" convert -t writethrough -f raw "$TEST_DIR/ref.raw" "$uri"
    assert_success
    readback "$uri" "$TEST_DIR/chk.raw"
    cmp "$TEST_DIR/ref.raw" "$TEST_DIR/chk.raw"
    run "$DISKIMG" convert -S 0 -f raw "$TEST_DIR/ref.raw" "$uri"
    assert_success
    run "$DISKIMG" bench -f raw -w --fua -c 32 -d 4 -o 3M "$uri"
    assert_success
    run "$DISKIMG" bench -f raw -w --flush-interval=4 -c 32 -d 4 -o 3584k "$uri"
    assert_success
    assert_output --partial "flushes"
    readback "$uri" "$TEST_DIR/chk.raw"
    cmp -n $((3 * MiB)) "$TEST_DIR/ref.raw" "$TEST_DIR/chk.raw"
    range_is "$TEST_DIR/chk.raw" $((3 * MiB)) $((32 * 4096)) a5
    range_is "$TEST_DIR/chk.raw" $((3584 * 1024)) $((32 * 4096)) a5
}

@test "fallbacks: EXPORT_NAME (no fixed newstyle) and simple replies (no structured replies)" {
    require_tool nbdkit qemu-img jq
    make_ref
    local uri
    # Not fixed newstyle: the client may only send NBD_OPT_EXPORT_NAME.
    start_nbdkit "$TEST_DIR/old.sock" --mask-handshake=0 memory 4M
    uri=$(unix_uri "$TEST_DIR/old.sock")
    run "$DISKIMG" info "$uri"
    assert_success
    assert_output --partial "virtual size: 4 MiB (4194304 bytes)"
    run "$DISKIMG" convert -f raw "$TEST_DIR/ref.raw" "$uri"
    assert_success
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/ref.raw" "$uri"
    assert_success
    run "$DISKIMG" convert -f raw "$uri" "$TEST_DIR/out1.raw"
    assert_success
    cmp "$TEST_DIR/ref.raw" "$TEST_DIR/out1.raw"
    run "$DISKIMG" bench -f raw -w --fua -c 16 -o 3M "$uri"
    assert_success

    # The same without fixed newstyle, refusing every name but one.
    start_nbdkit "$TEST_DIR/oldx.sock" --mask-handshake=0 --filter=exportname memory 4M \
        exportname=good exportname-strict=true
    run --separate-stderr timeout 30 "$DISKIMG" info "$(unix_uri "$TEST_DIR/oldx.sock" wrong)"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == *wrong* ]]
    run "$DISKIMG" info "$(unix_uri "$TEST_DIR/oldx.sock" good)"
    assert_success

    # Fixed newstyle without structured replies: simple replies, no block
    # status (everything is data, as qemu-img map sees it too).
    cp --sparse=always "$TEST_DIR/ref.raw" "$TEST_DIR/f.raw"
    start_nbdkit "$TEST_DIR/nosr.sock" --no-sr file "$TEST_DIR/f.raw"
    uri=$(unix_uri "$TEST_DIR/nosr.sock")
    same_map "$uri"
    run "$DISKIMG" convert -f raw "$uri" "$TEST_DIR/out2.raw"
    assert_success
    cmp "$TEST_DIR/ref.raw" "$TEST_DIR/out2.raw"
    make_pattern "$TEST_DIR/p.raw" $((4 * MiB))
    run "$DISKIMG" convert -f raw "$TEST_DIR/p.raw" "$uri"
    assert_success
    run "$DISKIMG" convert -f raw "$TEST_DIR/ref.raw" "$uri"
    assert_success
    stop_peer "$PEER_PID"
    cmp "$TEST_DIR/ref.raw" "$TEST_DIR/f.raw"
}

@test "an oldstyle server is refused with a clear one-line error" {
    require_tool nbdkit
    start_nbdkit "$TEST_DIR/o.sock" --oldstyle memory 1M
    local cmd
    for cmd in info map; do
        run --separate-stderr timeout 30 "$DISKIMG" $cmd "$(unix_uri "$TEST_DIR/o.sock")"
        assert_failure 1
        [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == *oldstyle* ]] || {
            echo "$cmd: $stderr" >&2
            return 1
        }
    done
    run --separate-stderr timeout 30 "$DISKIMG" convert -f raw "$(unix_uri "$TEST_DIR/o.sock")" "$TEST_DIR/o.raw"
    assert_failure 1
    [[ ! -e "$TEST_DIR/o.raw" ]]
}

@test "an X.509 TLS-only server (certtool certificates): plain URIs fail at once, naming TLS" {
    require_tool nbdkit certtool
    make_server_pki "$TEST_DIR/pki"
    start_nbdkit "$TEST_DIR/t.sock" --tls=require --tls-certificates="$TEST_DIR/pki/server" memory 1M
    truncate -s 1M "$TEST_DIR/e.raw"
    local uri
    uri=$(unix_uri "$TEST_DIR/t.sock")
    run --separate-stderr timeout 30 "$DISKIMG" info "$uri"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == *TLS* ]] || { echo "$stderr" >&2; return 1; }
    run --separate-stderr timeout 30 "$DISKIMG" convert -f raw "$TEST_DIR/e.raw" "$uri"
    assert_failure 1
    [[ "$stderr" == *TLS* ]]
    run --separate-stderr timeout 30 "$DISKIMG" convert -f raw "$uri" "$TEST_DIR/out.raw"
    assert_failure 1
    [[ "$stderr" == *TLS* && ! -e "$TEST_DIR/out.raw" ]]
    run --separate-stderr timeout 30 "$DISKIMG" bench -c 1 "$uri"
    assert_failure 1
    [[ "$stderr" == *TLS* ]]
}

@test "SIGINT while the server stalls the handshake: exit 130 promptly, nothing created" {
    # A "server" that accepts and then says nothing.
    "$PYTHON3" - "$TEST_DIR/stall.sock" "$TEST_DIR/accepted" <<'EOF' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
c, _ = s.accept()
open(sys.argv[2], "w").close()
time.sleep(120)
EOF
    FAKE_PID=$!
    wait_until 10 unix_listening "$TEST_DIR/stall.sock"
    "$DISKIMG" convert -f raw "nbd+unix:///?socket=$TEST_DIR/stall.sock" "$TEST_DIR/out.raw" \
        2>"$TEST_DIR/err" &
    local pid=$!
    wait_until 10 test -e "$TEST_DIR/accepted"
    sleep 0.2
    kill -INT $pid
    # Bounded: the handshake timeout is 30 s; an interrupted convert must
    # not sit it out.
    if ! wait_exit $pid 10; then
        kill -KILL $pid 2>/dev/null || true
        wait $pid 2>/dev/null || true
        echo "convert ignored SIGINT during the handshake" >&2
        return 1
    fi
    [[ $EXIT_STATUS -eq 130 ]] || { echo "exit $EXIT_STATUS: $(cat "$TEST_DIR/err")" >&2; return 1; }
    [[ ! -e "$TEST_DIR/out.raw" ]]
}

@test "the source server killed under convert -n: exit 1 with a clear error, the target is kept" {
    require_tool nbdkit
    start_nbdkit "$TEST_DIR/k.sock" --filter=delay pattern 256M rdelay=300ms
    truncate -s 256M "$TEST_DIR/keep.raw"
    "$DISKIMG" convert -n --progress=json -f raw "$(unix_uri "$TEST_DIR/k.sock")" "$TEST_DIR/keep.raw" \
        2>"$TEST_DIR/err" &
    local pid=$!
    wait_until 30 grep -q '"progress"' "$TEST_DIR/err"
    kill -KILL "$PEER_PID"
    wait_exit $pid 30
    [[ $EXIT_STATUS -eq 1 ]] || { echo "exit $EXIT_STATUS" >&2; cat "$TEST_DIR/err" >&2; return 1; }
    grep -v '"progress"' "$TEST_DIR/err" | grep -E "lost|closed"
    [[ -e "$TEST_DIR/keep.raw" && $(stat -c %s "$TEST_DIR/keep.raw") -eq $((256 * MiB)) ]]
    # What was copied before the server died is there: the first claim
    # (2 MiB; its first 256 KiB checked here) was written before the first progress
    # line.  nbdkit's pattern: each 8-byte word is its own offset,
    # big-endian.
    "$PYTHON3" -c '
import struct, sys
d = open(sys.argv[1], "rb").read(256 << 10)
bad = [i for i in range(0, len(d), 8) if struct.unpack(">Q", d[i:i + 8])[0] != i]
assert not bad, "first bad word at %d" % bad[0]' "$TEST_DIR/keep.raw"
}

# --- servers that take fewer clients than a command needs -----------------------

@test "compare of two exports of a one-client server: fails within seconds, pointing at -e/--shared" {
    require_tool qemu-nbd
    make_ref
    cp --sparse=always "$TEST_DIR/ref.raw" "$TEST_DIR/a.raw"
    cp --sparse=always "$TEST_DIR/ref.raw" "$TEST_DIR/b.raw"
    # each server gets files of its own: a writable export locks its file
    local f
    for f in qa a2 b2; do cp --sparse=always "$TEST_DIR/ref.raw" "$TEST_DIR/$f.raw"; done
    # diskimg serve and qemu-nbd take one client by default; compare
    # holds its first connection while it opens the second
    start_extra_server "$TEST_DIR/d.sock" -t --export=name=a,file="$TEST_DIR/a.raw" \
        --export=name=b,file="$TEST_DIR/b.raw"
    start_qemu_nbd "$TEST_DIR/q.sock" -t -f raw "$TEST_DIR/qa.raw"
    local d="nbd+unix:///a?socket=$TEST_DIR/d.sock" d2="nbd+unix:///b?socket=$TEST_DIR/d.sock"
    local q q2
    q=$(unix_uri "$TEST_DIR/q.sock")
    q2=$q
    local pair
    for pair in "$d $d2" "$q $q2"; do
        # (the 30 s handshake timeout is not waited out: timeout 20)
        run --separate-stderr timeout 20 "$DISKIMG" compare -f raw -F raw $pair
        echo "compare $pair: exit $status: $stderr" >&2
        [[ $status -ne 0 && $status -ne 1 && $status -ne 124 ]]
        [[ "$stderr" == *"the NBD server sent no greeting: it takes no more clients, and this command already holds 1 connection(s) to it"* ]]
        [[ "$stderr" == *"-e N / --shared=N"* ]]
        [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    done
    grep -q "client limit reached (-e/--shared=1): a new client waits" "$SERVER_LOG"
    # with room for two clients the same compare works
    start_extra_server "$TEST_DIR/d2.sock" -t -e 2 --export=name=a,file="$TEST_DIR/a2.raw" \
        --export=name=b,file="$TEST_DIR/b2.raw"
    run timeout 20 "$DISKIMG" compare -f raw -F raw "nbd+unix:///a?socket=$TEST_DIR/d2.sock" \
        "nbd+unix:///b?socket=$TEST_DIR/d2.sock"
    assert_success
}

@test "a one-client server whose slot another client holds: the handshake timeout names the likely cause" {
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"
    # another process takes the only slot and keeps it
    PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c '
import sys, time
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
print("holding", flush=True)
time.sleep(120)
' "$SOCK" >"$TEST_DIR/holder.out" 2>&1 &
    FAKE_PID=$!
    wait_until 20 grep -q holding "$TEST_DIR/holder.out"
    run --separate-stderr timeout 60 "$DISKIMG" info "$URI"
    echo "exit $status: $stderr" >&2
    [[ $status -eq 1 ]]
    [[ "$stderr" == *"nbd+unix socket $SOCK: the NBD server accepted the connection but sent no greeting within 30 s: it probably serves as many clients as it allows (qemu-nbd and diskimg serve take one unless started with -e N / --shared=N)"* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
}

@test "NBD -> NBD convert: 256 KiB writes, the target flushed as the copy goes, data intact" {
    # 80 MiB of data, a hole, then data again: the copy reads block
    # status, writes requests of at most 256 KiB (several in flight, in
    # order), and flushes the target every 32 MiB besides the final flush.
    # A threshold crossed while an early flush is still running is not
    # flushed again (early_flush in block/copy.c), and on a fast machine
    # the last 48 MiB are copied within one flush: so at least one early
    # flush, and the final one.
    head -c $((40 * MiB)) /dev/urandom >"$TEST_DIR/s.raw"
    truncate -s $((48 * MiB)) "$TEST_DIR/s.raw"
    head -c $((40 * MiB)) /dev/urandom >>"$TEST_DIR/s.raw"
    truncate -s $((88 * MiB)) "$TEST_DIR/t.raw"
    start_extra_server "$TEST_DIR/s.sock" -t -e 0 -r -f raw "$TEST_DIR/s.raw"
    start_server -e 0 --stats="$TEST_DIR/t.json" -f raw "$TEST_DIR/t.raw"
    "$DISKIMG" convert -n -f raw -O raw "nbd+unix:///?socket=$TEST_DIR/s.sock" "$URI"
    wait_exit "$SERVER_PID" 30
    SERVER_PID=
    [[ $EXIT_STATUS -eq 0 ]]
    cmp "$TEST_DIR/s.raw" "$TEST_DIR/t.raw"
    local c='d["commands"]'
    [[ $(json_get "$(cat "$TEST_DIR/t.json")" "$c[\"NBD_CMD_WRITE\"][\"bytes\"]") -eq $((80 * MiB)) ]]
    [[ $(json_get "$(cat "$TEST_DIR/t.json")" "$c[\"NBD_CMD_WRITE\"][\"count\"]") -ge 320 ]]
    local flushes
    flushes=$(json_get "$(cat "$TEST_DIR/t.json")" "$c[\"NBD_CMD_FLUSH\"][\"count\"]")
    [[ $flushes -ge 2 ]] || { echo "$flushes flush(es) for an 80 MiB copy" >&2; return 1; }

    # -m 1: one request at a time, the same bytes.
    truncate -s 0 "$TEST_DIR/t.raw"
    truncate -s $((88 * MiB)) "$TEST_DIR/t.raw"
    start_server -e 0 -f raw "$TEST_DIR/t.raw"
    "$DISKIMG" convert -m 1 -n -f raw -O raw "nbd+unix:///?socket=$TEST_DIR/s.sock" "$URI"
    wait_exit "$SERVER_PID" 30
    SERVER_PID=
    cmp "$TEST_DIR/s.raw" "$TEST_DIR/t.raw"
}

@test "the NBD client's messages show a URI's control bytes as \\xHH" {
    # The URI can come from an image (an NBD backing file name); the
    # neutraliser would show its controls as '?', escaped they stay exact.
    truncate -s 1M "$TEST_DIR/a.img"
    SOCK=$TEST_DIR/e$'\x1b'.sock
    start_server -r -f raw "$TEST_DIR/a.img"
    run "$DISKIMG" convert -n -O raw "$TEST_DIR/a.img" "nbd+unix:///?socket=$SOCK"
    assert_failure
    [[ $output != *$'\x1b'* ]]
    assert_output --partial 'e\x1b.sock: the NBD export is read-only and cannot be written'
}
