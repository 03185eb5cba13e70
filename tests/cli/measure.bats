#!/usr/bin/env bats
# diskimg measure: the same numbers as qemu-img measure (human and JSON,
# diffed) for --size and for sources of every kind measure counts
# differently -- raw sparse and full, qcow2 with data, zero and compressed
# clusters, snapshots (-l), persistent bitmaps, v2, a backing chain,
# metadata preallocation, the delivery formats -- into raw and qcow2 with
# every option that changes the numbers; the promise checked by converting
# (the file fits in 'required'); for vpc, vhdx, vdi and vmdk, which
# qemu-img cannot measure, diskimg's own numbers against the files its
# convert writes; the errors.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() {
    # the qemu-nbd this test started, by its PID
    [[ ! -s $TEST_DIR/qemu-nbd.pid ]] || kill "$(cat "$TEST_DIR/qemu-nbd.pid")" 2>/dev/null || true
    cleanup_test
}

# same_measure ARGS...: diskimg measure and qemu-img measure print the same
# and exit alike, human and JSON.
same_measure() {
    local out ours theirs rc_o rc_t
    for out in human json; do
        rc_o=0
        rc_t=0
        ours=$("$DISKIMG" measure --output=$out "$@" 2>/dev/null) || rc_o=$?
        theirs=$(qemu-img measure --output=$out "$@" 2>/dev/null) || rc_t=$?
        if [[ $rc_o -ne $rc_t || "$ours" != "$theirs" ]]; then
            echo "measure --output=$out $* (exit diskimg $rc_o, qemu-img $rc_t):" >&2
            diff <(echo "$theirs") <(echo "$ours") >&2 || true
            return 1
        fi
    done
}

# The -O/-o combinations whose numbers differ.
OUTPUTS=(
    "-O raw"
    "-O qcow2"
    "-O qcow2 -o cluster_size=4k"
    "-O qcow2 -o cluster_size=2M,refcount_bits=64"
    "-O qcow2 -o extended_l2=on"
    "-O qcow2 -o cluster_size=512,refcount_bits=1"
    "-O qcow2 -o compat=0.10"
    "-O qcow2 -o preallocation=full"
    "-O qcow2 -o backing_file=base.img,backing_fmt=raw"
)

# make_sources: small images in $TEST_DIR.
make_sources() {
    local d=$TEST_DIR
    truncate -s 64M "$d/sparse.raw"
    qemu-io -f raw -c 'write -P 1 0 100k' -c 'write -P 2 10M 1M' -c 'write -z 20M 1M' \
        -c 'write -P 3 63M 4k' "$d/sparse.raw" >/dev/null
    head -c 3000000 /dev/urandom >"$d/full.raw" # not a multiple of 512
    qemu-img create -q -f qcow2 "$d/mixed.qcow2" 64M
    qemu-io -f qcow2 -c 'write -P 1 0 100k' -c 'write -z 1M 1M' -c 'write -P 0 3M 64k' \
        -c 'write -c -P 3 8M 64k' -c 'write -P 4 50M 192k' "$d/mixed.qcow2" >/dev/null
    cp "$d/mixed.qcow2" "$d/snap.qcow2"
    qemu-img snapshot -c s1 "$d/snap.qcow2"
    qemu-io -f qcow2 -c 'write -P 7 40M 2M' -c 'write -z 0 64k' "$d/snap.qcow2" >/dev/null
    cp "$d/mixed.qcow2" "$d/bitmaps.qcow2"
    qemu-img bitmap --add -g 64k "$d/bitmaps.qcow2" b1
    qemu-img bitmap --add -g 512 "$d/bitmaps.qcow2" a-somewhat-longer-bitmap-name
    qemu-img create -q -f qcow2 -o compat=0.10 "$d/v2.qcow2" 20000000
    qemu-io -f qcow2 -c 'write -P 5 1M 1M' "$d/v2.qcow2" >/dev/null
    qemu-img create -q -f qcow2 -b sparse.raw -F raw "$d/overlay.qcow2"
    qemu-io -f qcow2 -c 'write -P 9 30M 64k' -c 'write -z 10M 64k' "$d/overlay.qcow2" >/dev/null
    qemu-img create -q -f qcow2 -o preallocation=metadata,cluster_size=4k "$d/prealloc.qcow2" 16M
    qemu-io -f qcow2 -c 'write -P 5 1M 64k' "$d/prealloc.qcow2" >/dev/null
    qemu-img convert -O vpc "$d/sparse.raw" "$d/sparse.vpc"
    qemu-img convert -O vmdk "$d/sparse.raw" "$d/sparse.vmdk"
    qemu-img convert -O vdi "$d/sparse.raw" "$d/sparse.vdi"
}

@test "measure --help: synopsis, options, exit status" {
    run -0 "$DISKIMG" measure --help
    assert_output --partial "Usage: diskimg measure"
    assert_output --partial "--size"
    assert_output --partial "bitmaps size"
    assert_output --partial "vpc, vhdx, vdi, vmdk"
    assert_output --partial "Exit status"
    run -0 "$DISKIMG" --help
    assert_output --partial "measure"
}

@test "measure --size: qemu-img's numbers for every qcow2 layout, and its size limit" {
    local size o
    for size in 0 1000 1G 100G 2P 3P; do
        for o in "${OUTPUTS[@]}"; do
            # shellcheck disable=SC2086
            same_measure $o --size "$size"
        done
    done
    same_measure -O qcow2 -o cluster_size=64k,cluster_size=4k --size 1G # the last wins
    same_measure -O qcow2 -o extended_l2=on,cluster_size=16k --size 1T
    same_measure -O qcow2 -o compat=0.10,lazy_refcounts=on --size 1G # measure allows it
    same_measure -O qcow2 -o preallocation=falloc --size 5G
    same_measure -O qcow2 -o preallocation=metadata --size 5G
    # 3P needs larger clusters: qemu-img's message, exit 1
    run -1 --separate-stderr "$DISKIMG" measure -O qcow2 --size 3P
    assert_equal "$stderr" "diskimg: The image size is too large (try using a larger cluster size)"
}

@test "measure IMAGE: qemu-img's numbers for every source into every layout" {
    make_sources
    cd "$TEST_DIR"
    local s o
    for s in sparse.raw full.raw mixed.qcow2 bitmaps.qcow2 overlay.qcow2; do
        for o in "${OUTPUTS[@]}"; do
            # shellcheck disable=SC2086
            same_measure $o "$s"
        done
    done
    # the others count data the same way: fewer layouts
    for s in snap.qcow2 v2.qcow2 prealloc.qcow2 sparse.vpc sparse.vmdk sparse.vdi; do
        for o in "-O raw" "-O qcow2 -o cluster_size=4k" "-O qcow2 -o cluster_size=2M,extended_l2=on"; do
            # shellcheck disable=SC2086
            same_measure $o "$s"
        done
    done
    # formats given, a snapshot's view (-l by name and by ID), -U
    same_measure -f qcow2 -O qcow2 mixed.qcow2
    same_measure -f raw -O qcow2 mixed.qcow2
    same_measure -O qcow2 -l s1 snap.qcow2
    same_measure -O qcow2 -o cluster_size=4k -l 1 snap.qcow2
    same_measure -O qcow2 -l snapshot.name=s1 snap.qcow2
    same_measure -O raw -l snapshot.id=1,snapshot.name=s1 snap.qcow2
    # convert takes qemu-img's snapshot.* form of -l too
    "$DISKIMG" convert -l snapshot.name=s1 snap.qcow2 ours.raw
    qemu-img convert -l snapshot.id=1 snap.qcow2 theirs.raw
    cmp ours.raw theirs.raw
    same_measure -U -O qcow2 bitmaps.qcow2
}

@test "measure: bitmaps size for a qcow2 v3 source into qcow2 v3, first in JSON" {
    make_sources
    cd "$TEST_DIR"
    # two bitmaps: 64 MiB at 64k = 128 bytes, at 512 = 16 KiB of bits: one
    # cluster each, a table cluster each, one directory cluster
    run -0 "$DISKIMG" measure -O qcow2 bitmaps.qcow2
    assert_line --index 2 "bitmaps size: 327680"
    run -0 "$DISKIMG" measure -O qcow2 --output=json bitmaps.qcow2
    assert_line --index 1 '    "bitmaps": 327680,'
    # none: still a line (0) from a v3 qcow2; none at all from v2, raw, or into v2/raw
    run -0 "$DISKIMG" measure -O qcow2 mixed.qcow2
    assert_line --index 2 "bitmaps size: 0"
    for args in "-O qcow2 v2.qcow2" "-O qcow2 sparse.raw" "-O raw bitmaps.qcow2" \
        "-O qcow2 -o compat=0.10 bitmaps.qcow2"; do
        # shellcheck disable=SC2086
        run -0 "$DISKIMG" measure $args
        refute_output --partial bitmaps
    done
}

@test "measure keeps its promise: convert's output fits in what it said" {
    make_sources
    cd "$TEST_DIR"
    local s o req full size
    for s in sparse.raw full.raw mixed.qcow2 overlay.qcow2; do
        for o in "-O raw" "-O qcow2 -o cluster_size=4k" \
            "-O qcow2 -o cluster_size=2M,refcount_bits=64" "-O qcow2 -o preallocation=full"; do
            # shellcheck disable=SC2086
            { read -r _ _ req; read -r _ _ _ full; } < <("$DISKIMG" measure $o "$s")
            rm -f out.img
            # shellcheck disable=SC2086
            "$DISKIMG" convert $o "$s" out.img
            size=$(stat -c %s out.img)
            if ((size > req || req > full)); then
                echo "$s $o: file $size bytes, required $req, fully allocated $full" >&2
                return 1
            fi
        done
    done
}

# own_numbers ARGS...: diskimg measure ARGS' required and fully allocated
# sizes, as "REQUIRED FULL" (python would cost more than the measure).
own_numbers() {
    "$DISKIMG" measure "$@" | sed -n 's/^required size: //p; s/^fully allocated size: //p' |
        paste -sd' '
}

# check_own_measure FMT OPTS FULL_SOURCE: for the formats qemu-img cannot
# measure, diskimg's numbers against the files its own convert writes:
# 'required' is the converted file's size for each source (a sparse one
# with scattered data, an empty one), 'fully-allocated' the size of a
# convert of FULL_SOURCE, a non-zero raw as large as the new disk; the
# --size numbers match those.  streamOptimized deflates its grains, so
# for it both are upper bounds.
check_own_measure() {
    local fmt=$1 opts=$2 full=$3 d=$TEST_DIR s nums size bound=false
    [[ $opts != *streamOptimized* ]] || bound=true
    for s in sparse.raw empty.raw "$full"; do
        rm -f "$d/out.img"
        read -ra nums <<<"$(own_numbers -O "$fmt" -o "$opts" -f raw "$d/$s")"
        "$DISKIMG" convert -f raw -O "$fmt" -o "$opts" "$d/$s" "$d/out.img"
        size=$(stat -c %s "$d/out.img")
        if { ! $bound && [[ $size -ne ${nums[0]} ]]; } || [[ $size -gt ${nums[0]} ]]; then
            echo "-O $fmt -o $opts $s: file $size bytes, required ${nums[0]}" >&2
            return 1
        fi
    done
    # $full is as large as the disk: its required is fully-allocated, and
    # so is --size's
    [[ ${nums[0]} -eq ${nums[1]} ]]
    local sized
    read -ra sized <<<"$(own_numbers -O "$fmt" -o "$opts" --size "$(stat -c %s "$d/$full")")"
    [[ ${sized[1]} -eq ${nums[1]} ]]
}

@test "measure: vpc, vhdx, vdi and vmdk, the size diskimg's convert writes" {
    local d=$TEST_DIR
    truncate -s 64M "$d/sparse.raw"
    qemu-io -f raw -c 'write -P 1 0 100k' -c 'write -P 2 10M 1M' -c 'write -z 20M 1M' \
        -c 'write -P 3 33553920 4k' -c 'write -P 4 63M 4k' "$d/sparse.raw" >/dev/null
    truncate -s 40M "$d/empty.raw"
    # full sources, non-zero everywhere, as large as the new disk: vpc
    # rounds 16 MiB up to its CHS geometry (16 MiB + 16 KiB here)
    head -c 16M /dev/urandom >"$d/full16.raw"
    local vpc_size
    "$DISKIMG" create -q -f vpc "$d/geo.vpc" 16M
    vpc_size=$(qemu-img info "$d/geo.vpc" | sed -n 's/^virtual size: .*(\([0-9]*\) bytes)/\1/p')
    cp "$d/full16.raw" "$d/fullvpc.raw"
    head -c $((vpc_size - 16 * 1048576)) /dev/urandom >>"$d/fullvpc.raw"
    check_own_measure vpc subformat=dynamic fullvpc.raw
    check_own_measure vpc subformat=fixed fullvpc.raw
    check_own_measure vpc force_size=on full16.raw
    check_own_measure vdi static=off full16.raw
    check_own_measure vdi static=on full16.raw
    check_own_measure vhdx subformat=dynamic full16.raw
    check_own_measure vhdx subformat=fixed,block_size=1M full16.raw
    check_own_measure vhdx block_size=2M,log_size=2M,logical_sector_size=4096,physical_sector_size=4096 full16.raw
    check_own_measure vmdk subformat=monolithicSparse full16.raw
    check_own_measure vmdk subformat=streamOptimized full16.raw
    check_own_measure vmdk subformat=streamOptimized,layout=vmware full16.raw
    # the numbers themselves, once: 64 MiB rounds to 65,536 sectors + 32
    # of CHS geometry, 33 blocks of 2 MiB + a sector of bitmap each
    run -0 "$DISKIMG" measure -O vpc --size 64M
    assert_output "required size: 2560
fully allocated size: 69225472"
    # a backing chain counts down to its base, and a qcow2 zero cluster
    # over data is not counted
    qemu-img create -q -f qcow2 -b sparse.raw -F raw "$d/ov.qcow2"
    qemu-io -f qcow2 -c 'write -P 9 30M 64k' -c 'write -z 10M 1M' "$d/ov.qcow2" >/dev/null
    local nums
    read -ra nums <<<"$(own_numbers -O vdi "$d/ov.qcow2")"
    "$DISKIMG" convert -O vdi "$d/ov.qcow2" "$d/ov.vdi"
    [[ ${nums[0]} -eq $(stat -c %s "$d/ov.vdi") ]]
    [[ ${nums[0]} -eq $((512 + 512 + 5 * 1048576)) ]] # blocks 0, 30, 31, 32, 63
    # -o size= is ignored, as qemu-img measure ignores it
    [[ $(own_numbers -O vdi -o size=1G --size 2M) == "1024 2098176" ]]
    # qemu-img itself still refuses these formats
    run -1 --separate-stderr qemu-img measure -O vhdx --size 1G
    assert_equal "$stderr" "qemu-img: Block driver 'vhdx' does not support size measurement"
    run -1 --separate-stderr "$DISKIMG" measure -O bogus --size 1G
    assert_equal "$stderr" "diskimg: Unknown file format 'bogus'"
    [[ -z "$output" ]]
}

@test "create -f vhdx and dd -O vhdx of 0 bytes: a file qemu-img opens, as its own" {
    # qemu-img create -f vhdx x 0 writes 74448896 bytes (a 64 MiB BAT,
    # zeroes): the same size, not run here as it writes them all
    local d=$TEST_DIR f
    run -0 "$DISKIMG" create -q -f vhdx "$d/d0.vhdx" 0
    truncate -s 1M "$d/a.raw"
    run -0 "$DISKIMG" dd -f raw -O vhdx bs=512 count=0 if="$d/a.raw" of="$d/dd0.vhdx"
    for f in d0.vhdx dd0.vhdx; do
        run -0 qemu-img check "$d/$f"
        run -0 qemu-img info "$d/$f"
        assert_line "virtual size: 0 B (0 bytes)"
        [[ $(stat -c %s "$d/$f") -eq 74448896 ]]
    done
    [[ $(own_numbers -O vhdx --size 0) == "74448896 74448896" ]]
}

@test "measure: bad options and images fail with one line, usage errors exit 2" {
    truncate -s 1M "$TEST_DIR/a.raw"
    local a=$TEST_DIR/a.raw
    # qemu-img's messages for the values measure checks
    run -1 --separate-stderr "$DISKIMG" measure -O qcow2 -o cluster_size=3k --size 1G
    assert_equal "$stderr" "diskimg: Cluster size must be a power of two between 512 and 2048k"
    run -1 --separate-stderr "$DISKIMG" measure -O qcow2 -o cluster_size=4k,extended_l2=on --size 1G
    assert_equal "$stderr" \
        "diskimg: Extended L2 entries are only supported with cluster sizes of at least 16384 bytes"
    run -1 --separate-stderr "$DISKIMG" measure -O qcow2 -o compat=0.10,refcount_bits=8 --size 1G
    assert_output ""
    [[ "$stderr" == "diskimg: Different refcount widths than 16 bits require"* ]]
    run -1 --separate-stderr "$DISKIMG" measure -O qcow2 -o refcount_bits=3 --size 1G
    assert_equal "$stderr" "diskimg: Refcount width must be a power of two and may not exceed 64 bits"
    for o in compat=0.9 preallocation=bogus foo=bar; do
        run -1 --separate-stderr "$DISKIMG" measure -O qcow2 -o "$o" --size 1G
        [[ $(wc -l <<<"$stderr") -eq 1 && "$stderr" == "diskimg: "* ]]
        run -1 qemu-img measure -O qcow2 -o "$o" --size 1G
    done
    run -1 --separate-stderr "$DISKIMG" measure "$TEST_DIR/missing.img"
    assert_equal "$stderr" "diskimg: $TEST_DIR/missing.img: No such file or directory"
    run -1 --separate-stderr "$DISKIMG" measure -f qcow2 "$a"
    [[ $(wc -l <<<"$stderr") -eq 1 && "$stderr" == "diskimg: "* ]]
    run -1 --separate-stderr "$DISKIMG" measure -O qcow2 -l nosuch "$TEST_DIR/a.raw"
    # usage: exit 2 and the hint (qemu-img exits 1 for these)
    run -2 "$DISKIMG" measure
    assert_output --partial "either --size N or one IMAGE must be given"
    run -2 "$DISKIMG" measure --size 1G "$a"
    assert_output --partial "--size N cannot be used together with an IMAGE"
    run -2 "$DISKIMG" measure "$a" "$a"
    assert_output --partial "at most one IMAGE"
    run -2 "$DISKIMG" measure -f raw --size 1G
    assert_output --partial "-f and -l need an IMAGE"
    run -2 "$DISKIMG" measure --output=xml --size 1G
    assert_output --partial "--output must be human or json"
    run -2 "$DISKIMG" measure --size lots
    assert_output --partial "invalid size 'lots'"
    run -2 "$DISKIMG" measure --size 8E
    assert_output --partial "too large"
    run -2 "$DISKIMG" measure -l snapshot.bogus=1 "$a"
    assert_output --partial "invalid snapshot parameter 'snapshot.bogus=1'"
    run -2 "$DISKIMG" measure --bogus
    assert_output --partial "unknown option '--bogus'"
}

@test "measure: an image another process writes is refused (exit 5), -U measures it" {
    require_tool qemu-nbd
    qemu-img create -q -f qcow2 "$TEST_DIR/w.qcow2" 64M
    qemu-io -f qcow2 -c 'write -P 1 0 1M' "$TEST_DIR/w.qcow2" >/dev/null
    qemu-nbd --fork --pid-file="$TEST_DIR/qemu-nbd.pid" -k "$TEST_DIR/q.sock" -f qcow2 \
        "$TEST_DIR/w.qcow2"
    run -5 "$DISKIMG" measure -O qcow2 "$TEST_DIR/w.qcow2"
    assert_output --partial "-U (--force-share) reads it anyway"
    same_measure -U -O qcow2 "$TEST_DIR/w.qcow2"
}
