#!/usr/bin/env bats
# The vmdk format driver against qemu-img 7.2: round trips both ways for
# monolithicSparse and streamOptimized, the descriptor subformats qemu-img
# writes (read), info/check/map/create as qemu-img has them, writes through
# serve (concurrent, killed), streamOptimized's write-once rule, extents
# confined to the descriptor's directory, and hostile images.

load '../helpers'
load '../formats-lib'

# nbdsh runs "python3 -m nbd": the python that has libnbd's module must
# come first on PATH (a pyenv python may shadow it).
nbdsh() {
    PATH="$(dirname "$PYTHON3"):$PATH" command nbdsh "$@"
}

setup() {
    setup_test
    require_tool qemu-img
    require_tool jq
}

teardown() { cleanup_test; }

# A size not a multiple of the 64 KiB grain (nor of 512), and one that is.
ODD=$((5 * 1048576 + 3000))
EVEN=$((4 * 1048576))

@test "vmdk: monolithicSparse and streamOptimized round trips both ways" {
    for size in $ODD $EVEN; do
        roundtrip_written_by_diskimg vmdk "" "$size"
        roundtrip_written_by_diskimg vmdk "subformat=streamOptimized" "$size"
        roundtrip_read_by_diskimg vmdk "" "$size"
        roundtrip_read_by_diskimg vmdk "subformat=streamOptimized" "$size"
    done
    # diskimg's streamOptimized: version 3, compressed grains with markers,
    # a footer and an end-of-stream marker after the last grain.
    local out=$TEST_DIR/by-diskimg.vmdk
    "$DISKIMG" convert -O vmdk -o subformat=streamOptimized,adapter_type=lsilogic \
        "$TEST_DIR/src.raw" "$out"
    [[ $(od -An -tu4 -j4 -N4 "$out" | tr -d ' ') == 3 ]]
    [[ $(od -An -tx4 -j8 -N4 "$out" | tr -d ' ') == 00030003 ]]
    local len
    len=$(stat -c %s "$out")
    [[ $(tail -c 512 "$out" | tr -d '\0' | wc -c) == 0 ]]
    [[ $(tail -c 1536 "$out" | od -An -tu4 -j12 -N4 | tr -d ' ') == 3 ]]
    tail -c 1024 "$out" | head -c 4 | grep -q KDMV
    ((len % 512 == 0))
    run qemu-img info --output=json "$out"
    [[ $(jq -r '."format-specific".data."create-type"' <<<"$output") == streamOptimized ]]
    dd if="$out" bs=512 skip=1 count=20 2>/dev/null | grep -q 'ddb.adapterType = "lsilogic"'
    # convert -c with -O vmdk is accepted (monolithicSparse stores grains as they are)
    "$DISKIMG" convert -c -O vmdk "$TEST_DIR/src.raw" "$TEST_DIR/c.vmdk"
    qemu-img compare "$TEST_DIR/src.raw" "$TEST_DIR/c.vmdk"
    # every other format on main <-> vmdk, both subformats
    local fmt sub=streamOptimized
    for fmt in qcow2 vpc vhdx vdi; do
        rm -f "$TEST_DIR/x.$fmt" "$TEST_DIR/y.vmdk"
        "$DISKIMG" convert -O "$fmt" "$out" "$TEST_DIR/x.$fmt"
        "$DISKIMG" convert -O vmdk -o subformat=$sub "$TEST_DIR/x.$fmt" "$TEST_DIR/y.vmdk"
        qemu-img compare "$TEST_DIR/src.raw" "$TEST_DIR/y.vmdk"
        sub=monolithicSparse
    done
}

@test "vmdk: monolithicFlat and twoGbMaxExtent* written by qemu-img are read" {
    roundtrip_read_by_diskimg vmdk "subformat=monolithicFlat" "$ODD"
    run "$DISKIMG" check -r all "$TEST_DIR/by-qemu.vmdk"
    assert_failure 63
    roundtrip_read_by_diskimg vmdk "subformat=twoGbMaxExtentSparse" "$ODD"
    # Several extents, sparse and flat, in one descriptor (qemu splits at
    # 2 GiB, too big for a test): data written by qemu-io must read the same.
    cd "$TEST_DIR"
    qemu-img create -q -f vmdk -o subformat=twoGbMaxExtentSparse a.vmdk 1M
    qemu-img create -q -f vmdk -o subformat=twoGbMaxExtentSparse b.vmdk 1M
    qemu-img create -q -f vmdk -o subformat=monolithicFlat c.vmdk 1M
    sed -e '/^RW /d' -e 's/^createType=.*/createType="twoGbMaxExtentSparse"/' a.vmdk >m.vmdk
    printf 'RW 2048 SPARSE "a-s001.vmdk"\nRW 2048 FLAT "c-flat.vmdk" 0\nRW 2048 SPARSE "b-s001.vmdk"\n' >>m.vmdk
    qemu-io -f vmdk -c "write -P 7 1000k 100k" -c "write -P 8 2000k 200k" -c "write -P 9 3070k 2k" \
        m.vmdk >/dev/null
    qemu-img convert -O raw m.vmdk want.raw
    "$DISKIMG" convert -O raw m.vmdk got.raw
    cmp want.raw got.raw
    run "$DISKIMG" info --output=json m.vmdk
    [[ $(jq -c '."format-specific".data.extents|map(.format)' <<<"$output") == '["SPARSE","FLAT","SPARSE"]' ]]
    [[ $("$DISKIMG" map --output=json m.vmdk) == "$(qemu-img map --output=json m.vmdk)" ]]
    # (no dirty-flag when the extents' kinds differ, as qemu-img)
    [[ $("$DISKIMG" info --output=json m.vmdk | jq -c .) == \
        "$(qemu-img info --output=json m.vmdk | jq -c .)" ]]
    [[ $("$DISKIMG" info m.vmdk) == "$(qemu-img info m.vmdk)" ]]
}

# The format-specific fields diskimg shows beyond qemu-img's (the header
# and descriptor facts check --target reads), as a jq path list.
OURS_ONLY='."format-specific".data["header-version", "header-flags", "end-of-stream", "encoding", "adapter-type", "hardware-version", "long-content-id"]'

@test "vmdk: info, check, map and create as qemu-img 7.2" {
    cd "$TEST_DIR"
    make_pattern_raw src.raw "$ODD"
    qemu-img convert -O vmdk src.raw q.vmdk
    qemu-img convert -O vmdk -o subformat=streamOptimized src.raw s.vmdk
    for f in q.vmdk s.vmdk; do
        [[ $("$DISKIMG" info --output=json "$f" | jq -c "del(.\"actual-size\", $OURS_ONLY)") == \
            "$(qemu-img info --output=json "$f" | jq -c 'del(."actual-size")')" ]]
        [[ $("$DISKIMG" map --output=json "$f") == "$(qemu-img map --output=json "$f")" ]]
        run "$DISKIMG" check "$f"
        assert_success
        assert_output "No errors were found on the image."
    done
    run "$DISKIMG" info s.vmdk
    assert_line "    create type: streamOptimized"
    assert_line "            compressed: true"
    run "$DISKIMG" check -r all q.vmdk
    assert_failure 63
    # qemu-img 7.2 cannot resize vmdk, nor can diskimg
    run qemu-img resize q.vmdk 20M
    assert_failure 1
    run "$DISKIMG" resize q.vmdk 20M
    assert_failure 1
    assert_output --partial "vmdk images cannot be resized (nor can qemu-img 7.2 resize them)"
    # check finds a grain past the end of the file (rc 2, as qemu-img)
    cp q.vmdk bad.vmdk
    local gd gt
    gd=$(od -An -tu8 -j56 -N8 q.vmdk | tr -d ' ')
    gt=$(od -An -tu4 -j$((gd * 512)) -N4 q.vmdk | tr -d ' ')
    printf '\xff\xff\x00\x00' | dd of=bad.vmdk bs=1 seek=$((gt * 512)) conv=notrunc 2>/dev/null
    run qemu-img check bad.vmdk
    [[ $status == 1 && $output == *"points after EOF"* ]]
    run "$DISKIMG" check bad.vmdk
    assert_failure 1
    assert_output --partial "points after EOF"
    # create: the same layout and summary line as qemu-img
    for o in "" "adapter_type=lsilogic,zeroed_grain=on,toolsversion=5" "compat6=on" \
        "subformat=streamOptimized,hwversion=7" "subformat=monolithicSparse,zeroed_grain=off"; do
        rm -f a.vmdk b.vmdk
        want=$(qemu-img create -f vmdk ${o:+-o "$o"} a.vmdk 1000M)
        got=$("$DISKIMG" create -f vmdk ${o:+-o "$o"} b.vmdk 1000M)
        [[ ${got/b.vmdk/a.vmdk} == "$want" ]]
        cmp <(head -c 512 a.vmdk) <(head -c 512 b.vmdk)
        if [[ $o == *streamOptimized* ]]; then
            # diskimg's empty stream ends with a footer and end-of-stream marker
            cmp <(tail -c +10753 a.vmdk) <(tail -c +10753 b.vmdk | head -c -1536)
            tail -c 1024 b.vmdk | head -c 4 | grep -q KDMV
        else
            cmp <(tail -c +10753 a.vmdk) <(tail -c +10753 b.vmdk)
        fi
        [[ $(qemu-img info --output=json b.vmdk | jq -c '."format-specific".data|del(.cid)') == \
            "$(qemu-img info --output=json a.vmdk | jq -c '."format-specific".data|del(.cid)|.extents[0].filename="b.vmdk"')" ]]
    done
    run "$DISKIMG" create -f vmdk -o compat6=on,hwversion=7 c.vmdk 1M
    assert_failure 1
    assert_output --partial "compat6 cannot be enabled with hwversion set"
    run "$DISKIMG" create -f vmdk -o subformat=monolithicFlat c.vmdk 1M
    assert_failure
    assert_output --partial "writes only monolithicSparse and streamOptimized"
    run "$DISKIMG" create -f vmdk -o adapter_type=scsi c.vmdk 1M
    assert_failure 1
    run "$DISKIMG" create -f vmdk -o help x
    assert_output --partial "zeroed_grain"
}

@test "vmdk: serve writes monolithicSparse: qemu-io, concurrent nbdsh writers, then qemu-img" {
    require_tool qemu-io
    require_nbd_python
    cd "$TEST_DIR"
    "$DISKIMG" create -q -f vmdk d.vmdk 8M
    truncate -s 8M want.raw
    start_server -t -e 0 -f vmdk d.vmdk
    # partial grains, a grain boundary, the last grain, rewrites
    qemu-io -f raw -c "write -P 0x11 4096 512" -c "write -P 0x22 65000 2000" \
        -c "write -P 0x33 $((8 * 1048576 - 4096)) 4096" -c "write -P 0x44 4096 100" "$URI" >/dev/null
    # 8 writers at once, each its own grains and some shared grain tables
    nbdsh_run '
import threading
def writer(k):
    hh = nbd.NBD()
    hh.connect_uri("'"$URI"'")
    for i in range(16):
        off = 1048576 + (i * 8 + k) * 32768
        hh.pwrite(bytes([k + 1]) * 32768, off)
    hh.flush()
    hh.shutdown()
ts = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
for t in ts: t.start()
for t in ts: t.join()
'
    stop_server
    "$PYTHON3" - want.raw <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    def put(off, b):
        f.seek(off); f.write(b)
    put(4096, b"\x11" * 512)
    put(65000, b"\x22" * 2000)
    put(8 * 1048576 - 4096, b"\x33" * 4096)
    put(4096, b"\x44" * 100)
    for k in range(8):
        for i in range(16):
            put(1048576 + (i * 8 + k) * 32768, bytes([k + 1]) * 32768)
PY
    run qemu-img check d.vmdk
    assert_success
    run qemu-img compare -f raw -F vmdk want.raw d.vmdk
    assert_success
    # the first write of the session changed the CID
    run qemu-img info --output=json d.vmdk
    [[ $(jq '."format-specific".data.cid' <<<"$output") != 0 ]]
}

@test "vmdk: kill -9 during serve writes leaves an image qemu-img checks clean" {
    require_nbd_python
    cd "$TEST_DIR"
    "$DISKIMG" create -q -f vmdk d.vmdk 64M
    start_server -t -e 0 -f vmdk d.vmdk
    # flushed before the kill: must survive
    nbdsh_run 'h.pwrite(b"\x5a" * 65536, 0); h.flush()'
    nbdsh_run '
import random
for i in range(400):
    h.aio_pwrite(bytes([i % 250 + 1]) * 4096, random.randrange(16, 1024) * 65536 + 4096)
    if i % 50 == 49:
        h.flush()
    if i == 300:
        import os, signal
        os.kill('"$SERVER_PID"', signal.SIGKILL)
        break
' || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    run qemu-img check d.vmdk
    assert_success
    run qemu-io -f vmdk -r -c "read -P 0x5a 0 64k" d.vmdk
    assert_success
    assert_output --partial "read 65536/65536"
}

@test "vmdk: streamOptimized takes whole grains once, in order" {
    require_nbd_python
    cd "$TEST_DIR"
    make_pattern_raw src.raw "$EVEN"
    "$DISKIMG" convert -O vmdk -o subformat=streamOptimized src.raw s.vmdk
    start_server -t -f vmdk s.vmdk
    # a grain written already, a partial grain: refused; a new whole grain: taken
    nbdsh_run '
try:
    h.pwrite(b"\x01" * 65536, 0)
    raise SystemExit("rewrote a grain")
except nbd.Error:
    pass
try:
    h.pwrite(b"\x01" * 4096, 2 * 1048576)
    raise SystemExit("took a partial grain")
except nbd.Error:
    pass
h.pwrite(b"\x07" * 65536, 2 * 1048576)
h.flush()
'
    stop_server
    "$PYTHON3" -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(2 << 20); f.write(b"\x07" * 65536)' src.raw
    run qemu-img compare -f raw src.raw s.vmdk
    assert_success
    run qemu-img check s.vmdk
    assert_success
}

@test "vmdk: extents stay in the descriptor's directory; --untrusted opens none" {
    cd "$TEST_DIR"
    mkdir sub
    qemu-img create -q -f vmdk -o subformat=monolithicFlat sub/d.vmdk 1M
    run "$DISKIMG" info sub/d.vmdk
    assert_success
    run "$DISKIMG" info --untrusted sub/d.vmdk
    assert_failure 1
    assert_output --partial "refusing to open extent 'd-flat.vmdk' (--untrusted"
    echo secret >x
    mkfifo sub/fifo
    for name in ../x /etc/passwd sub/d-flat.vmdk .. fifo; do
        sed "s|\"d-flat.vmdk\"|\"$name\"|" sub/d.vmdk >sub/e.vmdk
        run timeout 10 "$DISKIMG" convert -O raw sub/e.vmdk out.raw
        assert_failure 1
        if [[ $name == fifo ]]; then
            assert_output --partial "not a regular file or a block device"
        else
            assert_output --partial "extent '$name' is not a file in the image's own directory"
        fi
        [[ ${#lines[@]} == 1 && $output == *sub/e.vmdk* && ! -e out.raw ]]
    done
}

@test "vmdk: hostile images end in a clear error, bounded in memory and time" {
    cd "$TEST_DIR"
    qemu-img create -q -f vmdk good.vmdk 64M
    qemu-io -f vmdk -c "write -P 1 0 64k" good.vmdk >/dev/null
    qemu-img convert -O vmdk -o subformat=streamOptimized good.vmdk s.vmdk
    "$PYTHON3" - <<'PY'
import struct
good = open("good.vmdk", "rb").read()
stream = open("s.vmdk", "rb").read()
def patch(data, off, fmt, *v):
    b = bytearray(data)
    struct.pack_into(fmt, b, off, *v)
    return bytes(b)
cases = {
    # capacity of 2^52 sectors: a grain directory of billions of entries
    "huge-gd": patch(good, 12, "<Q", 1 << 52),
    "gd-past-end": patch(good, 56, "<Q", 1 << 40),
    "gt-past-end": patch(good, 30 * 512, "<I", 0xFFFFFF00),
    "gte-past-end": patch(good, 31 * 512, "<I", 0x7FFFFFFF),
    "grain-size-zero": patch(good, 20, "<Q", 0),
    "grain-size-huge": patch(good, 20, "<Q", 1 << 40),
    "gtes-huge": patch(good, 44, "<I", 1 << 30),
    "version-9": patch(good, 4, "<I", 9),
    "desc-garbage": good[:512] + b"\x01\x02garbage\xff" * 100 + good[512 + 1100:],
    "desc-no-cid": good[:512] + good[512:1024].replace(b"CID=", b"XYZ=") + good[1024:],
}
# compressed grain whose marker lies about its size
s = bytearray(stream)
for off in range(0, len(s) - 12, 512):
    if off >= 65536 and struct.unpack_from("<Q", s, off)[0] == 0 and 0 < struct.unpack_from("<I", s, off + 8)[0] < 70000:
        struct.pack_into("<I", s, off + 8, 0x7FFFFFF0)
        break
cases["grain-size-lie"] = bytes(s)
cases["stream-truncated-grain"] = stream[:65536 + 8]
for name, data in cases.items():
    open("h-" + name + ".vmdk", "wb").write(data)
open("h-desc-file.vmdk", "w").write("# Disk DescriptorFile\nversion=1\nCID=1\nparentCID=ffffffff\n"
                                    "createType=\"monolithicFlat\"\nRW 99999999999999999999 FLAT \"x\" 0\n")
open("h-desc-many.vmdk", "w").write("version=1\nCID=1\nparentCID=ffffffff\ncreateType=\"monolithicFlat\"\n"
                                    + "RW 1 ZERO\n" * 5000)
PY
    for f in h-*.vmdk; do
        run bounded "$DISKIMG" convert -O raw "$f" out.raw
        # exit 1 with one "diskimg:" line naming the file (not a crash, not a hang)
        [[ $status -eq 1 ]] || { echo "$f: status $status: $output"; false; }
        [[ ${#lines[@]} == 1 && ${lines[0]} == "diskimg: "*"$f"* ]] || { echo "$f: $output"; false; }
    done
    # a grain table entry pointing into the header: writes there are refused
    cp good.vmdk meta.vmdk
    printf '\x01\x00\x00\x00' | dd of=meta.vmdk bs=1 seek=$((31 * 512)) conv=notrunc 2>/dev/null
    head -c 65536 /dev/urandom >data.raw
    run "$DISKIMG" convert -n -f raw -O vmdk data.raw meta.vmdk
    assert_failure 1
    assert_output --partial "points into the metadata"
    cmp <(head -c 512 good.vmdk) <(head -c 512 meta.vmdk)
}

@test "vmdk: a child image reads its parent; writes keep the parent's data" {
    require_tool qemu-io
    cd "$TEST_DIR"
    qemu-img create -q -f vmdk base.vmdk 4M
    qemu-io -f vmdk -c "write -P 1 0 1M" base.vmdk >/dev/null
    qemu-img create -q -f vmdk -b base.vmdk -F vmdk child.vmdk
    qemu-io -f vmdk -c "write -P 2 512k 4k" child.vmdk >/dev/null
    [[ $("$DISKIMG" info --output=json child.vmdk | jq -c "del(.\"actual-size\", $OURS_ONLY)") == \
        "$(qemu-img info --output=json child.vmdk | jq -c 'del(."actual-size")')" ]]
    [[ $("$DISKIMG" map --output=json child.vmdk) == "$(qemu-img map --output=json child.vmdk)" ]]
    qemu-img convert -O raw child.vmdk want.raw
    "$DISKIMG" convert -O raw child.vmdk got.raw
    cmp want.raw got.raw
    # a partial grain written through serve keeps the parent's bytes around it
    cp child.vmdk byqemu.vmdk
    qemu-io -f vmdk -c "write -P 3 100k 4k" -c "write -P 4 3M 512" byqemu.vmdk >/dev/null
    start_server -f vmdk child.vmdk
    qemu-io -f raw -c "write -P 3 100k 4k" -c "write -P 4 3M 512" "$URI" >/dev/null
    stop_server
    run qemu-img compare child.vmdk byqemu.vmdk
    assert_success
    run qemu-img check child.vmdk
    assert_success
    # diskimg create -b makes the same child as qemu-img create -b
    qemu-img create -q -f vmdk -b child.vmdk -F vmdk k1.vmdk
    run "$DISKIMG" create -f vmdk -b child.vmdk -F vmdk k2.vmdk
    assert_output "Formatting 'k2.vmdk', fmt=vmdk size=4194304 backing_file=child.vmdk backing_fmt=vmdk compat6=off hwversion=undefined"
    cmp <(head -c 512 k1.vmdk) <(head -c 512 k2.vmdk)
    [[ $(dd if=k2.vmdk bs=512 skip=1 count=20 2>/dev/null | tr -d '\0' | grep -v '^CID=') == \
        "$(dd if=k1.vmdk bs=512 skip=1 count=20 2>/dev/null | tr -d '\0' | grep -v '^CID=' | sed s/k1.vmdk/k2.vmdk/)" ]]
    run qemu-img compare child.vmdk k2.vmdk
    assert_success
    run "$DISKIMG" create -f vmdk -b base.vmdk -F raw k3.vmdk
    assert_failure 1
    assert_output --partial "backing_file must be a vmdk image"
    # --untrusted: the parent is not opened (info reads the child alone)
    run "$DISKIMG" info --untrusted child.vmdk
    assert_success
    assert_line "backing file: base.vmdk"
    run "$DISKIMG" convert --untrusted -O raw child.vmdk x.raw
    assert_failure 1
    assert_output --partial "refusing to open parent image 'base.vmdk'"
    # a parent written since the child was made is refused
    qemu-io -f vmdk -c "write -P 9 0 4k" base.vmdk >/dev/null
    run "$DISKIMG" convert -O raw child.vmdk x.raw
    assert_failure 1
    assert_output --partial "changed after this image was made"
}
