"""tests/fuzz/hostile_corpus/chains.py: crafted backing chains.

Overlays whose backing file is themselves, a cycle, a 40-deep chain, a
protocol (json:, nbd:, http:), a host file or device, a directory, a
FIFO, a mismatched format, or another hostile image.  Run it after the
other variants: some backing files are images they write.
"""

import os

from .qcow2 import MiB


def chain_variants(c):
    aux = c.aux

    def overlay(name, what, backing, fmt=b"qcow2", base="v3-64k", size=None):
        i = c.base(base)
        i.set_backing(backing, fmt)
        if size is not None:
            i.p64(24, size)
        c.add(name, what, i)

    overlay("chain-self-loop", "backing file is the image itself", b"chain-self-loop.qcow2")
    overlay("chain-cycle-a", "2-cycle: backing is chain-cycle-b.qcow2", b"chain-cycle-b.qcow2")
    overlay("chain-cycle-b", "2-cycle: backing is chain-cycle-a.qcow2", b"chain-cycle-a.qcow2")
    overlay("chain-self-loop-dotdot", "backing file is the image itself via aux/..",
            b"aux/../chain-self-loop-dotdot.qcow2")
    d = os.path.join(aux, "depth40")
    os.makedirs(d, exist_ok=True)
    for k in range(1, 40):
        i = c.base("v3-512")
        if k < 39:
            i.set_backing(b"%02d.qcow2" % (k + 1), b"qcow2")
        i.save(os.path.join(d, "%02d.qcow2" % k))
    overlay("chain-depth-40", "a backing chain of 40 images (aux/depth40/01..39)",
            b"aux/depth40/01.qcow2", base="v3-512")
    overlay("chain-missing-file", "backing file does not exist", b"aux/does-not-exist.qcow2")
    overlay("chain-json-protocol", "backing file 'json:{...}' naming /etc/passwd",
            b'json:{"driver":"raw","file":{"driver":"file","filename":"/etc/passwd"}}', b"raw")
    overlay("chain-nbd-protocol", "backing file 'nbd://x'", b"nbd://x", b"raw")
    overlay("chain-nbd-unix-protocol", "backing file 'nbd+unix:///?socket=/tmp/x'",
            b"nbd+unix:///?socket=/tmp/x", b"raw")
    overlay("chain-http-protocol", "backing file 'http://127.0.0.1:1/x'",
            b"http://127.0.0.1:1/x", b"raw")
    overlay("chain-host-file", "backing file is a host file (/etc/passwd, format raw), "
            "nothing allocated above it", b"/etc/passwd", b"raw", base="v3-2m")
    overlay("chain-host-device", "backing file is /dev/zero (format raw)", b"/dev/zero", b"raw")
    overlay("chain-backing-directory", "backing file is a directory (aux)", b"aux", b"raw")
    # Opening a FIFO to read waits for a writer: these must be refused
    # without opening them, or every command that follows the chain hangs.
    fifo = os.path.join(aux, "fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    link = os.path.join(aux, "link-to-fifo")
    if not os.path.lexists(link):
        os.symlink("fifo", link)
    overlay("chain-backing-fifo", "backing file is a FIFO (aux/fifo)", b"aux/fifo", b"raw")
    overlay("chain-backing-symlink-fifo", "backing file is a symlink to a FIFO",
            b"aux/link-to-fifo", b"raw")
    overlay("chain-backing-format-raw-for-qcow2", "backing format says raw, the file is qcow2",
            b"aux/backing-base.qcow2", b"raw")
    overlay("chain-backing-format-qcow2-for-raw", "backing format says qcow2, the file is raw",
            b"aux/host-like.raw", b"qcow2")
    overlay("chain-backing-probed", "no backing format: probed (qcow2)",
            b"aux/backing-base.qcow2", None)
    overlay("chain-backing-larger", "1 MiB overlay over a 2 MiB backing file",
            b"aux/backing-base.qcow2", size=1 * MiB)
    i = c.base("v3-512")
    i.set_backing(b"aux/backing-base.qcow2", b"qcow2")
    c.add("chain-backing-smaller-512", "512 B clusters, 1 MiB overlay over a 2 MiB backing", i)
    overlay("chain-backing-hostile", "backing file is a hostile image (l1-entry-l2-past-eof)",
            b"l1-entry-l2-past-eof.qcow2")
    overlay("chain-backing-is-bad-magic", "backing file is a qcow2 image with a bad magic, fmt qcow2",
            b"magic-bad.qcow2")
