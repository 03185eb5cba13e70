#!/usr/bin/env bats
# Persistent dirty bitmaps: "diskimg info" lists them as qemu-img does,
# "diskimg serve -B NAME" offers qemu:dirty-bitmap:NAME exactly as qemu-nbd
# does (compared extent by extent with nbdinfo and qemu-img map), and
# writing an image never leaves an enabled bitmap that claims to be valid.

load '../helpers'
load 'lib'
load 'qcow2-lib'

setup() {
    require_tool qemu-img qemu-io qemu-nbd nbdinfo jq
    setup_test
    IMG=$TEST_DIR/bm.qcow2
}

teardown() {
    kill_extra_servers
    cleanup_test
}

# make_bitmap_image [SIZE]: enabled bitmap b0 (64k granularity) sees two
# writes; disabled bitmap b1 (512 B granularity) was cleared and sees none;
# b2 (enabled, 4k) is added after the first write, so it sees only the second.
make_bitmap_image() {
    qemu-img create -q -f qcow2 "$IMG" "${1:-64M}"
    qemu-img bitmap --add "$IMG" b0
    qemu-img bitmap --add -g 512 --disable "$IMG" b1
    qemu-io -f qcow2 -c 'write -P 1 1M 64k' "$IMG" >/dev/null
    qemu-img bitmap --add -g 4096 "$IMG" b2
    qemu-io -f qcow2 -c 'write -P 2 10M 5k' -c 'write -P 3 63M 512' "$IMG" >/dev/null
}

# bitmap_flags IMAGE NAME: the flags qemu-img info lists for a bitmap.
bitmap_flags() {
    qemu-img info --output=json "$1" |
        jq -r --arg n "$2" '.["format-specific"].data.bitmaps[] | select(.name == $n) | .flags | join(",")'
}

# map_of URI CONTEXT: nbdinfo's map of one context.
map_of() {
    nbdinfo --map="$2" "$1"
}

@test "info lists bitmaps with the fields and layout of qemu-img info" {
    make_bitmap_image
    diff -u <(qemu-img info --output=json "$IMG") <("$DISKIMG" info --output=json "$IMG")
    diff -u <(qemu-img info "$IMG" | grep -v '^disk size') <("$DISKIMG" info "$IMG" | grep -v '^disk size')
}

@test "serve -B offers qemu:dirty-bitmap contexts that match qemu-nbd extent for extent" {
    make_bitmap_image
    start_server -r -t -B b0 -B b1 -B b2 "$IMG"
    qemu-nbd -r -t -B b0 -B b1 -B b2 -k "$TEST_DIR/q.sock" "$IMG" 2>>"$SERVER_LOG" &
    EXTRA_PIDS+=("$!")
    wait_until 10 unix_listening "$TEST_DIR/q.sock"
    local quri="nbd+unix:///?socket=$TEST_DIR/q.sock" b
    for b in b0 b1 b2; do
        run map_of "$URI" "qemu:dirty-bitmap:$b"
        assert_success
        [[ -n "$output" ]]
        diff -u <(map_of "$quri" "qemu:dirty-bitmap:$b") <(printf '%s\n' "$output")
    done
    # Exactly the ranges each bitmap saw.
    run map_of "$URI" qemu:dirty-bitmap:b0
    assert_line --regexp '^ +1048576 +65536 +1 +dirty$'
    assert_line --regexp '^ +10485760 +65536 +1 +dirty$'
    run map_of "$URI" qemu:dirty-bitmap:b1
    assert_output --regexp '^ +0 +67108864 +0 +clean$'
    run map_of "$URI" qemu:dirty-bitmap:b2
    refute_line --regexp '^ +1048576 .*dirty$'
    assert_line --regexp '^ +10485760 +8192 +1 +dirty$'
    assert_line --regexp '^ +66060288 +4096 +1 +dirty$'
    # The export lists every context, as qemu-nbd's does.
    run bash -c "nbdinfo --json '$URI' | jq -r '.exports[0].contexts[]'"
    assert_success
    assert_line qemu:dirty-bitmap:b0
    assert_line qemu:dirty-bitmap:b2
    assert_line base:allocation
}

@test "qemu-img map reads a bitmap through x-dirty-bitmap as from qemu-nbd" {
    make_bitmap_image
    start_server -r -t -B b2 "$IMG"
    qemu-nbd -r -t -B b2 -k "$TEST_DIR/q.sock" "$IMG" 2>>"$SERVER_LOG" &
    EXTRA_PIDS+=("$!")
    wait_until 10 unix_listening "$TEST_DIR/q.sock"
    local opts=driver=nbd,server.type=unix,x-dirty-bitmap=qemu:dirty-bitmap:b2,server.path=
    diff -u <(qemu-img map --output=json --image-opts "${opts}$TEST_DIR/q.sock") \
        <(qemu-img map --output=json --image-opts "${opts}$SOCK")
}

@test "block status of a bitmap honours REQ_ONE, offsets and ranges" {
    require_nbd_python
    make_bitmap_image
    start_server -r -t -B b2 "$IMG"
    py "$URI" <<'EOF'
import nbd, sys
h = nbd.NBD()
h.add_meta_context("qemu:dirty-bitmap:b2")
h.connect_uri(sys.argv[1])
got = []
def cb(meta, off, ents, err):
    got.append((meta, off, list(ents)))
    return 0
# From inside the dirty run at 10M (4k granularity: 8k dirty from 10M).
h.block_status(1 << 20, 10 * 2**20 + 4096, cb)
assert got[-1][0] == "qemu:dirty-bitmap:b2", got
assert got[-1][2][:4] == [4096, 1, (1 << 20) - 4096, 0], got[-1]
h.block_status(1 << 20, 0, cb, flags=nbd.CMD_FLAG_REQ_ONE)
assert got[-1][2] == [1 << 20, 0], got[-1]
# The last, partial range of the disk.
h.block_status(512, 63 * 2**20, cb)
assert got[-1][2] == [512, 1], got[-1]
EOF
}

@test "an enabled bitmap on a writable export is refused, and the image is left as it was" {
    make_bitmap_image
    cp "$IMG" "$TEST_DIR/before.qcow2"
    run "$DISKIMG" serve -k "$SOCK" -B b0 "$IMG"
    assert_failure 1
    assert_output --partial "bitmap 'b0' is enabled and the export is writable"
    [[ ${#lines[@]} -eq 1 ]]
    cmp "$IMG" "$TEST_DIR/before.qcow2"
    [[ $(bitmap_flags "$IMG" b0) == auto ]]
}

@test "a disabled bitmap may be exported read-write" {
    make_bitmap_image
    start_server -t -B b1 "$IMG"
    run map_of "$URI" qemu:dirty-bitmap:b1
    assert_success
    assert_output --regexp 'clean$'
}

@test "unknown bitmaps, raw images, in-use bitmaps and snapshots are refused with one line" {
    make_bitmap_image
    run "$DISKIMG" serve -r -k "$SOCK" -B nope "$IMG"
    assert_failure 1
    assert_output --partial "no bitmap named 'nope'"
    qemu-img create -q -f raw "$TEST_DIR/r.img" 1M
    run "$DISKIMG" serve -r -k "$SOCK" -B b0 "$TEST_DIR/r.img"
    assert_failure 1
    assert_output --partial "has no persistent bitmaps"
    qemu-img snapshot -c s1 "$IMG"
    run "$DISKIMG" serve -k "$SOCK" -l s1 -B b0 "$IMG"
    assert_failure 1
    assert_output --partial "not a snapshot"
    # Writing through diskimg marks b0 in use: it can no longer be exported.
    "$DISKIMG" convert -n -f raw -O qcow2 "$TEST_DIR/r.img" "$IMG"
    run "$DISKIMG" serve -r -k "$SOCK" -B b0 "$IMG"
    assert_failure 1
    assert_output --partial "bitmap 'b0' is in use"
    run "$DISKIMG" serve -r -k "$SOCK" -B b1 --export name=a,file="$IMG"
    assert_failure 2
    assert_output --partial "-B applies to IMAGE"
}

@test "writing marks enabled bitmaps in use, keeps disabled ones valid, and qemu-img check stays clean" {
    make_bitmap_image
    start_server "$IMG"
    qemu-io -f raw -c 'write -P 9 2M 64k' "$URI" >/dev/null
    stop_server
    qemu_check_clean "$IMG"
    [[ $(bitmap_flags "$IMG" b0) == in-use,auto ]]
    [[ $(bitmap_flags "$IMG" b2) == in-use,auto ]]
    [[ $(bitmap_flags "$IMG" b1) == "" ]]
    # qemu still uses the disabled bitmap, and diskimg check agrees.
    qemu-img bitmap --enable "$IMG" b1
    "$DISKIMG" check "$IMG"
}

@test "opening for writing without writing leaves the bitmaps untouched" {
    make_bitmap_image
    cp "$IMG" "$TEST_DIR/before.qcow2"
    start_server "$IMG"
    qemu-io -f raw -r -c 'read 0 1M' "$URI" >/dev/null
    stop_server
    cmp "$IMG" "$TEST_DIR/before.qcow2"
}

@test "resize refuses an image with bitmaps; a corrupt bitmap directory is ignored, not fatal" {
    make_bitmap_image
    run "$DISKIMG" resize "$IMG" +1M
    assert_failure 1
    assert_output --partial "persistent bitmaps"
    # Point the bitmap directory past the end of the file.
    "$PYTHON3" - "$IMG" <<'EOF'
import struct, sys
f = open(sys.argv[1], "r+b")
h = f.read(4096)
off = struct.unpack(">I", h[100:104])[0]
while True:
    t, l = struct.unpack(">II", h[off:off + 8])
    assert t != 0, "no bitmaps extension"
    if t == 0x23852875:
        f.seek(off + 8 + 16)
        f.write(struct.pack(">Q", 1 << 40))
        break
    off += 8 + ((l + 7) & ~7)
EOF
    run "$DISKIMG" serve -r -k "$SOCK" -B b0 "$IMG"
    assert_failure 1
    assert_output --partial "bitmaps extension ignored"
    # The data is still served, and a write drops the broken extension the
    # way the spec lets a program without bitmap support do.
    start_server "$IMG"
    qemu-io -f raw -c 'write -P 7 0 4k' "$URI" >/dev/null
    stop_server
    run qemu-img info --output=json "$IMG"
    assert_success
    refute_output --partial '"bitmaps"'
}
