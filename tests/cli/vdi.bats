#!/usr/bin/env bats
# The vdi (VirtualBox) format driver against qemu-img 7.2: create,
# round trips both ways, info, map, check, resize, writes through serve
# (concurrent, and killed mid-way), and hostile headers.

bats_require_minimum_version 1.5.0

load '../helpers'
load '../formats-lib'

setup() {
    setup_test
    require_tool qemu-img qemu-io jq
}

teardown() { cleanup_test; }

# vdi_poke FILE OFFSET STRUCT-FORMAT VALUE...: overwrite header or map bytes.
vdi_poke() {
    "$PYTHON3" - "$@" <<'PY'
import struct, sys
path, off, fmt = sys.argv[1], int(sys.argv[2], 0), sys.argv[3]
vals = [int(v, 0) for v in sys.argv[4:]]
with open(path, "r+b") as f:
    f.seek(off)
    f.write(struct.pack(fmt, *vals))
PY
}

@test "create: qemu-img's summary line and layout, static and dynamic; info, map, resize" {
    local d=$TEST_DIR/d.vdi s=$TEST_DIR/s.vdi
    run "$DISKIMG" create -f vdi "$d" 5000000
    assert_success
    assert_output "Formatting '$d', fmt=vdi size=5000000 static=off"
    run "$DISKIMG" create -f vdi -o static=on,preallocation=off "$s" 3M
    assert_success
    assert_output "Formatting '$s', fmt=vdi size=3145728 static=on preallocation=off"
    qemu-img create -q -f vdi "$TEST_DIR/qd.vdi" 5000000
    qemu-img create -q -f vdi -o static=on "$TEST_DIR/qs.vdi" 3M
    # byte for byte as qemu-img lays them out, but for the two random UUIDs
    local f
    for f in d s; do
        cmp <(head -c 392 "$TEST_DIR/$f.vdi") <(head -c 392 "$TEST_DIR/q$f.vdi")
        cmp <(tail -c +425 "$TEST_DIR/$f.vdi") <(tail -c +425 "$TEST_DIR/q$f.vdi")
        [[ $(stat -c %s "$TEST_DIR/$f.vdi") == $(stat -c %s "$TEST_DIR/q$f.vdi") ]]
    done
    # info: qemu-img's fields, names and order
    qemu-io -c 'write -P 0xaa 1M 4k' "$TEST_DIR/qd.vdi" >/dev/null
    qemu-io -c 'write -P 0xaa 1M 4k' "$TEST_DIR/qs.vdi" >/dev/null
    for f in qd qs; do
        run "$DISKIMG" info --output=json "$TEST_DIR/$f.vdi"
        assert_success
        local ours=$output
        run qemu-img info --output=json "$TEST_DIR/$f.vdi"
        [[ $(jq -c 'del(."actual-size")' <<<"$ours") == $(jq -c 'del(."actual-size")' <<<"$output") ]]
        [[ $(jq -r '."cluster-size"' <<<"$ours") == 1048576 ]]
        # map: holes are zero and present, static blocks ask the file
        run "$DISKIMG" map --output=json "$TEST_DIR/$f.vdi"
        assert_success
        ours=$output
        run qemu-img map --output=json "$TEST_DIR/$f.vdi"
        [[ "$ours" == "$output" ]]
    done
    run "$DISKIMG" info "$d"
    assert_line "file format: vdi"
    assert_line "cluster_size: 1048576"
    # qemu-img 7.2 cannot resize vdi images; neither do we
    run qemu-img resize -f vdi "$d" 10M
    assert_failure 1
    run "$DISKIMG" resize -f vdi "$d" 10M
    assert_failure 1
    assert_output --partial "vdi images cannot be resized"
    run "$DISKIMG" create -f vdi "$TEST_DIR/big.vdi" 600T
    assert_failure 1
    assert_output --partial "unsupported VDI image size"
    [[ ! -e $TEST_DIR/big.vdi ]]
}

@test "round trips with qemu-img, both ways, static and dynamic, odd sizes" {
    local size opts
    for size in 1048576 $((5 * 1048576 + 512)) 3000000; do
        for opts in "" static=on; do
            roundtrip_written_by_diskimg vdi "$opts" "$size"
            roundtrip_read_by_diskimg vdi "$opts" "$size"
        done
    done
    # and to and from qcow2
    run "$DISKIMG" convert -f vdi -O qcow2 "$TEST_DIR/by-qemu.vdi" "$TEST_DIR/x.qcow2"
    assert_success
    run "$DISKIMG" convert -f qcow2 -O vdi "$TEST_DIR/x.qcow2" "$TEST_DIR/y.vdi"
    assert_success
    run qemu-img compare -f vdi -F vdi "$TEST_DIR/by-qemu.vdi" "$TEST_DIR/y.vdi"
    assert_success
    run "$DISKIMG" compare "$TEST_DIR/x.qcow2" "$TEST_DIR/y.vdi"
    assert_success
}

@test "check: qemu-img's findings and exit codes; no repair, as qemu" {
    local f=$TEST_DIR/c.vdi
    qemu-img create -q -f vdi "$f" 4M
    qemu-io -c 'write -P 1 0 4k' -c 'write -P 2 2M 4k' "$f" >/dev/null
    run "$DISKIMG" check "$f"
    assert_success
    assert_output "No errors were found on the image."
    run "$DISKIMG" check -r all "$f"
    assert_failure 63
    # the count of allocated blocks disagrees with the map
    vdi_poke "$f" 0x184 '<I' 3
    run qemu-img check "$f"
    assert_failure 2
    run "$DISKIMG" check "$f"
    assert_failure 2
    assert_output --partial "ERROR: allocated blocks mismatch, is 2, should be 3"
    # a count below the map's: the next allocation would reuse a block
    vdi_poke "$f" 0x184 '<I' 1
    run qemu-img check "$f"
    assert_failure 2
    truncate -s 4M "$TEST_DIR/src.raw"
    run "$DISKIMG" convert -n -f raw -O vdi "$TEST_DIR/src.raw" "$f"
    assert_failure 1
    assert_output --partial "block map entry 2 uses block 1, beyond the 1 the header counts"
    # two entries share a block: readable, not writable, a corruption
    vdi_poke "$f" 0x184 '<I' 2
    vdi_poke "$f" 0x208 '<I' 0
    run qemu-img check "$f"
    assert_failure 2
    run --separate-stderr "$DISKIMG" check --output=json "$f"
    assert_failure 2
    [[ $(jq -r .corruptions <<<"$output") == 1 ]]
    run "$DISKIMG" info "$f"
    assert_success
    run "$DISKIMG" convert -n -f raw -O vdi "$TEST_DIR/src.raw" "$f"
    assert_failure 1
    assert_output --partial "uses block 0, which another entry uses too"
}

@test "a \"zero\" block reads as zeroes and takes a write like a hole" {
    local f=$TEST_DIR/z.vdi
    qemu-img create -q -f vdi "$f" 4M
    qemu-io -c 'write -P 1 0 4k' "$f" >/dev/null
    vdi_poke "$f" 0x204 '<I' 0xfffffffe # block 1: discarded
    run "$DISKIMG" map --output=json "$f"
    assert_success
    local ours=$output
    run qemu-img map --output=json "$f"
    [[ "$ours" == "$output" ]]
    run "$DISKIMG" compare -f vdi -F vdi "$f" "$f"
    assert_success
    # write into the zero block through serve; qemu-img sees it, check is clean
    start_server "$f"
    run qemu-io -f raw -c 'write -P 3 1052672 4k' "$URI"
    assert_success
    stop_server
    run qemu-io -r -f vdi -c 'read -P 3 1052672 4k' -c 'read -P 0 1M 4k' -c 'read -P 1 0 4k' "$f"
    assert_success
    refute_output --partial "verification failed"
    run qemu-img check -f vdi "$f"
    assert_success
    [[ $(od -An -tu4 -j 0x204 -N4 "$f" | tr -d ' ') == 1 ]]
}

@test "hostile headers: a clear one-line error, fast, in 2 GiB of address space" {
    local base=$TEST_DIR/base.vdi f=$TEST_DIR/h.vdi
    qemu-img create -q -f vdi "$base" 4M
    qemu-io -c 'write -P 1 0 4k' "$base" >/dev/null
    # case: offset format value...[;offset format value...] | expected message
    local cases=(
        "0x180 <II 0x1fffff80 0x1fffff80|overlaps the data area"
        "0x154 <II 0x200 0x80000200;0x180 <I 0x1fffff00|extends past the end of the file"
        "0x180 <I 0xffffffff|blocks is too many"
        "0x200 <I 3|block map entry 0 points past the end of the file"
        "0x204 <I 0x10000|block map entry 1 (block index 65536) is beyond the 4 blocks"
        "0x178 <I 4096|block size 4096 is not 1048576"
        "0x048 <I 0xffffffff|header size 4294967295 is outside"
        "0x154 <I 0x201|not a multiple of 512"
        "0x044 <I 0x00010000|version 1.0 is not supported"
        "0x170 <Q 0xffffffffffffff00|needs more than the 4 blocks"
        "0x1a8 <I 1|differencing images"
        "0x04c <I 4|image type 4 is not supported"
    )
    local c spec msg
    for c in "${cases[@]}"; do
        spec=${c%%|*} msg=${c#*|}
        cp "$base" "$f"
        local IFS=';' poke
        for poke in $spec; do
            IFS=' '
            # shellcheck disable=SC2086
            vdi_poke "$f" $poke
        done
        run bounded "$DISKIMG" info "$f"
        assert_failure 1
        [[ ${#lines[@]} -eq 1 ]]
        assert_output --partial "$f: vdi"
        assert_output --partial "$msg"
    done
    # a block cut short by the end of the file reads as zeroes, as in qemu
    head -c 4096 "$base" >"$f"
    run "$DISKIMG" convert -f vdi -O raw "$f" "$TEST_DIR/cut.raw"
    assert_success
    qemu-img convert -f vdi -O raw "$f" "$TEST_DIR/cut-qemu.raw"
    cmp "$TEST_DIR/cut.raw" "$TEST_DIR/cut-qemu.raw"
    # a file too short for a header
    head -c 300 "$base" >"$f"
    run "$DISKIMG" info -f vdi "$f"
    assert_failure 1
    assert_output --partial "too short for a header"
}

# writer TAG FIRST STEP COUNT: run $TEST_DIR/w.py (make_writer) against $URI.
writer() {
    "$PYTHON3" "$TEST_DIR/w.py" "$URI" "$@"
}

make_writer() {
    # w.py TAG FIRST STEP COUNT: COUNT writes of 64 KiB of byte TAG, all in
    # flight at once, one into each block FIRST, FIRST+STEP, ... at an offset
    # inside the block that depends on TAG; then a flush.
    cat >"$TEST_DIR/w.py" <<'PY'
import sys
import nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
tag, first, step, count = (int(x) for x in sys.argv[2:6])
for i in range(count):
    b = first + i * step
    h.aio_pwrite(bytes([tag]) * 65536, b * 1048576 + tag * 65536)
while h.aio_in_flight() > 0:
    h.poll(-1)
h.flush()
h.shutdown()
PY
    # expect.py RAW SIZE (TAG FIRST STEP COUNT)...: the raw image they make
    cat >"$TEST_DIR/expect.py" <<'PY'
import sys
path, size = sys.argv[1], int(sys.argv[2])
args = [int(x) for x in sys.argv[3:]]
with open(path, "wb") as f:
    f.truncate(size)
    for j in range(0, len(args), 4):
        tag, first, step, count = args[j:j + 4]
        for i in range(count):
            f.seek((first + i * step) * 1048576 + tag * 65536)
            f.write(bytes([tag]) * 65536)
PY
}

@test "serve: concurrent writers allocate without overlap; qemu-img sees the data" {
    require_nbd_python
    local img=$TEST_DIR/w.vdi size=$((1100 * 1048576))
    # past block 896 the map entry no longer shares the header's page
    run "$DISKIMG" create -f vdi "$img" $size
    assert_success
    make_writer
    start_server -t -e 4 "$img"
    # four clients, all their writes in flight at once: two allocate
    # interleaved blocks, the third races them for blocks 0..9 (at other
    # offsets), the fourth allocates past block 896
    writer 3 0 2 30 &
    local p1=$!
    writer 4 1 2 30 &
    local p2=$!
    writer 5 0 1 10 &
    local p3=$!
    writer 6 1000 1 10
    wait $p1
    wait $p2
    wait $p3
    stop_server
    [[ $SERVER_STATUS == 0 ]]
    "$PYTHON3" "$TEST_DIR/expect.py" "$TEST_DIR/exp.raw" $size 3 0 2 30 4 1 2 30 5 0 1 10 6 1000 1 10
    run qemu-img compare -f raw -F vdi "$TEST_DIR/exp.raw" "$img"
    assert_success
    run qemu-img check -f vdi "$img"
    assert_success
    # 70 blocks written, each allocated once
    [[ $(od -An -tu4 -j 388 -N4 "$img" | tr -d ' ') == 70 ]]
    # a static image takes writes in place; qemu-io writes through NBD too
    run "$DISKIMG" create -f vdi -o static "$TEST_DIR/s.vdi" 16M
    assert_output --partial "static=on"
    start_server -t "$TEST_DIR/s.vdi"
    writer 7 0 3 5
    run qemu-io -f raw -c 'write -P 8 2M 512k' -c 'write -z 0 64k' "$URI"
    assert_success
    stop_server
    "$PYTHON3" "$TEST_DIR/expect.py" "$TEST_DIR/exp.raw" $((16 * 1048576)) 7 0 3 5
    qemu-io -f raw -c 'write -P 8 2M 512k' -c 'write -z 0 64k' "$TEST_DIR/exp.raw" >/dev/null
    run qemu-img compare -f raw -F vdi "$TEST_DIR/exp.raw" "$TEST_DIR/s.vdi"
    assert_success
    run qemu-img check -f vdi "$TEST_DIR/s.vdi"
    assert_success
}

@test "serve: kill -9 during allocating writes leaves an image qemu-img checks clean" {
    require_nbd_python
    local img=$TEST_DIR/k.vdi
    run "$DISKIMG" create -f vdi "$img" 890M
    assert_success
    make_writer
    start_server -t -e 2 "$img"
    writer 9 0 1 4 # flushed: must survive
    # 100 allocating writes, a flush, then 780 more in flight while the
    # server is killed (all map entries share the header's page: qemu-img
    # check must find the image clean whatever the moment)
    "$PYTHON3" - "$URI" "$TEST_DIR/ready" 2>/dev/null <<'PY' &
import sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
for b in range(4, 104):
    h.aio_pwrite(bytes([2]) * 65536, b * 1048576)
while h.aio_in_flight() > 0:
    h.poll(-1)
h.flush()
open(sys.argv[2], "w").close()
for b in range(104, 884):
    h.aio_pwrite(bytes([2]) * 65536, b * 1048576)
while h.aio_in_flight() > 0:
    h.poll(-1)
PY
    local wp=$! i
    for i in $(seq 1 500); do
        [[ -e $TEST_DIR/ready ]] && break
        sleep 0.01
    done
    stop_server KILL
    wait $wp || true
    local blocks
    blocks=$(od -An -tu4 -j 388 -N4 "$img" | tr -d ' ')
    ((blocks >= 104 && blocks <= 884))
    run qemu-img check -f vdi "$img"
    assert_success
    run qemu-io -r -f vdi -c 'read -P 9 589824 64k' -c 'read -P 9 3735552 64k' "$img"
    assert_success
    refute_output --partial "Pattern verification failed"
    run "$DISKIMG" check "$img"
    assert_success
    # and diskimg writes on where it stopped
    start_server -t "$img"
    writer 8 500 -1 80
    stop_server
    run qemu-img check -f vdi "$img"
    assert_success
}
