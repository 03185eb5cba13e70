#!/usr/bin/env python3
"""tests/fuzz/make-vhdx-seeds.py IMAGE OUT: write IMAGE (a VHDX file of at
most 16 MiB) in the sparse form fuzz-vhdx.c reads: its size in 64 KiB
units, then (u32 offset, u16 length, bytes) for each 4 KiB page that is
not all zeroes, without the page's leading and trailing zeroes."""
import struct
import sys

data = open(sys.argv[1], "rb").read()
out = bytearray(struct.pack("<I", (len(data) + 65535) // 65536))
for off in range(0, len(data), 4096):
    page = data[off:off + 4096]
    start = len(page) - len(page.lstrip(b"\0"))
    body = page[start:].rstrip(b"\0")
    if body:
        out += struct.pack("<IH", off + start, len(body)) + body
open(sys.argv[2], "wb").write(out)
