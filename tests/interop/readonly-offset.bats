#!/usr/bin/env bats
# -r (read-only exports) and windows into a file: -o/--offset, --size,
# and the same through --image-opts.  Reads and writes must land exactly
# inside the window, and never outside it.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

@test "read-only (-r): qemu-io writes fail, reads work, the file is unchanged" {
    require_tool qemu-io qemu-img nbdinfo
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t -r "$TEST_DIR/a.img"

    # qemu sees the read-only flag and refuses to open for writing
    run qemu-io -f raw "$URI" -c 'write -P 0x99 0 4k'
    assert_failure
    assert_output --regexp "Permission denied|Operation not permitted|read.only"
    run qemu-io -f raw "$URI" -c 'write -z 0 4k'
    assert_failure
    run nbdinfo --is read-only "$URI"
    assert_success
    # reads return the file's bytes
    run qemu-io -r -f raw "$URI" -c 'read -v 16 16'
    assert_success
    assert_output --partial "00000010:  00 00 00 00 00 00 00 01 64 69 73 6b 69 6d 67 21"
    run qemu-img convert -f raw -O raw "$URI" "$TEST_DIR/out.img"
    assert_success
    cmp "$TEST_DIR/out.img" "$TEST_DIR/orig.img"
    stop_server
    cmp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}

@test "read-only (-r): a raw NBD WRITE gets EPERM, its payload is skipped" {
    make_pattern "$TEST_DIR/a.img" 65536
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t -r "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/orig.img" <<'EOF'
import sys
import nbdraw as n

data = open(sys.argv[2], "rb").read()
c = n.connect(sys.argv[1])
c.handshake(structured=True)
assert c.eflags & n.TFLAG_READ_ONLY
assert not c.eflags & (n.TFLAG_SEND_TRIM | n.TFLAG_SEND_WRITE_ZEROES)
assert c.write(0, b"\xff" * 8192).error == n.EPERM
assert c.request(n.CMD_WRITE_ZEROES, 0, 4096).error == n.EPERM
assert c.request(n.CMD_TRIM, 0, 4096).error == n.EPERM
# FAST_ZERO is not advertised on a read-only export: an invalid flag
assert c.request(n.CMD_WRITE_ZEROES, 0, 4096, n.CMD_FLAG_FAST_ZERO).error == n.EINVAL
assert c.request(n.CMD_FLUSH).error == 0
r = c.read(0, 8192)
assert r.error == 0 and r.data == data[:8192], r
EOF
    assert_success
    stop_server
    cmp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}

@test "--offset: the export starts at OFFSET of the file and runs to its end" {
    require_tool qemu-io nbdinfo nbdsh
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t -o 65536 "$TEST_DIR/a.img"

    run nbdinfo --size "$URI"
    assert_success
    assert_output $((1048576 - 65536))
    # reading export offset 0 gives file offset 65536
    run nbdsh -u "$URI" -c '
data = open("'"$TEST_DIR/orig.img"'", "rb").read()
assert h.pread(4096, 0) == data[65536:65536 + 4096]
assert h.pread(100, h.get_size() - 100) == data[-100:]
'
    assert_success
    run qemu-io -f raw "$URI" -c 'write -P 0xd1 0 512' -c 'write -P 0xd2 982528 512' \
        -c 'write -P 0xd3 1000 3'
    assert_success
    stop_server
    range_is "$TEST_DIR/a.img" 65536 512 d1
    range_is "$TEST_DIR/a.img" 1048064 512 d2
    range_is "$TEST_DIR/a.img" 66536 3 d3
    # nothing before the window changed
    cmp -n 65536 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    [[ $(stat -c %s "$TEST_DIR/a.img") -eq 1048576 ]]
}

@test "--offset and --size: a window; writes past it fail ENOSPC and change nothing" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t --offset=4096 --size=65536 "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
import errno
h.set_strict_mode(0)
assert h.get_size() == 65536
h.pwrite(b"\xe1" * 65536, 0)
assert h.pread(65536, 0) == b"\xe1" * 65536
for off, n in ((65536, 1), (65000, 1000), (1 << 20, 512)):
    try:
        h.pwrite(b"\xee" * n, off)
        raise SystemExit("write at %d+%d past the window succeeded" % (off, n))
    except nbd.Error as e:
        assert e.errnum == errno.ENOSPC, e
    try:
        h.pread(n, off)
        raise SystemExit("read at %d+%d past the window succeeded" % (off, n))
    except nbd.Error as e:
        assert e.errnum == errno.EINVAL, e
h.zero(4096, 61440)
'
    assert_success
    stop_server
    cmp -n 4096 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    range_is "$TEST_DIR/a.img" 4096 61440 e1
    range_is "$TEST_DIR/a.img" 65536 4096 00
    cmp -i 69632 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}

@test "--offset and --size: block status is relative to the window" {
    require_tool nbdinfo
    truncate -s 2M "$TEST_DIR/a.img"
    # data at file [1M, 1M+64K); window [512K, 512K+1M)
    dd if=/dev/urandom of="$TEST_DIR/a.img" bs=64k seek=16 count=1 conv=notrunc status=none
    start_server -t -o 512K --size=1M "$TEST_DIR/a.img"

    run nbdinfo --map "$URI"
    assert_success
    assert_line --regexp '^ +0 +524288 +3 +hole,zero$'
    assert_line --regexp '^ +524288 +65536 +0 +data$'
    assert_line --regexp '^ +589824 +458752 +3 +hole,zero$'
}

@test "--image-opts driver=raw,file.filename=F,offset=N,size=M: same window" {
    require_tool qemu-io nbdinfo
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t --image-opts "driver=raw,file.filename=$TEST_DIR/a.img,offset=8192,size=16384"

    run nbdinfo --size "$URI"
    assert_success
    assert_output 16384
    run qemu-io -f raw "$URI" -c 'write -P 0xf0 0 16384' -c 'read -P 0xf0 0 16384'
    assert_success
    refute_output --partial "failed"
    run qemu-io -f raw "$URI" -c 'write -P 0xf1 16000 1000'
    assert_failure
    stop_server
    cmp -n 8192 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    range_is "$TEST_DIR/a.img" 8192 16384 f0
    cmp -i 24576 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}

@test "unaligned --offset and --size with cache=none (O_DIRECT read-modify-write)" {
    require_tool nbdsh
    make_pattern "$TEST_DIR/a.img" 1048576
    cp "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    start_server -t --cache=none -o 1000 --size=500000 "$TEST_DIR/a.img"

    run nbdsh -u "$URI" -c '
data = open("'"$TEST_DIR/orig.img"'", "rb").read()
assert h.get_size() == 500000
assert h.pread(10000, 0) == data[1000:11000]
h.pwrite(b"\x12" * 10, 0)
h.pwrite(b"\x13" * 10, 499990)
h.pwrite(b"\x14" * 5000, 12345, nbd.CMD_FLAG_FUA)
assert h.pread(10, 0) == b"\x12" * 10
assert h.pread(10, 499990) == b"\x13" * 10
assert h.pread(5002, 12344) == data[13344:13345] + b"\x14" * 5000 + data[18345:18346]
'
    assert_success
    stop_server
    cmp -n 1000 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    range_is "$TEST_DIR/a.img" 1000 10 12
    range_is "$TEST_DIR/a.img" 500990 10 13
    range_is "$TEST_DIR/a.img" 13345 5000 14
    cmp -i 501000 "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
    cmp -i 1010 -n $((13345 - 1010)) "$TEST_DIR/a.img" "$TEST_DIR/orig.img"
}

@test "an offset past the end of the file is refused at start-up" {
    truncate -s 64K "$TEST_DIR/a.img"
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" -o 1M "$TEST_DIR/a.img"
    assert_failure 1
    [[ "$stderr" == *"beyond the end"* ]]
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" -o 32K --size=64K "$TEST_DIR/a.img"
    assert_failure 1
    [[ "$stderr" == *"beyond the end"* ]]
}
