"""tests/fuzz/hostile_corpus: the modules of make-hostile-corpus.py.

make-hostile-corpus.py (the command) calls them in order:
  qcow2.py      the Img class: a qcow2 file in memory, read and patched by field
  corpus.py     the output directory, its MANIFEST, and the good base images
                that qemu-img and qemu-io make
  header.py     crafted header fields and header extensions
  tables.py     crafted L1, L2 (compressed and extended entries too) and
                refcount tables
  snapshots.py  crafted snapshot tables and bitmap directories
  chains.py     crafted backing chains (loops, depth, protocols, FIFOs)
Nothing here is a test; the bats suites open what it writes.
"""
