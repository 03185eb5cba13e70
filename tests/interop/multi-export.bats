#!/usr/bin/env bats
# Several exports from one server: the positional IMAGE (-x/-D) plus
# repeatable --export=name=NAME,file=PATH[,format=..][,read-only=on]
# [,description=..][,snapshot=..][,offset=..][,size=..]: listing with
# descriptions, each export its own image and flags, duplicate and unknown
# names, snapshots, and which command-line options an --export inherits.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# list_json: nbdinfo --list --json of the server on $SOCK, to $TEST_DIR/list.json.
list_json() {
    nbdinfo --list --json "$URI" >"$TEST_DIR/list.json"
}

# export_field NAME FIELD: a field of export NAME in list.json (python repr).
export_field() {
    "$PYTHON3" -c 'import json, sys
d = json.load(open(sys.argv[1]))
e = [e for e in d["exports"] if e["export-name"] == sys.argv[2]]
print(repr(e[0].get(sys.argv[3])) if len(e) == 1 else "no such export (%d)" % len(e))' \
        "$TEST_DIR/list.json" "$1" "$2"
}

# make_images: raw.img (1 MiB pattern), q.qcow2 (2 MiB virtual; 0x51 in its
# first 64 KiB), ro.img (512 KiB of 0x7e).
make_images() {
    make_pattern "$TEST_DIR/raw.img" 1048576
    cp "$TEST_DIR/raw.img" "$TEST_DIR/raw.orig"
    qemu-img create -q -f qcow2 "$TEST_DIR/q.qcow2" 2M
    qemu-io -c 'write -P 0x51 0 64k' "$TEST_DIR/q.qcow2" >/dev/null
    "$PYTHON3" -c 'import sys; open(sys.argv[1], "wb").write(b"\x7e" * 524288)' "$TEST_DIR/ro.img"
}

# start_three: raw.img as "raw", q.qcow2 as "qcow", ro.img as "ro" (read-only).
start_three() {
    start_server -t -e 0 -x raw -D "the raw disk" "$TEST_DIR/raw.img" \
        --export="name=qcow,file=$TEST_DIR/q.qcow2,description=a qcow2 disk" \
        --export="name=ro,file=$TEST_DIR/ro.img,read-only=on,description=look but do not touch"
}

@test "several exports: nbdinfo --list shows each name, description, size and read-only flag" {
    require_tool nbdinfo qemu-img qemu-io
    make_images
    start_three

    list_json
    [[ $(stats_get "$TEST_DIR/list.json" 'len(d["exports"])') -eq 3 ]]
    [[ $(stats_get "$TEST_DIR/list.json" '[e["export-name"] for e in d["exports"]]') == "['raw', 'qcow', 'ro']" ]]
    [[ $(export_field raw description) == "'the raw disk'" ]]
    [[ $(export_field qcow description) == "'a qcow2 disk'" ]]
    [[ $(export_field ro description) == "'look but do not touch'" ]]
    [[ $(export_field raw export-size) -eq 1048576 ]]
    [[ $(export_field qcow export-size) -eq 2097152 ]]
    [[ $(export_field ro export-size) -eq 524288 ]]
    [[ $(export_field raw is_read_only) == False ]]
    [[ $(export_field qcow is_read_only) == False ]]
    [[ $(export_field ro is_read_only) == True ]]
    [[ $(export_field ro can_trim) == False ]]
    [[ $(export_field ro can_zero) == False ]]

    # the human listing too
    run nbdinfo --list "$URI"
    assert_success
    assert_output --partial 'export="qcow":'
    assert_output --partial "description: look but do not touch"
    # a listing opens no export
    run ! grep -q "opened export" "$SERVER_LOG"
}

@test "several exports: each serves its own image, with its own read-only flag" {
    require_tool nbdsh qemu-img qemu-io
    make_images
    start_three

    # all three at once, on separate connections
    run py "$SOCK" "$TEST_DIR/raw.orig" <<'EOF'
import sys
import nbd

sock, raw = sys.argv[1:3]
raw = open(raw, "rb").read()
def open_export(name):
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_unix(sock)
    return h
hr, hq, ho = open_export("raw"), open_export("qcow"), open_export("ro")
assert hr.get_size() == 1048576 and hq.get_size() == 2097152 and ho.get_size() == 524288
assert not hr.is_read_only() and not hq.is_read_only() and ho.is_read_only()
assert hr.pread(65536, 0) == raw[:65536]
assert hq.pread(65536, 0) == b"\x51" * 65536
assert hq.pread(65536, 1048576) == bytes(65536)
assert ho.pread(4096, 4096) == b"\x7e" * 4096
hr.pwrite(b"\x01" * 4096, 8192)
hq.pwrite(b"\x02" * 4096, 1048576)
try:
    ho.pwrite(b"\x03" * 4096, 0)
    sys.exit("write to the read-only export succeeded")
except nbd.Error as e:
    assert e.errno == "EPERM", e
for h in (hr, hq):
    h.flush()
# each write landed in its own export only
assert hq.pread(4096, 8192) == b"\x51" * 4096
assert hr.pread(4096, 1048576 - 4096) == raw[-4096:]
for h in (hr, hq, ho):
    h.shutdown()
EOF
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]

    range_is "$TEST_DIR/raw.img" 8192 4096 01
    cmp -n 8192 "$TEST_DIR/raw.img" "$TEST_DIR/raw.orig"
    cmp -i 12288 "$TEST_DIR/raw.img" "$TEST_DIR/raw.orig"
    range_is "$TEST_DIR/ro.img" 0 524288 7e
    run qemu-img check "$TEST_DIR/q.qcow2"
    assert_success
    run qemu-io -c 'read -P 0x51 0 64k' -c 'read -P 0x02 1M 4k' -c 'read -P 0 64k 960k' \
        "$TEST_DIR/q.qcow2"
    assert_success
    refute_output --partial "Pattern verification failed"
    # the log names the export each client opened
    grep -q "opened export 'raw'" "$SERVER_LOG"
    grep -q "opened export 'qcow'" "$SERVER_LOG"
    grep -q "opened export 'ro'" "$SERVER_LOG"
}

@test "several exports: qemu-img and diskimg reach each one by name" {
    require_tool qemu-img qemu-io
    make_images
    start_three

    run qemu-img compare -f raw "nbd+unix:///raw?socket=$SOCK" "$TEST_DIR/raw.orig"
    assert_success
    # (-U: the server has q.qcow2 open for writing)
    run qemu-img compare -U "nbd+unix:///qcow?socket=$SOCK" "$TEST_DIR/q.qcow2"
    assert_success
    run "$DISKIMG" compare "nbd+unix:///ro?socket=$SOCK" "$TEST_DIR/ro.img"
    assert_success
    run "$DISKIMG" info "nbd+unix:///qcow?socket=$SOCK"
    assert_success
    assert_output --partial "virtual size: 2 MiB"
}

@test "an unknown export is refused; the others are still served" {
    require_tool nbdinfo
    make_images
    start_three

    run nbdinfo --size "nbd+unix:///nosuch?socket=$SOCK"
    assert_failure
    # the default name "" is not one of them either
    run nbdinfo --size "$URI"
    assert_failure
    run py "$SOCK" <<'EOF'
import struct
import sys
import nbdraw as n

c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
assert c.go(b"nosuch", opt=n.OPT_INFO) == n.REP_ERR_UNKNOWN
assert c.go(b"nosuch") == n.REP_ERR_UNKNOWN
assert c.go(b"RAW") == n.REP_ERR_UNKNOWN        # names are case-sensitive
assert c.go(b"ro") == n.REP_ACK                 # haggling goes on after an error
assert c.size == 524288
# EXPORT_NAME has no error reply: an unknown name ends the connection
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
c.send_option(n.OPT_EXPORT_NAME, b"nosuch")
assert c.is_closed()
EOF
    assert_success
    run nbdinfo --size "nbd+unix:///raw?socket=$SOCK"
    assert_success
    assert_output 1048576
}

@test "duplicate export names are refused at start, in one line" {
    make_images
    local err=$TEST_DIR/err status

    for args in "-x a $TEST_DIR/raw.img --export=name=a,file=$TEST_DIR/ro.img" \
        "--export=name=b,file=$TEST_DIR/raw.img --export=name=b,file=$TEST_DIR/ro.img" \
        "$TEST_DIR/raw.img --export=name=,file=$TEST_DIR/ro.img"; do
        status=0
        # shellcheck disable=SC2086
        timeout 20 "$DISKIMG" serve -k "$SOCK" $args 2>"$err" || status=$?
        [[ $status -eq 1 ]]
        [[ $(wc -l <"$err") -eq 1 ]]
        grep -q "defined twice" "$err"
        [[ ! -e "$SOCK" ]]
    done
    # neither file was touched
    cmp "$TEST_DIR/raw.img" "$TEST_DIR/raw.orig"
}

@test "--export: missing name= or file=, an unknown key, a missing file or snapshot are refused" {
    make_images
    local status

    run "$DISKIMG" serve -k "$SOCK" --export="name=b"
    [[ $status -eq 2 ]]
    assert_output --partial "name=NAME and file=PATH"
    run "$DISKIMG" serve -k "$SOCK" --export="file=$TEST_DIR/raw.img"
    [[ $status -eq 2 ]]
    run "$DISKIMG" serve -k "$SOCK" --export="name=b,file=$TEST_DIR/raw.img,bogus=1"
    [[ $status -eq 2 ]]
    assert_output --partial "bogus"
    run timeout 20 "$DISKIMG" serve -k "$SOCK" --export="name=b,file=$TEST_DIR/missing.img"
    [[ $status -eq 1 ]]
    assert_output --partial "missing.img"
    run timeout 20 "$DISKIMG" serve -k "$SOCK" "$TEST_DIR/raw.img" \
        --export="name=s,file=$TEST_DIR/q.qcow2,snapshot=nosuch"
    [[ $status -eq 1 ]]
    assert_output --partial "nosuch"
    [[ ! -e "$SOCK" ]]
}

@test "--export with snapshot=: the snapshot's data, read-only, beside the live image" {
    require_tool qemu-img qemu-io nbdsh
    qemu-img create -q -f qcow2 "$TEST_DIR/q.qcow2" 4M
    qemu-io -c 'write -P 0xaa 0 128k' "$TEST_DIR/q.qcow2" >/dev/null
    qemu-img snapshot -c before "$TEST_DIR/q.qcow2"
    qemu-io -c 'write -P 0xbb 0 64k' -c 'write -P 0xcc 1M 64k' "$TEST_DIR/q.qcow2" >/dev/null
    start_server -t -e 0 -x live "$TEST_DIR/q.qcow2" \
        --export="name=old,file=$TEST_DIR/q.qcow2,snapshot=before,description=as it was"

    run nbdinfo --list --json "$URI"
    assert_success
    echo "$output" >"$TEST_DIR/list.json"
    [[ $(export_field old is_read_only) == True ]]
    [[ $(export_field old description) == "'as it was'" ]]
    [[ $(export_field live is_read_only) == False ]]

    run nbdsh -u "nbd+unix:///old?socket=$SOCK" -c '
assert h.pread(65536, 0) == b"\xaa" * 65536
assert h.pread(65536, 65536) == b"\xaa" * 65536
assert h.pread(65536, 1 << 20) == bytes(65536)
'
    assert_success
    run nbdsh -u "nbd+unix:///live?socket=$SOCK" -c '
assert h.pread(65536, 0) == b"\xbb" * 65536
assert h.pread(65536, 65536) == b"\xaa" * 65536
assert h.pread(65536, 1 << 20) == b"\xcc" * 65536
h.pwrite(b"\xdd" * 65536, 65536)
h.flush()
'
    assert_success
    # a write to the live export leaves the snapshot as it was
    run nbdsh -u "nbd+unix:///old?socket=$SOCK" -c '
assert h.pread(65536, 65536) == b"\xaa" * 65536
try:
    h.pwrite(b"x" * 512, 0)
    sys.exit("write to the snapshot export succeeded")
except nbd.Error as e:
    assert e.errno == "EPERM", e
'
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    run qemu-img check "$TEST_DIR/q.qcow2"
    assert_success
    qemu-img convert -O raw -l before "$TEST_DIR/q.qcow2" "$TEST_DIR/snap.raw"
    range_is "$TEST_DIR/snap.raw" 0 131072 aa
    range_is "$TEST_DIR/snap.raw" 1048576 65536 00
}

@test "--export: offset= and size= give a window of a raw file" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/raw.img" 4194304
    start_server -t -e 0 "$TEST_DIR/raw.img" \
        --export="name=win,file=$TEST_DIR/raw.img,offset=1M,size=512K"
    export RAW_IMG=$TEST_DIR/raw.img
    run nbdsh -u "nbd+unix:///win?socket=$SOCK" -c '
import os
want = open(os.environ["RAW_IMG"], "rb").read()
assert h.get_size() == 524288, h.get_size()
assert h.pread(524288, 0) == want[1 << 20:(1 << 20) + 524288]
'
    assert_success
    run nbdinfo --size "$URI"
    assert_success
    assert_output 4194304
}

@test "--export inherits -r and -f from the command line, and overrides them" {
    require_tool nbdinfo qemu-img
    make_images
    qemu-img create -q -f qcow2 "$TEST_DIR/q2.qcow2" 1M
    # -r: every export read-only unless it says read-only=off
    start_server -t -e 0 -r "$TEST_DIR/raw.img" \
        --export="name=inherits,file=$TEST_DIR/ro.img" \
        --export="name=rw,file=$TEST_DIR/q.qcow2,read-only=off"
    list_json
    [[ $(export_field '' is_read_only) == True ]]
    [[ $(export_field inherits is_read_only) == True ]]
    [[ $(export_field rw is_read_only) == False ]]
    stop_server

    # -f qcow2: the default format of every export, format= overrides it
    # (the raw view read-only: a writable one beside the writable qcow2
    # export of the same file is refused, exit 5)
    start_server -t -e 0 -f qcow2 "$TEST_DIR/q.qcow2" \
        --export="name=q2,file=$TEST_DIR/q2.qcow2" \
        --export="name=raw,file=$TEST_DIR/q2.qcow2,format=raw,read-only=on"
    list_json
    [[ $(export_field '' export-size) -eq 2097152 ]]
    [[ $(export_field q2 export-size) -eq 1048576 ]]
    # the qcow2 file itself, as raw: its allocated size, not 1 MiB
    [[ $(export_field raw export-size) -eq $(stat -c %s "$TEST_DIR/q2.qcow2") ]]
}

@test "--export does not inherit -l: the snapshot's read-only applies to that image only" {
    require_tool nbdinfo qemu-img qemu-io
    make_images
    qemu-img snapshot -c s1 "$TEST_DIR/q.qcow2"
    start_server -t -e 0 -l s1 -x old "$TEST_DIR/q.qcow2" \
        --export="name=w,file=$TEST_DIR/raw.img"
    list_json
    [[ $(export_field old is_read_only) == True ]]
    # w is a plain raw image that nobody asked to be read-only
    [[ $(export_field w is_read_only) == False ]]
}

@test "--export does not inherit the positional image's --image-opts" {
    require_tool nbdinfo qemu-img qemu-io
    make_images
    # driver=qcow2 and read-only=on describe q.qcow2, not raw.img
    start_server -t -e 0 --image-opts "driver=qcow2,file.filename=$TEST_DIR/q.qcow2,read-only=on" \
        --export="name=w,file=$TEST_DIR/raw.img"
    list_json
    [[ $(export_field '' is_read_only) == True ]]
    [[ $(export_field '' export-size) -eq 2097152 ]]
    [[ $(export_field w export-size) -eq 1048576 ]]
    [[ $(export_field w is_read_only) == False ]]
}
