#!/usr/bin/env bats
# diskimg check: the same verdict and exit status as qemu-img check
# (0 clean, 2 corruptions, 3 leaks only, 63 no checks for the format,
# 1 the check could not run) on clean, leaking, corrupted, dirty and raw
# images; -r leaks / -r all repair them so that qemu-img check is clean;
# output formats; errors.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() { cleanup_test; }

QCOW2UTIL=$BATS_TEST_DIRNAME/../interop/qcow2util.py

qcow2util() {
    "$PYTHON3" "$QCOW2UTIL" "$@"
}

# image IMAGE [create options]: a 4 MiB qcow2 (qemu-img) with 256k of data
# in clusters 5..8 (cluster 4 is the L2 table).
image() {
    rm -f "$1"
    qemu-img create -q -f qcow2 ${2:+-o "$2"} "$1" 4M
    qemu-io -f qcow2 -c 'write -P 0x3c 0 256k' "$1" >/dev/null
}

# same_check [check options...] FILE: diskimg check and qemu-img check
# exit with the same status and print the same to stdout and stderr
# (the fragmentation figure aside: see its own test).
same_check() {
    local ours theirs rc_o=0 rc_t=0
    ours=$("$DISKIMG" check "$@" 2>&1) || rc_o=$?
    theirs=$(qemu-img check "$@" 2>&1) || rc_t=$?
    ours=$(sed 's/[0-9.]*% fragmented/N% fragmented/' <<<"$ours")
    theirs=$(sed 's/[0-9.]*% fragmented/N% fragmented/' <<<"$theirs")
    if [[ $rc_o -ne $rc_t || "$ours" != "$theirs" ]]; then
        echo "check $*: diskimg exit $rc_o, qemu-img exit $rc_t" >&2
        diff <(echo "$theirs") <(echo "$ours") >&2 || true
        return 1
    fi
    CHECK_STATUS=$rc_o
}

# same_check_json FILE: the JSON reports are the same object (key order
# and fragmented-clusters aside), with the same exit status.
same_check_json() {
    local rc_o=0 rc_t=0
    "$DISKIMG" check --output=json "$1" >"$TEST_DIR/ours.json" 2>/dev/null || rc_o=$?
    qemu-img check --output=json "$1" >"$TEST_DIR/theirs.json" 2>/dev/null || rc_t=$?
    [[ $rc_o -eq $rc_t ]] || { echo "json: exit $rc_o vs qemu-img $rc_t" >&2; return 1; }
    "$PYTHON3" -c 'import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for d in a, b:
    d.pop("fragmented-clusters", None)
if a != b:
    sys.exit("diskimg: %s\nqemu-img: %s" % (a, b))' "$TEST_DIR/ours.json" "$TEST_DIR/theirs.json"
}

# qemu_clean FILE: qemu-img check says 0.
qemu_clean() {
    run qemu-img check "$1"
    [[ $status -eq 0 ]] || { echo "qemu-img check after repair: $status: $output" >&2; return 1; }
}

@test "check --help" {
    run "$DISKIMG" check --help
    assert_success
    assert_output --partial "Usage: diskimg check"
    assert_output --partial "-r, --repair"
    assert_output --partial "63"
}

@test "check: a clean image: exit 0, same report as qemu-img (many variants)" {
    require_tool qemu-img qemu-io
    local o
    for o in "" compat=0.10 cluster_size=512 cluster_size=2M refcount_bits=1 refcount_bits=64 \
             extended_l2=on lazy_refcounts=on preallocation=metadata; do
        image "$TEST_DIR/a.qcow2" "$o"
        same_check "$TEST_DIR/a.qcow2" || { echo "variant '$o'" >&2; return 1; }
        [[ $CHECK_STATUS -eq 0 ]]
        same_check_json "$TEST_DIR/a.qcow2"
    done
    run "$DISKIMG" check "$TEST_DIR/a.qcow2"
    assert_line "No errors were found on the image."
}

@test "check: the fragmentation figure equals qemu-img's (512-byte clusters, data across L2 tables)" {
    require_tool qemu-img qemu-io
    # qemu-img counts contiguity within each L2 table, and every compressed
    # cluster as fragmented: the figures must be the same.
    local f theirs ours
    image "$TEST_DIR/a.qcow2" cluster_size=512
    qemu-img convert -c -O qcow2 -o cluster_size=4k "$TEST_DIR/a.qcow2" "$TEST_DIR/c.qcow2"
    qemu-io -f qcow2 -c 'write -P 1 1M 64k' "$TEST_DIR/c.qcow2" >/dev/null
    for f in a c; do
        theirs=$(qemu-img check "$TEST_DIR/$f.qcow2" | grep allocated)
        ours=$("$DISKIMG" check "$TEST_DIR/$f.qcow2" | grep allocated)
        echo "qemu-img: $theirs / diskimg: $ours"
        [[ -n "$ours" && "$ours" == "$theirs" ]]
    done
}

@test "check: an image without data clusters prints no statistics line, as qemu-img" {
    require_tool qemu-img
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    same_check "$TEST_DIR/a.qcow2"
    run "$DISKIMG" check "$TEST_DIR/a.qcow2"
    refute_output --partial "allocated,"
    assert_line "No errors were found on the image."
}

@test "check: clean images that diskimg made, with snapshots, compressed, with a backing file" {
    require_tool qemu-img qemu-io
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    qemu-io -f qcow2 -c 'write 1M 100k' "$TEST_DIR/a.qcow2" >/dev/null
    same_check "$TEST_DIR/a.qcow2"
    image "$TEST_DIR/s.qcow2"
    qemu-img snapshot -c one "$TEST_DIR/s.qcow2"
    qemu-io -f qcow2 -c 'write -P 1 64k 64k' "$TEST_DIR/s.qcow2" >/dev/null
    same_check "$TEST_DIR/s.qcow2"
    head -c 2M /dev/zero | tr '\0' 'q' >"$TEST_DIR/src.raw"
    qemu-img convert -c -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
    same_check "$TEST_DIR/c.qcow2"
    same_check_json "$TEST_DIR/c.qcow2"
    (cd "$TEST_DIR" && "$DISKIMG" create -q -f qcow2 -b c.qcow2 -F qcow2 ov.qcow2)
    qemu-io -f qcow2 -c 'write 1000 1000' "$TEST_DIR/ov.qcow2" >/dev/null
    same_check "$TEST_DIR/ov.qcow2"
}

@test "check: a leaked cluster: exit 3 like qemu-img; -r leaks fixes it" {
    require_tool qemu-img qemu-io
    image "$TEST_DIR/a.qcow2"
    qcow2util bump "$TEST_DIR/a.qcow2" 0 1  # the header cluster: refcount 2
    same_check "$TEST_DIR/a.qcow2"
    [[ $CHECK_STATUS -eq 3 ]]
    same_check_json "$TEST_DIR/a.qcow2"
    run --separate-stderr "$DISKIMG" check "$TEST_DIR/a.qcow2"
    [[ "$stderr" == *"Leaked cluster 0 refcount=2 reference=1"* ]]
    assert_output --partial "1 leaked clusters were found on the image."
    cp "$TEST_DIR/a.qcow2" "$TEST_DIR/b.qcow2"
    run "$DISKIMG" check -r leaks "$TEST_DIR/a.qcow2"
    assert_success
    assert_output --partial "1 leaked clusters"
    assert_output --partial "No errors were found on the image."
    qemu_clean "$TEST_DIR/a.qcow2"
    # The data is untouched.
    qemu-io -f qcow2 -r -c 'read -P 0x3c 0 256k' "$TEST_DIR/a.qcow2" >/dev/null
    # -r all fixes leaks too.
    run "$DISKIMG" check -r all "$TEST_DIR/b.qcow2"
    assert_success
    qemu_clean "$TEST_DIR/b.qcow2"
}

@test "check: a leaked free cluster, with 1-, 16- and 64-bit refcounts and 512-byte clusters" {
    require_tool qemu-img qemu-io
    local o host cs
    for o in "" refcount_bits=1 refcount_bits=64 cluster_size=512; do
        image "$TEST_DIR/a.qcow2" "$o"
        cs=$((1 << $(qcow2util header "$TEST_DIR/a.qcow2" cluster_bits)))
        # Free the first data cluster, in the middle of the file (qemu
        # sets its refcount to 0), then count it again: nothing uses it.
        host=$(qemu-img map --output=json "$TEST_DIR/a.qcow2" |
               sed -n 's/.*"offset": \([0-9]*\).*/\1/p' | head -1)
        qemu-io -f qcow2 -c "discard 0 $cs" "$TEST_DIR/a.qcow2" >/dev/null
        qcow2util bump "$TEST_DIR/a.qcow2" $((host / cs)) 1
        same_check "$TEST_DIR/a.qcow2" || { echo "variant '$o'" >&2; return 1; }
        [[ $CHECK_STATUS -eq 3 ]]
        run "$DISKIMG" check -r leaks "$TEST_DIR/a.qcow2"
        assert_success
        qemu_clean "$TEST_DIR/a.qcow2"
    done
}

@test "check: a refcount too high on a data cluster (leak + OFLAG_COPIED): exit 2; -r all fixes it" {
    require_tool qemu-img qemu-io
    image "$TEST_DIR/a.qcow2"
    qcow2util bump "$TEST_DIR/a.qcow2" 5 1
    same_check "$TEST_DIR/a.qcow2"
    [[ $CHECK_STATUS -eq 2 ]]
    same_check_json "$TEST_DIR/a.qcow2"
    run "$DISKIMG" check -r all "$TEST_DIR/a.qcow2"
    assert_success
    qemu_clean "$TEST_DIR/a.qcow2"
    qemu-io -f qcow2 -r -c 'read -P 0x3c 0 256k' "$TEST_DIR/a.qcow2" >/dev/null
}

@test "check: a refcount of 0 on a used cluster (corruption): exit 2; -r leaks does not claim success; -r all fixes it" {
    require_tool qemu-img qemu-io
    image "$TEST_DIR/a.qcow2"
    qcow2util bump "$TEST_DIR/a.qcow2" 6 -1
    same_check "$TEST_DIR/a.qcow2"
    [[ $CHECK_STATUS -eq 2 ]]
    run --separate-stderr "$DISKIMG" check "$TEST_DIR/a.qcow2"
    [[ "$stderr" == *"ERROR cluster 6 refcount=0 reference=1"* ]]
    run "$DISKIMG" check -r leaks "$TEST_DIR/a.qcow2"
    [[ $status -ne 0 && $status -ne 3 ]]
    run qemu-img check "$TEST_DIR/a.qcow2"
    assert_failure 2
    run "$DISKIMG" check -r all "$TEST_DIR/a.qcow2"
    assert_success
    qemu_clean "$TEST_DIR/a.qcow2"
    qemu-io -f qcow2 -r -c 'read -P 0x3c 0 256k' "$TEST_DIR/a.qcow2" >/dev/null
}

@test "check: a dirty image (lazy refcounts + crash): exit 2 like qemu-img; -r all rebuilds" {
    require_tool qemu-img qemu-io
    qemu-img create -q -f qcow2 -o lazy_refcounts=on "$TEST_DIR/d.qcow2" 4M
    run bash -c 'ulimit -c 0; exec qemu-io -f qcow2 -c "write -P 7 0 1M" -c abort "$1"' _ "$TEST_DIR/d.qcow2"
    run qemu-img check "$TEST_DIR/d.qcow2"
    assert_failure 2
    same_check "$TEST_DIR/d.qcow2"
    [[ $CHECK_STATUS -eq 2 ]]
    same_check_json "$TEST_DIR/d.qcow2"
    run "$DISKIMG" check -r all "$TEST_DIR/d.qcow2"
    assert_success
    assert_output --partial "No errors were found on the image."
    qemu_clean "$TEST_DIR/d.qcow2"
    run qemu-img info --output=json "$TEST_DIR/d.qcow2"
    assert_output --partial '"dirty-flag": false'
    qemu-io -f qcow2 -r -c 'read -P 7 0 1M' "$TEST_DIR/d.qcow2" >/dev/null
}

@test "check: a raw image: exit 63, as qemu-img" {
    require_tool qemu-img
    truncate -s 1M "$TEST_DIR/a.raw"
    run qemu-img check -f raw "$TEST_DIR/a.raw"
    assert_failure 63
    run --separate-stderr "$DISKIMG" check -f raw "$TEST_DIR/a.raw"
    assert_failure 63
    [[ "$stderr" == *"does not support checks"* ]]
    run "$DISKIMG" check "$TEST_DIR/a.raw"
    assert_failure 63
    run "$DISKIMG" check -r all "$TEST_DIR/a.raw"
    assert_failure 63
}

@test "check: an image that cannot be opened: exit 1, as qemu-img" {
    require_tool qemu-img
    run "$DISKIMG" check "$TEST_DIR/nope.qcow2"
    assert_failure 1
    qemu-img create -q -f qcow2 "$TEST_DIR/u.qcow2" 1M
    printf '\x80' | dd of="$TEST_DIR/u.qcow2" bs=1 seek=72 conv=notrunc status=none
    run qemu-img check "$TEST_DIR/u.qcow2"
    assert_failure 1
    run --separate-stderr "$DISKIMG" check "$TEST_DIR/u.qcow2"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    truncate -s 1M "$TEST_DIR/a.raw"
    run "$DISKIMG" check -f qcow2 "$TEST_DIR/a.raw"
    assert_failure 1
}

@test "check -q prints nothing; the status still tells" {
    require_tool qemu-img qemu-io
    image "$TEST_DIR/a.qcow2"
    run "$DISKIMG" check -q "$TEST_DIR/a.qcow2"
    assert_success
    assert_output ""
    qcow2util bump "$TEST_DIR/a.qcow2" 0 1
    run "$DISKIMG" check -q "$TEST_DIR/a.qcow2"
    assert_failure 3
    assert_output ""
}

@test "check: usage errors exit 1, as qemu-img (2 would mean corruptions)" {
    truncate -s 1M "$TEST_DIR/a.raw"
    run "$DISKIMG" check
    assert_failure 1
    run "$DISKIMG" check -r bogus "$TEST_DIR/a.raw"
    assert_failure 1
    run "$DISKIMG" check --output=xml "$TEST_DIR/a.raw"
    assert_failure 1
    run "$DISKIMG" check "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
    assert_failure 1
}
