#!/usr/bin/python3
"""make-nbd-seeds.py OUTDIR: write the seed inputs of the two NBD harnesses,
OUTDIR/nbd-request and OUTDIR/nbd-option, one file per seed, named after
what it holds.  The committed corpus (tests/fuzz/corpus/) is this output
plus the inputs fuzzing found interesting; run it again only to change a
seed.  The input formats are described at the top of fuzz-nbd-request.c
and fuzz-nbd-option.c."""

import os
import struct
import sys

MiB = 1 << 20

# --- requests --------------------------------------------------------------
REQUEST_MAGIC = 0x25609513
READ, WRITE, DISC, FLUSH, TRIM, CACHE, WRITE_ZEROES, BLOCK_STATUS = range(8)
FUA, NO_HOLE, DF, REQ_ONE, FAST_ZERO = (1 << i for i in range(5))
# transmission flags
HAS_FLAGS, READ_ONLY, SEND_FLUSH, SEND_FUA = 1, 2, 4, 8
SEND_TRIM, SEND_WZ, SEND_DF, SEND_FAST_ZERO = 1 << 5, 1 << 6, 1 << 7, 1 << 11
RW = HAS_FLAGS | SEND_FLUSH | SEND_FUA | SEND_TRIM | SEND_WZ | SEND_DF | SEND_FAST_ZERO
RO = HAS_FLAGS | READ_ONLY | SEND_FLUSH | SEND_FUA


def limits(size, eflags, structured, meta, max_payload=32 * MiB):
    return struct.pack(">QHBI", size, eflags, (1 if structured else 0) | (2 if meta else 0),
                       max_payload)


def req(rtype, off=0, count=0, flags=0, magic=REQUEST_MAGIC, cookie=1):
    return struct.pack(">IHHQQI", magic, flags, rtype, cookie, off, count)


def request_seeds():
    rw = limits(64 * MiB, RW, True, True)
    ro = limits(1 * MiB, RO, False, False)
    yield "rw-every-command", rw + b"".join([
        req(READ, 0, 4096), req(READ, 4096, 65536, DF | FUA), req(WRITE, 0, 512, FUA),
        req(FLUSH), req(TRIM, 0, MiB), req(CACHE, 0, MiB),
        req(WRITE_ZEROES, 0, MiB, NO_HOLE | FAST_ZERO | FUA), req(BLOCK_STATUS, 0, MiB, REQ_ONE),
        req(DISC)])
    yield "ro-writes-refused", ro + b"".join([
        req(WRITE, 0, 512), req(TRIM, 0, 512), req(WRITE_ZEROES, 0, 512), req(READ, 0, 512, DF),
        req(BLOCK_STATUS, 0, 512), req(FLUSH)])
    yield "ranges-at-the-end", rw + b"".join([
        req(READ, 64 * MiB - 1, 1), req(READ, 64 * MiB - 1, 2), req(READ, 64 * MiB, 0),
        req(WRITE, 64 * MiB, 1), req(WRITE_ZEROES, 2**64 - 512, 1024),
        req(TRIM, 2**63, 2**32 - 1), req(BLOCK_STATUS, 0, 0)])
    yield "oversized-payloads", rw + b"".join([
        req(READ, 0, 32 * MiB), req(READ, 0, 32 * MiB + 1), req(WRITE, 0, 2**32 - 1),
        req(WRITE, 0, 32 * MiB + 1)])
    yield "unknown-commands-and-flags", rw + b"".join([
        req(8), req(9), req(42, 0, 512), req(0xffff), req(READ, 0, 512, 0xffff),
        req(FLUSH, 0, 0, NO_HOLE), req(DISC, 0, 0, 0x8000)])
    yield "bad-magic", rw + req(READ, 0, 512) + req(READ, 0, 512, magic=0x67446698) + \
        req(READ, 0, 512)
    yield "empty-export", limits(0, RW, True, True, 0) + req(READ, 0, 0) + req(READ, 0, 1) + \
        req(WRITE, 0, 0) + req(BLOCK_STATUS, 0, 1)
    yield "no-fua-advertised", limits(MiB, HAS_FLAGS, False, True) + req(WRITE, 0, 512, FUA) + \
        req(WRITE_ZEROES, 0, 512, FAST_ZERO) + req(BLOCK_STATUS, 0, 512)


# --- options ---------------------------------------------------------------
IHAVEOPT = 0x49484156454F5054
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_PEEK, OPT_STARTTLS, OPT_INFO, OPT_GO = range(1, 8)
OPT_STRUCTURED, OPT_LIST_META, OPT_SET_META, OPT_EXTENDED = range(8, 12)
INFO_NAME, INFO_DESC, INFO_BLOCK_SIZE = 1, 2, 3
TLS_REQUIRED, TLS_OFFERED, TLS_ACTIVE, STRUCTURED = 1, 2, 4, 8


def state(bits, cflags=1):
    return bytes([bits]) + struct.pack(">I", cflags)


def opt(o, payload=b"", claimed=None):
    n = len(payload) if claimed is None else claimed
    return struct.pack(">QII", IHAVEOPT, o, n) + payload


def name(s):
    return struct.pack(">I", len(s)) + s


def go(export, *infos):
    return name(export) + struct.pack(">H", len(infos)) + b"".join(
        struct.pack(">H", i) for i in infos)


def meta(export, *queries):
    return name(export) + struct.pack(">I", len(queries)) + b"".join(name(q) for q in queries)


def option_seeds():
    yield "go-with-infos", state(0) + opt(OPT_INFO, go(b"disk", INFO_NAME, INFO_DESC)) + \
        opt(OPT_GO, go(b"", INFO_BLOCK_SIZE, 0x7777))
    yield "structured-then-meta", state(0, 3) + opt(OPT_STRUCTURED) + opt(
        OPT_SET_META, meta(b"disk", b"base:allocation", b"qemu:dirty-bitmap:a")) + opt(
        OPT_LIST_META, meta(b"", b"qemu:", b"base:", b"qemu:dirty-bitmap:")) + opt(
        OPT_LIST_META, meta(b"disk")) + opt(OPT_GO, go(b"disk"))
    yield "export-name", state(0) + opt(OPT_LIST) + opt(OPT_EXPORT_NAME, b"disk")
    yield "export-name-nul", state(0) + opt(OPT_EXPORT_NAME, b"di\0sk")
    yield "tls-required", state(TLS_REQUIRED | TLS_OFFERED) + opt(OPT_LIST) + opt(
        OPT_GO, go(b"")) + opt(OPT_STARTTLS, b"x") + opt(OPT_STARTTLS) + opt(OPT_ABORT)
    yield "tls-active", state(TLS_REQUIRED | TLS_OFFERED | TLS_ACTIVE | STRUCTURED) + opt(
        OPT_STARTTLS) + opt(OPT_SET_META, meta(b"", b"base:allocation")) + opt(OPT_GO, go(b""))
    yield "tls-required-export-name", state(TLS_REQUIRED | TLS_OFFERED) + \
        opt(OPT_EXPORT_NAME, b"")
    yield "malformed-go", state(0) + opt(OPT_GO, b"\0\0\0") + opt(
        OPT_GO, struct.pack(">I", 0xfffffffa) + b"abcd\0\0") + opt(
        OPT_INFO, name(b"a") + struct.pack(">HH", 3, 1)) + opt(
        OPT_GO, name(b"a\0b") + b"\0\0")
    yield "malformed-meta", state(STRUCTURED) + opt(
        OPT_SET_META, meta(b"disk", b"base:allocation")[:-3]) + opt(
        OPT_LIST_META, name(b"") + struct.pack(">I", 0xffffffff)) + opt(
        OPT_LIST_META, meta(b"", b"a") + b"trailing") + opt(
        OPT_LIST_META, name(b"x") + struct.pack(">II", 1, 0xfffffff0))
    yield "set-meta-unstructured", state(0) + opt(OPT_SET_META, meta(b"", b"base:allocation"))
    yield "unknown-and-nonempty", state(0) + opt(OPT_PEEK) + opt(OPT_EXTENDED) + opt(
        99, b"some payload") + opt(OPT_LIST, b"x") + opt(OPT_STRUCTURED, b"y") + opt(
        0xffffffff)
    yield "long-names", state(STRUCTURED) + opt(OPT_GO, go(b"n" * 4096)) + opt(
        OPT_GO, go(b"n" * 4097)) + opt(OPT_EXPORT_NAME, b"e" * 4097)
    yield "huge-length-claim", state(0) + opt(OPT_GO, b"", claimed=0xfffffff0)
    yield "bad-option-magic", state(0) + struct.pack(">QII", 0x1122334455667788, OPT_GO, 0)
    yield "bad-client-flags", state(0, 0x80) + opt(OPT_LIST)


def main():
    out = sys.argv[1]
    for sub, seeds in (("nbd-request", request_seeds()), ("nbd-option", option_seeds())):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        for n, data in seeds:
            with open(os.path.join(out, sub, "seed-" + n), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
