#!/usr/bin/env bats
# diskimg snapshot: internal qcow2 snapshots, with qemu-img as the judge:
# qemu-img check after every change, qemu-img compare of an applied
# snapshot with a copy saved when it was taken, qemu-img reading the
# snapshots we make and we applying the ones it makes, and `diff` of our
# -l (human and JSON) against qemu-img's on the same images.  Errors:
# one line, qemu-img's exit status, the image unchanged (cmp).

load '../helpers'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() { cleanup_test; }

# Dates print in local time, as qemu-img prints them.
export TZ=UTC

# qcheck FILE: qemu-img check finds nothing at all (not even leaks).
qcheck() {
    run qemu-img check "$1"
    [[ $status -eq 0 ]] || { echo "qemu-img check $1: $status: $output" >&2; return 1; }
}

# same FILE1 FILE2: the active images read the same.
same() {
    run qemu-img compare "$1" "$2"
    [[ $status -eq 0 ]] || { echo "qemu-img compare $1 $2: $status: $output" >&2; return 1; }
}

# tags FILE: the snapshot names qemu-img lists, one per line.
tags() {
    qemu-img snapshot -l "$1" | awk 'NR > 2 { print $2 }'
}

# same_list FILE: our -l, human and JSON, against qemu-img's.
same_list() {
    diff <(qemu-img snapshot -l "$1") <("$DISKIMG" snapshot -l "$1")
    diff <(qemu-img info --output=json "$1" |
        "$PYTHON3" -c 'import json,sys; print(json.dumps(json.load(sys.stdin).get("snapshots", []), indent=4))') \
        <("$DISKIMG" snapshot -l --output=json "$1")
}

# qio FILE CMD...: qemu-io writes.
qio() {
    local f=$1 args=() c
    shift
    for c in "$@"; do args+=(-c "$c"); done
    qemu-io -f qcow2 "${args[@]}" "$f" >/dev/null
}

@test "snapshot: create, apply, delete; qemu-img checks, compares and reads them" {
    require_tool qemu-img qemu-io
    local img=$TEST_DIR/a.qcow2
    qemu-img create -q -f qcow2 "$img" 64M
    qio "$img" 'write -P 1 0 1M' 'write -P 3 32M 64k' 'write -c -P 4 40M 64k'
    cp "$img" "$TEST_DIR/one.qcow2"
    "$DISKIMG" snapshot -c one "$img"
    qcheck "$img"
    [[ "$(tags "$img")" == one ]]
    qio "$img" 'write -P 2 512k 1M' 'write -z 32M 64k' 'discard 40M 64k'
    cp "$img" "$TEST_DIR/two.qcow2"
    "$DISKIMG" snapshot -c two "$img"
    qio "$img" 'write -P 5 0 4M'
    qcheck "$img"
    # Apply: the image reads as when each snapshot was taken.
    run -0 "$DISKIMG" snapshot -a one "$img"
    [[ -z "$output" ]]
    qcheck "$img"
    same "$TEST_DIR/one.qcow2" "$img"
    qio "$img" 'write -P 6 0 64k'
    "$DISKIMG" snapshot -a 2 "$img" # an id works too, as qemu-img's -a
    same "$TEST_DIR/two.qcow2" "$img"
    # qemu reads the snapshots we made.
    qemu-img convert -l snapshot.name=one -O raw "$img" "$TEST_DIR/one.raw"
    same "$TEST_DIR/one.qcow2" "$TEST_DIR/one.raw"
    # Delete: gone for qemu-img, the rest intact and clean, and the
    # clusters only it used are holes again.
    local before after
    before=$(du -k "$img" | cut -f1)
    "$DISKIMG" snapshot -d one "$img"
    after=$(du -k "$img" | cut -f1)
    [[ $after -lt $before ]] || { echo "du: $before KiB before -d, $after after" >&2; return 1; }
    qcheck "$img"
    [[ "$(tags "$img")" == two ]]
    same "$TEST_DIR/two.qcow2" "$img"
    # qemu-img applies and deletes what we made; we what it made.
    qio "$img" 'write -P 7 1M 1M'
    qemu-img snapshot -a two "$img"
    same "$TEST_DIR/two.qcow2" "$img"
    qemu-img snapshot -c made-by-qemu "$img"
    qio "$img" 'write -P 8 0 2M'
    "$DISKIMG" snapshot -a made-by-qemu "$img"
    same "$TEST_DIR/two.qcow2" "$img"
    "$DISKIMG" snapshot -d made-by-qemu "$img"
    qemu-img snapshot -d two "$img"
    qcheck "$img"
    [[ -z "$(tags "$img")" ]]
    same "$TEST_DIR/two.qcow2" "$img"
}

@test "snapshot: every qcow2 variant, and a snapshot of another size" {
    require_tool qemu-img qemu-io
    local o img=$TEST_DIR/v.qcow2
    for o in compat=0.10 extended_l2=on cluster_size=512 cluster_size=4k,refcount_bits=64 \
        lazy_refcounts=on,refcount_bits=2; do
        rm -f "$img"
        qemu-img create -q -f qcow2 -o "$o" "$img" 8M
        qio "$img" 'write -P 1 0 300k' 'write -c -P 5 4M 64k' 'write -z 6M 64k'
        cp "$img" "$TEST_DIR/v0.qcow2"
        "$DISKIMG" snapshot -c s1 "$img" || { echo "create with $o" >&2; return 1; }
        qio "$img" 'write -P 2 100k 300k' 'write -P 3 4M 8k'
        qcheck "$img"
        "$DISKIMG" snapshot -a s1 "$img"
        same "$TEST_DIR/v0.qcow2" "$img"
        qcheck "$img"
        "$DISKIMG" snapshot -d s1 "$img"
        qcheck "$img"
        same "$TEST_DIR/v0.qcow2" "$img"
    done
    # -a restores the virtual size too, as qemu does.
    rm -f "$img"
    qemu-img create -q -f qcow2 "$img" 8M
    qio "$img" 'write -P 1 0 1M'
    "$DISKIMG" snapshot -c small "$img"
    "$DISKIMG" resize -q "$img" 20M
    qio "$img" 'write -P 2 16M 1M'
    "$DISKIMG" snapshot -c big "$img"
    "$DISKIMG" snapshot -a small "$img"
    [[ "$(qemu-img info --output=json "$img" | grep -o '"virtual-size": [0-9]*')" == '"virtual-size": 8388608' ]]
    qcheck "$img"
    "$DISKIMG" snapshot -a big "$img"
    [[ "$(qemu-img info --output=json "$img" | grep -o '"virtual-size": [0-9]*')" == '"virtual-size": 20971520' ]]
    qemu-io -f qcow2 -r -c 'read -P 2 16M 1M' -c 'read -P 1 0 1M' "$img" >/dev/null
    qcheck "$img"
}

@test "snapshot -l: qemu-img's table and info's JSON, byte for byte" {
    require_tool qemu-img
    local img=$TEST_DIR/l.qcow2
    qemu-img create -q -f qcow2 "$img" 1M
    # Nothing at all for no snapshots; an empty JSON array.
    same_list "$img"
    [[ -z "$("$DISKIMG" snapshot -l "$img")" ]]
    [[ "$("$DISKIMG" snapshot -l --output=json "$img")" == "[]" ]]
    # Made by both, long names, ids past 9, an empty name, a name that
    # repeats (qemu-img allows it).
    qemu-img snapshot -c "a-name-longer-than-sixteen-bytes" "$img"
    "$DISKIMG" snapshot -c "" "$img"
    local i
    for i in 1 2 3 4 5 6 7 8; do "$DISKIMG" snapshot -q -c "s$i" "$img"; done
    qemu-img snapshot -c s8 "$img"
    "$DISKIMG" snapshot -c "$(printf 'x%.0s' {1..300})" "$img" # qemu-img keeps 255 bytes
    same_list "$img"
    [[ "$(tags "$img" | tail -1)" == "$(printf 'x%.0s' {1..255})" ]]
    # Fields qemu-img never writes: a VM clock, a VM state size, and an
    # entry without icount (older qemu): rewritten by hand.
    "$PYTHON3" - "$img" <<'EOF'
import struct, sys
f = open(sys.argv[1], "r+b")
h = f.read(72)
nb, off = struct.unpack(">IQ", h[60:72])
f.seek(off)
raw = f.read(1 << 20)
out, pos = b"", 0
for i in range(nb):
    l1o, l1s, idl, nl, ds, dn, clk, vms, ex = struct.unpack(">QIHHIIQII", raw[pos:pos + 40])
    extra = raw[pos + 40:pos + 40 + ex]
    ids = raw[pos + 40 + ex:pos + 40 + ex + idl + nl]
    pos += (40 + ex + idl + nl + 7) // 8 * 8
    if i == 0:
        extra, clk, vms = extra[:16], 3723456789012, 1536
        extra = struct.pack(">Q", vms) + extra[8:16]
    if i == 1:
        clk, vms = 360000 * 10**9 + 5 * 10**6, 3 << 20
        extra = struct.pack(">Q", vms) + extra[8:]
    e = struct.pack(">QIHHIIQII", l1o, l1s, idl, nl, ds, dn, clk, vms & 0xffffffff, len(extra)) + extra + ids
    out += e + b"\0" * (-len(e) % 8)
f.seek(off)
f.write(out + b"\0" * (pos - len(out)))
EOF
    qcheck "$img"
    same_list "$img"
    run -0 "$DISKIMG" snapshot -l "$img"
    [[ "${lines[2]}" == *"1.5 KiB"*"01:02:03.456           " ]]
    # -l needs no write access, and -U reads past a writer's lock.
    chmod a-w "$img"
    "$DISKIMG" snapshot -l -U "$img" >/dev/null
    chmod u+w "$img"
}

@test "snapshot: errors as qemu-img's, one line, exit 1, the image unchanged" {
    require_tool qemu-img qemu-io
    local img=$TEST_DIR/e.qcow2
    qemu-img create -q -f qcow2 "$img" 4M
    qio "$img" 'write -P 1 0 128k'
    "$DISKIMG" snapshot -c one "$img"
    cp "$img" "$TEST_DIR/before"
    run -1 --separate-stderr "$DISKIMG" snapshot -a nope "$img"
    [[ "$stderr" == "diskimg: Could not apply snapshot 'nope': Failed to load snapshot: No such file or directory" ]]
    run -1 --separate-stderr "$DISKIMG" snapshot -d nope "$img"
    [[ "$stderr" == "diskimg: Could not delete snapshot 'nope': snapshot not found" ]]
    # -d takes a name only, as qemu-img's (-a takes an id too).
    run -1 --separate-stderr "$DISKIMG" snapshot -d 1 "$img"
    [[ "$stderr" == *"snapshot not found" ]]
    cmp "$img" "$TEST_DIR/before"
    # Refcounts of 1 bit cannot count a second user of a cluster.
    qemu-img create -q -f qcow2 -o refcount_bits=1 "$TEST_DIR/r1.qcow2" 4M
    qio "$TEST_DIR/r1.qcow2" 'write -P 1 0 64k'
    cp "$TEST_DIR/r1.qcow2" "$TEST_DIR/r1.before"
    run -1 --separate-stderr "$DISKIMG" snapshot -c s "$TEST_DIR/r1.qcow2"
    [[ "$stderr" == "diskimg: Could not create snapshot 's': -34 (Numerical result out of range): qcow2: cluster 0x"*" would be used 2 times, more than refcount_bits=1 can count" ]]
    cmp "$TEST_DIR/r1.qcow2" "$TEST_DIR/r1.before"
    qcheck "$TEST_DIR/r1.qcow2"
    # No snapshots in raw: -95 for -c, as qemu-img; -l lists nothing.
    qemu-img create -q -f raw "$TEST_DIR/r.raw" 1M
    cp "$TEST_DIR/r.raw" "$TEST_DIR/r.before"
    run -1 --separate-stderr "$DISKIMG" snapshot -c s -f raw "$TEST_DIR/r.raw"
    [[ "$stderr" == "diskimg: Could not create snapshot 's': -95 (Operation not supported): "*"raw format has no internal snapshots" ]]
    run -1 --separate-stderr "$DISKIMG" snapshot -a s -f raw "$TEST_DIR/r.raw"
    [[ "${#stderr_lines[@]}" -eq 1 ]]
    run -0 "$DISKIMG" snapshot -l -f raw "$TEST_DIR/r.raw"
    [[ -z "$output" ]]
    cmp "$TEST_DIR/r.raw" "$TEST_DIR/r.before"
    # An external data file: -95 too.
    qemu-img create -q -f qcow2 -o data_file="$TEST_DIR/d.raw" "$TEST_DIR/df.qcow2" 1M
    cp "$TEST_DIR/df.qcow2" "$TEST_DIR/df.before"
    run -1 --separate-stderr "$DISKIMG" snapshot -c s "$TEST_DIR/df.qcow2"
    [[ "$stderr" == "diskimg: Could not create snapshot 's': -95 (Operation not supported): "*"external data file"* ]]
    cmp "$TEST_DIR/df.qcow2" "$TEST_DIR/df.before"
    # Bad usage: exit 2.
    run -2 "$DISKIMG" snapshot -c x -U "$img"
    run -2 "$DISKIMG" snapshot -l -c x "$img"
    run -2 "$DISKIMG" snapshot "$img"
    run -2 "$DISKIMG" snapshot -c x --output=json "$img"
    cmp "$img" "$TEST_DIR/before"
}

@test "snapshot: locks as qemu-img, --image-opts, --untrusted" {
    require_tool qemu-img qemu-io
    local img=$TEST_DIR/k.qcow2
    qemu-img create -q -f qcow2 "$img" 4M
    qio "$img" 'write -P 1 0 64k'
    "$DISKIMG" snapshot -c one "$img"
    # A writer (our server) holds the image: -c/-a/-d and a plain -l are
    # refused with exit 5, -l -U reads.
    start_server -f qcow2 "$img"
    run -5 "$DISKIMG" snapshot -c two "$img"
    run -5 "$DISKIMG" snapshot -d one "$img"
    run -5 "$DISKIMG" snapshot -l "$img"
    run -0 "$DISKIMG" snapshot -l -U "$img"
    [[ "$output" == *" one "* ]]
    stop_server
    # --image-opts names the image and its driver.
    "$DISKIMG" snapshot -c two --image-opts "driver=qcow2,file.filename=$img"
    run -0 "$DISKIMG" snapshot -l --image-opts "driver=qcow2,file.driver=file,file.filename=$img"
    [[ "$output" == *" two "* ]]
    run -2 "$DISKIMG" snapshot -l --image-opts "driver=qcow2,nosuchkey=1,file.filename=$img"
    # --untrusted: an overlay whose backing file would not open is never
    # asked to open it (snapshots need no backing file).
    qemu-img create -q -f qcow2 -u -b "$TEST_DIR/missing.raw" -F raw "$TEST_DIR/o.qcow2" 4M
    "$DISKIMG" snapshot --untrusted -f qcow2 -c s "$TEST_DIR/o.qcow2"
    run -0 "$DISKIMG" snapshot --untrusted -l "$TEST_DIR/o.qcow2"
    [[ "$output" == *" s "* ]]
    qemu-img create -q -f raw "$TEST_DIR/missing.raw" 4M # now qemu-img can open it
    qcheck "$TEST_DIR/o.qcow2"
}
