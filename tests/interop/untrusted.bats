#!/usr/bin/env bats
# Untrusted images must not reach host files.  By default a backing file
# is followed only when it is a regular file or a block device (a FIFO,
# a character device, a directory are refused, never opened for reading,
# and nothing hangs); with --untrusted an image is opened alone and
# anything it names is an error naming that reference.  Names from an
# image are printed escaped.  Images are made by qemu-img.

load '../helpers'
load 'lib'

setup() {
    setup_test
    require_tool qemu-img
    cd "$TEST_DIR"
    make_pattern base.raw 1048576
}

teardown() {
    cd /
    cleanup_test
}

# overlay NAME BACKING: a qcow2 overlay whose header names BACKING (as
# given, not opened by qemu-img).
overlay() {
    qemu-img create -q -f qcow2 -u -b "$2" -F raw "$1" 1M
}

# run_bounded CMD...: a hang is a failure (exit 124), not a stuck suite.
run_bounded() {
    run timeout -k 5 20 "$@"
    [[ $status -ne 124 && $status -ne 137 ]] || fail "'$*' hung"
}

@test "backing files that are not regular files or block devices are refused, without hanging" {
    mkfifo fifo
    mkdir dir
    ln -s fifo link-to-fifo
    local b cmd
    for b in fifo /dev/zero dir link-to-fifo; do
        overlay t.qcow2 "$b"
        for cmd in "map t.qcow2" "convert -O raw t.qcow2 out.raw" "compare t.qcow2 base.raw" \
            "bench -c 1 t.qcow2"; do
            # shellcheck disable=SC2086
            run_bounded "$DISKIMG" $cmd
            assert_failure
            assert_output --partial "$b is not a regular file or a block device"
            [[ ${#lines[@]} -eq 1 ]] || fail "$cmd: $output"
        done
        # info shows the top image, then refuses to go down the chain.
        run_bounded "$DISKIMG" info --backing-chain t.qcow2
        assert_failure 1
        assert_output --partial "$b is not a regular file or a block device"
        run_bounded "$DISKIMG" serve -k "$SOCK" t.qcow2
        assert_failure 1
        assert_output --partial "$b is not a regular file or a block device"
    done
    [[ ! -e out.raw ]]
}

@test "regular backing files are followed by default, by absolute and by .. paths" {
    mkdir sub
    overlay sub/rel.qcow2 ../base.raw
    overlay abs.qcow2 "$TEST_DIR/base.raw"
    for img in sub/rel.qcow2 abs.qcow2; do
        "$DISKIMG" convert -O raw "$img" out.raw
        cmp base.raw out.raw
        rm out.raw
    done
}

@test "--untrusted refuses any backing file, naming it, in every subcommand that reads data" {
    mkfifo fifo
    mkdir sub
    local b cmd
    for b in fifo /dev/zero "$TEST_DIR/base.raw" ../base.raw base.raw; do
        overlay sub/t.qcow2 "$b"
        for cmd in "map sub/t.qcow2" "convert -O raw sub/t.qcow2 out.raw" \
            "compare sub/t.qcow2 base.raw" "bench -c 1 sub/t.qcow2" "resize sub/t.qcow2 2M"; do
            # shellcheck disable=SC2086
            run_bounded "$DISKIMG" ${cmd%% *} --untrusted ${cmd#* }
            assert_failure
            assert_output "diskimg: sub/t.qcow2: qcow2: refusing to open backing file '$b' (--untrusted opens the image alone)"
        done
        run_bounded "$DISKIMG" serve --untrusted -k "$SOCK" sub/t.qcow2
        assert_failure 1
        assert_output --partial "refusing to open backing file '$b'"
        [[ ! -e out.raw ]]
    done
    # resize did not touch the image.
    run qemu-img info sub/t.qcow2
    assert_output --partial "virtual size: 1 MiB"
}

@test "--untrusted info and check read the image alone and show the reference" {
    mkfifo fifo
    overlay t.qcow2 fifo
    run_bounded "$DISKIMG" info --untrusted t.qcow2
    assert_success
    assert_line "backing file: fifo"
    run_bounded "$DISKIMG" check --untrusted t.qcow2
    assert_success
    run "$DISKIMG" info --untrusted --backing-chain t.qcow2
    assert_failure 2
    assert_output --partial "--backing-chain opens the backing files, which --untrusted does not"
}

@test "info never opens a backing file without --backing-chain" {
    # Opening the FIFO for reading would hang, and a missing file fails.
    mkfifo fifo
    overlay t.qcow2 fifo
    run_bounded "$DISKIMG" info t.qcow2
    assert_success
    assert_line "backing file: fifo"
    overlay m.qcow2 /nonexistent/base.raw
    run_bounded "$DISKIMG" info --output=json m.qcow2
    assert_success
    assert_output --partial '"backing-filename": "/nonexistent/base.raw"'
}

@test "--untrusted inspects and converts a self-contained download" {
    qemu-img convert -f raw -O qcow2 base.raw dl.qcow2
    run "$DISKIMG" info --untrusted dl.qcow2
    assert_success
    assert_line "file format: qcow2"
    "$DISKIMG" convert --untrusted -O raw dl.qcow2 out.raw
    cmp base.raw out.raw
    "$DISKIMG" convert --untrusted -f raw -O qcow2 base.raw out.qcow2
    "$DISKIMG" compare --untrusted out.qcow2 base.raw
    # A guessed raw image is fine when nothing else claims its bytes.
    "$DISKIMG" map --untrusted base.raw
    # An existing target is opened alone too; a -B target is refused.
    overlay has-backing.qcow2 base.raw
    run "$DISKIMG" convert --untrusted -n -O qcow2 dl.qcow2 has-backing.qcow2
    assert_failure 1
    assert_output --partial "refusing to open backing file 'base.raw'"
    run "$DISKIMG" convert --untrusted -O qcow2 -B base.raw -F raw dl.qcow2 new.qcow2
    assert_failure 2
}

@test "--untrusted: an ambiguous probe is an error, a foreign format is refused" {
    qemu-img create -q -f qcow2 q.dmg 1M
    run "$DISKIMG" info q.dmg
    assert_success
    run "$DISKIMG" info --untrusted q.dmg
    assert_failure 1
    assert_output "diskimg: q.dmg: the first bytes look like both qcow2 and dmg images; name the format with -f"
    run "$DISKIMG" info --untrusted -f qcow2 q.dmg
    assert_success
    qemu-img create -q -f qed x.qed 1M
    run "$DISKIMG" convert --untrusted -O raw x.qed out.raw
    assert_failure 1
    assert_output --partial "qed images are not supported"
}

@test "create --untrusted opens the -b file alone, for its size" {
    mkfifo fifo
    overlay mid.qcow2 fifo
    run_bounded "$DISKIMG" create -f qcow2 -b mid.qcow2 -F qcow2 top.qcow2
    assert_failure 1
    assert_output --partial "fifo is not a regular file or a block device"
    run_bounded "$DISKIMG" create --untrusted -f qcow2 -b mid.qcow2 -F qcow2 top.qcow2
    assert_success
    run qemu-img info top.qcow2
    assert_output --partial "virtual size: 1 MiB"
}

@test "a qcow2 external data file is refused, never opened, its name escaped" {
    qemu-img create -q -f qcow2 -o data_file="$(printf 'd\033[2Jx')" d.qcow2 1M
    run_bounded "$DISKIMG" info d.qcow2
    assert_failure 1
    assert_output --partial "external data file ('d\\x1b[2Jx') are not supported"
    [[ $output != *$'\033'* ]]
}

@test "names from an image are printed escaped: backing, snapshot, bitmap" {
    local esc=$'\033'
    qemu-img create -q -f qcow2 e.qcow2 1M
    qemu-img snapshot -c "$(printf 'snap\033[2J\nX')" e.qcow2
    qemu-img bitmap --add e.qcow2 "$(printf 'bm\033[1m\nY')"
    qemu-img rebase -u -b "$(printf 'ba\033[31mck\nZ')" -F raw e.qcow2

    run "$DISKIMG" info e.qcow2
    assert_success
    [[ $output != *"$esc"* ]]
    assert_line 'backing file: ba\x1b[31mck\x0aZ'
    assert_output --partial 'snap\x1b[2J\x0aX'
    assert_line '            name: bm\x1b[1m\x0aY'
    run "$DISKIMG" info --output=json e.qcow2
    assert_output --partial '"backing-filename": "ba\u001B[31mck\nZ"'
    assert_output "$(qemu-img info --output=json e.qcow2)" # escaped as qemu-img does
    # Following the name fails with the name escaped, on one line.
    for cmd in "map e.qcow2" "convert -O raw e.qcow2 out.raw"; do
        # shellcheck disable=SC2086
        run_bounded "$DISKIMG" $cmd
        assert_failure
        [[ $output != *"$esc"* ]]
        assert_output "diskimg: qcow2: e.qcow2: backing file: ba\\x1b[31mck\\x0aZ: No such file or directory"
    done
    run_bounded "$DISKIMG" info --backing-chain e.qcow2
    assert_failure 1
    [[ $output != *"$esc"* ]]
    assert_line "diskimg: ba\\x1b[31mck\\x0aZ: No such file or directory"
    run "$DISKIMG" convert --untrusted -O raw e.qcow2 out.raw
    assert_failure 1
    assert_output "diskimg: e.qcow2: qcow2: refusing to open backing file 'ba\\x1b[31mck\\x0aZ' (--untrusted opens the image alone)"
}

@test "map's human output escapes a backing file's name" {
    local name
    name=$(printf 'b\033[7mase')
    cp base.raw "$name"
    overlay o.qcow2 "$name"
    run "$DISKIMG" map o.qcow2
    assert_success
    assert_output --partial 'b\x1b[7mase'
    [[ $output != *$'\033'* ]]
}
