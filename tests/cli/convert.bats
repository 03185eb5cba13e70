#!/usr/bin/env bats
# diskimg convert: options and usage errors, one-line errors, every pair
# of raw / qcow2 / compressed qcow2 (zlib, zstd), sparseness (-S),
# -n, a too small target, -B/-F, -o backing_file, -l, --target-is-zero,
# -W/-m, -t flushing, interrupts (exit 130/143, created target removed,
# -n target kept), failures, --progress=json, and the size of compressed
# output against qemu-img convert -c.

load '../helpers'
load '../interop/lib'

setup() { setup_test; }
teardown() {
    kill_extra_servers
    cleanup_test
}

MiB=1048576

# make_src FILE: 4 MiB raw image with every kind of range:
#   [0, 1M)          data, except an aligned 8k zero run at 64k (written zeroes)
#   [1M, 1.5M)       hole
#   [1.5M, 2M)       written zeroes (allocated)
#   [2M+4k, 2M+132k) data, not cluster aligned
#   [2.5M, 4M-64k)   hole
#   [4M-64k, 4M)     data (the tail)
make_src() {
    "$PYTHON3" - "$1" <<'EOF'
import sys
M = 1 << 20
def pat(n, salt):
    out = bytearray()
    i = 0
    while len(out) < n:
        out += (i * 2654435761 + salt).to_bytes(8, "big") + b"diskimg!"
        i += 1
    return bytes(out[:n])
with open(sys.argv[1], "wb") as f:
    f.truncate(4 * M)
    f.seek(0); f.write(pat(M, 1))
    f.seek(64 << 10); f.write(bytes(8 << 10))
    f.seek(M + M // 2); f.write(bytes(M // 2))
    f.seek(2 * M + 4096); f.write(pat(128 << 10, 2))
    f.seek(4 * M - (64 << 10)); f.write(pat(64 << 10, 3))
EOF
}

# map_kind IMAGE OFFSET LENGTH: "data" if qemu-img map says every byte of
# the range is data, "hole" if none is, else "mixed".
map_kind() {
    qemu-img map --output=json "$1" | "$PYTHON3" -c '
import json, sys
off, n = int(sys.argv[1]), int(sys.argv[2])
end = off + n
data = hole = 0
for e in json.load(sys.stdin):
    s, l = e["start"], e["length"]
    o = max(0, min(end, s + l) - max(off, s))
    if e["data"]:
        data += o
    else:
        hole += o
print("data" if data == n else "hole" if hole == n else "mixed")' "$2" "$3"
}

# allocated FILE: bytes the file really occupies on disk.
allocated() {
    echo $(($(stat -c '%b * %B' "$1")))
}

# same_as_src SRC IMAGE: equal by qemu-img compare and, converted to raw by
# qemu-img and by diskimg, byte for byte (cmp).
same_as_src() {
    local src=$1 img=$2
    qemu-img compare -q "$src" "$img" || { echo "qemu-img compare: $src != $img" >&2; return 1; }
    rm -f "$TEST_DIR/chk.raw" "$TEST_DIR/chk2.raw"
    qemu-img convert -O raw "$img" "$TEST_DIR/chk.raw"
    cmp "$src" "$TEST_DIR/chk.raw"
    "$DISKIMG" convert -O raw "$img" "$TEST_DIR/chk2.raw"
    cmp "$src" "$TEST_DIR/chk2.raw"
}

# The four source flavours, all with make_src's content.
make_sources() {
    make_src "$TEST_DIR/src.raw"
    qemu-img convert -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/src.qcow2"
    qemu-img convert -c -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/src-zlib.qcow2"
    qemu-img convert -c -O qcow2 -o compression_type=zstd "$TEST_DIR/src.raw" "$TEST_DIR/src-zstd.qcow2"
}

# convert_all_into TARGET_OPTS...: convert every source flavour with these
# options and check each result against src.raw.
convert_all_into() {
    local s
    for s in src.raw src.qcow2 src-zlib.qcow2 src-zstd.qcow2; do
        rm -f "$TEST_DIR/dst.img"
        run --separate-stderr "$DISKIMG" convert "$@" "$TEST_DIR/$s" "$TEST_DIR/dst.img"
        [[ $status -eq 0 ]] || { echo "convert $* $s: exit $status: $stderr" >&2; return 1; }
        same_as_src "$TEST_DIR/src.raw" "$TEST_DIR/dst.img" || { echo "from $s with $*" >&2; return 1; }
        if [[ "$*" == *qcow2* ]]; then
            qemu-img check -q "$TEST_DIR/dst.img" || { echo "check failed: $s $*" >&2; return 1; }
        fi
    done
}

# qcow2_info IMAGE KEY: a field of qemu-img info's format-specific data.
qcow2_info() {
    qemu-img info --output=json "$1" | "$PYTHON3" -c '
import json, sys
print(json.load(sys.stdin)["format-specific"]["data"].get(sys.argv[1]))' "$2"
}

# compressed_clusters IMAGE: qemu-img check's count of compressed clusters.
compressed_clusters() {
    qemu-img check --output=json "$1" | "$PYTHON3" -c '
import json, sys
print(json.load(sys.stdin).get("compressed-clusters", 0))'
}


# A slow, data-only source: 128 MiB of nbdkit's pattern plugin, every read
# delayed, so that a convert of it takes seconds.
start_slow_source() {
    require_tool nbdkit
    start_kit "$TEST_DIR/slow.sock" --filter=delay pattern size=128M rdelay=300ms
    SLOW_URI="nbd+unix:///?socket=$TEST_DIR/slow.sock"
}

# start_convert_bg ARGS...: convert in the background with JSON progress
# on $TEST_DIR/progress; waits until it has copied something.
start_convert_bg() {
    "$DISKIMG" convert --progress=json "$@" 2>"$TEST_DIR/progress" &
    CONVERT_PID=$!
    wait_until 30 grep -q '"progress"' "$TEST_DIR/progress"
}

# --- help and usage errors ---------------------------------------------

@test "convert --help lists the qemu-img convert spellings" {
    run "$DISKIMG" convert --help
    assert_success
    assert_output --partial "Usage: diskimg convert"
    for opt in " -f FMT" " -O FMT" " -o OPTIONS" " -c " " -n " " -S SIZE" " -t CACHE" \
               " -T CACHE" " -W " " -m N" " -B BACKING" " -l SNAPSHOT" "--target-is-zero" \
               " -p " "--progress=json" " -q " "130"; do
        assert_output --partial -- "$opt"
    done
    run "$DISKIMG" help convert
    assert_success
    assert_output --partial "Usage: diskimg convert"
}

# usage_error MESSAGE ARGS...: convert ARGS exits 2 with MESSAGE and the hint.
usage_error() {
    local msg=$1
    shift
    run --separate-stderr "$DISKIMG" convert "$@"
    if [[ $status -ne 2 || "$stderr" != *"$msg"* ||
          "$stderr" != *"Try 'diskimg convert --help'"* ]]; then
        echo "convert $*: exit $status, stderr: $stderr (wanted exit 2 and '$msg')" >&2
        return 1
    fi
    [[ -z "$output" ]]
}

@test "convert usage errors exit 2 with the reason" {
    truncate -s 1M "$TEST_DIR/a.raw"
    local a=$TEST_DIR/a.raw b=$TEST_DIR/b.raw
    usage_error "expected SRC and DST"
    usage_error "expected SRC and DST" "$a"
    usage_error "expected SRC and DST" "$a" "$b" "$TEST_DIR/c.raw"
    usage_error "unknown option '--bogus'" --bogus "$a" "$b"
    usage_error "unknown option" -Z "$a" "$b"
    usage_error "option '-f' needs a value" -f
    usage_error "-S takes a multiple of 512" -S 100 "$a" "$b"
    usage_error "-S takes a multiple of 512" -S 32M "$a" "$b"
    usage_error "-S takes a multiple of 512" -S lots "$a" "$b"
    usage_error "-m takes 1 to 64, not '0'" -m 0 "$a" "$b"
    usage_error "-m takes 1 to 64, not '65'" -m 65 "$a" "$b"
    usage_error "-m takes 1 to 64" -m x "$a" "$b"
    usage_error "invalid cache mode 'bogus'" -t bogus "$a" "$b"
    usage_error "invalid cache mode 'fast'" -T fast "$a" "$b"
    usage_error "--progress takes human or json" --progress=xml "$a" "$b"
    usage_error "-c needs a format with compression" -c "$a" "$b"
    usage_error "--target-is-zero needs -n" --target-is-zero "$a" "$b"
    usage_error "(-n)" -n -o cluster_size=4k "$a" "$b"
    # None of these created anything.
    [[ ! -e "$b" && ! -e "$TEST_DIR/c.raw" ]]
}

# --- one-line errors ---------------------------------------------------

# one_line_error ARGS...: convert fails with exit 1 and one "diskimg: " line.
one_line_error() {
    run --separate-stderr "$DISKIMG" convert "$@"
    if [[ $status -ne 1 || $(printf '%s\n' "$stderr" | wc -l) -ne 1 || "$stderr" != "diskimg: "* ]]; then
        echo "convert $*: exit $status, stderr: $stderr (wanted exit 1 and one line)" >&2
        return 1
    fi
}

@test "convert errors: one line, exit 1, and no target left behind" {
    make_src "$TEST_DIR/src.raw"
    local d=$TEST_DIR/dst.img
    one_line_error "$TEST_DIR/nope.raw" "$d"
    [[ "$stderr" == *"nope.raw: No such file or directory"* ]]
    one_line_error "$TEST_DIR/src.raw" "$TEST_DIR/nodir/x.raw"
    [[ "$stderr" == *"nodir/x.raw"* ]]
    one_line_error -n "$TEST_DIR/src.raw" "$TEST_DIR/missing.raw"
    [[ "$stderr" == *"missing.raw: No such file or directory"* ]]
    one_line_error -O bochs "$TEST_DIR/src.raw" "$d"
    [[ "$stderr" == *"bochs"* ]]
    one_line_error -f qcow2 "$TEST_DIR/src.raw" "$d"
    [[ "$stderr" == *"qcow2"* ]]
    one_line_error -O qcow2 -o cluster_size=3000 "$TEST_DIR/src.raw" "$d"
    [[ "$stderr" == *"luster size"* ]]
    one_line_error -l s1 "$TEST_DIR/src.raw" "$d"
    [[ "$stderr" == *"snapshot"* ]]
    one_line_error -O raw -B "$TEST_DIR/src.raw" "$TEST_DIR/src.raw" "$d"
    [[ "$stderr" == *"Backing file not supported for file format 'raw'"* ]]
    one_line_error -O qcow2 -B "$TEST_DIR/nope.qcow2" -F qcow2 "$TEST_DIR/src.raw" "$d"
    [[ "$stderr" == *"nope.qcow2"* ]]
    [[ ! -e "$d" && ! -e "$TEST_DIR/missing.raw" ]]
}

@test "convert into a target smaller than the source is refused (-n), target untouched" {
    make_src "$TEST_DIR/src.raw"
    make_pattern "$TEST_DIR/small.raw" $((3 * MiB))
    local before
    before=$(md5sum <"$TEST_DIR/small.raw")
    one_line_error -n "$TEST_DIR/src.raw" "$TEST_DIR/small.raw"
    [[ "$stderr" == *"target (3145728 bytes) is smaller than the source (4194304 bytes)"* ]]
    [[ $(md5sum <"$TEST_DIR/small.raw") == "$before" ]]
    # A qcow2 target too.
    qemu-img create -q -f qcow2 "$TEST_DIR/small.qcow2" 2M
    one_line_error -n "$TEST_DIR/src.raw" "$TEST_DIR/small.qcow2"
    [[ "$stderr" == *"smaller than the source"* ]]
    qemu-img check -q "$TEST_DIR/small.qcow2"
}

# --- every pair of formats -----------------------------------------------

@test "convert raw/qcow2/compressed sources -> raw" {
    require_tool qemu-img
    make_sources
    convert_all_into
    convert_all_into -O raw
}

@test "convert raw/qcow2/compressed sources -> qcow2" {
    require_tool qemu-img
    make_sources
    convert_all_into -O qcow2
    [[ $(compressed_clusters "$TEST_DIR/dst.img") -eq 0 ]]
}

@test "convert raw/qcow2/compressed sources -> compressed qcow2 (zlib)" {
    require_tool qemu-img
    make_sources
    convert_all_into -O qcow2 -c
    [[ $(qcow2_info "$TEST_DIR/dst.img" compression-type) == zlib ]]
    [[ $(compressed_clusters "$TEST_DIR/dst.img") -gt 0 ]]
}

@test "convert raw/qcow2/compressed sources -> compressed qcow2 (zstd)" {
    require_tool qemu-img
    make_sources
    convert_all_into -O qcow2 -c -o compression_type=zstd
    [[ $(qcow2_info "$TEST_DIR/dst.img" compression-type) == zstd ]]
    [[ $(compressed_clusters "$TEST_DIR/dst.img") -gt 0 ]]
}

@test "convert with small clusters, extended L2 and repeated -o" {
    require_tool qemu-img
    make_sources
    convert_all_into -O qcow2 -o cluster_size=4k
    [[ $(qemu-img info --output=json "$TEST_DIR/dst.img" | "$PYTHON3" -c 'import json,sys; print(json.load(sys.stdin)["cluster-size"])') -eq 4096 ]]
    convert_all_into -O qcow2 -c -o cluster_size=1k -o compression_type=zstd
    [[ $(qcow2_info "$TEST_DIR/dst.img" compression-type) == zstd ]]
    convert_all_into -O qcow2 -o extended_l2=on
    [[ $(qcow2_info "$TEST_DIR/dst.img" extended-l2) == True ]]
}

@test "convert a qcow2 with zero clusters, discards and a backing file: flattened" {
    require_tool qemu-img qemu-io
    local b=$TEST_DIR/base.qcow2 t=$TEST_DIR/top.qcow2
    qemu-img create -q -f qcow2 "$b" 4M
    qemu-io -f qcow2 -c 'write -P 0x11 0 3M' "$b" >/dev/null
    qemu-img create -q -f qcow2 -b "$b" -F qcow2 "$t"
    qemu-io -f qcow2 -c 'write -P 0x22 512k 256k' -c 'write -z 1M 128k' \
        -c 'write -z -u 2M 64k' -c 'discard 2560k 64k' -c 'write -P 0x33 3584k 300k' "$t" >/dev/null
    qemu-img convert -O raw "$t" "$TEST_DIR/ref.raw"
    "$DISKIMG" convert "$t" "$TEST_DIR/flat.raw"
    cmp "$TEST_DIR/ref.raw" "$TEST_DIR/flat.raw"
    "$DISKIMG" convert -O qcow2 "$t" "$TEST_DIR/flat.qcow2"
    qemu-img compare -q "$t" "$TEST_DIR/flat.qcow2"
    # Flattened: no backing file.
    ! qemu-img info "$TEST_DIR/flat.qcow2" | grep -q "backing file"
}

@test "convert an unaligned raw size: content equal, only zeroes beyond it" {
    require_tool qemu-img
    make_pattern "$TEST_DIR/u.raw" $((3 * MiB + 12345))
    local n=$((3 * MiB + 12345)) o
    for o in "" "-O qcow2" "-O qcow2 -c"; do
        rm -f "$TEST_DIR/u.out" "$TEST_DIR/u.back"
        "$DISKIMG" convert $o "$TEST_DIR/u.raw" "$TEST_DIR/u.out"
        qemu-img compare -q "$TEST_DIR/u.raw" "$TEST_DIR/u.out"
        "$DISKIMG" convert "$TEST_DIR/u.out" "$TEST_DIR/u.back"
        cmp -n $n "$TEST_DIR/u.raw" "$TEST_DIR/u.back"
        local size
        size=$(stat -c %s "$TEST_DIR/u.back")
        [[ $size -ge $n && $size -lt $((n + 512)) ]]
        range_is "$TEST_DIR/u.back" $n $((size - n)) 00
    done
}

# --- sparseness ------------------------------------------------------------

@test "convert keeps holes holes and turns zero data into holes (default -S 4k)" {
    require_tool qemu-img
    make_src "$TEST_DIR/src.raw"
    "$DISKIMG" convert "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
    # The source's holes, its written zeroes and the 8k zero run: holes.
    [[ $(map_kind "$TEST_DIR/dst.raw" $MiB $((MiB / 2))) == hole ]]
    [[ $(map_kind "$TEST_DIR/src.raw" $((3 * MiB / 2)) $((MiB / 2))) == data ]]
    [[ $(map_kind "$TEST_DIR/dst.raw" $((3 * MiB / 2)) $((MiB / 2))) == hole ]]
    [[ $(map_kind "$TEST_DIR/dst.raw" 65536 8192) == hole ]]
    [[ $(map_kind "$TEST_DIR/dst.raw" $((5 * MiB / 2)) $((3 * MiB / 2 - 65536))) == hole ]]
    # The data stays data.
    [[ $(map_kind "$TEST_DIR/dst.raw" 0 65536) == data ]]
    [[ $(map_kind "$TEST_DIR/dst.raw" $((2 * MiB + 4096)) 131072) == data ]]
    [[ $(map_kind "$TEST_DIR/dst.raw" $((4 * MiB - 65536)) 65536) == data ]]
    # On disk: about the data (1 MiB + 192 KiB), far less than the source.
    local a
    a=$(allocated "$TEST_DIR/dst.raw")
    [[ $a -le $((MiB + 512 * 1024)) ]]
    [[ $a -lt $(allocated "$TEST_DIR/src.raw") ]]

    # qcow2: the same ranges are not allocated.
    "$DISKIMG" convert -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    [[ $(map_kind "$TEST_DIR/dst.qcow2" $MiB $MiB) == hole ]]
    [[ $(map_kind "$TEST_DIR/dst.qcow2" 0 65536) == data ]]
    [[ $(stat -c %s "$TEST_DIR/dst.qcow2") -lt $((2 * MiB)) ]]
}

@test "convert -S 0 allocates everything; -S 64k keeps short zero runs as data" {
    require_tool qemu-img
    make_src "$TEST_DIR/src.raw"
    "$DISKIMG" convert -S 0 "$TEST_DIR/src.raw" "$TEST_DIR/s0.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/s0.raw"
    [[ $(map_kind "$TEST_DIR/s0.raw" 0 $((4 * MiB))) == data ]]
    [[ $(allocated "$TEST_DIR/s0.raw") -ge $((4 * MiB)) ]]

    "$DISKIMG" convert -S 0 -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/s0.qcow2"
    qemu-img compare -q "$TEST_DIR/src.raw" "$TEST_DIR/s0.qcow2"
    [[ $(map_kind "$TEST_DIR/s0.qcow2" 0 $((4 * MiB))) == data ]]

    # The 8k zero run at 64k is shorter than 64k: it stays data.
    "$DISKIMG" convert -S 64k "$TEST_DIR/src.raw" "$TEST_DIR/s64.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/s64.raw"
    [[ $(map_kind "$TEST_DIR/s64.raw" 65536 8192) == data ]]
    [[ $(map_kind "$TEST_DIR/s64.raw" $MiB $((MiB / 2))) == hole ]]
}

# --- -n, --target-is-zero ------------------------------------------------

@test "convert -n into an existing larger target: the source's range replaced, the rest kept" {
    require_tool qemu-img
    make_src "$TEST_DIR/src.raw"
    head -c $((5 * MiB)) /dev/urandom >"$TEST_DIR/big.raw"
    cp "$TEST_DIR/big.raw" "$TEST_DIR/big.orig"
    "$DISKIMG" convert -n "$TEST_DIR/src.raw" "$TEST_DIR/big.raw"
    [[ $(stat -c %s "$TEST_DIR/big.raw") -eq $((5 * MiB)) ]]
    cmp -n $((4 * MiB)) "$TEST_DIR/src.raw" "$TEST_DIR/big.raw"
    cmp <(tail -c $MiB "$TEST_DIR/big.orig") <(tail -c $MiB "$TEST_DIR/big.raw")
}

@test "convert -n -O qcow2 into an existing qcow2 full of other data" {
    require_tool qemu-img qemu-io
    make_src "$TEST_DIR/src.raw"
    qemu-img create -q -f qcow2 "$TEST_DIR/t.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 0x5a 0 4M' "$TEST_DIR/t.qcow2" >/dev/null
    "$DISKIMG" convert -n -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/t.qcow2"
    qemu-img compare -q "$TEST_DIR/src.raw" "$TEST_DIR/t.qcow2"
    qemu-img check -q "$TEST_DIR/t.qcow2"
    # and with compression
    "$DISKIMG" convert -n -O qcow2 -c "$TEST_DIR/src.raw" "$TEST_DIR/t.qcow2"
    qemu-img compare -q "$TEST_DIR/src.raw" "$TEST_DIR/t.qcow2"
    qemu-img check -q "$TEST_DIR/t.qcow2"
}

@test "convert without -n replaces an existing file" {
    make_src "$TEST_DIR/src.raw"
    head -c $((6 * MiB)) /dev/urandom >"$TEST_DIR/old.img"
    "$DISKIMG" convert "$TEST_DIR/src.raw" "$TEST_DIR/old.img"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/old.img"
}

@test "convert --target-is-zero: ranges that are zero in SRC are not written" {
    require_tool qemu-img
    make_src "$TEST_DIR/src.raw"
    # A really zero (sparse) target: exact copy, holes stay holes.
    truncate -s 4M "$TEST_DIR/z.raw"
    "$DISKIMG" convert -n --target-is-zero "$TEST_DIR/src.raw" "$TEST_DIR/z.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/z.raw"
    [[ $(map_kind "$TEST_DIR/z.raw" $MiB $MiB) == hole ]]

    # A target that is not zero proves the zero ranges were skipped: the
    # data is copied, the hole at [1M, 1.5M) and the zero run at 64k keep
    # what was there ...
    make_pattern "$TEST_DIR/g.raw" $((4 * MiB))
    "$DISKIMG" convert -n --target-is-zero "$TEST_DIR/src.raw" "$TEST_DIR/g.raw"
    cmp -n 65536 "$TEST_DIR/src.raw" "$TEST_DIR/g.raw"
    cmp -i 73728 -n $((MiB - 73728)) "$TEST_DIR/src.raw" "$TEST_DIR/g.raw"
    ! range_is "$TEST_DIR/g.raw" 65536 8192 00 2>/dev/null
    ! range_is "$TEST_DIR/g.raw" $MiB $((MiB / 2)) 00 2>/dev/null
    # ... while without the option it is zeroed.
    "$DISKIMG" convert -n "$TEST_DIR/src.raw" "$TEST_DIR/g.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/g.raw"
}

# --- backing files and snapshots -------------------------------------------

# map_at IMAGE OFFSET KEY: a field of the qemu-img map entry holding OFFSET.
map_at() {
    qemu-img map --output=json "$1" | "$PYTHON3" -c '
import json, sys
off = int(sys.argv[1])
for e in json.load(sys.stdin):
    if e["start"] <= off < e["start"] + e["length"]:
        print(e.get(sys.argv[2]))' "$2" "$3"
}

# top_bytes IMAGE: bytes qemu-img map shows allocated in the top layer.
top_bytes() {
    qemu-img map --output=json "$1" | "$PYTHON3" -c '
import json, sys
print(sum(e["length"] for e in json.load(sys.stdin) if e["depth"] == 0 and e["present"]))'
}

make_chain() {
    qemu-img create -q -f qcow2 "$TEST_DIR/base.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 0x11 0 2M' "$TEST_DIR/base.qcow2" >/dev/null
    qemu-img create -q -f qcow2 -b "$TEST_DIR/base.qcow2" -F qcow2 "$TEST_DIR/top.qcow2"
    # zero cluster over base data, zeroes written as data over base data,
    # new data over base data, new data beyond the base's data
    qemu-io -f qcow2 -c 'write -z 0 64k' -c 'write -P 0 128k 64k' \
        -c 'write -P 0x22 1M 512k' -c 'write -P 0x33 3M 64k' "$TEST_DIR/top.qcow2" >/dev/null
}

@test "convert -B BASE -F qcow2: the target has the backing file and only the top layer" {
    require_tool qemu-img qemu-io
    make_chain
    cd "$TEST_DIR"
    "$DISKIMG" convert -O qcow2 -B base.qcow2 -F qcow2 top.qcow2 new.qcow2
    qemu-img info new.qcow2 | grep -q "^backing file: base.qcow2"
    qemu-img info new.qcow2 | grep -q "^backing file format: qcow2"
    qemu-img compare -q top.qcow2 new.qcow2
    qemu-img check -q new.qcow2
    # From the base: [64k, 128k), [192k, 1M), [1.5M, 2M).
    [[ $(map_at new.qcow2 $((1536 * 1024)) depth) -eq 1 ]]
    [[ $(map_at new.qcow2 $((512 * 1024)) depth) -eq 1 ]]
    # In the top layer: the zero cluster, the zeroes, the new data.
    [[ $(map_at new.qcow2 0 depth) -eq 0 ]]
    [[ $(map_at new.qcow2 131072 depth) -eq 0 ]]
    [[ $(map_at new.qcow2 $MiB depth) -eq 0 ]]
    [[ $(map_at new.qcow2 $((3 * MiB)) depth) -eq 0 ]]
    # No more than the top layer was copied.
    [[ $(top_bytes new.qcow2) -le $(top_bytes top.qcow2) ]]
    # The same with compression, and with the backing format probed.
    "$DISKIMG" convert -O qcow2 -c -B base.qcow2 -F qcow2 top.qcow2 newc.qcow2
    qemu-img compare -q top.qcow2 newc.qcow2
    "$DISKIMG" convert -O qcow2 -B base.qcow2 top.qcow2 newp.qcow2
    qemu-img compare -q top.qcow2 newp.qcow2
    qemu-img info newp.qcow2 | grep -q "^backing file: base.qcow2"
}

@test "convert -B with a raw source: everything that differs lands in the top layer" {
    require_tool qemu-img qemu-io
    make_chain
    make_src "$TEST_DIR/src.raw"
    cd "$TEST_DIR"
    "$DISKIMG" convert -O qcow2 -B base.qcow2 -F qcow2 src.raw new.qcow2
    # The base has 0x11 where src.raw has holes: they must read as zeroes.
    qemu-img compare -q src.raw new.qcow2
}

@test "convert -o backing_file=BASE: holes in SRC do not show the backing file's data" {
    require_tool qemu-img qemu-io
    make_chain
    make_src "$TEST_DIR/src.raw"
    cd "$TEST_DIR"
    # qemu-img treats -o backing_file like -B; the content must be SRC's.
    run "$DISKIMG" convert -O qcow2 -o backing_file=base.qcow2,backing_fmt=qcow2 src.raw new.qcow2
    assert_success
    qemu-img info new.qcow2 | grep -q "^backing file: base.qcow2"
    run qemu-img compare src.raw new.qcow2
    assert_output "Images are identical."
}

@test "convert -l SNAPSHOT (name or id) copies the snapshot, not the current state" {
    require_tool qemu-img qemu-io
    local s=$TEST_DIR/snap.qcow2
    qemu-img create -q -f qcow2 "$s" 4M
    qemu-io -f qcow2 -c 'write -P 7 0 1M' -c 'write -P 9 3M 64k' "$s" >/dev/null
    qemu-img snapshot -c s1 "$s"
    qemu-io -f qcow2 -c 'write -P 8 0 2M' -c 'discard 3M 64k' "$s" >/dev/null
    qemu-img convert -O raw -l snapshot.name=s1 "$s" "$TEST_DIR/ref.raw"
    "$DISKIMG" convert -l s1 "$s" "$TEST_DIR/s1.raw"
    cmp "$TEST_DIR/ref.raw" "$TEST_DIR/s1.raw"
    "$DISKIMG" convert -l 1 -O qcow2 "$s" "$TEST_DIR/id1.qcow2"
    qemu-img compare -q "$TEST_DIR/ref.raw" "$TEST_DIR/id1.qcow2"
    # Not the current state.
    ! qemu-img compare -q "$s" "$TEST_DIR/s1.raw"
}

# --- -W, -m, cache modes -----------------------------------------------------

@test "convert -W and -m: same result with any number of requests, in or out of order" {
    require_tool qemu-img
    make_sources
    local o
    for o in "-m 1" "-m 64" "-W" "-W -m 1" "-W -m 3" "-W -m 64"; do
        convert_all_into $o
        convert_all_into -O qcow2 $o
    done
    convert_all_into -O qcow2 -c -W -m 5
}

@test "convert -t and -T cache modes give the same data" {
    make_src "$TEST_DIR/src.raw"
    local o
    for o in "-t none" "-t writethrough" "-t directsync" "-t unsafe" "-T none" "-T none -t none"; do
        rm -f "$TEST_DIR/dst.raw"
        "$DISKIMG" convert $o "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
        cmp "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
    done
}

@test "convert flushes the target once at the end, except with -t unsafe; writethrough uses FUA" {
    make_src "$TEST_DIR/src.raw"
    local t
    for t in default unsafe writethrough; do
        truncate -s 4M "$TEST_DIR/t-$t.raw"
        start_server --stats="$TEST_DIR/st-$t.json" "$TEST_DIR/t-$t.raw"
        if [[ $t == default ]]; then
            "$DISKIMG" convert "$TEST_DIR/src.raw" "$URI"
        else
            "$DISKIMG" convert -t $t "$TEST_DIR/src.raw" "$URI"
        fi
        wait_exit "$SERVER_PID"
        SERVER_PID=
        [[ $EXIT_STATUS -eq 0 ]]
        cmp "$TEST_DIR/src.raw" "$TEST_DIR/t-$t.raw"
    done
    [[ $(cmd_count "$TEST_DIR/st-default.json" FLUSH) -ge 1 ]]
    [[ $(cmd_count "$TEST_DIR/st-unsafe.json" FLUSH) -eq 0 ]]
    [[ $(stats_get "$TEST_DIR/st-default.json" 'd["exports"][0]["fua-native"] + d["exports"][0]["fua-emulated"]') -eq 0 ]]
    [[ $(stats_get "$TEST_DIR/st-writethrough.json" 'd["exports"][0]["fua-native"] + d["exports"][0]["fua-emulated"]') -gt 0 ]]
}

# --- NBD targets from the command line --------------------------------------

@test "convert file -> NBD -> file through diskimg serve" {
    make_src "$TEST_DIR/src.raw"
    make_pattern "$TEST_DIR/exp.raw" $((4 * MiB))
    start_server -t "$TEST_DIR/exp.raw"
    "$DISKIMG" convert "$TEST_DIR/src.raw" "$URI"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/exp.raw"
    "$DISKIMG" convert "$URI" "$TEST_DIR/back.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/back.raw"
    "$DISKIMG" convert -O qcow2 -c "$URI" "$TEST_DIR/back.qcow2"
    qemu-img compare -q "$TEST_DIR/src.raw" "$TEST_DIR/back.qcow2"
}

@test "convert never creates an NBD target: a missing socket is an error, no file appears" {
    make_src "$TEST_DIR/src.raw"
    local before
    before=$(ls "$TEST_DIR")
    one_line_error "$TEST_DIR/src.raw" "nbd+unix:///?socket=$TEST_DIR/none.sock"
    [[ "$stderr" == *"none.sock"* ]]
    one_line_error "$TEST_DIR/src.raw" "nbd+unix:///"
    [[ "$stderr" == *"socket"* ]]
    [[ "$(ls "$TEST_DIR")" == "$before" ]]
}

@test "convert into an NBD export smaller than the source is refused" {
    make_src "$TEST_DIR/src.raw"
    make_pattern "$TEST_DIR/exp.raw" $((2 * MiB))
    cp "$TEST_DIR/exp.raw" "$TEST_DIR/exp.orig"
    start_server "$TEST_DIR/exp.raw"
    one_line_error "$TEST_DIR/src.raw" "$URI"
    [[ "$stderr" == *"smaller than the source"* ]]
    stop_server
    cmp "$TEST_DIR/exp.orig" "$TEST_DIR/exp.raw"
}

# --- interrupts and failures ---------------------------------------------------

@test "SIGINT: convert exits 130 and removes the raw target it created" {
    start_slow_source
    local d=$TEST_DIR/out.raw
    start_convert_bg "$SLOW_URI" "$d"
    [[ -e "$d" ]]
    kill -INT "$CONVERT_PID"
    wait_exit "$CONVERT_PID" 30
    [[ $EXIT_STATUS -eq 130 ]]
    [[ ! -e "$d" ]]
    grep -q "interrupted" "$TEST_DIR/progress"
    ! grep -q '"done": true' "$TEST_DIR/progress"
}

@test "SIGTERM: convert exits 143 (128 + SIGTERM) and removes the qcow2 target it created" {
    start_slow_source
    local d=$TEST_DIR/out.qcow2
    start_convert_bg -O qcow2 "$SLOW_URI" "$d"
    [[ -e "$d" ]]
    kill -TERM "$CONVERT_PID"
    wait_exit "$CONVERT_PID" 30
    # "130/143 SIGINT/SIGTERM" (convert --help)
    [[ $EXIT_STATUS -eq 143 ]]
    [[ ! -e "$d" ]]
}

@test "SIGINT with -n: exit 130, the existing target is kept" {
    start_slow_source
    local d=$TEST_DIR/keep.raw
    truncate -s 128M "$d"
    printf 'keep me' | dd of="$d" bs=1 seek=$((127 * MiB)) conv=notrunc status=none
    start_convert_bg -n "$SLOW_URI" "$d"
    kill -INT "$CONVERT_PID"
    wait_exit "$CONVERT_PID" 30
    [[ $EXIT_STATUS -eq 130 ]]
    [[ -e "$d" && $(stat -c %s "$d") -eq $((128 * MiB)) ]]
    [[ $(dd if="$d" bs=1 skip=$((127 * MiB)) count=7 status=none) == "keep me" ]]
}

@test "a read error mid-copy: exit 1, one-line error, created target removed, -n target kept" {
    require_tool nbdkit
    start_kit "$TEST_DIR/err.sock" --filter=error pattern size=4M error-pread=EIO error-pread-rate=100%
    local u="nbd+unix:///?socket=$TEST_DIR/err.sock"
    # -f raw: no probing read, so the target is created before the failure.
    one_line_error -f raw "$u" "$TEST_DIR/out.raw"
    [[ ! -e "$TEST_DIR/out.raw" ]]
    one_line_error -f raw -O qcow2 "$u" "$TEST_DIR/out.qcow2"
    [[ ! -e "$TEST_DIR/out.qcow2" ]]
    truncate -s 4M "$TEST_DIR/keep.raw"
    one_line_error -f raw -n "$u" "$TEST_DIR/keep.raw"
    [[ -e "$TEST_DIR/keep.raw" ]]
}

# --- progress ------------------------------------------------------------------

@test "convert --progress=json: every line is JSON, the last says done" {
    make_src "$TEST_DIR/src.raw"
    run --separate-stderr "$DISKIMG" convert --progress=json "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
    assert_success
    [[ -z "$output" ]]
    printf '%s\n' "$stderr" | "$PYTHON3" -c '
import json, sys
lines = [l for l in sys.stdin.read().split("\n") if l]
assert lines, "no progress lines"
docs = [json.loads(l) for l in lines]
last = -1
for d in docs:
    for k in ("progress", "bytes", "total", "elapsed-s", "rate-bytes-per-s", "eta-s"):
        assert k in d, (k, d)
    assert d["total"] == 4194304, d
    assert 0 <= d["bytes"] <= d["total"], d
    assert d["progress"] >= last, docs
    last = d["progress"]
assert docs[-1].get("done") is True, docs[-1]
assert docs[-1]["bytes"] == docs[-1]["total"] and docs[-1]["progress"] == 100, docs[-1]
assert all("done" not in d for d in docs[:-1]), docs'
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
}

@test "convert -p prints human progress; -q prints nothing" {
    make_src "$TEST_DIR/src.raw"
    run --separate-stderr "$DISKIMG" convert -p "$TEST_DIR/src.raw" "$TEST_DIR/a.raw"
    assert_success
    [[ "$stderr" == *"(100.00/100%)"* ]]
    [[ -z "$output" ]]
    run --separate-stderr "$DISKIMG" convert -q --progress=json "$TEST_DIR/src.raw" "$TEST_DIR/b.raw"
    assert_success
    [[ -z "$output" && -z "$stderr" ]]
    run --separate-stderr "$DISKIMG" convert "$TEST_DIR/src.raw" "$TEST_DIR/c.raw"
    assert_success
    [[ -z "$output" && -z "$stderr" ]]
}

# --- compression --------------------------------------------------------------

@test "convert -c output passes qemu-img check and is about the size of qemu-img convert -c's" {
    require_tool qemu-img
    # compressible data, a hole, zeroes, and an incompressible stretch
    make_pattern "$TEST_DIR/c.raw" $((4 * MiB))
    dd if=/dev/zero of="$TEST_DIR/c.raw" bs=64k seek=16 count=8 conv=notrunc status=none
    head -c 262144 /dev/urandom | dd of="$TEST_DIR/c.raw" bs=64k seek=48 conv=notrunc status=none
    local ct ours theirs
    for ct in zlib zstd; do
        "$DISKIMG" convert -c -O qcow2 -o compression_type=$ct "$TEST_DIR/c.raw" "$TEST_DIR/d-$ct.qcow2"
        qemu-img convert -c -O qcow2 -o compression_type=$ct "$TEST_DIR/c.raw" "$TEST_DIR/q-$ct.qcow2"
        qemu-img check -q "$TEST_DIR/d-$ct.qcow2"
        qemu-img compare -q "$TEST_DIR/c.raw" "$TEST_DIR/d-$ct.qcow2"
        [[ $(qcow2_info "$TEST_DIR/d-$ct.qcow2" compression-type) == "$ct" ]]
        ours=$(stat -c %s "$TEST_DIR/d-$ct.qcow2")
        theirs=$(stat -c %s "$TEST_DIR/q-$ct.qcow2")
        echo "$ct: ours $ours, qemu-img $theirs" >&2
        [[ $((ours * 10)) -le $((theirs * 11)) && $((ours * 10)) -ge $((theirs * 9)) ]]
        # and really compressed
        [[ $ours -lt $((3 * MiB)) ]]
    done
}
