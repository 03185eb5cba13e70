#!/usr/bin/env bats
# diskimg create: options, -o help, the "Formatting" line (same as
# qemu-img's for the same options), what the file is, errors and exit codes.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() {
    setup_test
    LOOP_DEV=
}
teardown() {
    [[ -z $LOOP_DEV ]] || losetup -d "$LOOP_DEV"
    cleanup_test
}

# same_formatting ARGS...: "diskimg create ARGS" and "qemu-img create ARGS"
# print the same line and both succeed.  The image name is relative, so
# each tool runs in TEST_DIR, on its own copy of the directory's files.
same_formatting() {
    local ours theirs rc_ours=0 rc_theirs=0
    ours=$(cd "$TEST_DIR" && "$DISKIMG" create "$@" 2>&1) || rc_ours=$?
    theirs=$(cd "$TEST_DIR" && qemu-img create "$@" 2>&1) || rc_theirs=$?
    if [[ "$ours" != "$theirs" || $rc_ours -ne 0 || $rc_theirs -ne 0 ]]; then
        echo "create $*:" >&2
        echo "  diskimg  (exit $rc_ours): $ours" >&2
        echo "  qemu-img (exit $rc_theirs): $theirs" >&2
        return 1
    fi
}

# info_core FILE: qemu-img's JSON view of FILE minus name and host usage.
info_core() {
    qemu-img info --output=json "$1" | grep -v '"actual-size"\|"filename"'
}

@test "create --help: synopsis, options, exit status" {
    run "$DISKIMG" create --help
    assert_success
    assert_output --partial "Usage: diskimg create"
    for opt in -f -o -b -F -u -q; do
        assert_output --partial -- "  $opt"
    done
    run "$DISKIMG" help create
    assert_success
    assert_output --partial "Usage: diskimg create"
}

@test "create -o help lists every qcow2 option, and raw's" {
    run "$DISKIMG" create -f qcow2 -o help
    assert_success
    for o in backing_file backing_fmt cluster_size compat compression_type extended_l2 \
             lazy_refcounts preallocation refcount_bits size; do
        assert_output --partial "$o="
    done
    run "$DISKIMG" create -f raw -o help
    assert_success
    assert_output --partial "size="
    assert_output --partial "preallocation="
    refute_output --partial "cluster_size"
    # -o help with a file name and size still only prints help, creates nothing.
    run "$DISKIMG" create -f qcow2 -o help "$TEST_DIR/x.qcow2" 1M
    assert_success
    [[ ! -e "$TEST_DIR/x.qcow2" ]]
}

@test "create: the Formatting line equals qemu-img's (qcow2 options, one at a time)" {
    require_tool qemu-img
    local o
    for o in "" compat=0.10 cluster_size=512 cluster_size=4k cluster_size=2M \
             cluster_size=65536 refcount_bits=1 refcount_bits=8 refcount_bits=64 \
             lazy_refcounts=on lazy_refcounts=off extended_l2=on extended_l2=off \
             compression_type=zstd compression_type=zlib preallocation=metadata \
             preallocation=falloc preallocation=full \
             cluster_size=4096,refcount_bits=8,lazy_refcounts=on \
             compat=0.10,preallocation=metadata extended_l2=on,cluster_size=2M; do
        same_formatting -f qcow2 ${o:+-o "$o"} f.qcow2 4M
    done
}

@test "create: the Formatting line equals qemu-img's (sizes, -o size, raw)" {
    require_tool qemu-img
    same_formatting -f qcow2 f.qcow2 1000000
    same_formatting -f qcow2 f.qcow2 1G
    same_formatting -f qcow2 f.qcow2 0
    same_formatting -f qcow2 -o size=2M f.qcow2
    same_formatting -f qcow2 -o cluster_size=64k,size=3M f.qcow2
    same_formatting -f raw f.raw 1000001
    same_formatting f.raw 1M
    same_formatting -f raw -o preallocation=falloc f.raw 1M
    same_formatting -f raw -o preallocation=full f.raw 1M
}

@test "create: the Formatting line equals qemu-img's with a backing file (-b -F, with and without SIZE)" {
    require_tool qemu-img
    truncate -s 3M "$TEST_DIR/base.raw"
    qemu-img create -q -f qcow2 "$TEST_DIR/base.qcow2" 2M
    same_formatting -f qcow2 -b base.raw -F raw f.qcow2
    same_formatting -f qcow2 -b base.raw -F raw f.qcow2 5M
    same_formatting -f qcow2 -b base.qcow2 -F qcow2 -o cluster_size=4k f.qcow2
    same_formatting -f qcow2 -u -b nothere.qcow2 -F qcow2 f.qcow2 1M
}

@test "create: options given at their default value are echoed as qemu-img does (compat=1.1, preallocation=off)" {
    require_tool qemu-img
    same_formatting -f qcow2 -o compat=1.1 f.qcow2 4M
    same_formatting -f qcow2 -o compat=1.1,lazy_refcounts=on f.qcow2 4M
    same_formatting -f qcow2 -o preallocation=off f.qcow2 4M
}

@test "create: qemu-img's other spellings are echoed as given (compat=v2, compat=v3, extended_l2=yes)" {
    require_tool qemu-img
    same_formatting -f qcow2 -o compat=v3 f.qcow2 1M
    same_formatting -f qcow2 -o compat=v2 f.qcow2 1M
    same_formatting -f qcow2 -o extended_l2=yes f.qcow2 1M
}

@test "create: a bare boolean option (-o lazy_refcounts) means on, as in qemu-img" {
    require_tool qemu-img
    same_formatting -f qcow2 -o lazy_refcounts f.qcow2 1M
    run qemu-img info --output=json "$TEST_DIR/f.qcow2"
    assert_output --partial '"lazy-refcounts": true'
}

@test "create: -o backing_file=...,backing_fmt=... works like -b/-F" {
    require_tool qemu-img
    truncate -s 3M "$TEST_DIR/base.raw"
    same_formatting -f qcow2 -o backing_file=base.raw,backing_fmt=raw f.qcow2
    run qemu-img info --output=json "$TEST_DIR/f.qcow2"
    assert_output --partial '"backing-filename": "base.raw"'
    assert_output --partial '"virtual-size": 3145728'
}

@test "create: the image equals qemu-img's for the same options (header facts, all zero)" {
    require_tool qemu-img
    local o
    for o in "" compat=0.10 cluster_size=512 refcount_bits=1 lazy_refcounts=on extended_l2=on \
             compression_type=zstd preallocation=metadata; do
        rm -f "$TEST_DIR/ours.qcow2" "$TEST_DIR/theirs.qcow2"
        "$DISKIMG" create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/ours.qcow2" 3M
        qemu-img create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/theirs.qcow2" 3M
        diff <(info_core "$TEST_DIR/theirs.qcow2") <(info_core "$TEST_DIR/ours.qcow2")
        run qemu-img check "$TEST_DIR/ours.qcow2"
        assert_success
        run qemu-img compare -f qcow2 -F qcow2 "$TEST_DIR/ours.qcow2" "$TEST_DIR/theirs.qcow2"
        assert_success
    done
}

@test "create: sizes are rounded up to 512 bytes, raw and qcow2, as qemu-img does" {
    require_tool qemu-img
    run "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 1000000
    assert_success
    run qemu-img info --output=json "$TEST_DIR/a.qcow2"
    assert_output --partial '"virtual-size": 1000448'
    run "$DISKIMG" create -q -f raw "$TEST_DIR/a.raw" 1000001
    assert_success
    [[ $(stat -c %s "$TEST_DIR/a.raw") -eq 1000448 ]]
}

@test "create: size suffixes k M G T are powers of 1024" {
    require_tool qemu-img
    local s want
    for s in 3k:3072 5M:5242880 2G:2147483648 1T:1099511627776; do
        rm -f "$TEST_DIR/a.qcow2"
        run "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" "${s%%:*}"
        assert_success
        want=${s##*:}
        run qemu-img info --output=json "$TEST_DIR/a.qcow2"
        assert_output --partial "\"virtual-size\": $want"
    done
}

@test "create: -q prints nothing; an existing file is replaced" {
    require_tool qemu-img
    head -c 100000 /dev/urandom >"$TEST_DIR/a.qcow2"
    run "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 1M
    assert_success
    assert_output ""
    run qemu-img check "$TEST_DIR/a.qcow2"
    assert_success
    run qemu-img info --output=json "$TEST_DIR/a.qcow2"
    assert_output --partial '"virtual-size": 1048576'
}

@test "create: the default format is raw" {
    run "$DISKIMG" create "$TEST_DIR/a.img" 1M
    assert_success
    assert_output --partial "fmt=raw"
    [[ $(stat -c %s "$TEST_DIR/a.img") -eq 1048576 ]]
    [[ $(head -c 4 "$TEST_DIR/a.img" | od -An -tx1 | tr -d ' ') == 00000000 ]]
}

# create_fails CODE MESSAGE ARGS...: diskimg create ARGS exits CODE with a
# one-line message containing MESSAGE on stderr (usage errors: two lines,
# the second pointing at --help).
create_fails() {
    local code=$1 msg=$2
    shift 2
    run --separate-stderr "$DISKIMG" create "$@"
    if [[ $status -ne $code || "$stderr" != *"$msg"* ]]; then
        echo "create $*: exit $status (want $code), stderr: $stderr" >&2
        return 1
    fi
    local n
    n=$(printf '%s\n' "$stderr" | wc -l)
    if [[ $code -eq 1 && $n -ne 1 ]] || [[ $code -eq 2 && $n -gt 2 ]]; then
        echo "create $*: $n lines of stderr: $stderr" >&2
        return 1
    fi
}

@test "create: invalid qcow2 option combinations fail with qemu-img's message (exit 1)" {
    cd "$TEST_DIR"
    create_fails 1 "Lazy refcounts only supported with compatibility level 1.1 and above" \
        -f qcow2 -o compat=0.10,lazy_refcounts=on x.qcow2 1M
    create_fails 1 "Extended L2 entries are only supported with compatibility level 1.1 and above" \
        -f qcow2 -o compat=0.10,extended_l2=on x.qcow2 1M
    create_fails 1 "Different refcount widths than 16 bits require compatibility level 1.1 or above" \
        -f qcow2 -o compat=0.10,refcount_bits=8 x.qcow2 1M
    create_fails 1 "Non-zlib compression type is only supported with compatibility level 1.1 and above" \
        -f qcow2 -o compat=0.10,compression_type=zstd x.qcow2 1M
    create_fails 1 "Extended L2 entries are only supported with cluster sizes of at least 16384 bytes" \
        -f qcow2 -o extended_l2=on,cluster_size=8k x.qcow2 1M
    create_fails 1 "Cluster size must be a power of two between 512 and 2048k" \
        -f qcow2 -o cluster_size=3000 x.qcow2 1M
    create_fails 1 "Cluster size must be a power of two between 512 and 2048k" \
        -f qcow2 -o cluster_size=4M x.qcow2 1M
    create_fails 1 "Refcount width must be a power of two and may not exceed 64 bits" \
        -f qcow2 -o refcount_bits=3 x.qcow2 1M
    create_fails 1 "Refcount width must be a power of two and may not exceed 64 bits" \
        -f qcow2 -o refcount_bits=128 x.qcow2 1M
    create_fails 1 "The image size is too large for file format 'qcow2'" \
        -f qcow2 -o cluster_size=512 x.qcow2 200G
}

@test "create: bad option values and names fail (exit 1)" {
    cd "$TEST_DIR"
    create_fails 1 "bogus" -f qcow2 -o bogus=1 x.qcow2 1M
    create_fails 1 "compat" -f qcow2 -o compat=2 x.qcow2 1M
    create_fails 1 "bogus" -f qcow2 -o preallocation=bogus x.qcow2 1M
    create_fails 1 "metadata" -f raw -o preallocation=metadata x.raw 1M
    create_fails 1 "lazy_refcounts" -f qcow2 -o lazy_refcounts=maybe x.qcow2 1M
    create_fails 1 "subformat" -f vmdk -o subformat=bogus x.vmdk 1M
}

@test "create: usage errors exit 2" {
    cd "$TEST_DIR"
    create_fails 2 "expected FILE"
    create_fails 2 "expected FILE" -f qcow2 x.qcow2 1M extra
    create_fails 2 "invalid size '1Q'" -f qcow2 x.qcow2 1Q
    create_fails 2 "unknown option '--bogus'" --bogus x.qcow2 1M
    create_fails 2 "-u" -f qcow2 -u -b base.qcow2 -F qcow2 x.qcow2
    [[ ! -e x.qcow2 ]]
}

@test "create: failures at run time exit 1 (no size, missing backing, bad directory)" {
    cd "$TEST_DIR"
    create_fails 1 "size" -f qcow2 x.qcow2
    create_fails 1 "nothere.qcow2" -f qcow2 -b nothere.qcow2 -F qcow2 x.qcow2
    create_fails 1 "No such file or directory" -f qcow2 /nonexistent/dir/x.qcow2 1M
}

# refused_keeps_node NODE TEST CMD...: CMD fails with exit 1 and one
# "diskimg: " line, and NODE is still what TEST (-c, -b) says.
refused_keeps_node() {
    local node=$1 kind=$2
    shift 2
    run --separate-stderr "$DISKIMG" "$@"
    echo "$*: status $status, stderr: $stderr" >&2
    [[ $status -eq 1 ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && $stderr == diskimg:* ]]
    test "$kind" "$node"
}

@test "create, convert and dd never remove a device node they refuse or fail on" {
    # They used to remove the output after a failure even when it was a
    # device: "diskimg dd of=/dev/null" run as root deleted /dev/null.
    if [[ $(id -u) -ne 0 ]]; then
        ! strict_mode || return 1 # CI runs as root
        skip "mknod and losetup need root"
    fi
    cd "$TEST_DIR"
    head -c 2097152 /dev/urandom >src.img
    mknod chr c 1 3 # a copy of /dev/null's node
    refused_keeps_node chr -c create -f qcow2 chr 1M
    [[ $stderr == *"chr is not a regular file or a block device"* ]]
    refused_keeps_node chr -c convert -O raw src.img chr
    refused_keeps_node chr -c dd -O raw if=src.img of=chr
    # A block device too small for the image: formatting fails.  The node
    # is our own, with the loop device's numbers.
    truncate -s 1M loop.img
    LOOP_DEV=$(losetup -f --show loop.img)
    mknod blk b "$((0x$(stat -c %t "$LOOP_DEV")))" "$((0x$(stat -c %T "$LOOP_DEV")))"
    refused_keeps_node blk -b create -f raw blk 2M
    refused_keeps_node blk -b convert -O raw src.img blk
    refused_keeps_node blk -b convert -O qcow2 -o preallocation=full src.img blk
}
