#!/usr/bin/env bats
# nbdcopy (libnbd) against diskimg serve: copies in and out, with one
# connection and with several (multi-conn), then cmp.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() {
    kill_extra_servers
    cleanup_test
}

# 3 MiB + 12345 bytes: data, a hole, data, unaligned tail.
make_source() {
    truncate -s $((3 * 1024 * 1024 + 12345)) "$1"
    make_pattern "$TEST_DIR/pat" 1048576
    dd if="$TEST_DIR/pat" of="$1" bs=4k count=64 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$1" bs=4k seek=512 count=128 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$1" bs=1 seek=$((3 * 1024 * 1024)) count=12345 conv=notrunc status=none
}

@test "nbdcopy file -> NBD, then cmp" {
    require_tool nbdcopy
    make_source "$TEST_DIR/src.img"
    make_pattern "$TEST_DIR/dst.img" $(stat -c %s "$TEST_DIR/src.img")
    start_server "$TEST_DIR/dst.img"

    run nbdcopy "$TEST_DIR/src.img" "$URI"
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    cmp "$TEST_DIR/src.img" "$TEST_DIR/dst.img"
}

@test "nbdcopy NBD -> file, then cmp" {
    require_tool nbdcopy
    make_source "$TEST_DIR/src.img"
    start_server "$TEST_DIR/src.img"

    # nbdcopy writes into an existing file of the right size.
    truncate -s $(stat -c %s "$TEST_DIR/src.img") "$TEST_DIR/out.img"
    run nbdcopy "$URI" "$TEST_DIR/out.img"
    assert_success
    cmp "$TEST_DIR/src.img" "$TEST_DIR/out.img"
}

@test "nbdcopy with 4 connections in and out (-e 0 advertises multi-conn)" {
    require_tool nbdcopy
    make_source "$TEST_DIR/src.img"
    make_pattern "$TEST_DIR/dst.img" $(stat -c %s "$TEST_DIR/src.img")
    start_server -t -e 0 --stats="$TEST_DIR/stats.json" "$TEST_DIR/dst.img"

    run nbdcopy -C 4 --request-size=65536 "$TEST_DIR/src.img" "$URI"
    assert_success
    truncate -s $(stat -c %s "$TEST_DIR/src.img") "$TEST_DIR/out.img"
    run nbdcopy -C 4 --request-size=65536 "$URI" "$TEST_DIR/out.img"
    assert_success
    stop_server
    cmp "$TEST_DIR/src.img" "$TEST_DIR/dst.img"
    cmp "$TEST_DIR/src.img" "$TEST_DIR/out.img"
    # nbdcopy really used several connections (it only does with multi-conn).
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["connections"]') -ge 4 ]]
}

@test "nbdcopy NBD -> NBD between two diskimg servers" {
    require_tool nbdcopy
    make_source "$TEST_DIR/src.img"
    truncate -s $(stat -c %s "$TEST_DIR/src.img") "$TEST_DIR/dst.img"
    start_server -r "$TEST_DIR/src.img"
    start_extra_server "$TEST_DIR/dst.sock" "$TEST_DIR/dst.img"

    run nbdcopy "$URI" "nbd+unix:///?socket=$TEST_DIR/dst.sock"
    assert_success
    # Neither server is persistent: both exit 0 when nbdcopy disconnects.
    wait_exit "$LAST_EXTRA_PID"
    [[ $EXIT_STATUS -eq 0 ]]
    wait_exit "$SERVER_PID"
    [[ $EXIT_STATUS -eq 0 ]]
    cmp "$TEST_DIR/src.img" "$TEST_DIR/dst.img"
}
