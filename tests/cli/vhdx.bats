#!/usr/bin/env bats
# The vhdx format driver against qemu-img 7.2: round trips both ways
# (dynamic and fixed, block sizes, sizes that are not a multiple of the
# block size, 4096-byte logical sectors, which qemu cannot open), create
# options and summary, info, check, map, the log (a dirty log refused
# read-only and replayed read-write; qemu-img reads the result), writes
# through serve, a crash during writes, and hostile images.

load '../helpers'
load '../formats-lib'

bats_require_minimum_version 1.5.0

# nbdsh runs "python3 -m nbd": the python with libnbd's module must be
# first on PATH (as in tests/interop/lib.bash).
nbdsh() {
    PATH="$(dirname "$PYTHON3"):$PATH" command nbdsh "$@"
}

setup() {
    setup_test
    require_tool qemu-img jq
}

teardown() { cleanup_test; }

MiB=1048576

@test "vhdx: written by diskimg, read by qemu-img (dynamic, fixed, block sizes)" {
    roundtrip_written_by_diskimg vhdx "" $((5 * MiB + 1536))
    roundtrip_written_by_diskimg vhdx "subformat=fixed" $((3 * MiB + 512))
    roundtrip_written_by_diskimg vhdx "block_size=1M,block_state_zero=off" $((4 * MiB + 4096))
    roundtrip_written_by_diskimg vhdx "subformat=fixed,block_size=2M,log_size=2M" $((5 * MiB))
}

@test "vhdx: written by qemu-img, read by diskimg (dynamic, fixed, block sizes)" {
    roundtrip_read_by_diskimg vhdx "" $((5 * MiB + 1536))
    roundtrip_read_by_diskimg vhdx "subformat=fixed,block_state_zero=off" $((3 * MiB + 512))
    roundtrip_read_by_diskimg vhdx "subformat=fixed" $((2 * MiB))
    roundtrip_read_by_diskimg vhdx "block_size=1M,block_state_zero=off" $((4 * MiB + 4096))
}

@test "vhdx: 4096-byte logical sectors: written and read back by diskimg" {
    local src=$TEST_DIR/src.raw img=$TEST_DIR/s4.vhdx back=$TEST_DIR/back.raw
    make_pattern_raw "$src" $((5 * MiB))
    run "$DISKIMG" convert -O vhdx -o logical_sector_size=4096,block_size=1M "$src" "$img"
    assert_success
    # the metadata says 4096 (item at metadata + 64 KiB + 32)
    local meta=$((3 * MiB)) # BAT at 2 MiB (1 MiB log), 1 MiB BAT region
    [[ $(od -An -tu4 -j $((meta + 65536 + 32)) -N4 "$img" | tr -d ' ') == 4096 ]]
    run "$DISKIMG" compare -f raw -F vhdx "$src" "$img"
    assert_success
    run "$DISKIMG" convert -O raw "$img" "$back"
    assert_success
    cmp "$src" "$back"
    # qemu-img 7.2 refuses 4Kn VHDX: the reason diskimg opens them
    run qemu-img info "$img"
    assert_failure
}

@test "vhdx: create options, summary and errors as qemu-img" {
    run "$DISKIMG" create -f vhdx "$TEST_DIR/a.vhdx" 100M
    assert_success
    assert_output "Formatting '$TEST_DIR/a.vhdx', fmt=vhdx size=104857600 log_size=1048576 block_size=0"
    run "$DISKIMG" create -f vhdx -o subformat=fixed,block_state_zero=off,log_size=1000 \
        "$TEST_DIR/b.vhdx" 3M
    assert_success
    assert_output --partial "fmt=vhdx size=3145728 log_size=1000 block_size=0 subformat=fixed block_state_zero=off"
    run --separate-stderr "$DISKIMG" create -f vhdx -o block_size=3M "$TEST_DIR/c.vhdx" 10M
    assert_failure
    [[ $stderr == *"Block size must be a power of two"* ]]
    run --separate-stderr "$DISKIMG" create -f vhdx -o subformat=foo "$TEST_DIR/c.vhdx" 10M
    assert_failure
    [[ $stderr == *"Parameter 'subformat' does not accept value 'foo'"* ]]
    run --separate-stderr "$DISKIMG" create -f vhdx "$TEST_DIR/c.vhdx" 65T
    [[ $stderr == *"Image size too large; max of 64TB"* ]]
    run --separate-stderr "$DISKIMG" create -f vhdx -o log_size=4G "$TEST_DIR/c.vhdx" 10M
    [[ $stderr == *"Log size must be smaller than 4 GB"* ]]
    # block size chosen by size, as qemu: 8M up to 1G, 16M up to 100G, then 32M
    local size want
    for size in 1G:8388608 1025M:16777216 101G:33554432; do
        "$DISKIMG" create -q -f vhdx "$TEST_DIR/d.vhdx" "${size%%:*}"
        want=${size##*:}
        [[ $(qemu-img info --output=json "$TEST_DIR/d.vhdx" | jq '."cluster-size"') == "$want" ]]
        rm -f "$TEST_DIR/d.vhdx"
    done
    run qemu-img check "$TEST_DIR/b.vhdx"
    assert_success
    # fixed is really fixed: the one block is FULLY_PRESENT (6) at 8 MiB
    [[ $(od -An -tx8 -j $((2 * MiB)) -N8 "$TEST_DIR/b.vhdx" | tr -d ' ') == 0000000000800006 ]]
}

@test "vhdx: info, check and map" {
    local img=$TEST_DIR/q.vhdx
    qemu-img create -q -f vhdx -o block_size=1M "$img" 6M
    qemu-io -c 'write -P 0xab 1M 1M' -c 'write -P 0xcd 4M 64k' "$img" >/dev/null
    run "$DISKIMG" info --output=json "$img"
    assert_success
    [[ $(jq -c '[.format, ."virtual-size", ."cluster-size", ."dirty-flag"]' <<<"$output") == '["vhdx",6291456,1048576,false]' ]]
    [[ $(jq -c '."format-specific".data' <<<"$output") == '{"subformat":"dynamic","block-size":1048576,"logical-sector-size":512,"physical-sector-size":512}' ]]
    run "$DISKIMG" check "$img"
    assert_success
    assert_output --partial "No errors were found on the image."
    # map: blocks never written are zero holes, and so is the unwritten
    # part of block 4 (a hole in the file); qemu-img reports all data
    run "$DISKIMG" map --detail --output=json "$img"
    assert_success
    [[ $(jq -c '[.[] | select(.data and (.zero | not)) | [.start, .length, .offset]]' <<<"$output") == '[[1048576,1048576,8388608],[4194304,65536,9437184]]' ]]
    [[ $(jq -c '[.[] | select(.data | not) | .zero] | unique' <<<"$output") == '[true]' ]]
    [[ $(jq '[.[] | .length] | add' <<<"$output") == 6291456 ]]
    run qemu-img map --output=json "$img"
    [[ $(jq -c '[.[] | .data] | unique' <<<"$output") == '[true]' ]]
    # no resize, as qemu-img 7.2 ("Image format driver does not support resize")
    run --separate-stderr "$DISKIMG" resize "$img" 8M
    assert_failure 1
    [[ $stderr == *"vhdx images cannot be resized (nor can qemu-img 7.2 resize them)"* ]]
    [[ $(qemu-img info --output=json "$img" | jq '."virtual-size"') == 6291456 ]]
}

CRAFT=$BATS_TEST_DIRNAME/vhdx-craft.py

# base_image FILE: qemu-img's 4 MiB dynamic image, 1 MiB blocks, block 0
# written with 0xab (at 8 MiB of the file, which then ends at 9 MiB).
base_image() {
    rm -f "$1"
    qemu-img create -q -f vhdx -o block_size=1M "$1" 4M
    qemu-io -c 'write -P 0xab 0 1M' "$1" >/dev/null
}

@test "vhdx: a dirty log: refused read-only as qemu does, replayed by a writable open" {
    local img=$TEST_DIR/dirty.vhdx
    base_image "$img"
    # block 1 -> 9 MiB (0x5a there), with the BAT sector only in the log
    "$PYTHON3" "$CRAFT" "$img" dirty 1 $((9 * MiB)) 0x5a
    cp "$img" "$TEST_DIR/by-qemu.vhdx"
    local cmd
    for cmd in "info $img" "map $img" "convert -O raw $img $TEST_DIR/out.raw"; do
        run --separate-stderr "$DISKIMG" $cmd
        assert_failure 1
        [[ $stderr == *"opened read-only, but contains a log that needs to be replayed"* ]]
    done
    run --separate-stderr qemu-img info "$img"
    assert_failure 1
    [[ $stderr == *"contains a log that needs to be replayed"* ]]
    # check without -r opens read-only: exit 1 as qemu-img; with -r the log is replayed
    run "$DISKIMG" check "$img"
    assert_failure 1
    run "$DISKIMG" check -r all "$img"
    assert_success
    assert_output --partial "1 corruptions"
    assert_output --partial "No errors were found on the image."
    qemu-img check -q -r all "$TEST_DIR/by-qemu.vhdx"
    # both replays give the same guest data, which qemu-img reads
    run qemu-img compare "$img" "$TEST_DIR/by-qemu.vhdx"
    assert_success
    run qemu-io -c 'read -P 0xab 0 1M' -c 'read -P 0x5a 1M 1M' -c 'read -P 0 2M 2M' "$img"
    assert_success
    refute_output --partial "fail"
    run qemu-img check "$img"
    assert_success
    # an entry that wraps around the end of the ring, replayed by both
    base_image "$img"
    "$PYTHON3" "$CRAFT" "$img" dirtywrap 2 $((9 * MiB)) 0x6b
    cp "$img" "$TEST_DIR/by-qemu.vhdx"
    run "$DISKIMG" check -r all "$img"
    assert_success
    assert_output --partial "1 corruptions"
    run qemu-img check -r all "$TEST_DIR/by-qemu.vhdx"
    assert_output --partial "1 corruptions"
    run qemu-io -c 'read -P 0x6b 2M 1M' -c 'read -P 0 1M 1M' "$img"
    refute_output --partial "fail"
    run qemu-img compare "$img" "$TEST_DIR/by-qemu.vhdx"
    assert_success
    # a sequence of two entries whose head's tail is the first: both are
    # replayed, in order (the zeroes land before the BAT entry)
    base_image "$img"
    "$PYTHON3" "$CRAFT" "$img" logchain 3 $((9 * MiB))
    cp "$img" "$TEST_DIR/by-qemu.vhdx"
    run "$DISKIMG" check -r all "$img"
    assert_success
    qemu-img check -q -r all "$TEST_DIR/by-qemu.vhdx"
    run qemu-io -c 'read -P 0 3M 1M' -c 'read -P 0xab 0 1M' "$img"
    refute_output --partial "fail"
    [[ $("$DISKIMG" map --detail --output=json "$img" | jq -c '[.[] | select(.start == 3145728) | .offset]') == "[$((9 * MiB))]" ]]
    run qemu-img compare "$img" "$TEST_DIR/by-qemu.vhdx"
    assert_success
    # a LogGuid with no entry (a writer stopped before its first one) is
    # an empty log: read-only opens go on, as in qemu; a writer clears it
    base_image "$img"
    "$PYTHON3" "$CRAFT" "$img" guidonly
    "$PYTHON3" -c 'import sys; open(sys.argv[1], "wb").write(b"\xab" * (1 << 20) + bytes(3 << 20))' \
        "$TEST_DIR/want.raw"
    run "$DISKIMG" compare -f raw -F vhdx "$TEST_DIR/want.raw" "$img"
    assert_success
    qemu-img info "$img" >/dev/null
    run "$DISKIMG" check -r all "$img"
    assert_success
    refute_output --partial "corruptions"
    [[ $(od -An -tx1 -j $((64 * 1024 + 48)) -N16 "$img" | tr -d ' 0\n') == "" ]]
}

@test "vhdx: hostile images end in a clear error, in bounded time and memory" {
    local img=$TEST_DIR/h.vhdx spec op want
    local -a cases=(
        "badheaders|neither header is valid"
        "regions 5000|region table claims 5000 entries"
        "hugebat|the BAT (67125247 entries) is past the end of the file"
        "bat 1 0x40000006|BAT entry 1 points past the end of the file"
        "bat 1 0x100006|BAT entry 1 points into the image's metadata"
        "bat 2 7|BAT entry 2 is PARTIALLY_PRESENT"
        "meta 0 0x300000|block size 3145728 is not a power of two"
        "meta 4 2|differencing images (with a parent) are not supported"
        "meta 32 1000|logical sector size 1000 is not 512 or 4096"
        "logfar rw|log entry 1 writes at 1099511627776, outside"
        "logtrunc rw|shorter (9437184 bytes) than the log says was flushed"
    )
    for spec in "${cases[@]}"; do
        op=${spec%%|*} want=${spec#*|}
        base_image "$img"
        "$PYTHON3" "$CRAFT" "$img" ${op% rw}
        if [[ $op == *" rw" ]]; then
            run --separate-stderr bounded "$DISKIMG" check -r all "$img"
        else
            run --separate-stderr bounded "$DISKIMG" info "$img"
        fi
        [[ $status == 1 ]] || { echo "$op: status $status: $stderr"; false; }
        [[ $stderr == "diskimg: $img: vhdx: "*"$want"* ]] || { echo "$op: $stderr"; false; }
        (($(wc -l <<<"$stderr") == 1))
    done
    # check reports the bad entry as qemu-img does: exit 2, same JSON
    base_image "$img"
    "$PYTHON3" "$CRAFT" "$img" bat 1 0x40000006
    run --separate-stderr qemu-img check --output=json "$img"
    assert_failure 2
    local want=$output
    run --separate-stderr "$DISKIMG" check --output=json "$img"
    assert_failure 2
    [[ $(jq -c . <<<"$output") == $(jq -c . <<<"$want") ]]
    # a ring full of chained entries is replayed, once, in bounded time
    base_image "$img"
    "$PYTHON3" "$CRAFT" "$img" logring
    run bounded "$DISKIMG" check -r all "$img"
    assert_success
    run qemu-img check "$img"
    assert_success
}

@test "vhdx: serve: writes and concurrent allocations land where qemu-img sees them" {
    require_tool qemu-io nbdsh
    require_nbd_python
    local img=$TEST_DIR/s.vhdx exp=$TEST_DIR/expected.raw
    "$DISKIMG" create -q -f vhdx -o block_size=1M "$img" $((12 * MiB + 512))
    start_server -t -f vhdx "$img"
    run qemu-io -f raw -c 'write -P 0x11 0 64k' -c 'write -P 0x22 2047k 2k' "$URI"
    assert_success
    # 44 writes of 256 KiB in flight at once over 11 unallocated blocks,
    # four per block, out of order: each block must be allocated once
    nbdsh -u "$URI" -c '
import random
offs = [1 << 20 | 0] + [(b << 20) + q * 262144 for b in range(2, 12) for q in range(4)]
offs += [(1 << 20) + q * 262144 for q in range(1, 4)]
random.seed(7)
random.shuffle(offs)
for o in offs:
    h.aio_pwrite(bytes([(o >> 18) % 251 + 1]) * 262144, o)
while h.aio_in_flight() > 0:
    h.poll(-1)
h.flush()
'
    stop_server
    "$PYTHON3" - "$exp" <<'PY'
import sys
size = 12 * (1 << 20) + 512
b = bytearray(size)
b[0:65536] = b"\x11" * 65536
b[2047 * 1024:2049 * 1024] = b"\x22" * 2048
for o in range(1 << 20, 12 << 20, 262144):
    b[o:o + 262144] = bytes([(o >> 18) % 251 + 1]) * 262144
open(sys.argv[1], "wb").write(b)
PY
    run qemu-img check "$img"
    assert_success
    run qemu-img compare -f raw -F vhdx "$exp" "$img"
    assert_success
    # one block per 1 MiB of guest data: 12 blocks after 8 MiB of layout
    (($(stat -c %s "$img") == 20 * MiB))
}

@test "vhdx: kill -9 of serve during allocating writes: qemu-img replays the log, flushed data kept" {
    require_tool qemu-io nbdsh
    require_nbd_python
    local img=$TEST_DIR/k.vhdx
    "$DISKIMG" create -q -f vhdx -o block_size=1M "$img" $((8 * MiB))
    start_server -f vhdx "$img"
    # flushed writes, then allocating writes with no flush, then kill -9
    nbdsh -u "$URI" -c "
import os, signal
h.pwrite(b'\x33' * 1048576, 0)
h.pwrite(b'\x44' * 4096, 5 << 20)
h.flush()
h.pwrite(b'\x55' * 65536, 3 << 20)
h.pwrite(b'\x66' * 65536, 6 << 20)
os.kill($SERVER_PID, signal.SIGKILL)
"
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    cp "$img" "$TEST_DIR/copy.vhdx"
    # the allocations after the flush left the log live: read-only opens refuse
    run --separate-stderr qemu-img info "$img"
    assert_failure 1
    [[ $stderr == *"needs to be replayed"* ]]
    run qemu-img check -r all "$img"
    assert_success
    run qemu-io -c 'read -P 0x33 0 1M' -c 'read -P 0x44 5M 4k' -c 'read -P 0x55 3M 64k' \
        -c 'read -P 0x66 6M 64k' -c 'read -P 0 7M 1M' "$img"
    assert_success
    refute_output --partial "fail"
    # diskimg replays the same log to the same data
    run "$DISKIMG" check -r all "$TEST_DIR/copy.vhdx"
    assert_success
    run qemu-img compare "$img" "$TEST_DIR/copy.vhdx"
    assert_success
}

@test "vhdx: convert to and from every other format diskimg writes" {
    local src=$TEST_DIR/src.raw img=$TEST_DIR/p.vhdx fmt
    make_pattern_raw "$src" $((5 * MiB + 1536))
    "$DISKIMG" convert -O vhdx -o block_size=2M "$src" "$img"
    for fmt in qcow2 vpc vdi vmdk; do
        "$DISKIMG" create -f "$fmt" -o help "$TEST_DIR/x" 1M >/dev/null 2>&1 || continue
        rm -f "$TEST_DIR/t.$fmt" "$TEST_DIR/u.vhdx"
        run "$DISKIMG" convert -f vhdx -O "$fmt" "$img" "$TEST_DIR/t.$fmt"
        assert_success
        run qemu-img compare -f raw -F "$fmt" "$src" "$TEST_DIR/t.$fmt"
        assert_success
        run "$DISKIMG" convert -f "$fmt" -O vhdx "$TEST_DIR/t.$fmt" "$TEST_DIR/u.vhdx"
        assert_success
        run qemu-img compare -f raw -F vhdx "$src" "$TEST_DIR/u.vhdx"
        assert_success
    done
}
