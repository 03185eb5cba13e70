#!/usr/bin/env bats
# diskimg amend, with qemu-img 7.2 as the judge: every option amended on
# one copy by diskimg and on another by qemu-img amend; both pass
# qemu-img check, read the same (qemu-img compare, snapshots included)
# and show the same qemu-img info --output=json.  Refusals: qemu-img's
# message and exit 1, the image byte for byte as it was.  Then a crash
# test: the refcount_bits rewrite (never a leak), the downgrade and the
# upgrade (leaks at worst) killed (SIGKILL) before each of their file
# changes in turn.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() { cleanup_test; }

# rich FILE [create options]: 4 MiB qcow2 with data, zero clusters (with
# and without a host cluster), a compressed cluster, a snapshot taken in
# the middle, and (v3) a persistent bitmap.
rich() {
    local f=$1
    shift
    qemu-img create -q -f qcow2 "$@" "$f" 4M
    qemu-io -f qcow2 -c 'write -P 1 0 192k' -c 'write -z 0 64k' -c 'write -z 128k 64k' \
        -c 'write -z -u 1M 64k' -c 'write -c -P 3 2M 64k' "$f" >/dev/null
    qemu-img snapshot -c s1 "$f"
    qemu-io -f qcow2 -c 'write -P 5 64k 64k' -c 'write -z 3M 64k' "$f" >/dev/null
    if qemu-img info "$f" | grep -q 'compat: 1.1'; then
        qemu-img bitmap --add "$f" b0
        qemu-io -f qcow2 -c 'write -P 7 512k 64k' "$f" >/dev/null
    fi
}

# info_fields FILE: qemu-img info --output=json without what depends on
# the file's own allocation (name, host size).
info_fields() {
    qemu-img info --output=json "$1" 2>/dev/null | grep -v -e '"filename"' -e '"actual-size"'
}

# same_as_qemu INPUT OPTIONS: amend copies with diskimg and qemu-img, and
# compare the results.
same_as_qemu() {
    local in=$1 opts=$2 ours=$TEST_DIR/ours.qcow2 theirs=$TEST_DIR/theirs.qcow2
    cp "$in" "$ours"
    cp "$in" "$theirs"
    run --separate-stderr "$DISKIMG" amend -o "$opts" "$ours"
    [[ $status -eq 0 ]] || { echo "diskimg amend -o $opts: $status: $stderr" >&2; return 1; }
    qemu-img amend -o "$opts" "$theirs" 2>/dev/null
    run qemu-img check "$ours"
    [[ $status -eq 0 ]] || { echo "check after -o $opts: $output" >&2; return 1; }
    qemu-img compare -q "$ours" "$theirs" || { echo "data differs after -o $opts" >&2; return 1; }
    diff <(info_fields "$ours") <(info_fields "$theirs") >&2 ||
        { echo "info differs after -o $opts" >&2; return 1; }
}

# snapshot_reads FILE: the snapshot s1 still reads as it was taken.
snapshot_reads() {
    qemu-img convert -f qcow2 -l snapshot.name=s1 -O raw "$1" "$TEST_DIR/s1.raw"
    qemu-io -f raw -r -c 'read -P 0 0 64k' -c 'read -P 1 64k 64k' -c 'read -P 0 128k 64k' \
        -c 'read -P 3 2M 64k' "$TEST_DIR/s1.raw" | { ! grep -q failed; }
}

@test "amend qcow2 v3: compat, refcount_bits, lazy_refcounts, size as qemu-img" {
    rich "$TEST_DIR/v3.qcow2"
    for opts in refcount_bits=2 refcount_bits=64,lazy_refcounts=on compat=v2,lazy_refcounts=off; do
        same_as_qemu "$TEST_DIR/v3.qcow2" "$opts"
    done
    # The last one was a downgrade: the snapshot kept its data.
    snapshot_reads "$TEST_DIR/ours.qcow2"
    qemu-img info "$TEST_DIR/ours.qcow2" | grep -q 'compat: 0.10'
    # v2's 72-byte header, no feature table, no bitmaps extension.
    [[ $(od -An -tx1 -j4 -N4 "$TEST_DIR/ours.qcow2" | tr -d ' ') == 00000002 ]]
    [[ $(od -An -tx1 -j72 -N8 "$TEST_DIR/ours.qcow2" | tr -d ' ') == 0000000000000000 ]]
}

# strip_snapshot_extra FILE: rewrite a v2 image's snapshot table without
# extra data, as qemu before 4.2 wrote it.
strip_snapshot_extra() {
    "$PYTHON3" - "$1" <<'PY'
import struct, sys
f = open(sys.argv[1], 'r+b')
nb, off = struct.unpack('>IQ', f.read(72)[60:72])
f.seek(off)
buf = f.read(1 << 16)
pos, out = 0, b''
for i in range(nb):
    e = buf[pos:pos + 40]
    idl, nml = struct.unpack('>HH', e[12:16])
    extra = struct.unpack('>I', e[36:40])[0]
    names = buf[pos + 40 + extra:pos + 40 + extra + idl + nml]
    ne = e[:36] + struct.pack('>I', 0) + names
    out += ne + b'\0' * (-len(ne) % 8)
    pos += (40 + extra + idl + nml + 7) // 8 * 8
f.seek(off)
f.write(out + b'\0' * (pos - len(out)))
PY
}

@test "amend qcow2 v2 and 8-bit refcounts: upgrade, and downgrade back" {
    rich "$TEST_DIR/v2.qcow2" -o compat=0.10
    for opts in compat=1.1 compat=v3,lazy_refcounts=on,refcount_bits=4 compat=1.1,size=16M; do
        same_as_qemu "$TEST_DIR/v2.qcow2" "$opts"
    done
    snapshot_reads "$TEST_DIR/ours.qcow2"
    # snapshots as qemu before 4.2 wrote them in v2 images: no extra data;
    # v3 needs 16 bytes of it, so the table is rewritten
    strip_snapshot_extra "$TEST_DIR/v2.qcow2"
    qemu-img check -q "$TEST_DIR/v2.qcow2"
    same_as_qemu "$TEST_DIR/v2.qcow2" compat=1.1
    snapshot_reads "$TEST_DIR/ours.qcow2"
    # -p draws qemu-img's progress line, ending at 100%
    run --separate-stderr "$DISKIMG" amend -p -o refcount_bits=32 "$TEST_DIR/ours.qcow2"
    [[ $status -eq 0 && "$stderr" == *"(100.00/100%)"* ]]
    rich "$TEST_DIR/r8.qcow2" -o refcount_bits=8,cluster_size=4k
    same_as_qemu "$TEST_DIR/r8.qcow2" compat=0.10,refcount_bits=16
    snapshot_reads "$TEST_DIR/ours.qcow2"
}

# refused IMAGE OPTIONS TEXT: exit 1, TEXT in the message, image unchanged.
refused() {
    local img=$1 opts=$2 text=$3
    cp "$img" "$TEST_DIR/before"
    run --separate-stderr "$DISKIMG" amend -o "$opts" "$img"
    [[ $status -eq 1 ]] || { echo "-o $opts: status $status" >&2; return 1; }
    [[ "$stderr" == *"$text"* ]] || { echo "-o $opts: '$stderr' lacks '$text'" >&2; return 1; }
    [[ $(wc -l <<<"$stderr") -eq 1 ]]
    cmp "$img" "$TEST_DIR/before" || { echo "-o $opts changed the image" >&2; return 1; }
}

@test "amend refuses what qemu-img refuses, with its message, image unchanged" {
    local img=$TEST_DIR/a.qcow2
    rich "$img"
    # qemu-img's own words, where its message is one line
    for case in 'compat=0.9|Unknown compatibility level 0.9' \
        'refcount_bits=3|Refcount width must be a power of two and may not exceed 64 bits' \
        'refcount_bits=128|Refcount width must be a power of two' \
        "lazy_refcounts=maybe|Parameter 'lazy_refcounts' expects 'on' or 'off'" \
        "foo=1|Invalid parameter 'foo'" \
        'data_file=x|data-file can only be set for images that use an external data file' \
        'data_file_raw=on|data-file-raw cannot be set on existing images' \
        'encrypt.new-secret=x|encryption not present' \
        'refcount_bits=1|Cannot decrease refcount entry width to 1 bits: Cluster at offset' \
        'compat=0.10,lazy_refcounts=on,refcount_bits=16|' \
        'compat=0.10,refcount_bits=8|Refcount widths other than 16 bits require compatibility level 1.1'; do
        local opts=${case%%|*} text=${case#*|}
        [[ -n "$text" ]] || continue
        refused "$img" "$opts" "$text"
        run qemu-img amend -o "$opts" "$TEST_DIR/before"
        [[ $status -eq 1 && "$output" == *"$text"* ]] || { echo "qemu-img: $output" >&2; false; }
    done
    # two-line messages of qemu-img, on one line
    refused "$img" cluster_size=4k "Invalid parameter 'cluster_size': this option is only supported for image creation"
    refused "$img" extended_l2=on "only supported for image creation"
    refused "$img" backing_file=x.qcow2 "Cannot amend the backing file"
    qemu-img create -q -f qcow2 "$TEST_DIR/v2.qcow2" -o compat=0.10 1M
    refused "$TEST_DIR/v2.qcow2" lazy_refcounts=on "Lazy refcounts only supported with compatibility level 1.1 and above"
    qemu-img create -q -f qcow2 -o extended_l2=on "$TEST_DIR/e.qcow2" 1M
    refused "$TEST_DIR/e.qcow2" compat=0.10 "Cannot downgrade an image with incompatible features 0x10 set"
    # qemu-img expands the zero clusters before it finds this; diskimg
    # finds it first and changes nothing
    rich "$TEST_DIR/z.qcow2" -o compression_type=zstd
    refused "$TEST_DIR/z.qcow2" compat=0.10 "Cannot downgrade an image with zstd compression type and existing compressed clusters"
    # a hostile L2 entry: a zero cluster far past the end of the file
    qemu-img create -q -f qcow2 "$TEST_DIR/h.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 1 0 64k' -c 'write -z 0 64k' "$TEST_DIR/h.qcow2" >/dev/null
    "$PYTHON3" - "$TEST_DIR/h.qcow2" <<'PY'
import struct, sys
f = open(sys.argv[1], 'r+b')
l1 = struct.unpack('>Q', f.read(48)[40:48])[0]
f.seek(l1)
l2 = struct.unpack('>Q', f.read(8))[0] & 0x00fffffffffffe00
f.seek(l2)
f.write(struct.pack('>Q', 0x40000000000 | 1))
PY
    refused "$TEST_DIR/h.qcow2" compat=0.10 "zero cluster at 0x40000000000 is not a cluster of the file"
    # a shrunk snapshot size cannot go to v2
    refused "$TEST_DIR/e.qcow2" size=2M,compat=0.10 "Cannot downgrade an image with incompatible features"
    qemu-img create -q -f qcow2 "$TEST_DIR/s.qcow2" 1M
    qemu-img snapshot -c s "$TEST_DIR/s.qcow2"
    refused "$TEST_DIR/s.qcow2" size=2M,compat=0.10 "Internal snapshots prevent downgrade of image"
}

@test "amend: other formats, -o help, usage errors" {
    qemu-img create -q -f vpc "$TEST_DIR/d.vpc" 4M
    qemu-img create -q -f raw "$TEST_DIR/d.raw" 4M
    run --separate-stderr "$DISKIMG" amend -o compat=1.1 "$TEST_DIR/d.vpc"
    [[ $status -eq 1 && "$stderr" == *"Format driver 'vpc' does not support option amendment"* ]]
    run --separate-stderr "$DISKIMG" amend -f raw -o size=1M "$TEST_DIR/d.raw"
    [[ $status -eq 1 && "$stderr" == *"Format driver 'raw' does not support option amendment"* ]]
    [[ $(stat -c %s "$TEST_DIR/d.raw") -eq 4194304 ]]
    run --separate-stderr "$DISKIMG" amend -o help "$TEST_DIR/d.vpc"
    [[ $status -eq 1 && "$stderr" == *"does not support option amendment"* ]]
    # -o help lists the amendable options (qemu-img's lines for them)
    run "$DISKIMG" amend -f qcow2 -o help
    [[ $status -eq 0 ]]
    qemu-img amend -f qcow2 -o help >"$TEST_DIR/qemu-help"
    for k in backing_file backing_fmt compat lazy_refcounts refcount_bits size; do
        line=$(grep "^  $k=" "$TEST_DIR/qemu-help")
        [[ "$output" == *"$line"* ]] || { echo "missing: $line" >&2; false; }
    done
    run "$DISKIMG" amend -f qcow2 -o '?'
    [[ $status -eq 0 && "$output" == "Amend options for 'qcow2':"* ]]
    run --separate-stderr "$DISKIMG" amend "$TEST_DIR/d.vpc"
    [[ $status -eq 2 && "$stderr" == *"Must specify options (-o)"* ]]
    run --separate-stderr "$DISKIMG" amend -o compat=1.1 a b
    [[ $status -eq 2 && "$stderr" == *"Expecting one image file name"* ]]
    run --separate-stderr "$DISKIMG" amend -U -o compat=1.1 "$TEST_DIR/d.vpc"
    [[ $status -eq 2 ]]
    run --separate-stderr "$DISKIMG" amend -o compat=1.1 "$TEST_DIR/none.qcow2"
    [[ $status -eq 1 ]]
}

@test "amend: backing files, --untrusted, --image-opts, locking" {
    qemu-img create -q -f qcow2 "$TEST_DIR/base.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 9 0 4M' "$TEST_DIR/base.qcow2" >/dev/null
    qemu-img create -q -f qcow2 -b base.qcow2 -F qcow2 "$TEST_DIR/ov.qcow2"
    # zero clusters over a backing file must stay zero in v2: they become
    # zeroed clusters
    qemu-io -f qcow2 -c 'write -z 0 64k' -c 'write -P 2 1M 64k' "$TEST_DIR/ov.qcow2" >/dev/null
    same_as_qemu "$TEST_DIR/ov.qcow2" compat=0.10
    qemu-io -f qcow2 -r -c 'read -P 0 0 64k' -c 'read -P 9 64k 64k' "$TEST_DIR/ours.qcow2" |
        { ! grep -q failed; }
    # the backing fields only as they are
    same_as_qemu "$TEST_DIR/ov.qcow2" backing_file=base.qcow2,backing_fmt=qcow2
    refused "$TEST_DIR/ov.qcow2" backing_file=base.qcow2 "Cannot amend the backing file"
    refused "$TEST_DIR/ov.qcow2" backing_fmt=raw "Cannot amend the backing file"
    # a missing backing file fails the open, as in qemu-img; --untrusted
    # opens the image alone and never looks for it
    qemu-img create -q -f qcow2 -u -b missing.qcow2 -F qcow2 "$TEST_DIR/m.qcow2" 4M
    run --separate-stderr "$DISKIMG" amend -o lazy_refcounts=on "$TEST_DIR/m.qcow2"
    [[ $status -eq 1 && "$stderr" == *missing.qcow2* ]]
    "$DISKIMG" amend --untrusted -o lazy_refcounts=on,compat=1.1 "$TEST_DIR/m.qcow2"
    qemu-img info -U "$TEST_DIR/m.qcow2" | grep -q 'lazy refcounts: true'
    # lazy_refcounts=off on a dirty image: repaired first, as qemu does
    qemu-img create -q -f qcow2 -o lazy_refcounts=on "$TEST_DIR/d.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 1 0 128k' "$TEST_DIR/d.qcow2" >/dev/null
    printf '\x01' | dd of="$TEST_DIR/d.qcow2" bs=1 seek=79 conv=notrunc status=none
    qemu-img info --output=json "$TEST_DIR/d.qcow2" | grep -q '"dirty-flag": true'
    "$DISKIMG" amend -o lazy_refcounts=off "$TEST_DIR/d.qcow2"
    qemu-img info --output=json "$TEST_DIR/d.qcow2" >"$TEST_DIR/d.json"
    grep -q '"dirty-flag": false' "$TEST_DIR/d.json"
    grep -q '"lazy-refcounts": false' "$TEST_DIR/d.json"
    qemu-img check -q "$TEST_DIR/d.qcow2"
    # --image-opts
    "$DISKIMG" amend --image-opts -o refcount_bits=4 \
        "driver=qcow2,file.filename=$TEST_DIR/base.qcow2"
    qemu-img info "$TEST_DIR/base.qcow2" | grep -q 'refcount bits: 4'
    qemu-img check -q "$TEST_DIR/base.qcow2"
    # an image in use is not amended (exit 5), and stays as it was
    start_server -f qcow2 "$TEST_DIR/base.qcow2"
    cp "$TEST_DIR/base.qcow2" "$TEST_DIR/before"
    run --separate-stderr "$DISKIMG" amend -o refcount_bits=16 "$TEST_DIR/base.qcow2"
    [[ $status -eq 5 ]]
    stop_server
    cmp "$TEST_DIR/base.qcow2" "$TEST_DIR/before"
}

# crash_each IMAGE OPTIONS [LEAKS]: amend a copy killed before its 1st,
# 2nd, ... file change until a run completes; after each, qemu-img check
# is clean (with LEAKS, leaked clusters are allowed: exit 3) and the data
# reads as before.
crash_each() {
    local img=$1 opts=$2 leaks=${3:-} n=1 copy=$TEST_DIR/crash.qcow2
    qemu-img convert -f qcow2 -O raw "$img" "$TEST_DIR/want.raw"
    while :; do
        cp "$img" "$copy"
        run env LD_PRELOAD="$DISKIMG_KILL_AFTER_LIB" DISKIMG_KILL_AFTER=$n \
            "$DISKIMG" amend -o "$opts" "$copy"
        local st=$status
        [[ $st -eq 0 || $st -eq 137 ]] || { echo "run $n: $st $output" >&2; return 1; }
        run qemu-img check "$copy"
        [[ $status -eq 0 || ($status -eq 3 && -n "$leaks") ]] ||
            { echo "killed before change $n: $output" >&2; return 1; }
        qemu-img compare -q -f qcow2 -F raw "$copy" "$TEST_DIR/want.raw" ||
            { echo "killed before change $n: data differs" >&2; return 1; }
        [[ $st -eq 0 ]] && break
        n=$((n + 1))
        [[ $n -lt 400 ]]
    done
    [[ $n -gt 5 ]] # the kills did land inside the work
    echo "# $opts: $n runs" >&3
}

@test "amend crash safety: refcount rewrite, downgrade, upgrade killed at every step" {
    [[ -n "${DISKIMG_KILL_AFTER_LIB:-}" && -f "$DISKIMG_KILL_AFTER_LIB" ]] || skip "no kill-after shim"
    diskimg_under_asan && skip "LD_PRELOAD under ASan"
    # small clusters: many refcount blocks and L2 tables to write
    qemu-img create -q -f qcow2 -o cluster_size=512 "$TEST_DIR/c.qcow2" 8M
    qemu-io -f qcow2 -c 'write -P 1 0 192k' -c 'write -z 64k 2k' -c 'write -z -u 1M 64k' \
        "$TEST_DIR/c.qcow2" >/dev/null
    qemu-img snapshot -c s1 "$TEST_DIR/c.qcow2"
    qemu-io -f qcow2 -c 'write -P 2 128k 16k' -c 'write -z 160k 1k' -c 'write -z 4M 1k' \
        "$TEST_DIR/c.qcow2" >/dev/null
    crash_each "$TEST_DIR/c.qcow2" refcount_bits=64
    qemu-img info "$TEST_DIR/crash.qcow2" | grep -q 'refcount bits: 64'
    # zero clusters shared with the snapshot are replaced, and their old
    # references dropped after the new L2 entries: a kill in between leaks
    crash_each "$TEST_DIR/c.qcow2" compat=0.10 leaks
    qemu-img info "$TEST_DIR/crash.qcow2" | grep -q 'compat: 0.10'
    # the upgrade that rewrites the snapshot table: leaks at worst
    cp "$TEST_DIR/crash.qcow2" "$TEST_DIR/c2.qcow2"
    strip_snapshot_extra "$TEST_DIR/c2.qcow2"
    crash_each "$TEST_DIR/c2.qcow2" compat=1.1 leaks
    qemu-img info "$TEST_DIR/crash.qcow2" | grep -q 'compat: 1.1'
}
