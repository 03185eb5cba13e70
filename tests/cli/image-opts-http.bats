#!/usr/bin/env bats
# --image-opts with the http and https protocol drivers against a real
# nginx (web-lib.bash): driver=http(s),url= (the protocol node is the
# image, raw), a format over file.driver=http(s) with file.url=, and the
# keys the driver declares.  qemu-img (its curl driver) judges info and
# map where it can read the same URL; the bytes are compared with cmp.

load '../helpers'
load 'web-lib'
bats_require_minimum_version 1.5.0

setup_file() {
    web_start --no-flaky
    qemu-img create -q -f raw "$WEB_ROOT/d.raw" 1M
    printf 'hello' | dd of="$WEB_ROOT/d.raw" bs=1 seek=65536 conv=notrunc status=none
    qemu-img convert -f raw -O qcow2 "$WEB_ROOT/d.raw" "$WEB_ROOT/d.qcow2"
}
teardown_file() { web_stop; }

setup() { setup_test; }
teardown() { cleanup_test; }

# same_json SUBCOMMAND SPEC: our --output=json equals qemu-img's.
same_json() {
    diff <(qemu-img "$1" --output=json --image-opts "$2") \
        <("$DISKIMG" "$1" --output=json --image-opts "$2")
}

@test "http: driver=http,url= and qcow2 over file.driver=http read as qemu-img reads them" {
    local spec
    for spec in "driver=http,url=$WEB_HTTP/d.raw" \
        "driver=raw,file.driver=http,file.url=$WEB_HTTP/d.raw" \
        "driver=qcow2,file.driver=http,file.url=$WEB_HTTP/d.qcow2"; do
        same_json info "$spec"
        same_json map "$spec"
    done
    run -0 "$DISKIMG" info --image-opts "driver=http,url=$WEB_HTTP/d.raw"
    assert_line "file format: http"
    # a pre-signed URL works unchanged and its query is never printed
    run -0 "$DISKIMG" info --image-opts \
        "driver=qcow2,file.driver=http,file.url=$WEB_HTTP/d.qcow2?X-Amz-Signature=s3cr3t"
    assert_line "image: $WEB_HTTP/d.qcow2?..."
    refute_output --partial s3cr3t
}

@test "https: convert, compare, dd through the keys, TLS verified against --tls-creds" {
    local q="driver=qcow2,file.driver=https,file.url=$WEB_HTTPS/d.qcow2"
    "$DISKIMG" convert --tls-creds "$WEB_TLS_CREDS" -O raw --image-opts "$q" "$TEST_DIR/c.raw"
    cmp "$TEST_DIR/c.raw" "$WEB_ROOT/d.raw"
    # tls-creds as a key of the options, as the driver declares it
    run -0 "$DISKIMG" compare --image-opts "driver=https,url=$WEB_HTTPS/d.raw,tls-creds=$WEB_TLS_CREDS" \
        "driver=file,filename=$WEB_ROOT/d.raw"
    "$DISKIMG" dd --image-opts bs=64k count=2 "if=$q,tls-creds=$WEB_TLS_CREDS" "of=$TEST_DIR/dd.raw"
    cmp "$TEST_DIR/dd.raw" <(head -c 131072 "$WEB_ROOT/d.raw")
    # without the test CA the certificate is refused
    run -1 "$DISKIMG" info --image-opts "driver=https,url=$WEB_HTTPS/d.raw"
    assert_output --partial "certificate is not trusted"
}

@test "http errors: no url, 404, a server ignoring Range, unknown key" {
    run -1 "$DISKIMG" info --image-opts "driver=http"
    assert_output "diskimg: http: option 'url': required (the image's http:// or https:// URL)"
    run -1 "$DISKIMG" map --image-opts "driver=http,url=$WEB_HTTP/missing/d.raw"
    assert_output "diskimg: $WEB_HTTP/missing/d.raw: HTTP 404 Not Found"
    run -1 "$DISKIMG" info --image-opts "driver=raw,file.driver=http,file.url=$WEB_HTTP/norange/d.raw"
    assert_output --partial "the server ignores Range requests"
    run -2 "$DISKIMG" info --image-opts "driver=http,url=$WEB_HTTP/d.raw,file.bogus=1"
    assert_line --index 0 "diskimg info: --image-opts: option 'bogus': no driver takes it"
}
