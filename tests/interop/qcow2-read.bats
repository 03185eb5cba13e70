#!/usr/bin/env bats
# qcow2 reads: images that qemu-img/qemu-io make, in many variants, read
# through "diskimg serve" + nbdcopy exactly as "qemu-img convert -O raw"
# reads them; internal snapshots (-l); backing chains; block status and
# qemu:allocation-depth.

load '../helpers'
load 'lib'
load 'qcow2-lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# fill_image IMAGE: a fixed mix of what qemu writes into a 4 MiB qcow2:
# full and partial clusters, unaligned writes, zero clusters over data
# (ZERO_ALLOC), unmapped zeroes (ZERO_PLAIN), discards, zeroes on
# unallocated space, and the last sector.
fill_image() {
    qemu-io -f qcow2 \
        -c 'write -P 0x11 0 102400' \
        -c 'write -P 0x22 300000 5000' \
        -c 'write -P 0x33 1048576 524288' \
        -c 'write -z 1114112 65536' \
        -c 'write -z -u 1310720 65536' \
        -c 'discard 1441792 65536' \
        -c 'write -z 2097152 131072' \
        -c 'write -P 0x44 3144728 1000' \
        -c 'write -P 0x55 4193792 512' \
        "$1" >/dev/null
}

# variant OPTIONS: a 4 MiB qcow2 made by qemu-img with OPTIONS, filled.
variant() {
    rm -f "$TEST_DIR/v.qcow2"
    qemu-img create -q -f qcow2 ${1:+-o "$1"} "$TEST_DIR/v.qcow2" 4M
    fill_image "$TEST_DIR/v.qcow2"
}

# check_variants OPTIONS...: each variant reads as qemu reads it.
check_variants() {
    local o
    for o in "$@"; do
        variant "$o"
        assert_export_equals_qemu "$TEST_DIR/v.qcow2" || {
            echo "variant '-o $o' reads differently" >&2
            return 1
        }
    done
}

@test "qcow2 read: compat=0.10 (v2) and compat=1.1 (v3)" {
    require_tool qemu-img qemu-io nbdcopy
    check_variants compat=1.1 compat=0.10
    [[ $(qcow2util header "$TEST_DIR/v.qcow2" version) -eq 2 ]]
    # What fill_image wrote is there (the reference is not trivially empty).
    range_is "$TEST_DIR/ours.raw" 0 102400 11
    range_is "$TEST_DIR/ours.raw" 1048576 65536 33
    range_is "$TEST_DIR/ours.raw" 1114112 65536 00
    range_is "$TEST_DIR/ours.raw" 4193792 512 55
}

@test "qcow2 read: cluster sizes 512, 4k, 64k, 2M" {
    require_tool qemu-img qemu-io nbdcopy
    check_variants cluster_size=512 cluster_size=4k cluster_size=64k cluster_size=2M
}

@test "qcow2 read: refcount_bits 1, 8, 64 (and 2, 32)" {
    require_tool qemu-img qemu-io nbdcopy
    check_variants refcount_bits=1 refcount_bits=8 refcount_bits=64 refcount_bits=2 \
        refcount_bits=32
}

@test "qcow2 read: lazy_refcounts, clean and left dirty by a crash" {
    require_tool qemu-img qemu-io nbdcopy
    check_variants lazy_refcounts=on
    qemu-img create -q -f qcow2 -o lazy_refcounts=on "$TEST_DIR/d.qcow2" 4M
    run bash -c 'ulimit -c 0; exec qemu-io -f qcow2 -c "write -P 0x66 65536 1M" \
        -c "write -P 0x67 3M 4096" -c abort "$1"' _ "$TEST_DIR/d.qcow2"
    run qemu-img info --output=json "$TEST_DIR/d.qcow2"
    assert_output --partial '"dirty-flag": true'
    # A read-only export of a dirty image reads what was written.
    assert_export_equals_qemu "$TEST_DIR/d.qcow2" -- -U
    range_is "$TEST_DIR/ours.raw" 65536 1048576 66
    range_is "$TEST_DIR/ours.raw" 3145728 4096 67
}

@test "qcow2 read: extended_l2 with mixed subcluster bitmaps (16k, 64k, 2M clusters)" {
    require_tool qemu-img qemu-io nbdcopy
    local cs
    for cs in 16k 64k 2M; do
        rm -f "$TEST_DIR/x.qcow2"
        qemu-img create -q -f qcow2 -o extended_l2=on,cluster_size=$cs "$TEST_DIR/x.qcow2" 4M
        # Partial subclusters, unaligned ones, zeroed subclusters inside
        # allocated clusters and in unallocated ones, unmapped zeroes,
        # a discard, and rewrites of zeroed subclusters.
        qemu-io -f qcow2 \
            -c 'write -P 0x01 512 512' \
            -c 'write -P 0x02 3000 7000' \
            -c 'write -z 4096 4096' \
            -c 'write -P 0x03 1048576 3072' \
            -c 'write -z 1050624 2048' \
            -c 'write -P 0x04 1310720 262144' \
            -c 'write -z 1327104 16384' \
            -c 'write -z -u 1376256 32768' \
            -c 'write -P 0x05 1380000 100' \
            -c 'discard 1441792 65536' \
            -c 'write -z 2162688 8192' \
            -c 'write -P 0x06 2170000 777' \
            -c 'write -P 0x07 4190000 4304' \
            "$TEST_DIR/x.qcow2" >/dev/null
        run qemu-img info --output=json "$TEST_DIR/x.qcow2"
        assert_output --partial '"extended-l2": true'
        assert_export_equals_qemu "$TEST_DIR/x.qcow2" || {
            echo "extended_l2 cluster_size=$cs reads differently" >&2
            return 1
        }
    done
}

# make_source FILE: 4 MiB mixing compressible text, random data and zeroes.
make_compress_source() {
    make_pattern "$1" $((2 * 1024 * 1024))
    truncate -s 4M "$1"
    head -c 1048576 /dev/urandom | dd of="$1" bs=64k seek=40 conv=notrunc status=none
    dd if=/dev/zero of="$1" bs=4k seek=100 count=3 conv=notrunc status=none
}

@test "qcow2 read: compressed clusters, zlib and zstd, several cluster sizes" {
    require_tool qemu-img nbdcopy
    make_compress_source "$TEST_DIR/src.raw"
    local o
    for o in cluster_size=64k compression_type=zstd cluster_size=512 cluster_size=4k \
             cluster_size=2M compression_type=zstd,cluster_size=4k; do
        rm -f "$TEST_DIR/c.qcow2"
        qemu-img convert -c -f raw -O qcow2 -o "$o" "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
        run qemu-img check "$TEST_DIR/c.qcow2"
        assert_output --regexp '[1-9][0-9.]*% compressed clusters'
        serve_to_raw "$TEST_DIR/ours.raw" "$TEST_DIR/c.qcow2"
        cmp "$TEST_DIR/src.raw" "$TEST_DIR/ours.raw" || {
            echo "compressed image ($o) reads differently" >&2
            return 1
        }
    done
}

@test "qcow2 read: compressed clusters partly overwritten (COW of compressed data)" {
    require_tool qemu-img qemu-io nbdcopy
    make_compress_source "$TEST_DIR/src.raw"
    qemu-img convert -c -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
    qemu-io -f qcow2 -c 'write -P 0x77 70000 1000' -c 'write -z 200000 4096' \
        -c 'discard 327680 65536' -c 'write -P 0x78 1966080 131072' "$TEST_DIR/c.qcow2" >/dev/null
    assert_export_equals_qemu "$TEST_DIR/c.qcow2"
}

@test "qcow2 read: preallocation metadata, falloc, full (written and unwritten parts)" {
    require_tool qemu-img qemu-io nbdcopy
    check_variants preallocation=metadata preallocation=falloc preallocation=full
}

@test "qcow2 read: zero clusters hide a backing file (write -z, write -z -u, discard)" {
    require_tool qemu-img qemu-io nbdcopy
    make_pattern "$TEST_DIR/base.raw" $((4 * 1024 * 1024))
    qemu-img create -q -f qcow2 -b base.raw -F raw "$TEST_DIR/ov.qcow2"
    qemu-io -f qcow2 -c 'write -P 0x11 0 131072' -c 'write -z 65536 65536' \
        -c 'write -z -u 1048576 65536' -c 'discard 2097152 131072' \
        -c 'write -z 3000000 5000' "$TEST_DIR/ov.qcow2" >/dev/null
    assert_export_equals_qemu "$TEST_DIR/ov.qcow2"
    range_is "$TEST_DIR/ours.raw" 65536 65536 00
    range_is "$TEST_DIR/ours.raw" 1048576 65536 00
    range_is "$TEST_DIR/ours.raw" 2097152 131072 00
    range_is "$TEST_DIR/ours.raw" 3000000 5000 00
    # ...and the rest is the backing file.
    cmp -i 131072 -n $((1048576 - 131072)) "$TEST_DIR/base.raw" "$TEST_DIR/ours.raw"
    cmp -i 1114112 -n $((2097152 - 1114112)) "$TEST_DIR/base.raw" "$TEST_DIR/ours.raw"
}

# make_chain: raw base (3000000 bytes, unaligned) <- sub/mid.qcow2 (3.5M)
# <- top.qcow2 (5M), with relative backing names; the base is shorter
# than mid, mid shorter than top.
make_chain() {
    mkdir -p "$TEST_DIR/sub"
    make_pattern "$TEST_DIR/sub/base.raw" 3000000
    (cd "$TEST_DIR/sub" && qemu-img create -q -f qcow2 -b base.raw -F raw mid.qcow2 3584k)
    qemu-io -f qcow2 -c 'write -P 0x22 1048576 524288' -c 'write -z 2097152 65536' \
        -c 'write -P 0x23 2995000 10000' -c 'write -P 0x24 3500000 1000' \
        "$TEST_DIR/sub/mid.qcow2" >/dev/null
    (cd "$TEST_DIR" && qemu-img create -q -f qcow2 -b sub/mid.qcow2 -F qcow2 top.qcow2 5M)
    qemu-io -f qcow2 -c 'write -P 0x33 1310720 524288' -c 'write -z -u 0 65536' \
        -c 'write -P 0x34 2999000 500' -c 'write -P 0x35 4194304 4096' \
        "$TEST_DIR/top.qcow2" >/dev/null
}

@test "qcow2 read: backing chain of 3 (raw <- qcow2 <- qcow2), relative names, shorter backings" {
    require_tool qemu-img qemu-io nbdcopy
    make_chain
    # Served from another working directory: names resolve next to each image.
    cd /
    assert_export_equals_qemu "$TEST_DIR/top.qcow2"
    [[ $(stat -c %s "$TEST_DIR/ours.raw") -eq $((5 * 1024 * 1024)) ]]
    # Past the 3000000-byte base and past mid's 3.5M: zeroes, not garbage.
    range_is "$TEST_DIR/ours.raw" 3005000 $((3500000 - 3005000)) 00
    range_is "$TEST_DIR/ours.raw" 3670016 $((4194304 - 3670016)) 00
    range_is "$TEST_DIR/ours.raw" 4198400 $((5242880 - 4198400)) 00
    # The middle layer alone, too.
    assert_export_equals_qemu "$TEST_DIR/sub/mid.qcow2"
}

@test "qcow2 read: a missing backing file is an error, not zeroes" {
    require_tool qemu-img
    make_chain
    rm "$TEST_DIR/sub/base.raw"
    run --separate-stderr "$DISKIMG" serve -r -k "$SOCK" "$TEST_DIR/top.qcow2"
    assert_failure 1
    [[ "$stderr" == *base.raw* ]]
}

@test "qcow2 read: internal snapshots with serve -l NAME / -l ID equal qemu-img convert -l" {
    require_tool qemu-img qemu-io nbdcopy
    local c
    for c in 1.1 0.10; do
        rm -f "$TEST_DIR/s.qcow2"
        qemu-img create -q -f qcow2 -o compat=$c "$TEST_DIR/s.qcow2" 4M
        qemu-io -f qcow2 -c 'write -P 1 0 2M' -c 'write -P 9 3M 4096' "$TEST_DIR/s.qcow2" >/dev/null
        qemu-img snapshot -c first "$TEST_DIR/s.qcow2"
        qemu-io -f qcow2 -c 'write -P 2 1M 2M' -c 'discard 3M 64k' "$TEST_DIR/s.qcow2" >/dev/null
        qemu-img snapshot -c second "$TEST_DIR/s.qcow2"
        qemu-io -f qcow2 -c 'write -P 3 0 4M' "$TEST_DIR/s.qcow2" >/dev/null
        assert_export_equals_qemu "$TEST_DIR/s.qcow2" -l first -- -l first
        range_is "$TEST_DIR/ours.raw" 0 2097152 01
        range_is "$TEST_DIR/ours.raw" 3145728 4096 09
        assert_export_equals_qemu "$TEST_DIR/s.qcow2" -l second -- -l second
        range_is "$TEST_DIR/ours.raw" 1048576 2097152 02
        assert_export_equals_qemu "$TEST_DIR/s.qcow2" -l 1 -- -l first
        assert_export_equals_qemu "$TEST_DIR/s.qcow2" -l 2 -- -l second
        # The active layer.
        assert_export_equals_qemu "$TEST_DIR/s.qcow2"
        range_is "$TEST_DIR/ours.raw" 0 4194304 03
    done
}

@test "qcow2 read: serve -l of an unknown snapshot fails (exit 1, names it)" {
    qemu-img create -q -f qcow2 "$TEST_DIR/s.qcow2" 1M
    qemu-img snapshot -c first "$TEST_DIR/s.qcow2"
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" -l nosuch "$TEST_DIR/s.qcow2"
    assert_failure 1
    [[ "$stderr" == *nosuch* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
}

# The chain for the map tests: cluster-aligned regions only.
#   base.raw 3M of data; mid.qcow2 4M: data 1M..1.5M, zero 2M..2M+64k;
#   top.qcow2 5M: data 1.25M..1.75M, zero 0..64k.
make_map_chain() {
    make_pattern "$TEST_DIR/base.raw" $((3 * 1024 * 1024))
    qemu-img create -q -f qcow2 -b base.raw -F raw "$TEST_DIR/mid.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 0x22 1M 512k' -c 'write -z 2M 64k' "$TEST_DIR/mid.qcow2" >/dev/null
    qemu-img create -q -f qcow2 -b mid.qcow2 -F qcow2 "$TEST_DIR/top.qcow2" 5M
    qemu-io -f qcow2 -c 'write -P 0x33 1280k 512k' -c 'write -z -u 0 64k' "$TEST_DIR/top.qcow2" >/dev/null
}

@test "qcow2 read: nbdinfo --map (base:allocation) of a backing chain" {
    require_tool qemu-img qemu-io nbdinfo
    make_map_chain
    start_server -r -t "$TEST_DIR/top.qcow2"
    run nbdinfo --map "$URI"
    assert_success
    assert_line --regexp '^ +0 +65536 +3 +hole,zero$'
    assert_line --regexp '^ +65536 +2031616 +0 +data$'
    assert_line --regexp '^ +2097152 +65536 +3 +hole,zero$'
    assert_line --regexp '^ +2162688 +983040 +0 +data$'
    assert_line --regexp '^ +3145728 +2097152 +3 +hole,zero$'
    [[ ${#lines[@]} -eq 5 ]]
}

@test "qcow2 read: nbdinfo --map=qemu:allocation-depth of a backing chain" {
    require_tool qemu-img qemu-io nbdinfo
    make_map_chain
    start_server -r -t "$TEST_DIR/top.qcow2"
    run nbdinfo --map=qemu:allocation-depth "$URI"
    assert_success
    assert_line --regexp '^ +0 +65536 +1 +local$'
    assert_line --regexp '^ +65536 +983040 +3 +backing depth 3$'
    assert_line --regexp '^ +1048576 +262144 +2 +backing depth 2$'
    assert_line --regexp '^ +1310720 +524288 +1 +local$'
    assert_line --regexp '^ +1835008 +262144 +3 +backing depth 3$'
    assert_line --regexp '^ +2097152 +65536 +2 +backing depth 2$'
    # past base.raw's end (3M) the zeroes still belong to base.raw (depth 3)
    # up to mid's end (4M), then to mid (depth 2): what qemu-nbd -A reports
    assert_line --regexp '^ +2162688 +2031616 +3 +backing depth 3$'
    assert_line --regexp '^ +4194304 +1048576 +2 +backing depth 2$'
    [[ ${#lines[@]} -eq 8 ]]
}

@test "qcow2 read: allocation depth past a shorter backing file is what qemu-nbd reports" {
    require_tool qemu-img qemu-io qemu-nbd nbdinfo
    make_map_chain
    start_server -r -t "$TEST_DIR/top.qcow2"
    run nbdinfo --map=qemu:allocation-depth "$URI"
    assert_success
    local ours=$output
    stop_server
    # qemu-nbd -A on the same chain, on its own socket, stopped by PID.
    qemu-nbd -r -A -t -f qcow2 -k "$TEST_DIR/q.sock" "$TEST_DIR/top.qcow2" 2>>"$SERVER_LOG" &
    SERVER_PID=$!
    wait_until 10 test -S "$TEST_DIR/q.sock"
    run nbdinfo --map=qemu:allocation-depth "nbd+unix:///?socket=$TEST_DIR/q.sock"
    assert_success
    local theirs=$output
    stop_server
    # qemu counts the zeroes past a short layer's end as allocated in that
    # layer: 3M..4M in base.raw (depth 3), 4M..5M in mid (depth 2).
    grep -Eq '^ +4194304 +1048576 +2 +backing depth 2$' <<<"$theirs"
    if [[ "$ours" != "$theirs" ]]; then
        diff <(echo "$theirs") <(echo "$ours") >&2 || true
        return 1
    fi
}
