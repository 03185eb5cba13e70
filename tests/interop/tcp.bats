#!/usr/bin/env bats
# diskimg serve on TCP: 127.0.0.1 and [::1], random high ports.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

@test "TCP 127.0.0.1: qemu-io writes and reads, nbdinfo sees the export" {
    require_tool qemu-io nbdinfo
    truncate -s 2M "$TEST_DIR/a.img"
    start_server_tcp 127.0.0.1 -t "$TEST_DIR/a.img"
    [[ $URI == nbd://127.0.0.1:$PORT/ ]]

    run qemu-io -f raw "$URI" -c 'write -P 0x61 4096 64k' -c 'read -P 0x61 4096 64k'
    assert_success
    refute_output --partial "failed"
    run nbdinfo --size "$URI"
    assert_success
    assert_output 2097152
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    range_is "$TEST_DIR/a.img" 4096 65536 61
}

@test "TCP [::1]: nbdsh writes and reads, nbdinfo sees the export" {
    require_tool nbdsh nbdinfo
    truncate -s 2M "$TEST_DIR/a.img"
    start_server_tcp ::1 -t -x v6 "$TEST_DIR/a.img"
    [[ $URI == "nbd://[::1]:$PORT/" ]]

    run nbdsh -u "nbd://[::1]:$PORT/v6" -c '
h.pwrite(b"six" * 1000, 12345)
assert h.pread(3000, 12345) == b"six" * 1000
'
    assert_success
    run nbdinfo --size "nbd://[::1]:$PORT/v6"
    assert_success
    assert_output 2097152
    stop_server
    [[ $(bytes_at "$TEST_DIR/a.img" 12345 3) == 736978 ]]
}

@test "TCP: -b 127.0.0.1 listens on IPv4 loopback only" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    start_server_tcp 127.0.0.1 -t "$TEST_DIR/a.img"

    run nbdinfo --size "nbd://127.0.0.1:$PORT/"
    assert_success
    run nbdinfo --size "nbd://[::1]:$PORT/"
    assert_failure
}

@test "TCP: qemu-img convert in and out over 127.0.0.1, then cmp" {
    require_tool qemu-img
    make_pattern "$TEST_DIR/src.img" $((3 * 1048576))
    truncate -s 3M "$TEST_DIR/dst.img"
    start_server_tcp 127.0.0.1 -t "$TEST_DIR/dst.img"

    run qemu-img convert -n -f raw -O raw "$TEST_DIR/src.img" "$URI"
    assert_success
    run qemu-img convert -f raw -O raw "$URI" "$TEST_DIR/back.img"
    assert_success
    stop_server
    cmp "$TEST_DIR/src.img" "$TEST_DIR/dst.img"
    cmp "$TEST_DIR/src.img" "$TEST_DIR/back.img"
}

@test "TCP: the raw client is told EINVAL for an unknown command over [::1]" {
    truncate -s 1M "$TEST_DIR/a.img"
    start_server_tcp ::1 -t "$TEST_DIR/a.img"

    run py "$PORT" <<'EOF'
import sys
import nbdraw as n

c = n.connect(("::1", int(sys.argv[1])))
c.handshake(structured=True)
assert c.request(77).error == n.EINVAL
assert c.read(0, 4096).data == bytes(4096)
EOF
    assert_success
}

@test "TCP: a port already in use is an error (exit 1), not a hang" {
    truncate -s 1M "$TEST_DIR/a.img" "$TEST_DIR/b.img"
    start_server_tcp 127.0.0.1 -t "$TEST_DIR/a.img"

    # (another image: the first server's lock on a.img would refuse it first, exit 5)
    # (timeout: should it wrongly start serving, the test fails instead of hanging)
    run --separate-stderr timeout 20 "$DISKIMG" serve -b 127.0.0.1 -p "$PORT" "$TEST_DIR/b.img"
    assert_failure 1
    [[ "$stderr" == *"in use"* ]]
    # the first server is unaffected
    assert server_alive
}
