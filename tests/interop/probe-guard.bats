#!/usr/bin/env bats
# The guard of a probed raw image: a client must not turn its raw disk
# into another format (a qcow2 header naming a host file as its backing
# file, say) that the next probe would follow.  Pipelined and concurrent
# small writes, zero writes and trims into the first sector are each
# checked against what they would leave, one at a time; afterwards the
# file still probes as raw and the server still serves.

load '../helpers'
load 'lib'

setup() {
    setup_test
    truncate -s 1M "$TEST_DIR/disk.img"
}

teardown() { cleanup_test; }

# The file must still probe as raw, for qemu-img and for us (-U: the
# server may still hold it).
assert_still_raw() {
    run qemu-img info -U --output=json "$TEST_DIR/disk.img"
    assert_success
    assert_output --partial '"format": "raw"'
    run "$DISKIMG" info -U "$TEST_DIR/disk.img"
    assert_success
    assert_line "file format: raw"
}

@test "serve warns at start-up when the format was probed as raw, not with -f raw" {
    start_server -t "$TEST_DIR/disk.img"
    run cat "$SERVER_LOG"
    assert_output --partial "format not given and probed as raw"
    assert_output --partial "-f raw"
    stop_server
    : >"$SERVER_LOG"
    start_server -t -f raw "$TEST_DIR/disk.img"
    run cat "$SERVER_LOG"
    refute_output --partial "probed as raw"
}

@test "pipelined writes that together form a qcow2 header are refused" {
    require_tool qemu-img
    qemu-img create -q -f qcow2 -b /etc/passwd -F raw "$TEST_DIR/evil.qcow2" 1M
    start_server -t "$TEST_DIR/disk.img"

    run py "$SOCK" "$TEST_DIR/evil.qcow2" <<'EOF'
import sys
import nbdraw as n

header = open(sys.argv[2], "rb").read()[:512]
c = n.connect(sys.argv[1])
c.handshake()
# The whole first sector in 4-byte pieces, all in flight at once, many
# times over (a zero sector in between): the magic and the version are
# harmless alone, a qcow2 header together.
refused = 0
for rnd in range(200):
    c.send_request(n.CMD_WRITE, 0, 512, payload=bytes(512))
    for off in range(0, 512, 4):
        c.send_request(n.CMD_WRITE, off, 4, payload=header[off:off + 4])
    for _ in range(1 + 512 // 4):
        r = c.reply()
        assert r.error in (0, n.EPERM), r
        refused += r.error == n.EPERM
    first = c.read(0, 8).data
    assert not (first[:4] == b"QFI\xfb" and int.from_bytes(first[4:8], "big") >= 2), \
        "round %d: the sector became a qcow2 header" % rnd
# (Requests may run in any order, so a round need not refuse anything.)
assert refused > 0, refused
c.disconnect()
c.close()
EOF
    assert_success
    server_alive
    assert_still_raw
    run nbdinfo --size "$URI"
    assert_output 1048576
}

@test "concurrent writers on several connections cannot assemble a header" {
    require_tool qemu-img
    start_server -t -e 8 "$TEST_DIR/disk.img"

    # Each round: a zero sector, then the qcow2 magic on one connection
    # and version 3 on another, sent at once; each is harmless alone.
    # (Before the guard held its lock across the write, 1-10% of the
    # rounds ended as a qcow2 header on a loaded 2-CPU machine.)
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n

c1 = n.connect(sys.argv[1])
c1.handshake()
c2 = n.connect(sys.argv[1])
c2.handshake()
refused = 0
for rnd in range(4000):
    assert c1.write(0, bytes(8)).error == 0
    c1.send_request(n.CMD_WRITE, 0, 4, payload=b"QFI\xfb")
    c2.send_request(n.CMD_WRITE, 4, 4, payload=b"\0\0\0\x03")
    for c in (c1, c2):
        r = c.reply()
        assert r.error in (0, n.EPERM), r
        refused += r.error == n.EPERM
    first = c1.read(0, 8).data
    assert first != b"QFI\xfb\0\0\0\x03", "round %d: the sector became a qcow2 header" % rnd
assert refused == 4000, refused
for c in (c1, c2):
    c.disconnect()
    c.close()
EOF
    assert_success
    server_alive
    assert_still_raw
}

@test "a zero write or a trim that would complete a header is refused" {
    require_tool qemu-img
    start_server -t "$TEST_DIR/disk.img"

    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n

c = n.connect(sys.argv[1])
c.handshake()
assert c.eflags & n.TFLAG_SEND_WRITE_ZEROES and c.eflags & n.TFLAG_SEND_TRIM
# A bochs header whose magic runs one byte too long ('X' where its NUL
# belongs): raw.  Zeroing that byte would make it a bochs image.
sector = bytearray(512)
sector[0:23] = b"Bochs Virtual HD ImageX"
sector[32:40] = b"Redolog\0"
sector[48:56] = b"Growing\0"
sector[64:68] = (0x00020000).to_bytes(4, "little")
r = c.write(0, bytes(sector))
assert r.error == 0, r
r = c.request(n.CMD_WRITE_ZEROES, 22, 1)
assert r.error == n.EPERM, r
r = c.request(n.CMD_TRIM, 0, 4096)
assert r.error == 0, r  # all zeroes: raw
r = c.write(0, bytes(sector))
assert r.error == 0, r
r = c.request(n.CMD_TRIM, 22, 1)
assert r.error == n.EPERM, r
assert c.read(0, 512).data == bytes(sector)
# A zero write elsewhere in the sector is fine.
r = c.request(n.CMD_WRITE_ZEROES, 100, 8)
assert r.error == 0, r
c.disconnect()
c.close()
EOF
    assert_success
    assert_still_raw
}

@test "a refused write reaches the client as EPERM and the server's log with the reason" {
    require_tool qemu-img
    qemu-img create -q -f qcow2 "$TEST_DIR/q.qcow2" 1M
    start_server -t "$TEST_DIR/disk.img"
    run py "$SOCK" "$TEST_DIR/q.qcow2" <<'EOF'
import sys
import nbdraw as n

c = n.connect(sys.argv[1])
c.handshake()
r = c.write(0, open(sys.argv[2], "rb").read()[:512])
assert r.error == n.EPERM, r
c.disconnect()
c.close()
EOF
    assert_success
    grep -q "NBD_CMD_WRITE 0+512 failed with EPERM: .*disk.img: refusing a write that would make this probed raw image look like qcow2 (name the format raw explicitly to allow it)" "$SERVER_LOG"
    assert_still_raw
}

@test "with -f raw the client may write any header" {
    require_tool qemu-img
    qemu-img create -q -f qcow2 "$TEST_DIR/q.qcow2" 1M
    start_server -t -f raw "$TEST_DIR/disk.img"
    run py "$SOCK" "$TEST_DIR/q.qcow2" <<'EOF'
import sys
import nbdraw as n

c = n.connect(sys.argv[1])
c.handshake()
r = c.write(0, open(sys.argv[2], "rb").read()[:512])
assert r.error == 0, r
c.disconnect()
c.close()
EOF
    assert_success
    run qemu-img info -U --output=json "$TEST_DIR/disk.img"
    assert_output --partial '"format": "qcow2"'
}

@test "the guard covers the file's first sector through an offset window too" {
    require_tool qemu-img
    # The file starts with a comment line that runs past offset 256: raw.
    # Exported from offset 256, a client writing "version=1" as the next
    # line at its offset 0 would make the file a VMDK descriptor.
    "$PYTHON3" -c 'import sys
f = open(sys.argv[1], "r+b")
f.write(b"#" + b"c" * 254 + b"\n")' "$TEST_DIR/disk.img"
    start_server -t -o 256 "$TEST_DIR/disk.img"
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n

c = n.connect(sys.argv[1])
c.handshake()
r = c.write(0, b"version=1\n")
assert r.error == n.EPERM, r
r = c.write(0, b"hello\n")
assert r.error == 0, r
c.disconnect()
c.close()
EOF
    assert_success
    assert_still_raw
}
