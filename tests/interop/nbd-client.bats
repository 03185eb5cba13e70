#!/usr/bin/env bats
# diskimg's NBD client driver against qemu-nbd, nbdkit, nbd-server and
# diskimg serve: info, convert into and out of each, compare and map on
# URIs (checked against cmp, qemu-img compare and qemu-img map), unix
# sockets and TCP on 127.0.0.1 and [::1], multi-conn only when advertised,
# block size constraints, servers lacking WRITE_ZEROES/FUA/block status,
# qcow2 inside an export; clear errors for refused exports, TLS-required
# servers, servers that die mid-transfer and images (qcow2, vdi, vpc,
# vmdk, vhdx) that outgrow their export (a vpc that fills it exactly
# keeps its trailing footer).

load '../helpers'
load 'lib'
load 'nbd-servers'
load 'tls-lib'

setup() { setup_test; }
teardown() {
    stop_peers
    kill_extra_servers
    cleanup_test
}

MiB=1048576
SIZE=$((6 * MiB + 4096))

# exercise URI FILE: the client against a writable export URI of FILE
# (FILE is SIZE bytes).  info, convert into it, compare, convert out of
# it (raw and qcow2, sparse), map as qemu-img sees it, a one-byte
# difference found at its offset.
exercise() {
    local uri=$1 file=$2
    make_sparse_src "$TEST_DIR/src.raw"

    run "$DISKIMG" info "$uri"
    assert_success
    assert_output --partial "virtual size: 6 MiB ($SIZE bytes)"
    assert_output --partial "file format: raw"

    run "$DISKIMG" convert -f raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    assert_output "Images are identical."
    run qemu-img compare -f raw -F raw "$TEST_DIR/src.raw" "$uri"
    assert_success

    run "$DISKIMG" convert -f raw -O raw "$uri" "$TEST_DIR/out.raw"
    assert_success
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/out.raw"
    # about 1.4 MB of data in 6 MiB: holes and zeroes stay holes
    [[ $(du_kib "$TEST_DIR/out.raw") -lt 2500 ]] || {
        echo "out.raw is not sparse: $(du_kib "$TEST_DIR/out.raw") KiB" >&2
        return 1
    }

    run "$DISKIMG" convert -f raw -O qcow2 "$uri" "$TEST_DIR/out.qcow2"
    assert_success
    run qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/out.qcow2"
    assert_success
    run qemu-img check "$TEST_DIR/out.qcow2"
    assert_success
    [[ $(du_kib "$TEST_DIR/out.qcow2") -lt 2500 ]]

    # map: what qemu-img map says about the same URI
    local ours theirs
    ours=$("$DISKIMG" map -f raw --output=json "$uri" | norm_map)
    theirs=$(qemu-img map -f raw --output=json "$uri" | norm_map)
    [[ -n "$ours" && "$ours" == "$theirs" ]] || {
        echo "map of $uri differs from qemu-img map:" >&2
        diff <(echo "$theirs") <(echo "$ours") >&2
        return 1
    }
    run "$DISKIMG" map "$uri"
    assert_success
    assert_output "$(qemu-img map "$uri")" # the URI spelled as qemu-img does

    # one byte different, far from the start
    cp "$TEST_DIR/src.raw" "$TEST_DIR/other.raw"
    printf 'Z' | dd of="$TEST_DIR/other.raw" bs=1 seek=5000003 conv=notrunc status=none
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/other.raw" "$uri"
    assert_failure 1
    assert_output "Content mismatch at offset 5000003!"
    run "$DISKIMG" compare -q "$uri" "$TEST_DIR/other.raw"
    assert_failure 1
    assert_output ""
}

@test "client vs qemu-nbd (unix socket): info, convert both ways, compare, map" {
    require_tool qemu-nbd qemu-img
    truncate -s $SIZE "$TEST_DIR/export.raw"
    start_qemu_nbd "$TEST_DIR/q.sock" -t -f raw "$TEST_DIR/export.raw"
    exercise "$(unix_uri "$TEST_DIR/q.sock")" "$TEST_DIR/export.raw"
    stop_peer "$PEER_PID"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/export.raw"
}

@test "client vs qemu-nbd on TCP 127.0.0.1 with an export name" {
    require_tool qemu-nbd qemu-img
    truncate -s $SIZE "$TEST_DIR/export.raw"
    start_peer_tcp qemu-nbd 127.0.0.1 -t -x disk0 -f raw "$TEST_DIR/export.raw"
    exercise "$PEER_URI/disk0" "$TEST_DIR/export.raw"
    stop_peer "$PEER_PID"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/export.raw"
}

@test "client vs nbdkit file plugin (unix socket): info, convert both ways, compare, map" {
    require_tool nbdkit qemu-img
    truncate -s $SIZE "$TEST_DIR/export.raw"
    start_nbdkit "$TEST_DIR/k.sock" file "$TEST_DIR/export.raw"
    exercise "$(unix_uri "$TEST_DIR/k.sock")" "$TEST_DIR/export.raw"
    stop_peer "$PEER_PID"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/export.raw"
}

@test "client vs nbdkit memory on TCP [::1]" {
    require_tool nbdkit qemu-img
    ip -6 addr show dev lo 2>/dev/null | grep -q "::1/128" || skip "no IPv6 loopback"
    start_peer_tcp nbdkit ::1 memory $SIZE
    exercise "$PEER_URI/" ""
}

@test "client vs nbd-server (unix socket, named export): info, convert both ways, compare, map" {
    require_tool nbd-server qemu-img
    truncate -s $SIZE "$TEST_DIR/export.raw"
    start_nbd_server "$TEST_DIR/n.sock" disk "$TEST_DIR/export.raw" "flush = true" "fua = true"
    exercise "$(unix_uri "$TEST_DIR/n.sock" disk)" "$TEST_DIR/export.raw"
    stop_peer "$PEER_PID"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/export.raw"
}

@test "client vs diskimg serve (unix socket, -t): info, convert both ways, compare, map" {
    require_tool qemu-img
    truncate -s $SIZE "$TEST_DIR/export.raw"
    start_server -t -e 0 "$TEST_DIR/export.raw"
    exercise "$URI" "$TEST_DIR/export.raw"
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/export.raw"
}

@test "NBD -> NBD: diskimg convert from qemu-nbd into nbdkit, nbd-server and diskimg serve" {
    require_tool qemu-nbd nbdkit nbd-server
    make_sparse_src "$TEST_DIR/src.raw"
    start_qemu_nbd "$TEST_DIR/q.sock" -t -r -f raw "$TEST_DIR/src.raw"
    local src
    src=$(unix_uri "$TEST_DIR/q.sock")
    make_pattern "$TEST_DIR/k.raw" $SIZE
    make_pattern "$TEST_DIR/n.raw" $SIZE
    make_pattern "$TEST_DIR/d.raw" $SIZE
    start_nbdkit "$TEST_DIR/k.sock" file "$TEST_DIR/k.raw"
    local kpid=$PEER_PID
    start_nbd_server "$TEST_DIR/n.sock" disk "$TEST_DIR/n.raw"
    local npid=$PEER_PID
    start_extra_server "$TEST_DIR/d.sock" "$TEST_DIR/d.raw"

    run "$DISKIMG" convert -f raw "$src" "$(unix_uri "$TEST_DIR/k.sock")"
    assert_success
    run "$DISKIMG" convert -f raw "$src" "$(unix_uri "$TEST_DIR/n.sock" disk)"
    assert_success
    run "$DISKIMG" convert -f raw "$src" "nbd+unix:///?socket=$TEST_DIR/d.sock"
    assert_success
    stop_peer "$kpid"
    stop_peer "$npid"
    wait_exit "$LAST_EXTRA_PID"
    # Targets were full of other data: the source's holes must have become zeroes.
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/k.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/n.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/d.raw"
}

@test "qcow2 inside an NBD export: info probes it, convert and compare read through it" {
    require_tool qemu-nbd qemu-img qemu-io
    qemu-img create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 0x3c 64k 1M' -c 'write -P 0x3d 3M 4k' "$TEST_DIR/a.qcow2" >/dev/null
    start_qemu_nbd "$TEST_DIR/q.sock" -t -r -f raw "$TEST_DIR/a.qcow2"
    local uri
    uri=$(unix_uri "$TEST_DIR/q.sock")
    run "$DISKIMG" info "$uri"
    assert_success
    assert_output --partial "file format: qcow2"
    assert_output --partial "virtual size: 4 MiB"
    run "$DISKIMG" convert -O raw "$uri" "$TEST_DIR/out.raw"
    assert_success
    run qemu-img compare -f qcow2 -F raw "$TEST_DIR/a.qcow2" "$TEST_DIR/out.raw"
    assert_success
    run "$DISKIMG" compare "$uri" "$TEST_DIR/a.qcow2"
    assert_success
}

@test "multi-conn: several connections to nbdkit memory (advertised), exactly one when not" {
    require_tool nbdkit
    head -c $((16 * MiB)) /dev/urandom >"$TEST_DIR/src.raw"
    start_nbdkit "$TEST_DIR/k.sock" --filter=log memory 16M logfile="$TEST_DIR/mc.log"
    local uri
    uri=$(unix_uri "$TEST_DIR/k.sock")
    run "$DISKIMG" convert -f raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    stop_peer "$PEER_PID"
    local n
    n=$(grep -c ' Connect ' "$TEST_DIR/mc.log")
    [[ $n -ge 3 ]] || { echo "only $n connections with multi-conn advertised" >&2; return 1; }

    start_nbdkit "$TEST_DIR/k2.sock" --filter=log --filter=multi-conn memory 16M \
        multi-conn-mode=disable logfile="$TEST_DIR/one.log"
    uri=$(unix_uri "$TEST_DIR/k2.sock")
    run "$DISKIMG" convert -f raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    stop_peer "$PEER_PID"
    # one for convert, one for compare
    n=$(grep -c ' Connect ' "$TEST_DIR/one.log")
    [[ $n -eq 2 ]] || { echo "$n connections without multi-conn (want 1 per command)" >&2; return 1; }
}

@test "multi-conn into qemu-nbd -e 4 and diskimg serve -e 0: data intact" {
    require_tool qemu-nbd
    head -c $((8 * MiB)) /dev/urandom >"$TEST_DIR/src.raw"
    truncate -s $((8 * MiB)) "$TEST_DIR/q.raw" "$TEST_DIR/d.raw"
    start_qemu_nbd "$TEST_DIR/q.sock" -t -e 4 -f raw "$TEST_DIR/q.raw"
    run "$DISKIMG" convert -m 16 -W -f raw "$TEST_DIR/src.raw" "$(unix_uri "$TEST_DIR/q.sock")"
    assert_success
    stop_peer "$PEER_PID"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/q.raw"

    start_server -t -e 0 --stats="$TEST_DIR/stats.json" "$TEST_DIR/d.raw"
    run "$DISKIMG" convert -m 16 -W -f raw "$TEST_DIR/src.raw" "$URI"
    assert_success
    stop_server
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/d.raw"
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["connections"]') -ge 2 ]]
}

@test "block size constraints (nbdkit blocksize-policy, errors on violation): convert, compare, bench" {
    require_tool nbdkit
    make_sparse_src "$TEST_DIR/src.raw"
    truncate -s $SIZE "$TEST_DIR/export.raw"
    start_nbdkit "$TEST_DIR/k.sock" --filter=blocksize-policy file "$TEST_DIR/export.raw" \
        blocksize-minimum=4096 blocksize-preferred=65536 blocksize-maximum=65536 \
        blocksize-error-policy=error
    local uri
    uri=$(unix_uri "$TEST_DIR/k.sock")
    run "$DISKIMG" convert -f raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    run "$DISKIMG" convert -f raw -O qcow2 "$uri" "$TEST_DIR/out.qcow2"
    assert_success
    run qemu-img compare -f raw "$TEST_DIR/src.raw" "$TEST_DIR/out.qcow2"
    assert_success
    # 512-byte writes on a 4k-minimum export: read-modify-write, concurrently
    run "$DISKIMG" bench -f raw -w -s 512 -c 256 -d 16 "$uri"
    assert_success
    run "$DISKIMG" bench -f raw -s 1M -c 8 -d 4 "$uri"
    assert_success
    stop_peer "$PEER_PID"
    range_is "$TEST_DIR/export.raw" 0 $((256 * 512)) a5
    cmp -i $((256 * 512)) "$TEST_DIR/src.raw" "$TEST_DIR/export.raw"
    ! grep -i error "$PEER_LOG"
}

@test "a server without WRITE_ZEROES, FUA or block status: the client falls back" {
    require_tool nbdkit
    make_sparse_src "$TEST_DIR/src.raw"
    make_pattern "$TEST_DIR/export.raw" $SIZE
    start_nbdkit "$TEST_DIR/k.sock" --filter=nozero --filter=fua --filter=noextents \
        file "$TEST_DIR/export.raw" zeromode=none
    local uri
    uri=$(unix_uri "$TEST_DIR/k.sock")
    run nbdinfo "$uri"
    assert_output --partial "can_zero: false"
    assert_output --partial "can_fua: false"
    # Zeroes must be written as data over the old pattern; writethrough
    # needs FUA, emulated by flushes.
    run "$DISKIMG" convert -t writethrough -f raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/src.raw" "$uri"
    assert_success
    # No block status: reading the export out is still sparse (-S).
    run "$DISKIMG" convert -f raw "$uri" "$TEST_DIR/out.raw"
    assert_success
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/out.raw"
    [[ $(du_kib "$TEST_DIR/out.raw") -lt 2500 ]]
    run "$DISKIMG" bench -f raw -w --fua -c 50 -d 4 "$uri"
    assert_success
    stop_peer "$PEER_PID"
    cmp -i $((50 * 4096)) "$TEST_DIR/src.raw" "$TEST_DIR/export.raw"
}

@test "a refused export name: exit 1 and one line naming the export (qemu-nbd, nbdkit, nbd-server, diskimg)" {
    require_tool qemu-nbd nbdkit nbd-server
    # (one file per server that locks it: qemu-nbd and diskimg each write theirs)
    truncate -s 1M "$TEST_DIR/e.raw" "$TEST_DIR/d.raw" "$TEST_DIR/c.raw"
    start_qemu_nbd "$TEST_DIR/q.sock" -t -x good -f raw "$TEST_DIR/e.raw"
    start_nbdkit "$TEST_DIR/k.sock" --filter=exportname memory 1M \
        exportname=good exportname-strict=true
    start_nbd_server "$TEST_DIR/n.sock" good "$TEST_DIR/e.raw"
    start_extra_server "$TEST_DIR/d.sock" -t -x good "$TEST_DIR/d.raw"
    local s cmd
    for s in q k n d; do
        run "$DISKIMG" info "$(unix_uri "$TEST_DIR/$s.sock" good)"
        assert_success
        for cmd in info map; do
            run --separate-stderr timeout 30 "$DISKIMG" $cmd "$(unix_uri "$TEST_DIR/$s.sock" wrongname)"
            [[ $status -eq 1 ]] || { echo "$cmd on $s.sock: exit $status ($stderr)" >&2; return 1; }
            [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == *wrongname* ]] || {
                echo "$cmd on $s.sock: unclear error: $stderr" >&2
                return 1
            }
        done
        run --separate-stderr timeout 30 "$DISKIMG" convert -f raw "$(unix_uri "$TEST_DIR/$s.sock" wrongname)" \
            "$TEST_DIR/out.raw"
        assert_failure 1
        [[ "$stderr" == *wrongname* ]]
        [[ ! -e "$TEST_DIR/out.raw" ]]
        run --separate-stderr timeout 30 "$DISKIMG" compare "$TEST_DIR/c.raw" \
            "$(unix_uri "$TEST_DIR/$s.sock" wrongname)"
        assert_failure 2
        [[ "$stderr" == *wrongname* ]]
    done
}

@test "a TLS-only server (nbdkit --tls=require, qemu-nbd tls-creds): plain nbd:// fails at once with a clear error" {
    require_tool nbdkit qemu-nbd psktool
    tls_psk "$TEST_DIR/psk/keys.psk" alice >/dev/null
    # (c.raw, the local image, is not e.raw: qemu-nbd's lock keeps readers out of that)
    truncate -s 1M "$TEST_DIR/e.raw" "$TEST_DIR/c.raw"
    start_nbdkit "$TEST_DIR/k.sock" --tls=require --tls-psk="$TEST_DIR/psk/keys.psk" memory 1M
    start_qemu_nbd "$TEST_DIR/q.sock" -t -f raw \
        --object "tls-creds-psk,id=tls0,endpoint=server,dir=$TEST_DIR/psk" --tls-creds tls0 \
        "$TEST_DIR/e.raw"
    local s
    for s in k q; do
        run --separate-stderr timeout 30 "$DISKIMG" info "$(unix_uri "$TEST_DIR/$s.sock")"
        assert_failure 1
        [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
        [[ "$stderr" == *TLS* && "$stderr" == *nbds://* ]] || { echo "unclear: $stderr" >&2; return 1; }
        run --separate-stderr timeout 30 "$DISKIMG" convert -f raw "$TEST_DIR/c.raw" "$(unix_uri "$TEST_DIR/$s.sock")"
        assert_failure 1
        [[ "$stderr" == *TLS* ]]
        run --separate-stderr timeout 30 "$DISKIMG" compare "$TEST_DIR/c.raw" "$(unix_uri "$TEST_DIR/$s.sock")"
        assert_failure 2
        [[ "$stderr" == *TLS* ]]
        run --separate-stderr timeout 30 "$DISKIMG" bench -c 1 "$(unix_uri "$TEST_DIR/$s.sock")"
        assert_failure 1
        [[ "$stderr" == *TLS* ]]
    done
}

@test "nbds:// to nbdkit and qemu-nbd with PSK: works, and the session ends cleanly (no TLS errors on the server)" {
    require_tool nbdkit qemu-nbd psktool
    tls_psk "$TEST_DIR/psk/keys.psk" alice >/dev/null
    head -c $MiB /dev/urandom >"$TEST_DIR/src.raw"
    truncate -s 1M "$TEST_DIR/e.raw"
    start_nbdkit "$TEST_DIR/k.sock" --tls=require --tls-psk="$TEST_DIR/psk/keys.psk" memory 1M
    start_qemu_nbd "$TEST_DIR/q.sock" -t -f raw \
        --object "tls-creds-psk,id=tls0,endpoint=server,dir=$TEST_DIR/psk" --tls-creds tls0 \
        "$TEST_DIR/e.raw"
    local s uri
    for s in k q; do
        uri="nbds+unix:///?socket=$TEST_DIR/$s.sock"
        run "$DISKIMG" convert --tls-psk="$TEST_DIR/psk/keys.psk" -f raw "$TEST_DIR/src.raw" "$uri"
        assert_success
        run "$DISKIMG" compare --tls-psk="$TEST_DIR/psk/keys.psk" -f raw -F raw "$TEST_DIR/src.raw" "$uri"
        assert_success
    done
    stop_peers
    # A client that closes its TLS session properly leaves no errors:
    # NBD_CMD_DISC inside TLS, then close_notify.
    run grep -i -E "error|Cannot read from TLS" "$TEST_DIR/nbdkit.log" "$TEST_DIR/qemu-nbd.log"
    assert_failure 1
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/e.raw"
}

# kill_peer_midway PID: wait a moment for the transfer to be under way,
# then kill -9 the server.
kill_peer_midway() {
    sleep 1
    kill -KILL "$1"
}

@test "server killed mid-transfer (reading): convert fails in bounded time with a clear error, target removed" {
    require_tool nbdkit
    start_nbdkit "$TEST_DIR/k.sock" --filter=delay pattern 1G rdelay=300ms
    "$DISKIMG" convert -f raw "$(unix_uri "$TEST_DIR/k.sock")" "$TEST_DIR/out.raw" 2>"$TEST_DIR/err" &
    local pid=$!
    kill_peer_midway "$PEER_PID"
    wait_exit $pid 30
    [[ $EXIT_STATUS -eq 1 ]] || { echo "exit $EXIT_STATUS" >&2; cat "$TEST_DIR/err" >&2; return 1; }
    [[ $(wc -l <"$TEST_DIR/err") -eq 1 ]]
    grep -E "connection to the NBD server was lost|closed the connection" "$TEST_DIR/err"
    [[ ! -e "$TEST_DIR/out.raw" ]]
}

@test "server killed mid-transfer (writing): convert fails in bounded time with a clear error" {
    require_tool nbdkit
    head -c $((64 * MiB)) /dev/urandom >"$TEST_DIR/src.raw"
    start_nbdkit "$TEST_DIR/k.sock" --filter=delay memory 64M wdelay=300ms
    "$DISKIMG" convert -f raw "$TEST_DIR/src.raw" "$(unix_uri "$TEST_DIR/k.sock")" 2>"$TEST_DIR/err" &
    local pid=$!
    kill_peer_midway "$PEER_PID"
    wait_exit $pid 30
    [[ $EXIT_STATUS -eq 1 ]] || { echo "exit $EXIT_STATUS" >&2; cat "$TEST_DIR/err" >&2; return 1; }
    [[ $(wc -l <"$TEST_DIR/err") -eq 1 ]]
    grep -E "connection to the NBD server was lost|closed the connection" "$TEST_DIR/err"
}

@test "server killed mid-compare and mid-bench: an error exit, not a hang" {
    require_tool nbdkit
    # zeroes on both sides, read slowly (no block status: every byte is read)
    truncate -s 1G "$TEST_DIR/big.raw"
    start_nbdkit "$TEST_DIR/k.sock" --filter=noextents --filter=delay memory 1G rdelay=300ms
    "$DISKIMG" compare -f raw -F raw "$(unix_uri "$TEST_DIR/k.sock")" "$TEST_DIR/big.raw" \
        >"$TEST_DIR/out" 2>"$TEST_DIR/err" &
    local pid=$!
    kill_peer_midway "$PEER_PID"
    wait_exit $pid 30
    # 3 (block status failed) or 4 (read failed), as qemu-img compare
    [[ $EXIT_STATUS -eq 3 || $EXIT_STATUS -eq 4 ]] || {
        echo "compare exit $EXIT_STATUS" >&2
        cat "$TEST_DIR/out" "$TEST_DIR/err" >&2
        return 1
    }
    grep -q "lost\|closed" "$TEST_DIR/err"

    start_nbdkit "$TEST_DIR/k2.sock" --filter=delay memory 64M wdelay=200ms
    "$DISKIMG" bench -f raw -w -c 100000 -d 4 "$(unix_uri "$TEST_DIR/k2.sock")" \
        >"$TEST_DIR/out" 2>"$TEST_DIR/err" &
    pid=$!
    kill_peer_midway "$PEER_PID"
    wait_exit $pid 30
    [[ $EXIT_STATUS -eq 1 ]] || { echo "bench exit $EXIT_STATUS" >&2; cat "$TEST_DIR/err" >&2; return 1; }
    grep -q "lost\|closed" "$TEST_DIR/err"
}

@test "a server error on read is reported with its reason (EIO), exit 1" {
    require_tool nbdkit
    start_nbdkit "$TEST_DIR/k.sock" --filter=error pattern 4M error=EIO error-pread-rate=100%
    run --separate-stderr "$DISKIMG" convert -f raw "$(unix_uri "$TEST_DIR/k.sock")" "$TEST_DIR/out.raw"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ ! -e "$TEST_DIR/out.raw" ]]
    # as qemu-img: "... Input/output error"
    [[ "$stderr" == *"Input/output error"* ]] || { echo "no reason in: $stderr" >&2; return 1; }
}

@test "nothing listening: exit 1, one line, for unix and TCP URIs" {
    local uri
    for uri in "nbd+unix:///?socket=$TEST_DIR/none.sock" "nbd://127.0.0.1:$(random_port)/" \
               "nbd://[::1]:$(random_port)/x"; do
        run --separate-stderr timeout 30 "$DISKIMG" info "$uri"
        assert_failure 1
        [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
        [[ "$stderr" == *"cannot connect"* ]]
    done
}

@test "URI forms: a percent-encoded export name, localhost; malformed URIs are one clear line (exit 1)" {
    require_tool qemu-nbd
    make_pattern "$TEST_DIR/e.raw" $MiB
    start_qemu_nbd "$TEST_DIR/q.sock" -t -r -x 'my disk/1' -f raw "$TEST_DIR/e.raw"
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/e.raw" "nbd+unix:///my%20disk/1?socket=$TEST_DIR/q.sock"
    assert_success
    stop_peer "$PEER_PID"
    start_peer_tcp qemu-nbd 127.0.0.1 -t -r -x exp -f raw "$TEST_DIR/e.raw"
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/e.raw" "nbd://localhost:$PORT/exp"
    assert_success
    local uri
    for uri in "nbd://127.0.0.1:abc/" "nbd://127.0.0.1:99999/" "nbd://:$PORT/" \
               "nbd+unix://host/?socket=$TEST_DIR/q.sock" "nbd+unix:///" "nbd+unix:///?socket="; do
        run --separate-stderr timeout 30 "$DISKIMG" info "$uri"
        [[ $status -eq 1 && $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == "diskimg: "* ]] || {
            echo "info $uri: exit $status, stderr '$stderr'" >&2
            return 1
        }
    done
}

@test "a read-only export as convert target (qemu-nbd -r, nbdkit -r): exit 1, one line saying read-only" {
    require_tool qemu-nbd nbdkit
    make_pattern "$TEST_DIR/src.raw" $MiB
    truncate -s 1M "$TEST_DIR/e.raw"
    start_qemu_nbd "$TEST_DIR/q.sock" -t -r -f raw "$TEST_DIR/e.raw"
    start_nbdkit "$TEST_DIR/k.sock" -r memory 1M
    local s
    for s in q k; do
        run --separate-stderr timeout 30 "$DISKIMG" convert -f raw "$TEST_DIR/src.raw" "$(unix_uri "$TEST_DIR/$s.sock")"
        assert_failure 1
        [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == *read-only* ]] || {
            echo "unclear: $stderr" >&2
            return 1
        }
    done
    range_is "$TEST_DIR/e.raw" 0 $MiB 00
}

# refused_no_space URI EXPORT_SIZE WHAT: the command just run failed with
# exit 1 and one line, no space left in the export at URI.
refused_no_space() {
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 &&
        "$stderr" == "diskimg: $1: no space left: writing "*" needs more than its $2 bytes, and its length cannot change (nbd)" ]] || {
        echo "$3: unclear: $stderr" >&2
        return 1
    }
}

# outgrow_export FMT EXPORT_SIZE DATA_SIZE...: an empty 8 MiB FMT image
# copied into an export of EXPORT_SIZE bytes, on nbdkit memory and on
# diskimg serve (neither can grow); converting DATA_SIZE bytes into it
# needs more than the export holds.  Each convert fails with one line,
# no space left, its parts refused before they are sent, and the image
# stays sound (check where FMT has one, info otherwise).
outgrow_export() {
    local fmt=$1 esize=$2 uri dsize
    shift 2
    require_tool nbdkit
    "$DISKIMG" create -f "$fmt" "$TEST_DIR/a.$fmt" 8M >/dev/null
    truncate -s "$esize" "$TEST_DIR/e.raw"
    start_nbdkit "$TEST_DIR/k.sock" memory "$esize"
    start_server -t -f raw "$TEST_DIR/e.raw"
    for uri in "$(unix_uri "$TEST_DIR/k.sock")" "$(unix_uri "$SOCK")"; do
        "$DISKIMG" convert -f raw -O raw "$TEST_DIR/a.$fmt" "$uri"
        for dsize in "$@"; do
            head -c "$dsize" /dev/urandom >"$TEST_DIR/src.raw"
            run --separate-stderr timeout 60 "$DISKIMG" convert -f raw -O "$fmt" "$TEST_DIR/src.raw" "$uri"
            refused_no_space "$uri" "$esize" "$fmt, $dsize bytes"
        done
        if [[ $fmt == vpc ]]; then
            run "$DISKIMG" info -f "$fmt" "$uri" # vpc has no check
        else
            run "$DISKIMG" check -f "$fmt" "$uri"
        fi
        assert_success
    done
}

@test "qcow2 inside a fixed-length export: writing past its end fails with one line, no space left" {
    # The qcow2 clusters that do not fit are refused before they are
    # sent, and the image keeps no leaked cluster.
    outgrow_export qcow2 $MiB $((2 * MiB))
}

@test "vdi inside a fixed-length export: writing past its end fails with one line, no space left" {
    # 4 KiB: the write fits in the export, the block it allocates does not.
    outgrow_export vdi $MiB $((2 * MiB)) 4096
}

@test "vpc inside a fixed-length export: writing past its end fails with one line, no space left" {
    outgrow_export vpc $MiB $((2 * MiB))
}

@test "vpc that fills its export exactly: a refused block writes nothing, the trailing footer stays" {
    # The write starts inside its block (after a 4 KiB hole).  The new
    # footer, past the block, is written first and refused; the old code
    # wrote the block's bitmap first, over the trailing footer.
    require_tool nbdkit qemu-img
    local uri esize
    "$DISKIMG" create -f vpc "$TEST_DIR/a.vpc" 8M >/dev/null
    esize=$(stat -c %s "$TEST_DIR/a.vpc")
    truncate -s "$esize" "$TEST_DIR/e.raw"
    start_nbdkit "$TEST_DIR/k.sock" memory "$esize"
    start_server -t -f raw "$TEST_DIR/e.raw"
    truncate -s 4096 "$TEST_DIR/src.raw"
    head -c 4096 /dev/urandom >>"$TEST_DIR/src.raw"
    for uri in "$(unix_uri "$TEST_DIR/k.sock")" "$(unix_uri "$SOCK")"; do
        "$DISKIMG" convert -f raw -O raw "$TEST_DIR/a.vpc" "$uri"
        run --separate-stderr timeout 60 "$DISKIMG" convert -f raw -O vpc "$TEST_DIR/src.raw" "$uri"
        refused_no_space "$uri" "$esize" "vpc, a write inside a new block"
        "$DISKIMG" convert -f raw -O raw "$uri" "$TEST_DIR/back.raw"
        cmp "$TEST_DIR/a.vpc" "$TEST_DIR/back.raw"
        run qemu-img info -f vpc "$uri"
        assert_success
    done
}

@test "vmdk inside a fixed-length export: writing past its end fails with one line, no space left" {
    outgrow_export vmdk $MiB $((2 * MiB))
}

@test "vhdx inside a fixed-length export: writing past its end fails with one line, no space left" {
    # An empty vhdx of 8 MiB is 8 MiB long (headers, log, metadata, BAT).
    outgrow_export vhdx $((8 * MiB)) $((2 * MiB))
}
