#!/usr/bin/env python3
"""dkh1.py FILE...: the dkh1-sha256 content checksum of raw files, written
from the specification in man/diskimg-checksum.1 alone (hashlib, no
diskimg code), printed as sha256sum prints: HASH  NAME.  The CLI tests
compare it with "diskimg checksum", which proves the documentation."""
import hashlib
import os
import sys

BLOCK, FANOUT = 65536, 4096


def dkh1(path):
    size = os.path.getsize(path)
    level = []
    with open(path, "rb") as f:
        for _ in range((size + BLOCK - 1) // BLOCK):
            block = f.read(BLOCK)
            level.append(hashlib.sha256(block + bytes(BLOCK - len(block))).digest())
    while len(level) > 1:
        level = [hashlib.sha256(b"".join(level[i:i + FANOUT])).digest()
                 for i in range(0, len(level), FANOUT)]
    top = level[0] if level else b""
    return hashlib.sha256(b"dkh1-sha256" + size.to_bytes(8, "little") + top).hexdigest()


for p in sys.argv[1:]:
    print(dkh1(p) + "  " + p)
