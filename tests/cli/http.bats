#!/usr/bin/env bats
# http(s) sources read from a real nginx (scripts/web-dev.sh): a raw, a
# qcow2 and a VHD that qemu-img made, over http and over https with the
# test CA, read by info (probed and with -f), map, checksum, compare,
# convert and serve -r; what was read is checked against the files the
# server has (qemu-img compare, cmp, checksum) and against qemu-img
# reading the same URL.  Every URL carries a pre-signed style query
# (nginx ignores it), which must appear in no output.  Errors:
# http-errors.bats.

load '../helpers'
load '../interop/lib'
load 'web-lib'

# A pre-signed object-store URL's query: nothing may print it.
SIG='X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=5ecre7519'

setup_file() {
    web_start
    local w=$WEB_ROOT
    # 4 MiB: data, a hole, data that does not end on a cluster
    truncate -s 4M "$w/disk.raw"
    head -c 1M /dev/urandom | dd of="$w/disk.raw" conv=notrunc status=none
    head -c 300000 /dev/urandom | dd of="$w/disk.raw" bs=1k seek=2500 conv=notrunc status=none
    qemu-img convert -f raw -O qcow2 "$w/disk.raw" "$w/disk.qcow2"
    qemu-img convert -f raw -O vpc "$w/disk.raw" "$w/disk.vhd"
}

teardown_file() {
    web_stop
}

setup() { setup_test; }
teardown() { cleanup_test; }

# no_secret TEXT: TEXT shows no part of the query.
no_secret() {
    [[ $1 != *5ecre7519* && $1 != *AKIDEXAMPLE* ]] || {
        echo "the query leaked: $1" >&2
        return 1
    }
}

# sources: "SCHEME FORMAT URL" lines, every image over http and https.
sources() {
    local f fmt
    for f in disk.raw:raw disk.qcow2:qcow2 disk.vhd:vpc; do
        fmt=${f#*:} f=${f%:*}
        echo "http $fmt $f $WEB_HTTP/$f?$SIG"
        echo "https $fmt $f $WEB_HTTPS/$f?$SIG"
    done
}

@test "the test web server: ranges, TLS with the test CA, no ranges, errors, redirects, transient failures" {
    local f=$WEB_ROOT/disk.raw out=$TEST_DIR/out
    curl -sf -r 10-19 -o "$out" "$WEB_HTTP/disk.raw?X-Sig=secret"
    cmp "$out" <(tail -c +11 "$f" | head -c 10)
    curl -sf --cacert "$WEB_TLS_CREDS/ca-cert.pem" -o "$out" "$WEB_HTTPS/disk.raw"
    cmp "$out" "$f"
    run curl -s --cacert "$WEB_OTHER_CA/ca-cert.pem" -o /dev/null "$WEB_HTTPS/disk.raw"
    assert_equal "$status" 60
    run curl -s -r 10-19 -o /dev/null -w '%{http_code} %{size_download}' "$WEB_HTTP/norange/disk.raw"
    assert_output "200 4194304"
    run curl -s -o /dev/null -w '%{http_code}' "$WEB_HTTP/forbidden/disk.raw"
    assert_output 403
    run curl -s -k -o /dev/null -w '%{http_code}' "$WEB_HTTPS/missing/disk.raw"
    assert_output 404
    run curl -s -L --cacert "$WEB_TLS_CREDS/ca-cert.pem" -o /dev/null \
        -w '%{http_code} %{num_redirects} %{url_effective}' "$WEB_HTTP/to-https/chain/disk.raw?a=b"
    assert_output "200 4 $WEB_HTTPS/disk.raw?a=b"
    run curl -s -k -o /dev/null -w '%{http_code} %{redirect_url}' "$WEB_HTTPS/to-http/disk.raw"
    assert_output "302 $WEB_HTTP/disk.raw"
    run curl -s -o /dev/null -o /dev/null -w '%{http_code} ' "$WEB_FLAKY/fail/1/disk.raw" \
        "$WEB_FLAKY/fail/1/disk.raw"
    assert_output "503 200 "
    run curl -s -o /dev/null "$WEB_REFUSED/disk.raw"
    assert_equal "$status" 7
    # nginx logs a request once it is done: poll
    wait_until 2 web_logged '^206 GET "/disk\.raw\?X-Sig=secret" range="bytes=10-19" 10 http conn=[0-9]*$'
}

@test "http and https: info (probed and -f), map and checksum read what the server has" {
    local scheme fmt f url t=()
    while read -r scheme fmt f url; do
        t=()
        [[ $scheme == http ]] || t=("--tls-creds=$WEB_TLS_CREDS")
        # probed, and given: the same format and size as the local file
        run -0 --separate-stderr "$DISKIMG" info "${t[@]}" --output=json "$url"
        no_secret "$output$stderr"
        assert_equal "$(jq -r '.format' <<<"$output")" "$fmt"
        assert_equal "$(jq -r '."virtual-size"' <<<"$output")" \
            "$(qemu-img info -f "$fmt" --output=json "$WEB_ROOT/$f" | jq -r '."virtual-size"')"
        run -0 "$DISKIMG" info "${t[@]}" -f "$fmt" "$url"
        no_secret "$output"
        assert_line "file format: $fmt"
        assert_line "image: ${url%%\?*}?..."
        # checksum: the local file's
        run -0 "$DISKIMG" checksum "${t[@]}" "$url"
        no_secret "$output"
        assert_equal "${output%% *}" "$("$DISKIMG" checksum "$WEB_ROOT/$f" | cut -d' ' -f1)"
        # map: qemu-img's over the same URL (it trusts no test CA: http
        # only), and the same over https
        run -0 --separate-stderr "$DISKIMG" map "${t[@]}" --output=json "$url"
        no_secret "$output$stderr"
        if [[ $scheme == http ]]; then
            assert_equal "$output" "$(qemu-img map --output=json "$url")"
            eval "map_$fmt=\$output"
        else
            eval "assert_equal \"\$output\" \"\$map_$fmt\""
        fi
    done < <(sources)
}

@test "http and https: convert to raw and qcow2, compare, through a redirect chain" {
    local scheme fmt f url t=() out=$TEST_DIR/out
    while read -r scheme fmt f url; do
        t=()
        [[ $scheme == http ]] || t=("--tls-creds=$WEB_TLS_CREDS")
        run -0 --separate-stderr "$DISKIMG" convert "${t[@]}" -O raw "$url" "$out.raw"
        no_secret "$output$stderr"
        qemu-img compare -f "$fmt" -F raw "$WEB_ROOT/$f" "$out.raw"
        [[ $fmt != raw ]] || cmp "$out.raw" "$WEB_ROOT/$f"
        run -0 --separate-stderr "$DISKIMG" convert "${t[@]}" -f "$fmt" -O qcow2 "$url" "$out.qcow2"
        qemu-img check -q "$out.qcow2"
        qemu-img compare -f "$fmt" -F qcow2 "$WEB_ROOT/$f" "$out.qcow2"
        assert_equal "$("$DISKIMG" checksum "$out.qcow2" | cut -d' ' -f1)" \
            "$("$DISKIMG" checksum "$WEB_ROOT/$f" | cut -d' ' -f1)"
        # compare: remote against local, remote against remote
        run -0 --separate-stderr "$DISKIMG" compare "${t[@]}" "$url" "$WEB_ROOT/disk.raw"
        no_secret "$output$stderr"
        assert_line "Images are identical."
        run -0 "$DISKIMG" compare "${t[@]}" "$url" "${url/$f/disk.qcow2}"
        rm -f "$out.raw" "$out.qcow2"
    done < <(sources)
    # one more byte in the local file: compare sees it
    cp "$WEB_ROOT/disk.raw" "$out.raw"
    printf x | dd of="$out.raw" bs=1 seek=3000000 conv=notrunc status=none
    run -1 "$DISKIMG" compare "$WEB_HTTP/disk.qcow2?$SIG" "$out.raw"
    no_secret "$output"
    assert_output --partial "Content mismatch at offset 3000000"
    # convert reads with several connections at once (the access log
    # numbers nginx's connections)
    truncate -s 32M "$WEB_ROOT/big.raw"
    printf y | dd of="$WEB_ROOT/big.raw" bs=1 seek=20000000 conv=notrunc status=none
    run -0 "$DISKIMG" convert -O raw "$WEB_HTTP/big.raw?par=1" "$out.big"
    cmp "$out.big" "$WEB_ROOT/big.raw"
    rm -f "$out.big"
    [[ $(web_log | awk '$3 == "\"/big.raw?par=1\"" { print $NF }' | sort -u | wc -l) -gt 1 ]]
    # http -> https, then a chain of 302, 307 (relative) and 308
    run -0 --separate-stderr "$DISKIMG" convert --tls-creds="$WEB_TLS_CREDS" -O raw \
        "$WEB_HTTP/to-https/chain/disk.qcow2?$SIG" "$out.conv"
    no_secret "$output$stderr"
    cmp "$out.conv" "$WEB_ROOT/disk.raw"
}

@test "serve -r of an http(s) qcow2: nbdinfo, nbdsh and qemu-img read the server's file; writes refused" {
    require_tool nbdinfo nbdsh
    start_server -r -t "$WEB_HTTP/disk.qcow2?$SIG"
    run -0 nbdinfo --json "$URI"
    assert_equal "$(jq -r '.exports[0]."export-size"' <<<"$output")" 4194304
    assert_equal "$(jq -r '.exports[0]."is_read_only"' <<<"$output")" true
    qemu-img compare -f raw -F raw "$URI" "$WEB_ROOT/disk.raw"
    WANT=$WEB_ROOT/disk.raw nbdsh -u "$URI" -c '
import os
want = open(os.environ["WANT"], "rb").read()
assert h.pread(4096, 2560000) == want[2560000:2564096]
assert h.pread(65536, 4194304 - 65536) == want[-65536:]
try:
    h.pwrite(b"x" * 512, 0)
    raise SystemExit("a write to a read-only export succeeded")
except nbd.Error:
    pass
'
    # the same through qemu-img's NBD client, as a whole
    qemu-img convert -f raw -O raw "$URI" "$TEST_DIR/copy.raw"
    cmp "$TEST_DIR/copy.raw" "$WEB_ROOT/disk.raw"
    stop_server
    # https with the test CA: serve's own --tls-creds are the NBD
    # server's, so the image's go in its options
    start_server -r -t --image-opts \
        "driver=qcow2,file.driver=https,file.url=$WEB_HTTPS/disk.qcow2?$SIG,file.tls-creds=$WEB_TLS_CREDS"
    qemu-img compare -f raw -F raw "$URI" "$WEB_ROOT/disk.raw"
    run -0 nbdinfo --size "$URI"
    assert_output 4194304
    stop_server
    no_secret "$(cat "$SERVER_LOG")"
}
