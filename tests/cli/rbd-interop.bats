#!/usr/bin/env bats
# rbd: images in a real Ceph cluster, checked with Ceph's own rbd command.
# What diskimg writes is read back with rbd export, rbd diff and rbd info;
# what rbd import and rbd snap create made is read through diskimg.  One
# cluster for the file (ceph-lib.bash); every image has its own name.

load '../helpers'
load 'ceph-lib'

OBJ=4194304 # rbd's default object size: rbd diff's granularity here

setup_file() { ceph_start; }
teardown_file() { ceph_stop; }
setup() { setup_test; }
teardown() { cleanup_test; }

# put_random FILE OFFSET LENGTH: random bytes there, the rest untouched.
put_random() {
    head -c "$3" /dev/urandom | dd of="$1" bs=64k seek="$2" oflag=seek_bytes conv=notrunc status=none
}

# put_zeroes FILE OFFSET LENGTH: zeroes written (allocated), not a hole.
put_zeroes() {
    head -c "$3" /dev/zero | dd of="$1" bs=64k seek="$2" oflag=seek_bytes conv=notrunc status=none
}

# flip_byte FILE OFFSET: the byte there inverted, so it surely differs.
flip_byte() {
    local b
    b=$(od -An -tu1 -j "$2" -N1 "$1")
    printf "\\$(printf '%03o' $((255 - b)))" |
        dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# objects: "offset length" lines in, the object numbers they touch out.
objects() {
    awk -v o="$OBJ" '$2 > 0 { for (i = int($1 / o); i <= int(($1 + $2 - 1) / o); i++) print i }' |
        sort -un | tr '\n' ' '
}

# rbd_objects IMAGE: the objects of pool rbd's IMAGE that hold data, per
# rbd diff (an object a write created, zeroes or not, is listed).
rbd_objects() {
    rbd diff --format json "rbd/$1" | jq -r '.[] | "\(.offset) \(.length)"' | objects
}

# rbd_size IMAGE: the size rbd info reports.
rbd_size() {
    rbd info --format json "rbd/$1" | jq -r .size
}

# map_data NAME: the data extents diskimg map reports, "start length".
map_data() {
    "$DISKIMG" map --output=json "$1" | jq -r '.[] | select(.data) | "\(.start) \(.length)"'
}

# covered "START LENGTH"... : every region given on the command line lies
# inside the union of the extents read from stdin.
covered() {
    local regions="$*"
    awk -v want="$regions" '
        { s[NR] = $1; e[NR] = $1 + $2 }
        END {
            n = split(want, w, " ")
            for (i = 1; i < n; i += 2) {
                pos = w[i]; end = w[i] + w[i + 1]
                moved = 1
                while (pos < end && moved) {
                    moved = 0
                    for (j = 1; j <= NR; j++)
                        if (s[j] <= pos && e[j] > pos) { pos = e[j]; moved = 1 }
                }
                if (pos < end) { print "not covered: " w[i] " " w[i + 1]; exit 1 }
            }
        }'
}

checksum_of() {
    "$DISKIMG" checksum "$1" | cut -d' ' -f1
}

@test "rbd: create and resize are what rbd info reports" {
    "$DISKIMG" create -f raw rbd:rbd/made 64M
    [[ $(rbd_size made) -eq 67108864 ]]
    # creating wrote nothing
    [[ -z $(rbd_objects made) ]]
    run "$DISKIMG" info --output=json rbd:rbd/made
    assert_success
    [[ $(jq -r '."virtual-size"' <<<"$output") -eq 67108864 ]]
    [[ $(jq -r .format <<<"$output") == raw ]]

    "$DISKIMG" resize rbd:rbd/made 96M
    [[ $(rbd_size made) -eq 100663296 ]]
    "$DISKIMG" resize --shrink rbd:rbd/made 32M
    [[ $(rbd_size made) -eq 33554432 ]]
    run "$DISKIMG" info --output=json rbd:rbd/made
    [[ $(jq -r '."virtual-size"' <<<"$output") -eq 33554432 ]]
}

@test "rbd: convert into rbd writes the bytes rbd export reads, and no holes or zeroes" {
    local src=$TEST_DIR/src.raw
    # 8 objects: data in objects 1 and 5, written zeroes in object 3,
    # holes everywhere else
    truncate -s 32M "$src"
    put_random "$src" $((4 << 20)) $((1 << 20))
    put_random "$src" $((20 << 20 | 512 << 10)) $((256 << 10))
    put_zeroes "$src" $((12 << 20)) $((2 << 20))
    qemu-img convert -f raw -O qcow2 "$src" "$TEST_DIR/src.qcow2"

    "$DISKIMG" convert -f raw -O raw "$src" rbd:rbd/conv
    [[ $(rbd_size conv) -eq 33554432 ]]
    rbd export --no-progress rbd/conv - | cmp - "$src"
    run rbd_objects conv
    assert_output "1 5 "

    # from another format, and with the parallel copy
    "$DISKIMG" convert -f qcow2 -O raw -m 4 "$TEST_DIR/src.qcow2" rbd:rbd/conv2
    rbd export --no-progress rbd/conv2 - | cmp - "$src"
    run rbd_objects conv2
    assert_output "1 5 "

    # a convert that fails leaves no image behind
    run "$DISKIMG" convert -f raw -O raw "$TEST_DIR/missing.raw" rbd:rbd/never
    assert_failure 1
    run rbd info rbd/never
    assert_failure
}

@test "rbd: what rbd import wrote reads back through info, map, compare, convert and checksum" {
    local file=$TEST_DIR/imp.raw
    # 6 objects: data in 0, 2 and at the end of 5, zeroes in 3 (which
    # rbd import skips), holes in 1 and 4
    truncate -s 24M "$file"
    put_random "$file" 0 $((64 << 10))
    put_random "$file" $((9 << 20)) $((512 << 10))
    put_random "$file" $((23 << 20 | 512 << 10)) $((512 << 10))
    put_zeroes "$file" $((12 << 20)) $((1 << 20))
    rbd import --no-progress "$file" rbd/imp

    run "$DISKIMG" info --output=json rbd:rbd/imp
    assert_success
    [[ $(jq -r '."virtual-size"' <<<"$output") -eq 25165824 ]]
    run "$DISKIMG" info rbd:rbd/imp
    assert_success
    assert_output --partial "virtual size: 24 MiB (25165824 bytes)"

    # map: data wherever the file has data, and only in objects rbd
    # itself lists
    map_data rbd:rbd/imp | covered 0 65536 9437184 524288 24641536 524288
    local mapped listed
    mapped=$(map_data rbd:rbd/imp | objects)
    listed=$(rbd_objects imp)
    [[ $listed == "0 2 5 " ]]
    [[ -z $(comm -23 <(tr ' ' '\n' <<<"$mapped" | sort) <(tr ' ' '\n' <<<"$listed" | sort)) ]]

    "$DISKIMG" compare -f raw -F raw "$file" rbd:rbd/imp
    cp "$file" "$TEST_DIR/other.raw"
    flip_byte "$TEST_DIR/other.raw" $((9 << 20 | 4097))
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/other.raw" rbd:rbd/imp
    assert_failure 1

    [[ $(checksum_of rbd:rbd/imp) == $(checksum_of "$file") ]]

    "$DISKIMG" convert -O qcow2 rbd:rbd/imp "$TEST_DIR/out.qcow2"
    qemu-img compare -f qcow2 -F raw "$TEST_DIR/out.qcow2" "$file"
    "$DISKIMG" convert -O raw rbd:rbd/imp "$TEST_DIR/out.raw"
    cmp "$TEST_DIR/out.raw" "$file"
    # sparse: the holes of the source stay holes (less than the data plus
    # one object allocated)
    [[ $(du -B1 "$TEST_DIR/out.raw" | cut -f1) -lt $((2 << 20 | OBJ)) ]]
}

@test "rbd: a snapshot from rbd snap create reads through @SNAP and refuses writes" {
    local file=$TEST_DIR/snap.raw
    head -c 8M /dev/urandom >"$file"
    rbd import --no-progress "$file" rbd/snapped
    rbd snap create --no-progress rbd/snapped@one
    # the image moves on after the snapshot
    qemu-io -f raw -c 'write -P 0x55 0 1M' rbd:rbd/snapped >/dev/null

    [[ $(checksum_of rbd:rbd/snapped@one) == $(checksum_of "$file") ]]
    [[ $(checksum_of rbd:rbd/snapped) != $(checksum_of "$file") ]]
    "$DISKIMG" compare -f raw -F raw "$file" rbd:rbd/snapped@one
    run "$DISKIMG" info rbd:rbd/snapped@one
    assert_success
    assert_output --partial "virtual size: 8 MiB"

    # served read-only, it is the snapshot's bytes
    start_server -r -f raw rbd:rbd/snapped@one
    nbdsh -u "$URI" -c '
assert h.is_read_only()
want = open("'"$file"'", "rb").read(1 << 20)
assert h.pread(1 << 20, 0) == want
try:
    h.pwrite(b"x" * 512, 0)
    assert False, "write accepted"
except nbd.Error:
    pass
'
    stop_server

    # every way to write it is refused, as qemu refuses them
    run --separate-stderr "$DISKIMG" serve -f raw -k "$TEST_DIR/w.sock" rbd:rbd/snapped@one
    assert_failure 1
    [[ $stderr == *rbd/snapped@one* && $stderr == *read-only* ]]
    [[ $(wc -l <<<"$stderr") -eq 1 ]]
    run --separate-stderr "$DISKIMG" resize rbd:rbd/snapped@one 16M
    assert_failure 1
    [[ $stderr == *read-only* ]]
    run --separate-stderr "$DISKIMG" convert -n -f raw -O raw "$file" rbd:rbd/snapped@one
    assert_failure 1
    rbd export --no-progress rbd/snapped@one - | cmp - "$file"
}
