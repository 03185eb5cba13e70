#!/usr/bin/env bats
# serve -s (--snapshot), as qemu-nbd -s: clients write, read back what
# they wrote, and the image stays byte for byte as it was; it is locked
# as a reader (qemu-io cannot write it meanwhile, qemu-img can read it);
# the overlay in $TMPDIR has no name, so nothing is left behind, not even
# after kill -9.  --export takes throwaway=on for the same.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# The checks of one client session: writes across overlay blocks, a
# partial block, zeroes, then reads of them and of untouched data;
# qemu:allocation-depth says which ranges the overlay holds.
SESSION='
h.pwrite(b"\x77" * 1000, 100)
h.zero(65536, 3 * 65536)  # (count, offset)
h.pwrite(b"\x55" * 70000, 1048576 - 500)
assert h.pread(1000, 100) == b"\x77" * 1000
assert h.pread(100, 0) == b"\x11" * 100
assert h.pread(100, 1100) == b"\x11" * 100
assert h.pread(65536, 3 * 65536) == bytes(65536)
assert h.pread(70000, 1048576 - 500) == b"\x55" * 70000
assert h.pread(500, 1048576 + 69500) == bytes(500)
assert h.pread(4096, 2 * 1048576) == b"\x22" * 4096
h.flush()
'

make_image() {
    qemu-img create -q -f qcow2 "$1" 8M
    qemu-io -f qcow2 -c 'write -P 0x11 0 1M' -c 'write -P 0x22 2M 1M' "$1" >/dev/null
}

@test "serve -s: writes are read back, the image is unchanged, no file is left" {
    require_tool nbdsh nbdinfo qemu-io qemu-img
    require_nbd_python
    local img=$TEST_DIR/img.qcow2 tmp=$TEST_DIR/tmp
    mkdir "$tmp"
    make_image "$img"
    cp "$img" "$TEST_DIR/before.qcow2"
    TMPDIR=$tmp start_server -t -s "$img"
    # Locked as qemu-nbd -s locks it: readers in, writers out.
    run qemu-io -f qcow2 -c 'write 0 4k' "$img"
    assert_failure
    assert_output --partial 'Failed to get "write" lock'
    qemu-img info "$img" >/dev/null
    nbdsh -u "$URI" -c "$SESSION"
    # qemu:allocation-depth: the overlay holds the blocks written (64 KiB
    # each), the image its data one layer down, nothing the rest.
    nbdinfo --map=qemu:allocation-depth "$URI" >"$TEST_DIR/depth"
    diff - <(awk '{print $1, $2, $3}' "$TEST_DIR/depth") <<'MAP'
0 65536 1
65536 131072 2
196608 65536 1
262144 720896 2
983040 196608 1
1179648 917504 0
2097152 1048576 2
3145728 5242880 0
MAP
    # The overlay is a file without a name: nothing in TMPDIR.
    [[ -z "$(ls -A "$tmp")" ]]
    ls -l "/proc/$SERVER_PID/fd" | grep -q "$tmp/.*(deleted)"
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    cmp "$img" "$TEST_DIR/before.qcow2"
    qemu-img check -q "$img"
    [[ -z "$(ls -A "$tmp")" ]]
    # kill -9 leaves nothing either, and the next server sees the image.
    TMPDIR=$tmp start_server -s "$img"
    nbdsh -u "$URI" -c 'h.pwrite(b"\x99" * 4096, 0)'
    stop_server KILL
    [[ -z "$(ls -A "$tmp")" ]]
    cmp "$img" "$TEST_DIR/before.qcow2"
}

@test "serve --export throwaway=on, beside a plain export of another image" {
    require_tool nbdsh nbdcopy qemu-img
    require_nbd_python
    make_image "$TEST_DIR/a.qcow2"
    truncate -s 8M "$TEST_DIR/b.raw"
    qemu-io -f raw -c 'write -P 0x11 0 1M' -c 'write -P 0x22 2M 1M' "$TEST_DIR/b.raw" >/dev/null
    cp "$TEST_DIR/a.qcow2" "$TEST_DIR/a0.qcow2"
    cp "$TEST_DIR/b.raw" "$TEST_DIR/b0.raw"
    start_server --export "name=a,file=$TEST_DIR/a.qcow2,throwaway=on" \
        --export "name=b,file=$TEST_DIR/b.raw,format=raw,throwaway=on" \
        --export "name=c,file=$TEST_DIR/b0.raw,format=raw" -e 0 -t
    nbdsh -u "nbd+unix:///a?socket=$SOCK" -c "$SESSION"
    nbdsh -u "nbd+unix:///b?socket=$SOCK" -c "$SESSION"
    # Many requests in flight at once (nbdcopy): what is read back is
    # what was written.
    make_pattern "$TEST_DIR/pat" $((8 * 1048576))
    nbdcopy "$TEST_DIR/pat" "nbd+unix:///b?socket=$SOCK"
    nbdcopy "nbd+unix:///b?socket=$SOCK" "$TEST_DIR/back"
    cmp "$TEST_DIR/pat" "$TEST_DIR/back"
    # Unaligned writes in flight together, often in one 64 KiB block that
    # the overlay copies up: none loses another's bytes.
    py "nbd+unix:///a?socket=$SOCK" <<'PY'
import random, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
size = h.get_size()
model = bytearray(h.pread(size, 0))
rng = random.Random(15)
for batch in range(25):
    used = []
    for i in range(16):
        while True:
            off, n = rng.randrange(0, size - 9000), rng.randrange(1, 9000)
            if all(off + n <= a or b <= off for a, b in used):
                break
        used.append((off, off + n))
        data = bytes([rng.randrange(256)]) * n
        model[off:off + n] = data
        h.aio_pwrite(data, off)
    while h.aio_in_flight() > 0:
        h.poll(-1)
assert h.pread(size, 0) == bytes(model)
PY
    # A plain export still writes its image.
    nbdsh -u "nbd+unix:///c?socket=$SOCK" -c 'h.pwrite(b"\x33" * 512, 0)'
    stop_server
    cmp "$TEST_DIR/a.qcow2" "$TEST_DIR/a0.qcow2"
    [[ $(bytes_at "$TEST_DIR/b.raw" 0 2) == 1111 ]]
    [[ $(bytes_at "$TEST_DIR/b0.raw" 0 2) == 3333 ]]
    run "$DISKIMG" serve --export "name=a,file=$TEST_DIR/a.qcow2,throwaway=maybe"
    assert_failure 2
    assert_output --partial "invalid throwaway 'maybe'"
}
