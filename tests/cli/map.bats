#!/usr/bin/env bats
# diskimg map: the same output as qemu-img map (human and JSON) for qcow2
# images made by qemu-img and by diskimg -- data, zero clusters with and
# without a host cluster, discards, subclusters, compression,
# preallocation, backing chains -- plus --start-offset/--max-length,
# raw files, errors and exit codes.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() { cleanup_test; }

# same_map [map options...] FILE: diskimg map and qemu-img map print the
# same and exit with the same status, human and JSON.
same_map() {
    local out ours theirs rc_o rc_t
    for out in human json; do
        rc_o=0
        rc_t=0
        ours=$("$DISKIMG" map --output=$out "$@" 2>/dev/null) || rc_o=$?
        theirs=$(qemu-img map --output=$out "$@" 2>/dev/null) || rc_t=$?
        if [[ $rc_o -ne $rc_t || ($rc_o -eq 0 && "$ours" != "$theirs") ]]; then
            echo "map --output=$out $* (exit diskimg $rc_o, qemu-img $rc_t):" >&2
            diff <(echo "$theirs") <(echo "$ours") >&2 || true
            return 1
        fi
    done
}

# mixed IMAGE: data, partial data, ZERO_ALLOC (write -z over data),
# ZERO_PLAIN (write -z -u, write -z on nothing), a discard, the last cluster.
mixed() {
    qemu-io -f qcow2 \
        -c 'write -P 1 0 192k' \
        -c 'write -z 64k 64k' \
        -c 'write -z -u 1M 64k' \
        -c 'write -z 1536k 128k' \
        -c 'write -P 2 2M 256k' \
        -c 'discard 2M 64k' \
        -c 'write -P 3 4032k 64k' \
        "$1" >/dev/null
}

@test "map --help" {
    run "$DISKIMG" map --help
    assert_success
    assert_output --partial "Usage: diskimg map"
    assert_output --partial "--start-offset"
    assert_output --partial "--max-length"
}

@test "map: same as qemu-img map on qemu-img's images (v3, v2, 512 and 4k clusters, refcount widths)" {
    require_tool qemu-img qemu-io
    local o
    # (2M clusters: see the partly written cluster test)
    for o in "" compat=0.10 cluster_size=512 cluster_size=4k refcount_bits=1 \
             lazy_refcounts=on compression_type=zstd; do
        rm -f "$TEST_DIR/a.qcow2"
        qemu-img create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/a.qcow2" 4M
        mixed "$TEST_DIR/a.qcow2"
        same_map "$TEST_DIR/a.qcow2" || { echo "variant '$o'" >&2; return 1; }
    done
}

@test "map: the JSON fields of each kind of range" {
    require_tool qemu-img qemu-io
    qemu-img create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    mixed "$TEST_DIR/a.qcow2"
    run "$DISKIMG" map --output=json "$TEST_DIR/a.qcow2"
    assert_success
    # data; zero with a host cluster; zero without; unallocated
    assert_line --regexp '^\[\{ "start": 0, "length": 65536, "depth": 0, "present": true, "zero": false, "data": true, "offset": [0-9]+\},$'
    assert_line --regexp '^\{ "start": 65536, "length": 65536, "depth": 0, "present": true, "zero": true, "data": false, "offset": [0-9]+\},$'
    assert_line '{ "start": 1048576, "length": 65536, "depth": 0, "present": true, "zero": true, "data": false},'
    assert_line '{ "start": 196608, "length": 851968, "depth": 0, "present": false, "zero": true, "data": false},'
    # human: only the data ranges, in hex, with the file name
    run "$DISKIMG" map "$TEST_DIR/a.qcow2"
    assert_success
    assert_line --index 0 --regexp '^Offset +Length +Mapped to +File$'
    assert_line --regexp "^0 +0x10000 +0x[0-9a-f]+ +$TEST_DIR/a.qcow2\$"
}

@test "map: same as qemu-img map on diskimg's images (created, then written through serve)" {
    require_tool qemu-img qemu-io
    local o
    for o in "" compat=0.10 cluster_size=512 preallocation=metadata; do
        rm -f "$TEST_DIR/a.qcow2" "$SOCK"
        "$DISKIMG" create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/a.qcow2" 4M
        same_map "$TEST_DIR/a.qcow2" || { echo "variant '$o' (empty)" >&2; return 1; }
        start_server -f qcow2 "$TEST_DIR/a.qcow2"
        qemu-io -f raw -c 'write -P 1 0 128k' -c 'write -z 64k 64k' -c 'discard 0 64k' \
            -c 'write -P 2 1M 64k' -c 'write -P 3 3M 1000' "$URI" >/dev/null
        wait "$SERVER_PID"
        SERVER_PID=
        same_map "$TEST_DIR/a.qcow2" || { echo "variant '$o'" >&2; return 1; }
    done
}

@test "map: preallocation=metadata (zero and data, with offsets)" {
    require_tool qemu-img qemu-io
    qemu-img create -q -f qcow2 -o preallocation=metadata "$TEST_DIR/a.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 1 1M 64k' "$TEST_DIR/a.qcow2" >/dev/null
    same_map "$TEST_DIR/a.qcow2"
    run "$DISKIMG" map --output=json "$TEST_DIR/a.qcow2"
    assert_line --regexp '"start": 0, "length": 1048576, "depth": 0, "present": true, "zero": true, "data": true, "offset": [0-9]+'
}

@test "map: preallocation=falloc and full are data, as qemu-img says" {
    require_tool qemu-img
    local o
    for o in full falloc; do
        rm -f "$TEST_DIR/a.qcow2"
        qemu-img create -q -f qcow2 -o preallocation=$o "$TEST_DIR/a.qcow2" 4M
        same_map "$TEST_DIR/a.qcow2" || { echo "preallocation=$o" >&2; return 1; }
    done
}

@test "map: a cluster written only in part (the rest a hole in the file) is all data, as qemu-img says" {
    require_tool qemu-img qemu-io
    qemu-img create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    # The second cluster's tail is past the end of the file (a hole).
    qemu-io -f qcow2 -c 'write -P 1 0 100k' "$TEST_DIR/a.qcow2" >/dev/null
    same_map "$TEST_DIR/a.qcow2"
    # 2M clusters written in part: holes inside the file.
    qemu-img create -q -f qcow2 -o cluster_size=2M "$TEST_DIR/b.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 1 0 192k' -c 'write -P 2 3M 64k' "$TEST_DIR/b.qcow2" >/dev/null
    same_map "$TEST_DIR/b.qcow2"
}

@test "map: compressed clusters: JSON like qemu-img (no offset); human output refuses (exit 1)" {
    require_tool qemu-img
    head -c 1M /dev/zero | tr '\0' 'c' >"$TEST_DIR/src.raw"
    truncate -s 2M "$TEST_DIR/src.raw"
    qemu-img convert -c -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
    same_map "$TEST_DIR/c.qcow2"
    run "$DISKIMG" map --output=json "$TEST_DIR/c.qcow2"
    assert_line '[{ "start": 0, "length": 1048576, "depth": 0, "present": true, "zero": false, "data": true},'
    run --separate-stderr "$DISKIMG" map "$TEST_DIR/c.qcow2"
    assert_failure 1
    [[ "$stderr" == *compressed* ]]
}

@test "map: extended_l2 subclusters (allocated, zero and unallocated in one cluster)" {
    require_tool qemu-img qemu-io
    qemu-img create -q -f qcow2 -o extended_l2=on "$TEST_DIR/a.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 1 512 512' -c 'write -z 4096 4096' -c 'write -P 3 1M 3k' \
        -c 'write -P 4 2M 64k' "$TEST_DIR/a.qcow2" >/dev/null
    same_map "$TEST_DIR/a.qcow2"
}

@test "map: a backing chain (depth, present, offsets in each layer)" {
    require_tool qemu-img qemu-io
    truncate -s 4M "$TEST_DIR/base.raw"
    dd if=/dev/urandom of="$TEST_DIR/base.raw" bs=64k seek=1 count=40 conv=notrunc status=none
    qemu-img create -q -f qcow2 -b base.raw -F raw "$TEST_DIR/mid.qcow2"
    qemu-io -f qcow2 -c 'write -P 2 1M 512k' -c 'write -z 2M 64k' "$TEST_DIR/mid.qcow2" >/dev/null
    qemu-img create -q -f qcow2 -b mid.qcow2 -F qcow2 "$TEST_DIR/top.qcow2"
    qemu-io -f qcow2 -c 'write -P 3 1280k 512k' -c 'write -z -u 0 64k' -c 'discard 3M 64k' \
        "$TEST_DIR/top.qcow2" >/dev/null
    same_map "$TEST_DIR/top.qcow2"
    same_map "$TEST_DIR/mid.qcow2"
    run "$DISKIMG" map --output=json "$TEST_DIR/top.qcow2"
    assert_output --partial '"depth": 2'
    assert_output --partial '"depth": 1'
    # human output names each layer's file
    run "$DISKIMG" map "$TEST_DIR/top.qcow2"
    assert_output --partial "$TEST_DIR/base.raw"
    assert_output --partial "$TEST_DIR/mid.qcow2"
}

@test "map: past the end of a shorter backing file (depth and present as qemu-img)" {
    require_tool qemu-img qemu-io
    truncate -s 3M "$TEST_DIR/base.raw"
    qemu-img create -q -f qcow2 -b base.raw -F raw "$TEST_DIR/mid.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 2 1M 512k' "$TEST_DIR/mid.qcow2" >/dev/null
    qemu-img create -q -f qcow2 -b mid.qcow2 -F qcow2 "$TEST_DIR/top.qcow2" 5M
    qemu-io -f qcow2 -c 'write -P 3 1280k 512k' "$TEST_DIR/top.qcow2" >/dev/null
    # qemu-img: 3M..4M depth 1 (past base.raw's end), 4M..5M depth 0 (past mid's).
    run qemu-img map --output=json "$TEST_DIR/top.qcow2"
    assert_line '{ "start": 4194304, "length": 1048576, "depth": 0, "present": false, "zero": true, "data": false}]'
    same_map "$TEST_DIR/top.qcow2"
}

@test "map: --start-offset and --max-length (and -s/-l) cut the output as qemu-img does" {
    require_tool qemu-img qemu-io
    qemu-img create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    mixed "$TEST_DIR/a.qcow2"
    same_map --start-offset=64k --max-length=1M "$TEST_DIR/a.qcow2"
    same_map --start-offset=1000 --max-length=100000 "$TEST_DIR/a.qcow2"
    same_map --start-offset=2M "$TEST_DIR/a.qcow2"
    same_map --max-length=70000 "$TEST_DIR/a.qcow2"
    run "$DISKIMG" map --output=json -s 65536 -l 65536 "$TEST_DIR/a.qcow2"
    assert_success
    assert_output --regexp '^\[\{ "start": 65536, "length": 65536, "depth": 0, "present": true, "zero": true, "data": false, "offset": [0-9]+\}\]$'
}

@test "map: raw files, sparse (-f raw and probed)" {
    require_tool qemu-img
    truncate -s 4M "$TEST_DIR/a.raw"
    dd if=/dev/urandom of="$TEST_DIR/a.raw" bs=64k seek=3 count=2 conv=notrunc status=none
    same_map -f raw "$TEST_DIR/a.raw"
    same_map "$TEST_DIR/a.raw"
    run "$DISKIMG" map -f raw "$TEST_DIR/a.raw"
    assert_line --regexp "^0x30000 +0x20000 +0x30000 +$TEST_DIR/a.raw\$"
}

@test "map: errors exit 1, usage errors exit 2" {
    run --separate-stderr "$DISKIMG" map "$TEST_DIR/nope.qcow2"
    assert_failure 1
    [[ "$stderr" == *"nope.qcow2: No such file or directory"* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    truncate -s 1M "$TEST_DIR/a.raw"
    run "$DISKIMG" map -f qcow2 "$TEST_DIR/a.raw"
    assert_failure 1
    run "$DISKIMG" map
    assert_failure 2
    run "$DISKIMG" map --output=xml "$TEST_DIR/a.raw"
    assert_failure 2
    run "$DISKIMG" map --start-offset=abc "$TEST_DIR/a.raw"
    assert_failure 2
    run "$DISKIMG" map --bogus "$TEST_DIR/a.raw"
    assert_failure 2
}
