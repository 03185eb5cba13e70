#!/usr/bin/env bats
# convert --target and check --target (cmd/target.c, diskimg-targets(7)):
# every target's output read back by qemu-img (format, subformat bytes,
# virtual size, check, compare: the padding reads as zeroes) and accepted
# by the lint; images qemu-img makes with its usual recipes judged as the
# rules say; bad requests refused with one line and no output file.

load '../helpers'
load '../formats-lib'

bats_require_minimum_version 1.5.0

setup() {
    setup_test
    require_tool qemu-img jq
    cd "$TEST_DIR"
}

teardown() { cleanup_test; }

MiB=1048576
GiB=$((1024 * MiB))
# Not a multiple of 4 KiB: every target but vsphere rounds it.
SIZE=$((3 * MiB + 4608))

# out_ok TARGET FMT OUT SRC SRCFMT WANT_SIZE: qemu-img reads OUT as FMT of
# WANT_SIZE bytes, equal to SRC (the padding reads as zeroes), checks it
# clean where it checks FMT; the lint accepts it.
out_ok() {
    local t=$1 fmt=$2 out=$3 src=$4 sfmt=$5 want=$6
    run qemu-img info -f "$fmt" --output=json "$out"
    assert_success
    [[ $(jq -r .format <<<"$output") == "$fmt" ]]
    [[ $(jq -r '."virtual-size"' <<<"$output") == "$want" ]] || { echo "$t: $output"; false; }
    run qemu-img compare -f "$sfmt" -F "$fmt" "$src" "$out"
    assert_success
    if qemu_format_has_check "$fmt"; then
        run qemu-img check -f "$fmt" "$out"
        assert_success
    fi
    run "$DISKIMG" check --target="$t" "$out"
    assert_success
    assert_line "$out: acceptable for $t"
}

# be32 FILE OFFSET / le32 FILE OFFSET: a field of the file, in decimal.
be32() { od -An -tx1 -j "$2" -N4 "$1" | tr -d ' \n' | { read -r h; echo $((16#$h)); }; }
le32() { od -An -tu4 -j "$2" -N4 "$1" | tr -d ' '; }

@test "targets: every target's output reads back in qemu-img and passes the lint" {
    make_pattern_raw src.raw "$SIZE"
    qemu-img convert -f raw -O qcow2 src.raw src.qcow2
    for src in src.raw src.qcow2; do
        sfmt=${src#src.}
        rm -f out.*
        # azure: a fixed VHD, a whole MiB, at least 20 MiB
        run --separate-stderr "$DISKIMG" convert --target=azure "$src" out.vhd
        assert_success
        [[ $stderr == "azure: virtual size rounded up from $SIZE to $((20 * MiB)) bytes"* ]]
        out_ok azure vpc out.vhd "$src" "$sfmt" $((20 * MiB))
        local len
        len=$(stat -c %s out.vhd)
        ((len == 20 * MiB + 512))
        [[ $(tail -c 512 out.vhd | head -c 8) == conectix ]]
        [[ $(be32 out.vhd $((len - 512 + 60))) == 2 ]] # disk type: fixed
        [[ $(tail -c 512 out.vhd | dd bs=1 skip=28 count=4 2>/dev/null) == qem2 ]]
        [[ $(tail -c 512 out.vhd | dd bs=1 skip=36 count=4 2>/dev/null) == Wi2k ]]
        # aws: a streamOptimized VMDK of a whole GiB
        run --separate-stderr "$DISKIMG" convert --target=aws "$src" out.vmdk
        assert_success
        [[ $stderr == "aws: virtual size rounded up from $SIZE to $GiB bytes"* ]]
        out_ok aws vmdk out.vmdk "$src" "$sfmt" "$GiB"
        [[ $(qemu-img info --output=json out.vmdk | jq -r '."format-specific".data."create-type"') == streamOptimized ]]
        # vsphere: streamOptimized, version 3, lsilogic, no rounding
        run --separate-stderr "$DISKIMG" convert --target=vsphere "$src" out-vs.vmdk
        assert_success
        [[ -z $stderr ]]
        out_ok vsphere vmdk out-vs.vmdk "$src" "$sfmt" "$SIZE"
        # VMware's layout: flags 0x30001 (no redundant tables), no RGD,
        # the grain directory at sector 21; its descriptor keys
        [[ $(le32 out-vs.vmdk 4) == 3 && $(le32 out-vs.vmdk 8) == $((0x30001)) ]]
        [[ $(le32 out-vs.vmdk 48) == 0 && $(le32 out-vs.vmdk 56) == 21 ]]
        dd if=out-vs.vmdk bs=512 skip=1 count=20 2>/dev/null | tr -d '\0' >desc.txt
        grep -qx 'ddb.adapterType = "lsilogic"' desc.txt
        grep -qx 'ddb.geometry.heads = "255"' desc.txt
        grep -qx 'encoding="UTF-8"' desc.txt
        local cid
        cid=$(sed -n 's/^CID=//p' desc.txt)
        grep -qE "^ddb.longContentID = \"[0-9a-f]{24}$cid\"$" desc.txt
        # hyperv: dynamic VHDX, 1 MiB blocks, 4 KiB physical sectors
        run --separate-stderr "$DISKIMG" convert --target=hyperv "$src" out.vhdx
        assert_success
        [[ $stderr == "hyperv: virtual size rounded up from $SIZE to $((SIZE + 3584)) bytes"* ]]
        out_ok hyperv vhdx out.vhdx "$src" "$sfmt" $((SIZE + 3584))
        [[ $(qemu-img info --output=json out.vhdx | jq '."cluster-size"') == "$MiB" ]]
        # the metadata region at 3 MiB: logical then physical sector size
        [[ $(le32 out.vhdx $((3 * MiB + 65536 + 32))) == 512 ]]
        [[ $(le32 out.vhdx $((3 * MiB + 65536 + 36))) == 4096 ]]
    done
    # aws also takes -O vpc (dynamic, force_size: the exact GiB) and -O raw
    "$DISKIMG" convert -q --target=aws -O vpc src.raw aws.vhd
    out_ok aws vpc aws.vhd src.raw raw "$GiB"
    [[ $(head -c 8 aws.vhd) == conectix ]] # dynamic: the footer copy at 0
    "$DISKIMG" convert -q --target=aws -O raw src.qcow2 aws.raw
    out_ok aws raw aws.raw src.qcow2 qcow2 "$GiB"
    # -o that agrees with the target, or sets what it leaves free
    "$DISKIMG" convert -q --target=azure -o subformat=fixed,force_size=on src.raw ok.vhd
    "$DISKIMG" convert -q --target=hyperv -o block_size=1048576,log_size=2M src.raw ok.vhdx
    "$DISKIMG" convert -q --target=vsphere -o adapter_type=buslogic src.raw ok.vmdk
    run "$DISKIMG" check --target=vsphere ok.vmdk
    assert_success
    assert_line --partial 'vsphere: note: adapter-type is "buslogic", not "lsilogic"'
}

# require_pymod MODULE: the Python module (a Debian python3-* package).
require_pymod() {
    "$PYTHON3" -c "import $1" 2>/dev/null && return 0
    if strict_mode; then
        echo "python module $1 is missing (strict mode: CI must install it)" >&2
        return 1
    fi
    skip "python module $1 is not installed"
}

# libyal_reads MODULE IMAGE SRC: libvmdk or libvhdi reads SRC's bytes from
# IMAGE, and zeroes past them.
libyal_reads() {
    "$PYTHON3" - "$@" <<'PY'
import sys
mod, img, src = sys.argv[1:4]
if mod == "pyvmdk":
    import pyvmdk
    h = pyvmdk.handle()
    h.open(img)
    h.open_extent_data_files()
else:
    import pyvhdi
    h = pyvhdi.file()
    h.open(img)
want = open(src, "rb").read()
size = h.get_media_size()
assert h.read_buffer_at_offset(len(want), 0) == want, "data differs"
tail = size - len(want)
while tail:
    n = min(tail, 1 << 24)
    assert h.read_buffer_at_offset(n, size - tail) == bytes(n), "padding is not zero"
    tail -= n
PY
}

@test "targets: the outputs read back in libvmdk and libvhdi, readers not qemu's" {
    require_tool vmdkinfo vhdiinfo
    require_pymod pyvmdk
    require_pymod pyvhdi
    make_pattern_raw src.raw "$SIZE"
    "$DISKIMG" convert -q --target=vsphere src.raw vs.vmdk
    "$DISKIMG" convert -q --target=aws src.raw aws.vmdk
    for f in vs.vmdk aws.vmdk; do
        run vmdkinfo "$f"
        assert_success
        assert_output --partial "Stream optimized"
        libyal_reads pyvmdk "$f" src.raw
    done
    "$DISKIMG" convert -q --target=azure src.raw az.vhd
    "$DISKIMG" convert -q --target=aws -O vpc src.raw aws.vhd
    "$DISKIMG" convert -q --target=hyperv src.raw hv.vhdx
    local f want
    for f in az.vhd:Fixed:$((20 * MiB)) aws.vhd:Dynamic:$GiB hv.vhdx:Dynamic:$((SIZE + 3584)); do
        IFS=: read -r f kind want <<<"$f"
        run vhdiinfo "$f"
        assert_success
        assert_output --regexp "Disk type[[:space:]]+: $kind"
        assert_output --partial "($want bytes)"
        libyal_reads pyvhdi "$f" src.raw
    done
}

@test "targets: images from qemu-img's usual recipes lint as the rules say" {
    # azure: qemu-img's default VHD is dynamic and CHS-rounded
    qemu-img create -q -f vpc chs.vhd 10M
    run "$DISKIMG" check --target=azure chs.vhd
    [[ $status -eq 4 ]]
    assert_line --partial 'azure: subformat is "dynamic", not "fixed"'
    assert_line 'azure: virtual size 10514432 is not a whole number of MiB: convert with --target=azure'
    assert_line --partial 'azure: virtual size 10514432 is below 20 MiB'
    # fixed, CHS-rounded: still not a whole MiB (nor is the file)
    qemu-img create -q -f vpc -o subformat=fixed fixed.vhd 24M
    run "$DISKIMG" check --target=azure fixed.vhd
    [[ $status -eq 4 ]]
    assert_line --partial "azure: virtual size 25171968 is not a whole number of MiB"
    assert_line --partial "azure: file length 25172480 is not a whole number of MiB after the 512-byte footer"
    # the recipe Azure's docs give: fixed, force_size, a whole MiB
    qemu-img create -q -f vpc -o subformat=fixed,force_size=on good.vhd 24M
    run "$DISKIMG" check --target=azure good.vhd
    assert_success
    assert_output "good.vhd: acceptable for azure"
    # a creator host other than Wi2k (FreeBSD's mkimg wrote FBSD), checksum
    # made right: the footer's bytes, as the driver reports them
    cp good.vhd fbsd.vhd
    "$PYTHON3" - fbsd.vhd <<'PY'
import struct, sys
f = open(sys.argv[1], "r+b")
f.seek(-512, 2)
b = bytearray(f.read(512))
b[36:40] = b"FB\x01D"
b[64:68] = bytes(4)
b[64:68] = struct.pack(">I", ~sum(b) & 0xFFFFFFFF)
f.seek(-512, 2)
f.write(b)
PY
    run "$DISKIMG" check --target=azure fbsd.vhd
    [[ $status -eq 4 ]]
    assert_output "azure: creator-host is \"FB?D\", not \"Wi2k\" (Azure's tools expect a Windows creator host): convert with --target=azure"
    # a broken footer checksum: the driver refuses the file, so does the lint
    cp good.vhd bad.vhd
    printf '\x01' | dd of=bad.vhd bs=1 seek=$((24 * MiB + 100)) conv=notrunc 2>/dev/null
    run "$DISKIMG" check --target=azure -f vpc bad.vhd
    [[ $status -eq 4 ]]
    assert_output --partial "checksum"
    # aws: a differencing VHD (made by hand: qemu-img cannot) is refused
    qemu-img create -q -f vpc base.vhd 2M
    "$PYTHON3" "$BATS_TEST_DIRNAME/vpc_craft.py" diff base.vhd child.vhd w2ru
    run "$DISKIMG" check --target=aws child.vhd
    [[ $status -eq 4 ]]
    assert_line --partial 'aws: subformat is "differencing" (VM Import takes fixed and dynamic VHDs'
    # hyperv: qemu-img's default VHDX has 8 MiB blocks and 512-byte
    # physical sectors; even with block_size=1M it lacks the 4 KiB ones
    qemu-img create -q -f vhdx d.vhdx 64M
    run "$DISKIMG" check --target=hyperv d.vhdx
    [[ $status -eq 4 ]]
    assert_line 'hyperv: block-size is 8388608, not 1048576 (Hyper-V'"'"'s best practice for Linux guests is 1 MiB blocks): convert with --target=hyperv'
    assert_line --partial "hyperv: physical-sector-size is 512, not 4096"
    # vsphere, aws: qemu-img's streamOptimized has version 3, compressed
    # grains with markers, and (the zeroes of its last grain's unused
    # space) an end-of-stream marker: accepted, with a note on its IDE
    # adapter.  Its empty stream has no end marker: refused.
    make_pattern_raw src.raw "$SIZE"
    qemu-img convert -O vmdk -o subformat=streamOptimized src.raw qs.vmdk
    run "$DISKIMG" check --target=vsphere qs.vmdk
    assert_success
    assert_line --partial 'vsphere: note: adapter-type is "ide"'
    assert_line "qs.vmdk: acceptable for vsphere"
    run "$DISKIMG" check --target=aws qs.vmdk
    assert_success
    assert_line --partial "aws: note: virtual size $SIZE is not a whole number of GiB"
    qemu-img create -q -f vmdk -o subformat=streamOptimized empty.vmdk 1M
    run "$DISKIMG" check --target=vsphere empty.vmdk
    [[ $status -eq 4 ]]
    assert_line --partial "vsphere: end-of-stream is false"
    # monolithicSparse is no stream; qcow2 is no VHD
    qemu-img create -q -f vmdk ms.vmdk 1M
    run "$DISKIMG" check --target=aws ms.vmdk
    [[ $status -eq 4 ]]
    assert_line --partial 'aws: create-type is "monolithicSparse", not "streamOptimized"'
    qemu-img create -q -f qcow2 q.qcow2 1M
    run "$DISKIMG" check --target=azure q.qcow2
    [[ $status -eq 4 ]]
    assert_output "azure: the image is qcow2, not a fixed VHD: convert with --target=azure"
    # --output=json: the same verdict as one object
    run "$DISKIMG" check --target=azure --output=json chs.vhd
    [[ $status -eq 4 ]]
    [[ $(jq -c '[.target, .acceptable, (.violations|length), .violations[1].severity, .violations[1].problem]' <<<"$output") == \
        '["azure",false,4,"must","virtual size 10514432 is not a whole number of MiB"]' ]]
    run "$DISKIMG" check --target=vsphere --output=json qs.vmdk
    assert_success
    [[ $(jq -c '[.acceptable, .violations[0].severity]' <<<"$output") == '[true,"note"]' ]]
    # -q: the status alone
    run "$DISKIMG" check -q --target=azure q.qcow2
    [[ $status -eq 4 && -z $output ]]
}

@test "targets: bad requests get one line, exit 2 (1 for a source too large), no output" {
    truncate -s 3M src.raw
    local args
    while IFS='|' read -r args want; do
        # shellcheck disable=SC2086
        run --separate-stderr "$DISKIMG" convert $args src.raw out.img
        [[ $status -eq 2 ]] || { echo "$args: $status $stderr"; false; }
        [[ $stderr == *"$want"* ]] || { echo "$args: $stderr"; false; }
        [[ ! -e out.img ]]
    done <<'EOF'
--target=gcp|unknown target 'gcp' (targets: azure, aws, vsphere, hyperv
--target=azure -O vmdk|--target=azure: -O vmdk is not accepted: azure takes vpc
--target=aws -O qcow2|-O qcow2 is not accepted: aws takes vmdk, vpc or raw
--target=azure -o subformat=dynamic|-o subformat=dynamic contradicts the target: subformat=fixed (Azure takes fixed VHDs only)
--target=azure -o force_size=off|-o force_size=off contradicts the target: force_size=on
--target=hyperv -o block_size=32M|-o block_size=32M contradicts the target: block_size=1M
--target=vsphere -o subformat=monolithicSparse|contradicts the target: subformat=streamOptimized
--target=vsphere -c|-c is implied: a streamOptimized VMDK is always compressed
--target=azure -c|-c is not possible: a fixed VHD cannot be compressed
--target=aws -O vpc -o force_size=no|force_size=on
--target=aws -o layout=qemu|-o layout=qemu contradicts the target: layout=vmware
--target=hyperv -o physical_sector_size=512|physical_sector_size=4096
EOF
    run --separate-stderr "$DISKIMG" convert --target=azure -n src.raw src2.raw
    [[ $status -eq 2 && $stderr == *"cannot write an existing target"* ]]
    run "$DISKIMG" check --target=gcp src.raw
    [[ $status -eq 1 ]]
    assert_line --partial "unknown target 'gcp'"
    # a sparse source larger than a VHD holds: one line naming the limit
    truncate -s 3T big.raw
    run --separate-stderr "$DISKIMG" convert --target=azure big.raw out.vhd
    [[ $status -eq 1 ]]
    [[ $stderr == "diskimg: azure: the source's virtual size 3298534883328 is larger than azure takes: at most 2190433320960 bytes (2040 GiB"* ]]
    [[ $(wc -l <<<"$stderr") == 1 ]]
    [[ ! -e out.vhd ]]
    # layout=vmware is for streams only
    run "$DISKIMG" create -f vmdk -o layout=vmware x.vmdk 1M
    [[ $status -eq 1 ]]
    assert_output --partial "layout=vmware is for subformat=streamOptimized only"
    # aws -O vpc may be fixed
    "$DISKIMG" convert -q --target=aws -O vpc -o subformat=fixed src.raw f.vhd
    [[ $(stat -c %s f.vhd) == $((GiB + 512)) ]]
    # -o help lists the options of the target's format
    run "$DISKIMG" convert --target=hyperv -o help
    assert_success
    assert_output --partial "physical_sector_size="
    # --help names the targets
    run "$DISKIMG" convert --help
    assert_output --partial "--target=NAME"
    run "$DISKIMG" check --help
    assert_output --partial "azure, aws, vsphere, hyperv"
}

# nbdsh runs "python3 -m nbd": the python with libnbd's module first.
nbdsh() {
    PATH="$(dirname "$PYTHON3"):$PATH" command nbdsh "$@"
}

@test "targets: a stream being written is never taken for a whole one" {
    require_nbd_python
    truncate -s 4M zero.raw
    "$DISKIMG" convert -q --target=vsphere zero.raw s.vmdk
    [[ $(head -c 4 s.vmdk) == KDMV ]]
    # a grain written, the server killed before any flush: the magic says
    # "being written", and no reader takes the file for a VMDK
    start_server -t -f vmdk s.vmdk
    nbdsh_run 'h.pwrite(b"\x07" * 65536, 1048576)'
    [[ $(head -c 4 s.vmdk) == kdmv ]]
    stop_server KILL
    [[ $(qemu-img info --output=json s.vmdk | jq -r .format) == raw ]]
    run "$DISKIMG" check --target=vsphere s.vmdk
    [[ $status -eq 4 ]]
    assert_output --partial "the image is raw, not a streamOptimized VMDK"
    # written and flushed: whole again, with the grain, footer and end marker
    "$DISKIMG" convert -q --target=vsphere zero.raw s.vmdk
    start_server -t -f vmdk s.vmdk
    nbdsh_run 'h.pwrite(b"\x07" * 65536, 1048576); h.flush()'
    stop_server
    [[ $(head -c 4 s.vmdk) == KDMV ]]
    "$PYTHON3" -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(1 << 20); f.write(b"\x07" * 65536)' zero.raw
    run qemu-img compare zero.raw s.vmdk
    assert_success
    run "$DISKIMG" check --target=vsphere s.vmdk
    assert_success
}
