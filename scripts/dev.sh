#!/usr/bin/env bash
# scripts/dev.sh: the two set-up commands of README.md, and their parts.
#
#   scripts/dev.sh demo    install what is missing, build, and serve a fresh
#                          demo image on /tmp/diskimg.sock (Ctrl-C stops it)
#   scripts/dev.sh test    install what is missing, run the checks, build
#                          with warnings as errors (gcc, gcc ASan+UBSan,
#                          gcc release, clang), run every test once (the
#                          hostile-input suites under the sanitizers) and
#                          the unit tests in every build
#   scripts/dev.sh deps | checks | build | build-san | build-others
#                          the steps alone
#
# Debian 12; installing needs root (sudo is used when not root).
set -euo pipefail
cd "$(dirname "$0")/.."

# Everything the build, the tests and the benchmarks use.
PACKAGES=(
    meson ninja-build pkg-config gcc clang clang-format python3
    zlib1g-dev libgnutls28-dev liburing-dev libzstd-dev libdeflate-dev
    librbd-dev librados-dev libcurl4-gnutls-dev
    ceph-mon ceph-osd ceph-common qemu-block-extra
    bats bats-assert bats-support
    qemu-utils libnbd-bin python3-libnbd nbdkit fio gnutls-bin nbd-server
    socat jq procps psmisc util-linux coreutils groff-base mandoc pigz
    libvmdk-utils python3-libvmdk libvhdi-utils python3-libvhdi
    xfsprogs e2fsprogs strace
    nginx-light curl
)

install_deps() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    echo "dev.sh: installing ${missing[*]}"
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# configure DIR [meson options...]: set up DIR, or apply the options to an
# existing one.  Warnings are errors in every configuration here (and so
# in CI), but not a default of meson.build, which packagers build with
# their own flags.  CC is read at set-up time only.
configure() {
    local dir=$1
    shift
    if [[ -f $dir/build.ninja ]]; then
        meson configure "$dir" -Dwerror=true "$@" >/dev/null
    else
        meson setup "$dir" -Dwerror=true "$@"
    fi
}

# Seconds, before any build, so that CI fails fast on them: every C file
# as clang-format writes it, no #include across the layers, and the
# commit messages after 902f98a (skipped in a shallow clone).  All three
# run and report before the step fails.
checks() {
    local rc=0
    scripts/check-format.sh || rc=1
    scripts/check-layers.py || rc=1
    scripts/check-commits.sh || rc=1
    return $rc
}

build() {
    configure build
    ninja -C build
}

build_san() {
    configure build-san -Dbuildtype=debug \
        -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args=-fno-sanitize-recover=all
    ninja -C build-san
}

# What packagers and other compilers see: gcc -O3 finds warnings (and
# bugs) that -O2 does not, clang others again.  The clang build leaves
# out libdeflate, so the zlib-only compression paths are built and
# tested too.
build_others() {
    configure build-release -Dbuildtype=release
    ninja -C build-release
    CC=clang configure build-clang -Dbuildtype=debugoptimized -Dlibdeflate=disabled
    ninja -C build-clang
}

# Every test runs once: the suites tests/meson.build tags "san" (hostile
# input to parsers) in the ASan+UBSan build, which sees everything the
# plain build would and more, and all the others in the gcc build.  The
# unit tests run in every build, and "compilers" (the qcow2 writer) in the
# release and clang builds too.  Running all of them four times would
# take an hour on two cores for little more.
run_tests() {
    export DISKIMG_TEST_STRICT=1
    # halt_on_error: a sanitizer report fails the test that caused it.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
    meson test -C build --print-errorlogs --num-processes 2 --no-suite san
    meson test -C build-san --print-errorlogs --num-processes 2 --timeout-multiplier 3 \
        --suite unit --suite san
    meson test -C build-release --print-errorlogs --num-processes 2 --suite unit --suite compilers
    meson test -C build-clang --print-errorlogs --num-processes 2 --suite unit --suite compilers
}

demo() {
    local sock=${DISKIMG_DEMO_SOCKET:-/tmp/diskimg.sock}
    mkdir -p demo
    rm -f demo/demo.img
    truncate -s 1G demo/demo.img
    echo "dev.sh: serving a fresh 1 GiB demo image, demo/demo.img, on $sock"
    echo "dev.sh: try  nbdinfo 'nbd+unix:///?socket=$sock'  (Ctrl-C stops the server)"
    exec build/cmd/diskimg serve -t -f raw -k "$sock" demo/demo.img
}

case "${1:-}" in
    demo) install_deps; build; demo ;;
    test) install_deps; checks; build; build_san; build_others; run_tests ;;
    deps) install_deps ;;
    checks) checks ;;
    build) build ;;
    build-san) build_san ;;
    build-others) build_others ;;
    *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
