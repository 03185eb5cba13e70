#!/usr/bin/env bats
# convert's qemu-img options beyond the basics, with qemu-img as the
# judge: -C (copy offloading: correct bytes, holes kept, the kernel's
# copy counted by --debug, qemu-img's refusals), -r (a rate limit that
# really slows the copy), --salvage (a source that fails reads, from
# nbdkit's ddrescue filter: qemu-img's warnings and bytes), -B with vmdk
# targets (and qemu-img's refusal for the others), -U.

load '../helpers'
load '../interop/lib'
load '../interop/nbd-servers'

setup() { setup_test; }
teardown() {
    stop_peers
    [[ -z "${XFS_MNT:-}" ]] || umount "$XFS_MNT" 2>/dev/null || true
    cleanup_test
}

# An XFS file system on a loop device, for reflinks (ext4 has none):
# only as root where loop devices work; 1 when it cannot be had.
mount_xfs() {
    [[ $(id -u) -eq 0 ]] && command -v mkfs.xfs >/dev/null || return 1
    truncate -s 320M "$TEST_DIR/xfs.img"
    mkfs.xfs -q -m reflink=1 "$TEST_DIR/xfs.img" 2>/dev/null || return 1
    mkdir "$TEST_DIR/xfs"
    mount -o loop "$TEST_DIR/xfs.img" "$TEST_DIR/xfs" 2>/dev/null || return 1
    XFS_MNT=$TEST_DIR/xfs
}

# 8 MiB: 1 MiB of data, a hole, 2 MiB of data at 5 MiB, a hole.
make_src() {
    truncate -s 8M "$1"
    make_pattern "$TEST_DIR/pat" $((3 * 1048576))
    dd if="$TEST_DIR/pat" of="$1" bs=1M count=1 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$1" bs=1M skip=1 seek=5 count=2 conv=notrunc status=none
}

@test "convert -C: the kernel copies the data, holes stay holes, qemu-img agrees" {
    make_src "$TEST_DIR/s.raw"
    qemu-img convert -f raw -O qcow2 "$TEST_DIR/s.raw" "$TEST_DIR/s.qcow2"
    for src in s.raw s.qcow2; do
        run --separate-stderr "$DISKIMG" convert -C --debug=block.trace=1 -O raw \
            "$TEST_DIR/$src" "$TEST_DIR/d.raw"
        assert_success
        # Every data byte went through copy_file_range, none through a write.
        [[ "$stderr" == *"copy offloading (-C): 3145728 bytes copied by the kernel"* ]]
        [[ "$stderr" != *"pwritev node=file"* ]]
        cmp "$TEST_DIR/s.raw" "$TEST_DIR/d.raw"
        qemu-img compare -f raw -F raw "$TEST_DIR/s.raw" "$TEST_DIR/d.raw"
        diff <(qemu-img map -f raw --output=json "$TEST_DIR/s.raw") \
            <(qemu-img map -f raw --output=json "$TEST_DIR/d.raw")
        rm "$TEST_DIR/d.raw"
    done
    # Where the file system can (XFS), the target shares the source's
    # extents: no data block was written at all.
    if mount_xfs; then
        cp "$TEST_DIR/s.raw" "$XFS_MNT/s.raw"
        "$DISKIMG" convert -C -f raw -O raw "$XFS_MNT/s.raw" "$XFS_MNT/d.raw"
        cmp "$TEST_DIR/s.raw" "$XFS_MNT/d.raw"
        filefrag -v "$XFS_MNT/d.raw" | grep -q shared
        # ("! pipeline" cannot fail a bats test: errexit ignores it)
        [[ -z $(filefrag -v "$XFS_MNT/d.raw" | awk '/^ *[0-9]+:/ && !/shared/') ]]
        umount "$XFS_MNT" && XFS_MNT=
    fi
    # A qcow2 source over a backing file: its own clusters are offloaded,
    # what the backing file holds (and compressed clusters) is read.
    qemu-img create -q -f qcow2 -b s.qcow2 -F qcow2 "$TEST_DIR/top.qcow2"
    qemu-io -f qcow2 -c 'write -P 0x61 2M 1M' -c 'write -c -P 0x62 4M 64k' \
        "$TEST_DIR/top.qcow2" >/dev/null
    run --separate-stderr "$DISKIMG" convert -C --debug=block.trace=1 -O raw \
        "$TEST_DIR/top.qcow2" "$TEST_DIR/d.raw"
    assert_success
    [[ "$stderr" == *"(-C): 1048576 bytes copied by the kernel"* ]]
    qemu-img compare -f qcow2 -F raw "$TEST_DIR/top.qcow2" "$TEST_DIR/d.raw"
    rm "$TEST_DIR/d.raw"
    # A qcow2 target has metadata: -C copies through buffers, still exact.
    run --separate-stderr "$DISKIMG" convert -C --debug=block.trace=1 -f raw -O qcow2 \
        "$TEST_DIR/s.raw" "$TEST_DIR/d.qcow2"
    assert_success
    [[ "$stderr" == *"(-C): 0 bytes copied by the kernel"* ]]
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/s.raw" "$TEST_DIR/d.qcow2"
    qemu-img check "$TEST_DIR/d.qcow2"
    # qemu-img's refusals, in its words; nothing is created.
    for opts in "-c -O qcow2" "-S 4k" "-S 0" "--salvage"; do
        # shellcheck disable=SC2086
        run --separate-stderr "$DISKIMG" convert -C $opts "$TEST_DIR/s.raw" "$TEST_DIR/x.img"
        assert_failure 2
        # shellcheck disable=SC2086
        q=$(qemu-img convert -C $opts "$TEST_DIR/s.raw" "$TEST_DIR/x.img" 2>&1 || true)
        [[ "$stderr" == *"${q#qemu-img: }"* ]]
        [[ ! -e "$TEST_DIR/x.img" ]]
    done
}

@test "convert -r: qemu-img's size suffixes, and the copy keeps to the rate" {
    make_src "$TEST_DIR/s.raw"
    run --separate-stderr "$DISKIMG" convert -r 1x "$TEST_DIR/s.raw" "$TEST_DIR/d.raw"
    assert_failure 2
    [[ "$stderr" == *"invalid rate limit '1x'"* ]]
    # 1 MiB, then 2 MiB of data at 1 MiB/s: the second write waits a second.
    local t0 t1
    t0=$(date +%s%N)
    "$DISKIMG" convert -r 1M -f raw -O raw "$TEST_DIR/s.raw" "$TEST_DIR/d.raw"
    t1=$(date +%s%N)
    (((t1 - t0) >= 900000000))
    cmp "$TEST_DIR/s.raw" "$TEST_DIR/d.raw"
    # -r 0 is no limit, as in qemu-img.
    "$DISKIMG" convert -r 0 -O qcow2 "$TEST_DIR/s.raw" "$TEST_DIR/d.qcow2"
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/s.raw" "$TEST_DIR/d.qcow2"
}

@test "convert --salvage: unreadable sectors become zeroes with qemu-img's warnings" {
    require_tool nbdkit qemu-img
    make_pattern "$TEST_DIR/s.raw" $((4 * 1048576))
    # 1 KiB at 1 MiB and one sector at 3 MiB + 512 fail with EIO.
    cat >"$TEST_DIR/map" <<'MAP'
0x00000000     +
0x00000000  0x00100000  +
0x00100000  0x00000400  -
0x00100400  0x001FFE00  +
0x00300200  0x00000200  -
0x00300400  0x000FFC00  +
MAP
    start_nbdkit "$TEST_DIR/k.sock" --filter=ddrescue file "$TEST_DIR/s.raw" \
        ddrescue-mapfile="$TEST_DIR/map"
    local u="nbd+unix:///?socket=$TEST_DIR/k.sock"
    # Without --salvage: one error, exit 1, no target left behind.
    run --separate-stderr "$DISKIMG" convert -f raw -O raw "$u" "$TEST_DIR/d.raw"
    assert_failure 1
    [[ ! -e "$TEST_DIR/d.raw" ]]
    # With it: the warnings qemu-img prints (one per sector), exit 0, and
    # the same bytes.
    "$DISKIMG" convert -m 1 --salvage -f raw -O raw "$u" "$TEST_DIR/d.raw" 2>"$TEST_DIR/ours"
    qemu-img convert -m 1 --salvage -f raw -O raw "$u" "$TEST_DIR/q.raw" 2>"$TEST_DIR/theirs"
    diff <(sed 's/^diskimg: //' "$TEST_DIR/ours" | sort) \
        <(sed 's/^qemu-img: //' "$TEST_DIR/theirs" | sort)
    [[ $(wc -l <"$TEST_DIR/ours") -eq 3 ]]
    cmp "$TEST_DIR/d.raw" "$TEST_DIR/q.raw"
    [[ $(bytes_at "$TEST_DIR/d.raw" 1048576 4) == 00000000 ]]
    # -q keeps the warnings to itself; a qcow2 target is clean.
    run --separate-stderr "$DISKIMG" convert -q --salvage -f raw -O qcow2 "$u" "$TEST_DIR/d.qcow2"
    assert_success
    [[ -z "$stderr" ]]
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/q.raw" "$TEST_DIR/d.qcow2"
    qemu-img check "$TEST_DIR/d.qcow2"
    # A block status that fails: a warning per sector, read as data.
    # (qemu-img asks twice, counting then copying, and warns twice.)
    truncate -s 8k "$TEST_DIR/e.raw"
    echo hello | dd of="$TEST_DIR/e.raw" conv=notrunc status=none
    start_nbdkit "$TEST_DIR/e.sock" --filter=error file "$TEST_DIR/e.raw" \
        error-extents=EIO error-extents-rate=100%
    u="nbd+unix:///?socket=$TEST_DIR/e.sock"
    "$DISKIMG" convert --salvage -f raw -O raw "$u" "$TEST_DIR/e2.raw" 2>"$TEST_DIR/ours"
    qemu-img convert --salvage -f raw -O raw "$u" "$TEST_DIR/e3.raw" 2>"$TEST_DIR/theirs"
    diff <(sed 's/^diskimg: //' "$TEST_DIR/ours") <(sed 's/^qemu-img: //' "$TEST_DIR/theirs" | sort -u -t' ' -k9n)
    [[ $(wc -l <"$TEST_DIR/ours") -eq 16 ]]
    cmp "$TEST_DIR/e.raw" "$TEST_DIR/e2.raw"
    cmp "$TEST_DIR/e3.raw" "$TEST_DIR/e2.raw"
}

@test "convert -B: vmdk targets get a parent as qemu-img's; other formats refuse as it does" {
    make_src "$TEST_DIR/s.raw"
    qemu-img create -q -f vmdk "$TEST_DIR/base.vmdk" 8M
    qemu-io -f vmdk -c 'write -P 0x5a 2M 1M' "$TEST_DIR/base.vmdk" >/dev/null
    for sub in monolithicSparse streamOptimized; do
        local d="$TEST_DIR/d-$sub.vmdk"
        "$DISKIMG" convert -O vmdk -o subformat=$sub -B base.vmdk -F vmdk "$TEST_DIR/s.raw" "$d"
        run qemu-img info --output=json "$d"
        assert_output --partial '"backing-filename": "base.vmdk"'
        assert_output --partial '"backing-filename-format": "vmdk"'
        qemu-img check "$d"
        # The guest sees the source, the backing file's data included
        # where the source is zero.
        qemu-img compare -f raw -F vmdk "$TEST_DIR/s.raw" "$d"
        grep -aq 'parentFileNameHint="base.vmdk"' "$d"
    done
    for fmt in raw vpc vhdx vdi; do
        run --separate-stderr "$DISKIMG" convert -O $fmt -B "$TEST_DIR/base.vmdk" -F vmdk \
            "$TEST_DIR/s.raw" "$TEST_DIR/x.$fmt"
        assert_failure 1
        [[ "$stderr" == *"Backing file not supported for file format '$fmt'"* ]]
        [[ ! -e "$TEST_DIR/x.$fmt" ]]
    done
    run --separate-stderr "$DISKIMG" convert -O vmdk -B "$TEST_DIR/s.raw" -F raw \
        "$TEST_DIR/s.raw" "$TEST_DIR/x.vmdk"
    assert_failure 1
    [[ "$stderr" == *"backing_file must be a vmdk image"* ]]
}

@test "convert -U reads a source that a writer holds; the target is never shared" {
    require_tool qemu-nbd
    make_src "$TEST_DIR/s.raw"
    qemu-img convert -f raw -O qcow2 "$TEST_DIR/s.raw" "$TEST_DIR/s.qcow2"
    start_qemu_nbd "$TEST_DIR/q.sock" -f qcow2 "$TEST_DIR/s.qcow2"
    run "$DISKIMG" convert -O raw "$TEST_DIR/s.qcow2" "$TEST_DIR/d.raw"
    assert_failure 5
    "$DISKIMG" convert -U -O raw "$TEST_DIR/s.qcow2" "$TEST_DIR/d.raw"
    cmp "$TEST_DIR/s.raw" "$TEST_DIR/d.raw"
    # The locked image as a target: refused with -U too.
    run "$DISKIMG" convert -U -n -O qcow2 "$TEST_DIR/d.raw" "$TEST_DIR/s.qcow2"
    assert_failure 5
}
