#!/usr/bin/env bats
# Messages a person can act on: a deep backing chain keeps its cause in one
# line, sizes beyond what a file holds, options before the subcommand,
# qemu's older nbd: spelling (which works), URLs diskimg cannot open
# (which say so), and names (backing files, the image's own), which
# messages show escaped.

load '../helpers'
load '../interop/lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# chain N: l00.qcow2 <- l01.qcow2 <- ... <- lN.qcow2 in $TEST_DIR (absolute names).
chain() {
    local i
    qemu-img create -q -f qcow2 "$TEST_DIR/l00.qcow2" 1M
    for ((i = 1; i <= $1; i++)); do
        qemu-img create -q -f qcow2 -F qcow2 -b "$TEST_DIR/$(printf l%02d.qcow2 $((i - 1)))" \
            "$TEST_DIR/$(printf l%02d.qcow2 "$i")"
    done
}

@test "messages: a chain deeper than 32 backing files is one line naming the top image and the cause" {
    require_tool qemu-img
    chain 40
    run -1 "$DISKIMG" map "$TEST_DIR/l40.qcow2"
    echo "$output"
    [[ $(wc -l <<<"$output") -eq 1 ]]
    [[ "$output" == "diskimg: qcow2: $TEST_DIR/l40.qcow2: backing file: backing chain deeper than 32 backing files ($TEST_DIR/l07.qcow2 is number 33)" ]]
    # Every subcommand that opens the chain says the same.
    run -1 "$DISKIMG" convert -O raw "$TEST_DIR/l40.qcow2" "$TEST_DIR/out.raw"
    [[ "$output" == *"backing chain deeper than 32 backing files"* ]]
    [[ ! -e "$TEST_DIR/out.raw" ]]
    run -1 "$DISKIMG" info --backing-chain "$TEST_DIR/l40.qcow2"
    [[ "$output" == *"backing chain of $TEST_DIR/l40.qcow2 is deeper than 32 backing files"* ]]
    # 32 backing files are fine, everywhere.
    run -0 "$DISKIMG" map "$TEST_DIR/l32.qcow2"
    run -0 "$DISKIMG" info --backing-chain "$TEST_DIR/l32.qcow2"
}

@test "messages: a backing loop names the top image and the file that loops" {
    require_tool qemu-img
    chain 4
    qemu-img rebase -u -F qcow2 -b "$TEST_DIR/l03.qcow2" "$TEST_DIR/l01.qcow2"
    run -1 "$DISKIMG" map "$TEST_DIR/l04.qcow2"
    [[ $(wc -l <<<"$output") -eq 1 ]]
    [[ "$output" == "diskimg: qcow2: $TEST_DIR/l04.qcow2: backing file: $TEST_DIR/l03.qcow2: backing file loop"* ]]
}

@test "messages: sizes of 8 EiB and more are usage errors that give the limit" {
    local s
    for s in 8E 16E 100E 99999999999999999999; do
        run -2 "$DISKIMG" create -f raw "$TEST_DIR/x.img" "$s"
        [[ "$output" == *"size '$s' is too large: an image holds at most 8 EiB - 1 byte (9223372036854775807 bytes)"* ]]
        run -2 "$DISKIMG" create -f qcow2 "$TEST_DIR/x.qcow2" "$s"
        [[ "$output" == *"is too large"* ]]
    done
    run -2 "$DISKIMG" create -f raw "$TEST_DIR/x.img" 1x
    [[ "$output" == *"invalid size '1x': a number of bytes, optionally with a suffix k, M, G, T, P or E"* ]]
    [[ ! -e "$TEST_DIR/x.img" && ! -e "$TEST_DIR/x.qcow2" ]]

    truncate -s 1G "$TEST_DIR/r.img"
    run -2 "$DISKIMG" resize -f raw "$TEST_DIR/r.img" 16E
    [[ "$output" == *"size '16E' is too large"* ]]
    run -1 "$DISKIMG" resize -f raw "$TEST_DIR/r.img" +8589934591G
    [[ "$output" == *"growing by 8589934591G would make the image larger than 8 EiB - 1 byte"* ]]
    [[ $(stat -c %s "$TEST_DIR/r.img") -eq 1073741824 ]]
}

@test "messages: sizes the format or the file system cannot hold say which limit" {
    run -1 "$DISKIMG" create -f qcow2 "$TEST_DIR/x.qcow2" 7E
    [[ "$output" == *"The image size is too large for file format 'qcow2' (try using a larger cluster size): 65536-byte clusters allow at most 2251799813685248 bytes"* ]]
    # ext4 and xfs refuse files of 8 EiB - 1 byte; tmpfs does too.
    run -1 "$DISKIMG" create -f raw "$TEST_DIR/x.img" 7E
    [[ "$output" == *"x.img: cannot make the file 8070450532247928832 bytes long: the file system does not allow files that large"* ]]
}

@test "messages: an option before the subcommand is an unknown option, not a subcommand" {
    run -2 "$DISKIMG" --bogus
    [[ "${lines[0]}" == "diskimg: unknown option '--bogus': options go after the subcommand" ]]
    run -2 "$DISKIMG" -U info x
    [[ "${lines[0]}" == "diskimg: unknown option '-U': options go after the subcommand" ]]
    run -2 "$DISKIMG" bogus
    [[ "${lines[0]}" == "diskimg: unknown subcommand 'bogus'" ]]
}

@test "messages: qemu's nbd:unix:PATH and nbd:HOST:PORT spellings open NBD exports" {
    make_pattern "$TEST_DIR/d.img" 1048576
    start_server -t -f raw -x exp "$TEST_DIR/d.img"
    run -0 "$DISKIMG" info --output=json "nbd:unix:$SOCK:exportname=exp"
    [[ "$output" == *'"virtual-size": 1048576'* ]]
    run -0 "$DISKIMG" convert -O raw "nbd:unix:$SOCK:exportname=exp" "$TEST_DIR/copy.img"
    cmp "$TEST_DIR/d.img" "$TEST_DIR/copy.img"
    run -1 "$DISKIMG" info "nbd:unix:$SOCK:exportname=nope"
    [[ "$output" == *"export 'nope' not found"* ]]
    stop_server

    start_server_tcp 127.0.0.1 -t -f raw "$TEST_DIR/d.img"
    run -0 "$DISKIMG" compare -U "nbd:127.0.0.1:$PORT" "$TEST_DIR/d.img" # (d.img is served)
    run -1 "$DISKIMG" info "nbd:127.0.0.1:port"
    [[ "$output" == *"nbd:127.0.0.1:port: expected nbd:unix:PATH or nbd:HOST[:PORT], optionally followed by :exportname=NAME"* ]]
    run -1 "$DISKIMG" create -f raw "nbd:unix:$SOCK" 1M
    [[ "$output" == *"cannot be created"* ]]
}

@test "messages: a qcow2 read over NBD opens no file it names" {
    truncate -s 1M "$TEST_DIR/base.raw"
    qemu-img create -q -f qcow2 -b "$TEST_DIR/base.raw" -F raw "$TEST_DIR/top.qcow2"
    # the qcow2 file exported as raw bytes: the client reads the format
    start_server -r -t -f raw "$TEST_DIR/top.qcow2"
    run -1 "$DISKIMG" convert -f qcow2 -O raw "nbd+unix:///?socket=$SOCK" "$TEST_DIR/o.raw"
    [[ "$output" == *"qcow2: backing file '$TEST_DIR/base.raw' is not opened: an image read from a server (nbd) may not name files or images of this host (download it first)" ]]
    [[ ! -e $TEST_DIR/o.raw ]]
    stop_server
}

@test "messages: URLs of other protocols say what diskimg opens instead of 'No such file'" {
    truncate -s 1M "$TEST_DIR/d.img"
    run -1 "$DISKIMG" info sftp://example.invalid/cloud.qcow2
    [[ "$output" == "diskimg: sftp://example.invalid/cloud.qcow2: diskimg cannot open sftp:// URLs; it opens local files, NBD URIs"*"HTTP(S) URLs"* ]]
    run -1 "$DISKIMG" convert -O raw gopher://example.invalid/x.img "$TEST_DIR/o.img"
    [[ "$output" == *"cannot open gopher:// URLs"* ]]
    [[ ! -e $TEST_DIR/o.img ]]
    run -1 "$DISKIMG" convert -f raw -O qcow2 "$TEST_DIR/d.img" s3://bucket/x.qcow2
    [[ "$output" == *"s3://bucket/x.qcow2: diskimg cannot open s3:// URLs"* ]]
    run -1 "$DISKIMG" create -f qcow2 ftp://host/x.qcow2 1G
    [[ "$output" == *"cannot open ftp:// URLs"* ]]
    [[ "$output" != *"No such file"* ]]
    # A local name with a colon is still a file.
    truncate -s 1M "$TEST_DIR/a:b.img"
    run -0 "$DISKIMG" info -f raw "$TEST_DIR/a:b.img"
}

# The backing file's name comes from the image: ESC is a C0 control,
# U+009B a CSI on a UTF-8 terminal, a raw 0x9b one on an 8-bit terminal.
# Committing into a vmdk, which cannot grow, quotes it twice, in commit's
# "growing NAME" and in the generic layer's "NAME: vmdk images cannot be
# resized": both show those bytes as \xHH, and none reaches stdout or
# stderr.
@test "messages: a backing file name shows its controls as \\xHH" {
    local names=(c0$'\x1b' c1$'\xc2\x9b' raw$'\x9b') escs=('c0\x1b' 'c1\xc2\x9b' 'raw\x9b')
    local n want
    # not i: bats' run sets an i of its own
    for n in 0 1 2; do
        "$DISKIMG" create -q -f vmdk "$TEST_DIR/${names[n]}.vmdk" 1M
        "$DISKIMG" create -q -f qcow2 -F vmdk -b "$TEST_DIR/${names[n]}.vmdk" \
            "$TEST_DIR/top.qcow2" 2M
        run -1 --separate-stderr "$DISKIMG" commit "$TEST_DIR/top.qcow2"
        echo "$stderr"
        want="growing $TEST_DIR/${escs[n]}.vmdk to 2097152 bytes: $TEST_DIR/${escs[n]}.vmdk"
        [[ "$stderr" == "diskimg: $want: vmdk images cannot be resized"* ]]
        [[ $(printf '%s%s' "$output" "$stderr" | LC_ALL=C tr -dc '\033\302\233' | wc -c) -eq 0 ]]
    done
}

# Some messages are printed by the subcommand itself, not through the
# error channel and its neutraliser: they escape the image's name too,
# or its ESC would reach the terminal as it is.
@test "messages: names the subcommands print themselves are escaped" {
    local img="$TEST_DIR/x"$'\x1b'.img esc="$TEST_DIR/x\x1b.img"
    truncate -s 1M "$img"
    run -1 --separate-stderr "$DISKIMG" resize -f raw "$img" 512K
    [[ "$stderr" == "diskimg: use the --shrink option to make $esc smaller"* ]]
    run -1 --separate-stderr "$DISKIMG" bench -f raw -c 1 -s 2M "$img"
    [[ "$stderr" == "diskimg: $esc is too small for 2097152-byte requests"* ]]
    run --separate-stderr "$DISKIMG" dd -f raw -O raw if="$img" of="$TEST_DIR/out" bs=1M skip=5
    [[ "$stderr" == "diskimg: $esc: cannot skip to the offset asked for"* ]]
    run -1 --separate-stderr "$DISKIMG" create -f raw "nbd://127.0.0.1:9/e"$'\x1b' 1M
    [[ "$stderr" == "diskimg: nbd://127.0.0.1:9/e\\x1b: an NBD export exists already"* ]]
}

# The generic layer's own messages (block/: snapshot.c, image.c) quote a
# node's name through ESC_NAME too, so an ESC or a raw 0x9b in it shows
# as \xHH rather than as the neutraliser's '?'.
@test "messages: the block layer's refusals show a name's controls as \\xHH" {
    local names=(c0$'\x1b' raw$'\x9b') escs=('c0\x1b' 'raw\x9b') n
    for n in 0 1; do
        "$DISKIMG" create -q -f raw "$TEST_DIR/${names[n]}.img" 1M
        run -1 --separate-stderr "$DISKIMG" snapshot -c s -f raw "$TEST_DIR/${names[n]}.img"
        echo "$stderr"
        [[ "$stderr" == *": $TEST_DIR/${escs[n]}.img: the raw format has no internal snapshots" ]]
        run -1 --separate-stderr "$DISKIMG" bitmap --add -f raw "$TEST_DIR/${names[n]}.img" b
        echo "$stderr"
        [[ "$stderr" == *": $TEST_DIR/${escs[n]}.img: the raw format cannot store persistent bitmaps" ]]
        [[ $(printf '%s%s' "$output" "$stderr" | LC_ALL=C tr -dc '\033\233' | wc -c) -eq 0 ]]
    done
}

# The format drivers quote a node's name through ESC_NAME as well: a vpc
# or vdi file too short for its header and a vmdk descriptor without
# extents show an ESC or a raw 0x9b in the name as \xHH, not as '?'.
@test "messages: format drivers show a name's controls as \\xHH" {
    local names=(c0$'\x1b' raw$'\x9b') escs=('c0\x1b' 'raw\x9b') n f
    for n in 0 1; do
        f="$TEST_DIR/${names[n]}"
        head -c 100 /dev/zero >"$f.small"
        run -1 --separate-stderr "$DISKIMG" info -f vpc "$f.small"
        echo "$stderr"
        [[ "$stderr" == *" $TEST_DIR/${escs[n]}.small: vpc: the file is too short to hold a VHD footer" ]]
        run -1 --separate-stderr "$DISKIMG" info -f vdi "$f.small"
        echo "$stderr"
        [[ "$stderr" == *" $TEST_DIR/${escs[n]}.small: vdi: the file (100 bytes) is too short for a header" ]]
        printf '# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\ncreateType="monolithicFlat"\n' >"$f.vmdk"
        run -1 --separate-stderr "$DISKIMG" info -f vmdk "$f.vmdk"
        echo "$stderr"
        [[ "$stderr" == *" $TEST_DIR/${escs[n]}.vmdk: vmdk: the descriptor names no extent" ]]
        [[ $(printf '%s%s' "$output" "$stderr" | LC_ALL=C tr -dc '\033\233' | wc -c) -eq 0 ]]
    done
}
