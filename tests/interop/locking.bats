#!/usr/bin/env bats
# Image locking, qemu's way: the lock bytes diskimg takes (read from
# /proc/locks), diskimg against qemu-nbd, qemu-img and qemu-io in both
# directions, two diskimg processes, -U, backing files, in-process
# conflicts, and locks going with the process (kill -9, --fork).

load '../helpers'
load 'lib'
load 'nbd-servers'

setup() {
    setup_test
    QCOW=$TEST_DIR/a.qcow2
    RAW=$TEST_DIR/r.img
    qemu-img create -q -f qcow2 "$QCOW" 16M
    qemu-io -c 'write -P 0x5a 0 64k' "$QCOW" >/dev/null
    truncate -s 16M "$RAW"
    QIO_PID=
    DAEMON_PID=
}

teardown() {
    stop_qemu_io
    if [[ -n "$DAEMON_PID" ]] && ! server_gone "$DAEMON_PID"; then
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
    fi
    kill_extra_servers
    stop_peers
    cleanup_test
}

# lock_bytes FILE: the bytes of FILE that OFD locks cover, whoever holds
# them, in order ("100 101 103 201 203").
lock_bytes() {
    local ino
    ino=$(stat -c %i "$1")
    awk -v ino="$ino" '$2 == "OFDLCK" && $6 ~ (":" ino "$") {
        for (b = $7; b <= $8; b++) print b }' /proc/locks | sort -n | uniq | paste -sd' '
}

# start_qemu_io [qemu-io options...] FILE: qemu-io with FILE open, waiting
# for commands on a fifo until stop_qemu_io (it holds its locks meanwhile).
# has_locks FILE: some process holds OFD locks on FILE.
has_locks() {
    [[ -e $1 && -n $(lock_bytes "$1") ]]
}

no_locks() { ! has_locks "$1"; }

start_qemu_io() {
    local file=${!#}
    mkfifo "$TEST_DIR/qio.in"
    qemu-io "$@" <"$TEST_DIR/qio.in" >"$TEST_DIR/qio.out" 2>&1 &
    QIO_PID=$!
    exec {QIO_FD}>"$TEST_DIR/qio.in"
    wait_until 10 has_locks "$file"
}

stop_qemu_io() {
    [[ -n "${QIO_PID:-}" ]] || return 0
    exec {QIO_FD}>&-
    wait_exit "$QIO_PID" 10 || kill -KILL "$QIO_PID" 2>/dev/null || true
    QIO_PID=
    rm -f "$TEST_DIR/qio.in"
}

in_use_message() {
    assert_output --partial "$1: failed to get"
    assert_output --partial "another process is using the image"
}

# ---------------------------------------------------------------------------
# The bytes diskimg locks are qemu's.

@test "locking: serve locks qemu's bytes for raw and qcow2, writable and read-only" {
    start_server -t "$QCOW"
    [[ $(lock_bytes "$QCOW") == "100 101 103 201 203" ]]
    stop_server
    [[ -z $(lock_bytes "$QCOW") ]]

    start_server -t -r "$QCOW"
    [[ $(lock_bytes "$QCOW") == "100 201 203" ]]
    stop_server

    start_server -t -f raw "$RAW"
    # qemu-nbd would hold 100 101 | 203: diskimg does not share writes
    [[ $(lock_bytes "$RAW") == "100 101 201 203" ]]
    stop_server

    start_server -t -r -U -f raw "$RAW"
    [[ $(lock_bytes "$RAW") == "100" ]]
    stop_server
    [[ -z $(lock_bytes "$RAW") ]]
}

@test "locking: the same bytes as qemu-io and qemu-nbd for the same opens" {
    require_tool qemu-io qemu-nbd
    start_qemu_io -r "$QCOW"
    local qemu_ro
    qemu_ro=$(lock_bytes "$QCOW")
    stop_qemu_io
    start_server -t -r "$QCOW"
    [[ $(lock_bytes "$QCOW") == "$qemu_ro" ]]
    stop_server

    start_qemu_nbd "$TEST_DIR/q.sock" -f qcow2 "$QCOW"
    local qemu_rw
    qemu_rw=$(lock_bytes "$QCOW")
    stop_peers
    start_server -t "$QCOW"
    [[ $(lock_bytes "$QCOW") == "$qemu_rw" ]]
}

# ---------------------------------------------------------------------------
# qemu's tools against a diskimg server.

@test "locking: qemu-img and qemu-io are refused an image diskimg serves read-write" {
    require_tool qemu-img qemu-io
    start_server -t "$QCOW"
    run qemu-img info "$QCOW"
    assert_failure
    assert_output --partial 'Failed to get shared "write" lock'
    run qemu-img check "$QCOW"
    assert_failure
    run qemu-io -c 'read 0 4k' "$QCOW"
    assert_failure
    assert_output --partial 'Failed to get "write" lock'
    run qemu-img resize "$QCOW" 32M
    assert_failure
    run qemu-img create -f qcow2 "$QCOW" 1M
    assert_failure
    # -U shares with the writer
    run qemu-img info -U "$QCOW"
    assert_success
    assert_output --partial 'virtual size: 16 MiB'
    # and the image is still what the server serves
    run qemu-io -f raw -c 'read -P 0x5a 0 64k' "$URI"
    assert_success
    refute_output --partial 'Pattern verification failed'

    stop_server
    run qemu-img check "$QCOW"
    assert_success
}

@test "locking: a raw image diskimg serves is refused to qemu-io's writes and qemu-img's readers" {
    require_tool qemu-img qemu-io
    start_server -t -f raw "$RAW"
    run qemu-io -f raw -c 'write 0 4k' "$RAW"
    assert_failure
    assert_output --partial 'Failed to get "write" lock'
    run qemu-img convert -f raw -O raw "$RAW" "$TEST_DIR/copy.img"
    assert_failure
    assert_output --partial 'Failed to get shared "write" lock'
    run qemu-img convert -U -f raw -O raw "$RAW" "$TEST_DIR/copy.img"
    assert_success
}

@test "locking: serve -r lets qemu's readers in and keeps its writers out" {
    require_tool qemu-img qemu-io
    start_server -t -r "$QCOW"
    run qemu-img info "$QCOW"
    assert_success
    run qemu-img check "$QCOW"
    assert_success
    run qemu-img convert -O raw "$QCOW" "$TEST_DIR/copy.img"
    assert_success
    run qemu-io -r -c 'read -P 0x5a 0 64k' "$QCOW"
    assert_success
    run qemu-io -c 'write 0 4k' "$QCOW"
    assert_failure
    assert_output --partial 'Failed to get "write" lock'
    run qemu-img resize "$QCOW" 32M
    assert_failure
    run qemu-img check -r all "$QCOW"
    assert_failure
}

# ---------------------------------------------------------------------------
# diskimg against qemu's tools.

@test "locking: every diskimg subcommand is refused (exit 5) an image qemu-nbd serves read-write" {
    require_tool qemu-nbd
    start_qemu_nbd "$TEST_DIR/q.sock" -f qcow2 "$QCOW"
    local sum
    sum=$(md5sum <"$QCOW")
    for cmd in "info" "map" "check" "bench -c 16"; do
        run -5 "$DISKIMG" $cmd "$QCOW"
        in_use_message "$QCOW"
        assert_output --partial 'failed to get shared "write" lock'
        assert_output --partial '-U (--force-share) reads it anyway'
    done
    run -5 "$DISKIMG" compare "$QCOW" "$RAW"
    in_use_message "$QCOW"
    run -5 "$DISKIMG" convert -O raw "$QCOW" "$TEST_DIR/copy.img"
    in_use_message "$QCOW"
    [[ ! -e $TEST_DIR/copy.img ]]
    run -5 "$DISKIMG" serve -k "$TEST_DIR/d.sock" "$QCOW"
    in_use_message "$QCOW"
    run -5 "$DISKIMG" serve -r -k "$TEST_DIR/d.sock" "$QCOW"
    in_use_message "$QCOW"
    run -5 "$DISKIMG" check -r all "$QCOW"
    in_use_message "$QCOW"
    run -5 "$DISKIMG" bench -w -c 16 "$QCOW"
    assert_output --partial "$QCOW: failed to get \"write\" lock"
    refute_output --partial '-U'
    run -5 "$DISKIMG" resize "$QCOW" 32M
    in_use_message "$QCOW"
    run -5 "$DISKIMG" create -f qcow2 "$QCOW" 1M
    in_use_message "$QCOW"
    run -5 "$DISKIMG" convert -O qcow2 "$RAW" "$QCOW"
    in_use_message "$QCOW"
    run -5 "$DISKIMG" convert -n -O qcow2 "$RAW" "$QCOW"
    in_use_message "$QCOW"
    # the image qemu-nbd serves was not touched
    [[ $(md5sum <"$QCOW") == "$sum" ]]
    run qemu-io -f raw -c 'read -P 0x5a 0 64k' "nbd+unix:///?socket=$TEST_DIR/q.sock"
    assert_success
    refute_output --partial 'Pattern verification failed'
}

@test "locking: -U reads what qemu-nbd writes; serve -r -U serves it" {
    require_tool qemu-nbd nbdinfo
    start_qemu_nbd "$TEST_DIR/q.sock" -f qcow2 "$QCOW"
    run -0 "$DISKIMG" info -U "$QCOW"
    assert_output --partial 'virtual size: 16 MiB'
    run -0 "$DISKIMG" map -U --output=json "$QCOW"
    run -0 "$DISKIMG" check -U "$QCOW"
    run -0 "$DISKIMG" compare -U "$QCOW" "$QCOW"
    run -0 "$DISKIMG" convert -U -O raw "$QCOW" "$TEST_DIR/copy.img"
    run -0 "$DISKIMG" bench -U -c 16 "$QCOW"
    start_server -t -r -U "$QCOW"
    [[ $(lock_bytes "$QCOW") == "100 101 103 201 203" ]] # qemu-nbd's, and our 100
    run nbdinfo --size "$URI"
    assert_success
    assert_output 16777216
}

@test "locking: qemu-nbd -r lets diskimg readers in and keeps its writers out" {
    require_tool qemu-nbd
    start_qemu_nbd "$TEST_DIR/q.sock" -r -f qcow2 "$QCOW"
    run -0 "$DISKIMG" info "$QCOW"
    run -0 "$DISKIMG" check "$QCOW"
    run -0 "$DISKIMG" convert -O raw "$QCOW" "$TEST_DIR/copy.img"
    start_server -t -r "$QCOW"
    stop_server
    run -5 "$DISKIMG" serve -k "$TEST_DIR/d.sock" "$QCOW"
    assert_output --partial "$QCOW: failed to get \"write\" lock"
    run -5 "$DISKIMG" check -r leaks "$QCOW"
}

@test "locking: a raw image qemu-nbd or qemu-io writes is refused to diskimg readers and writers" {
    require_tool qemu-nbd qemu-io
    start_qemu_nbd "$TEST_DIR/q.sock" -f raw "$RAW"
    run -5 "$DISKIMG" info "$RAW"
    in_use_message "$RAW"
    run -5 "$DISKIMG" serve -k "$TEST_DIR/d.sock" -f raw "$RAW"
    run -0 "$DISKIMG" info -U "$RAW"
    stop_peers

    start_qemu_io -f raw "$RAW"
    run -5 "$DISKIMG" convert -n -f raw -O raw "$QCOW" "$RAW"
    in_use_message "$RAW"
    run -5 "$DISKIMG" map "$RAW"
    stop_qemu_io
    run -0 "$DISKIMG" map "$RAW"
}

# ---------------------------------------------------------------------------
# Two diskimg processes.

@test "locking: two diskimg servers: a second writer or reader is refused, readers share" {
    start_server -t "$QCOW"
    run -5 "$DISKIMG" serve -k "$TEST_DIR/d.sock" "$QCOW"
    assert_output "diskimg: $QCOW: failed to get \"write\" lock: another process is using the image"
    run -5 "$DISKIMG" serve -r -k "$TEST_DIR/d.sock" "$QCOW"
    assert_output "diskimg: $QCOW: failed to get shared \"write\" lock: another process is using the image; -U (--force-share) reads it anyway"
    [[ ! -e $TEST_DIR/d.sock ]]
    stop_server

    start_server -t -r "$QCOW"
    start_extra_server "$TEST_DIR/d.sock" -t -r "$QCOW"
    run -0 "$DISKIMG" info "$QCOW"
    run -0 "$DISKIMG" compare "$QCOW" "nbd+unix:///?socket=$TEST_DIR/d.sock"
    run -5 "$DISKIMG" check -r all "$QCOW"
    run -5 "$DISKIMG" serve -k "$TEST_DIR/e.sock" "$QCOW"
}

@test "locking: create over a served image fails (exit 5) and the server keeps serving it" {
    require_tool qemu-io
    start_server -t "$QCOW"
    local sum
    sum=$(md5sum <"$QCOW")
    run -5 "$DISKIMG" create -f qcow2 "$QCOW" 1M
    assert_output "diskimg: $QCOW: failed to get \"write\" lock: another process is using the image"
    run -5 "$DISKIMG" create -f raw "$QCOW" 1M
    [[ $(md5sum <"$QCOW") == "$sum" ]]
    run qemu-io -f raw -c 'read -P 0x5a 0 64k' -c 'write -P 0x33 1M 64k' "$URI"
    assert_success
    refute_output --partial 'Pattern verification failed'
    stop_server
    run qemu-img check "$QCOW"
    assert_success
}

@test "locking: resize and convert into a served image fail (exit 5) and change nothing" {
    start_server -t -f raw "$RAW"
    run -5 "$DISKIMG" resize -f raw "$RAW" 32M
    [[ $(stat -c %s "$RAW") == 16777216 ]]
    make_pattern "$TEST_DIR/src.img" 1048576
    run -5 "$DISKIMG" convert -n -O raw "$TEST_DIR/src.img" "$RAW"
    run -5 "$DISKIMG" convert -O qcow2 "$TEST_DIR/src.img" "$RAW"
    [[ $(stat -c %s "$RAW") == 16777216 ]]
    range_is "$RAW" 0 1048576 00
    # convert into the export itself is how to write it
    run -0 "$DISKIMG" convert -n -O raw "$TEST_DIR/src.img" "$URI"
    stop_server
    cmp -n 1048576 "$TEST_DIR/src.img" "$RAW"
}

@test "locking: serve -r and info share; -U with a write is a usage error" {
    start_server -t -r "$QCOW"
    run -0 "$DISKIMG" info "$QCOW"
    run -0 "$DISKIMG" map "$QCOW"
    run -0 "$DISKIMG" bench -c 16 "$QCOW"
    run -5 "$DISKIMG" bench -w -c 16 "$QCOW"
    stop_server

    run -2 "$DISKIMG" serve -U -k "$TEST_DIR/d.sock" "$QCOW"
    assert_output --partial '-U (--force-share) needs -r'
    run -2 "$DISKIMG" serve -r -U -k "$TEST_DIR/d.sock" --export="name=b,file=$RAW,read-only=off"
    run -2 "$DISKIMG" serve -k "$TEST_DIR/d.sock" --export="name=b,file=$RAW,force-share=on,read-only=off"
    run -2 "$DISKIMG" bench -U -w "$QCOW"
    run -2 "$DISKIMG" resize -U "$QCOW" 32M
    run -2 "$DISKIMG" create -U "$RAW" 1M
    run -1 "$DISKIMG" check -U -r all "$QCOW"
    assert_output --partial '-U (--force-share) cannot be used with -r'
    [[ -z $(lock_bytes "$QCOW") ]]
}

# ---------------------------------------------------------------------------
# Backing files.

@test "locking: a served overlay locks its backing file for readers only" {
    require_tool qemu-img qemu-io
    local base=$TEST_DIR/base.qcow2 top=$TEST_DIR/top.qcow2
    qemu-img create -q -f qcow2 "$base" 16M
    qemu-img create -q -f qcow2 -b "$base" -F qcow2 "$top"
    start_server -t "$top"
    [[ $(lock_bytes "$base") == "100 201 203" ]]
    run qemu-io -c 'write 0 4k' "$base"
    assert_failure
    assert_output --partial 'Failed to get "write" lock'
    run -5 "$DISKIMG" serve -k "$TEST_DIR/d.sock" "$base"
    run -5 "$DISKIMG" convert -n -O qcow2 "$RAW" "$base"
    run qemu-img info "$base"
    assert_success
    run -0 "$DISKIMG" info "$base"
    stop_server

    # a raw backing file too, served read-only
    local rbase=$TEST_DIR/base.img rtop=$TEST_DIR/rtop.qcow2
    truncate -s 16M "$rbase"
    qemu-img create -q -f qcow2 -b "$rbase" -F raw "$rtop"
    start_server -t -r "$rtop"
    [[ $(lock_bytes "$rbase") == "100 201 203" ]]
    run qemu-io -f raw -c 'write 0 4k' "$rbase"
    assert_failure
}

@test "locking: an overlay is refused when qemu-nbd writes its backing file, and the other way" {
    require_tool qemu-img qemu-nbd
    local base=$TEST_DIR/base.qcow2 top=$TEST_DIR/top.qcow2
    qemu-img create -q -f qcow2 "$base" 16M
    qemu-img create -q -f qcow2 -b "$base" -F qcow2 "$top"
    start_qemu_nbd "$TEST_DIR/q.sock" -f qcow2 "$base"
    run -5 "$DISKIMG" serve -k "$TEST_DIR/d.sock" "$top"
    assert_output --partial "backing file: $base: failed to get shared \"write\" lock"
    run -5 "$DISKIMG" map "$top"
    run -0 "$DISKIMG" map -U "$top"
    run -0 "$DISKIMG" info "$top" # metadata of the top image only
    stop_peers

    # qemu-nbd serving the overlay holds its qcow2 backing file the same way
    start_qemu_nbd "$TEST_DIR/q.sock" -f qcow2 "$top"
    run -5 "$DISKIMG" serve -k "$TEST_DIR/d.sock" "$base"
    run -0 "$DISKIMG" serve -t -r --fork --pid-file="$TEST_DIR/d.pid" -k "$TEST_DIR/d.sock" "$base"
    DAEMON_PID=$(cat "$TEST_DIR/d.pid")
}

# ---------------------------------------------------------------------------
# Inside one process, and locks going with the process.

@test "locking: conflicts inside one diskimg process are refused too; readers share" {
    local base=$TEST_DIR/base.img top=$TEST_DIR/top.qcow2
    truncate -s 16M "$base"
    "$DISKIMG" create -q -f qcow2 -b base.img -F raw "$top"
    run -5 "$DISKIMG" convert -n -O raw "$top" "$base"
    assert_output "diskimg: $base: failed to get \"write\" lock: this command already uses the image (as another image, backing file or export)"
    run -0 "$DISKIMG" compare "$QCOW" "$QCOW"
    # the exports of one server: two writers of one qcow2 file, or a live
    # read-only view beside a writer, would see each other's metadata change
    run -5 "$DISKIMG" serve -k "$SOCK" --export="name=a,file=$QCOW" --export="name=b,file=$QCOW"
    assert_output "diskimg: $QCOW: failed to get \"write\" lock: this command already uses the image (as another image, backing file or export)"
    run -5 "$DISKIMG" serve -k "$SOCK" --export="name=a,file=$QCOW" \
        --export="name=b,file=$QCOW,read-only=on"
    run -5 "$DISKIMG" serve -k "$SOCK" --export="name=a,file=$QCOW" \
        --export="name=b,file=$QCOW,format=raw"
    [[ ! -e $SOCK ]]
    # readers share, and raw windows of one disk are written side by side
    start_server -t --export="name=a,file=$QCOW,read-only=on" \
        --export="name=b,file=$QCOW,read-only=on"
    [[ $(lock_bytes "$QCOW") == "100 201 203" ]]
    stop_server
    start_server -t --export="name=a,file=$RAW,size=1M" --export="name=b,file=$RAW,offset=1M"
    [[ $(lock_bytes "$RAW") == "100 101 201 203" ]]
    # to other processes the file is written: they stay out
    run -5 "$DISKIMG" info "$RAW"
}

@test "locking: the locks go when the server is killed with SIGKILL, and with --fork" {
    require_tool qemu-img
    start_server -t "$QCOW"
    [[ -n $(lock_bytes "$QCOW") ]]
    stop_server KILL
    [[ -z $(lock_bytes "$QCOW") ]]
    run qemu-img info "$QCOW"
    assert_success

    run -0 "$DISKIMG" serve --fork --pid-file="$TEST_DIR/d.pid" -t -k "$SOCK" "$QCOW"
    DAEMON_PID=$(cat "$TEST_DIR/d.pid")
    [[ $(lock_bytes "$QCOW") == "100 101 103 201 203" ]]
    run qemu-img info "$QCOW"
    assert_failure
    # a second daemon fails with the same status as in the foreground
    run -5 "$DISKIMG" serve --fork -k "$TEST_DIR/d2.sock" "$QCOW"
    kill -KILL "$DAEMON_PID"
    wait_until 10 server_gone "$DAEMON_PID"
    wait_until 10 no_locks "$QCOW"
    run qemu-img check "$QCOW"
    assert_success
}

@test "locking: convert holds its new target while it copies" {
    require_tool nbdkit
    # A source whose reads wait until the test lets them go, so convert is
    # caught in the middle of the copy whatever the machine's speed.
    cat >"$TEST_DIR/slow.sh" <<EOS
#!/bin/sh
case "\$1" in
get_size) echo 4194304 ;;
pread) while [ ! -e "$TEST_DIR/go" ]; do sleep 0.05; done
       head -c "\$3" /dev/zero | tr '\\000' x ;;
*) exit 2 ;;
esac
EOS
    chmod +x "$TEST_DIR/slow.sh"
    start_nbdkit "$TEST_DIR/k.sock" sh "$TEST_DIR/slow.sh"
    local src="nbd+unix:///?socket=$TEST_DIR/k.sock" dst=$TEST_DIR/dst.qcow2
    "$DISKIMG" convert -f raw -O qcow2 "$src" "$dst" &
    local pid=$!
    wait_until 20 has_locks "$dst"
    [[ $(lock_bytes "$dst") == "100 101 103 201 203" ]]
    run -5 "$DISKIMG" info "$dst"
    run -5 "$DISKIMG" create -f qcow2 "$dst" 1M
    touch "$TEST_DIR/go"
    wait "$pid"
    [[ -z $(lock_bytes "$dst") ]]
    run -0 "$DISKIMG" compare -f raw "$src" "$dst"
}
