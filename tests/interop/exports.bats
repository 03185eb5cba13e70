#!/usr/bin/env bats
# Several exports from one server (--export name=,file=,format=,read-only=,
# description=, repeatable): listing with descriptions, per-export format
# and read-only flag, unknown names, and independence of the exports.

load '../helpers'
load 'lib'

setup() {
    setup_test
    require_tool qemu-img
    RAW=$TEST_DIR/raw.img
    QC=$TEST_DIR/disk.qcow2
    RO=$TEST_DIR/ro.img
    truncate -s 2M "$RAW"
    make_pattern "$RO" 1048576
    # a qcow2 image with data written by qemu, 8 MiB virtual
    qemu-img create -q -f qcow2 "$QC" 8M
    qemu-io -f qcow2 -c 'write -P 0x71 1M 64k' "$QC" >/dev/null
}
teardown() { cleanup_test; }

# start_three [serve options...]: exports raw (raw, writable), qc (qcow2,
# writable) and ro (raw, read-only), each with a description.
start_three() {
    start_server -t -e 0 "$@" \
        --export "name=raw,file=$RAW,format=raw,description=the raw disk" \
        --export "name=qc,file=$QC,format=qcow2,description=the qcow2 disk" \
        --export "name=ro,file=$RO,read-only=on,description=read-only reference"
}

uri_of() { echo "nbd+unix:///$1?socket=$SOCK"; }

# list_get EXPR: evaluate EXPR (python; e = {name: export} from nbdinfo
# --list --json) against the running server.
list_get() {
    nbdinfo --list --json "nbd+unix:///?socket=$SOCK" >"$TEST_DIR/list.json"
    "$PYTHON3" -c 'import json, sys
d = json.load(open(sys.argv[1]))
e = {x["export-name"]: x for x in d["exports"]}
print(eval(sys.argv[2]))' "$TEST_DIR/list.json" "$1"
}

@test "exports: nbdinfo --list shows every name with its description, size and flags" {
    require_tool nbdinfo
    start_three
    run nbdinfo --list "nbd+unix:///?socket=$SOCK"
    assert_success
    assert_output --partial 'export="raw"'
    assert_output --partial 'export="qc"'
    assert_output --partial 'export="ro"'
    assert_output --partial "description: the raw disk"
    assert_output --partial "description: the qcow2 disk"
    assert_output --partial "description: read-only reference"

    run list_get 'sorted(e)'
    assert_output "['qc', 'raw', 'ro']"
    run list_get '[e[n]["export-size"] for n in ("raw", "qc", "ro")]'
    assert_output "[2097152, 8388608, 1048576]"
    run list_get '[e[n]["is_read_only"] for n in ("raw", "qc", "ro")]'
    assert_output "[False, False, True]"
    run list_get '[e[n]["description"] for n in ("raw", "qc", "ro")]'
    assert_output "['the raw disk', 'the qcow2 disk', 'read-only reference']"
    # listing is not a client: the server did not open anything
    run grep -c "opened export" "$SERVER_LOG"
    assert_output 0
}

@test "exports: NBD_OPT_LIST on the wire has one NBD_REP_SERVER per export, name then description" {
    start_three
    run py "$SOCK" <<'EOF'
import struct, sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
rtype, replies = c.option(n.OPT_LIST)
assert rtype == n.REP_ACK, hex(rtype)
got = []
for t, d in replies:
    assert t == n.REP_SERVER
    ln = struct.unpack(">I", d[:4])[0]
    got.append((d[4:4 + ln].decode(), d[4 + ln:].decode()))
print(sorted(got))
EOF
    assert_success
    assert_output "[('qc', 'the qcow2 disk'), ('raw', 'the raw disk'), ('ro', 'read-only reference')]"
}

@test "exports: an unknown export is refused (GO: NBD_REP_ERR_UNKNOWN, the client may try again)" {
    require_tool nbdinfo qemu-img
    start_three
    run nbdinfo "$(uri_of nope)"
    assert_failure
    run qemu-img info "$(uri_of nope)"
    assert_failure
    # the default export "" does not exist either
    run nbdinfo "$(uri_of '')"
    assert_failure
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
assert c.go(b"nope") == n.REP_ERR_UNKNOWN
assert c.go(b"RAW") == n.REP_ERR_UNKNOWN   # names are case-sensitive
assert c.go(b"raw") == n.REP_ACK
assert c.size == 2097152
c.disconnect()
# NBD_OPT_EXPORT_NAME has no error reply: the server hangs up
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
c.send_option(n.OPT_EXPORT_NAME, b"nope")
assert c.is_closed(timeout=20)
EOF
    assert_success
    assert server_alive
    run nbdinfo --size "$(uri_of qc)"
    assert_output 8388608
}

@test "exports: writes, trims and zeroes to the read-only export fail with EPERM, the others are writable" {
    require_tool nbdsh
    start_three
    local before
    before=$(sha256sum <"$RO")
    run nbdsh -u "$(uri_of ro)" -c '
import errno
assert h.is_read_only()
try:
    h.pwrite(b"x" * 4096, 0)
except nbd.Error as e:
    assert e.errnum == errno.EPERM, (e.errnum, e.string)
else:
    raise SystemExit("a write to the read-only export succeeded")
# without its client-side checks libnbd sends them: the server says EPERM
h.set_strict_mode(0)
for op in (lambda: h.pwrite(b"x" * 4096, 0),
           lambda: h.zero(4096, 0),
           lambda: h.trim(4096, 0)):
    try:
        op()
    except nbd.Error as e:
        assert e.errnum == errno.EPERM, (e.errnum, e.string)
    else:
        raise SystemExit("a write to the read-only export succeeded")
'
    assert_success
    # and on the wire
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake(structured=True, name=b"ro")
assert c.eflags & n.TFLAG_READ_ONLY
assert c.write(0, b"y" * 4096).error == n.EPERM
assert c.request(n.CMD_TRIM, 0, 4096).error == n.EPERM
assert c.request(n.CMD_WRITE_ZEROES, 0, 4096).error == n.EPERM
assert c.read(0, 16).error == 0
c.disconnect()
c = n.connect(sys.argv[1])
c.handshake(structured=True, name=b"raw")
assert not c.eflags & n.TFLAG_READ_ONLY
assert c.write(0, b"w" * 4096).error == 0
c.disconnect()
EOF
    assert_success
    run nbdsh -u "$(uri_of qc)" -c 'h.pwrite(b"q" * 4096, 0)'
    assert_success
    stop_server
    [[ $(sha256sum <"$RO") == "$before" ]]
    range_is "$RAW" 0 4096 77
}

@test "exports: each export is its own image; concurrent clients on different exports stay apart" {
    require_tool nbdcopy qemu-img
    make_pattern "$TEST_DIR/src.img" 2097152
    local ro_before
    ro_before=$(sha256sum <"$RO")
    start_three
    # two copies at once, into two exports, while a third client reads the third
    nbdcopy "$TEST_DIR/src.img" "$(uri_of raw)" &
    local c1=$!
    "$PYTHON3" -c 'import sys
open(sys.argv[1], "wb").write(bytes([0x5c]) * 2097152)' "$TEST_DIR/fill.img"
    qemu-img convert -n -f raw -O raw "$TEST_DIR/fill.img" "$(uri_of qc)" &
    local c2=$!
    run nbdcopy "$(uri_of ro)" "$TEST_DIR/ro-copy.img"
    assert_success
    wait "$c1"
    wait "$c2"
    # every client still sees its own export's contents
    run nbdcopy "$(uri_of raw)" "$TEST_DIR/raw-back.img"
    assert_success
    cmp "$TEST_DIR/src.img" "$TEST_DIR/raw-back.img"
    cmp "$RO" "$TEST_DIR/ro-copy.img"
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    cmp "$TEST_DIR/src.img" "$RAW"
    [[ $(sha256sum <"$RO") == "$ro_before" ]]
    # the qcow2 export wrote into the qcow2 image: 0x5c over the first
    # 2 MiB (covering qemu's 0x71 at 1M), the rest still zero
    run qemu-img check "$QC"
    assert_success
    qemu-img convert -f qcow2 -O raw "$QC" "$TEST_DIR/qc.raw"
    range_is "$TEST_DIR/qc.raw" 0 2097152 5c
    range_is "$TEST_DIR/qc.raw" 2097152 $((6 * 1048576)) 00
    # the raw file did not turn into anything else
    [[ $(stat -c %s "$RAW") -eq 2097152 ]]
}

@test "exports: the qcow2 export serves the virtual disk, a format=raw export of the same file the file" {
    require_tool nbdsh
    start_server -t -e 0 \
        --export "name=virtual,file=$QC,format=qcow2,read-only=on" \
        --export "name=file,file=$QC,format=raw,read-only=on"
    run nbdsh -u "$(uri_of virtual)" -c '
assert h.get_size() == 8 * 1024 * 1024
assert h.pread(65536, 1048576) == b"\x71" * 65536
assert h.pread(4096, 0) == bytes(4096)
'
    assert_success
    run nbdsh -u "$(uri_of file)" -c "
import os
assert h.get_size() == os.path.getsize('$QC'), h.get_size()
assert h.pread(4, 0) == b'QFI\xfb'
"
    assert_success
}

@test "exports: a probed format per export, and command-line image options as defaults" {
    require_tool nbdinfo
    # -r on the command line: every export read-only unless it says otherwise
    start_server -t -e 0 -r \
        --export "name=probed,file=$QC" \
        --export "name=rw,file=$RAW,read-only=off"
    run nbdinfo --size "$(uri_of probed)"
    assert_output 8388608
    run nbdinfo --is read-only "$(uri_of probed)"
    assert_success
    run nbdinfo --is read-only "$(uri_of rw)"
    assert_failure
}

@test "exports: the positional IMAGE (-x NAME -D TEXT) and --export together" {
    require_tool nbdinfo
    start_server -t -e 0 -x first -D "from -x" "$RAW" \
        --export "name=second,file=$RO,description=from --export"
    run list_get '[(n, e[n]["description"], e[n]["export-size"]) for n in sorted(e)]'
    assert_output "[('first', 'from -x', 2097152), ('second', 'from --export', 1048576)]"
}

@test "exports: per-export offset and size windows of one file" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/disk.img" 4194304
    start_server -t -e 0 \
        --export "name=p1,file=$TEST_DIR/disk.img,format=raw,offset=1M,size=1M" \
        --export "name=p2,file=$TEST_DIR/disk.img,format=raw,offset=2M,size=2M"
    run nbdsh -u "$(uri_of p1)" -c "
want = open('$TEST_DIR/disk.img', 'rb').read()
assert h.get_size() == 1048576
assert h.pread(1048576, 0) == want[1048576:2097152]
h.pwrite(b'P' * 512, 0)
"
    assert_success
    run nbdinfo --size "$(uri_of p2)"
    assert_output 2097152
    stop_server
    range_is "$TEST_DIR/disk.img" 1048576 512 50
}

@test "exports: the log names the export each client opened and closed" {
    require_tool nbdinfo
    start_three
    run nbdinfo --size "$(uri_of qc)"
    assert_success
    run nbdinfo --size "$(uri_of ro)"
    assert_success
    wait_until 10 grep -q "closed export 'ro'" "$SERVER_LOG"
    grep -q "opened export 'qc'" "$SERVER_LOG"
    grep -q "closed export 'qc'" "$SERVER_LOG"
    grep -q "opened export 'ro'" "$SERVER_LOG"
    run grep -c "opened export 'raw'" "$SERVER_LOG"
    assert_output 0
}

@test "exports: statistics list every export with its format" {
    start_three --stats="$TEST_DIR/stats.json"
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    run stats_get "$TEST_DIR/stats.json" '[(x["name"], x["format"]) for x in d["exports"]]'
    assert_output "[('raw', 'raw'), ('qc', 'qcow2'), ('ro', 'raw')]"
}

@test "exports: bad --export specifications are usage errors; a bad image is exit 1 naming it" {
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --export "name=a"
    assert_failure 2
    [[ $stderr == *file=* ]]
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --export "file=$RAW"
    assert_failure 2
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --export "name=a,file=$RAW,colour=blue"
    assert_failure 2
    [[ $stderr == *colour* ]]
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --export "name=a,file=$RAW,read-only=perhaps"
    assert_failure 2
    # the same name twice
    run --separate-stderr timeout 20 "$DISKIMG" serve -k "$SOCK" \
        --export "name=a,file=$RAW" --export "name=a,file=$RO"
    [[ $status -eq 1 || $status -eq 2 ]]
    [[ $stderr == *"'a'"* ]]
    # one missing image: nothing is served
    run --separate-stderr timeout 20 "$DISKIMG" serve -k "$SOCK" \
        --export "name=a,file=$RAW" --export "name=b,file=$TEST_DIR/missing.img"
    assert_failure 1
    [[ $stderr == *missing.img* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ ! -S $SOCK ]]
}
