#!/usr/bin/env bats
# --discard=unmap|ignore and --detect-zeroes=off|on|unmap, seen through
# block status (base:allocation), the data read back, the file's
# allocation and the statistics.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# status_of OFF LEN (python, for nbdsh --base-allocation): the one extent's
# flags at OFF (REQ_ONE).
STATUS_OF='
def status_of(off, n):
    got = []
    def cb(ctx, o, e, err):
        got.extend(e)
        return 0
    h.block_status(n, off, cb, nbd.CMD_FLAG_REQ_ONE)
    return got[1]
HZ = nbd.STATE_HOLE | nbd.STATE_ZERO
'

@test "--discard=unmap (default): TRIM and WRITE_ZEROES free the range" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" $((2 * 1048576))
    start_server -t "$TEST_DIR/a.img"

    run nbdsh --base-allocation -u "$URI" -c "$STATUS_OF" -c '
M = 1 << 20
assert status_of(0, M) == 0
h.trim(M // 2, 0)
assert status_of(0, M // 2) == HZ
assert h.pread(M // 2, 0) == bytes(M // 2)
h.zero(M // 2, M)
assert status_of(M, M // 2) == HZ
# NO_HOLE must keep the blocks: count them, since block status cannot
# tell.  fallocate(ZERO_RANGE) leaves unwritten extents, and once the
# file has been written back SEEK_DATA calls those a hole (qemu-nbd
# reports them the same way).
import os
blocks = os.stat("'"$TEST_DIR/a.img"'").st_blocks
h.zero(M // 4, M + M // 2, nbd.CMD_FLAG_NO_HOLE)
h.flush()
assert os.stat("'"$TEST_DIR/a.img"'").st_blocks >= blocks
assert h.pread(M // 4, M + M // 2) == bytes(M // 4)
'
    assert_success
}

@test "--discard=ignore: TRIM leaves the data; WRITE_ZEROES zeroes but never deallocates" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" $((2 * 1048576))
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t --discard=ignore --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"

    run nbdsh --base-allocation -u "$URI" -c "$STATUS_OF" -c '
M = 1 << 20
data = open("'"$TEST_DIR/orig.img"'", "rb").read()
h.trim(M, 0)
h.trim(M, M, nbd.CMD_FLAG_FUA)
assert h.pread(2 * M, 0) == data                    # TRIM did nothing
h.zero(M // 2, 0)                                    # allowed to punch, but must not (du below)
assert h.pread(M // 2, 0) == bytes(M // 2)
'
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    cmp -i $((1048576 / 2)) "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    # the file kept its blocks
    [[ $(du -k "$TEST_DIR/a.img" | cut -f1) -ge 2000 ]]
    # no discard reached the file; FUA on an ignored TRIM flushes nothing:
    # the one file flush is the server's final one
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["nodes"][-1]["discards"]') -eq 0 ]]
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["file-flushes"]') -eq 1 ]]
}

@test "--detect-zeroes: off writes zeroes as data, on keeps them allocated, unmap punches" {
    require_tool nbdsh
    local mode want
    for mode in off on unmap; do
        make_pattern "$TEST_DIR/a.img" 1048576
        rm -f "$TEST_DIR/stats.json"
        start_server -t --detect-zeroes=$mode --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"
        run nbdsh --base-allocation -u "$URI" -c "$STATUS_OF" -c '
mode = "'"$mode"'"
import os
blocks = os.stat("'"$TEST_DIR/a.img"'").st_blocks
h.pwrite(bytes(65536), 65536)
h.pwrite(b"\x00" * 4095 + b"\x01", 0)                # not all zero: a plain write
assert h.pread(65536, 65536) == bytes(65536)
s = status_of(65536, 65536)
h.flush()
if mode == "unmap":
    assert s == HZ, (mode, s)
else:
    # kept allocated: counted in blocks, since block status calls the
    # unwritten extents of a written-back file a hole (see the first test)
    assert os.stat("'"$TEST_DIR/a.img"'").st_blocks >= blocks, mode
assert h.pread(4096, 0) == b"\x00" * 4095 + b"\x01"
'
        assert_success
        stop_server
        [[ $SERVER_STATUS -eq 0 ]]
        # the zero write became a write-zeroes except with off
        want=1
        [[ $mode == off ]] && want=0
        [[ $(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["nodes"][0]["zeroes"]') -eq $want ]]
        [[ $(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["nodes"][0]["writes"]') -eq $((2 - want)) ]]
        cmp -i 65536:0 -n 65536 "$TEST_DIR/a.img" /dev/zero
    done
}

@test "--detect-zeroes=unmap with --discard=ignore is refused at start-up" {
    truncate -s 1M "$TEST_DIR/a.img"
    run --separate-stderr "$DISKIMG" serve --detect-zeroes=unmap --discard=ignore -k "$SOCK" "$TEST_DIR/a.img"
    assert_failure
    [[ ! -e "$SOCK" ]]
    [[ -n "$stderr" ]]
}
