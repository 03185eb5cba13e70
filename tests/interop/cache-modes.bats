#!/usr/bin/env bats
# --cache=MODE: data written through each mode reads back and lands in
# the file, and --stats shows the durability path each mode promises:
#   writeback     FUA only when asked, FLUSH reaches the file
#   none          O_DIRECT, otherwise like writeback
#   writethrough  every write is FUA
#   directsync    O_DIRECT and every write is FUA
#   unsafe        flushes never reach the file

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# qemu_io_session MODE: serve a 2 MiB image with --cache=MODE, write
# three times through qemu-io (one FUA write, then a flush) and read back.
# The server exits when qemu-io disconnects; leaves the stats in
# $TEST_DIR/stats.json.
qemu_io_session() {
    truncate -s 2M "$TEST_DIR/a.img"
    start_server --cache="$1" --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"
    # -t writeback: qemu-io sends FUA only for write -f.
    run qemu-io -t writeback -f raw "$URI" \
        -c 'write -P 0x11 0 64k' \
        -c 'write -P 0x22 1000001 4099' \
        -c 'write -f -P 0x33 1M 8k' \
        -c 'flush' \
        -c 'read -P 0x11 0 64k' \
        -c 'read -P 0x22 1000001 4099' \
        -c 'read -P 0x33 1M 8k' \
        -c 'read -P 0 64k 4k'
    assert_success
    refute_output --partial "failed"
    wait_exit "$SERVER_PID"
    SERVER_PID=
    [[ $EXIT_STATUS -eq 0 ]]
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["cache"]') == "$1" ]]
    [[ $(cmd_count "$TEST_DIR/stats.json" WRITE) -eq 3 ]]
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["fua-requests"]') -eq 1 ]]
    # and the file holds it
    [[ $(bytes_at "$TEST_DIR/a.img" 65535 2) == 1100 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 1000000 2) == 0022 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 1004099 2) == 2200 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" $((1048576 + 8191)) 2) == 3300 ]]
    [[ $(stat -c %s "$TEST_DIR/a.img") -eq 2097152 ]]
}

# export_stat NAME: a field of exports[0] in the stats.
export_stat() {
    stats_get "$TEST_DIR/stats.json" "d['exports'][0]['$1']"
}

@test "cache=writeback: data reads back; only the FUA write is FUA; FLUSH reaches the file" {
    require_tool qemu-io
    qemu_io_session writeback
    [[ $(($(export_stat fua-native) + $(export_stat fua-emulated))) -eq 1 ]]
    [[ $(export_stat file-flushes) -ge 1 ]]
    [[ $(export_stat flushes-skipped) -eq 0 ]]
}

@test "cache=none: data reads back; only the FUA write is FUA; FLUSH reaches the file" {
    require_tool qemu-io
    qemu_io_session none
    [[ $(($(export_stat fua-native) + $(export_stat fua-emulated))) -eq 1 ]]
    [[ $(export_stat file-flushes) -ge 1 ]]
    [[ $(export_stat flushes-skipped) -eq 0 ]]
}

@test "cache=writethrough: data reads back; every write is FUA" {
    require_tool qemu-io
    qemu_io_session writethrough
    [[ $(($(export_stat fua-native) + $(export_stat fua-emulated))) -ge 3 ]]
    [[ $(export_stat flushes-skipped) -eq 0 ]]
}

@test "cache=directsync: data reads back; every write is FUA" {
    require_tool qemu-io
    qemu_io_session directsync
    [[ $(($(export_stat fua-native) + $(export_stat fua-emulated))) -ge 3 ]]
    [[ $(export_stat flushes-skipped) -eq 0 ]]
}

@test "cache=unsafe: data reads back; client flushes never reach the file" {
    require_tool qemu-io
    qemu_io_session unsafe
    [[ $(cmd_count "$TEST_DIR/stats.json" FLUSH) -ge 1 ]]
    [[ $(export_stat file-flushes) -eq 0 ]]
    [[ $(export_stat flushes-skipped) -ge 1 ]]
    # and the client's FUA is dropped
    [[ $(($(export_stat fua-native) + $(export_stat fua-emulated))) -eq 0 ]]
}

# SNAPSHOT (python): SIGUSR1 makes the server rewrite the --stats file
# (atomically, by rename); snapshot() returns exports[0] of a fresh one.
SNAPSHOT='
import json, os, signal, time
def snapshot():
    path = os.environ["STATS"]
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.kill(int(os.environ["STATS_PID"]), signal.SIGUSR1)
    for _ in range(2000):
        if os.path.exists(path):
            return json.load(open(path))["exports"][0]
        time.sleep(0.01)
    raise SystemExit("no stats after SIGUSR1")
'

@test "cache=writeback and none: a client FLUSH after plain writes adds a file flush (SIGUSR1 snapshots)" {
    require_tool nbdsh
    local mode
    for mode in writeback none; do
        truncate -s 1M "$TEST_DIR/a.img"
        start_server -t --cache=$mode --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"
        export STATS_PID=$SERVER_PID STATS=$TEST_DIR/stats.json
        run nbdsh -u "$URI" -c "$SNAPSHOT" -c '
h.pwrite(b"a" * 65536, 0)
h.pwrite(b"b" * 65536, 65536)
s0 = snapshot()
assert s0["fua-native"] + s0["fua-emulated"] == 0, s0
h.flush()
s1 = snapshot()
assert s1["file-flushes"] == s0["file-flushes"] + 1, (s0, s1)
h.pwrite(b"c" * 4096, 0, nbd.CMD_FLAG_FUA)
s2 = snapshot()
assert s2["fua-native"] + s2["fua-emulated"] == 1, s2
# an emulated FUA must have flushed the file
assert s2["fua-emulated"] == 0 or s2["file-flushes"] > s1["file-flushes"], (s1, s2)
'
        echo "cache=$mode: $output"
        assert_success
        assert server_alive
        stop_server
        [[ $SERVER_STATUS -eq 0 ]]
    done
}

@test "cache=unsafe: many FLUSH and FUA requests, no file flush at all" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server --cache=unsafe --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
for i in range(10):
    h.pwrite(bytes([i]) * 4096, i * 4096)
    h.flush()
h.zero(4096, 0, nbd.CMD_FLAG_FUA)
h.trim(4096, 8192, nbd.CMD_FLAG_FUA)
assert h.pread(4096, 4096) == bytes([1]) * 4096
'
    assert_success
    wait_exit "$SERVER_PID"
    SERVER_PID=
    [[ $(cmd_count "$TEST_DIR/stats.json" FLUSH) -ge 10 ]]
    [[ $(export_stat file-flushes) -eq 0 ]]
    [[ $(export_stat flushes-skipped) -ge 10 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" $((9 * 4096)) 1) == 09 ]]
}

@test "cache=writethrough and directsync: write-zeroes are FUA too" {
    require_tool nbdsh
    local mode
    for mode in writethrough directsync; do
        make_pattern "$TEST_DIR/a.img" 1048576
        rm -f "$TEST_DIR/stats.json"
        start_server --cache=$mode --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"
        run nbdsh -u "$URI" -c '
h.zero(65536, 0)
h.zero(65536, 65536, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(131072, 0) == bytes(131072)
'
        assert_success
        wait_exit "$SERVER_PID"
        SERVER_PID=
        # each zeroing was FUA: native, or emulated with a file flush
        local native emulated flushes
        native=$(export_stat fua-native)
        emulated=$(export_stat fua-emulated)
        flushes=$(export_stat file-flushes)
        [[ $((native + emulated)) -ge 2 ]]
        [[ $emulated -eq 0 || $flushes -ge 1 ]]
        cmp -n 131072 "$TEST_DIR/a.img" /dev/zero
    done
}

@test "cache=none and directsync: writes into the last partial block of an unaligned file" {
    require_tool qemu-io
    # O_DIRECT needs aligned requests; the server pads them, and must
    # neither fail nor grow a file whose size is not a multiple of the
    # alignment.
    local mode
    for mode in none directsync; do
        make_pattern "$TEST_DIR/a.img" 1000001
        cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
        start_server -t --cache=$mode "$TEST_DIR/a.img"
        run qemu-io -f raw "$URI" \
            -c 'write -P 0x5a 999000 1001' \
            -c 'write -P 0x6b 1000000 1' \
            -c 'write -P 0x7c 998999 1' \
            -c 'read -P 0x7c 998999 1' \
            -c 'read -P 0x5a 999000 1000' \
            -c 'read -P 0x6b 1000000 1'
        echo "cache=$mode: $output"
        assert_success
        refute_output --partial "failed"
        stop_server
        [[ $(stat -c %s "$TEST_DIR/a.img") -eq 1000001 ]]
        [[ $(bytes_at "$TEST_DIR/a.img" 998998 4) == "$(bytes_at "$TEST_DIR/orig.img" 998998 1)7c5a5a" ]]
        [[ $(bytes_at "$TEST_DIR/a.img" 999999 2) == 5a6b ]]
        cmp -n 998998 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    done
}

@test "cache=none: unaligned writes in the middle of the file (read-modify-write)" {
    require_tool qemu-io
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t --cache=none "$TEST_DIR/a.img"

    run qemu-io -f raw "$URI" \
        -c 'write -P 0x41 1 1' \
        -c 'write -P 0x42 4095 2' \
        -c 'write -P 0x43 10000 20000' \
        -c 'read -P 0x41 1 1' \
        -c 'read -P 0x42 4095 2' \
        -c 'read -P 0x43 10000 20000'
    assert_success
    refute_output --partial "failed"
    stop_server
    [[ $(bytes_at "$TEST_DIR/a.img" 0 3) == "$(bytes_at "$TEST_DIR/orig.img" 0 1)41$(bytes_at "$TEST_DIR/orig.img" 2 1)" ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 4094 4) == "$(bytes_at "$TEST_DIR/orig.img" 4094 1)4242$(bytes_at "$TEST_DIR/orig.img" 4097 1)" ]]
    cmp -i 30000 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    cmp -i 4097 -n $((10000 - 4097)) "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}
