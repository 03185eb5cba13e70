#!/usr/bin/env bats
# diskimg commit, judged by qemu-img: what each image of the chain reads
# (qemu-img compare) and maps after diskimg commit and after qemu-img
# commit on the same chain, qemu-img check, -b BASE down the chain, bases
# of every format diskimg writes, a base that grows; errors leave the
# images unchanged; killed (SIGKILL) before each of its writes and syncs
# in turn (tests/preload/kill-after.c), and at random moments of a longer
# writethrough run, commit leaves a chain that reads as before.  The
# emptied overlay is as small as qemu-img commit leaves it: rebuilt to
# qemu's length and tables, or (snapshots, bitmaps, v2) its freed space
# punched; killed at each step of the rebuild, it checks clean, and a
# write error at each step (tests/preload/kill-after.c again) leaves it
# clean and reading the same, unchanged if before the first switch, and
# shrunk if the commit still succeeds.

load '../helpers'
load '../crash-lib'
bats_require_minimum_version 1.5.0

setup() {
    setup_test
    cd "$TEST_DIR"
}
teardown() { cleanup_test; }

# make_chain P: P-base.qcow2 <- P-mid.qcow2 <- P-top.qcow2, 4 MiB.
# base: 0x11 in 0-1M, 0x12 in 2M-2.5M; mid: 0x21 in 1M-2M, zeroes at
# 2M-2064k; top: 0x31 at 3M-3136k, zeroes at 0-64k.
make_chain() {
    qemu-img create -q -f qcow2 "$1-base.qcow2" 4M
    qemu-io -f qcow2 -c 'write -P 0x11 0 1M' -c 'write -P 0x12 2M 512k' "$1-base.qcow2" >/dev/null
    qemu-img create -q -f qcow2 -b "$1-base.qcow2" -F qcow2 "$1-mid.qcow2"
    qemu-io -f qcow2 -c 'write -P 0x21 1M 1M' -c 'write -z 2M 64k' "$1-mid.qcow2" >/dev/null
    qemu-img create -q -f qcow2 -b "$1-mid.qcow2" -F qcow2 "$1-top.qcow2"
    qemu-io -f qcow2 -c 'write -P 0x31 3M 64k' -c 'write -z 0 64k' "$1-top.qcow2" >/dev/null
}

# The map of an image (what holds each range, offsets aside), with the
# chain's prefix P dropped from the file names.
fmap() {
    qemu-img map --output=json "$1" | sed 's/, "offset": [0-9]*//; s/"[dq]-/"/'
}

# same_chains: d-* and q-* read and map the same, and check clean.
same_chains() {
    local f
    for f in top mid base; do
        qemu-img compare "d-$f.qcow2" "q-$f.qcow2"
        diff <(fmap "d-$f.qcow2") <(fmap "q-$f.qcow2")
        qemu-img check -q "d-$f.qcow2"
    done
}

@test "commit: into the backing file, then emptied, as qemu-img commit" {
    make_chain d
    make_chain q
    qemu-img convert -O raw d-top.qcow2 view.raw
    qemu-img convert -O raw d-base.qcow2 base.raw
    run --separate-stderr "$DISKIMG" commit d-top.qcow2
    [[ $status -eq 0 && $output == "Image committed." ]]
    qemu-img commit -q q-top.qcow2
    same_chains
    qemu-img compare -F raw d-top.qcow2 view.raw
    # top holds nothing now; the base is untouched.
    [[ $(qemu-img map --output=json d-top.qcow2) != *'"depth": 0'* ]]
    qemu-img compare -F raw d-base.qcow2 base.raw
    run "$DISKIMG" commit -q d-mid.qcow2
    [[ $status -eq 0 && -z $output ]]
    qemu-img commit -q q-mid.qcow2
    same_chains
    qemu-img compare -F raw d-top.qcow2 view.raw
}

@test "commit: a sparse 16 GiB chain, data far apart, as qemu-img commit" {
    # Long stretches that nothing above the base holds are skipped whole;
    # the data between them goes into the base.
    local p
    for p in d q; do
        qemu-img create -q -f qcow2 "$p-base.qcow2" 16G
        qemu-io -f qcow2 -c 'write -P 0x11 10G 1M' "$p-base.qcow2" >/dev/null
        qemu-img create -q -f qcow2 -b "$p-base.qcow2" -F qcow2 "$p-mid.qcow2"
        qemu-io -f qcow2 -c 'write -z 10G 64k' -c 'write -P 0x21 13G 64k' "$p-mid.qcow2" >/dev/null
        qemu-img create -q -f qcow2 -b "$p-mid.qcow2" -F qcow2 "$p-top.qcow2"
        qemu-io -f qcow2 -c 'write -P 0x31 14G 2M' -c 'write -P 0x32 16380M 4M' \
            "$p-top.qcow2" >/dev/null
    done
    cp d-top.qcow2 view.qcow2
    qemu-img rebase -u -b d-mid.qcow2 -F qcow2 view.qcow2
    qemu-img convert -O qcow2 view.qcow2 view-flat.qcow2
    "$DISKIMG" commit -q -b d-base.qcow2 d-top.qcow2
    qemu-img commit -q -b q-base.qcow2 q-top.qcow2
    qemu-img compare d-base.qcow2 view-flat.qcow2
    qemu-img compare d-base.qcow2 q-base.qcow2
    # What the base holds, neighbours merged (map splits them where the
    # clusters lie apart in the file).
    local m
    m='import json, sys
runs = []
for e in json.load(sys.stdin):
    k = (e["depth"], e["zero"], e["data"])
    if runs and runs[-1][2] == k and runs[-1][1] == e["start"]:
        runs[-1][1] += e["length"]
    else:
        runs.append([e["start"], e["start"] + e["length"], k])
print(runs)'
    diff <(qemu-img map --output=json d-base.qcow2 | "$PYTHON3" -c "$m") \
        <(qemu-img map --output=json q-base.qcow2 | "$PYTHON3" -c "$m")
    qemu-img check -q d-base.qcow2
}

@test "commit -b BASE: every layer above BASE goes into it, nothing is emptied (-p, -r)" {
    make_chain d
    make_chain q
    qemu-img convert -O raw d-top.qcow2 view.raw
    cp d-top.qcow2 top.orig
    cp d-mid.qcow2 mid.orig
    run --separate-stderr "$DISKIMG" commit -p -r 64M -b d-base.qcow2 d-top.qcow2
    [[ $status -eq 0 && $output == "Image committed." && $stderr == *"(100.00/100%)"* ]]
    qemu-img commit -q -b q-base.qcow2 q-top.qcow2
    same_chains
    qemu-img compare -F raw d-base.qcow2 view.raw
    cmp d-top.qcow2 top.orig
    cmp d-mid.qcow2 mid.orig
    [[ $(qemu-img info --backing-chain d-top.qcow2 | grep -c '^image: ') -eq 3 ]]
    # -d leaves the image as it was; an absolute name finds the base too.
    make_chain e
    "$DISKIMG" commit -q -d --image-opts driver=qcow2,file.filename=e-top.qcow2,l2-cache-size=1M
    qemu-img compare e-top.qcow2 view.raw
    [[ $(qemu-img map --output=json e-top.qcow2) == *'"depth": 0'* ]]
    "$DISKIMG" commit -q -b "$PWD/e-base.qcow2" e-top.qcow2
    qemu-img compare -F raw e-base.qcow2 view.raw
    # -r: 1 MiB (what top and mid hold) at 2 MiB/s takes half a second.
    make_chain r
    local start end
    start=$(date +%s%N)
    "$DISKIMG" commit -q -r 2M -b r-base.qcow2 r-top.qcow2
    end=$(date +%s%N)
    [[ $((end - start)) -ge 450000000 ]]
    qemu-img compare -F raw r-base.qcow2 view.raw
}

@test "commit: bases of every format diskimg writes; a shorter base grows" {
    local f
    for f in raw qcow2 vmdk vpc vhdx vdi; do
        qemu-img create -q -f "$f" "b.$f" 4M
        qemu-io -f "$f" -c 'write -P 0x51 0 1M' -c 'write -P 0x52 3M 64k' "b.$f" >/dev/null
        qemu-img create -q -f qcow2 -b "b.$f" -F "$f" "o-$f.qcow2"
        qemu-io -f qcow2 -c 'write -P 0x61 512k 1M' -c 'write -z 3M 4k' "o-$f.qcow2" >/dev/null
        qemu-img convert -O raw "o-$f.qcow2" "view-$f.raw"
        "$DISKIMG" commit -q "o-$f.qcow2"
        qemu-img compare -f "$f" -F raw "b.$f" "view-$f.raw"
        qemu-img compare -F raw "o-$f.qcow2" "view-$f.raw"
        if [[ $f != raw && $f != vpc ]]; then qemu-img check -q "b.$f"; fi
    done
    # A vmdk overlay: its data goes into the base.  (Writing the base
    # gives it a new CID, so the overlay no longer matches its parent, as
    # after qemu-img commit.)
    qemu-img create -q -f vmdk -b b.vmdk -F vmdk ov.vmdk
    qemu-io -f vmdk -c 'write -P 0x62 2M 64k' ov.vmdk >/dev/null
    qemu-img convert -O raw ov.vmdk view-ov.raw
    "$DISKIMG" commit -q ov.vmdk
    qemu-img compare -f vmdk -F raw b.vmdk view-ov.raw
    # A 1 MiB raw base under a 3 MiB overlay is grown, as qemu-img does.
    qemu-img create -q -f raw s.raw 1M
    qemu-img create -q -f qcow2 -b s.raw -F raw big.qcow2 3M
    qemu-io -f qcow2 -c 'write -P 0x71 2M 64k' big.qcow2 >/dev/null
    qemu-img convert -O raw big.qcow2 big.raw
    "$DISKIMG" commit -q big.qcow2
    [[ $(stat -c %s s.raw) -eq 3145728 ]]
    cmp s.raw big.raw
    qemu-img compare -F raw big.qcow2 big.raw
    # A shorter base that has a longer backing file of its own: the range
    # it grows by reads as zeroes (as through the top before), not as
    # that backing file.
    qemu-img create -q -f raw g-base.raw 3M
    qemu-io -f raw -c 'write -P 0x73 0 3M' g-base.raw >/dev/null
    qemu-img create -q -f qcow2 -b g-base.raw -F raw g-mid.qcow2 1M
    qemu-img create -q -f qcow2 -b g-mid.qcow2 -F qcow2 g-top.qcow2 3M
    qemu-io -f qcow2 -c 'write -P 0x72 2M 64k' g-top.qcow2 >/dev/null
    qemu-img convert -O raw g-top.qcow2 g.raw
    "$DISKIMG" commit -q g-top.qcow2
    qemu-img compare -F raw g-top.qcow2 g.raw
    qemu-img compare -F raw g-mid.qcow2 g.raw
    # resize grows the same way, as qemu-img resize.
    qemu-img create -q -f qcow2 -b g-base.raw -F raw r.qcow2 1M
    "$DISKIMG" resize -q r.qcow2 3M
    qemu-io -f qcow2 -r -c 'read -P 0x73 0 1M' -c 'read -P 0 1M 2M' r.qcow2 >/dev/null
    qemu-img check -q r.qcow2
}

@test "commit: bad input fails with one line and leaves the images unchanged" {
    make_chain d
    cp d-top.qcow2 top.orig
    cp d-base.qcow2 base.orig
    qemu-img create -q -f qcow2 alone.qcow2 1M
    cp alone.qcow2 alone.orig
    run --separate-stderr "$DISKIMG" commit alone.qcow2
    [[ $status -eq 1 && $stderr == "diskimg: Image does not have a backing file" ]]
    cmp alone.qcow2 alone.orig
    run --separate-stderr "$DISKIMG" commit -b alone.qcow2 d-top.qcow2
    [[ $status -eq 1 ]]
    [[ $stderr == "diskimg: Did not find 'alone.qcow2' in the backing chain of 'd-top.qcow2'" ]]
    run --separate-stderr "$DISKIMG" commit -b d-top.qcow2 d-top.qcow2
    [[ $status -eq 1 && $stderr == *"Did not find"* ]]
    run --separate-stderr "$DISKIMG" commit --untrusted d-top.qcow2
    [[ $status -eq 1 && $stderr == *"refusing to open backing file 'd-mid.qcow2'"* ]]
    run --separate-stderr "$DISKIMG" commit -r 0 d-top.qcow2
    [[ $status -eq 2 ]]
    run --separate-stderr "$DISKIMG" commit --image-opts driver=qcow2,file.filename=d-top.qcow2,x=1
    [[ $status -eq 2 && $stderr == *"option 'x'"* ]]
    # The base in use by a writer: exit 5.
    start_server -f qcow2 d-base.qcow2
    run --separate-stderr "$DISKIMG" commit -b d-base.qcow2 d-top.qcow2
    [[ $status -eq 5 && $stderr == *"d-base.qcow2"* ]]
    stop_server
    cmp d-top.qcow2 top.orig
    cmp d-base.qcow2 base.orig
}

@test "commit: kill -9 at any moment leaves a chain that reads as before" {
    # Many scattered clusters, committed one FUA write at a time so that
    # the commit lasts long enough to be killed in the middle of copying
    # or of emptying the overlay.
    qemu-img create -q -f qcow2 b.qcow2 16M
    qemu-io -f qcow2 -c 'write -P 0x11 0 16M' b.qcow2 >/dev/null
    qemu-img create -q -f qcow2 -b b.qcow2 -F qcow2 o.qcow2
    local cmds=() i
    for ((i = 0; i < 256; i += 2)); do cmds+=(-c "write -P $((i % 250 + 1)) $((i * 64))k 64k"); done
    qemu-io -f qcow2 "${cmds[@]}" o.qcow2 >/dev/null
    qemu-img convert -O raw o.qcow2 view.raw
    cp b.qcow2 b.orig
    cp o.qcow2 o.orig
    reset() { cp b.orig b.qcow2 && cp o.orig o.qcow2; }
    check() {
        qemu-img check -q o.qcow2 || [[ $? -eq 3 ]]
        qemu-img check -q b.qcow2 || [[ $? -eq 3 ]]
        qemu-img compare -q -F raw o.qcow2 view.raw
    }
    killed_at_random reset check commit -q -t writethrough o.qcow2
    # What a killed commit left, a new one completes.
    "$DISKIMG" commit -q o.qcow2
    qemu-img compare -F raw o.qcow2 view.raw
    qemu-img compare -F raw b.qcow2 view.raw
}

@test "rebase and commit: qcow2 v2, extended L2, 512-byte clusters, compressed, with a snapshot" {
    local o
    qemu-img create -q -f qcow2 vb.qcow2 8M
    qemu-io -f qcow2 -c 'write -P 1 0 3M' -c 'write -P 2 5M 100k' vb.qcow2 >/dev/null
    qemu-img create -q -f raw vn.raw 8M
    qemu-io -f raw -c 'write -P 1 0 1M' -c 'write -P 9 4M 1M' vn.raw >/dev/null
    for o in compat=0.10 extended_l2=on cluster_size=512; do
        rm -f vo.qcow2 b.qcow2
        cp vb.qcow2 b.qcow2
        qemu-img create -q -f qcow2 -o "$o" -b b.qcow2 -F qcow2 vo.qcow2
        qemu-io -f qcow2 -c 'write -P 3 1000k 1M' -c 'write -c -P 4 6M 64k' \
            -c 'write -P 5 4095k 3k' vo.qcow2 >/dev/null
        qemu-img snapshot -c s1 vo.qcow2
        qemu-io -f qcow2 -c 'write -P 6 7M 64k' vo.qcow2 >/dev/null
        qemu-img convert -O raw vo.qcow2 view.raw
        cp vo.qcow2 vo.orig
        "$DISKIMG" rebase -b vn.raw -F raw vo.qcow2
        qemu-img compare -F raw vo.qcow2 view.raw
        qemu-img check -q vo.qcow2
        cp vo.orig vo.qcow2
        "$DISKIMG" commit -q vo.qcow2
        qemu-img compare -F raw vo.qcow2 view.raw
        qemu-img compare -F raw b.qcow2 view.raw
        qemu-img check -q vo.qcow2
        # The snapshot keeps what it held.
        qemu-img snapshot -a s1 vo.qcow2
        qemu-io -f qcow2 -r -c 'read -P 3 1000k 1M' vo.qcow2 >/dev/null
        qemu-img check -q vo.qcow2
    done
}

@test "commit: killed at each of its writes and syncs, the chain reads as before" {
    qemu-img create -q -f qcow2 b.qcow2 4M
    qemu-io -f qcow2 -c 'write -P 1 0 1M' b.qcow2 >/dev/null
    qemu-img create -q -f qcow2 -b b.qcow2 -F qcow2 o.qcow2
    qemu-io -f qcow2 -c 'write -P 2 512k 64k' -c 'write -P 3 2M 128k' -c 'write -z 3M 64k' \
        o.qcow2 >/dev/null
    qemu-img convert -O raw o.qcow2 view.raw
    cp b.qcow2 b.orig
    cp o.qcow2 o.orig
    local n rc
    for n in $(seq 1 60); do
        cp b.orig b.qcow2
        cp o.orig o.qcow2
        rc=0
        killed_after "$n" commit -q o.qcow2 || rc=$?
        [[ $rc -eq 0 || $rc -eq 137 ]] || { echo "killed after $n: exit $rc" >&2; return 1; }
        qemu-img check -q o.qcow2 || [[ $? -eq 3 ]]
        qemu-img check -q b.qcow2 || [[ $? -eq 3 ]]
        qemu-img compare -q -F raw o.qcow2 view.raw || { echo "killed after $n" >&2; return 1; }
        [[ $rc -ne 0 ]] || break
    done
    [[ $rc -eq 0 && $n -gt 5 ]]
    qemu-img compare -F raw b.qcow2 view.raw
}

# make_overlay NAME SIZE [create -o OPTS]: NAME-base.qcow2 <- NAME.qcow2,
# the overlay holding 4 MiB at 0, 3 MiB at 30M and a zero cluster at 50M.
make_overlay() {
    qemu-img create -q -f qcow2 "$1-base.qcow2" "$2"
    qemu-img create -q -f qcow2 ${3:+-o "$3"} -b "$1-base.qcow2" -F qcow2 "$1.qcow2" "$2"
    qemu-io -f qcow2 -c 'write -P 1 0 4M' -c 'write -P 2 30M 3M' -c 'write -z 50M 64k' \
        "$1.qcow2" >/dev/null
}

# info_fields IMAGE: qemu-img info but for the file's size on disk.
info_fields() {
    qemu-img info --output=json "$1" | grep -v '"actual-size"'
}

@test "commit: the emptied overlay is rebuilt as small as qemu-img commit leaves it" {
    local o cs before
    # 4k clusters at 1200M: an L1 table of two clusters.
    for o in "" cluster_size=512 extended_l2=on,lazy_refcounts=on refcount_bits=1 \
        cluster_size=4096; do
        local size=64M
        [[ $o == cluster_size=4096 ]] && size=1200M
        cs=65536
        [[ $o == cluster_size=* ]] && cs=${o#cluster_size=}
        rm -f ./*.qcow2
        make_overlay d "$size" "$o"
        make_overlay q "$size" "$o"
        info_fields d.qcow2 >info.before
        head -c "$cs" d.qcow2 >cluster0.before
        before=$(stat -c %s d.qcow2)
        "$DISKIMG" commit -q d.qcow2
        qemu-img commit -q q.qcow2
        # qemu's length and tables (refcount table, block, L1) to the byte.
        [[ $(stat -c %s d.qcow2) -eq $(stat -c %s q.qcow2) ]]
        [[ $(($(stat -c %s d.qcow2) * 10)) -lt $before ]]
        cmp <(tail -c +$((cs + 1)) d.qcow2) <(tail -c +$((cs + 1)) q.qcow2)
        # Cluster 0 (backing file, features, extensions) is kept but for
        # the L1 and refcount table fields.
        cmp <(head -c 40 d.qcow2) <(head -c 40 cluster0.before)
        cmp <(head -c "$cs" d.qcow2 | tail -c +61) <(tail -c +61 cluster0.before)
        diff info.before <(info_fields d.qcow2)
        qemu-img check -q d.qcow2
        # The base got what qemu-img commit put into its own.
        qemu-img compare d-base.qcow2 q-base.qcow2
        qemu-img compare d.qcow2 d-base.qcow2
        [[ $(qemu-img map --output=json d.qcow2) != *'"depth": 0'* ]]
    done
    # Still an image to write to.
    qemu-io -f qcow2 -c 'write -P 7 1M 2M' d.qcow2 >/dev/null
    qemu-img check -q d.qcow2
    qemu-io -f qcow2 -r -c 'read -P 7 1M 2M' d.qcow2 >/dev/null
}

@test "commit: an overlay qemu cannot rebuild keeps its length, the freed space punched" {
    local o
    for o in compat=0.10 snapshot bitmap; do
        rm -f ./*.qcow2
        make_overlay d 64M "${o/#[sb]*/}"
        make_overlay q 64M "${o/#[sb]*/}"
        if [[ $o == snapshot ]]; then
            qemu-img snapshot -c s1 d.qcow2
            qemu-img snapshot -c s1 q.qcow2
            qemu-io -f qcow2 -c 'write -P 3 8M 1M' d.qcow2 >/dev/null
            qemu-io -f qcow2 -c 'write -P 3 8M 1M' q.qcow2 >/dev/null
        elif [[ $o == bitmap ]]; then
            qemu-img bitmap --add d.qcow2 b0
            qemu-img bitmap --add q.qcow2 b0
        fi
        qemu-img convert -O raw d.qcow2 view.raw
        info_fields d.qcow2 >info.before
        "$DISKIMG" commit -q d.qcow2
        qemu-img commit -q q.qcow2
        [[ $(stat -c %s d.qcow2) -eq $(stat -c %s q.qcow2) ]]
        # What the file system holds: qemu's, within a few clusters.
        [[ $(du -B1 d.qcow2 | cut -f1) -le $(($(du -B1 q.qcow2 | cut -f1) + 4 * 65536)) ]]
        diff info.before <(info_fields d.qcow2)
        qemu-img check -q d.qcow2
        qemu-img compare -F raw d.qcow2 view.raw
        [[ $(qemu-img map --output=json d.qcow2) != *'"depth": 0'* ]]
    done
    # The snapshot keeps what it held.
    rm -f ./*.qcow2
    make_overlay d 64M
    qemu-img snapshot -c s1 d.qcow2
    "$DISKIMG" commit -q d.qcow2
    qemu-img snapshot -a s1 d.qcow2
    qemu-io -f qcow2 -r -c 'read -P 1 0 4M' -c 'read -P 2 30M 3M' d.qcow2 >/dev/null
}

# make_small_overlay: o-base.qcow2 <- o.qcow2 with little data, so that
# most of a commit's writes fall in the rebuild; view.raw what it reads,
# b.orig and o.orig copies that reset_small_overlay puts back.
make_small_overlay() {
    qemu-img create -q -f qcow2 o-base.qcow2 4M
    qemu-img create -q -f qcow2 -b o-base.qcow2 -F qcow2 o.qcow2
    qemu-io -f qcow2 -c 'write -P 1 0 64k' -c 'write -P 2 1M 128k' -c 'write -z 2M 64k' \
        o.qcow2 >/dev/null
    qemu-img convert -O raw o.qcow2 view.raw
    cp o-base.qcow2 b.orig
    cp o.qcow2 o.orig
}
reset_small_overlay() {
    cp b.orig o-base.qcow2
    cp o.orig o.qcow2
}

@test "commit: killed at each step of the rebuild, the overlay checks clean and reads the same" {
    make_small_overlay
    local n rc len last=0 lens=()
    for n in $(seq 1 40); do
        reset_small_overlay
        rc=0
        killed_after "$n" commit -q o.qcow2 || rc=$?
        [[ $rc -eq 0 || $rc -eq 137 ]] || { echo "killed after $n: exit $rc" >&2; return 1; }
        # Clean, not merely leaking: each switch leaves a whole image.
        qemu-img check -q o.qcow2 || { echo "killed after $n: check $?" >&2; return 1; }
        qemu-img compare -q -F raw o.qcow2 view.raw || { echo "killed after $n" >&2; return 1; }
        len=$(stat -c %s o.qcow2)
        [[ $len -eq $last ]] || lens+=("$len")
        last=$len
        [[ $rc -ne 0 ]] || break
    done
    [[ $rc -eq 0 && $len -eq 262144 ]]
    # The old length, the tables past it, then qemu's.
    [[ ${#lens[@]} -ge 3 && ${lens[0]} -eq $(stat -c %s o.orig) ]]
    qemu-img compare -F raw o-base.qcow2 view.raw
}

@test "commit: a write error at each step of the rebuild leaves the overlay clean, reading the same" {
    make_small_overlay
    # From runs killed before each call in turn: how many writes, syncs
    # and truncates the commit makes, and which is the first switch's
    # header write (the kill after it is the first to leave the header
    # naming other tables).
    local n rc calls=0 switch=0
    for n in $(seq 1 60); do
        reset_small_overlay
        rc=0
        killed_after "$n" commit -q o.qcow2 || rc=$?
        if [[ $rc -eq 0 ]]; then
            calls=$((n - 1))
            break
        fi
        if [[ $switch -eq 0 ]] && ! cmp -s <(head -c 60 o.qcow2) <(head -c 60 o.orig); then
            switch=$((n - 1))
        fi
    done
    [[ $calls -gt 0 && $switch -gt 1 ]]
    # Each of those calls fails in turn (EIO), the others are done.
    local failed=0 len=$(stat -c %s o.orig)
    for n in $(seq 1 $((calls + 1))); do
        reset_small_overlay
        run --separate-stderr failing_after "$n" commit -q o.qcow2
        qemu-img check -q o.qcow2 || { echo "write $n failed: check $?" >&2; return 1; }
        qemu-img check -q o-base.qcow2 || [[ $? -eq 3 ]]
        qemu-img compare -q -F raw o.qcow2 view.raw || { echo "write $n failed" >&2; return 1; }
        # Some calls may fail unnoticed: probes of what the kernel can do
        # (RWF_DSYNC, on a pipe).  But a commit that succeeds has shrunk the
        # overlay: an I/O error probing whether it can be resized is not
        # "it cannot" (which would keep the length).
        if [[ $status -eq 0 ]]; then
            [[ $(stat -c %s o.qcow2) -eq 262144 ]] || {
                echo "write $n failed unnoticed, and the overlay kept its length" >&2
                return 1
            }
            continue
        fi
        failed=$((failed + 1))
        failed_in_one_line || { echo "write $n failed: exit $status, $stderr" >&2; return 1; }
        if [[ $n -lt $switch ]]; then
            # Nothing switched: the overlay as it was, not even longer.
            [[ $(stat -c %s o.qcow2) -eq $len ]] || {
                echo "write $n failed, before the switch at $switch: the overlay grew" >&2
                return 1
            }
            cmp o.qcow2 o.orig
        fi
    done
    # No failure: the whole rebuild, as qemu-img commit leaves it.
    [[ $status -eq 0 && $(stat -c %s o.qcow2) -eq 262144 && $failed -gt $((calls / 2)) ]]
    qemu-img compare -F raw o-base.qcow2 view.raw
}
