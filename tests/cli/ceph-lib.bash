# tests/cli/ceph-lib.bash: a real Ceph cluster for a suite, one per file.
#
#   setup_file()    { ceph_start; }   # cluster under $BATS_FILE_TMPDIR/ceph,
#                                     # CEPH_CONF exported, pool "rbd" ready
#   teardown_file() { ceph_stop; }    # stops it by the PIDs in its pid files
#
# scripts/ceph-dev.sh does the work: one monitor on free ports (suites run
# two at a time, each with its own cluster), one memstore OSD, cephx on.
# A missing ceph-mon or ceph-osd fails the suite: CI installs them, and a
# skipped Ceph suite would prove nothing.  ceph_osd_stop/ceph_osd_start
# take the OSD away and bring it back (its data is kept) for fault tests.
#
# The ceph and rbd commands are wrapped in timeout: without a manager some
# commands wait forever, and with the OSD down every data command does.

CEPH_DEV=${DISKIMG_SOURCE_ROOT:-${BASH_SOURCE[0]%/*}/../..}/scripts/ceph-dev.sh

# ceph_dev SUBCOMMAND: scripts/ceph-dev.sh on this file's cluster, its
# output in ceph-dev.log (shown when it fails).  fd 3 is closed: the
# daemons outlive the call, and bats waits for every holder of fd 3.
ceph_dev() {
    "$CEPH_DEV" "$1" "$CEPH_DIR" >>"$BATS_FILE_TMPDIR/ceph-dev.log" 2>&1 3>&- || {
        echo "scripts/ceph-dev.sh $1 failed:" >&2
        cat "$BATS_FILE_TMPDIR/ceph-dev.log" >&2
        return 1
    }
}

ceph_start() {
    export CEPH_DIR=$BATS_FILE_TMPDIR/ceph
    export CEPH_CONF=$CEPH_DIR/ceph.conf
    ceph_dev start || {
        ceph_dev stop || true
        return 1
    }
}

ceph_stop() {
    [[ -n ${CEPH_DIR:-} ]] || return 0
    ceph_dev stop
}

ceph_osd_stop() { ceph_dev osd-stop; }
ceph_osd_start() { ceph_dev osd-start; }

# Bounded ceph CLI calls (30 s; a test that means a shorter wait says so
# with its own timeout).
rbd() { timeout -k 5 30 rbd "$@"; }
ceph() { timeout -k 5 30 ceph "$@"; }

bats_require_minimum_version 1.5.0

# nbdsh is "python3 -m nbd": the python3 first on PATH must be the one
# with libnbd's module (PYTHON3 in helpers.bash).
nbdsh() {
    PATH="$(dirname "$PYTHON3"):$PATH" command nbdsh "$@"
}

# nbdsh_within SECONDS ARGS...: nbdsh, killed after SECONDS (for requests
# that may wait for a stopped OSD).
nbdsh_within() {
    PATH="$(dirname "$PYTHON3"):$PATH" timeout -k 5 "$1" nbdsh "${@:2}"
}
