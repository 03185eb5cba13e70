#!/usr/bin/env bats
# Format probing: images in a format diskimg cannot read (made by
# qemu-img) are refused by name by every subcommand that opens images,
# never read as raw; -f raw still reads them as bytes.

load '../helpers'

FOREIGN=(qed qcow parallels luks)

setup() {
    setup_test
    require_tool qemu-img
}

teardown() { cleanup_test; }

# make_foreign FMT: $TEST_DIR/x.FMT, 1 MiB, made by qemu-img.
make_foreign() {
    local f=$TEST_DIR/x.$1
    if [[ $1 == luks ]]; then
        # qemu-img times its key derivation, and on a busy machine it may
        # fail to ("Unable to get accurate CPU usage"): try again
        local try
        for try in 1 2 3 4; do
            qemu-img create -q -f luks --object secret,id=s0,data=pw \
                -o key-secret=s0,iter-time=10 "$f" 1M && return 0
        done
        return 1
    else
        qemu-img create -q -f "$1" "$f" 1M
    fi
}

@test "info refuses every foreign format by name, exit 1, one line" {
    local fmt
    for fmt in "${FOREIGN[@]}"; do
        make_foreign "$fmt"
        run "$DISKIMG" info "$TEST_DIR/x.$fmt"
        assert_failure 1
        assert_output "diskimg: $TEST_DIR/x.$fmt: $fmt images are not supported (-f raw reads the file as raw bytes)"
    done
}

@test "convert, map, compare, check and resize refuse them too, and write nothing" {
    local fmt
    for fmt in "${FOREIGN[@]}"; do
        make_foreign "$fmt"
        local x=$TEST_DIR/x.$fmt before
        before=$(md5sum <"$x")
        run "$DISKIMG" convert -O raw "$x" "$TEST_DIR/out.raw"
        assert_failure 1
        assert_output --partial "$fmt images are not supported"
        [[ ! -e $TEST_DIR/out.raw ]]
        run "$DISKIMG" map "$x"
        assert_failure 1
        assert_output --partial "$fmt images are not supported"
        run "$DISKIMG" compare "$x" "$x"
        assert_failure
        assert_output --partial "$fmt images are not supported"
        run "$DISKIMG" check "$x"
        assert_failure
        assert_output --partial "$fmt images are not supported"
        run "$DISKIMG" resize "$x" 2M
        assert_failure 1
        assert_output --partial "$fmt images are not supported"
        [[ $(md5sum <"$x") == "$before" ]]
    done
}

@test "serve refuses them at start-up" {
    local fmt
    for fmt in "${FOREIGN[@]}"; do
        make_foreign "$fmt"
        run timeout 20 "$DISKIMG" serve -k "$SOCK" "$TEST_DIR/x.$fmt"
        assert_failure 1
        assert_output --partial "$fmt images are not supported"
        [[ ! -S $SOCK ]]
    done
}

@test "-f raw reads a foreign image as its bytes" {
    local fmt
    for fmt in "${FOREIGN[@]}"; do
        make_foreign "$fmt"
        local x=$TEST_DIR/x.$fmt
        run "$DISKIMG" info -f raw "$x"
        assert_success
        assert_line "file format: raw"
        "$DISKIMG" convert -f raw -O raw "$x" "$TEST_DIR/out.raw"
        # (raw images are whole sectors: qcow's 560 bytes become 1024)
        cmp -n "$(stat -c %s "$x")" "$x" "$TEST_DIR/out.raw"
        rm "$TEST_DIR/out.raw"
    done
}

@test "-f with a foreign format name says it is not supported" {
    make_foreign qed
    run "$DISKIMG" info -f qed "$TEST_DIR/x.qed"
    assert_failure 1
    assert_output --partial "qed images are not supported"
    run "$DISKIMG" create -f qed "$TEST_DIR/new.qed" 1M
    assert_failure
    assert_output --regexp '^diskimg: creating qed images is not supported \(raw, qcow2(, [a-z]+)*\)$'
    [[ ! -e $TEST_DIR/new.qed ]]
}

@test "a VMDK text descriptor is recognised, as qemu-img does" {
    qemu-img create -q -f vmdk -o subformat=monolithicFlat "$TEST_DIR/d.vmdk" 1M
    run qemu-img info "$TEST_DIR/d.vmdk"
    assert_output --partial "file format: vmdk"
    run "$DISKIMG" info "$TEST_DIR/d.vmdk"
    assert_success
    assert_line "file format: vmdk"
}

@test "a .dmg name probes as dmg (qemu's rule), a magic outranks it" {
    head -c 1M /dev/urandom >"$TEST_DIR/disk.dmg"
    run "$DISKIMG" info "$TEST_DIR/disk.dmg"
    assert_failure 1
    assert_output --partial "dmg images are not supported"
    qemu-img create -q -f qcow2 "$TEST_DIR/q.dmg" 1M
    run "$DISKIMG" info "$TEST_DIR/q.dmg"
    assert_success
    assert_line "file format: qcow2"
}

@test "a file that is both qcow2 and vdi is refused: name the format" {
    qemu-img create -q -f qcow2 "$TEST_DIR/both.img" 1M
    printf '\x7f\x10\xda\xbe' | dd of="$TEST_DIR/both.img" bs=1 seek=64 conv=notrunc status=none
    run "$DISKIMG" info "$TEST_DIR/both.img"
    assert_failure 1
    assert_output --partial "look like both"
    assert_output --partial "name the format with -f"
}

@test "a fixed VHD probes as vpc by its footer (qemu-img: raw); an empty file as raw" {
    qemu-img create -q -f vpc -o subformat=fixed "$TEST_DIR/f.vhd" 1M
    run qemu-img info "$TEST_DIR/f.vhd"
    assert_output --partial "file format: raw"
    run "$DISKIMG" info "$TEST_DIR/f.vhd"
    assert_success
    assert_line "file format: vpc"
    : >"$TEST_DIR/empty"
    run "$DISKIMG" info "$TEST_DIR/empty"
    assert_success
    assert_line "file format: raw"
}
