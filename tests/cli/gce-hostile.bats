#!/usr/bin/env bats
# check --target=gce on archives GCE takes and on archives it does not:
# GNU tar's own `tar --format=oldgnu -Sczf` passes; other formats, names,
# sizes, member counts, truncated, corrupt and hand-damaged archives fail
# (exit 4) with the violation and its fix, within seconds and bounded
# memory.  Its own suite so that the sanitizer build runs it (suite san).

bats_require_minimum_version 1.5.0
load '../helpers'

GIB=1073741824

setup() {
    setup_test
    mkdir "$TEST_DIR/d"
    DISK=$TEST_DIR/d/disk.raw
    truncate -s 8M "$DISK"
    head -c 65536 /dev/urandom | dd of="$DISK" bs=1M seek=2 conv=notrunc status=none
    head -c 4096 /dev/urandom | dd of="$DISK" bs=1M seek=5 conv=notrunc status=none
}
teardown() { cleanup_test; }

# lint_fails ARCHIVE TEXT: exit 4 (a rule of the target broken), and a
# violation line "gce: PROBLEM: FIX" saying TEXT.
lint_fails() {
    run bounded "$DISKIMG" check --target=gce "$1"
    assert_failure 4
    assert_line --regexp "^gce: .*$2.*: [a-z]"
    refute_output --partial "acceptable"
}

# retar TAR PY: apply the python statements PY to the bytes h of TAR's
# first block (checksum recomputed), gzip the result to TAR.gz.
retar() {
    "$PYTHON3" - "$1" "$2" <<'EOF'
import sys
path, code = sys.argv[1], sys.argv[2]
b = bytearray(open(path, 'rb').read())
h = memoryview(b)[0:512]
exec(code)
h[148:156] = b' ' * 8
h[148:156] = b'%06o\0 ' % sum(b[0:512])
open(path, 'wb').write(b)
EOF
    gzip -n -c "$1" >"$1.gz"
}

@test "gce lint: GNU tar's own oldgnu sparse archive passes; wrong ones say why" {
    truncate -s 1G "$DISK"
    tar --format=oldgnu -Sczf "$TEST_DIR/gnu.tar.gz" -C "$TEST_DIR/d" disk.raw
    run bounded "$DISKIMG" check --target=gce "$TEST_DIR/gnu.tar.gz"
    assert_success
    assert_output "$TEST_DIR/gnu.tar.gz: acceptable for gce"
    run "$DISKIMG" check -q --target=gce "$TEST_DIR/gnu.tar.gz"
    assert_success
    assert_output ""
}

@test "gce lint: format, name, size, members, compression" {
    truncate -s 1G "$DISK"
    tar --format=posix -Sczf "$TEST_DIR/posix.tar.gz" -C "$TEST_DIR/d" disk.raw
    lint_fails "$TEST_DIR/posix.tar.gz" "not the old GNU format"
    tar --format=oldgnu -Sczf "$TEST_DIR/name.tar.gz" -C "$TEST_DIR/d" \
        --transform 's/disk.raw/disk.img/' disk.raw
    lint_fails "$TEST_DIR/name.tar.gz" "member 'disk\\.img' is not named disk\\.raw"
    tar --format=oldgnu -Sczf "$TEST_DIR/dot.tar.gz" -C "$TEST_DIR" d
    lint_fails "$TEST_DIR/dot.tar.gz" "2 members"
    truncate -s $((GIB + 512)) "$DISK"
    tar --format=oldgnu -Sczf "$TEST_DIR/size.tar.gz" -C "$TEST_DIR/d" disk.raw
    lint_fails "$TEST_DIR/size.tar.gz" "disk.raw is $((GIB + 512)) bytes, not a whole number of GiB"
    assert_output --partial "grow disk.raw to $((2 * GIB)) bytes (truncate -s 2G)"
    tar --format=oldgnu -Scf "$TEST_DIR/plain.tar" -C "$TEST_DIR/d" disk.raw
    lint_fails "$TEST_DIR/plain.tar" "not gzip-compressed"
    head -c 100000 /dev/urandom | gzip -c >"$TEST_DIR/random.gz"
    lint_fails "$TEST_DIR/random.gz" "not a tar archive"
    : >"$TEST_DIR/empty"
    lint_fails "$TEST_DIR/empty" "not gzip-compressed"
}

@test "gce lint: truncated, corrupt and hand-damaged sparse maps" {
    truncate -s 1G "$DISK"
    "$DISKIMG" convert -q --target=gce "$DISK" "$TEST_DIR/ok.tar.gz"
    local n
    n=$(stat -c %s "$TEST_DIR/ok.tar.gz")
    head -c $((n / 2)) "$TEST_DIR/ok.tar.gz" >"$TEST_DIR/half.tar.gz"
    lint_fails "$TEST_DIR/half.tar.gz" "truncated archive"
    head -c $((n - 4)) "$TEST_DIR/ok.tar.gz" >"$TEST_DIR/trailer.tar.gz"
    lint_fails "$TEST_DIR/trailer.tar.gz" "truncated archive"
    # A byte flipped in the middle: inflate or the CRC-32 says so.
    cp "$TEST_DIR/ok.tar.gz" "$TEST_DIR/flip.tar.gz"
    printf '\xff\xff\xff\xff' | dd of="$TEST_DIR/flip.tar.gz" bs=1 seek=$((n / 2)) conv=notrunc status=none
    lint_fails "$TEST_DIR/flip.tar.gz" "gzip stream is corrupt"
    # The tar cut before its end-of-archive blocks.
    zcat "$TEST_DIR/ok.tar.gz" | head -c $((512 + 65536 + 4096)) | gzip -n >"$TEST_DIR/noend.tar.gz"
    lint_fails "$TEST_DIR/noend.tar.gz" "without its end-of-archive blocks"

    # Hand-damaged maps: entries swapped, an entry past the size, a size
    # field that disagrees with the map, a bad number.
    zcat "$TEST_DIR/ok.tar.gz" >"$TEST_DIR/t.tar"
    cp "$TEST_DIR/t.tar" "$TEST_DIR/swap.tar"
    retar "$TEST_DIR/swap.tar" 'a = bytes(h[386:410]); h[386:410] = h[410:434]; h[410:434] = a'
    lint_fails "$TEST_DIR/swap.tar.gz" "is out of order"
    cp "$TEST_DIR/t.tar" "$TEST_DIR/past.tar"
    retar "$TEST_DIR/past.tar" 'h[410:422] = b"%011o\0" % (1 << 30)'
    lint_fails "$TEST_DIR/past.tar.gz" "runs past the file's size"
    cp "$TEST_DIR/t.tar" "$TEST_DIR/sz.tar"
    retar "$TEST_DIR/sz.tar" 'h[124:136] = b"%011o\0" % 4096'
    lint_fails "$TEST_DIR/sz.tar.gz" "but its size field says 4096"
    cp "$TEST_DIR/t.tar" "$TEST_DIR/nan.tar"
    retar "$TEST_DIR/nan.tar" 'h[483:495] = b"9999999999x\0"'
    lint_fails "$TEST_DIR/nan.tar.gz" "bad real size field"
    # A map that claims endless extension blocks ends with the input.
    cp "$TEST_DIR/t.tar" "$TEST_DIR/ext.tar"
    retar "$TEST_DIR/ext.tar" 'h[482] = 1'
    lint_fails "$TEST_DIR/ext.tar.gz" "sparse map"
}
