"""tests/fuzz/hostile_corpus/corpus.py: the output directory and the base images.

Corpus writes crafted images and the MANIFEST line for each; make_bases
runs qemu-img and qemu-io to make the good images (base-*.qcow2) that
every crafted image is patched from, and the files in aux/ they refer to.
The only module that runs qemu-img and qemu-io.
"""

import os
import subprocess
import sys

from .qcow2 import KiB, MiB, Img


def run(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def qemu_img(*args):
    run("qemu-img", *args)


def qemu_io(img, *cmds, fmt="qcow2"):
    argv = ["qemu-io", "-f", fmt]
    for c in cmds:
        argv += ["-c", c]
    run(*argv, img)


class Corpus:
    def __init__(self, out):
        self.out = out
        self.aux = os.path.join(out, "aux")
        self.bases = {}
        self.manifest = []

    def path(self, name):
        return os.path.join(self.out, name)

    def base(self, name):
        return Img.load(self.path("base-%s.qcow2" % name))

    def add(self, name, what, img):
        """Write a crafted image (an Img, or None when already written)."""
        if img is not None:
            img.save(self.path(name + ".qcow2"))
        self.manifest.append((name + ".qcow2", what))

    def variant(self, name, base, what, patch):
        img = self.base(base)
        patch(img)
        self.add(name, what, img)

    def write_manifest(self):
        with open(self.path("MANIFEST"), "w") as f:
            f.write("# image\twhat was changed (base-*: good images made by qemu-img)\n")
            for name, what in self.manifest:
                f.write("%s\t%s\n" % (name, what))


def pattern(n, seed):
    """Compressible, non-repeating-looking data."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += b"diskimg %08x %08x hostile corpus\n" % (seed, i)
        i += 1
    return bytes(out[:n])


def make_bases(c):
    aux = c.aux
    p = c.path

    def base(name, what, create, *io):
        path = p("base-%s.qcow2" % name)
        qemu_img("create", "-q", "-f", "qcow2", *create[:-1], path, create[-1])
        if io:
            qemu_io(path, *io)
        c.manifest.append(("base-%s.qcow2" % name, "good: " + what))

    data64 = ("write -P 0x11 0 64k", "write -P 0x22 1M 128k")
    base("v3-64k", "v3, 64 KiB clusters, data at 0 and 1M, a zero cluster at 2M",
         ["-o", "compat=1.1,cluster_size=64k", "4M"], *data64, "write -z 2M 64k")
    base("v2-64k", "v2, 64 KiB clusters, data at 0 and 1M",
         ["-o", "compat=0.10,cluster_size=64k", "4M"], *data64)
    data512 = ("write -P 0x33 0 4k", "write -P 0x44 300k 2k")
    base("v3-512", "v3, 512 B clusters, data at 0 and 300k, zeroes at 600k",
         ["-o", "compat=1.1,cluster_size=512", "1M"], *data512, "write -z 600k 1k")
    base("v2-512", "v2, 512 B clusters, data at 0 and 300k",
         ["-o", "compat=0.10,cluster_size=512", "1M"], *data512)
    base("v3-2m", "v3, 2 MiB clusters, no data",
         ["-o", "cluster_size=2M", "16M"])
    base("snapshot", "v3, 64 KiB clusters, snapshot 's1' taken between two writes",
         ["-o", "cluster_size=64k", "4M"], "write -P 0x55 0 128k")
    qemu_img("snapshot", "-c", "s1", p("base-snapshot.qcow2"))
    qemu_io(p("base-snapshot.qcow2"), "write -P 0x66 64k 64k", "write -P 0x77 2M 64k")

    raw = os.path.join(aux, "compressible.raw")
    with open(raw, "wb") as f:
        f.write(pattern(1 * MiB, 1))
        f.seek(2 * MiB)
        f.write(pattern(512 * KiB, 2))
        f.truncate(4 * MiB)
    for name, opts, what in (
            ("compressed", "cluster_size=64k", "v3, 64 KiB clusters, compressed (zlib) by convert -c"),
            ("compressed-512", "cluster_size=512", "v3, 512 B clusters, compressed (zlib) by convert -c"),
            ("compressed-zstd", "cluster_size=64k,compression_type=zstd",
             "v3, 64 KiB clusters, compressed (zstd) by convert -c")):
        try:
            qemu_img("convert", "-q", "-c", "-f", "raw", "-O", "qcow2", "-o", opts, raw,
                     p("base-%s.qcow2" % name))
            c.manifest.append(("base-%s.qcow2" % name, "good: " + what))
        except subprocess.CalledProcessError:
            if "zstd" not in name:
                raise
            print("make-hostile-corpus: qemu-img cannot write zstd; skipping it", file=sys.stderr)

    backing = os.path.join(aux, "backing-base.qcow2")
    qemu_img("create", "-q", "-f", "qcow2", backing, "2M")
    qemu_io(backing, "write -P 0x88 0 2M")
    qemu_img("create", "-q", "-f", "qcow2", "-b", "aux/backing-base.qcow2", "-F", "qcow2",
             p("base-backing.qcow2"), "4M")
    qemu_io(p("base-backing.qcow2"), "write -P 0x99 64k 64k")
    c.manifest.append(("base-backing.qcow2",
                       "good: 4M overlay over a 2M qcow2 backing file (aux/backing-base.qcow2)"))

    base("extl2", "v3, 64 KiB clusters, extended L2 (subclusters), partial writes and zeroes",
         ["-o", "extended_l2=on,cluster_size=64k", "4M"],
         "write -P 0xaa 512 512", "write -z 4096 4096", "write -P 0xbb 1M 3k")

    base("bitmaps", "v3, 64 KiB clusters, enabled bitmap b0 and disabled 512 B bitmap b1, "
         "written after b0 was added", ["-o", "cluster_size=64k", "4M"])
    qemu_img("bitmap", "--add", p("base-bitmaps.qcow2"), "b0")
    qemu_img("bitmap", "--add", "-g", "512", "--disable", p("base-bitmaps.qcow2"), "b1")
    qemu_io(p("base-bitmaps.qcow2"), "write -P 0x12 64k 128k", "write -P 0x13 3M 4k")

    with open(os.path.join(aux, "host-like.raw"), "wb") as f:
        f.write(pattern(64 * KiB, 3))
