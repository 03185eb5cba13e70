#!/usr/bin/env bats
# nbdsh against diskimg serve: the errno of each kind of bad request, the
# edge cases that must succeed (zero lengths), and the commands besides
# READ and WRITE (WRITE_ZEROES, FAST_ZERO, TRIM, FLUSH, CACHE).
#
# libnbd checks bounds and flags itself by default; set_strict_mode(0)
# makes it send the request so that the server has to answer.
# Note: in libnbd's python, nbd.Error.errnum is the number, .errno the name.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# Python prelude for nbdsh -c: expect_errno(errno, fn, *args).
PRELUDE='
import errno
h.set_strict_mode(0)
def expect_errno(want, fn, *args):
    try:
        fn(*args)
    except nbd.Error as e:
        assert e.errnum == want, "%s%r: got %s (%s), want %s" % (
            fn.__name__, args[1:], e.errno, e.string, errno.errorcode[want])
        return
    raise AssertionError("%s%r succeeded, want %s" % (fn.__name__, args[1:], errno.errorcode[want]))
'

@test "write past the end: ENOSPC, nothing written, connection still usable" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c "$PRELUDE" -c '
M = 1 << 20
expect_errno(errno.ENOSPC, h.pwrite, b"x" * 512, M)
expect_errno(errno.ENOSPC, h.pwrite, b"x" * 512, M - 100)      # straddles the end
expect_errno(errno.ENOSPC, h.pwrite, b"x" * 512, 1 << 40)
expect_errno(errno.ENOSPC, h.pwrite, b"x" * 4096, 2**64 - 4096)  # offset + count wraps
expect_errno(errno.ENOSPC, h.zero, 512, M)
expect_errno(errno.ENOSPC, h.zero, 8192, M - 4096)
h.pwrite(b"y" * 100, M - 100)                                     # exactly up to the end is fine
assert h.pread(100, M - 100) == b"y" * 100
'
    assert_success
    stop_server
    # The refused straddling writes changed nothing before the end.
    cmp -n $((1048576 - 100)) "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    [[ $(stat -c %s "$TEST_DIR/a.img") -eq 1048576 ]]
}

@test "read, trim, cache past the end: EINVAL" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c "$PRELUDE" -c '
M = 1 << 20
expect_errno(errno.EINVAL, h.pread, 512, M)
expect_errno(errno.EINVAL, h.pread, 512, M - 511)
expect_errno(errno.EINVAL, h.pread, 4096, 2**64 - 4096)
expect_errno(errno.EINVAL, h.trim, 512, M)
expect_errno(errno.EINVAL, h.trim, 4096, M - 4095)
expect_errno(errno.EINVAL, h.cache, 512, M)
assert h.pread(512, M - 512) == bytes(512)
'
    assert_success
}

@test "read-only export (-r): writes, trims and zeroes fail EPERM, reads work" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t -r "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c "$PRELUDE" -c '
assert h.is_read_only()
data = open("'"$TEST_DIR/orig.img"'", "rb").read()
expect_errno(errno.EPERM, h.pwrite, b"x" * 4096, 0)
expect_errno(errno.EPERM, h.pwrite, b"x" * 4096, 4096, nbd.CMD_FLAG_FUA)
expect_errno(errno.EPERM, h.trim, 4096, 0)
expect_errno(errno.EPERM, h.zero, 4096, 0)
assert h.pread(8192, 0) == data[:8192]
h.flush()
h.cache(4096, 0)
'
    assert_success
    stop_server
    cmp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}

@test "zero-length read and write succeed and keep the connection" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t -e 0 "$TEST_DIR/a.img"

    # A fresh connection for each: the first request of a connection is
    # the interesting one (no buffers allocated yet).
    run nbdsh -u "$URI" -c "$PRELUDE" -c '
assert h.pread(0, 0) == b""
assert h.pread(512, 0) == bytes(512)
'
    assert_success
    run nbdsh -u "$URI" -c "$PRELUDE" -c '
h.pwrite(b"", 4096)
h.pwrite(b"", 1 << 20)          # zero bytes at the very end
h.pwrite(b"z" * 512, 0)
assert h.pread(0, 1 << 20) == b""
assert h.pread(512, 0) == b"z" * 512
'
    assert_success
}

@test "zero-length trim and write zeroes succeed" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" 65536
    start_server -t "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c "$PRELUDE" -c '
before = h.pread(4096, 0)
h.trim(0, 0)
h.zero(0, 0)
h.zero(0, 0, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(4096, 0) == before
'
    assert_success
}

@test "WRITE_ZEROES with and without NO_HOLE, with FUA: reads back zero" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c "$PRELUDE" -c '
K = 1024
assert h.can_zero()
h.zero(64 * K, 0)
h.zero(64 * K, 128 * K, nbd.CMD_FLAG_NO_HOLE)
h.zero(5000, 300001)                               # unaligned
h.zero(4096, 512 * K, nbd.CMD_FLAG_FUA | nbd.CMD_FLAG_NO_HOLE)
for off, n in ((0, 64 * K), (128 * K, 64 * K), (300001, 5000), (512 * K, 4096)):
    assert h.pread(n, off) == bytes(n), (off, n)
'
    assert_success
    stop_server
    cmp -n 65536 "$TEST_DIR/a.img" /dev/zero
    cmp -i 131072:0 -n 65536 "$TEST_DIR/a.img" /dev/zero
    # The bytes next to the unaligned range are untouched.
    [[ $(bytes_at "$TEST_DIR/a.img" 300000 1) == $(bytes_at "$TEST_DIR/orig.img" 300000 1) ]]
    [[ $(bytes_at "$TEST_DIR/a.img" 305001 1) == $(bytes_at "$TEST_DIR/orig.img" 305001 1) ]]
    cmp -i 65536 -n 65536 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}

@test "FAST_ZERO is advertised and allowed; the range reads back zero" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server -t "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c "$PRELUDE" -c '
K = 1024
assert h.can_fast_zero()
try:
    h.zero(256 * K, 256 * K, nbd.CMD_FLAG_FAST_ZERO)
except nbd.Error as e:
    # The only failure FAST_ZERO allows is ENOTSUP, with the data left alone.
    assert e.errnum == errno.ENOTSUP, e
    raise SystemExit("FAST_ZERO refused on a file system that can punch holes")
assert h.pread(256 * K, 256 * K) == bytes(256 * K)
h.pwrite(b"after" * 100, 256 * K)
assert h.pread(500, 256 * K) == b"after" * 100
'
    assert_success
}

@test "TRIM then write: the new data reads back; trimmed space is freed" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" $((2 * 1048576))
    start_server -t "$TEST_DIR/a.img"

    local before
    before=$(du -k "$TEST_DIR/a.img" | cut -f1)
    run nbdsh -u "$URI" -c "$PRELUDE" -c '
M = 1 << 20
assert h.can_trim()
h.trim(M, 0)
h.trim(M, M, nbd.CMD_FLAG_FUA)
h.pwrite(b"\xab" * 4096, 8192)
assert h.pread(4096, 8192) == b"\xab" * 4096
'
    assert_success
    stop_server
    [[ $(bytes_at "$TEST_DIR/a.img" 8192 4) == abababab ]]
    # --discard=unmap (the default) punches holes.
    [[ $(du -k "$TEST_DIR/a.img" | cut -f1) -lt $((before / 2)) ]]
}

@test "FLUSH, FLUSH with FUA, and CACHE succeed and change nothing" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c "$PRELUDE" -c '
assert h.can_flush() and h.can_cache()
h.flush()
h.flush(nbd.CMD_FLAG_FUA)
h.cache(1 << 20, 0)
h.cache(12345, 4097)
h.cache(0, 0)
data = open("'"$TEST_DIR/orig.img"'", "rb").read()
assert h.pread(1 << 20, 0) == data
'
    assert_success
    stop_server
    cmp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    [[ $(cmd_count "$TEST_DIR/stats.json" FLUSH) -eq 2 ]]
    [[ $(cmd_count "$TEST_DIR/stats.json" CACHE) -eq 3 ]]
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["commands"]["NBD_CMD_CACHE"]["errors"]') -eq 0 ]]
}

@test "errors do not end the connection: many bad requests, then good ones" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c "$PRELUDE" -c '
for i in range(50):
    expect_errno(errno.ENOSPC, h.pwrite, b"q" * 4096, (1 << 20) + i)
    expect_errno(errno.EINVAL, h.pread, 4096, (1 << 20) + i)
h.pwrite(b"ok" * 2048, 0)
assert h.pread(4096, 0) == b"ok" * 2048
'
    assert_success
}

@test "TRIM, WRITE_ZEROES, CACHE and BLOCK_STATUS over 32 MiB (no payload) are fine" {
    require_tool nbdsh
    truncate -s 128M "$TEST_DIR/a.img"
    printf 'head' | dd of="$TEST_DIR/a.img" conv=notrunc status=none
    printf 'tail' | dd of="$TEST_DIR/a.img" bs=1 seek=$((128 * 1048576 - 4)) conv=notrunc status=none
    start_server -t "$TEST_DIR/a.img"

    run nbdsh --base-allocation -u "$URI" -c "$PRELUDE" -c '
M = 1 << 20
h.cache(100 * M, 4 * M)
h.trim(100 * M, 4 * M)
h.zero(100 * M, 8 * M)
got = []
def cb(ctx, o, e, err):
    got.extend(e)
    return 0
h.block_status(120 * M, 4 * M, cb)
assert sum(got[0::2]) >= 1, got
assert h.pread(4, 0) == b"head" and h.pread(4, 128 * M - 4) == b"tail"
assert h.pread(4096, 50 * M) == bytes(4096)
'
    assert_success
}
