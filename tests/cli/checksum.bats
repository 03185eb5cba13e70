#!/usr/bin/env bats
# diskimg checksum and convert --checksum: one value for one disk in every
# format qemu-img writes (raw, qcow2, compressed qcow2, vpc, vmdk, vhdx,
# vdi) and over NBD (diskimg serve, qemu-nbd), equal to dkh1.py, an
# independent implementation of the algorithm as diskimg-checksum(1)
# specifies it; one byte, or a larger size, changes it; a hole and written
# zeroes do not; convert --checksum equals checksum of its output.

load '../helpers'
load '../interop/lib'
load '../interop/nbd-servers'

setup() { setup_test; }
teardown() {
    stop_peers
    cleanup_test
}

MiB=1048576
HASH_RE='^[0-9a-f]{64}$'

# disk FILE: 8 MiB + 1.5 KiB (not a whole number of 64 KiB blocks): data,
# a hole, written zeroes, data at an odd offset, a hole to the end.
disk() {
    "$PYTHON3" - "$1" <<'PY'
import sys
M = 1 << 20
with open(sys.argv[1], "wb") as f:
    f.truncate(8 * M + 1536)
    f.write(bytes((i * 7 + i // 251) & 255 for i in range(M)))
    f.seek(3 * M); f.write(bytes(2 * M))
    f.seek(6 * M + 12345); f.write(b"diskimg " * 12800)
    f.seek(8 * M + 1000); f.write(b"tail")
PY
}

dkh1() { "$PYTHON3" "$BATS_TEST_DIRNAME/dkh1.py" "$1" | cut -d' ' -f1; }
sum() { "$DISKIMG" checksum "$@" | cut -d' ' -f1; }
poke() { printf '\xee' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

@test "checksum: one value in every format and over NBD, equal to the documented algorithm" {
    require_tool qemu-img qemu-nbd
    local d=$TEST_DIR want f
    disk "$d/a.raw"
    want=$(dkh1 "$d/a.raw")
    [[ $want =~ $HASH_RE ]]
    run -0 "$DISKIMG" checksum "$d/a.raw"
    [[ $output == "$want  $d/a.raw" ]]
    qemu-img convert -f raw -O qcow2 "$d/a.raw" "$d/a.qcow2"
    qemu-img convert -f raw -O qcow2 -c "$d/a.raw" "$d/c.qcow2"
    qemu-img convert -f raw -O vpc -o force_size=on "$d/a.raw" "$d/a.vpc"
    qemu-img convert -f raw -O vmdk "$d/a.raw" "$d/a.vmdk"
    qemu-img convert -f raw -O vmdk -o subformat=streamOptimized "$d/a.raw" "$d/s.vmdk"
    qemu-img convert -f raw -O vhdx "$d/a.raw" "$d/a.vhdx"
    qemu-img convert -f raw -O vdi "$d/a.raw" "$d/a.vdi"
    for f in a.qcow2 c.qcow2 a.vpc a.vmdk s.vmdk a.vhdx a.vdi; do
        # every format kept the size (a multiple of 512) and the bytes
        qemu-img compare -q -f raw "$d/a.raw" "$d/$f"
        [[ $(sum "$d/$f") == "$want" ]] || { echo "$f: $(sum "$d/$f") != $want" >&2; return 1; }
    done
    [[ $(sum -m 1 -T none "$d/a.raw") == "$want" ]]
    # over NBD: diskimg serve (a qcow2 file), qemu-nbd (a vhdx file)
    start_server -r "$d/c.qcow2"
    [[ $(sum "$URI") == "$want" ]]
    start_qemu_nbd "$d/q.sock" -r -f vhdx "$d/a.vhdx"
    [[ $(sum "nbd+unix:///?socket=$d/q.sock") == "$want" ]]
    # JSON: the algorithm, the value, the size, the name
    run -0 "$DISKIMG" checksum --output=json "$d/a.vdi"
    "$PYTHON3" -c 'import json, sys
d = json.loads(sys.argv[1])
assert d == {"algorithm": "dkh1-sha256", "checksum": sys.argv[2],
             "virtual-size": 8 * 1048576 + 1536, "filename": sys.argv[3]}, d' \
        "$output" "$want" "$d/a.vdi"
}

@test "checksum: one byte or a larger size changes it; holes equal written zeroes; 1 TiB of holes" {
    require_tool qemu-img
    local d=$TEST_DIR a b
    disk "$d/a.raw"
    a=$(sum "$d/a.raw")
    # the same bytes with no hole at all
    cp --sparse=never "$d/a.raw" "$d/full.raw"
    [[ $(du -k "$d/full.raw" | cut -f1) -gt $(du -k "$d/a.raw" | cut -f1) ]]
    [[ $(sum "$d/full.raw") == "$a" ]]
    # through a backing chain: an empty overlay reads its backing file
    qemu-img create -q -f qcow2 -b "$d/a.raw" -F raw "$d/top.qcow2"
    [[ $(sum "$d/top.qcow2") == "$a" ]]
    # one byte in a hole, one in the data
    cp --sparse=always "$d/a.raw" "$d/b.raw"
    poke "$d/b.raw" $((7 * MiB + 3))
    b=$(sum "$d/b.raw")
    [[ $b != "$a" && $b == $(dkh1 "$d/b.raw") ]]
    cp --sparse=always "$d/a.raw" "$d/c.raw"
    poke "$d/c.raw" 4097
    [[ $(sum "$d/c.raw") != "$a" && $(sum "$d/c.raw") != "$b" ]]
    # padded with zeroes: another size, another value
    cp --sparse=always "$d/a.raw" "$d/p.raw"
    truncate -s +512 "$d/p.raw"
    b=$(sum "$d/p.raw")
    [[ $b != "$a" && $b == $(dkh1 "$d/p.raw") ]]
    # an empty image, and a few sizes around the block size
    for f in 0 1 65535 65536 65537 $((65536 * 4096 + 512)); do
        truncate -s "$f" "$d/z$f.raw"
        [[ $(sum -f raw "$d/z$f.raw") == $(dkh1 "$d/z$f.raw") ]] || { echo "size $f" >&2; return 1; }
    done
    # 1 TiB of holes, raw and qcow2: nothing read, the value dkh1.py gives
    # for 1 TiB of zeroes (computed once: its tree is 2^24 zero blocks)
    local tib=cc3a9d0120e60c9f83f96f100a26a3cf96d2f8c8408a8deeedb983b426937b5d
    truncate -s 1T "$d/huge.raw"
    qemu-img create -q -f qcow2 "$d/huge.qcow2" 1T
    [[ $(bounded "$DISKIMG" checksum "$d/huge.raw" | cut -d' ' -f1) == "$tib" ]]
    [[ $(bounded "$DISKIMG" checksum "$d/huge.qcow2" | cut -d' ' -f1) == "$tib" ]]
}

@test "convert --checksum equals checksum of the output, every -m and format" {
    require_tool qemu-img
    local d=$TEST_DIR m fmt want line out
    disk "$d/a.raw"
    truncate -s $((8 * MiB + 1000)) "$d/a.raw" # odd: raw pads it, vpc rounds it up more
    m=1
    for fmt in raw qcow2 qcow2-c vpc vmdk vmdk-stream vhdx vdi; do
        local opts=(-O "${fmt%-*}")
        [[ $fmt == qcow2-c ]] && opts+=(-c)
        [[ $fmt == vmdk-stream ]] && opts+=(-o subformat=streamOptimized)
        out=$d/out.$fmt
        run -0 "$DISKIMG" convert -f raw -m $m --checksum "${opts[@]}" "$d/a.raw" "$out"
        line=$output
        want=$("$DISKIMG" checksum "$out")
        [[ $line == "$want" && $want == *"  $out" ]] || { echo "$fmt -m $m: '$line' != '$want'" >&2; return 1; }
        qemu-img compare -q -f raw "$d/a.raw" "$out"
        m=$((m * 2 % 15 + 1))
    done
    # raw pads the size to 512: what dkh1.py reads of the file
    [[ $(sum "$d/out.raw") == $(dkh1 "$d/out.raw") ]]
    # a larger existing target full of old data: its tail is read back
    make_pattern "$d/old.raw" $((12 * MiB + 4096))
    run -0 "$DISKIMG" convert -n -m 3 --checksum -f raw "$d/a.raw" "$d/old.raw"
    [[ ${output%% *} == $(dkh1 "$d/old.raw") ]]
    # the same into a larger NBD export full of old data
    make_pattern "$d/exp.raw" $((10 * MiB))
    start_server -f raw "$d/exp.raw"
    run -0 "$DISKIMG" convert -m 4 --checksum -f raw "$d/a.raw" "$URI"
    wait_exit "$SERVER_PID" 30
    SERVER_PID=
    [[ ${output%% *} == $(dkh1 "$d/exp.raw") ]]
    # --target=gce: the checksum of disk.raw (the disk padded to a GiB)
    # inside the archive, on stderr when the archive goes to stdout
    # (a fixed time stamp: two archives are compared byte for byte)
    export SOURCE_DATE_EPOCH=1700000000
    run -0 --separate-stderr "$DISKIMG" convert --target=gce --checksum -f raw "$d/a.raw" "$d/g.tar.gz"
    line=$output
    (cd "$d" && tar -xzSf g.tar.gz disk.raw)
    [[ $(stat -c %s "$d/disk.raw") -eq 1073741824 ]]
    [[ $line == "$(sum -f raw "$d/disk.raw")  $d/g.tar.gz" ]]
    "$DISKIMG" convert --target=gce --checksum -f raw "$d/a.raw" - 2>"$d/err" | cmp - "$d/g.tar.gz"
    grep -qx "${line%% *}  -" "$d/err"
    unset SOURCE_DATE_EPOCH
    # -B: the target's content includes its backing file
    run -2 --separate-stderr "$DISKIMG" convert --checksum -B "$d/a.raw" -F raw -O qcow2 "$d/a.raw" "$d/x.qcow2"
    [[ $stderr == *"--checksum cannot be used with -B"* ]]
    [[ ! -e $d/x.qcow2 ]]
}

@test "checksum: names escaped as sha256sum does; bad input gets one line" {
    local d=$TEST_DIR name
    truncate -s 1M "$d/plain"
    name=$(printf '%s/a\\b\nc' "$d")
    cp "$d/plain" "$name"
    # the same line shape as sha256sum's: "\HASH  a\\b\nc"
    local ours theirs
    ours=$("$DISKIMG" checksum -f raw "$name" | sed 's/^\(\\\?\)[0-9a-f]*/\1H/')
    theirs=$(sha256sum "$name" | sed 's/^\(\\\?\)[0-9a-f]*/\1H/')
    [[ $ours == "$theirs" && $ours == '\H  '* ]]
    run -1 --separate-stderr "$DISKIMG" checksum "$d/missing"
    [[ $stderr == "diskimg: $d/missing: No such file or directory" ]]
    run -1 --separate-stderr "$DISKIMG" checksum -f nosuch "$d/plain"
    [[ $stderr == "diskimg: unknown image format 'nosuch'" ]]
    run -2 --separate-stderr "$DISKIMG" checksum
    [[ ${stderr_lines[0]} == "diskimg checksum: expected one IMAGE" ]]
    run -2 --separate-stderr "$DISKIMG" checksum -m 0 "$d/plain"
    run -2 --separate-stderr "$DISKIMG" checksum --output=xml "$d/plain"
    run -0 "$DISKIMG" checksum --help
    [[ $output == *dkh1-sha256* ]]
}
