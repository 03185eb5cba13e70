#!/usr/bin/env bats
# The statistics (stderr summary and --stats JSON) against what the
# clients actually did: per-command counts, errors and bytes, connections,
# handshake failures, and the final flush at exit.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

@test "stats: per-command counts, errors and bytes match the requests sent" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
h.set_strict_mode(0)
h.pwrite(b"w" * 1000, 0)
h.pwrite(b"w" * 24, 5000, nbd.CMD_FLAG_FUA)
for _ in range(3):
    h.pread(4096, 0)
try:
    h.pread(4096, 1 << 20)      # past the end: an error
except nbd.Error:
    pass
h.flush()
h.zero(4096, 8192)
h.trim(4096, 8192)
h.cache(4096, 0)
'
    assert_success
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
assert c.request(42).error == n.EINVAL
EOF
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]

    local st=$TEST_DIR/stats.json
    [[ $(cmd_count "$st" WRITE) -eq 2 ]]
    [[ $(stats_get "$st" 'd["commands"]["NBD_CMD_WRITE"]["bytes"]') -eq 1024 ]]
    [[ $(cmd_count "$st" READ) -eq 4 ]]
    [[ $(stats_get "$st" 'd["commands"]["NBD_CMD_READ"]["errors"]') -eq 1 ]]
    [[ $(stats_get "$st" 'd["commands"]["NBD_CMD_READ"]["bytes"]') -eq $((3 * 4096)) ]]
    [[ $(cmd_count "$st" FLUSH) -eq 1 ]]
    [[ $(cmd_count "$st" WRITE_ZEROES) -eq 1 ]]
    [[ $(cmd_count "$st" TRIM) -eq 1 ]]
    [[ $(cmd_count "$st" CACHE) -eq 1 ]]
    [[ $(stats_get "$st" 'd["commands"]["unknown"]["count"]') -eq 1 ]]
    [[ $(stats_get "$st" 'd["commands"]["unknown"]["errors"]') -eq 1 ]]
    [[ $(stats_get "$st" 'd["fua-requests"]') -eq 1 ]]
    [[ $(stats_get "$st" 'd["connections"]') -eq 2 ]]
    [[ $(stats_get "$st" 'd["handshake-failures"]') -eq 0 ]]
    # the summary on stderr says the same
    grep -Eq "NBD_CMD_READ +4 requests +1 errors +12288 bytes" "$SERVER_LOG"
    grep -Eq "NBD_CMD_WRITE +2 requests +0 errors +1024 bytes" "$SERVER_LOG"
}

@test "stats: the final flush at exit is counted (writeback), skipped (unsafe), absent (-r)" {
    require_tool nbdsh
    local mode
    for mode in writeback unsafe readonly; do
        truncate -s 1M "$TEST_DIR/a.img"
        rm -f "$TEST_DIR/stats.json"
        if [[ $mode == readonly ]]; then
            start_server -t -r --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"
            run nbdsh -u "$URI" -c 'h.pread(4096, 0)'
        else
            start_server -t --cache=$mode --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"
            # plain writes, no FLUSH from the client
            run nbdsh -u "$URI" -c 'h.pwrite(b"f" * 4096, 0); h.pwrite(b"g" * 4096, 8192)'
        fi
        assert_success
        stop_server TERM
        [[ $SERVER_STATUS -eq 0 ]]
        local flushes skipped
        flushes=$(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["file-flushes"]')
        skipped=$(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["flushes-skipped"]')
        echo "$mode: file-flushes $flushes skipped $skipped"
        case $mode in
            writeback) [[ $flushes -eq 1 && $skipped -eq 0 ]] ;;
            unsafe) [[ $flushes -eq 0 && $skipped -eq 1 ]] ;;
            readonly) [[ $flushes -eq 0 && $skipped -eq 0 ]] ;;
        esac
    done
}

@test "stats: a FLUSH with nothing written since the last one costs no fdatasync" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
h.pwrite(b"x" * 4096, 0)
for _ in range(5):
    h.flush()
'
    assert_success
    stop_server TERM
    local flushes shared
    flushes=$(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["file-flushes"]')
    shared=$(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["flushes-shared"]')
    # one fdatasync for the first FLUSH; the other four and the final
    # flush at exit had nothing new to sync
    [[ $flushes -eq 1 ]]
    [[ $shared -ge 4 ]]
}

@test "stats: 32 concurrent FUA write-zeroes: each one synced or covered by a sync" {
    require_tool nbdsh
    truncate -s 4M "$TEST_DIR/a.img"
    start_server -t --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
import time
cookies = [h.aio_zero(65536, i * 65536, flags=nbd.CMD_FLAG_FUA) for i in range(32)]
pending = set(cookies)
deadline = time.monotonic() + 60
while pending:
    for c in list(pending):
        if h.aio_command_completed(c):
            pending.discard(c)
    if pending:
        assert time.monotonic() < deadline
        h.poll(1000)
'
    assert_success
    stop_server TERM
    local st=$TEST_DIR/stats.json
    # FUA on write-zeroes is emulated: write, then a flush that either
    # syncs the file or finds its data already covered by another sync
    [[ $(stats_get "$st" 'd["exports"][0]["fua-emulated"]') -eq 32 ]]
    [[ $(stats_get "$st" 'd["exports"][0]["file-flushes"]') -ge 1 ]]
    # per node: the file node saw a flush for each emulated FUA (plus the final one)
    [[ $(stats_get "$st" 'd["exports"][0]["nodes"][-1]["flushes"] + d["exports"][0]["nodes"][-1]["flushes-shared"]') -eq 33 ]]
}

@test "stats: handshake failures count dropped clients, not listings that say goodbye" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t -e 0 --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"

    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1]); c.greeting(); c.send_client_flags(0x80)   # bad flags: dropped
assert c.is_closed()
c = n.connect(sys.argv[1]); c.greeting(); c.send_client_flags()
c.send_option(n.OPT_EXPORT_NAME, b"nosuch")                          # unknown export: dropped
assert c.is_closed()
EOF
    assert_success
    # diskimg-serve(1): a listing that ends with NBD_OPT_ABORT is not a
    # handshake failure.
    run nbdinfo --list "$URI"
    assert_success
    run nbdinfo --size "$URI"
    assert_success
    stop_server TERM
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["connections"]') -eq 4 ]]
    local failures
    failures=$(stats_get "$TEST_DIR/stats.json" 'd["handshake-failures"]')
    echo "handshake-failures: $failures"
    [[ $failures -eq 2 ]]
}
