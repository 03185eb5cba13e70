#!/usr/bin/env bats
# tests/cli/http-driver.bats: the http protocol driver's own checks, each
# against a real nginx started for this file (ports picked free): size
# and range support up front, HTTP errors with status and URL, no query
# string in any output, read-only, redirects only to https, TLS verified
# (system CAs refuse a private CA; --tls-creds trusts it), and a hostile
# server (http_hostile_server.py) whose every broken answer is refused.  The http
# suites of the web server helper cover the subcommands at large.

load '../helpers'

free_port() {
    "$PYTHON3" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

setup_file() {
    local d=$BATS_FILE_TMPDIR
    command -v nginx >/dev/null || { echo "nginx is missing (nginx-light)" >&2; return 1; }
    mkdir -p "$d/www" "$d/tmp" "$d/creds"
    PLAIN=$(free_port) TLS=$(free_port) NORANGE=$(free_port)
    export PLAIN TLS NORANGE
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca-key.pem" -out "$d/creds/ca-cert.pem" \
        -days 2 -subj "/CN=diskimg test CA" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout "$d/key.pem" -out "$d/csr.pem" \
        -subj "/CN=127.0.0.1" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' >"$d/ext.cnf"
    openssl x509 -req -in "$d/csr.pem" -CA "$d/creds/ca-cert.pem" -CAkey "$d/ca-key.pem" \
        -CAcreateserial -out "$d/cert.pem" -days 2 -extfile "$d/ext.cnf" 2>/dev/null
    head -c 1M /dev/urandom >"$d/www/disk.raw"
    qemu-img convert -f raw -O qcow2 "$d/www/disk.raw" "$d/www/disk.qcow2"
    # workers as this user: the files are in a private directory
    cat >"$d/nginx.conf" <<CONF
user $(id -un) $(id -gn);
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $d/tmp; proxy_temp_path $d/tmp; fastcgi_temp_path $d/tmp;
  uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
  server {
    listen 127.0.0.1:$PLAIN;
    root $d/www;
    location /to-http { return 302 http://127.0.0.1:$PLAIN/disk.raw; }
    location /to-https { return 302 https://127.0.0.1:$TLS/disk.raw; }
    location /busy { return 503; }
  }
  server {
    listen 127.0.0.1:$TLS ssl;
    ssl_certificate $d/cert.pem;
    ssl_certificate_key $d/key.pem;
    root $d/www;
  }
  server {
    listen 127.0.0.1:$NORANGE;
    root $d/www;
    max_ranges 0;
  }
}
CONF
    nginx -c "$d/nginx.conf" -p "$d" -g 'daemon off;' 2>"$d/nginx.err" 3>&- &
    echo $! >"$d/nginx.pid.bats"
    "$PYTHON3" "$BATS_TEST_DIRNAME/http_hostile_server.py" "$d/hostile.port" 3>&- &
    echo $! >"$d/hostile.pid"
    wait_until 5 test -s "$d/hostile.port" || return 1
    for _ in $(seq 50); do
        curl -s -o /dev/null "http://127.0.0.1:$PLAIN/" && return 0
        sleep 0.1
    done
    cat "$d/nginx.err" >&2
    return 1
}

teardown_file() {
    local pid f
    for f in nginx.pid.bats hostile.pid; do
        pid=$(cat "$BATS_FILE_TMPDIR/$f" 2>/dev/null) && kill "$pid" 2>/dev/null || true
    done
}

@test "http: size, probing and reads from the first and last bytes" {
    local u=http://127.0.0.1:$PLAIN
    run "$DISKIMG" info "$u/disk.qcow2"
    assert_success
    assert_line "file format: qcow2"
    assert_line "virtual size: 1 MiB (1048576 bytes)"
    "$DISKIMG" convert -O raw "$u/disk.qcow2" "$BATS_TEST_TMPDIR/out.raw"
    cmp "$BATS_TEST_TMPDIR/out.raw" "$BATS_FILE_TMPDIR/www/disk.raw"
    run "$DISKIMG" compare "$u/disk.raw" "$BATS_FILE_TMPDIR/www/disk.qcow2"
    assert_success
}

@test "http: 404, 503 and a server that ignores Range are one-line errors" {
    local u=http://127.0.0.1:$PLAIN
    run "$DISKIMG" info "$u/missing.raw"
    assert_failure 1
    assert_output "diskimg: $u/missing.raw: HTTP 404 Not Found"
    run "$DISKIMG" info "$u/busy"
    assert_failure 1
    assert_output "diskimg: $u/busy: HTTP 503 Service Unavailable (gave up after 6 attempts)"
    run "$DISKIMG" info "http://127.0.0.1:$NORANGE/disk.raw"
    assert_failure 1
    assert_output --partial "http://127.0.0.1:$NORANGE/disk.raw: the server ignores Range requests"
    [ "${#lines[@]}" -eq 1 ]
}

@test "http: the query string and the password are never printed" {
    local u="http://user:pass@127.0.0.1:$PLAIN"
    run "$DISKIMG" info "$u/disk.qcow2?X-Amz-Signature=s3cr3t"
    assert_success
    assert_line "image: http://127.0.0.1:$PLAIN/disk.qcow2?..."
    run "$DISKIMG" map --output=json "$u/disk.qcow2?X-Amz-Signature=s3cr3t"
    assert_success
    run "$DISKIMG" info "$u/missing?X-Amz-Signature=s3cr3t"
    assert_failure 1
    refute_output --partial s3cr3t
    refute_output --partial pass
}

@test "http: read-only; no image is created at a URL" {
    local u=http://127.0.0.1:$PLAIN
    run "$DISKIMG" resize "$u/disk.raw" 2M
    assert_failure 1
    assert_output --partial "HTTP images are read-only"
    run "$DISKIMG" convert -O raw "$BATS_FILE_TMPDIR/www/disk.raw" "$u/new.raw"
    assert_failure 1
    assert_output --partial "read-only"
    [ ! -e "$BATS_FILE_TMPDIR/www/new.raw" ]
}

@test "https: verified, --tls-creds trusts its CA, redirects only to https" {
    local s=https://127.0.0.1:$TLS u=http://127.0.0.1:$PLAIN
    run "$DISKIMG" info "$s/disk.raw"
    assert_failure 1
    assert_output --partial "TLS: the server's certificate is not trusted"
    run "$DISKIMG" info --tls-creds "$BATS_FILE_TMPDIR/creds" "$s/disk.qcow2"
    assert_success
    assert_line "file format: qcow2"
    run "$DISKIMG" info --tls-creds "$BATS_FILE_TMPDIR/creds" "$u/to-https"
    assert_success
    # sslverify=off only when asked; the https driver takes https URLs only
    run "$DISKIMG" info --image-opts "driver=https,url=$s/disk.raw,sslverify=off"
    assert_success
    assert_line "virtual size: 1 MiB (1048576 bytes)"
    run "$DISKIMG" info --image-opts "driver=https,url=$u/disk.raw"
    assert_failure 1
    assert_output "diskimg: $u/disk.raw: not an https:// URL"
    run "$DISKIMG" info "$u/to-http"
    assert_failure 1
    assert_output "diskimg: $u/to-http: the server redirects to a URL that is not https (redirects are followed only to https)"
}

@test "http: a server that breaks the rules of ranges is refused, never trusted" {
    local d=$BATS_TEST_TMPDIR u=http://127.0.0.1:$(cat "$BATS_FILE_TMPDIR/hostile.port") out
    run "$DISKIMG" convert -O raw "$u/good?sig=1" "$d/good.raw"
    assert_success
    "$PYTHON3" -c 'import sys; sys.stdout.buffer.write(bytes(i % 251 for i in range(1 << 20)))' >"$d/want"
    cmp "$d/good.raw" "$d/want"
    for out in "wrong-start:answered bytes 1-262143 for a request of bytes 0-262143" \
               "no-range:206 answer has no Content-Range header" \
               "bad-range:206 answer has an invalid Content-Range header" \
               "star-total:does not say the file's size" \
               "overflow:sent more bytes than the range asked for" \
               "short:(gave up after 6 attempts)" \
               "shrink:the file's size changed on the server (2097152 bytes, was 1048576)" \
               "replaced:HTTP 412 Precondition Failed (the file changed on the server" \
               "encoded:the server encoded its answer (Content-Encoding)" \
               "huge:the server says the file has 18446744073709551615 bytes: too large"; do
        run "$DISKIMG" convert -O raw "$u/${out%%:*}?sig=s3cr3t" "$d/out.raw"
        assert_failure 1
        assert_output --partial "diskimg: $u/${out%%:*}?...: "
        assert_output --partial "${out#*:}"
        refute_output --partial s3cr3t
        [ "${#lines[@]}" -eq 1 ]
        [ ! -e "$d/out.raw" ]
    done
}
