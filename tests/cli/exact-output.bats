#!/usr/bin/env bats
# diskimg's output against qemu-img 7.2's, byte for byte: map (JSON and
# human), check (JSON and human, and after -r leaks/all), info (JSON and
# human) over the images exact-output-images.sh makes (qcow2 variants, raw,
# vpc, vmdk, vhdx, vdi, backing chains, snapshots, bitmaps, images made by
# qemu-img and by diskimg), info and map over NBD (diskimg serve and
# qemu-nbd, nbd+unix://, nbd://, nbd:unix:), and compare -p's last line.
# Standard output and the exit status must be the same; standard error
# says "diskimg:" where qemu-img says "qemu-img:", and is not compared.

load '../helpers'
bats_require_minimum_version 1.5.0

setup_file() {
    command -v qemu-img >/dev/null && command -v qemu-io >/dev/null || return 0
    export IMAGES=$BATS_FILE_TMPDIR/img
    mkdir -p "$IMAGES"
    "$BATS_TEST_DIRNAME/exact-output-images.sh" "$IMAGES" "$DISKIMG" >"$IMAGES/list"
}

setup() {
    setup_test
    require_tool qemu-img qemu-io
    FAILED=$TEST_DIR/failed
    : >"$FAILED"
}
teardown() { cleanup_test; }

# same CMD ARGS...: diskimg and qemu-img print the same on stdout and exit
# with the same status; a difference is noted in $FAILED.
same() {
    local ours theirs rc_o=0 rc_t=0
    ours=$("$DISKIMG" "$@" 2>/dev/null) || rc_o=$?
    theirs=$(qemu-img "$@" 2>/dev/null) || rc_t=$?
    if [[ $rc_o -ne $rc_t || "$ours" != "$theirs" ]]; then
        {
            echo "== $* (exit: qemu-img $rc_t, diskimg $rc_o)"
            diff <(echo "$theirs") <(echo "$ours") | head -20
        } >>"$FAILED"
    fi
}

# The format-specific facts diskimg shows beyond qemu-img 7.2's: vpc's
# footer and vhdx's header (qemu-img shows none for these formats) and
# vmdk's header and descriptor facts (check --target reads them).  They
# are documented in diskimg-info(1); everything qemu-img prints must be
# there, in its order, with its values.
# compare_json_all DIR: each DIR/N.q (qemu-img's info JSON) against DIR/N.d
# (diskimg's, its extras removed), in one python for all the images.
compare_json_all() {
    "$PYTHON3" - "$1" <<'EOF'
import glob, json, sys
bad = 0
for q in sorted(glob.glob(sys.argv[1] + "/*.q")):
    d = q[:-1] + "d"
    theirs = json.load(open(q))
    ours = json.load(open(d))
    fs = ours.get("format-specific")
    if fs and fs["type"] in ("vpc", "vhdx"):
        del ours["format-specific"]
    elif fs and fs["type"] == "vmdk":
        for k in ("header-version", "header-flags", "end-of-stream", "encoding",
                  "adapter-type", "hardware-version", "long-content-id"):
            fs["data"].pop(k, None)
    a, b = json.dumps(theirs, indent=4), json.dumps(ours, indent=4)
    if a != b:
        bad = 1
        print("== info --output=json " + open(q[:-1] + "name").read().strip())
        print("qemu-img: " + a + "\ndiskimg: " + b)
sys.exit(bad)
EOF
}

strip_extras_human() {
    awk -v fmt="$1" '
        (fmt == "vpc" || fmt == "vhdx") && /^Format specific information:/ { skip = 1; next }
        skip && /^    / { next }
        { skip = 0 }
        fmt == "vmdk" && /^    (header version|header flags|end of stream|encoding|adapter type|hardware version|long content id):/ { next }
        { print }'
}

# same_info FILE FMT: info --output=json (kept for compare_json_all) and
# info, extras aside.
same_info() {
    local f=$1 fmt=$2 ours theirs n
    n=$(find "$TEST_DIR/json" -name '*.name' | wc -l)
    echo "$f" >"$TEST_DIR/json/$n.name"
    "$DISKIMG" info --output=json -f "$fmt" "$f" >"$TEST_DIR/json/$n.d"
    qemu-img info --output=json -f "$fmt" "$f" >"$TEST_DIR/json/$n.q"
    ours=$("$DISKIMG" info -f "$fmt" "$f" | strip_extras_human "$fmt")
    theirs=$(qemu-img info -f "$fmt" "$f")
    [[ "$ours" == "$theirs" ]] || {
        echo "== info $f"
        diff <(echo "$theirs") <(echo "$ours") | head -20
    } >>"$FAILED"
}

report() {
    if [[ -s $FAILED ]]; then
        cat "$FAILED" >&2
        return 1
    fi
}

# odd.raw (1000001 bytes) is left out of map and info: qemu-img rounds a
# raw file's size up to 512 bytes (1000448, and a zero entry for the 447
# bytes past the end of the file); diskimg keeps the file's size, as
# diskimg-info(1) says.  Its check is compared.
@test "exact output: map --output=json and map, on every image" {
    local f fmt n=0
    while read -r f fmt; do
        [[ $f == */odd.raw ]] && continue
        same map --output=json -f "$fmt" "$f"
        same map -f "$fmt" "$f"
        n=$((n + 1))
    done <"$IMAGES/list"
    ((n >= 45))
    # a start past the end, and an empty range: one empty entry
    same map --output=json --start-offset=8M "$IMAGES/empty.qcow2"
    same map --output=json --start-offset=1M --max-length=0 "$IMAGES/empty.qcow2"
    same map --output=json --start-offset=1M --max-length=100k "$IMAGES/top.qcow2"
    # probed (no -f), qemu-img first: diskimg's probe must not change
    # what the file system says about the image's last block
    local theirs ours
    theirs=$(qemu-img map --output=json "$IMAGES/tailz.qcow2")
    ours=$("$DISKIMG" map --output=json "$IMAGES/tailz.qcow2")
    [[ "$ours" == "$theirs" ]] || {
        echo "== map --output=json (probed) tailz.qcow2"
        diff <(echo "$theirs") <(echo "$ours") || true
    } >>"$FAILED"
    report
}

@test "exact output: check --output=json and check, on every image" {
    local f fmt
    while read -r f fmt; do
        # raw has no check (exit 63, nothing printed): two of them suffice
        [[ $fmt == raw && $f != */odd.raw && $f != */zero.raw ]] && continue
        same check --output=json -f "$fmt" "$f"
        same check -f "$fmt" "$f"
    done <"$IMAGES/list"
    report
}

@test "exact output: info --output=json and info, on every image" {
    local f fmt
    mkdir "$TEST_DIR/json"
    while read -r f fmt; do
        [[ $f == */odd.raw ]] && continue
        same_info "$f" "$fmt"
    done <"$IMAGES/list"
    # a vmdk whose extents differ in kind: no dirty-flag, as qemu-img
    cd "$TEST_DIR"
    qemu-img create -q -f vmdk -o subformat=twoGbMaxExtentSparse a.vmdk 1M
    qemu-img create -q -f vmdk -o subformat=monolithicFlat c.vmdk 1M
    sed -e '/^RW /d' a.vmdk >m.vmdk
    printf 'RW 2048 SPARSE "a-s001.vmdk"\nRW 2048 FLAT "c-flat.vmdk" 0\n' >>m.vmdk
    same_info m.vmdk vmdk
    compare_json_all "$TEST_DIR/json" >>"$FAILED" || true
    # names that are not clean UTF-8: the JSON escapes them as qemu's does
    # (\uXXXX, U+FFFD for bad bytes); the human output escapes them the
    # diskimg way (diskimg(1): strings from images), which is not compared
    qemu-img create -q -f qcow2 names.qcow2 1M
    for n in $'tab\there' $'bad\xffbyte' $'cut\xc3' $'over\xc0\xafx' $'nul\xc0\x80x' \
        $'surrogate\xed\xa0\x80x' 'back\slash' $'ctl\x01\x7f' $'nonchar\xef\xbf\xbe'; do
        qemu-img snapshot -c "$n" names.qcow2
    done
    same info --output=json names.qcow2
    # whole chains, and one whose middle is gone: all or nothing printed
    for f in top mid noF overraw d-over midsnap; do
        same info --backing-chain --output=json "$IMAGES/$f.qcow2"
        same info --backing-chain "$IMAGES/$f.qcow2"
    done
    qemu-img create -q -f qcow2 -b "$IMAGES/top.qcow2" -F qcow2 over.qcow2
    qemu-img create -q -f qcow2 -b gone.qcow2 -F qcow2 -u over-gone.qcow2 1M
    qemu-img create -q -f qcow2 -b over-gone.qcow2 -F qcow2 -u over2.qcow2 1M
    for f in over over2; do
        same info --backing-chain --output=json $f.qcow2
        same info --backing-chain $f.qcow2
    done
    report
}

# craft FILE leak|corrupt|shared: a qcow2 image whose first data cluster
# is leaked (its L2 entry cleared), referenced with refcount 0 (a
# rebuild), or referenced twice with refcount 1 (fixed in place).
craft() {
    qemu-img create -q -f qcow2 "$1" 4M
    qemu-io -f qcow2 -c 'write -P 1 0 128k' -c 'write -P 2 1M 64k' "$1" >/dev/null
    "$PYTHON3" - "$1" "$2" <<'EOF'
import struct, sys
f = open(sys.argv[1], "r+b")
h = f.read(104)
cbits = struct.unpack(">I", h[20:24])[0]
l1_off, rt_off = struct.unpack(">Q", h[40:48])[0], struct.unpack(">Q", h[48:56])[0]
f.seek(l1_off)
l2_off = struct.unpack(">Q", f.read(8))[0] & 0x00FFFFFFFFFFFE00
f.seek(l2_off)
host = struct.unpack(">Q", f.read(8))[0] & 0x00FFFFFFFFFFFE00
if sys.argv[2] == "leak":
    f.seek(l2_off)
    f.write(bytes(8))
elif sys.argv[2] == "shared":
    f.seek(l2_off)
    entry = f.read(8)
    f.seek(l2_off + 8 * 5)
    f.write(entry)
else:
    f.seek(rt_off)
    f.seek(struct.unpack(">Q", f.read(8))[0] + 2 * (host >> cbits))
    f.write(bytes(2))
EOF
}

@test "exact output: check and check -r leaks|all on leaked and corrupt images" {
    local k r out rc_q rc_d
    cd "$TEST_DIR"
    for k in leak corrupt shared dirty; do
        # dirty: lazy refcounts and a crashed writer (refcounts of 0)
        if [[ $k == dirty ]]; then
            cp "$IMAGES/dirty.qcow2" dirty.qcow2
        else
            craft "$k.qcow2" "$k"
        fi
        same check --output=json "$k.qcow2"
        same check "$k.qcow2"
        for r in leaks all; do
            for out in json human; do
                # the same file name for both: it is in the JSON
                mkdir -p q d
                cp "$k.qcow2" q/i.qcow2
                cp "$k.qcow2" d/i.qcow2
                rc_q=0
                rc_d=0
                (cd q && qemu-img check -r $r --output=$out i.qcow2) >q.out 2>/dev/null || rc_q=$?
                (cd d && "$DISKIMG" check -r $r --output=$out i.qcow2) >d.out 2>/dev/null || rc_d=$?
                echo "exit $rc_q" >>q.out
                echo "exit $rc_d" >>d.out
                cmp -s q.out d.out || {
                    echo "== check -r $r --output=$out ($k)"
                    diff q.out d.out
                } >>"$FAILED"
                # and qemu-img finds the image repaired (-r leaks leaves
                # corruptions alone)
                qemu-img check -q d/i.qcow2 2>/dev/null || [[ $r == leaks && $k != leak ]] ||
                    echo "== check -r $r ($k) left an image qemu-img check refuses" >>"$FAILED"
                qemu-img compare -q q/i.qcow2 d/i.qcow2 ||
                    echo "== check -r $r ($k): the guest data differs from qemu-img's repair" >>"$FAILED"
            done
        done
    done
    report
}

# nbd_same URI: info (JSON, human) and map (JSON, human) of URI.
nbd_same() {
    same info --output=json "$1"
    same info "$1"
    same map --output=json "$1"
    same map "$1"
}

@test "exact output: info and map over NBD (diskimg serve and qemu-nbd, unix and TCP)" {
    require_tool qemu-nbd
    local img=$IMAGES/q-v3.qcow2 qpid port try
    start_server -t -r -f qcow2 "$img"
    nbd_same "nbd+unix:///?socket=$SOCK"
    nbd_same "nbd:unix:$SOCK"
    stop_server
    start_server -t -r -f qcow2 -x exp "$img"
    nbd_same "nbd+unix:///exp?socket=$SOCK"
    nbd_same "nbd:unix:$SOCK:exportname=exp"
    stop_server
    qemu-nbd -r -t -f qcow2 -x disk -k "$TEST_DIR/q.sock" "$img" 2>/dev/null &
    qpid=$!
    wait_until 10 unix_listening "$TEST_DIR/q.sock"
    nbd_same "nbd+unix:///disk?socket=$TEST_DIR/q.sock"
    nbd_same "nbd:unix:$TEST_DIR/q.sock:exportname=disk"
    kill "$qpid"
    wait "$qpid" || true
    # a qcow2 overlay read through a raw export: its relative backing file
    # has no directory to be found in ("cannot determine actual path"),
    # and --backing-chain fails without printing anything
    qemu-nbd -r -t -f raw -k "$TEST_DIR/r.sock" "$IMAGES/mid.qcow2" 2>/dev/null &
    qpid=$!
    wait_until 10 unix_listening "$TEST_DIR/r.sock"
    same info --output=json "nbd+unix:///?socket=$TEST_DIR/r.sock"
    same info "nbd+unix:///?socket=$TEST_DIR/r.sock"
    same info --backing-chain "nbd+unix:///?socket=$TEST_DIR/r.sock"
    same info --backing-chain --output=json "nbd+unix:///?socket=$TEST_DIR/r.sock"
    kill "$qpid"
    wait "$qpid" || true
    # TCP, as a URI with and without the slash, and qemu's nbd:HOST:PORT
    # (another random port if the first is taken)
    for try in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 20000))
        WAIT_PORT=$port start_server -t -r -b 127.0.0.1 -p "$port" "$IMAGES/sparse.raw" && break
        grep -q "Address already in use" "$SERVER_LOG" || return 1
    done
    nbd_same "nbd://127.0.0.1:$port"
    nbd_same "nbd://127.0.0.1:$port/"
    nbd_same "nbd:127.0.0.1:$port"
    stop_server
    report
}

@test "exact output: compare -p ends at 100%, also at the first difference" {
    local f=$IMAGES/sparse.raw g=$IMAGES/src.raw last
    run --separate-stderr "$DISKIMG" compare -p "$f" "$f"
    assert_success
    assert_output "Images are identical."
    last=$(tr '\r' '\n' <<<"$stderr" | grep . | tail -1)
    [[ $last == "    (100.00/100%)"* ]]
    run --separate-stderr "$DISKIMG" compare -p "$f" "$g"
    assert_failure 1
    assert_output "$(qemu-img compare "$f" "$g")"
    last=$(tr '\r' '\n' <<<"$stderr" | grep . | tail -1)
    [[ $last == "    (100.00/100%)"* ]] || { echo "last progress line: $last" >&2; false; }
    run --separate-stderr "$DISKIMG" compare --progress=json "$f" "$g"
    assert_failure 1
    [[ $(tail -1 <<<"$stderr") == '{"progress": 100.00, '*'"done": true}' ]]
    # -q: nothing at all
    run --separate-stderr "$DISKIMG" compare -p -q "$f" "$g"
    assert_failure 1
    assert_output ""
    [[ -z $stderr ]]
}
