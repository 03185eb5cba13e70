#!/usr/bin/env bats
# convert --target=gce: the archive Google Compute Engine imports, read
# back with GNU tar, gzip and qemu-img (not with our own lint alone);
# reproducible bytes whatever -m; no file left by a failed or
# interrupted conversion; options that contradict the target.  The lint
# on hostile archives is gce-hostile.bats (suite san).

bats_require_minimum_version 1.5.0
load '../helpers'

GIB=1073741824
# 20 MiB + 100: not a GiB multiple, not even a sector multiple.
VSIZE=20971620

setup() {
    setup_test
    export TZ=UTC
    # A few MiB of data at scattered offsets, holes between.
    SRC=$TEST_DIR/src.raw
    truncate -s "$VSIZE" "$SRC"
    local off
    for off in 0 3 9 15; do
        head -c 786432 /dev/urandom | dd of="$SRC" bs=1M seek="$off" conv=notrunc status=none
    done
    printf 'end of the disk' | dd of="$SRC" bs=1 seek=$((VSIZE - 15)) conv=notrunc status=none
}
teardown() { cleanup_test; }

# extract_and_compare ARCHIVE: GNU tar lists one member, disk.raw, of one
# GiB; extracted (sparse), it is the source then zeroes.
extract_and_compare() {
    gzip -t "$1"
    run tar -tvzf "$1"
    assert_success
    assert_equal "${#lines[@]}" 1
    assert_output --regexp "^-rw-r--r-- root/root +$GIB 20[0-9-]+ [0-9:]+ disk\.raw$"
    rm -rf "$TEST_DIR/x" && mkdir "$TEST_DIR/x"
    tar -xSzf "$1" -C "$TEST_DIR/x"
    local out=$TEST_DIR/x/disk.raw
    assert_equal "$(stat -c %s "$out")" "$GIB"
    cmp -n "$VSIZE" "$SRC" "$out"
    # The rest reads as zeroes: qemu-img compare checks a larger image's
    # tail is zero.
    run qemu-img compare -f raw -F raw "$SRC" "$out"
    assert_success
    # Extracted sparse: about the source's data, not a GiB.
    local kib
    kib=$(du -k "$out" | cut -f1)
    ((kib < 8192)) || fail "disk.raw takes $kib KiB: not extracted sparse"
}

@test "gce: raw and qcow2 sources give what tar, gzip and qemu-img read back" {
    run --separate-stderr "$DISKIMG" convert --target=gce "$SRC" "$TEST_DIR/raw.tar.gz"
    assert_success
    assert_equal "$stderr" "gce: disk.raw rounded up from $VSIZE to $GIB bytes (a whole number of GiB)"
    extract_and_compare "$TEST_DIR/raw.tar.gz"
    run "$DISKIMG" check --target=gce "$TEST_DIR/raw.tar.gz"
    assert_success
    assert_output "$TEST_DIR/raw.tar.gz: acceptable for gce"

    qemu-img convert -f raw -O qcow2 "$SRC" "$TEST_DIR/src.qcow2"
    "$DISKIMG" convert -q --target=gce "$TEST_DIR/src.qcow2" "$TEST_DIR/q.tar.gz"
    extract_and_compare "$TEST_DIR/q.tar.gz"
    # The header is GNU tar's old format with a sparse member: typeflag
    # 'S' and magic "ustar  " (old GNU), as section 8.3 of the reference.
    run bash -c "zcat '$TEST_DIR/q.tar.gz' | head -c 512 | od -An -c -j 156 -N 1"
    assert_output --partial "S"
    run bash -c "zcat '$TEST_DIR/q.tar.gz' | head -c 265 | tail -c 8 | od -An -tx1"
    assert_output " 75 73 74 61 72 20 20 00"
    # To standard output: the same archive.
    "$DISKIMG" convert -q --target=gce "$TEST_DIR/src.qcow2" - >"$TEST_DIR/stdout.tar.gz"
    run tar -tzf "$TEST_DIR/stdout.tar.gz"
    assert_output "disk.raw"
}

@test "gce: past 8 GiB, sizes and offsets in base-256 that GNU tar reads" {
    local big=$TEST_DIR/big.raw size=$((9 * GIB + 4096)) off
    truncate -s "$size" "$big"
    for off in 0 8200 9000; do
        head -c 65536 /dev/urandom | dd of="$big" bs=1M seek="$off" conv=notrunc status=none
    done
    "$DISKIMG" convert -q --target=gce "$big" "$TEST_DIR/big.tar.gz"
    run tar -tvzf "$TEST_DIR/big.tar.gz"
    assert_output --regexp " $((10 * GIB)) .* disk\.raw$"
    # The real size at 483: GNU base-256 (0x80, then big-endian).
    run bash -c "zcat '$TEST_DIR/big.tar.gz' | head -c 495 | tail -c 12 | od -An -tx1"
    assert_output " 80 00 00 00 00 00 00 02 80 00 00 00"
    mkdir "$TEST_DIR/x"
    tar -xSzf "$TEST_DIR/big.tar.gz" -C "$TEST_DIR/x"
    run qemu-img compare -f raw -F raw "$big" "$TEST_DIR/x/disk.raw"
    assert_success
    assert_output --partial "Images are identical"
}

@test "gce: the same bytes whatever -m, mtimes from SOURCE_DATE_EPOCH" {
    export SOURCE_DATE_EPOCH=1700000000
    "$DISKIMG" convert -q -m 1 --target=gce "$SRC" "$TEST_DIR/a.tar.gz"
    "$DISKIMG" convert -q -m 7 --target=gce "$SRC" "$TEST_DIR/b.tar.gz"
    cmp "$TEST_DIR/a.tar.gz" "$TEST_DIR/b.tar.gz"
    run tar -tvzf "$TEST_DIR/a.tar.gz"
    assert_output --partial "2023-11-14 22:13 disk.raw"
    # gzip's MTIME (bytes 4-7, little-endian), no file name (FLG 0).
    run od -An -tu4 -j 4 -N 4 "$TEST_DIR/a.tar.gz"
    assert_equal "${output// /}" 1700000000
    run od -An -tu1 -j 3 -N 1 "$TEST_DIR/a.tar.gz"
    assert_equal "${output// /}" 0
    # A large source compresses in many chunks: still one gzip member
    # that gzip itself checks (CRC-32 and length).
    head -c $((6 << 20)) /dev/urandom >"$TEST_DIR/big.raw"
    "$DISKIMG" convert -q -m 4 --target=gce "$TEST_DIR/big.raw" "$TEST_DIR/big.tar.gz"
    gzip -t "$TEST_DIR/big.tar.gz"
    tar -xzf "$TEST_DIR/big.tar.gz" -O | cmp -n $((6 << 20)) - "$TEST_DIR/big.raw"
    # --reproducible alone: epoch 0.
    unset SOURCE_DATE_EPOCH
    "$DISKIMG" convert -q --reproducible --target=gce "$SRC" "$TEST_DIR/z.tar.gz"
    run tar -tvzf "$TEST_DIR/z.tar.gz"
    assert_output --partial "1970-01-01 00:00 disk.raw"
    SOURCE_DATE_EPOCH=yesterday run "$DISKIMG" convert --target=gce "$SRC" "$TEST_DIR/c.tar.gz"
    assert_failure
    assert_output --partial "SOURCE_DATE_EPOCH"
    assert [ ! -e "$TEST_DIR/c.tar.gz" ]
}

@test "gce: a failed or interrupted conversion leaves no file" {
    require_tool nbdkit
    # Reads fail: exit 1, one line, no archive.
    nbdkit -U "$SOCK" -P "$TEST_DIR/nbdkit.pid" --filter=error pattern 8M \
        error=EIO error-pread-rate=100%
    run "$DISKIMG" convert --target=gce "$URI" "$TEST_DIR/e.tar.gz"
    kill "$(cat "$TEST_DIR/nbdkit.pid")"
    assert_failure 1
    assert [ ! -e "$TEST_DIR/e.tar.gz" ]
    # Slow reads, then SIGTERM once the archive exists: 143, removed.
    rm -f "$SOCK"
    nbdkit -U "$SOCK" -P "$TEST_DIR/nbdkit.pid" --filter=delay pattern 64M rdelay=300ms
    "$DISKIMG" convert --target=gce "$URI" "$TEST_DIR/i.tar.gz" 2>"$TEST_DIR/err" &
    local pid=$! i
    for i in $(seq 100); do
        [ -e "$TEST_DIR/i.tar.gz" ] && break
        sleep 0.05
    done
    assert [ -e "$TEST_DIR/i.tar.gz" ]
    kill -TERM "$pid"
    local status=0
    wait "$pid" || status=$?
    kill "$(cat "$TEST_DIR/nbdkit.pid")"
    assert_equal "$status" 143
    assert [ ! -e "$TEST_DIR/i.tar.gz" ]
}

@test "gce: options that contradict the target are one line each" {
    local args
    for args in "-O qcow2" "-o size=1G" "-n" "-B $SRC" "-c"; do
        # shellcheck disable=SC2086
        run --separate-stderr "$DISKIMG" convert --target=gce $args "$SRC" "$TEST_DIR/o.tar.gz"
        assert_failure 2
        [[ ${stderr_lines[0]} == *"--target=gce"* ]] || fail "$args: ${stderr_lines[0]}"
        assert [ ! -e "$TEST_DIR/o.tar.gz" ]
    done
    run --separate-stderr "$DISKIMG" convert --target=gce -O qcow2 "$SRC" "$TEST_DIR/o.tar.gz"
    assert_equal "${stderr_lines[0]}" \
        "diskimg convert: --target=gce: -O qcow2 is not accepted: gce takes raw"
    # -O raw says what the target does anyway.
    "$DISKIMG" convert -q -O raw --target=gce "$SRC" "$TEST_DIR/ok.tar.gz"
    gzip -t "$TEST_DIR/ok.tar.gz"
}
