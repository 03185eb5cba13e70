#!/usr/bin/env bash
# scripts/ceph-dev.sh: a throwaway single-host Ceph cluster for tests.
#
#   scripts/ceph-dev.sh start DIR      start a cluster whose files all live
#                                      in DIR (created; must be empty); when
#                                      it returns, pool "rbd" is usable
#   scripts/ceph-dev.sh stop DIR       stop it by PID (OSD first, then the
#                                      monitor); idempotent
#   scripts/ceph-dev.sh env DIR        print the line that points the ceph
#                                      tools, qemu-img and diskimg at it
#   scripts/ceph-dev.sh osd-stop DIR   stop the OSD only (its data is kept)
#   scripts/ceph-dev.sh osd-start DIR  start it again; returns once it is up
#
# One monitor, one memstore OSD (data in RAM, saved across an OSD restart),
# no manager, cephx on, no systemd, no root.  The monitor's two ports are
# chosen free at start, so that clusters in different DIRs run side by
# side; the OSD picks its own.  Daemons are found by the pid files in DIR.
# Needs Debian's ceph-mon, ceph-osd and ceph-common.
#
# Environment: CEPH_DEV_OSD_BYTES, the OSD's capacity, held in RAM
# (default 1 GiB); CEPH_DEV_TIMEOUT, seconds any one ceph command may take
# (default 30).
set -euo pipefail

# Every call to a ceph tool is bounded: without a manager, a manager
# command would wait forever, and so would any command if the cluster broke.
CLI_TIMEOUT=${CEPH_DEV_TIMEOUT:-30}
OSD_BYTES=${CEPH_DEV_OSD_BYTES:-1073741824}

die() {
    echo "ceph-dev.sh: $*" >&2
    exit 1
}

usage() {
    sed -n '2,22p' "$0" >&2
    exit 2
}

# cli CMD...: a ceph CLI call against this cluster, bounded in time.
cli() {
    CEPH_CONF=$DIR/ceph.conf timeout -k 5 "$CLI_TIMEOUT" "$@"
}

# listening PORT: something on this host listens on TCP PORT (v4 or v6).
listening() {
    local hex
    hex=$(printf ':%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v p="$hex" 'substr($2, length($2) - 4) == p && $4 == "0A" { f = 1 } END { exit !f }'
}

# free_port: a port nobody listens on, below the kernel's ephemeral range
# (where outgoing connections take theirs) and above the 6800-7300 the
# OSD binds in.  Two clusters starting at once may still pick the same
# one; start retries with new ports when the monitor cannot bind.
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 12000))
        listening "$p" || {
            echo "$p"
            return
        }
    done
}

# alive PID: the process exists and is not a zombie.  The daemons fork and
# are re-parented to PID 1, which may reap them seconds late: a zombie has
# already stopped.
alive() {
    local state
    [[ -r /proc/$1/stat ]] || return 1
    state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [[ -n $state && $state != Z ]]
}

# daemon_pid NAME: the PID in DIR/NAME.pid if that process is still this
# cluster's daemon (its command line names DIR's ceph.conf), else nothing.
# The check keeps a stale pid file from making us signal a stranger.
daemon_pid() {
    local f=$DIR/$1.pid pid
    [[ -f $f ]] || return 0
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    alive "$pid" || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$DIR/ceph.conf" || return 0
    echo "$pid"
}

# gone PID: wait up to 10 s for the process to end; false if it did not.
gone() {
    local i
    for ((i = 0; i < 200; i++)); do
        alive "$1" || return 0
        sleep 0.05
    done
    return 1
}

# stop_daemon NAME [SIGNAL]: SIGNAL (default TERM), and SIGKILL if the
# daemon is still there 10 s later.
stop_daemon() {
    local pid sig=${2:-TERM}
    pid=$(daemon_pid "$1")
    if [[ -n $pid ]]; then
        kill -"$sig" "$pid" 2>/dev/null || true
        if ! gone "$pid"; then
            echo "ceph-dev.sh: $1 (pid $pid) ignored SIG$sig for 10 s, killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
            gone "$pid" || die "$1 (pid $pid) survived SIGKILL"
        fi
    fi
    rm -f "$DIR/$1.pid"
}

write_conf() {
    local fsid=$1 v2=$2 v1=$3
    cat >"$DIR/ceph.conf" <<EOF
# Written by scripts/ceph-dev.sh: a throwaway test cluster.
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$v2,v1:127.0.0.1:$v1]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $DIR/keyring
run dir = $DIR
crash dir = $DIR/crash
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon data avail crit = 1
paxos propose interval = 0.1
# No manager runs: without this the monitor reports MGR_DOWN after 120 s.
mon mgr mkfs grace = 31536000

[client]
# A client with requests for a down OSD asks for a new OSD map on its
# tick: it notices an OSD that came back within 0.5 s, not 5 s.
objecter tick interval = 0.5

[mon]
mon data = $DIR/mon.\$id
mgr initial modules =
mon cluster log file = $DIR/cluster.log
admin socket = $DIR/\$name.asok
pid file = $DIR/\$name.pid
log file = $DIR/\$name.log
# A port taken by another cluster fails the start at once (start picks
# new ports) instead of after three 5 s retries.
ms bind retry count = 1

[osd]
osd data = $DIR/osd.\$id
admin socket = $DIR/\$name.asok
pid file = $DIR/\$name.pid
log file = $DIR/\$name.log
osd objectstore = memstore
memstore device bytes = $OSD_BYTES
# Memstore saves its objects only on a clean shutdown: without this an
# OSD restart loses every image.
osd fast shutdown = false
osd memory target = 939524096
EOF
}

write_keyring() {
    local k=$DIR/keyring
    # CEPH_CONF=/dev/null: "-n mon." would otherwise read our [mon] section
    # and leave a stray log behind.
    CEPH_CONF=/dev/null ceph-authtool "$k" --create-keyring --gen-key -n mon. \
        --cap mon 'allow *' >/dev/null
    CEPH_CONF=/dev/null ceph-authtool "$k" --gen-key -n client.admin --cap mon 'allow *' \
        --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
    CEPH_CONF=/dev/null ceph-authtool "$k" --gen-key -n osd.0 --cap mon 'allow profile osd' \
        --cap mgr 'allow profile osd' --cap osd 'allow *' >/dev/null
    chmod 600 "$k"
}

# start_mon: conf, monmap and monitor store on two free ports, then the
# monitor.  Returns non-zero when the monitor did not start (a port taken).
start_mon() {
    local fsid=$1 v2 v1
    v2=$(free_port)
    v1=$(free_port)
    [[ $v1 != "$v2" ]] || return 1
    rm -rf "$DIR/mon.a" "$DIR/monmap"
    write_conf "$fsid" "$v2" "$v1"
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$v2,v1:127.0.0.1:$v1]" \
        "$DIR/monmap" >/dev/null
    ceph-mon -c "$DIR/ceph.conf" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring" \
        >>"$DIR/start.log" 2>&1 || die "monitor mkfs failed (see $DIR/start.log)"
    ceph-mon -c "$DIR/ceph.conf" -i a </dev/null >>"$DIR/start.log" 2>&1
}

# start_osd: the OSD daemon (after its mkfs).  Its parent returns once
# the OSD has initialised.
start_osd() {
    ceph-osd -c "$DIR/ceph.conf" -i 0 </dev/null >>"$DIR/start.log" 2>&1 ||
        die "the OSD did not start (see $DIR/start.log and $DIR/osd.0.log)"
}

# wait_osd_up: until the OSD is up in the OSD map, which is when clients
# send it requests again.
wait_osd_up() {
    local i
    for ((i = 0; i < 300; i++)); do
        cli ceph osd dump -f json 2>/dev/null | grep -q '"osd":0,"uuid":"[^"]*","up":1' && return 0
        sleep 0.1
    done
    die "the OSD is not up after 30 s (see $DIR/osd.0.log)"
}

cmd_start() {
    local tool
    for tool in ceph-mon ceph-osd ceph ceph-authtool monmaptool; do
        command -v "$tool" >/dev/null ||
            die "$tool is missing: needs ceph-mon, ceph-osd and ceph-common (scripts/dev.sh deps)"
    done
    [[ $OSD_BYTES =~ ^[1-9][0-9]*$ ]] || die "CEPH_DEV_OSD_BYTES must be a number of bytes"
    mkdir -p "$DIR"
    [[ -z $(ls -A "$DIR") ]] || die "$DIR is not empty (stop the cluster there and remove it first)"
    local t0 fsid osd_uuid attempt out
    t0=$EPOCHREALTIME
    fsid=$(cat /proc/sys/kernel/random/uuid)
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    mkdir -p "$DIR/crash" "$DIR/osd.0"
    write_keyring
    for attempt in 1 2 3 4 5; do
        start_mon "$fsid" && break
        [[ $attempt -lt 5 ]] || die "the monitor did not start (see $DIR/start.log and $DIR/mon.a.log)"
    done
    # Both commands in one ceph process (it reads commands from stdin): a
    # Python start-up less.  It exits 0 whatever happens, so its output
    # is checked.
    out=$(printf 'osd new %s 0\nosd pool create rbd 8 8\n' "$osd_uuid" | cli ceph 2>&1) || true
    [[ $out == *"pool 'rbd' created"* && $out != *Error* ]] ||
        die "cannot register the OSD or create pool rbd: $out"
    ceph-osd -c "$DIR/ceph.conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$DIR/start.log" 2>&1 ||
        die "OSD mkfs failed (see $DIR/start.log)"
    start_osd
    # rbd pool init writes an object: it returns once the OSD is up and the
    # PGs are active.
    cli rbd pool init rbd || die "rbd pool init failed"
    echo "ceph-dev.sh: cluster up in $(awk -v a="$t0" -v b="$EPOCHREALTIME" \
        'BEGIN { printf "%.1f", b - a }') s; use it with:"
    echo "    export CEPH_CONF=$DIR/ceph.conf"
    echo "ceph-dev.sh: stop it with: $0 stop $DIR"
}

cmd_stop() {
    # The OSD first, and killed: its data goes anyway, so it need not save
    # it (osd fast shutdown is off for osd-stop), nor tell the monitor it
    # goes down, which waits up to 5 s when the monitor is gone.
    stop_daemon osd.0 KILL
    stop_daemon mon.a
}

[[ $# -eq 2 ]] || usage
[[ -n $2 ]] || usage
DIR=$(realpath -m -- "$2")
case "$1" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    env) echo "export CEPH_CONF=$DIR/ceph.conf" ;;
    osd-stop) stop_daemon osd.0 ;;
    osd-start)
        [[ -f $DIR/ceph.conf ]] || die "no cluster in $DIR"
        [[ -z $(daemon_pid osd.0) ]] || die "the OSD in $DIR is already running"
        start_osd
        wait_osd_up
        ;;
    *) usage ;;
esac
