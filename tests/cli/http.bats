#!/usr/bin/env bats
# http(s) sources read from a real nginx (scripts/web-dev.sh).

load '../helpers'
load 'web-lib'

setup_file() {
    web_start
    head -c 100000 /dev/urandom >"$WEB_ROOT/small.bin"
}

teardown_file() {
    web_stop
}

@test "the test web server: ranges, TLS with the test CA, no ranges, errors, redirects, transient failures" {
    local f=$WEB_ROOT/small.bin out=$BATS_TEST_TMPDIR/out
    curl -sf -r 10-19 -o "$out" "$WEB_HTTP/small.bin?X-Sig=secret"
    cmp "$out" <(tail -c +11 "$f" | head -c 10)
    curl -sf --cacert "$WEB_TLS_CREDS/ca-cert.pem" -o "$out" "$WEB_HTTPS/small.bin"
    cmp "$out" "$f"
    run curl -s --cacert "$WEB_OTHER_CA/ca-cert.pem" -o /dev/null "$WEB_HTTPS/small.bin"
    assert_equal "$status" 60
    run curl -s -r 10-19 -o /dev/null -w '%{http_code} %{size_download}' "$WEB_HTTP/norange/small.bin"
    assert_output "200 100000"
    run curl -s -o /dev/null -w '%{http_code}' "$WEB_HTTP/forbidden/small.bin"
    assert_output 403
    run curl -s -o /dev/null -w '%{http_code}' "$WEB_HTTPS/missing/small.bin" -k
    assert_output 404
    run curl -s -L --cacert "$WEB_TLS_CREDS/ca-cert.pem" -o /dev/null \
        -w '%{http_code} %{num_redirects} %{url_effective}' "$WEB_HTTP/to-https/chain/small.bin?a=b"
    assert_output "200 4 $WEB_HTTPS/small.bin?a=b"
    run curl -s -k -o /dev/null -w '%{http_code} %{redirect_url}' "$WEB_HTTPS/to-http/small.bin"
    assert_output "302 $WEB_HTTP/small.bin"
    run curl -s -o /dev/null -o /dev/null -w '%{http_code} ' "$WEB_FLAKY/fail/1/small.bin" \
        "$WEB_FLAKY/fail/1/small.bin"
    assert_output "503 200 "
    run curl -s -o /dev/null "$WEB_REFUSED/small.bin"
    assert_equal "$status" 7
    grep -q '^206 GET "/small.bin?X-Sig=secret" range="bytes=10-19" 10 http$' <(web_log)
}
