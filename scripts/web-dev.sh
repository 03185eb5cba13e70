#!/usr/bin/env bash
# scripts/web-dev.sh: a real web server for the http(s) tests and benches,
# nginx from Debian (nginx-light) on 127.0.0.1, run as the calling user,
# no systemd, on free ports it picks.
#
#   scripts/web-dev.sh start DIR [--root PATH] [--no-tls] [--no-flaky]
#   scripts/web-dev.sh stop DIR
#
# start serves PATH (default DIR/www, made empty) and keeps its state in
# DIR: nginx.conf, nginx.pid, error.log, access.log (one line a request:
# status, method, target, Range header, bytes sent, scheme, connection
# number), and web.env, the variables below as shell assignments (also
# printed on stdout):
#
#   WEB_HTTP       http://127.0.0.1:PORT        the plain server
#   WEB_HTTPS      https://127.0.0.1:PORT       the TLS server (not with --no-tls)
#   WEB_TLS_CREDS  DIR/tls: ca-cert.pem (the test CA, for --tls-creds),
#                  server-cert.pem, server-key.pem (CN and DNS localhost,
#                  IP 127.0.0.1), made with certtool
#   WEB_OTHER_CA   DIR/tls-other: ca-cert.pem of a CA that did not sign it
#   WEB_FLAKY      http://127.0.0.1:PORT        scripts/web-flaky.py (not
#                  with --no-flaky): /fail/N/F answers 503 N times, then
#                  serves F; /drop/N/F closes the connection N times;
#                  /busy/N/S/F answers 429 with Retry-After: S N times
#   WEB_REFUSED    http://127.0.0.1:PORT        a port nothing listened on
#   WEB_ROOT, WEB_NGINX_PID, WEB_FLAKY_PID
#
# On both nginx servers (paths relative to the served directory; a query
# string is ignored, as object stores' pre-signed URLs need):
#   /F             F, with byte ranges
#   /norange/F     F, ignoring Range (max_ranges 0: always 200 and all of it)
#   /forbidden/F   403
#   /missing/F     404 (anything that does not exist is a 404)
#   /chain/F       302 to /chain2/F, 307 (relative Location) to /chain3/F,
#                  308 to /F
#   /loop/F        302 to itself, for ever
#   /to-https/F    (http only) 301 to WEB_HTTPS/F
#   /to-http/F     (https only) 302 to WEB_HTTP/F
#
# stop stops what start started, by the PIDs in DIR's pid files (checked
# to be those processes), and waits for them; stopping a stopped or never
# started DIR does nothing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3

die() {
    echo "web-dev: $*" >&2
    exit 1
}

usage() {
    sed -n '6,7p' "$0" | sed 's/^#  *//' >&2
    exit 2
}

# free_port: a TCP port of 127.0.0.1 nothing listens on now.  Another
# process may take it before we do: start retries when a bind fails.
free_port() {
    "$PY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# detached CMD...: CMD with no terminal and none of the caller's extra
# descriptors: bats waits for every holder of its fd 3 to exit.
detached() {
    "$@" </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-
}

# make_tls DIR: a test CA, a server certificate it signs, and another CA.
make_tls() {
    local d=$1 t=$1/tls g=$1/tls/gen o=$1/tls-other
    mkdir -p "$g" "$o/gen"
    (
        umask 077
        set -e
        printf '%s\n' 'cn = "diskimg web test CA"' ca cert_signing_key crl_signing_key \
            'expiration_days = 30' >"$g/ca.info"
        printf '%s\n' 'organization = "diskimg tests"' 'cn = "localhost"' \
            'dns_name = "localhost"' 'ip_address = "127.0.0.1"' tls_www_server \
            encryption_key signing_key 'expiration_days = 30' >"$g/server.info"
        certtool --generate-privkey --key-type=ecdsa --outfile "$g/ca-key.pem"
        certtool --generate-self-signed --load-privkey "$g/ca-key.pem" \
            --template "$g/ca.info" --outfile "$t/ca-cert.pem"
        certtool --generate-privkey --key-type=ecdsa --outfile "$t/server-key.pem"
        certtool --generate-certificate --load-privkey "$t/server-key.pem" \
            --load-ca-certificate "$t/ca-cert.pem" --load-ca-privkey "$g/ca-key.pem" \
            --template "$g/server.info" --outfile "$t/server-cert.pem"
        certtool --generate-privkey --key-type=ecdsa --outfile "$o/gen/ca-key.pem"
        certtool --generate-self-signed --load-privkey "$o/gen/ca-key.pem" \
            --template "$g/ca.info" --outfile "$o/ca-cert.pem"
    ) >"$d/certtool.log" 2>&1 || {
        cat "$d/certtool.log" >&2
        die "certtool failed (gnutls-bin)"
    }
}

# write_locations DIR ROOT: the locations both servers have.
write_locations() {
    cat >"$1/locations.conf" <<EOF
location / { }
location /norange/ { alias $2/; max_ranges 0; }
location /forbidden/ { return 403; }
location /loop/ { rewrite ^ \$uri redirect; }
location ~ ^/chain/(.*)\$ { return 302 /chain2/\$1\$is_args\$args; }
location ~ ^/chain2/(.*)\$ { absolute_redirect off; return 307 /chain3/\$1\$is_args\$args; }
location ~ ^/chain3/(.*)\$ { return 308 /\$1\$is_args\$args; }
EOF
}

# write_conf DIR ROOT HTTP-PORT HTTPS-PORT (0: none)
write_conf() {
    local d=$1 root=$2 p=$3 ps=$4 user=""
    # Run as root, nginx's workers would become "nobody", who cannot read
    # a test's private directory: they stay the caller.
    [[ $(id -u) -ne 0 ]] || user="user $(id -un) $(id -gn);"
    mkdir -p "$d/tmp"
    write_locations "$d" "$root"
    {
        cat <<EOF
$user
daemon on;
worker_processes 2;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 512; }
http {
    log_format web '\$status \$request_method "\$request_uri" range="\$http_range" \$body_bytes_sent \$scheme conn=\$connection';
    access_log $d/access.log web;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    types { }
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    server_tokens off;
    server {
        listen 127.0.0.1:$p;
        root $root;
        include $d/locations.conf;
        location ~ ^/to-https/(.*)\$ { return 301 https://127.0.0.1:$ps/\$1\$is_args\$args; }
    }
EOF
        [[ $ps == 0 ]] || cat <<EOF
    server {
        listen 127.0.0.1:$ps ssl;
        ssl_certificate $d/tls/server-cert.pem;
        ssl_certificate_key $d/tls/server-key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        root $root;
        include $d/locations.conf;
        location ~ ^/to-http/(.*)\$ { return 302 http://127.0.0.1:$p/\$1\$is_args\$args; }
    }
EOF
        echo "}"
    } >"$d/nginx.conf"
}

# wait_file FILE: until FILE is not empty, 5 s at most.
wait_file() {
    local i
    for ((i = 0; i < 250; i++)); do
        [[ -s $1 ]] && return 0
        sleep 0.02
    done
    return 1
}

# start_nginx DIR ROOT TLS: nginx on two free ports, retried when another
# process took one first.  nginx binds before it daemonizes: its exit
# status says whether it listens.
start_nginx() {
    local d=$1 root=$2 tls=$3 try p ps=0
    for ((try = 0; try < 5; try++)); do
        p=$(free_port)
        [[ $tls == 0 ]] || ps=$(free_port)
        [[ $p != "$ps" ]] || continue
        write_conf "$d" "$root" "$p" "$ps"
        if detached nginx -q -p "$d" -e "$d/error.log" -c "$d/nginx.conf" >"$d/start.log" 2>&1; then
            wait_file "$d/nginx.pid" || die "nginx wrote no $d/nginx.pid (see $d/error.log)"
            HTTP_PORT=$p HTTPS_PORT=$ps
            return 0
        fi
        grep -q "Address already in use" "$d/start.log" || {
            cat "$d/start.log" >&2
            die "nginx did not start (config $d/nginx.conf)"
        }
    done
    die "nginx found no free port in 5 tries"
}

start_flaky() {
    local d=$1 root=$2 pid
    rm -f "$d/flaky.port"
    # a simple command: $! is python's PID, not a subshell's
    "$PY" "$HERE/web-flaky.py" "$root" "$d/flaky.port" </dev/null >/dev/null 2>>"$d/flaky.log" \
        3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
    pid=$!
    echo "$pid" >"$d/flaky.pid"
    wait_file "$d/flaky.port" || die "web-flaky.py did not start (see $d/flaky.log)"
    FLAKY_PID=$pid
    FLAKY_PORT=$(<"$d/flaky.port")
}

# alive PID PATTERN: PID runs and its command line has PATTERN (a PID
# file may outlive its process, and the PID be someone else's now).
alive() {
    local state
    [[ -r /proc/$1/cmdline ]] || return 1
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ $state != Z ]] || return 1
    tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$2"
}

# stop_pid FILE PATTERN: TERM the process in FILE, KILL it after 5 s.
stop_pid() {
    local f=$1 pat=$2 pid i
    [[ -s $f ]] || return 0
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] || die "$f holds no PID"
    if alive "$pid" "$pat"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 250; i++)); do
            alive "$pid" "$pat" || break
            sleep 0.02
        done
        ! alive "$pid" "$pat" || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

cmd_stop() {
    local d=$1
    [[ -d $d ]] || return 0
    d=$(cd "$d" && pwd)
    stop_pid "$d/nginx.pid" "$d/nginx.conf"
    stop_pid "$d/flaky.pid" "web-flaky.py"
}

cmd_start() {
    local d=$1 root="" tls=1 flaky=1
    shift
    while [[ $# -gt 0 ]]; do
        case $1 in
            --root) root=${2:?--root needs a directory}; shift ;;
            --no-tls) tls=0 ;;
            --no-flaky) flaky=0 ;;
            *) usage ;;
        esac
        shift
    done
    command -v nginx >/dev/null || die "nginx is missing (scripts/dev.sh deps installs nginx-light)"
    [[ $tls == 0 ]] || command -v certtool >/dev/null ||
        die "certtool is missing (scripts/dev.sh deps installs gnutls-bin)"
    mkdir -p "$d"
    d=$(cd "$d" && pwd)
    for f in nginx.pid flaky.pid; do
        [[ ! -s $d/$f ]] || ! alive "$(<"$d/$f")" "" ||
            die "already running in $d (scripts/web-dev.sh stop $d first)"
    done
    if [[ -z $root ]]; then
        root=$d/www
        mkdir -p "$root"
    fi
    [[ -d $root ]] || die "$root is not a directory"
    root=$(cd "$root" && pwd)
    # a start that fails half-way stops what it started
    trap 'cmd_stop "$d"' EXIT
    [[ $tls == 0 ]] || make_tls "$d"
    HTTP_PORT="" HTTPS_PORT=0 FLAKY_PID="" FLAKY_PORT=""
    start_nginx "$d" "$root" "$tls"
    [[ $flaky == 0 ]] || start_flaky "$d" "$root"
    {
        printf 'WEB_ROOT=%q\n' "$root"
        printf 'WEB_HTTP=%q\n' "http://127.0.0.1:$HTTP_PORT"
        if [[ $tls == 1 ]]; then
            printf 'WEB_HTTPS=%q\n' "https://127.0.0.1:$HTTPS_PORT"
            printf 'WEB_TLS_CREDS=%q\n' "$d/tls"
            printf 'WEB_OTHER_CA=%q\n' "$d/tls-other"
        fi
        if [[ $flaky == 1 ]]; then
            printf 'WEB_FLAKY=%q\n' "http://127.0.0.1:$FLAKY_PORT"
            printf 'WEB_FLAKY_PID=%q\n' "$FLAKY_PID"
        fi
        printf 'WEB_REFUSED=%q\n' "http://127.0.0.1:$(free_port)"
        printf 'WEB_NGINX_PID=%q\n' "$(<"$d/nginx.pid")"
    } >"$d/web.env"
    cat "$d/web.env"
    {
        echo "web-dev: serving $root on http://127.0.0.1:$HTTP_PORT"
        [[ $tls == 0 ]] ||
            echo "web-dev: and https://127.0.0.1:$HTTPS_PORT (diskimg info --tls-creds $d/tls URL)"
        echo "web-dev: source $d/web.env for the URLs; scripts/web-dev.sh stop $d stops it"
    } >&2
    trap - EXIT
}

[[ $# -ge 2 ]] || usage
case $1 in
    start) shift && cmd_start "$@" ;;
    stop) [[ $# -eq 2 ]] || usage && cmd_stop "$2" ;;
    *) usage ;;
esac
