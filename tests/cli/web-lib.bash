# tests/cli/web-lib.bash: a real web server for a suite, started by
# scripts/web-dev.sh (nginx, and web-flaky.py for transient failures) on
# free ports of 127.0.0.1 (load after ../helpers).
#
#   web_start [web-dev.sh options]   from setup_file: serves WEB_ROOT
#       ($BATS_FILE_TMPDIR/web/www) and exports web-dev.sh's WEB_*
#       variables (URLs, WEB_TLS_CREDS, PIDs) to every test
#   web_stop                         from teardown_file: stops them by PID
#   web_log                          the server's access log, one request
#       a line: status method "target" range="..." bytes scheme conn=N,
#       written when nginx is done with the request (poll: web_logged)
#
# A missing nginx or certtool fails the suite: CI installs them
# (scripts/dev.sh), and a skipped suite proves nothing.

WEB_DEV=${DISKIMG_SOURCE_ROOT:-$BATS_TEST_DIRNAME/../..}/scripts/web-dev.sh
WEB_DIR=$BATS_FILE_TMPDIR/web

web_start() {
    local out
    out=$("$WEB_DEV" start "$WEB_DIR" "$@" 2>&1 >/dev/null) || {
        echo "$out" >&2
        return 1
    }
    set -a
    # shellcheck disable=SC1091
    source "$WEB_DIR/web.env"
    set +a
}

web_stop() {
    "$WEB_DEV" stop "$WEB_DIR"
}

web_log() {
    cat "$WEB_DIR/access.log"
}

# web_logged REGEX: the access log has a line that matches (grep -E).
web_logged() {
    grep -qE -- "$1" "$WEB_DIR/access.log"
}
