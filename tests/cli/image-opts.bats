#!/usr/bin/env bats
# --image-opts in every subcommand that takes it (qemu-img 7.2's list),
# with qemu-img as the judge: the same option strings give the same JSON
# (info, map), the same answers (compare, check) and the same bytes
# (convert, resize, dd: qemu-img compare).  driver= names a format or a
# protocol (file, nbd: the protocol node is the image, shown as qemu
# shows it); file.driver= picks the protocol under a format; file.KEY is
# the protocol's KEY.  Errors: one line naming the thing, exit 2.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() {
    setup_test
    RAW=$TEST_DIR/a.raw
    QCOW=$TEST_DIR/a.qcow2
    qemu-img create -q -f raw "$RAW" 1M
    printf 'hello' | dd of="$RAW" bs=1 seek=65536 conv=notrunc status=none
    qemu-img convert -f raw -O qcow2 "$RAW" "$QCOW"
}
teardown() { cleanup_test; }

# same_json SUBCOMMAND SPEC [ARGS...]: our --output=json equals qemu-img's.
same_json() {
    local sub=$1 spec=$2
    shift 2
    diff <(qemu-img "$sub" --output=json "$@" --image-opts "$spec") \
        <("$DISKIMG" "$sub" --output=json "$@" --image-opts "$spec")
}

# refuse_f SUBCOMMAND ARGS...: -f beside --image-opts is bad usage.
refuse_f() {
    local sub=$1
    shift
    # (timeout: a serve that took both would serve instead of failing)
    run -2 timeout 20 "$DISKIMG" "$sub" -f raw "$@"
    assert_line --index 0 "diskimg $sub: --image-opts and -f are mutually exclusive"
}

@test "info and map: formats, protocols and file.KEY read as qemu-img reads them" {
    local spec
    for spec in "driver=file,filename=$RAW" \
        "driver=raw,file.driver=file,file.filename=$RAW" \
        "driver=qcow2,file.filename=$QCOW" \
        "driver=qcow2,file.driver=file,file.filename=$QCOW"; do
        same_json info "$spec"
        same_json map "$spec"
    done
    # an overlay: the backing file opens by its name, as qemu-img's does
    qemu-img create -q -f qcow2 -b "$QCOW" -F qcow2 "$TEST_DIR/ov.qcow2"
    same_json info "driver=qcow2,file.filename=$TEST_DIR/ov.qcow2" --backing-chain
    same_json map "driver=qcow2,file.filename=$TEST_DIR/ov.qcow2"
    # the human form names the protocol as the format too
    run -0 "$DISKIMG" info --image-opts "driver=file,filename=$RAW"
    assert_line "file format: file"
}

@test "check, compare, measure, bench, dd, convert, resize: as qemu-img with the same options" {
    local q="driver=qcow2,file.driver=file,file.filename=$QCOW" r="driver=file,filename=$RAW"
    same_json check "$q"
    same_json measure "$r" -O qcow2
    same_json measure "$q" -O raw
    run -0 "$DISKIMG" compare --image-opts "$q" "$r"
    assert_output "Images are identical."
    cp "$QCOW" "$TEST_DIR/b.qcow2"
    qemu-io -c 'write -P 7 0 512' "$TEST_DIR/b.qcow2" >/dev/null
    run -1 "$DISKIMG" compare --image-opts "driver=qcow2,file.filename=$TEST_DIR/b.qcow2" "$r"
    assert_output "Content mismatch at offset 0!"
    run -0 "$DISKIMG" bench -c 16 -s 4k --output=json --image-opts "cache=none,$q"
    # dd and convert read through the options; qemu-img compare judges the bytes
    "$DISKIMG" dd --image-opts bs=64k count=2 "if=$q" "of=$TEST_DIR/dd.raw"
    qemu-img dd -f raw bs=64k count=2 "if=$RAW" "of=$TEST_DIR/dd-q.raw"
    cmp "$TEST_DIR/dd.raw" "$TEST_DIR/dd-q.raw"
    "$DISKIMG" convert --image-opts -O qcow2 "$q" "$TEST_DIR/c.qcow2"
    qemu-img compare "$RAW" "$TEST_DIR/c.qcow2"
    # an existing target named by options: -n, never -O (qemu-img's rules)
    qemu-img create -q -f qcow2 "$TEST_DIR/t.qcow2" 1M
    "$DISKIMG" convert -n --image-opts --target-image-opts "$r" \
        "driver=qcow2,file.driver=file,file.filename=$TEST_DIR/t.qcow2"
    qemu-img compare "$RAW" "$TEST_DIR/t.qcow2"
    run -2 "$DISKIMG" convert --target-image-opts "$RAW" "driver=file,filename=$TEST_DIR/x"
    assert_line --index 0 "diskimg convert: --target-image-opts requires use of -n flag"
    run -2 "$DISKIMG" convert -n -O raw --target-image-opts "$RAW" "driver=file,filename=$RAW"
    assert_line --index 0 "diskimg convert: --target-image-opts and -O are mutually exclusive"
    # resize writes through the options as qemu-img does
    "$DISKIMG" resize -q --image-opts "driver=qcow2,file.filename=$TEST_DIR/c.qcow2" 3M
    qemu-img resize -q --image-opts "driver=qcow2,file.filename=$TEST_DIR/t.qcow2" 3M
    diff <(qemu-img info --output=json "$TEST_DIR/c.qcow2" | grep virtual-size) \
        <(qemu-img info --output=json "$TEST_DIR/t.qcow2" | grep virtual-size)
    qemu-img check -q "$TEST_DIR/c.qcow2"
}

@test "driver=nbd with qemu's server.* keys, alone and under a format" {
    start_server -t -r -x exp -f qcow2 "$QCOW"
    local spec
    for spec in "driver=nbd,server.type=unix,server.path=$SOCK,export=exp" \
        "driver=raw,file.driver=nbd,file.server.type=unix,file.server.path=$SOCK,file.export=exp" \
        "driver=nbd,path=$SOCK,export=exp"; do
        same_json info "$spec"
        same_json map "$spec"
    done
    stop_server
    # written through the keys: convert -n into an export, served itself
    # from options (file.driver=file under qcow2)
    qemu-img create -q -f qcow2 "$TEST_DIR/w.qcow2" 1M
    start_server -t --image-opts "driver=qcow2,file.driver=file,file.filename=$TEST_DIR/w.qcow2"
    "$DISKIMG" convert -n --target-image-opts "$RAW" \
        "driver=nbd,server.type=unix,server.path=$SOCK"
    run -0 "$DISKIMG" compare --image-opts "driver=file,filename=$RAW" \
        "driver=nbd,server.type=unix,server.path=$SOCK"
    stop_server
    qemu-img compare "$RAW" "$TEST_DIR/w.qcow2"
    # the subcommands that change an image's metadata, on a qcow2 whose
    # file is an NBD export named by keys alone (no filename anywhere)
    # (an export does not grow: nothing here allocates clusters)
    local m=$TEST_DIR/m.qcow2
    qemu-img create -q -f qcow2 "$m" 1M
    qemu-img snapshot -c s1 "$m"
    start_server -t -f raw "$m"
    local q="driver=qcow2,file.driver=nbd,file.server.type=unix,file.server.path=$SOCK"
    run -0 "$DISKIMG" snapshot -l --image-opts "$q"
    assert_output --partial " s1 "
    run -1 "$DISKIMG" bitmap --merge b0 -b "$RAW" --image-opts "$q" b1
    "$DISKIMG" amend -o lazy_refcounts=on --image-opts "$q"
    "$DISKIMG" rebase -u -b base.raw -F raw --image-opts "$q"
    run -1 "$DISKIMG" commit --image-opts "$q"
    assert_output --partial "base.raw"
    stop_server
    qemu-img create -q -f raw "$TEST_DIR/base.raw" 1M
    qemu-img check -q "$m"
    run -0 qemu-img info --output=json "$m"
    assert_output --partial '"backing-filename": "base.raw"'
    assert_output --partial '"lazy-refcounts": true'
}

@test "errors: unknown driver or key, missing filename, -f beside it: one line, exit 2" {
    local spec
    for spec in "driver=bogus,filename=$RAW" "driver=raw,file.driver=bogus,file.filename=$RAW" \
        "driver=raw,file.filename=$RAW,bogus=1" "driver=raw,file.bogus=1,file.filename=$RAW" \
        "driver=file" "driver=qcow2"; do
        run -2 "$DISKIMG" info --image-opts "$spec"
        [[ ${lines[0]} == "diskimg info: --image-opts: "* ]]
        # qemu-img refuses every one of them too
        run -1 qemu-img info --image-opts "$spec"
    done
    local spec="driver=file,filename=$RAW" sub
    for sub in info map bench measure commit; do
        refuse_f "$sub" --image-opts "$spec"
    done
    refuse_f snapshot -l --image-opts "$spec"
    refuse_f amend -o size=2M --image-opts "$spec"
    refuse_f compare --image-opts "$spec" "$spec"
    run -2 "$DISKIMG" compare -F raw --image-opts "$spec" "$spec"
    assert_line --index 0 "diskimg compare: --image-opts and -F are mutually exclusive"
    refuse_f resize --image-opts "$spec" 2M
    refuse_f rebase -u -b '' --image-opts "$spec"
    refuse_f serve -k "$TEST_DIR/s.sock" --image-opts "$spec"
    # check's usage errors are 1 (2 means corruptions), as qemu-img's
    run -1 "$DISKIMG" check -f raw --image-opts "driver=file,filename=$RAW"
    assert_line --index 0 "diskimg check: --image-opts and -f are mutually exclusive"
    run -2 "$DISKIMG" convert -f raw --image-opts "driver=file,filename=$RAW" "$TEST_DIR/o"
    assert_line --index 0 "diskimg convert: --image-opts and -f are mutually exclusive"
    run -2 "$DISKIMG" dd -f raw --image-opts "if=driver=file,filename=$RAW" "of=$TEST_DIR/o"
    assert_line --index 0 "diskimg dd: --image-opts and -f are mutually exclusive"
    [[ ! -e $TEST_DIR/o ]]
    # the nbd driver checks its own keys when it opens: a failure, not usage
    run -1 "$DISKIMG" info --image-opts "driver=nbd,server.type=unix"
    assert_output "diskimg: nbd: option 'server.path': is required with server.type=unix"
}
