#!/usr/bin/env python3
"""tests/fuzz/make-vpc-seeds.py OUTDIR: the seed corpus of fuzz-vpc.c,
small VHD images (4 KiB blocks, a few KB each) written byte by byte: a
fixed image, dynamic ones with no block, with a full and a partly written
block, and without their trailing footer (a crash while allocating), and
a differencing image with parent locators."""
import os
import struct
import sys


def csum(b, at):
    b = bytearray(b)
    b[at:at + 4] = bytes(4)
    return (~sum(b)) & 0xFFFFFFFF


def footer(size, dtype, data_offset):
    f = bytearray(512)
    f[0:8] = b"conectix"
    struct.pack_into(">IIQI4sI4sQQHBBI", f, 8, 2, 0x10000, data_offset, 0, b"qem2", 0x50003,
                     b"Wi2k", size, size, 65535, 16, 255, dtype)
    f[68:84] = bytes(range(16))
    struct.pack_into(">I", f, 64, csum(f, 64))
    return bytes(f)


def dynamic(size, block, blocks, dtype=3, locators=(), trailing=True):
    entries = (size + block - 1) // block
    bat_bytes = (entries * 4 + 511) // 512 * 512
    h = bytearray(1024)
    h[0:8] = b"cxsparse"
    struct.pack_into(">QQIII", h, 8, 2**64 - 1, 1536, 0x10000, entries, block)
    h[40:56] = bytes(range(16))
    name = "parent.vhd".encode("utf-16-be")
    h[64:64 + len(name)] = name
    out = bytearray(footer(size, dtype, 512)) + h + b"\xff" * bat_bytes
    for i, (code, payload) in enumerate(locators):
        e = 576 + 24 * i
        struct.pack_into(">4sIIIQ", h, e, code, 1, len(payload), 0, len(out))
        out += payload + bytes(-len(payload) % 512)
    bitmap = (block // 512 + 7) // 8
    bm_bytes = (bitmap + 511) // 512 * 512
    for idx, bits in blocks:
        struct.pack_into(">I", out, 1536 + 4 * idx, len(out) // 512)
        bm = bytearray(bm_bytes)
        for k in bits:
            bm[k // 8] |= 0x80 >> (k % 8)
        out += bm + bytes([0x40 + idx]) * block
    struct.pack_into(">I", h, 36, csum(h, 36))
    out[512:1536] = h
    if trailing:
        out += footer(size, dtype, 512)
    return bytes(out)


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    seeds = {
        "fixed": bytes(range(256)) * 16 + footer(4096, 2, 2**64 - 1),
        "dynamic-empty": dynamic(16384, 4096, []),
        "dynamic-blocks": dynamic(16384, 4096, [(0, range(8)), (2, [1, 3])]),
        "dynamic-torn": dynamic(16384, 4096, [(1, range(8))], trailing=False),
        "differencing": dynamic(16384, 4096, [(3, [0])], dtype=4, locators=(
            (b"W2ru", ".\\parent.vhd".encode("utf-16-le")),
            (b"W2ku", "C:\\vm\\parent.vhd".encode("utf-16-le")))),
    }
    for name, data in seeds.items():
        with open(os.path.join(d, "seed-" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
