#!/usr/bin/env bats
# Acknowledged writes survive the server's sudden death (kill -9), in
# every cache mode: FUA writes, and writes followed by an acknowledged
# FLUSH, are in the image file afterwards.  This cannot prove power-loss
# durability (the page cache survives a killed process), but it proves
# that what the server acknowledged reached the file, not a buffer of
# its own.  A second run with --stats and SIGTERM checks the path: FUA
# went native or was followed by a file flush, and FLUSH reached the file
# (except with cache=unsafe, which skips flushes by design).

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# The client: FUA writes (aligned and not), plain writes then FLUSH, a
# FUA zeroing; then, with argv[2] == "kill", SIGKILL the server while
# still connected.
CLIENT='
import os, signal, sys
import nbd

uri, action, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = nbd.NBD()
h.connect_uri(uri)
h.pwrite(b"\xa1" * 65536, 0, nbd.CMD_FLAG_FUA)
h.pwrite(b"\xa2" * 1001, 300001, nbd.CMD_FLAG_FUA)
h.pwrite(b"\xb1" * 131072, 1048576)
h.pwrite(b"\xb2" * 777, 1500000)
h.flush()
h.zero(65536, 65536, nbd.CMD_FLAG_FUA | nbd.CMD_FLAG_NO_HOLE)
if action == "kill":
    os.kill(pid, signal.SIGKILL)
else:
    h.shutdown()
'

check_image() {
    local img=$TEST_DIR/a.img
    range_is "$img" 0 65536 a1
    range_is "$img" 300001 1001 a2
    [[ $(bytes_at "$img" 300000 1) == $(bytes_at "$TEST_DIR/orig.img" 300000 1) ]]
    [[ $(bytes_at "$img" 301002 1) == $(bytes_at "$TEST_DIR/orig.img" 301002 1) ]]
    range_is "$img" 1048576 131072 b1
    range_is "$img" 1500000 777 b2
    cmp -i 65536:0 -n 65536 "$img" /dev/zero
}

# durability MODE: the kill -9 run, then the --stats run.
durability() {
    local mode=$1
    make_pattern "$TEST_DIR/a.img" $((2 * 1048576))
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t --cache="$mode" "$TEST_DIR/a.img"
    run "$PYTHON3" -c "$CLIENT" "$URI" kill "$SERVER_PID"
    assert_success
    stop_server KILL
    # killed by SIGKILL (128 + 9), not a clean exit
    [[ $SERVER_STATUS -eq 137 ]]
    check_image

    cp "$TEST_DIR/orig.img" "$TEST_DIR/a.img"
    start_server -t --cache="$mode" --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"
    run "$PYTHON3" -c "$CLIENT" "$URI" shutdown "$SERVER_PID"
    assert_success
    stop_server TERM
    [[ $SERVER_STATUS -eq 0 ]]
    check_image

    local st=$TEST_DIR/stats.json
    FUA_NATIVE=$(stats_get "$st" 'd["exports"][0]["fua-native"]')
    FUA_EMULATED=$(stats_get "$st" 'd["exports"][0]["fua-emulated"]')
    FILE_FLUSHES=$(stats_get "$st" 'd["exports"][0]["file-flushes"]')
    FLUSHES_SKIPPED=$(stats_get "$st" 'd["exports"][0]["flushes-skipped"]')
    [[ $(stats_get "$st" 'd["fua-requests"]') -eq 3 ]]
    [[ $(cmd_count "$st" FLUSH) -eq 1 ]]
    echo "cache=$mode: fua native $FUA_NATIVE emulated $FUA_EMULATED," \
        "file flushes $FILE_FLUSHES skipped $FLUSHES_SKIPPED"
}

# The durability path of the modes that honour FUA and FLUSH.
assert_durable_path() {
    # every FUA request (2 writes + 1 zeroing) was made durable ...
    [[ $((FUA_NATIVE + FUA_EMULATED)) -ge 3 ]]
    # ... an emulated one by a flush of the file; and the client's FLUSH
    # reached the file: one file flush for the FLUSH, at least one more
    # if any FUA was emulated (this client sends one request at a time,
    # so no flush can be shared).
    [[ $FILE_FLUSHES -ge $((1 + (FUA_EMULATED > 0 ? 1 : 0))) ]]
    [[ $FLUSHES_SKIPPED -eq 0 ]]
}

@test "durability, cache=writeback: FUA and flushed writes survive kill -9" {
    require_nbd_python
    durability writeback
    assert_durable_path
    # plain writes are not FUA in writeback: only the 3 FUA requests are
    [[ $((FUA_NATIVE + FUA_EMULATED)) -eq 3 ]]
}

@test "durability, cache=none: FUA and flushed writes survive kill -9" {
    require_nbd_python
    durability none
    assert_durable_path
    [[ $((FUA_NATIVE + FUA_EMULATED)) -eq 3 ]]
}

@test "durability, cache=writethrough: FUA and flushed writes survive kill -9" {
    require_nbd_python
    durability writethrough
    assert_durable_path
    # every write (4) and the zeroing is FUA
    [[ $((FUA_NATIVE + FUA_EMULATED)) -ge 5 ]]
}

@test "durability, cache=directsync: FUA and flushed writes survive kill -9" {
    require_nbd_python
    durability directsync
    assert_durable_path
    [[ $((FUA_NATIVE + FUA_EMULATED)) -ge 5 ]]
}

@test "durability, cache=unsafe: acknowledged writes reach the file; flushes are skipped" {
    require_nbd_python
    durability unsafe
    [[ $FILE_FLUSHES -eq 0 ]]
    [[ $FLUSHES_SKIPPED -ge 1 ]]
    # diskimg-serve(1): unsafe drops the FUA flag from writes, write-zeroes and trims
    [[ $FUA_NATIVE -eq 0 && $FUA_EMULATED -eq 0 ]]
}
