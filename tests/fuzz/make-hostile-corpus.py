#!/usr/bin/python3
"""tests/fuzz/make-hostile-corpus.py: write a corpus of crafted qcow2 images.

Usage: make-hostile-corpus.py OUTDIR

Creates a few good base images with qemu-img and qemu-io (v2 and v3, 512 B,
64 KiB and 2 MiB clusters, a snapshot, compressed clusters, a backing file,
extended L2 entries), then one crafted image per field class, made by
patching bytes of a base image: every header field, the header extensions,
L1 and L2 entries, compressed clusters, refcounts, the snapshot table and
backing chains.  Each image is named after what it breaks
(l1-offset-unaligned.qcow2).

OUTDIR/*.qcow2 are the images to open (base-*.qcow2 are the good ones);
OUTDIR/aux/ holds what they refer to (backing files, chain layers);
OUTDIR/MANIFEST has one line per image: NAME<TAB>what was changed.

Only the standard library is used; qemu-img and qemu-io must be on PATH.
The output is deterministic apart from the snapshot dates qemu-img writes.
The work is done by the modules of hostile_corpus/ (next to this file;
its __init__.py lists them); this file is the command.
"""

import os
import shutil
import sys

# The package lives next to this file.  Put it on the path explicitly (an
# isolated python does not), and write no __pycache__ into the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True

from hostile_corpus.chains import chain_variants  # noqa: E402
from hostile_corpus.corpus import Corpus, make_bases  # noqa: E402
from hostile_corpus.header import extension_variants, header_variants  # noqa: E402
from hostile_corpus.snapshots import bitmap_variants, snapshot_variants  # noqa: E402
from hostile_corpus.tables import l1_variants, l2_variants, refcount_variants  # noqa: E402


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    for tool in ("qemu-img", "qemu-io"):
        if not shutil.which(tool):
            print("make-hostile-corpus: %s is required" % tool, file=sys.stderr)
            sys.exit(1)
    os.makedirs(os.path.join(out, "aux"), exist_ok=True)
    c = Corpus(out)
    make_bases(c)
    header_variants(c)
    extension_variants(c)
    l1_variants(c)
    l2_variants(c)
    refcount_variants(c)
    snapshot_variants(c)
    chain_variants(c)
    bitmap_variants(c)
    c.write_manifest()
    print("make-hostile-corpus: %d images in %s" % (len(c.manifest), out))


if __name__ == "__main__":
    main()
