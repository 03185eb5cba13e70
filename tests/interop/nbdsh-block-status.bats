#!/usr/bin/env bats
# nbdsh (libnbd's python shell) against diskimg serve: base:allocation
# block status, structured reads with holes, and many requests in flight.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# A 4 MiB file: hole [0, 1M), data [1M, 1M+256K), hole, data [3M, 3M+64K), hole.
make_sparse() {
    truncate -s 4M "$1"
    dd if=/dev/urandom of="$1" bs=64k seek=16 count=4 conv=notrunc status=none
    dd if=/dev/urandom of="$1" bs=64k seek=48 count=1 conv=notrunc status=none
}

@test "block status: written regions are data, holes are hole|zero" {
    require_tool nbdsh
    make_sparse "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh --base-allocation -u "$URI" -c '
assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
M = 1 << 20
got = []
def cb(ctx, off, entries, err):
    assert ctx == nbd.CONTEXT_BASE_ALLOCATION, ctx
    got.append((off, list(entries)))
    return 0
h.block_status(4 * M, 0, cb)
assert len(got) == 1, got
off, e = got[0]
assert off == 0
pairs = list(zip(e[0::2], e[1::2]))
HZ = nbd.STATE_HOLE | nbd.STATE_ZERO
assert pairs == [(M, HZ), (256 * 1024, 0), (M + 768 * 1024, HZ), (64 * 1024, 0), (M - 64 * 1024, HZ)], pairs

# A query inside the data run, and one inside a hole.
got.clear()
h.block_status(4096, M + 8192, cb)
assert got[0][1][1] == 0 and 0 < got[0][1][0] <= 256 * 1024 - 8192, got
got.clear()
h.block_status(4096, 2 * M, cb)
assert got[0][1][1] == HZ and got[0][1][0] >= 4096, got
'
    assert_success
}

@test "block status: a write turns a hole into data, TRIM and zeroing make it a hole again" {
    require_tool nbdsh
    truncate -s 2M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh --base-allocation -u "$URI" -c '
K = 1024
HZ = nbd.STATE_HOLE | nbd.STATE_ZERO
def status(off, n):
    got = []
    def cb(ctx, o, e, err):
        got.extend(zip(e[0::2], e[1::2]))
        return 0
    h.block_status(n, off, cb, nbd.CMD_FLAG_REQ_ONE)
    return got[0]
assert status(512 * K, 64 * K) == (64 * K, HZ), status(512 * K, 64 * K)
h.pwrite(b"\x5a" * 64 * K, 512 * K)
assert status(512 * K, 64 * K) == (64 * K, 0), status(512 * K, 64 * K)
h.trim(64 * K, 512 * K)
assert status(512 * K, 64 * K)[1] & nbd.STATE_HOLE
assert h.pread(64 * K, 512 * K) == bytes(64 * K)
h.pwrite(b"\x5a" * 64 * K, 512 * K)
h.zero(64 * K, 512 * K)
assert status(512 * K, 64 * K) == (64 * K, HZ), status(512 * K, 64 * K)
h.pwrite(b"\x5a" * 64 * K, 512 * K)
h.zero(64 * K, 512 * K, nbd.CMD_FLAG_NO_HOLE)
s = status(512 * K, 64 * K)
assert s[1] & nbd.STATE_ZERO or s[1] == 0, s
assert h.pread(64 * K, 512 * K) == bytes(64 * K)
'
    assert_success
}

@test "block status REQ_ONE: exactly one extent, no longer than asked" {
    require_tool nbdsh
    make_sparse "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh --base-allocation -u "$URI" -c '
M = 1 << 20
HZ = nbd.STATE_HOLE | nbd.STATE_ZERO
def one(count, off):
    got = []
    def cb(ctx, o, e, err):
        assert o == off, (o, off)
        got.append(list(e))
        return 0
    h.block_status(count, off, cb, nbd.CMD_FLAG_REQ_ONE)
    assert len(got) == 1 and len(got[0]) == 2, got
    assert 0 < got[0][0] <= count, (count, off, got)
    return tuple(got[0])
assert one(4 * M, 0) == (M, HZ)
assert one(100, 0) == (100, HZ)
assert one(4 * M - M, M) == (256 * 1024, 0)
assert one(100, M + 5) == (100, 0)
assert one(1, 4 * M - 1) == (1, HZ)
# Straddling the end of a data run: stops at the boundary.
assert one(M, M + 200 * 1024) == (56 * 1024, 0)
'
    assert_success
}

@test "block status: a request past the end of the export fails with EINVAL" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh --base-allocation -u "$URI" -c '
import errno
h.set_strict_mode(0)
def cb(ctx, o, e, err):
    return 0
for count, off in ((4096, 1 << 20), (8192, (1 << 20) - 4096)):
    try:
        h.block_status(count, off, cb)
        raise SystemExit("block status at %d+%d succeeded" % (off, count))
    except nbd.Error as e:
        assert e.errnum == errno.EINVAL, e
h.block_status(4096, 0, cb)  # still usable
'
    assert_success
}

@test "structured read: a hole comes back as READ_HOLE, data as READ_DATA" {
    require_tool nbdsh
    make_sparse "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
M = 1 << 20
assert h.get_structured_replies_negotiated()
data = open("'"$TEST_DIR/a.img"'", "rb").read()
chunks = []
def cb(sub, off, status, err):
    chunks.append((off, len(sub), status, bytes(sub)))
    return 0
buf = h.pread_structured(2 * M, 0, cb)
assert bytes(buf) == data[:2 * M]
kinds = [(o, n, s) for o, n, s, _ in sorted(chunks)]
assert kinds == [(0, M, nbd.READ_HOLE), (M, 256 * 1024, nbd.READ_DATA),
                 (M + 256 * 1024, 768 * 1024, nbd.READ_HOLE)], kinds
for o, n, s, b in chunks:
    if s == nbd.READ_DATA:
        assert b == data[o:o + n]
    else:
        assert b == bytes(n)
'
    assert_success
}

@test "structured read with DF: one data chunk covering everything" {
    require_tool nbdsh
    make_sparse "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
M = 1 << 20
assert h.can_df()
data = open("'"$TEST_DIR/a.img"'", "rb").read()
chunks = []
def cb(sub, off, status, err):
    chunks.append((off, len(sub), status))
    return 0
buf = h.pread_structured(2 * M, 512 * 1024, cb, nbd.CMD_FLAG_DF)
assert chunks == [(512 * 1024, 2 * M, nbd.READ_DATA)], chunks
assert bytes(buf) == data[512 * 1024:512 * 1024 + 2 * M]
'
    assert_success
}

@test "structured read: zeroes written as data are sent as holes too" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
K = 1024
h.pwrite(b"\x01" * 8 * K + bytes(64 * K) + b"\x02" * 8 * K, 0)
chunks = []
def cb(sub, off, status, err):
    chunks.append((off, len(sub), status))
    return 0
buf = h.pread_structured(80 * K, 0, cb)
assert bytes(buf) == b"\x01" * 8 * K + bytes(64 * K) + b"\x02" * 8 * K
assert (8 * K, 64 * K, nbd.READ_HOLE) in chunks, chunks
'
    assert_success
}

@test "64 writes and 64 reads in flight at once, all complete with the right data" {
    require_tool nbdsh
    truncate -s 4M "$TEST_DIR/a.img"
    start_server -t --threads=16 "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
import time
N, SZ = 64, 65536
def wait_all(cookies):
    # Retire each cookie once; a request that never completes fails
    # the test instead of hanging it.
    pending = set(cookies)
    deadline = time.monotonic() + 60
    while pending:
        for c in list(pending):
            if h.aio_command_completed(c):
                pending.discard(c)
        if pending:
            assert time.monotonic() < deadline, "%d requests never completed" % len(pending)
            h.poll(1000)
def block(i):
    return bytes([i + 1]) * (SZ // 2) + i.to_bytes(4, "big") * (SZ // 8)
cookies = [h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(block(i))), i * SZ)
           for i in range(N)]
assert h.aio_in_flight() > 1, h.aio_in_flight()
wait_all(cookies)
assert h.aio_in_flight() == 0
bufs = [nbd.Buffer(SZ) for _ in range(N)]
wait_all([h.aio_pread(bufs[i], i * SZ) for i in range(N)])
for i in range(N):
    assert bytes(bufs[i].to_bytearray()) == block(i), i
'
    assert_success
    stop_server
    # and the file agrees
    [[ $(bytes_at "$TEST_DIR/a.img" $((63 * 65536)) 1) == 40 ]]
    [[ $(bytes_at "$TEST_DIR/a.img" $((63 * 65536 + 32768)) 4) == 0000003f ]]
}

@test "requests in flight on four connections at once (-e 0)" {
    require_tool nbdsh
    truncate -s 4M "$TEST_DIR/a.img"
    start_server -t -e 0 "$TEST_DIR/a.img"

    run py "$URI" <<'EOF'
import sys
import time
import nbd

uri = sys.argv[1]
hs = []
for _ in range(4):
    h = nbd.NBD()
    h.connect_uri(uri)
    hs.append(h)
SZ = 16384
cookies = []
for j, h in enumerate(hs):
    for i in range(16):
        n = j * 16 + i
        buf = nbd.Buffer.from_bytearray(bytearray(bytes([n + 1]) * SZ))
        cookies.append((h, h.aio_pwrite(buf, n * SZ)))
deadline = time.monotonic() + 60
for h, c in cookies:
    while not h.aio_command_completed(c):
        assert time.monotonic() < deadline, "a request never completed"
        h.poll(1000)
for h in hs:
    h.flush()
# every connection sees every other connection's writes
for j, h in enumerate(hs):
    data = h.pread(64 * SZ, 0)
    for n in range(64):
        assert data[n * SZ:(n + 1) * SZ] == bytes([n + 1]) * SZ, (j, n)
for h in hs:
    h.shutdown()
EOF
    assert_success
}

@test "structured read and block status over 256 alternating data/hole runs" {
    require_tool nbdsh
    # 4 KiB of data every 8 KiB across 2 MiB: more runs than one read
    # reply has chunks for, and many extents.
    truncate -s 2M "$TEST_DIR/a.img"
    "$PYTHON3" -c 'import os, sys
with open(sys.argv[1], "r+b") as f:
    for i in range(256):
        f.seek(i * 8192)
        f.write(bytes([i % 255 + 1]) * 4096)' "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdsh --base-allocation -u "$URI" -c '
data = open("'"$TEST_DIR/a.img"'", "rb").read()
M = 1 << 20
for off, n in ((0, 2 * M), (1000, M + 777), (4096, 8192), (2 * M - 5000, 5000)):
    chunks = []
    def cb(sub, o, status, err):
        chunks.append((o, len(sub)))
        if status == nbd.READ_HOLE:
            assert bytes(sub) == bytes(len(sub))
        return 0
    buf = h.pread_structured(n, off, cb)
    assert bytes(buf) == data[off:off + n], (off, n)
    # the chunks tile the request exactly
    pos = off
    for o, l in sorted(chunks):
        assert o == pos, (off, n, chunks)
        pos += l
    assert pos == off + n
ext = []
def bs(ctx, o, e, err):
    ext.extend(zip(e[0::2], e[1::2]))
    return 0
h.block_status(2 * M, 0, bs)
HZ = nbd.STATE_HOLE | nbd.STATE_ZERO
assert len(ext) == 512 and sum(l for l, _ in ext) == 2 * M, (len(ext), ext[:4])
assert all(e == ((4096, 0) if i % 2 == 0 else (4096, HZ)) for i, e in enumerate(ext)), ext[:8]
'
    assert_success
}

@test "one worker per connection (--threads=1): 64 pipelined 256 KiB reads all complete" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" $((4 * 1048576))
    start_server -t --threads=1 "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
import time
data = open("'"$TEST_DIR/a.img"'", "rb").read()
SZ = 262144
bufs = [nbd.Buffer(SZ) for _ in range(64)]
offs = [(i * 65536) % (len(data) - SZ) for i in range(64)]
pending = {h.aio_pread(bufs[i], offs[i]): i for i in range(64)}
deadline = time.monotonic() + 60
while pending:
    for c in list(pending):
        if h.aio_command_completed(c):
            i = pending.pop(c)
            assert bytes(bufs[i].to_bytearray()) == data[offs[i]:offs[i] + SZ], i
    if pending:
        assert time.monotonic() < deadline, "%d reads never completed" % len(pending)
        h.poll(1000)
'
    assert_success
}
