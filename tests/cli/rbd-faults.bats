#!/usr/bin/env bats
# rbd: faults of a real Ceph cluster under diskimg.  The OSD goes away and
# comes back while diskimg serve serves an image; a wrong key, user, pool,
# image or monitor address; an image another client holds the lock of.
# One cluster for the file (ceph-lib.bash); every image has its own name.

load '../helpers'
load 'ceph-lib'

setup_file() { ceph_start; }
teardown_file() { ceph_stop; }
setup() { setup_test; }
teardown() {
    cleanup_test
    # a test that failed with the OSD down must not take the others along
    [[ -n $(cat "$CEPH_DIR/osd.0.pid" 2>/dev/null) ]] || ceph_osd_start
}

# one_line_error STATUS TEXT...: the last command (run --separate-stderr)
# failed with STATUS and one line on stderr that holds every TEXT.
one_line_error() {
    local want=$1 t
    shift
    assert_failure "$want"
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]] || {
        echo "more than one line: $stderr" >&2
        return 1
    }
    for t in "$@"; do
        [[ $stderr == *"$t"* ]] || {
            echo "'$t' missing from: $stderr" >&2
            return 1
        }
    done
}

# pattern_at FILE OFFSET LENGTH BYTE: FILE holds LENGTH bytes BYTE there.
pattern_at() {
    cmp <(dd if="$1" bs=64k skip="$2" count="$3" iflag=skip_bytes,count_bytes status=none) \
        <(head -c "$3" /dev/zero | tr '\0' "\\$(printf '%03o' "$4")")
}

@test "rbd faults: the OSD stops and restarts under serve; nothing acknowledged is lost" {
    # two exports: librbd's cache on (durable once flushed) and off
    # (durable once acknowledged)
    rbd create --size 16M rbd/osd
    rbd create --size 16M rbd/osd-direct
    start_server -t --export=name=wb,file=rbd:rbd/osd,format=raw \
        --export=name=direct,file=rbd:rbd/osd-direct,format=raw,cache=none
    local wb="nbd+unix:///wb?socket=$SOCK" direct="nbd+unix:///direct?socket=$SOCK"
    nbdsh -u "$wb" -c 'h.pwrite(b"\x41" * (1 << 20), 0); h.flush()'
    # (a flush turns librbd's cache, were it on, from write-through to
    # write-back: the write after the restart would then be lost)
    nbdsh -u "$direct" -c 'h.pwrite(b"\x44" * (1 << 20), 0); h.flush()'

    ceph_osd_stop
    # a write while the OSD is down waits for it (or fails with EIO)
    nbdsh_within 60 -u "$wb" -c '
import errno
try:
    h.pwrite(b"\x42" * 65536, 2 << 20)
    h.flush()
    print("written")
except nbd.Error as e:
    assert e.errnum == errno.EIO, e
    print("EIO")
' >"$TEST_DIR/during.out" 2>&1 &
    local during=$!
    sleep 0.5
    # still waiting, or failed with EIO; the server runs on either way
    if ! kill -0 "$during" 2>/dev/null; then
        wait "$during" || {
            cat "$TEST_DIR/during.out" >&2
            return 1
        }
        [[ $(<"$TEST_DIR/during.out") == EIO ]]
        during=
    fi
    kill -0 "$SERVER_PID"

    ceph_osd_start
    if [[ -n $during ]]; then
        wait "$during" || {
            cat "$TEST_DIR/during.out" >&2
            return 1
        }
    fi
    # it serves again: reads what was acknowledged, takes new writes
    nbdsh_within 30 -u "$wb" -c '
assert h.pread(1 << 20, 0) == b"\x41" * (1 << 20)
h.pwrite(b"\x43" * 65536, 4 << 20)
h.flush()
'
    # killed right after the reply, before a disconnect could flush:
    # what Ceph has is what the server acknowledged as durable
    nbdsh_within 30 -u "$direct" -c '
import os, signal
assert h.pread(1 << 20, 0) == b"\x44" * (1 << 20)
h.pwrite(b"\x45" * 65536, 4 << 20)
os.kill('"$SERVER_PID"', signal.SIGKILL)
'
    stop_server KILL
    rbd export --no-progress rbd/osd "$TEST_DIR/osd.raw"
    pattern_at "$TEST_DIR/osd.raw" 0 $((1 << 20)) 0x41
    pattern_at "$TEST_DIR/osd.raw" $((4 << 20)) 65536 0x43
    if [[ $(<"$TEST_DIR/during.out") == written ]]; then
        pattern_at "$TEST_DIR/osd.raw" $((2 << 20)) 65536 0x42
    fi
    rbd export --no-progress rbd/osd-direct "$TEST_DIR/direct.raw"
    pattern_at "$TEST_DIR/direct.raw" 0 $((1 << 20)) 0x44
    pattern_at "$TEST_DIR/direct.raw" $((4 << 20)) 65536 0x45
}

@test "rbd faults: with an OSD op timeout, requests to a down OSD fail with EIO, none is lost" {
    rbd create --size 8M rbd/timeout
    # the cache off: a write that timed out was never acknowledged
    start_server -t --cache=none -f raw rbd:rbd/timeout:rados_osd_op_timeout=1
    nbdsh -u "$URI" -c 'h.pwrite(b"\x41" * 65536, 0)'
    ceph_osd_stop
    run nbdsh_within 20 -u "$URI" -c '
import errno
for name, op in (("write", lambda: h.pwrite(b"\x42" * 65536, 65536)),
                 ("read", lambda: h.pread(65536, 0))):
    try:
        op()
        raise AssertionError(name + " succeeded with the OSD down")
    except nbd.Error as e:
        assert e.errnum == errno.EIO, e
'
    assert_success
    kill -0 "$SERVER_PID"
    ceph_osd_start
    nbdsh_within 30 -u "$URI" -c '
assert h.pread(65536, 0) == b"\x41" * 65536
h.pwrite(b"\x43" * 65536, 131072)
'
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    rbd export --no-progress rbd/timeout "$TEST_DIR/timeout.raw"
    pattern_at "$TEST_DIR/timeout.raw" 0 65536 0x41
    pattern_at "$TEST_DIR/timeout.raw" 131072 65536 0x43
    grep -q "NBD_CMD_WRITE .* failed with EIO: rbd:rbd/timeout.*: timed out (is an OSD down?" \
        "$SERVER_LOG"

    # librbd's cache on (the default) would acknowledge a write, drop it
    # when it times out, and let a later flush succeed: with an op
    # timeout the driver writes through.  A write that is acknowledged
    # and flushed is in Ceph, or the write or the flush failed.
    rbd create --size 8M rbd/timeout-cached
    start_server -t -f raw rbd:rbd/timeout-cached:rados_osd_op_timeout=1
    nbdsh -u "$URI" -c 'h.pwrite(b"\x41" * 65536, 0); h.flush()'
    ceph_osd_stop
    run nbdsh_within 20 -u "$URI" -c '
import errno, time
try:
    h.pwrite(b"\x42" * 65536, 65536)
    time.sleep(1.5)
    h.flush()
    print("durable")
except nbd.Error as e:
    assert e.errnum == errno.EIO, e
    print("EIO")
'
    ceph_osd_start
    stop_server
    rbd export --no-progress rbd/timeout-cached "$TEST_DIR/cached.raw"
    pattern_at "$TEST_DIR/cached.raw" 0 65536 0x41
    [[ $output == EIO ]] || pattern_at "$TEST_DIR/cached.raw" 65536 65536 0x42
}

@test "rbd faults: wrong key, user, pool, image or monitors: one line, exit 1, no secret" {
    rbd create --size 1M rbd/there
    CEPH_CONF=/dev/null ceph-authtool "$TEST_DIR/bad.keyring" --create-keyring --gen-key \
        -n client.admin >/dev/null
    awk '$1 == "key" { print $3 }' "$TEST_DIR/bad.keyring" "$CEPH_DIR/keyring" >"$TEST_DIR/keys"
    [[ $(wc -l <"$TEST_DIR/keys") -eq 4 ]]

    run --separate-stderr "$DISKIMG" info "rbd:rbd/there:keyring=$TEST_DIR/bad.keyring"
    one_line_error 1 rbd/there "permission denied"
    # no key, neither the wrong one nor the cluster's, is printed
    run grep -F -f "$TEST_DIR/keys" <<<"$stderr"
    assert_failure 1
    run --separate-stderr "$DISKIMG" serve -f raw -k "$SOCK" \
        "rbd:rbd/there:keyring=$TEST_DIR/bad.keyring"
    one_line_error 1 rbd/there "permission denied"
    run --separate-stderr "$DISKIMG" info rbd:rbd/there:id=nobody
    one_line_error 1 rbd/there "permission denied"

    run --separate-stderr "$DISKIMG" info rbd:nopool/there
    one_line_error 1 nopool "does not exist"
    run --separate-stderr "$DISKIMG" convert -O raw rbd:rbd/nothere "$TEST_DIR/out.raw"
    one_line_error 1 rbd/nothere "does not exist"
    [[ ! -e $TEST_DIR/out.raw ]]

    # monitors nobody answers at: an error within the mount timeout
    sed "s/^mon host = .*/mon host = [v2:127.0.0.1:9,v1:127.0.0.1:9]/" "$CEPH_CONF" \
        >"$TEST_DIR/dead.conf"
    run --separate-stderr timeout 20 "$DISKIMG" info \
        "rbd:rbd/there:conf=$TEST_DIR/dead.conf:client_mount_timeout=1"
    one_line_error 1 rbd/there "timed out (are the monitors in mon_host reachable?)"
}

@test "rbd faults: a locked image refuses a second writer (exit 5) and lets readers in" {
    rbd create --size 8M rbd/locked
    start_server -t -f raw rbd:rbd/locked
    # Ceph sees the lock diskimg holds
    [[ $(rbd lock ls --format json rbd/locked | jq length) -eq 1 ]]

    run --separate-stderr "$DISKIMG" serve -f raw -k "$TEST_DIR/second.sock" rbd:rbd/locked
    one_line_error 5 rbd/locked "in use"
    run --separate-stderr "$DISKIMG" resize rbd:rbd/locked 16M
    one_line_error 5 rbd/locked "in use"
    [[ $(rbd info --format json rbd/locked | jq .size) -eq 8388608 ]]

    # readers are welcome, the writer still writes
    "$DISKIMG" info rbd:rbd/locked
    nbdsh -u "$URI" -c 'h.pwrite(b"\x44" * 4096, 0); h.flush()'
    local reader=$TEST_DIR/reader.sock
    "$DISKIMG" serve -r -f raw -k "$reader" rbd:rbd/locked 2>>"$SERVER_LOG" &
    local rpid=$!
    wait_until 10 unix_listening "$reader"
    run timeout 20 qemu-io -r -f raw -c 'read -P 0x44 0 4k' "nbd+unix:///?socket=$reader"
    assert_success
    assert_output --partial "read 4096/4096 bytes at offset 0"
    refute_output --partial "Pattern verification failed"
    # without -t it ends with its last client
    wait_until 10 eval "! kill -0 $rpid 2>/dev/null" || kill "$rpid"
    wait "$rpid"

    # once the writer is gone, the next one gets the lock
    stop_server
    "$DISKIMG" resize rbd:rbd/locked 16M
    [[ $(rbd info --format json rbd/locked | jq .size) -eq 16777216 ]]

    # a lock Ceph's own tool took keeps writers out too, not readers
    rbd lock add rbd/locked by-hand
    run --separate-stderr timeout 25 "$DISKIMG" resize rbd:rbd/locked 32M
    one_line_error 5 rbd/locked "in use" by-hand
    "$DISKIMG" info rbd:rbd/locked
    [[ $(rbd info --format json rbd/locked | jq .size) -eq 16777216 ]]
    rbd lock rm rbd/locked by-hand "$(rbd lock ls --format json rbd/locked | jq -r '.[0].locker')"
    "$DISKIMG" resize rbd:rbd/locked 32M
    [[ $(rbd info --format json rbd/locked | jq .size) -eq 33554432 ]]
}
