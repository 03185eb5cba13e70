#!/bin/bash
# tests/cli/exact-output-images.sh DIR DISKIMG: makes many small images in
# DIR, with qemu-img/qemu-io and with diskimg, and prints one line per image:
# "FILE FORMAT".  exact-output.bats diffs diskimg's map, check and info
# output on each against qemu-img's.  The images are small (a few MiB of
# virtual disk, less written) so that the whole set takes a few seconds.
set -euo pipefail

dir=$1
diskimg=$2
cd "$dir"

q() { qemu-img "$@" >/dev/null; }
io() { qemu-io "$@" >/dev/null; }
out() { echo "$dir/$1 $2"; }

# data at the start, a zero cluster, data in the middle and at the very end
pattern() {
    io -f "$1" -c 'write -P 1 0 96k' -c 'write -z 256k 64k' -c 'write -P 2 1M 64k' \
        -c 'write -P 3 4032k 64k' "$2"
}

# qcow2 variants made by qemu-img
for v in "v3:" "v2:compat=0.10" "c512:cluster_size=512" "c2m:cluster_size=2M" \
    "el2:extended_l2=on" "lazy:lazy_refcounts=on" "r1:refcount_bits=1" \
    "zstd:compression_type=zstd"; do
    name=${v%%:*}
    opts=${v#*:}
    q create -f qcow2 ${opts:+-o "$opts"} "q-$name.qcow2" 4M
    pattern qcow2 "q-$name.qcow2"
    out "q-$name.qcow2" qcow2
done
# mixed clusters: ZERO_ALLOC, ZERO_PLAIN, a discard, subclusters
q create -f qcow2 mixed.qcow2 4M
io -f qcow2 -c 'write -P 1 0 192k' -c 'write -z 64k 64k' -c 'write -z -u 1M 64k' \
    -c 'write -z 1536k 128k' -c 'write -P 2 2M 256k' -c 'discard 2M 64k' mixed.qcow2
out mixed.qcow2 qcow2
q create -f qcow2 -o extended_l2=on,cluster_size=64k sub.qcow2 4M
io -f qcow2 -c 'write -P 1 4k 4k' -c 'write -P 2 70k 10k' -c 'write -z 200k 8k' sub.qcow2
out sub.qcow2 qcow2
# compressed clusters, and compressed next to plain data
q create -f raw src.raw 4M
io -f raw -c 'write -P 7 0 1M' -c 'write -P 8 3M 128k' src.raw
out src.raw raw
q convert -c -f raw -O qcow2 src.raw comp.qcow2
out comp.qcow2 qcow2
io -f qcow2 -c 'write -P 9 128k 64k' comp.qcow2
q convert -c -f raw -O qcow2 -o compat=0.10 src.raw comp-v2.qcow2
out comp-v2.qcow2 qcow2
# preallocation
for p in metadata falloc full; do
    q create -f qcow2 -o preallocation=$p "pre-$p.qcow2" 2M
    io -f qcow2 -c 'write -P 1 64k 64k' "pre-$p.qcow2"
    out "pre-$p.qcow2" qcow2
done
# the last data cluster at the very end: the file ends inside it
q create -f qcow2 -o cluster_size=2M end.qcow2 5M
io -f qcow2 -c 'write -P 5 4608k 4k' end.qcow2
out end.qcow2 qcow2
q create -f qcow2 end64.qcow2 1000k
io -f qcow2 -c 'write -P 5 996k 4k' end64.qcow2
out end64.qcow2 qcow2
# qemu's guess that an image is metadata-preallocated (clusters with a
# refcount against the file's allocated bytes), at its edge: two clusters
# discarded (refcount 0), a hole in a data cluster, and the last data
# cluster ending in a hole; guessing otherwise than qemu split that
# cluster into data and a 20480-byte zero tail
q create -f qcow2 edge.qcow2 4M
io -f qcow2 -c 'write -P 1 0 1M' -c 'write -P 2 3M 45056' -c 'discard 128k 128k' edge.qcow2
cp --sparse=never edge.qcow2 edge.tmp
mv edge.tmp edge.qcow2
fallocate -p -o 393216 -l 65536 edge.qcow2
fallocate -p -o 1421312 -l 20480 edge.qcow2
out edge.qcow2 qcow2
# the file ends in a fallocated, never written block that the map asks
# the file about (metadata preallocation guessed): probing the format
# must leave that block as it found it
q create -f qcow2 -o cluster_size=2M,extended_l2=on tailz.qcow2 3M
io -f qcow2 -c 'write -P 1 1897984 64k' -c 'write -z 2458624 4k' -c 'write -z 683520 64k' \
    -c 'write -P 2 1778688 1M' tailz.qcow2
out tailz.qcow2 qcow2
# an odd size: the last cluster is partly past the virtual end
q create -f qcow2 odd.qcow2 1000000
io -f qcow2 -c 'write -P 1 983040 16960' odd.qcow2
out odd.qcow2 qcow2
# empty and 0-byte images
q create -f qcow2 empty.qcow2 4M
out empty.qcow2 qcow2
q create -f qcow2 zero.qcow2 0
out zero.qcow2 qcow2
q create -f raw zero.raw 0
out zero.raw raw
q create -f raw empty.raw 4M
out empty.raw raw
q create -f raw -o preallocation=full full.raw 1M
out full.raw raw
q create -f raw sparse.raw 4M
io -f raw -c 'write -P 1 64k 8k' -c 'write -P 2 3M 1M' sparse.raw
out sparse.raw raw
truncate -s 1000001 odd.raw
io -f raw -c 'write -P 1 999000 1001' odd.raw
out odd.raw raw
# snapshots and bitmaps
q create -f qcow2 snap.qcow2 4M
io -f qcow2 -c 'write -P 1 0 64k' snap.qcow2
q snapshot -c s1 snap.qcow2
io -f qcow2 -c 'write -P 2 0 64k' -c 'write -P 3 1M 64k' snap.qcow2
q snapshot -c s2 snap.qcow2
# names wider than the TAG column, not ASCII, beyond the BMP
q snapshot -c averyveryverylongsnapshotnamethatexceedsitscolumn snap.qcow2
q snapshot -c "ünïcödé" snap.qcow2
q snapshot -c "emoji😀\"x" snap.qcow2
out snap.qcow2 qcow2
# a snapshot whose extra data ends before icount (16 bytes, as older
# writers left it): no icount in qemu-img's output; and a VM state size
# past 2^63, which qemu prints as a negative int
q create -f qcow2 noicount.qcow2 1M
q snapshot -c a noicount.qcow2
python3 - noicount.qcow2 <<'PY'
import struct, sys
f = open(sys.argv[1], "r+b")
h = f.read(72)
table = struct.unpack(">Q", h[64:72])[0]
f.seek(table)
e = f.read(256)
idl, nml = struct.unpack(">HH", e[12:16])
extra = struct.unpack(">I", e[36:40])[0]
new = e[:36] + struct.pack(">I", 16) + bytes([0xFF] * 8) + e[48:56] + e[40 + extra:40 + extra + idl + nml]
f.seek(table)
f.write(new + bytes((-len(new)) % 8 + 8))
PY
out noicount.qcow2 qcow2
cp q-v3.qcow2 bitmap.qcow2
q bitmap --add bitmap.qcow2 b0
q bitmap --add -g 1M --disable bitmap.qcow2 b1
out bitmap.qcow2 qcow2
# backing chains: with and without -F, three deep, a shorter backing file
q create -f qcow2 base.qcow2 4M
io -f qcow2 -c 'write -P 1 0 1M' -c 'write -z 2M 64k' base.qcow2
q create -f qcow2 -b base.qcow2 -F qcow2 mid.qcow2
io -f qcow2 -c 'write -P 2 512k 64k' -c 'write -z 64k 64k' mid.qcow2
out mid.qcow2 qcow2
cp mid.qcow2 midsnap.qcow2
q snapshot -c s1 midsnap.qcow2
out midsnap.qcow2 qcow2
q create -f qcow2 -b mid.qcow2 -F qcow2 top.qcow2 6M
io -f qcow2 -c 'write -P 3 3M 64k' -c 'discard 512k 64k' top.qcow2
out top.qcow2 qcow2
# qemu-img 7.2 writes no backing file without its format: drop the format
# extension from such a header by hand (the name moves up behind the end
# marker)
q create -f qcow2 -b base.qcow2 -F qcow2 noF.qcow2
python3 - noF.qcow2 <<'PY'
import struct, sys
f = open(sys.argv[1], "r+b")
h = bytearray(f.read(65536))
boff, blen = struct.unpack(">QI", h[8:20])
name = bytes(h[boff:boff + blen])
hl = pos = struct.unpack(">I", h[100:104])[0]
exts = b""
while True:
    typ, ln = struct.unpack(">II", h[pos:pos + 8])
    end = pos + 8 + (ln + 7) // 8 * 8
    if typ == 0:
        break
    if typ != 0xE2792ACA:
        exts += h[pos:end]
    pos = end
exts += bytes(8)
h[hl:boff + blen] = bytes(boff + blen - hl)
h[hl:hl + len(exts)] = exts
h[hl + len(exts):hl + len(exts) + blen] = name
h[8:16] = struct.pack(">Q", hl + len(exts))
f.seek(0)
f.write(h[:boff + blen])
PY
out noF.qcow2 qcow2
q create -f qcow2 -b src.raw -F raw overraw.qcow2
io -f qcow2 -c 'write -P 4 64k 64k' overraw.qcow2
out overraw.qcow2 qcow2
# the other formats, converted from the sparse raw file and empty
for f in vpc vmdk vhdx vdi; do
    q convert -f raw -O $f sparse.raw "s.$f"
    out "s.$f" $f
    q create -f $f "e.$f" 4M
    out "e.$f" $f
done
q convert -f raw -O vmdk -o subformat=streamOptimized sparse.raw stream.vmdk
out stream.vmdk vmdk
q convert -f raw -O vpc -o subformat=fixed sparse.raw fixed.vpc
out fixed.vpc vpc
q convert -f raw -O vmdk -o subformat=monolithicFlat sparse.raw flat.vmdk
out flat.vmdk vmdk
q convert -f raw -O vmdk -o subformat=twoGbMaxExtentSparse sparse.raw split.vmdk
out split.vmdk vmdk
q convert -f raw -O vdi -o static=on sparse.raw static.vdi
out static.vdi vdi
q convert -f raw -O vhdx -o subformat=fixed sparse.raw fixed.vhdx
out fixed.vhdx vhdx
q create -f vmdk vbase.vmdk 4M
io -f vmdk -c 'write -P 1 0 64k' vbase.vmdk
q create -f vmdk -b vbase.vmdk -F vmdk vchild.vmdk
io -f vmdk -c 'write -P 2 1M 64k' vchild.vmdk
out vchild.vmdk vmdk
# dirty (lazy refcounts, the writer crashed) and a bitmap left in use
q create -f qcow2 -o lazy_refcounts=on dirty.qcow2 4M
(ulimit -c 0; qemu-io -f qcow2 -c 'write -P 1 0 1M' -c abort dirty.qcow2 >/dev/null) 2>/dev/null || true
out dirty.qcow2 qcow2
cp bitmap.qcow2 inuse.qcow2
(ulimit -c 0; qemu-io -f qcow2 -c 'write -P 1 0 64k' -c abort inuse.qcow2 >/dev/null) 2>/dev/null || true
out inuse.qcow2 qcow2

# images made by diskimg
dq() { "$diskimg" "$@" >/dev/null; }
dq create -f qcow2 d-empty.qcow2 4M
out d-empty.qcow2 qcow2
dq convert -f raw -O qcow2 sparse.raw d-conv.qcow2
out d-conv.qcow2 qcow2
dq convert -f raw -O qcow2 -c src.raw d-comp.qcow2
out d-comp.qcow2 qcow2
dq create -f qcow2 -o compat=0.10,cluster_size=512 d-v2.qcow2 1M
io -f qcow2 -c 'write -P 1 1000k 24k' d-v2.qcow2
out d-v2.qcow2 qcow2
dq create -f qcow2 -b base.qcow2 -F qcow2 d-over.qcow2
io -f qcow2 -c 'write -P 5 3M 64k' d-over.qcow2
out d-over.qcow2 qcow2
for f in vpc vmdk vhdx vdi; do
    dq convert -f raw -O $f sparse.raw "d.$f"
    out "d.$f" $f
done
for o in extended_l2=on preallocation=metadata refcount_bits=64; do
    dq create -f qcow2 -o $o "d-${o%%=*}.qcow2" 4M
    pattern qcow2 "d-${o%%=*}.qcow2"
    out "d-${o%%=*}.qcow2" qcow2
done
dq convert -f raw -O vmdk -o subformat=streamOptimized sparse.raw d-stream.vmdk
out d-stream.vmdk vmdk

# Settle the files: until written back, a file system may answer
# SEEK_DATA and st_blocks differently from one moment to the next, and
# qemu-img and diskimg would see two states of one image.
sync "$dir"/*
