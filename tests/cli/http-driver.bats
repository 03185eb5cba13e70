#!/usr/bin/env bats
# tests/cli/http-driver.bats: what the http protocol driver checks that
# the http suites of the web server (http.bats, http-errors.bats) do not
# reach: a hostile server (http_hostile_server.py) whose every broken
# answer to a range request is refused, a password in the URL never
# printed, no image created at a URL, sslverify=off only when asked and
# driver=https for https URLs only.

load '../helpers'
load 'web-lib'

setup_file() {
    web_start --no-flaky
    head -c 1M /dev/urandom >"$WEB_ROOT/disk.raw"
    qemu-img convert -f raw -O qcow2 "$WEB_ROOT/disk.raw" "$WEB_ROOT/disk.qcow2"
    "$PYTHON3" "$BATS_TEST_DIRNAME/http_hostile_server.py" "$BATS_FILE_TMPDIR/hostile.port" \
        </dev/null 3>&- &
    echo $! >"$BATS_FILE_TMPDIR/hostile.pid"
    wait_until 5 test -s "$BATS_FILE_TMPDIR/hostile.port"
}

teardown_file() {
    local pid
    pid=$(cat "$BATS_FILE_TMPDIR/hostile.pid" 2>/dev/null) && kill "$pid" 2>/dev/null
    web_stop
}

@test "http: a server that breaks the rules of ranges is refused, never trusted" {
    local d=$BATS_TEST_TMPDIR u=http://127.0.0.1:$(cat "$BATS_FILE_TMPDIR/hostile.port") out
    run "$DISKIMG" convert -O raw "$u/good?sig=1" "$d/good.raw"
    assert_success
    "$PYTHON3" -c 'import sys; sys.stdout.buffer.write(bytes(i % 251 for i in range(1 << 20)))' >"$d/want"
    cmp "$d/good.raw" "$d/want"
    # a file smaller than the range asked for may come whole, with 200
    run "$DISKIMG" info "$u/tiny-200"
    assert_line "virtual size: 0.977 KiB (1000 bytes)"
    run "$DISKIMG" convert -O raw "$u/tiny-200" "$d/tiny.raw"
    assert_success
    cmp -n 1000 "$d/tiny.raw" "$d/want"
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

@test "http: a password in the URL and its query string are never printed" {
    local u=${WEB_HTTP/http:\/\//http://user:pa55word@}
    run "$DISKIMG" info "$u/disk.qcow2?X-Amz-Signature=s3cr3t"
    assert_success
    assert_line "image: $WEB_HTTP/disk.qcow2?..."
    assert_line "file format: qcow2"
    run "$DISKIMG" map "$u/disk.qcow2?X-Amz-Signature=s3cr3t"
    assert_success
    assert_output --partial " $WEB_HTTP/disk.qcow2?..."
    run "$DISKIMG" info "$u/missing/x?X-Amz-Signature=s3cr3t"
    assert_failure 1
    assert_output "diskimg: $WEB_HTTP/missing/x?...: HTTP 404 Not Found"
    refute_output --partial pa55word
}

@test "http: read-only; no image is created at a URL" {
    run "$DISKIMG" resize "$WEB_HTTP/disk.raw" 2M
    assert_failure 1
    assert_output --partial "$WEB_HTTP/disk.raw: HTTP images are read-only"
    run "$DISKIMG" convert -O raw "$WEB_ROOT/disk.raw" "$WEB_HTTP/new.raw?sig=s3cr3t"
    assert_failure 1
    assert_output "diskimg: $WEB_HTTP/new.raw?...: http images are read-only; diskimg cannot create one"
    run "$DISKIMG" create -f qcow2 "$WEB_HTTPS/new.qcow2" 1M
    assert_failure 1
    [ ! -e "$WEB_ROOT/new.raw" ] && [ ! -e "$WEB_ROOT/new.qcow2" ]
    [ ! -e http: ] && [ ! -e https: ]
}

@test "https: sslverify=off only when asked; driver=https takes https URLs only" {
    run "$DISKIMG" info --image-opts "driver=https,url=$WEB_HTTPS/disk.raw"
    assert_failure 1
    assert_output --partial "TLS: the server's certificate is not trusted"
    run "$DISKIMG" info --image-opts "driver=https,url=$WEB_HTTPS/disk.raw,sslverify=off"
    assert_success
    assert_line "virtual size: 1 MiB (1048576 bytes)"
    run "$DISKIMG" info --image-opts "driver=https,url=$WEB_HTTP/disk.raw"
    assert_failure 1
    assert_output "diskimg: $WEB_HTTP/disk.raw: not an https:// URL"
}
