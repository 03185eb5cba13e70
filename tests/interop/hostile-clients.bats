#!/usr/bin/env bats
# A raw-socket client (nbdraw.py) sends what real clients never do:
# unknown commands and flags, oversized requests, bad magics, unknown or
# absurd options, half handshakes, silence.  The server must answer with
# the right error and keep the stream in sync, or drop only that client.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# A 1 MiB image whose first bytes are known.
make_image() {
    make_pattern "$TEST_DIR/a.img" 1048576
}

@test "unknown command type: EINVAL, and the connection stays usable" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
for structured in (False, True):
    c = n.connect(sys.argv[1])
    c.handshake(structured=structured)
    for cmd in (42, 8, 0xFFFF):
        r = c.request(cmd, 0, 512)
        assert r.error == n.EINVAL, (structured, cmd, r)
        r = c.read(0, 512)
        assert r.error == 0 and r.data == data[:512], (structured, cmd, r)
    c.disconnect()
    c.close()
EOF
    assert_success
}

@test "a command flag that was not advertised, or is not valid for the command: EINVAL" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
# Without structured replies DF is not advertised: READ with DF is invalid.
c = n.connect(sys.argv[1])
c.handshake(structured=False)
assert not c.eflags & n.TFLAG_SEND_DF
r = c.read(0, 512, flags=n.CMD_FLAG_DF)
assert r.error == n.EINVAL, r
assert c.read(0, 512).data == data[:512]
c.close()

c = n.connect(sys.argv[1])
c.handshake(structured=True)
for cmd, flags in ((n.CMD_READ, 1 << 7), (n.CMD_READ, n.CMD_FLAG_NO_HOLE),
                   (n.CMD_FLUSH, n.CMD_FLAG_DF), (n.CMD_TRIM, n.CMD_FLAG_REQ_ONE),
                   (n.CMD_CACHE, 1 << 15), (n.CMD_WRITE_ZEROES, n.CMD_FLAG_DF)):
    r = c.request(cmd, 0, 512 if cmd != n.CMD_FLUSH else 0, flags)
    assert r.error == n.EINVAL, (cmd, flags, r)
# A WRITE with a bad flag: the payload is consumed, nothing is written.
r = c.request(n.CMD_WRITE, 0, 512, n.CMD_FLAG_REQ_ONE, b"\xee" * 512)
assert r.error == n.EINVAL, r
r = c.read(0, 512)
assert r.error == 0 and r.data == data[:512], r
# FUA is valid on any command once advertised.
assert c.eflags & n.TFLAG_SEND_FUA
assert c.read(0, 512, flags=n.CMD_FLAG_FUA).error == 0
c.close()
EOF
    assert_success
}

@test "WRITE over 32 MiB: EINVAL after the payload is consumed; the next request works" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
c = n.connect(sys.argv[1])
c.handshake(structured=True)
big = (64 << 20) + 4096
c.send_request(n.CMD_WRITE, 0, big, payload=b"\xaa" * big)
r = c.reply()
assert r.error == n.EINVAL, r
# Had the server not skipped the payload, these bytes would parse as garbage.
r = c.read(0, 4096)
assert r.error == 0 and r.data == data[:4096], r
c.close()
EOF
    assert_success
    # nothing of the refused write reached the file
    make_pattern "$TEST_DIR/orig.img" 1048576
    cmp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}

@test "READ over 32 MiB: EOVERFLOW; the next request works" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
for structured in (True, False):
    c = n.connect(sys.argv[1])
    c.handshake(structured=structured)
    r = c.read(0, (32 << 20) + 1)
    assert r.error == n.EOVERFLOW, r
    r = c.read(0, 100)
    assert r.error == 0 and r.data == data[:100], r
    c.close()
EOF
    assert_success
}

@test "a bad request magic closes that connection only" {
    make_image
    start_server -t -e 0 "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import struct
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
good = n.connect(sys.argv[1])
good.handshake(structured=True)
bad = n.connect(sys.argv[1])
bad.handshake(structured=True)
bad.send(struct.pack(">IHHQQI", 0x12345678, 0, n.CMD_READ, 1, 0, 512))
assert bad.is_closed(), "the server kept a connection with a bad magic"
r = good.read(0, 512)
assert r.error == 0 and r.data == data[:512], r
# and new clients are still served
third = n.connect(sys.argv[1])
third.handshake()
assert third.read(512, 512).data == data[512:1024]
EOF
    assert_success
}

@test "unknown options get NBD_REP_ERR_UNSUP and haggling continues" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags(n.FLAG_FIXED_NEWSTYLE)
for opt, payload in ((99, b""), (12345, b"some payload bytes"), (0x7FFFFFFF, b"x" * 1000)):
    rtype, _ = c.option(opt, payload)
    assert rtype == n.REP_ERR_UNSUP, (opt, hex(rtype))
# a known option still works afterwards, and so does the whole session
rtype, _ = c.option(n.OPT_STRUCTURED_REPLY)
assert rtype == n.REP_ACK
c.structured = True
rtype, listing = c.option(n.OPT_LIST)
assert rtype == n.REP_ACK and len(listing) == 1, (rtype, listing)
# INFO for an unknown export: ERR_UNKNOWN, no disconnect
assert c.go(b"nosuch", opt=n.OPT_INFO) == n.REP_ERR_UNKNOWN
assert c.go(b"nosuch") == n.REP_ERR_UNKNOWN
assert c.go(b"") == n.REP_ACK
assert c.size == 1048576
r = c.read(0, 64)
assert r.error == 0 and r.data == data[:64], r
EOF
    assert_success
}

@test "a huge option length claim drops that client only" {
    make_image
    start_server -t -e 0 "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
good = n.connect(sys.argv[1])
good.handshake()
bad = n.connect(sys.argv[1])
bad.greeting()
bad.send_client_flags(n.FLAG_FIXED_NEWSTYLE)
bad.send_option(n.OPT_GO, b"", claimed_len=0xFFFFFFF0)
assert bad.is_closed(), "server waited for 4 GiB of option data"
assert good.read(0, 256).data == data[:256]
other = n.connect(sys.argv[1])
other.handshake(structured=True)
assert other.read(0, 256).data == data[:256]
EOF
    assert_success
}

@test "clients vanishing mid-handshake or mid-request do not disturb another" {
    make_image
    start_server -t -e 0 "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import struct
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
good = n.connect(sys.argv[1])
good.handshake(structured=True)

# Gone before sending the client flags.
c = n.connect(sys.argv[1]); c.greeting(); c.close()
# Gone in the middle of an option header, and in the middle of its data.
c = n.connect(sys.argv[1]); c.greeting(); c.send_client_flags()
c.send(struct.pack(">QI", n.IHAVEOPT, n.OPT_GO)); c.close()
c = n.connect(sys.argv[1]); c.greeting(); c.send_client_flags()
c.send(struct.pack(">QII", n.IHAVEOPT, n.OPT_GO, 100) + b"\0" * 10); c.close()
# Gone in the middle of a request header, and of a write payload.
c = n.connect(sys.argv[1]); c.handshake(); c.send(b"\x25\x60\x95"); c.close()
c = n.connect(sys.argv[1]); c.handshake()
c.send(struct.pack(">IHHQQI", n.REQUEST_MAGIC, 0, n.CMD_WRITE, 1, 0, 65536) + b"\xff" * 1000)
c.close()
# Gone with requests in flight, without reading the replies.
c = n.connect(sys.argv[1]); c.handshake(structured=True)
for i in range(32):
    c.send_request(n.CMD_READ, 0, 65536)
c.close()

for i in range(4):
    r = good.read(i * 1024, 1024)
    assert r.error == 0 and r.data == data[i * 1024:(i + 1) * 1024], r
r = good.write(0, b"\x01" * 512)
assert r.error == 0, r
EOF
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    # The half-sent write wrote nothing; the good client's write is there.
    range_is "$TEST_DIR/a.img" 0 512 01
    make_pattern "$TEST_DIR/orig.img" 1048576
    cmp -i 512 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}

@test "a silent client is dropped after --handshake-limit, others are served meanwhile" {
    make_image
    start_server -t -e 0 --handshake-limit=1 "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
silent = n.connect(sys.argv[1])
silent.greeting()            # then says nothing at all
half = n.connect(sys.argv[1])
half.greeting()
half.send_client_flags()     # starts haggling, then stops
good = n.connect(sys.argv[1])
good.handshake()
assert good.read(0, 512).data == data[:512]
assert silent.is_closed(timeout=30), "silent client never dropped"
assert half.is_closed(timeout=30), "client stuck in haggling never dropped"
# The limit applies to the handshake only: an idle client in
# transmission is kept.
assert good.read(512, 512).data == data[512:1024]
EOF
    assert_success
    assert server_alive
}

@test "with one client slot (-e 1), a silent client loses it at the handshake limit" {
    require_tool nbdinfo
    make_image
    start_server -t -e 1 --handshake-limit=1 "$TEST_DIR/a.img"

    # The silent client holds the only slot; nbdinfo waits in the backlog
    # and is served once the server gives up on the silent one.
    "$PYTHON3" -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(60)
s.recv(18)
print("greeted", flush=True)
try:
    while s.recv(1):
        pass
except OSError:
    pass' "$SOCK" >"$TEST_DIR/silent.out" &
    local silent=$!
    # the silent client has the slot before nbdinfo asks for one
    wait_until 20 grep -q greeted "$TEST_DIR/silent.out"
    run nbdinfo --size "$URI"
    kill "$silent" 2>/dev/null || true
    wait "$silent" || true
    assert_success
    assert_output 1048576
}

@test "unknown client flags, a bad option magic: that client is dropped" {
    make_image
    start_server -t -e 0 "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import struct
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
c = n.connect(sys.argv[1]); c.greeting(); c.send_client_flags(0x80)
assert c.is_closed()
c = n.connect(sys.argv[1]); c.greeting(); c.send_client_flags()
c.send(struct.pack(">QII", 0x1122334455667788, n.OPT_GO, 0))
assert c.is_closed()
# EXPORT_NAME of an unknown export has no error reply: it must drop.
c = n.connect(sys.argv[1]); c.greeting(); c.send_client_flags()
c.send_option(n.OPT_EXPORT_NAME, b"nosuch")
assert c.is_closed()
# NBD_OPT_ABORT is acknowledged, then the server closes.
c = n.connect(sys.argv[1]); c.greeting(); c.send_client_flags()
c.send_option(n.OPT_ABORT)
opt, rtype, _ = c.option_reply()
assert (opt, rtype) == (n.OPT_ABORT, n.REP_ACK), (opt, rtype)
assert c.is_closed()
good = n.connect(sys.argv[1])
good.handshake()
assert good.read(0, 512).data == data[:512]
EOF
    assert_success
}

@test "oldstyle-compatible NBD_OPT_EXPORT_NAME works, with and without NO_ZEROES" {
    make_image
    start_server -t -e 0 "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import struct
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
for cflags, tail in ((n.FLAG_FIXED_NEWSTYLE, 124), (n.FLAG_FIXED_NEWSTYLE | n.FLAG_NO_ZEROES, 0)):
    c = n.connect(sys.argv[1])
    c.greeting()
    c.send_client_flags(cflags)
    c.send_option(n.OPT_EXPORT_NAME, b"")
    size, eflags = struct.unpack(">QH", c.recv_exact(10))
    assert size == 1048576 and eflags & 1, (size, eflags)
    assert c.recv_exact(tail) == bytes(tail)
    r = c.read(100, 100)
    assert r.error == 0 and r.data == data[100:200], r
    c.close()
EOF
    assert_success
}

@test "replies carry the request's cookie, also out of order under load" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
c = n.connect(sys.argv[1])
c.handshake(structured=True)
want = {}
for i in range(64):
    cookie = 0xDEAD000000000000 + i * 7919
    off = (i * 12289) % (1048576 - 4096)
    c.send_request(n.CMD_READ, off, 4096, cookie=cookie)
    want[cookie] = off
for _ in range(64):
    r = c.reply()
    assert r.cookie in want, hex(r.cookie)
    assert r.error == 0 and r.data == data[want[r.cookie]:want[r.cookie] + 4096]
    del want[r.cookie]
assert not want
EOF
    assert_success
}

@test "requests split into single bytes, or many coalesced into one send, parse the same" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF2'
import struct
import sys
import nbdraw as n

orig = open(sys.argv[2], "rb").read()
data = bytearray(orig)
c = n.connect(sys.argv[1])
c.handshake(structured=True)

def req(cmd, off, count, payload=b"", cookie=1, flags=0):
    c.pending[cookie] = (cmd, off, count)
    return struct.pack(">IHHQQI", n.REQUEST_MAGIC, flags, cmd, cookie, off, count) + payload

# One small write, a byte per send().
msg = req(n.CMD_WRITE, 1000, 100, b"\x61" * 100, cookie=1)
for i in range(len(msg)):
    c.send(msg[i:i + 1])
assert c.reply().error == 0
data[1000:1100] = b"\x61" * 100

# Many requests in one send(): small and large writes (a large payload is
# read straight into the request's buffer), reads, a flush.
big = bytes(range(256)) * 400          # 102400 bytes
blob = (req(n.CMD_WRITE, 4096, 3, b"abc", cookie=10)
        + req(n.CMD_WRITE, 200000, len(big), big, cookie=11)
        + req(n.CMD_READ, 4096, 3, cookie=12)
        + req(n.CMD_FLUSH, 0, 0, cookie=13)
        + req(n.CMD_WRITE, 7, 5, b"12345", cookie=14)
        + req(42, 0, 0, cookie=15)
        + req(n.CMD_WRITE, 500000, 70000, b"\x77" * 70000, cookie=16))
c.send(blob)
data[4096:4099] = b"abc"
data[200000:200000 + len(big)] = big
data[7:12] = b"12345"
data[500000:570000] = b"\x77" * 70000
got = {}
for _ in range(7):
    r = c.reply()
    got[r.cookie] = r
assert sorted(got) == [10, 11, 12, 13, 14, 15, 16], sorted(got)
assert got[15].error == n.EINVAL
for k in (10, 11, 13, 14, 16):
    assert got[k].error == 0, got[k]
# the read ran concurrently with the writes: it saw old or new bytes
assert got[12].data in (b"abc", orig[4096:4099]), got[12]
r = c.read(0, 1048576)
assert r.error == 0 and r.data == bytes(data), "image differs from what was written"
EOF2
    assert_success
}

@test "BLOCK_STATUS without a negotiated metadata context: EINVAL, connection kept" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" <<'EOF2'
import struct
import sys
import nbdraw as n

# structured replies but no SET_META_CONTEXT
c = n.connect(sys.argv[1])
c.handshake(structured=True)
assert c.request(n.CMD_BLOCK_STATUS, 0, 4096).error == n.EINVAL
assert c.read(0, 16).error == 0
c.close()

# SET_META_CONTEXT before STRUCTURED_REPLY is invalid
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
q = b"base:allocation"
meta = struct.pack(">I", 0) + struct.pack(">I", 1) + struct.pack(">I", len(q)) + q
rtype, _ = c.option(n.OPT_SET_META_CONTEXT, meta)
assert rtype == n.REP_ERR_INVALID, hex(rtype)
c.close()

# with the context: works; zero length and past-the-end are EINVAL
c = n.connect(sys.argv[1])
c.handshake(meta=True)
r = c.request(n.CMD_BLOCK_STATUS, 0, 4096)
assert r.error == 0 and r.chunks[0][0] == n.REPLY_TYPE_BLOCK_STATUS, r
assert c.request(n.CMD_BLOCK_STATUS, 0, 0).error == n.EINVAL
assert c.request(n.CMD_BLOCK_STATUS, 1048576, 4096).error == n.EINVAL
assert c.read(0, 16).error == 0
EOF2
    assert_success
}

@test "metadata contexts: LIST shows base:allocation, SET for an unknown export is refused" {
    make_image
    start_server -t -x disk "$TEST_DIR/a.img"

    run py "$SOCK" <<'EOF2'
import struct
import sys
import nbdraw as n

def meta_for(name):
    q = b"base:allocation"
    return (struct.pack(">I", len(name)) + name + struct.pack(">I", 1)
            + struct.pack(">I", len(q)) + q)

c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
assert c.option(n.OPT_STRUCTURED_REPLY)[0] == n.REP_ACK
c.structured = True
# LIST_META_CONTEXT with no queries lists base:allocation
rtype, replies = c.option(n.OPT_LIST_META_CONTEXT, struct.pack(">I", 4) + b"disk" + struct.pack(">I", 0))
assert rtype == n.REP_ACK and any(b"base:allocation" in d for _, d in replies), (rtype, replies)
# unknown export: ERR_UNKNOWN
assert c.option(n.OPT_SET_META_CONTEXT, meta_for(b"other"))[0] == n.REP_ERR_UNKNOWN
rtype, replies = c.option(n.OPT_SET_META_CONTEXT, meta_for(b"disk"))
assert rtype == n.REP_ACK and len(replies) == 1, (rtype, replies)
assert c.go(b"disk") == n.REP_ACK
r = c.request(n.CMD_BLOCK_STATUS, 0, 4096)
assert r.error == 0, r
EOF2
    assert_success
}

@test "malformed known options get an error reply and haggling continues" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF2'
import struct
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
cases = [
    (n.OPT_LIST, b"unexpected"),                              # LIST takes no data
    (n.OPT_STRUCTURED_REPLY, b"x"),                           # neither does this
    (n.OPT_GO, b"\x00\x00"),                                  # too short
    (n.OPT_GO, struct.pack(">I", 100) + b"ab" + b"\0\0"),     # name overruns the option
    (n.OPT_GO, struct.pack(">I", 0) + struct.pack(">H", 5)),  # 5 info requests, none sent
    (n.OPT_INFO, struct.pack(">I", 3) + b"a\0b" + b"\0\0"),   # NUL inside the name
]
for opt, payload in cases:
    rtype, _ = c.option(opt, payload)
    assert rtype == n.REP_ERR_INVALID, (opt, payload, hex(rtype))
# no TLS on this server: STARTTLS is refused by policy (or as unsupported)
rtype, _ = c.option(n.OPT_STARTTLS)
assert rtype in (n.REP_ERR_POLICY, n.REP_ERR_UNSUP), hex(rtype)
# INFO then GO give the same answer
assert c.go(b"", opt=n.OPT_INFO) == n.REP_ACK
info = (c.size, c.eflags)
assert c.go(b"") == n.REP_ACK
assert (c.size, c.eflags) == info == (1048576, info[1])
r = c.read(4096, 64)
assert r.error == 0 and r.data == data[4096:4160], r
EOF2
    assert_success
}

@test "NBD_CMD_DISC: requests sent before it are all answered, then the server closes" {
    make_image
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF2'
import struct
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
c = n.connect(sys.argv[1])
c.handshake(structured=True)
blob = b""
for i in range(16):
    c.pending[i + 1] = (n.CMD_READ, i * 4096, 4096)
    blob += struct.pack(">IHHQQI", n.REQUEST_MAGIC, 0, n.CMD_READ, i + 1, i * 4096, 4096)
blob += struct.pack(">IHHQQI", n.REQUEST_MAGIC, 0, n.CMD_DISC, 99, 0, 0)
c.send(blob)
seen = set()
for _ in range(16):
    r = c.reply()
    assert r.error == 0 and r.data == data[(r.cookie - 1) * 4096:r.cookie * 4096], r
    seen.add(r.cookie)
assert seen == set(range(1, 17))
assert c.is_closed(), "connection still open after NBD_CMD_DISC"
EOF2
    assert_success
}

@test "a failed request is logged once: connection, command, range, error and the reason" {
    require_tool qemu-img qemu-io
    make_image
    start_server -t -r "$TEST_DIR/a.img"
    run py "$SOCK" <<'EOF2'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake(structured=True)
r = c.write(4096, b"\x01" * 512)
assert r.error == n.EPERM, r
assert c.read(0, 512).error == 0
EOF2
    assert_success
    stop_server
    grep -q "conn 1: warning: unix socket: NBD_CMD_WRITE 4096+512 failed with EPERM: the export is read-only$" "$SERVER_LOG"
    [[ $(grep -c "failed with" "$SERVER_LOG") -eq 1 ]]

    # a reason the block layer recorded: a qcow2 L2 entry past the end of the file
    qemu-img create -q -f qcow2 "$TEST_DIR/c.qcow2" 1M
    qemu-io -c 'write -P 0x11 0 64k' "$TEST_DIR/c.qcow2" >/dev/null
    "$PYTHON3" -c 'import struct, sys
f = open(sys.argv[1], "r+b")
f.seek(40)
l1 = struct.unpack(">Q", f.read(8))[0]
f.seek(l1)
l2 = struct.unpack(">Q", f.read(8))[0] & 0x00fffffffffffe00
f.seek(l2)
f.write(struct.pack(">Q", (1 << 63) | 0x10000000))' "$TEST_DIR/c.qcow2"
    : >"$SERVER_LOG"
    start_server -t "$TEST_DIR/c.qcow2"
    run py "$SOCK" <<'EOF2'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake(structured=True)
r = c.read(0, 4096)
assert r.error == n.EIO, r
assert b"past the end of the file" in r.message, r
EOF2
    assert_success
    grep -q "error: unix socket: NBD_CMD_READ 0+4096 failed with EIO: qcow2: .*c.qcow2: L2 entry for guest offset 0x0 points past the end of the file" "$SERVER_LOG"
}

@test "a client sending bad requests in a loop cannot flood the log: 20 lines, then one a second" {
    make_image
    start_server -t "$TEST_DIR/a.img"
    run py "$SOCK" <<'EOF2'
import sys, time
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake(structured=True)
t0 = time.monotonic()
for i in range(500):
    assert c.request(42, 0, 512).error == n.EINVAL
print("elapsed %d" % int(time.monotonic() - t0 + 1))
time.sleep(1.5)
assert c.request(42, 0, 512).error == n.EINVAL
EOF2
    assert_success
    local elapsed=${output#elapsed }
    stop_server
    local lines
    lines=$(grep -c "failed with EINVAL: unknown command 42" "$SERVER_LOG")
    echo "$lines lines in $elapsed s" >&2
    [[ $lines -ge 21 && $lines -le $((20 + elapsed + 2)) ]]
    grep -q "unix socket: command 42 0+512 failed with EINVAL: unknown command 42 ([0-9]* more failed requests were not logged)$" "$SERVER_LOG"
}

@test "an export name with control characters is logged escaped, never as it is" {
    make_image
    start_server -t -e 0 "$TEST_DIR/a.img"
    run py "$SOCK" <<'EOF2'
import sys
import nbdraw as n
evil = b"\x1b[31mred\r\nforged: line\xff"
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
assert c.go(evil) == n.REP_ERR_UNKNOWN
c.send_option(n.OPT_EXPORT_NAME, evil)
assert c.is_closed()
EOF2
    assert_success
    stop_server
    cat "$SERVER_LOG" >&2
    grep -qF "dropped during the handshake: NBD_OPT_EXPORT_NAME: export '\x1b[31mred\x0d\x0aforged: line\xff' not found" "$SERVER_LOG"
    ! grep -q $'\x1b' "$SERVER_LOG"
    ! grep -q $'\r' "$SERVER_LOG"
    ! grep -q "^forged" "$SERVER_LOG"
}
