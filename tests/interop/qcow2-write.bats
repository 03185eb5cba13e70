#!/usr/bin/env bats
# qcow2 writes: images that diskimg creates and writes must pass
# "qemu-img check" with no errors or leaks, and hold exactly what was
# written ("qemu-img compare" against a raw file given the same qemu-io
# commands).  Writes go through "diskimg serve" + qemu-io over NBD:
# pattern writes at random offsets (aligned and not), FUA, write -z,
# discard and flush, from a fixed seed.

load '../helpers'
load 'lib'
load 'qcow2-lib'

setup() { setup_test; }
teardown() { cleanup_test; }

MiB=$((1024 * 1024))

# random_ops IMAGE REF SEED COUNT [ops flags...] [-- serve options...]:
# the same deterministic qemu-io script goes to IMAGE through diskimg
# serve and straight into the raw file REF (same virtual size).
random_ops() {
    local img=$1 ref=$2 seed=$3 count=$4 flags=() cs size
    shift 4
    while [[ $# -gt 0 && "$1" != -- ]]; do
        flags+=("$1")
        shift
    done
    [[ "${1:-}" == -- ]] && shift
    cs=$((1 << $(qcow2util header "$img" cluster_bits)))
    size=$(stat -c %s "$ref")
    qcow2util ops "$seed" "$size" "$count" "$cs" "${flags[@]}" >"$TEST_DIR/ops.txt"
    ops_through_server "$img" "$TEST_DIR/ops.txt" -f qcow2 "$@" || return 1
    qemu_io_script raw "$ref" "$TEST_DIR/ops.txt"
}

# assert_written IMAGE REF: qemu-img check is clean, the content equals
# REF, and diskimg reads its own writes back the same way.
assert_written() {
    qemu_check_clean "$1" || return 1
    assert_compare "$1" "$2" || return 1
    serve_to_raw "$TEST_DIR/back.raw" "$1" || return 1
    cmp "$TEST_DIR/back.raw" "$2"
}

# new_pair OPTIONS SIZE: a fresh diskimg-created qcow2 (img.qcow2) and an
# all-zero raw reference (ref.raw) of SIZE bytes.
new_pair() {
    rm -f "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
    "$DISKIMG" create -q -f qcow2 ${1:+-o "$1"} "$TEST_DIR/img.qcow2" "$2"
    truncate -s "$2" "$TEST_DIR/ref.raw"
}

CREATE_VARIANTS=(
    ""
    compat=0.10
    compat=1.1
    cluster_size=512
    cluster_size=4k
    cluster_size=2M
    refcount_bits=1
    refcount_bits=8
    refcount_bits=64
    lazy_refcounts=on
    extended_l2=on
    extended_l2=on,cluster_size=16k
    compression_type=zstd
    preallocation=metadata
    preallocation=falloc
    preallocation=full
    compat=0.10,cluster_size=4k,preallocation=metadata
)

# info_core IMAGE: qemu-img info --output=json minus what may differ
# between two tools' files (file name, allocated bytes).
info_core() {
    qemu-img info --output=json "$1" | grep -v '"actual-size"\|"filename"'
}

@test "qcow2 write: diskimg create in every variant: qemu-img check clean, same as qemu-img's image" {
    require_tool qemu-img
    local o
    for o in "${CREATE_VARIANTS[@]}"; do
        rm -f "$TEST_DIR/ours.qcow2" "$TEST_DIR/theirs.qcow2"
        "$DISKIMG" create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/ours.qcow2" 5M
        qemu-img create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/theirs.qcow2" 5M
        qemu_check_clean "$TEST_DIR/ours.qcow2" || { echo "variant '$o'" >&2; return 1; }
        run qemu-img compare -f qcow2 -F qcow2 "$TEST_DIR/ours.qcow2" "$TEST_DIR/theirs.qcow2"
        [[ $status -eq 0 ]] || { echo "variant '$o': $output" >&2; return 1; }
        # Same header-level facts: version, cluster size, refcount bits,
        # feature bits, virtual size.
        if ! diff <(info_core "$TEST_DIR/theirs.qcow2") <(info_core "$TEST_DIR/ours.qcow2") >&2; then
            echo "variant '$o': qemu-img info differs" >&2
            return 1
        fi
    done
}

@test "qcow2 write: diskimg-created images take qemu-io writes and stay clean" {
    require_tool qemu-img qemu-io
    local o
    for o in "${CREATE_VARIANTS[@]}"; do
        rm -f "$TEST_DIR/ours.qcow2"
        "$DISKIMG" create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/ours.qcow2" 5M
        # qemu allocates L2 tables, data and refcount blocks in our file.
        qemu-io -f qcow2 -c 'write -P 1 0 300k' -c 'write -P 2 4M 1M' -c 'write -z 64k 64k' \
            "$TEST_DIR/ours.qcow2" >/dev/null
        qemu_check_clean "$TEST_DIR/ours.qcow2" || { echo "variant '$o'" >&2; return 1; }
        qemu-io -f qcow2 -r -c 'read -P 1 0 64k' -c 'read -P 0 64k 64k' -c 'read -P 2 4M 1M' \
            "$TEST_DIR/ours.qcow2" >"$TEST_DIR/io.log"
        ! grep -q 'failed\|error' "$TEST_DIR/io.log" || { echo "variant '$o'" >&2; cat "$TEST_DIR/io.log" >&2; return 1; }
    done
}

@test "qcow2 write: diskimg create with a backing file (-b -F, and SIZE from the backing)" {
    require_tool qemu-img
    make_pattern "$TEST_DIR/base.raw" $((3 * MiB))
    run "$DISKIMG" create -q -f qcow2 -b base.raw -F raw "$TEST_DIR/ov.qcow2"
    assert_success
    qemu_check_clean "$TEST_DIR/ov.qcow2"
    run qemu-img info --output=json "$TEST_DIR/ov.qcow2"
    assert_output --partial '"virtual-size": 3145728'
    assert_output --partial '"backing-filename": "base.raw"'
    assert_output --partial '"backing-filename-format": "raw"'
    run qemu-img compare -f qcow2 -F raw "$TEST_DIR/ov.qcow2" "$TEST_DIR/base.raw"
    assert_success
    # A larger overlay, v2.
    run "$DISKIMG" create -q -f qcow2 -o compat=0.10 -b base.raw -F raw "$TEST_DIR/ov2.qcow2" 4M
    assert_success
    qemu_check_clean "$TEST_DIR/ov2.qcow2"
    run qemu-img info --output=json "$TEST_DIR/ov2.qcow2"
    assert_output --partial '"virtual-size": 4194304'
    assert_output --partial '"compat": "0.10"'
}

@test "qcow2 write: random writes, FUA, write -z, discard, flush on a default image" {
    require_tool qemu-img qemu-io nbdcopy
    new_pair "" 4M
    random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 1 400
    assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
    # A second session on the same image (reopen, cached state gone).
    random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 2 300
    assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
}

@test "qcow2 write: random writes on extended_l2 images (subclusters), 64k and 16k clusters" {
    require_tool qemu-img qemu-io nbdcopy
    local o seed=10
    for o in extended_l2=on extended_l2=on,cluster_size=16k; do
        new_pair "$o" 4M
        random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" $((seed++)) 400
        assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" || { echo "variant $o" >&2; return 1; }
    done
}

@test "qcow2 write: 512-byte clusters: 12 MiB of data grows the refcount table" {
    require_tool qemu-img qemu-io nbdcopy
    new_pair cluster_size=512 12M
    local rt_before
    rt_before=$(qcow2util header "$TEST_DIR/img.qcow2" refcount_table_clusters)
    make_pattern "$TEST_DIR/ref.raw" $((12 * MiB))
    rm -f "$SOCK"
    start_server -f qcow2 "$TEST_DIR/img.qcow2"
    nbdcopy "$TEST_DIR/ref.raw" "$URI"
    server_exits_ok
    # One 512-byte refcount table cluster covers 64 blocks of 256
    # clusters: 8 MiB of file.  Past that the table had to grow.
    [[ $(qcow2util header "$TEST_DIR/img.qcow2" refcount_table_clusters) -gt $rt_before ]]
    random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 20 300
    assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
}

@test "qcow2 write: 512-byte clusters with 64-bit refcounts, random writes from empty" {
    require_tool qemu-img qemu-io nbdcopy
    new_pair cluster_size=512,refcount_bits=64 4M
    random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 21 400
    assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
}

@test "qcow2 write: refcount_bits=1 and 8, 4k and 2M clusters" {
    require_tool qemu-img qemu-io nbdcopy
    local o seed=30
    for o in refcount_bits=1 refcount_bits=8 cluster_size=4k cluster_size=2M; do
        new_pair "$o" 4M
        random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" $((seed++)) 250
        assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" || { echo "variant $o" >&2; return 1; }
    done
}

@test "qcow2 write: compat=0.10 (v2: no zero flag), random writes" {
    require_tool qemu-img qemu-io nbdcopy
    new_pair compat=0.10 4M
    random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 40 400
    assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
    [[ $(qcow2util header "$TEST_DIR/img.qcow2" version) -eq 2 ]]
}

@test "qcow2 write: lazy_refcounts image: clean after the server exits, dirty bit cleared" {
    require_tool qemu-img qemu-io nbdcopy
    new_pair lazy_refcounts=on 4M
    random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 50 300
    [[ $(( $(qcow2util header "$TEST_DIR/img.qcow2" incompatible_features) & 1 )) -eq 0 ]]
    assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
}

@test "qcow2 write: a dirty lazy_refcounts image left by a qemu crash is repaired on open" {
    require_tool qemu-img qemu-io nbdcopy
    qemu-img create -q -f qcow2 -o lazy_refcounts=on "$TEST_DIR/img.qcow2" 4M
    truncate -s 4M "$TEST_DIR/ref.raw"
    run bash -c 'ulimit -c 0; exec qemu-io -f qcow2 -c "write -P 0x5a 0 1M" -c abort "$1"' \
        _ "$TEST_DIR/img.qcow2"
    qemu-io -f raw -c 'write -P 0x5a 0 1M' "$TEST_DIR/ref.raw" >/dev/null
    run qemu-img check "$TEST_DIR/img.qcow2"
    assert_failure 2
    # Writing on top of the stale refcounts would corrupt the image
    # unless the server rebuilds them first.
    random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 51 300
    assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
}

@test "qcow2 write: preallocation=metadata and falloc images, random writes" {
    require_tool qemu-img qemu-io nbdcopy
    local o seed=60
    for o in preallocation=metadata preallocation=falloc; do
        new_pair "$o" 4M
        random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" $((seed++)) 300
        assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" || { echo "variant $o" >&2; return 1; }
    done
}

@test "qcow2 write: writes into compressed clusters (zlib and zstd) copy-on-write them" {
    require_tool qemu-img qemu-io nbdcopy
    local o seed=70
    make_pattern "$TEST_DIR/src.raw" $((4 * MiB))
    for o in compression_type=zlib compression_type=zstd; do
        rm -f "$TEST_DIR/img.qcow2"
        qemu-img convert -c -f raw -O qcow2 -o "$o" "$TEST_DIR/src.raw" "$TEST_DIR/img.qcow2"
        cp "$TEST_DIR/src.raw" "$TEST_DIR/ref.raw"
        # The first half only: the rest stays compressed.
        random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" $((seed++)) 200 max=$((2 * MiB))
        assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" || { echo "variant $o" >&2; return 1; }
        # Untouched clusters are still compressed.
        run qemu-img check "$TEST_DIR/img.qcow2"
        assert_output --regexp '[1-9][0-9.]*% compressed clusters'
    done
}

@test "qcow2 write: an overlay: backing content shows through where not written" {
    require_tool qemu-img qemu-io nbdcopy
    make_pattern "$TEST_DIR/base.raw" $((3 * MiB + 1000))
    cp "$TEST_DIR/base.raw" "$TEST_DIR/base.orig"
    "$DISKIMG" create -q -f qcow2 -b base.raw -F raw "$TEST_DIR/img.qcow2" 4M
    cp "$TEST_DIR/base.raw" "$TEST_DIR/ref.raw"
    truncate -s 4M "$TEST_DIR/ref.raw"
    # v3: discard and write -z leave zero clusters that hide the backing.
    # Writes below 2.5M; partial-cluster writes must copy the backing
    # around them.
    random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 80 300 max=$((5 * MiB / 2))
    assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
    cmp "$TEST_DIR/base.raw" "$TEST_DIR/base.orig"
    # The rest still comes from the backing file.
    run qemu-img map --output=json "$TEST_DIR/img.qcow2"
    assert_output --partial '"depth": 1'
}

@test "qcow2 write: overlays with subclusters (extended_l2) and 4k clusters: partial COW from the backing" {
    require_tool qemu-img qemu-io nbdcopy
    local o seed=85
    make_pattern "$TEST_DIR/base.raw" $((4 * MiB))
    for o in extended_l2=on extended_l2=on,cluster_size=16k cluster_size=4k; do
        rm -f "$TEST_DIR/img.qcow2"
        "$DISKIMG" create -q -f qcow2 -o "$o" -b base.raw -F raw "$TEST_DIR/img.qcow2"
        cp "$TEST_DIR/base.raw" "$TEST_DIR/ref.raw"
        random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" $((seed++)) 250 max=$((3 * MiB))
        assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" || { echo "variant $o" >&2; return 1; }
    done
}

@test "qcow2 write: a v2 overlay on a qcow2 backing, random writes (no discard)" {
    require_tool qemu-img qemu-io nbdcopy
    qemu-img create -q -f qcow2 "$TEST_DIR/base.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 0x61 0 3M' -c 'write -z 1M 64k' "$TEST_DIR/base.qcow2" >/dev/null
    "$DISKIMG" create -q -f qcow2 -o compat=0.10 -b base.qcow2 -F qcow2 "$TEST_DIR/img.qcow2"
    qemu-img convert -f qcow2 -O raw "$TEST_DIR/base.qcow2" "$TEST_DIR/ref.raw"
    random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 81 300 no-discard
    assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw"
    qemu_check_clean "$TEST_DIR/base.qcow2"
}

@test "qcow2 write: an image with internal snapshots: the snapshots stay unchanged" {
    require_tool qemu-img qemu-io nbdcopy
    local c seed=90
    for c in 1.1 0.10; do
        new_pair compat=$c 4M
        qemu-io -f qcow2 -c 'write -P 0x41 0 3M' -c 'write -z 1M 128k' "$TEST_DIR/img.qcow2" >/dev/null
        qemu-io -f raw -c 'write -P 0x41 0 3M' -c 'write -z 1M 128k' "$TEST_DIR/ref.raw" >/dev/null
        qemu-img snapshot -c snap1 "$TEST_DIR/img.qcow2"
        qemu-io -f qcow2 -c 'write -P 0x42 2M 1M' "$TEST_DIR/img.qcow2" >/dev/null
        qemu-io -f raw -c 'write -P 0x42 2M 1M' "$TEST_DIR/ref.raw" >/dev/null
        qemu-img snapshot -c snap2 "$TEST_DIR/img.qcow2"
        qemu-img convert -l snap1 -O raw "$TEST_DIR/img.qcow2" "$TEST_DIR/snap1.before"
        qemu-img convert -l snap2 -O raw "$TEST_DIR/img.qcow2" "$TEST_DIR/snap2.before"
        # Shared clusters (refcount 2, COPIED clear) must be copied on write.
        random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" $((seed++)) 300
        assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" || { echo "compat=$c" >&2; return 1; }
        rm -f "$TEST_DIR/snap1.after" "$TEST_DIR/snap2.after"
        qemu-img convert -l snap1 -O raw "$TEST_DIR/img.qcow2" "$TEST_DIR/snap1.after"
        qemu-img convert -l snap2 -O raw "$TEST_DIR/img.qcow2" "$TEST_DIR/snap2.after"
        cmp "$TEST_DIR/snap1.before" "$TEST_DIR/snap1.after"
        cmp "$TEST_DIR/snap2.before" "$TEST_DIR/snap2.after"
        run qemu-img snapshot -l "$TEST_DIR/img.qcow2"
        assert_output --partial snap1
        assert_output --partial snap2
        rm -f "$TEST_DIR"/snap*.before "$TEST_DIR"/snap*.after
    done
}

@test "qcow2 write: resize, then write past the old end (64k and 512-byte clusters)" {
    require_tool qemu-img qemu-io nbdcopy
    local o
    for o in "" cluster_size=512; do
        new_pair "$o" 4M
        qemu-io -f qcow2 -c 'write -P 0x71 0 4M' "$TEST_DIR/img.qcow2" >/dev/null
        qemu-io -f raw -c 'write -P 0x71 0 4M' "$TEST_DIR/ref.raw" >/dev/null
        run "$DISKIMG" resize "$TEST_DIR/img.qcow2" 20M
        assert_success
        truncate -s 20M "$TEST_DIR/ref.raw"
        qemu_check_clean "$TEST_DIR/img.qcow2"
        # Everything after the old end (with 512-byte clusters the L1
        # table grows from 128 to 640 entries and has to move).
        random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" 100 200 min=$((4 * MiB - 700))
        assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" || { echo "variant '$o'" >&2; return 1; }
        run qemu-img info --output=json "$TEST_DIR/img.qcow2"
        assert_output --partial '"virtual-size": 20971520'
    done
}

@test "qcow2 write: random writes with a tiny L2 cache (--l2-cache-size=1), 512-byte and 64k clusters" {
    require_tool qemu-img qemu-io nbdcopy
    local o seed=120
    for o in cluster_size=512 "" extended_l2=on; do
        new_pair "$o" 4M
        random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" $((seed++)) 300 -- --l2-cache-size=1
        assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" || { echo "variant '$o'" >&2; return 1; }
    done
}

@test "qcow2 write: random writes with --cache=none, writethrough, unsafe and --aio=io_uring" {
    require_tool qemu-img qemu-io nbdcopy
    local m seed=110
    for m in --cache=none --cache=writethrough --cache=unsafe --cache=directsync --aio=io_uring; do
        new_pair "" 4M
        random_ops "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" $((seed++)) 200 -- "$m"
        assert_written "$TEST_DIR/img.qcow2" "$TEST_DIR/ref.raw" || { echo "serve $m" >&2; return 1; }
    done
}
