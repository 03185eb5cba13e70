# tests/formats-lib.bash: round trips between diskimg and qemu-img for an
# image format (load '../formats-lib' after '../helpers', in a test with
# TEST_DIR set).  Every format driver's suite uses the same pattern so
# that each is held to the same bar: data, zeroes written as data and
# holes, at a size that need not be a multiple of the block size.

# make_pattern_raw FILE SIZE: a raw image of SIZE bytes holding
# - distinct data in the first 64 KiB,
# - zeroes written as data (allocated on the host) at 1 MiB + 4 KiB,
# - a hole elsewhere,
# - data in the last 3000 bytes (or fewer, for tiny sizes), so a size
#   that is not a multiple of the block size has data in its last block.
make_pattern_raw() {
    "$PYTHON3" - "$1" "$2" <<'PY'
import sys
path, size = sys.argv[1], int(sys.argv[2])
with open(path, "wb") as f:
    f.truncate(size)
    def put(off, data):
        if off < size:
            f.seek(off)
            f.write(data[:size - off])
    put(0, bytes((i * 7 + 3) % 251 for i in range(65536)))
    put((1 << 20) + 4096, bytes(65536))
    put(3 << 20, b"diskimg middle" * 100)
    tail = min(3000, size)
    put(size - tail, bytes((i * 13 + 1) % 253 for i in range(tail)))
PY
}

# qemu_format_has_check FMT: does qemu-img check know the format?
qemu_format_has_check() {
    case "$1" in qcow2 | vmdk | vhdx | vdi | qed | parallels) return 0 ;; esac
    return 1
}

# roundtrip_written_by_diskimg FMT OPTIONS SIZE: diskimg writes FMT from a
# pattern; qemu-img must name the format, see a virtual size of at least
# SIZE (vpc rounds up to its geometry), find the guest data equal and
# check the image clean where it checks the format.  OPTIONS may be "".
roundtrip_written_by_diskimg() {
    local fmt=$1 opts=$2 size=$3
    local src=$TEST_DIR/src.raw out=$TEST_DIR/by-diskimg.$fmt
    make_pattern_raw "$src" "$size"
    rm -f "$out"
    run "$DISKIMG" convert -f raw -O "$fmt" ${opts:+-o "$opts"} "$src" "$out"
    assert_success
    run qemu-img info --output=json -f "$fmt" "$out"
    assert_success
    local vsize
    vsize=$(jq -r '."virtual-size"' <<<"$output")
    [[ $(jq -r .format <<<"$output") == "$fmt" ]]
    ((vsize >= size))
    run qemu-img compare -f raw -F "$fmt" "$src" "$out"
    assert_success
    if qemu_format_has_check "$fmt"; then
        run qemu-img check -f "$fmt" "$out"
        assert_success
    fi
}

# roundtrip_read_by_diskimg FMT OPTIONS SIZE: qemu-img writes FMT from a
# pattern; diskimg must probe the format, compare the guest data equal,
# and convert it back to the same bytes.
roundtrip_read_by_diskimg() {
    local fmt=$1 opts=$2 size=$3
    local src=$TEST_DIR/src.raw in=$TEST_DIR/by-qemu.$fmt back=$TEST_DIR/back.raw
    make_pattern_raw "$src" "$size"
    rm -f "$in" "$back"
    run qemu-img convert -f raw -O "$fmt" ${opts:+-o "$opts"} "$src" "$in"
    assert_success
    run "$DISKIMG" info --output=json "$in"
    assert_success
    [[ $(jq -r .format <<<"$output") == "$fmt" ]]
    run "$DISKIMG" compare -f raw -F "$fmt" "$src" "$in"
    assert_success
    run "$DISKIMG" convert -f "$fmt" -O raw "$in" "$back"
    assert_success
    # vpc may round the size up: the extra bytes must read as zeroes
    cmp -n "$size" "$src" "$back"
    [[ $(stat -c %s "$back") -ge $size ]]
    cmp <(tail -c +$((size + 1)) "$back" | tr -d '\0' | head -c 1) /dev/null
}
