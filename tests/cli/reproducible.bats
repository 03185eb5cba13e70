#!/usr/bin/env bats
# Reproducible output (SOURCE_DATE_EPOCH, --reproducible): the same
# source converted twice, with 1 and 16 workers and -W, gives the same
# bytes in every format and subformat; the epoch changes the time fields
# only; IDs follow the content; without the variable IDs stay random.
# Every output is checked by qemu-img (check, compare).

bats_require_minimum_version 1.5.0

load '../helpers'

setup() {
    setup_test
    require_tool qemu-img
    SRC=$TEST_DIR/src.raw
    mkdir "$TEST_DIR/a" "$TEST_DIR/b"
}

teardown() { cleanup_test; }

# make_source FILE [BYTE]: 12 MiB, mostly a hole, with incompressible and
# compressible data in several blocks of every format (1-2 MiB blocks,
# 64 KiB clusters and grains) and a last block that is not full.  BYTE
# changes one byte of the data, for a different content.
make_source() {
    "$PYTHON3" - "$1" "${2:-0}" <<'PY'
import random, sys
path, byte = sys.argv[1], int(sys.argv[2])
rnd = random.Random(14)
with open(path, "wb") as f:
    f.truncate(12 << 20)
    for off in (0, 3 << 20, (5 << 20) + 4096, 9 << 20):
        f.seek(off)
        f.write(rnd.randbytes(300000) + b"diskimg " * 40000)
    f.seek((12 << 20) - 3000)
    f.write(rnd.randbytes(3000))
    f.seek(100)
    f.write(bytes([byte]))
PY
}

# The targets: "FORMAT [creation options]", every subformat we write.
TARGETS=(
    "raw" "qcow2" "qcow2 -c" "vpc" "vpc subformat=fixed"
    "vmdk" "vmdk subformat=streamOptimized" "vmdk subformat=streamOptimized,layout=vmware"
    "vhdx block_size=1M"
    "vhdx subformat=fixed" "vdi" "vdi static=on"
)

# convert_to DIR FORMAT [OPTIONS] [convert flags...]: DIR/out.img.
convert_to() {
    local dir=$1 fmt=$2 opts=${3:-}
    shift 3 || shift $#
    local o=()
    if [[ $opts == -c ]]; then
        o=(-c)
    elif [[ -n $opts ]]; then
        o=(-o "$opts")
    fi
    "$DISKIMG" convert -q -O "$fmt" "${o[@]}" "$@" "$SRC" "$dir/out.img"
}

# ids FORMAT FILE: the ID bytes of the image, as hex.
ids() {
    case $1 in
    vpc) od -An -tx1 -j 68 -N 16 "$2" ;;
    vdi) od -An -tx1 -j 392 -N 32 "$2" ;;
    # both headers' FileWriteGuid and DataWriteGuid, then the page 83 data
    # (metadata region at 3 MiB with the default 1 MiB log)
    vhdx) od -An -tx1 -j $((65536 + 16)) -N 32 "$2" && od -An -tx1 -j $((131072 + 16)) -N 32 "$2" &&
        od -An -tx1 -j $(((3 << 20) + 65536 + 16)) -N 16 "$2" ;;
    vmdk) head -c 4096 "$2" | grep -a '^CID=' ;;
    esac | tr -d ' \n'
}

@test "every format and subformat: -m 1 and -m 16 -W give the same bytes, checked by qemu-img" {
    make_source "$SRC"
    local t fmt opts
    for t in "${TARGETS[@]}"; do
        read -r fmt opts <<<"$t"
        SOURCE_DATE_EPOCH=1700000000 convert_to "$TEST_DIR/a" "$fmt" "$opts" -m 1
        SOURCE_DATE_EPOCH=1700000000 convert_to "$TEST_DIR/b" "$fmt" "$opts" -m 16 -W
        if ! cmp "$TEST_DIR/a/out.img" "$TEST_DIR/b/out.img"; then
            echo "$t: the two conversions differ" >&2
            return 1
        fi
        case $fmt in qcow2 | vmdk | vhdx | vdi)
            run qemu-img check -f "$fmt" "$TEST_DIR/a/out.img"
            assert_success
            ;;
        esac
        run qemu-img compare -f raw -F "$fmt" "$SRC" "$TEST_DIR/a/out.img"
        assert_success
    done
    # qcow2 without reproducible output allocates in completion order
    # under -W; with it, -W is ignored and says so.
    run "$DISKIMG" convert -O qcow2 -W --reproducible "$SRC" "$TEST_DIR/a/w.qcow2"
    assert_success
    assert_output "diskimg: convert: -W ignored: reproducible output writes a qcow2 target in order (its layout follows the write order)"
    run "$DISKIMG" convert -O raw -W --reproducible "$SRC" "$TEST_DIR/a/w.raw"
    assert_success
    assert_output ""
}

@test "SOURCE_DATE_EPOCH sets the VHD time stamp and nothing else; --reproducible alone is 0" {
    make_source "$SRC"
    local e=1700000000
    SOURCE_DATE_EPOCH=$e convert_to "$TEST_DIR/a" vpc
    SOURCE_DATE_EPOCH=$((e + 86400)) convert_to "$TEST_DIR/b" vpc
    # seconds since 2000-01-01, big-endian, in both footer copies
    local end=$(($(stat -c %s "$TEST_DIR/a/out.img") - 512))
    [[ $(od -An -tu4 --endian=big -j 24 -N 4 "$TEST_DIR/a/out.img" | tr -d ' ') == $((e - 946684800)) ]]
    [[ $(od -An -tu4 --endian=big -j $((end + 24)) -N 4 "$TEST_DIR/a/out.img" | tr -d ' ') == $((e - 946684800)) ]]
    [[ $(od -An -tu4 --endian=big -j 24 -N 4 "$TEST_DIR/b/out.img" | tr -d ' ') == $((e + 86400 - 946684800)) ]]
    # only the time stamp (24-27) and the checksum (64-67) of each copy differ
    local diff
    diff=$(cmp -l "$TEST_DIR/a/out.img" "$TEST_DIR/b/out.img" | awk '{print $1 - 1}' | tr '\n' ' ')
    [[ $diff =~ ^(((24|25|26|27|64|65|66|67)|$((end + 24))|$((end + 25))|$((end + 26))|$((end + 27))|$((end + 64))|$((end + 65))|$((end + 66))|$((end + 67)))\ )+$ ]]
    # the other formats store no time: another epoch, the same bytes
    local fmt
    for fmt in vhdx vdi vmdk qcow2; do
        SOURCE_DATE_EPOCH=$e convert_to "$TEST_DIR/a" "$fmt"
        SOURCE_DATE_EPOCH=5 convert_to "$TEST_DIR/b" "$fmt"
        cmp "$TEST_DIR/a/out.img" "$TEST_DIR/b/out.img"
    done
    # --reproducible without the variable is epoch 0 (a VHD clamps times
    # before 2000 to its epoch, 0), as SOURCE_DATE_EPOCH=0 is
    SOURCE_DATE_EPOCH=0 convert_to "$TEST_DIR/a" vpc
    (
        unset SOURCE_DATE_EPOCH
        convert_to "$TEST_DIR/b" vpc "" --reproducible
    )
    cmp "$TEST_DIR/a/out.img" "$TEST_DIR/b/out.img"
    [[ $(od -An -tu4 --endian=big -j 24 -N 4 "$TEST_DIR/b/out.img" | tr -d ' ') == 0 ]]
}

@test "IDs: derived (version 8) and different for a different content; random without the variable" {
    make_source "$SRC" 0
    local fmt
    for fmt in vpc vdi vhdx vmdk; do
        SOURCE_DATE_EPOCH=1 convert_to "$TEST_DIR/a" "$fmt"
        cp "$TEST_DIR/a/out.img" "$TEST_DIR/a/$fmt"
    done
    # RFC 4122 shape, version 8: VHD stores big-endian, VDI and VHDX the
    # GUID order (Data3's high byte at +7)
    [[ $(od -An -tx1 -j $((68 + 6)) -N 1 "$TEST_DIR/a/vpc" | tr -d ' ') == 8? ]]
    [[ $(od -An -tx1 -j $((392 + 7)) -N 1 "$TEST_DIR/a/vdi" | tr -d ' ') == 8? ]]
    [[ $(od -An -tx1 -j $((408 + 7)) -N 1 "$TEST_DIR/a/vdi" | tr -d ' ') == 8? ]]
    [[ $(od -An -tx1 -j $((65536 + 16 + 7)) -N 1 "$TEST_DIR/a/vhdx" | tr -d ' ') == 8? ]]
    # two IDs of one file differ
    [[ $(od -An -tx1 -j 392 -N 16 "$TEST_DIR/a/vdi") != $(od -An -tx1 -j 408 -N 16 "$TEST_DIR/a/vdi") ]]
    # one byte of content changed: other IDs (and valid images)
    make_source "$SRC" 1
    for fmt in vpc vdi vhdx vmdk; do
        SOURCE_DATE_EPOCH=1 convert_to "$TEST_DIR/b" "$fmt"
        [[ -n $(ids "$fmt" "$TEST_DIR/a/$fmt") ]]
        if [[ $(ids "$fmt" "$TEST_DIR/a/$fmt") == $(ids "$fmt" "$TEST_DIR/b/out.img") ]]; then
            echo "$fmt: the same IDs for another content" >&2
            return 1
        fi
        run qemu-img compare -f raw -F "$fmt" "$SRC" "$TEST_DIR/b/out.img"
        assert_success
    done
    # no variable, no flag: random IDs as before, and nothing else differs
    # in a VDI (no time stamp)
    unset SOURCE_DATE_EPOCH
    for fmt in vpc vdi vhdx vmdk; do
        convert_to "$TEST_DIR/a" "$fmt"
        convert_to "$TEST_DIR/b" "$fmt"
        [[ $(ids "$fmt" "$TEST_DIR/a/out.img") != $(ids "$fmt" "$TEST_DIR/b/out.img") ]]
    done
    [[ $(cmp -l "$TEST_DIR/a/out.img" "$TEST_DIR/b/out.img" | wc -l) -gt 0 ]]
}

@test "the IDs follow the disk, not its container: raw, qcow2 and NBD sources give one file" {
    make_source "$SRC"
    qemu-img convert -q -f raw -O qcow2 "$SRC" "$TEST_DIR/src.qcow2"
    start_server -t -r -f raw "$SRC"
    local fmt
    for fmt in vpc vhdx vmdk; do
        SOURCE_DATE_EPOCH=7 convert_to "$TEST_DIR/a" "$fmt"
        SOURCE_DATE_EPOCH=7 "$DISKIMG" convert -q -O "$fmt" "$TEST_DIR/src.qcow2" "$TEST_DIR/b/out.img"
        cmp "$TEST_DIR/a/out.img" "$TEST_DIR/b/out.img"
        SOURCE_DATE_EPOCH=7 "$DISKIMG" convert -q -O "$fmt" "$URI" "$TEST_DIR/b/out.img"
        cmp "$TEST_DIR/a/out.img" "$TEST_DIR/b/out.img"
    done
}

@test "create --reproducible: IDs from format, options and size" {
    local fmt
    for fmt in vpc vdi vhdx vmdk qcow2 raw; do
        "$DISKIMG" create -q --reproducible -f "$fmt" "$TEST_DIR/a/c.img" 64M
        SOURCE_DATE_EPOCH=0 "$DISKIMG" create -q -f "$fmt" "$TEST_DIR/b/c.img" 64M
        cmp "$TEST_DIR/a/c.img" "$TEST_DIR/b/c.img"
        case $fmt in qcow2 | vmdk | vhdx | vdi)
            run qemu-img check -f "$fmt" "$TEST_DIR/a/c.img"
            assert_success
            ;;
        esac
        case $fmt in vpc | vdi | vhdx | vmdk)
            "$DISKIMG" create -q --reproducible -f "$fmt" "$TEST_DIR/b/c.img" 128M
            [[ $(ids "$fmt" "$TEST_DIR/a/c.img") != $(ids "$fmt" "$TEST_DIR/b/c.img") ]]
            ;;
        esac
    done
    # a time past the VHD range (2136) clamps to its largest
    SOURCE_DATE_EPOCH=253402300799 "$DISKIMG" create -q -f vpc "$TEST_DIR/b/c.img" 1M
    [[ $(od -An -tu4 --endian=big -j 24 -N 4 "$TEST_DIR/b/c.img" | tr -d ' ') == 4294967295 ]]
    "$DISKIMG" create -q --reproducible -f vpc -o subformat=fixed "$TEST_DIR/b/c.img" 64M
    [[ $(od -An -tx1 -j $((64 * 1048576 + 68)) -N 16 "$TEST_DIR/b/c.img") != $(ids vpc "$TEST_DIR/a/c.img") ]]
}

@test "a malformed SOURCE_DATE_EPOCH is one line naming it, exit 2, no file" {
    make_source "$SRC"
    local v
    for v in "" "12abc" "-1" "1e9" "253402300800"; do
        SOURCE_DATE_EPOCH=$v run --separate-stderr "$DISKIMG" convert -O vpc "$SRC" "$TEST_DIR/a/x.vpc"
        [[ $status == 2 ]]
        [[ $stderr == "diskimg: SOURCE_DATE_EPOCH='$v' is not a whole number of seconds since 1970 (0 to 253402300799)" ]]
        [[ ! -e $TEST_DIR/a/x.vpc ]]
        SOURCE_DATE_EPOCH=$v run --separate-stderr "$DISKIMG" create -f vdi "$TEST_DIR/a/x.vdi" 1M
        [[ $status == 2 ]]
        [[ $(wc -l <<<"$stderr") == 1 && $stderr == *SOURCE_DATE_EPOCH* ]]
        [[ ! -e $TEST_DIR/a/x.vdi ]]
    done
    # a malformed variable is an error even with --reproducible
    SOURCE_DATE_EPOCH=x run "$DISKIMG" convert --reproducible "$SRC" "$TEST_DIR/a/x.raw"
    [[ $status == 2 && ! -e $TEST_DIR/a/x.raw ]]
}
