#!/usr/bin/env bats
# diskimg resize: grow and shrink qcow2 and raw images, checked by
# qemu-img info, qemu-img check and qemu-io reads; --shrink, relative
# sizes, snapshots, backing files; errors and exit codes.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() { cleanup_test; }

QCOW2UTIL=$BATS_TEST_DIRNAME/../interop/qcow2util.py

qcow2util() {
    "$PYTHON3" "$QCOW2UTIL" "$@"
}

MiB=$((1024 * 1024))

vsize() {
    qemu-img info --output=json "$1" | sed -n 's/.*"virtual-size": \([0-9]*\).*/\1/p'
}

# qcheck FILE: qemu-img check exit 0.
qcheck() {
    run qemu-img check "$1"
    [[ $status -eq 0 ]] || { echo "qemu-img check $1: $status: $output" >&2; return 1; }
}

# reads FILE FMT CMD...: qemu-io -r reads all verify (read -P ...).
reads() {
    local f=$1 fmt=$2 args=() c
    shift 2
    for c in "$@"; do args+=(-c "$c"); done
    run qemu-io -f "$fmt" -r "${args[@]}" "$f"
    [[ $status -eq 0 && "$output" != *"failed"* ]] || { echo "$output" >&2; return 1; }
}

# data IMAGE [create options]: 4 MiB qcow2 with 0x5a in the first 1M and
# 0x5b in 2M..2.5M.
data() {
    rm -f "$1"
    "$DISKIMG" create -q -f qcow2 ${2:+-o "$2"} "$1" 4M
    qemu-io -f qcow2 -c 'write -P 0x5a 0 1M' -c 'write -P 0x5b 2M 512k' "$1" >/dev/null
}

@test "resize --help" {
    run "$DISKIMG" resize --help
    assert_success
    assert_output --partial "Usage: diskimg resize"
    assert_output --partial "--shrink"
}

@test "resize: grow a qcow2 (absolute and +SIZE); data kept, new space reads zero, check clean" {
    require_tool qemu-img qemu-io
    local o
    for o in "" compat=0.10 extended_l2=on cluster_size=4k refcount_bits=1; do
        data "$TEST_DIR/a.qcow2" "$o"
        run "$DISKIMG" resize "$TEST_DIR/a.qcow2" 8M
        assert_success
        assert_output "Image resized."
        [[ $(vsize "$TEST_DIR/a.qcow2") -eq $((8 * MiB)) ]]
        run "$DISKIMG" resize "$TEST_DIR/a.qcow2" +3M
        assert_success
        [[ $(vsize "$TEST_DIR/a.qcow2") -eq $((11 * MiB)) ]]
        qcheck "$TEST_DIR/a.qcow2" || { echo "variant '$o'" >&2; return 1; }
        reads "$TEST_DIR/a.qcow2" qcow2 'read -P 0x5a 0 1M' 'read -P 0x5b 2M 512k' \
            'read -P 0 4M 7M' || { echo "variant '$o'" >&2; return 1; }
        # qemu can use the new space.
        qemu-io -f qcow2 -c 'write -P 0x5c 10M 1M' "$TEST_DIR/a.qcow2" >/dev/null
        qcheck "$TEST_DIR/a.qcow2"
    done
}

@test "resize: growing a 512-byte-cluster image moves its L1 table (4M -> 64M)" {
    require_tool qemu-img qemu-io
    data "$TEST_DIR/a.qcow2" cluster_size=512
    local l1_before l1_size_before
    l1_before=$(qcow2util header "$TEST_DIR/a.qcow2" l1_table_offset)
    l1_size_before=$(qcow2util header "$TEST_DIR/a.qcow2" l1_size)
    run "$DISKIMG" resize "$TEST_DIR/a.qcow2" 64M
    assert_success
    # 64M / 32k per L2 table = 2048 entries: 16 KiB, 32 clusters.
    [[ $(qcow2util header "$TEST_DIR/a.qcow2" l1_size) -eq 2048 ]]
    [[ $l1_size_before -eq 128 ]]
    [[ $(qcow2util header "$TEST_DIR/a.qcow2" l1_table_offset) -ne $l1_before ]]
    qcheck "$TEST_DIR/a.qcow2"
    reads "$TEST_DIR/a.qcow2" qcow2 'read -P 0x5a 0 1M' 'read -P 0x5b 2M 512k' 'read -P 0 4M 60M'
    qemu-io -f qcow2 -c 'write -P 0x5d 60M 1M' "$TEST_DIR/a.qcow2" >/dev/null
    qcheck "$TEST_DIR/a.qcow2"
}

@test "resize: growing to sizes qemu-img also accepts (100T with 64k clusters), and refusing what it refuses" {
    require_tool qemu-img
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    run "$DISKIMG" resize "$TEST_DIR/a.qcow2" 100T
    assert_success
    [[ $(vsize "$TEST_DIR/a.qcow2") -eq $((100 * 1024 * 1024 * MiB)) ]]
    qcheck "$TEST_DIR/a.qcow2"
    # The L1 table would be over 32 MiB: qemu-img refuses too.
    "$DISKIMG" create -q -f qcow2 -o cluster_size=512 "$TEST_DIR/b.qcow2" 4M
    run qemu-img resize "$TEST_DIR/b.qcow2" 1T
    assert_failure 1
    run --separate-stderr "$DISKIMG" resize "$TEST_DIR/b.qcow2" 1T
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ $(vsize "$TEST_DIR/b.qcow2") -eq $((4 * MiB)) ]]
    run "$DISKIMG" resize "$TEST_DIR/a.qcow2" 7E
    assert_failure 1
    # 8 EiB is more than any file holds: a usage error.
    run "$DISKIMG" resize "$TEST_DIR/a.qcow2" 8E
    assert_failure 2
    qcheck "$TEST_DIR/a.qcow2"
}

@test "resize: shrinking needs --shrink (exit 1, image unchanged)" {
    require_tool qemu-img qemu-io
    data "$TEST_DIR/a.qcow2"
    cp "$TEST_DIR/a.qcow2" "$TEST_DIR/orig.qcow2"
    run --separate-stderr "$DISKIMG" resize "$TEST_DIR/a.qcow2" 3M
    assert_failure 1
    [[ "$stderr" == *--shrink* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    cmp "$TEST_DIR/a.qcow2" "$TEST_DIR/orig.qcow2"
    run qemu-img resize "$TEST_DIR/orig.qcow2" 3M
    assert_failure 1
}

@test "resize --shrink: an unused tail goes; data before the new end stays; check clean" {
    require_tool qemu-img qemu-io
    local o
    for o in "" compat=0.10 cluster_size=512 extended_l2=on; do
        data "$TEST_DIR/a.qcow2" "$o"
        run "$DISKIMG" resize --shrink "$TEST_DIR/a.qcow2" 3M
        assert_success
        [[ $(vsize "$TEST_DIR/a.qcow2") -eq $((3 * MiB)) ]]
        qcheck "$TEST_DIR/a.qcow2" || { echo "variant '$o'" >&2; return 1; }
        reads "$TEST_DIR/a.qcow2" qcow2 'read -P 0x5a 0 1M' 'read -P 0x5b 2M 512k' \
            'read -P 0 2560k 512k'
        # relative
        run "$DISKIMG" resize --shrink "$TEST_DIR/a.qcow2" -- -512k
        assert_success
        [[ $(vsize "$TEST_DIR/a.qcow2") -eq $((5 * MiB / 2)) ]]
        qcheck "$TEST_DIR/a.qcow2"
        # and grow again: the old tail must not come back
        run "$DISKIMG" resize "$TEST_DIR/a.qcow2" 4M
        assert_success
        reads "$TEST_DIR/a.qcow2" qcow2 'read -P 0x5b 2M 512k' 'read -P 0 2560k 1536k'
    done
}

@test "resize --shrink refuses to cut off data (exit 1, image unchanged), works once it is discarded" {
    require_tool qemu-img qemu-io
    data "$TEST_DIR/a.qcow2"
    cp "$TEST_DIR/a.qcow2" "$TEST_DIR/orig.qcow2"
    run --separate-stderr "$DISKIMG" resize --shrink "$TEST_DIR/a.qcow2" 2M
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    cmp "$TEST_DIR/a.qcow2" "$TEST_DIR/orig.qcow2"
    qemu-io -f qcow2 -c 'discard 2M 512k' "$TEST_DIR/a.qcow2" >/dev/null
    run "$DISKIMG" resize --shrink "$TEST_DIR/a.qcow2" 2M
    assert_success
    qcheck "$TEST_DIR/a.qcow2"
    reads "$TEST_DIR/a.qcow2" qcow2 'read -P 0x5a 0 1M'
}

@test "resize: a qcow2 size that is not a multiple of 512 is refused, as qemu-img does" {
    require_tool qemu-img
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    cp "$TEST_DIR/a.qcow2" "$TEST_DIR/b.qcow2"
    run qemu-img resize "$TEST_DIR/b.qcow2" +1000
    assert_failure 1
    run "$DISKIMG" resize "$TEST_DIR/a.qcow2" +1000
    assert_failure 1
    [[ $(vsize "$TEST_DIR/a.qcow2") -eq $((4 * MiB)) ]]
}

@test "resize: v3 with internal snapshots: grow and shrink work, snapshots intact" {
    require_tool qemu-img qemu-io
    data "$TEST_DIR/a.qcow2"
    qemu-img snapshot -c snap "$TEST_DIR/a.qcow2"
    qemu-img convert -l snap -O raw "$TEST_DIR/a.qcow2" "$TEST_DIR/snap.before"
    run "$DISKIMG" resize "$TEST_DIR/a.qcow2" 8M
    assert_success
    qcheck "$TEST_DIR/a.qcow2"
    run "$DISKIMG" resize --shrink "$TEST_DIR/a.qcow2" 3M
    assert_success
    qcheck "$TEST_DIR/a.qcow2"
    run qemu-img snapshot -l "$TEST_DIR/a.qcow2"
    assert_output --partial snap
    qemu-img convert -l snap -O raw "$TEST_DIR/a.qcow2" "$TEST_DIR/snap.after"
    # The snapshot's own content (its first 3M at least) is unchanged.
    cmp -n $((3 * MiB)) "$TEST_DIR/snap.before" "$TEST_DIR/snap.after"
}

@test "resize: a v2 image with snapshots cannot be resized (exit 1), as qemu-img" {
    require_tool qemu-img
    "$DISKIMG" create -q -f qcow2 -o compat=0.10 "$TEST_DIR/a.qcow2" 4M
    qemu-img snapshot -c snap "$TEST_DIR/a.qcow2"
    cp "$TEST_DIR/a.qcow2" "$TEST_DIR/orig.qcow2"
    run qemu-img resize "$TEST_DIR/orig.qcow2" 8M
    assert_failure 1
    run --separate-stderr "$DISKIMG" resize "$TEST_DIR/a.qcow2" 8M
    assert_failure 1
    [[ "$stderr" == *snapshot* ]]
    cmp "$TEST_DIR/a.qcow2" "$TEST_DIR/orig.qcow2"
}

@test "resize: an overlay grown past its backing file reads zeroes there" {
    require_tool qemu-img qemu-io
    head -c 2M /dev/zero | tr '\0' 'b' >"$TEST_DIR/base.raw"
    (cd "$TEST_DIR" && "$DISKIMG" create -q -f qcow2 -b base.raw -F raw ov.qcow2)
    run "$DISKIMG" resize "$TEST_DIR/ov.qcow2" 4M
    assert_success
    qcheck "$TEST_DIR/ov.qcow2"
    reads "$TEST_DIR/ov.qcow2" qcow2 'read -P 0x62 0 2M' 'read -P 0 2M 2M'
}

@test "resize: raw files grow and shrink to the exact byte" {
    truncate -s 1M "$TEST_DIR/a.raw"
    printf 'hello' | dd of="$TEST_DIR/a.raw" conv=notrunc status=none
    run "$DISKIMG" resize -f raw "$TEST_DIR/a.raw" +1M
    assert_success
    [[ $(stat -c %s "$TEST_DIR/a.raw") -eq $((2 * MiB)) ]]
    run "$DISKIMG" resize "$TEST_DIR/a.raw" 3000001
    assert_success
    [[ $(stat -c %s "$TEST_DIR/a.raw") -eq 3000001 ]]
    run "$DISKIMG" resize "$TEST_DIR/a.raw" 1000
    assert_failure 1
    run "$DISKIMG" resize --shrink "$TEST_DIR/a.raw" 1000
    assert_success
    [[ $(stat -c %s "$TEST_DIR/a.raw") -eq 1000 ]]
    [[ $(head -c 5 "$TEST_DIR/a.raw") == hello ]]
}

@test "resize -q prints nothing" {
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 1M
    run "$DISKIMG" resize -q "$TEST_DIR/a.qcow2" 2M
    assert_success
    assert_output ""
}

@test "resize: errors exit 1, usage errors exit 2" {
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    run --separate-stderr "$DISKIMG" resize "$TEST_DIR/nope.qcow2" 1M
    assert_failure 1
    [[ "$stderr" == *"nope.qcow2: No such file or directory"* ]]
    run "$DISKIMG" resize --shrink "$TEST_DIR/a.qcow2" -- -8M
    assert_failure 1
    run "$DISKIMG" resize "$TEST_DIR/a.qcow2"
    assert_failure 2
    run "$DISKIMG" resize "$TEST_DIR/a.qcow2" abc
    assert_failure 2
    run "$DISKIMG" resize "$TEST_DIR/a.qcow2" +1Q
    assert_failure 2
    run "$DISKIMG" resize
    assert_failure 2
    run "$DISKIMG" resize --bogus "$TEST_DIR/a.qcow2" 1M
    assert_failure 2
}

@test "resize: vpc, vmdk, vhdx and vdi are refused with one message, except to their size" {
    local f img
    for f in vpc vmdk vhdx vdi; do
        img=$TEST_DIR/a.$f
        "$DISKIMG" create -q -f "$f" "$img" 4M
        run --separate-stderr "$DISKIMG" resize "$img" 8M
        assert_failure 1
        [[ "$stderr" == *"$f images cannot be resized (nor can qemu-img 7.2 resize them)"* ]]
        # to the size it has: nothing to do, and nothing changes
        local size before
        size=$("$DISKIMG" info --output=json "$img" | jq '."virtual-size"')
        before=$(sha256sum <"$img")
        run "$DISKIMG" resize "$img" "$size"
        assert_success
        [[ $(sha256sum <"$img") == "$before" ]]
    done
}
