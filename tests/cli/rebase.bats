#!/usr/bin/env bats
# diskimg rebase, judged by qemu-img: the guest view before and after
# (qemu-img compare), qemu-img check, the backing fields qemu-img info
# reads, and the allocation map qemu-img rebase leaves on the same input;
# -u, -b "", backing files of other sizes and inside the old chain;
# errors leave the image unchanged; killed (SIGKILL) before each of its
# writes and syncs in turn (tests/preload/kill-after.c), and at random
# moments of a longer writethrough run, a safe rebase leaves an image that
# reads as before, with the old backing file or the new one.

load '../helpers'
load '../crash-lib'
bats_require_minimum_version 1.5.0

setup() {
    setup_test
    cd "$TEST_DIR"
}
teardown() { cleanup_test; }

# A chain base.qcow2 <- mid.qcow2 <- top.qcow2 (4 MiB), and new.raw.
# base: 0x11 in 0-1M, 0x12 in 2M-2.5M; mid: 0x21 in 1M-1.5M, zeroes at
# 2M-2064k; top: 0x31 in 512k-1.5M; new: 0x11 in 0-256k, 0x41 at 3M.
make_chain() {
    qemu-img create -q -f qcow2 base.qcow2 4M
    qemu-io -f qcow2 -c 'write -P 0x11 0 1M' -c 'write -P 0x12 2M 512k' base.qcow2 >/dev/null
    qemu-img create -q -f qcow2 -b base.qcow2 -F qcow2 mid.qcow2
    qemu-io -f qcow2 -c 'write -P 0x21 1M 512k' -c 'write -z 2M 64k' mid.qcow2 >/dev/null
    qemu-img create -q -f qcow2 -b mid.qcow2 -F qcow2 top.qcow2
    qemu-io -f qcow2 -c 'write -P 0x31 512k 1M' top.qcow2 >/dev/null
    qemu-img create -q -f raw new.raw 4M
    qemu-io -f raw -c 'write -P 0x11 0 256k' -c 'write -P 0x41 3M 64k' new.raw >/dev/null
    qemu-img convert -O raw top.qcow2 view.raw
}

# The layer that holds each 64k of the image (qemu-img map's depth).
# Where the old chain reads zeroes and the new backing file does not,
# qemu-img writes zeroes as data and diskimg writes zero clusters: both
# hold the range in the overlay, which is what this compares.
amap() {
    qemu-img map --output=json "$1" | sed -n 's/.*"start": \([0-9]*\), "length": \([0-9]*\), "depth": \([0-9]*\).*/\1 \2 \3/p' |
        while read -r start len depth; do
            for ((o = start; o < start + len; o += 65536)); do echo "$o $depth"; done
        done
}

# same_as_qemu ARGS...: diskimg rebase ARGS on a copy of top.qcow2 and
# qemu-img rebase ARGS on another: both exit 0, both read as view.raw,
# check clean, and have the same backing fields and allocation map.
same_as_qemu() {
    cp top.qcow2 d.qcow2
    cp top.qcow2 q.qcow2
    run "$DISKIMG" rebase "$@" d.qcow2
    [[ $status -eq 0 ]] || { echo "diskimg: $output" >&2; return 1; }
    qemu-img rebase "$@" q.qcow2
    qemu-img compare -F raw d.qcow2 view.raw
    qemu-img check -q d.qcow2
    diff <(qemu-img info d.qcow2 | grep backing) <(qemu-img info q.qcow2 | grep backing)
    diff <(amap d.qcow2) <(amap q.qcow2)
}

@test "rebase: safe mode onto a raw file, nothing, a shorter and a longer file, as qemu-img" {
    make_chain
    same_as_qemu -b new.raw -F raw
    same_as_qemu -b ""
    qemu-img create -q -f raw short.raw 1536k
    qemu-io -f raw -c 'write -P 0x11 0 1M' short.raw >/dev/null
    same_as_qemu -b short.raw -F raw
    qemu-img create -q -f raw long.raw 16M
    same_as_qemu -b long.raw -F raw
    # The overlay keeps its size.
    [[ $(qemu-img info --output=json d.qcow2) == *'"virtual-size": 4194304'* ]]
}

@test "rebase: onto an image further down the chain reads only what lies between" {
    make_chain
    same_as_qemu -b base.qcow2 -F qcow2
    # What mid held and top did not (its zeroes at 2M) is now in the
    # overlay, and nothing else: 16 clusters of top's and that one.
    [[ $(amap d.qcow2 | grep -c ' 0$') -eq 17 ]]
    qemu-io -f qcow2 -r -c 'read -P 0 2M 64k' d.qcow2 >/dev/null
    # A relative name is taken from the overlay's directory.
    mkdir sub
    cp top.qcow2 sub/t.qcow2
    qemu-img rebase -u -b ../mid.qcow2 -F qcow2 sub/t.qcow2
    "$DISKIMG" rebase -b ../new.raw -F raw sub/t.qcow2
    qemu-img compare -F raw sub/t.qcow2 view.raw
    [[ $(qemu-img info sub/t.qcow2) == *"backing file: ../new.raw"* ]]
}

@test "rebase -u: only the header, as qemu-img; detaching with -b \"\" and without -b" {
    make_chain
    cp top.qcow2 d.qcow2
    cp top.qcow2 q.qcow2
    "$DISKIMG" rebase -u -b new.raw -F raw d.qcow2
    qemu-img rebase -u -b new.raw -F raw q.qcow2
    diff <(qemu-img info --output=json d.qcow2 | grep -v actual-size) \
        <(qemu-img info --output=json q.qcow2 | grep -v actual-size | sed 's/q.qcow2/d.qcow2/')
    diff <(amap d.qcow2) <(amap q.qcow2)
    qemu-img check -q d.qcow2
    # A missing file is fine with -u (nothing is opened).
    "$DISKIMG" rebase -u -b missing.qcow2 -F qcow2 d.qcow2
    [[ $(qemu-img info d.qcow2) == *"backing file: missing.qcow2"* ]]
    "$DISKIMG" rebase -u -b "" d.qcow2
    run qemu-img info d.qcow2
    [[ $output != *backing* ]]
    "$DISKIMG" rebase -u -b mid.qcow2 -F qcow2 --image-opts driver=qcow2,file.filename=d.qcow2
    [[ $(qemu-img info d.qcow2) == *"backing file: mid.qcow2"* ]]
    "$DISKIMG" rebase -u d.qcow2
    run qemu-img info d.qcow2
    [[ $output != *backing* ]]
    qemu-img check -q d.qcow2
    # --untrusted with -u: the old backing file is not opened.
    "$DISKIMG" rebase -u --untrusted -b mid.qcow2 -F qcow2 d.qcow2
    qemu-img compare -F raw d.qcow2 view.raw
}

@test "rebase: bad input fails with one line and leaves the image unchanged" {
    make_chain
    cp top.qcow2 orig.qcow2
    run --separate-stderr "$DISKIMG" rebase -b new.raw top.qcow2
    [[ $status -eq 1 && $stderr == *"backing format must be specified"* ]]
    run --separate-stderr "$DISKIMG" rebase -b missing.raw -F raw top.qcow2
    [[ $status -eq 1 && $stderr == *"Could not open new backing file 'missing.raw'"* ]]
    [[ $(wc -l <<<"$stderr") -eq 1 ]]
    run --separate-stderr "$DISKIMG" rebase -b new.raw -F qcow2 top.qcow2
    [[ $status -eq 1 && $stderr == *"Could not open new backing file"* ]]
    run --separate-stderr "$DISKIMG" rebase top.qcow2
    [[ $status -eq 2 && $stderr == *"Must specify backing file (-b) or use unsafe mode (-u)"* ]]
    run --separate-stderr "$DISKIMG" rebase -u -b ../${TEST_DIR##*/}/top.qcow2 -F qcow2 top.qcow2
    [[ $status -eq 1 && $stderr == *"that is the image itself"* ]]
    run --separate-stderr "$DISKIMG" rebase --untrusted -b new.raw -F raw top.qcow2
    [[ $status -eq 1 && $stderr == *"refusing to open backing file 'mid.qcow2'"* ]]
    cmp top.qcow2 orig.qcow2
    # A format without a backing field diskimg can change.
    qemu-img create -q -f vmdk vb.vmdk 4M
    qemu-img create -q -f vmdk -b vb.vmdk -F vmdk vo.vmdk
    cp vo.vmdk vo.orig
    run --separate-stderr "$DISKIMG" rebase -b new.raw -F raw vo.vmdk
    [[ $status -eq 1 && $stderr == *"Could not change the backing file to 'new.raw': Operation not supported"* ]]
    cmp vo.vmdk vo.orig
    # Locked by a writer: exit 5, unchanged.
    start_server -f qcow2 top.qcow2
    run --separate-stderr "$DISKIMG" rebase -b new.raw -F raw top.qcow2
    [[ $status -eq 5 ]]
    stop_server
    cmp top.qcow2 orig.qcow2
}

@test "rebase: kill -9 at any moment leaves an image that reads as before" {
    make_chain
    # Many scattered differences, written one FUA write at a time so that
    # the rebase lasts long enough to be killed in the middle.
    qemu-img create -q -f qcow2 wide.qcow2 16M
    local cmds=() i
    for ((i = 0; i < 256; i += 2)); do cmds+=(-c "write -P $((i % 250 + 1)) $((i * 64))k 64k"); done
    qemu-io -f qcow2 "${cmds[@]}" wide.qcow2 >/dev/null
    qemu-img create -q -f qcow2 -b wide.qcow2 -F qcow2 o.qcow2
    qemu-io -f qcow2 -c 'write -P 0x77 1M 64k' o.qcow2 >/dev/null
    qemu-img convert -O raw o.qcow2 o.raw
    cp o.qcow2 o.orig
    reset() { cp o.orig o.qcow2; }
    check() {
        qemu-img check -q o.qcow2 || [[ $? -eq 3 ]]
        qemu-img compare -q -F raw o.qcow2 o.raw
    }
    killed_at_random reset check rebase -t writethrough -b "" o.qcow2
    # And what a killed rebase left, a new one completes.
    "$DISKIMG" rebase -b "" o.qcow2
    qemu-img compare -F raw o.qcow2 o.raw
    qemu-img check -q o.qcow2 || [[ $? -eq 3 ]]
}

@test "rebase: killed at each of its writes and syncs, the image reads as before" {
    make_chain
    local n rc b
    for n in $(seq 1 60); do
        cp top.qcow2 o.qcow2
        rc=0
        killed_after "$n" rebase -b new.raw -F raw o.qcow2 || rc=$?
        [[ $rc -eq 0 || $rc -eq 137 ]] || { echo "killed after $n: exit $rc" >&2; return 1; }
        qemu-img check -q o.qcow2 || [[ $? -eq 3 ]]
        qemu-img compare -q -F raw o.qcow2 view.raw || { echo "killed after $n" >&2; return 1; }
        b=$(qemu-img info --output=json o.qcow2 | grep '"backing-filename"')
        [[ $b == *'"mid.qcow2"'* || $b == *'"new.raw"'* ]]
        [[ $rc -ne 0 ]] || break
    done
    [[ $rc -eq 0 && $n -gt 5 && $b == *new.raw* ]]
}

@test "rebase: a sparse 16 GiB chain, data far apart, onto another sparse image, as qemu-img" {
    # Long stretches that need no comparing are skipped whole (the old
    # chain and the new backing file both read zeroes there, or the top
    # holds the data); what lies between is compared and kept.
    qemu-img create -q -f qcow2 bb.qcow2 16G
    qemu-io -f qcow2 -c 'write -P 0x11 10G 1M' bb.qcow2 >/dev/null
    qemu-img create -q -f qcow2 -b bb.qcow2 -F qcow2 bm.qcow2
    qemu-io -f qcow2 -c 'write -z 12G 64k' -c 'write -P 0x21 13G 64k' bm.qcow2 >/dev/null
    qemu-img create -q -f qcow2 -b bm.qcow2 -F qcow2 bt.qcow2
    qemu-io -f qcow2 -c 'write -P 0x31 14G 2M' bt.qcow2 >/dev/null
    qemu-img create -q -f qcow2 bn.qcow2 16G
    qemu-io -f qcow2 -c 'write -P 0x41 10G 64k' -c 'write -P 0x42 12G 64k' \
        -c 'write -P 0x43 15G 64k' bn.qcow2 >/dev/null
    cp bt.qcow2 d.qcow2
    cp bt.qcow2 q.qcow2
    "$DISKIMG" rebase -b bn.qcow2 -F qcow2 d.qcow2
    qemu-img rebase -b bn.qcow2 -F qcow2 q.qcow2
    qemu-img compare bt.qcow2 d.qcow2
    qemu-img check -q d.qcow2
    # The same ranges held by the overlay as qemu-img's (which writes
    # zeroes as data where diskimg writes zero clusters), neighbours merged
    # (map splits them where the clusters lie apart in the file).
    held() {
        qemu-img map --output=json "$1" | "$PYTHON3" -c '
import json, sys
runs = []
for e in json.load(sys.stdin):
    if e["depth"] == 0:
        if runs and runs[-1][1] == e["start"]:
            runs[-1][1] += e["length"]
        else:
            runs.append([e["start"], e["start"] + e["length"]])
print(runs)'
    }
    diff <(held d.qcow2) <(held q.qcow2)
    [[ -n "$(held d.qcow2)" ]]
}
