#!/usr/bin/env bats
# qemu-io (QEMU's NBD client) against diskimg serve: pattern writes, FUA
# writes, zeroes and discards, read back through the server and checked
# in the image file itself.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

@test "qemu-io: pattern writes read back, and land in the file" {
    require_tool qemu-io
    truncate -s 4M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run qemu-io -f raw "$URI" \
        -c 'write -P 0x11 0 64k' \
        -c 'write -P 0x22 1M 4k' \
        -c 'write -P 0x33 3000001 777' \
        -c 'write -P 0x44 4193792 512'
    assert_success
    run qemu-io -f raw "$URI" \
        -c 'read -P 0x11 0 64k' \
        -c 'read -P 0 64k 960k' \
        -c 'read -P 0x22 1M 4k' \
        -c 'read -P 0 3000000 1' \
        -c 'read -P 0x33 3000001 777' \
        -c 'read -P 0 3000778 1' \
        -c 'read -P 0x44 4193792 512'
    assert_success
    refute_output --partial "failed"

    stop_server
    # What the clients saw is what the file holds.
    [[ $(bytes_at "$TEST_DIR/a.img" 65534 4) == 11110000 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 1048576 2) == 2222 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 3000000 2) == 0033 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 3000777 2) == 3300 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 4194302 2) == 4444 ]]
    [[ $(stat -c %s "$TEST_DIR/a.img") -eq 4194304 ]]
}

@test "qemu-io: write -f sends FUA, plain writes do not (cache=writeback client)" {
    require_tool qemu-io
    truncate -s 1M "$TEST_DIR/a.img"
    start_server --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"

    # -t writeback: qemu-io's default (writethrough) would make every write FUA.
    run qemu-io -t writeback -f raw "$URI" \
        -c 'write -P 0x5a 0 64k' \
        -c 'write -f -P 0xa5 64k 64k' \
        -c 'write -f -P 0x3c 200000 3000' \
        -c 'read -P 0x5a 0 64k' \
        -c 'read -P 0xa5 64k 64k' \
        -c 'read -P 0x3c 200000 3000'
    assert_success
    refute_output --partial "failed"
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]

    [[ $(cmd_count "$TEST_DIR/stats.json" WRITE) -eq 3 ]]
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["fua-requests"]') -eq 2 ]]
    # Both FUA writes reached the file durably (native or write + flush).
    local fua
    fua=$(stats_get "$TEST_DIR/stats.json" \
        'd["exports"][0]["fua-native"] + d["exports"][0]["fua-emulated"]')
    [[ $fua -eq 2 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 131071 2) == a500 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 202999 2) == 3c00 ]]
}

@test "qemu-io: write zeroes, with and without unmap, and discard" {
    require_tool qemu-io
    make_pattern "$TEST_DIR/a.img" $((2 * 1024 * 1024))
    start_server -t "$TEST_DIR/a.img"

    run qemu-io -f raw "$URI" \
        -c 'write -z 0 64k' \
        -c 'write -z -u 128k 128k' \
        -c 'write -z 300000 5000' \
        -c 'discard 1M 512k' \
        -c 'write -P 0x66 1M 4k'
    assert_success
    run qemu-io -f raw "$URI" \
        -c 'read -P 0 0 64k' \
        -c 'read -P 0 128k 128k' \
        -c 'read -P 0 300000 5000' \
        -c 'read -P 0x66 1M 4k'
    assert_success
    refute_output --partial "failed"
    stop_server

    # Zeroes in the file, and the bytes around them untouched.
    cmp -n 65536 "$TEST_DIR/a.img" /dev/zero
    make_pattern "$TEST_DIR/orig.img" $((2 * 1024 * 1024))
    cmp -i 65536 -n 65536 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    [[ $(bytes_at "$TEST_DIR/a.img" 299999 1) == $(bytes_at "$TEST_DIR/orig.img" 299999 1) ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 305000 1) == $(bytes_at "$TEST_DIR/orig.img" 305000 1) ]]
    range_is "$TEST_DIR/a.img" 300000 5000 00
}

@test "qemu-io: aio writes in flight, then aio_flush, read back" {
    require_tool qemu-io
    truncate -s 2M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    local cmds=() i
    for i in $(seq 0 31); do
        cmds+=(-c "aio_write -P $((i + 1)) $((i * 65536)) 64k")
    done
    run qemu-io -t writeback -f raw "$URI" "${cmds[@]}" -c aio_flush
    assert_success
    cmds=()
    for i in $(seq 0 31); do
        cmds+=(-c "read -P $((i + 1)) $((i * 65536)) 64k")
    done
    run qemu-io -f raw "$URI" "${cmds[@]}"
    assert_success
    refute_output --partial "failed"
}

@test "qemu-io: unaligned export size, writes up to the last byte" {
    require_tool qemu-io
    truncate -s 1000001 "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run qemu-io -f raw "$URI" -c 'write -P 0x7e 999000 1001' -c 'write -P 0x7f 1000000 1'
    assert_success
    run qemu-io -f raw "$URI" -c 'read -P 0x7e 999000 1000' -c 'read -P 0x7f 1000000 1'
    assert_success
    refute_output --partial "failed"
    stop_server
    [[ $(stat -c %s "$TEST_DIR/a.img") -eq 1000001 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 999998 3) == 7e7e7f ]]
}

@test "qemu-io: one 4 MiB write and read, in a single request each" {
    require_tool qemu-io
    truncate -s 4M "$TEST_DIR/a.img"
    start_server -t --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"

    run qemu-io -f raw "$URI" -c 'write -P 0xc3 0 4M' -c 'read -P 0xc3 0 4M'
    assert_success
    refute_output --partial "failed"
    stop_server
    [[ $(cmd_count "$TEST_DIR/stats.json" WRITE) -eq 1 ]]
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["commands"]["NBD_CMD_WRITE"]["bytes"]') -eq 4194304 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 4194300 4) == c3c3c3c3 ]]
}
