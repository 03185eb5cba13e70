/* formats/qcow2/qcow2.h: the qcow2 driver's state, shared by its files.
 *
 * The files form an order, bottom to top; each calls only files below it
 * (function pointers set at open let a lower file reach an upper one:
 * the cache write hooks and s->release_locked):
 *
 *   header.c     cluster 0: parse, validate, serialise (no I/O)
 *   refcount-math.c  refcount entries and refcount area sizes (pure)
 *   compress.c   compressed descriptors; deflate and zstd
 *   cache.c      a generic write-back cache of tables, with a dependency
 *                between caches and a write hook
 *   overlap.c    the metadata map; each owner registers its ranges
 *   writeback.c  the order metadata reaches the file: cache dependency,
 *                committing new tables, deferred frees, I/O epochs,
 *                header writes, corrupt marking
 *   refcount.c   reading and changing refcounts, growing the refcount table
 *   refcount-new.c  a whole new refcount structure for counted references
 *   cluster.c    the L1 table (load, grow) and L2 slices: guest -> host
 *   snapshot.c   the internal snapshot table
 *   bitmap.c     persistent dirty bitmaps: reading, and recording writes
 *   bitmap-store.c  writing bitmaps back: new tables and directory, then the switch
 *   bitmap-ops.c    qemu-img bitmap's operations (add, remove, clear, ...)
 *   backing.c    opening the backing file
 *   read.c       guest reads, and the copy-on-write read
 *   alloc.c      allocating writes, copy-on-write, zeroing and discard
 *   chain.c      rebase and commit: a new backing file name, emptying,
 *                zeroing what growing would show of the backing file
 *   info.c       what `info` shows
 *   open.c       reading the metadata at open; building the metadata map
 *   empty.c      commit's make_empty: a small empty image again, by two
 *                table switches, or every cluster dropped
 *   check.c      consistency check and repair
 *   snapshot-shadow.c  a snapshot change's new state, written beside the old
 *                one and switched to with one header write
 *   snapshot-write.c  creating, applying and deleting internal snapshots
 *   create.c     creating an image
 *   refcount-rewrite.c  changing the refcount width (amend)
 *   downgrade.c  undoing what v2 cannot hold (amend compat=0.10)
 *   upgrade.c    v2 to v3 (amend compat=1.1): the snapshot table's extra data
 *   amend.c      amend -o: checks, then the steps in qemu's order
 *   measure.c    what an image would need (qemu-img measure)
 *   qcow2.c      the driver: vtable, open, close, flush, block status, resize
 *
 * Locking: s->lock guards all metadata (L1, caches, refcounts, the
 * in-flight allocation list) and is never held across guest data I/O.
 * Functions named *_locked expect it held.
 *
 * Crash safety (writeback.c): refcount increments reach the file before
 * any L2 entry that points at the cluster (the L2 cache flushes the
 * refcount cache and syncs the file before writing a dirty slice); a new
 * L2 table is durable before the L1 entry points at it; refcount
 * decrements are deferred until the L2 entries that stopped using the
 * cluster are durable.  A crash therefore leaves at worst leaked
 * clusters. */
#ifndef DISKIMG_QCOW2_H
#define DISKIMG_QCOW2_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

#include "block/driver.h"
#include "qcow2-format.h"

struct qcow2_cache;

enum qcow2_meta_kind {
    QCOW2_META_HEADER,
    QCOW2_META_L1,
    QCOW2_META_REFTABLE,
    QCOW2_META_REFBLOCK,
    QCOW2_META_L2,
    QCOW2_META_SNAPSHOTS,
    QCOW2_META_SNAPSHOT_L1,
    QCOW2_META_BITMAPS, /* bitmap directory and bitmap tables */
};

/* What a guest range maps to. */
enum qcow2_map_type {
    QCOW2_UNALLOCATED, /* read from the backing file, or zeroes */
    QCOW2_ZERO,        /* reads as zeroes, without a host cluster */
    QCOW2_ZERO_ALLOC,  /* reads as zeroes, host cluster kept (preallocated) */
    QCOW2_NORMAL,      /* data at host offset */
    QCOW2_COMPRESSED,  /* one compressed cluster */
};

struct qcow2_map {
    enum qcow2_map_type type;
    uint64_t bytes;    /* length of the run from the guest offset */
    uint64_t host;     /* NORMAL/ZERO_ALLOC: host offset of the guest offset */
    bool copied;       /* NORMAL: refcount is 1, overwrite in place */
    bool has_host;     /* UNALLOCATED subclusters of an allocated cluster: host is set */
    uint64_t l2_entry; /* COMPRESSED: the descriptor */
};

/* A write in flight on guest clusters.  Exclusive entries (allocating
 * writes, zeroing, discard: they change L2 entries and may move a cluster)
 * conflict with every other entry; shared entries (writes in place into a
 * cluster that stays where it is) conflict only with exclusive ones.  So a
 * cluster is never allocated twice, and an in-place write never lands in
 * a host cluster that an allocating write is copying away. */
struct qcow2_alloc {
    uint64_t guest_start, guest_end; /* cluster-aligned */
    bool shared;
    struct qcow2_alloc *next;
};

/* A cluster whose refcount drops once the L2 change is durable. */
struct qcow2_pending_free {
    uint64_t offset, bytes;
};

struct qcow2_snapshot {
    uint64_t l1_table_offset;
    uint32_t l1_size;
    char *id;
    char *name;
    uint32_t date_sec, date_nsec;
    uint64_t vm_clock_nsec;
    uint64_t vm_state_size;
    uint64_t disk_size; /* 0 when not recorded */
    int64_t icount;     /* -1 when not recorded */
};

/* Bitmap directory entry flags. */
#define QCOW2_BME_IN_USE (1u << 0)
#define QCOW2_BME_AUTO (1u << 1)
#define QCOW2_BME_EXTRA_DATA_COMPATIBLE (1u << 2)
#define QCOW2_BME_KNOWN_FLAGS 7u

/* One entry of the bitmap directory. */
struct qcow2_bitmap {
    uint64_t table_offset;
    uint32_t table_size; /* entries, one per cluster of bitmap data */
    uint32_t flags;      /* QCOW2_BME_* */
    uint8_t type;
    uint8_t granularity_bits;
    uint32_t extra_data_size;
    char *name;
    uint64_t dir_pos; /* where the entry starts in the directory */
    uint8_t *extra;   /* extra_data_size bytes, kept as they are */
    /* In memory (bitmap-store.c writes it back): the bits of a tracked
     * bitmap, or of one an operation changed. */
    struct blk_bitmap *mem;
    bool tracked; /* writes set bits in mem: enabled, and consistent at a writable open */
    bool stale;   /* mem holds bits the table on disk lacks */
};

struct qcow2_state {
    struct blk_node *node;
    struct blk_node *file;
    struct blk_node *backing; /* NULL: none; reads past its end are zeroes */
    struct qcow2_header hdr;

    uint32_t cluster_bits;
    uint64_t cluster_size;
    bool extended_l2;
    uint32_t l2_entry_size; /* 8, or 16 with extended L2 */
    uint32_t l2_bits;       /* log2(entries per L2 table) */
    uint32_t subcluster_bits;
    uint32_t csize_shift; /* compressed descriptor split */
    uint64_t csize_mask;
    uint64_t cluster_offset_mask;
    uint32_t refcount_bits;
    uint32_t refblock_bits; /* log2(refcount entries per block) */
    uint64_t refcount_max;

    bool read_only;
    bool snapshot_view; /* serving an internal snapshot (read-only) */
    bool lazy_refcounts;
    bool dirty_marked;      /* we set the dirty bit for lazy refcounts */
    bool corrupt;           /* detected at run time: stop writing */
    bool metadata_prealloc; /* made with preallocation=metadata (see qcow2.c) */

    pthread_mutex_t lock;
    pthread_cond_t alloc_done;
    struct qcow2_alloc *allocs;

    uint64_t *l1; /* host order */
    uint32_t l1_size;
    uint64_t l1_offset;
    uint64_t *reftable; /* host order */
    uint32_t reftable_entries;
    uint64_t reftable_offset;

    struct qcow2_cache *l2_cache;
    struct qcow2_cache *rb_cache;
    uint32_t l2_slice_size; /* bytes */
    uint32_t l2_slice_entries;

    struct qcow2_pending_free *pending;
    size_t n_pending, cap_pending;
    uint64_t pending_done; /* frees ever taken off the front of pending */
    /* Drops the refcounts of a pending free (set by refcount.c). */
    int (*release_locked)(struct qcow2_state *s, uint64_t offset, uint64_t bytes);

    uint64_t free_hint;       /* lowest cluster index that may be free */
    uint64_t compressed_next; /* where the next compressed cluster may go (0: new cluster) */
    uint64_t file_end;        /* one past the last cluster we know of (bytes) */

    struct qcow2_snapshot *snapshots;
    uint32_t n_snapshots;
    uint64_t snapshots_bytes; /* size of the snapshot table on disk */

    struct qcow2_bitmap *bitmaps; /* when the bitmaps extension is consistent */
    uint32_t n_bitmaps;
    bool bitmaps_invalid;          /* the extension is there but unusable */
    char *bitmaps_error;           /* why */
    _Atomic bool bitmaps_unmarked; /* enabled bitmaps not yet marked in use */

    /* Metadata ranges (host offsets) that data must never overwrite:
     * sorted, built at open, extended as tables are allocated. */
    struct qcow2_range {
        uint64_t start, end;
        enum qcow2_meta_kind kind;
    } * meta;
    size_t n_meta, cap_meta;

    /* Guest data I/O in flight, by epoch: clusters freed while an I/O
     * that mapped them may still run are not reused until it ends.  A
     * drain flips the epoch and waits on io_done (dropping the lock) for
     * the old epoch's count to reach 0; one drain runs at a time. */
    _Atomic unsigned io_epoch;
    _Atomic unsigned io_count[2];
    _Atomic unsigned io_waiters; /* drains waiting for a count to reach 0 */
    bool io_draining;            /* under lock */
    pthread_cond_t io_done;
};

static inline uint64_t qcow2_virtual_size(const struct qcow2_state *s)
{
    return s->hdr.size;
}

/* cache.c: tables are host-order arrays of u64 for L2 slices, raw bytes
 * for refcount blocks.  A table stays valid until qcow2_cache_put_locked(). */
int qcow2_cache_new(struct qcow2_cache **out, struct blk_node *file, uint32_t table_size,
                    unsigned entries);
/* Before a dirty table of c is written, depends_on is flushed and the
 * file synced. */
void qcow2_cache_set_dependency(struct qcow2_cache *c, struct qcow2_cache *depends_on);
/* Called before a dirty table is written; a negative return keeps it
 * unwritten and fails the flush or eviction. */
typedef int (*qcow2_cache_write_hook)(void *opaque, uint64_t offset, uint32_t size);
void qcow2_cache_set_write_hook(struct qcow2_cache *c, qcow2_cache_write_hook hook, void *opaque);
void qcow2_cache_free(struct qcow2_cache *c);
int qcow2_cache_get_locked(struct qcow2_cache *c, uint64_t offset, bool read, void **table);
void qcow2_cache_put_locked(struct qcow2_cache *c, void *table);
void qcow2_cache_mark_dirty_locked(struct qcow2_cache *c, void *table);
int qcow2_cache_flush_locked(struct qcow2_cache *c);
bool qcow2_cache_is_dirty_locked(const struct qcow2_cache *c);
/* Forget the tables in [offset, offset+bytes) (their cluster was freed);
 * they must not be dirty-written. */
void qcow2_cache_discard_locked(struct qcow2_cache *c, uint64_t offset, uint64_t bytes);

/* writeback.c: the order in which metadata reaches the file. */
int qcow2_write_header_locked(struct qcow2_state *s);
/* Write the header, then sync. */
int qcow2_commit_header_locked(struct qcow2_state *s);
/* Switch to new metadata with one write of bytes [from, from + len) of
 * the header h serialises to (at most one sector, so it lands whole):
 * what was written before is synced first, the switch on return.
 * *issued tells, also on failure, whether that write was started: only
 * then may the header name the new metadata. */
int qcow2_switch_header_locked(struct qcow2_state *s, const struct qcow2_header *h, unsigned from,
                               unsigned len, bool *issued);
/* A failure before a switch: nothing names what was appended since the
 * file was old_len long, so the file goes back to that length; the
 * message of failure r is kept. */
void qcow2_truncate_back_locked(struct qcow2_state *s, uint64_t old_len, int r);
/* After a switch: forget the cached L2 tables the old L1 table (l1_size
 * entries, host order) named and the cached refcount blocks of
 * s->reftable, which belong to the old state. */
void qcow2_forget_tables_locked(struct qcow2_state *s, const uint64_t *l1, uint32_t l1_size);
/* Stop writing: set the corrupt bit (once) and fail with EIO and msg. */
int qcow2_mark_corrupt_locked(struct qcow2_state *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* 0, or -EIO when the image was marked corrupt. */
int qcow2_check_writable_locked(const struct qcow2_state *s);
/* Flush the refcount cache, then sync: every refcount change and every
 * write so far is durable. */
int qcow2_commit_refcounts_locked(struct qcow2_state *s);
/* Write new metadata, flush the refcount cache, sync: done before
 * anything points at the new metadata. */
int qcow2_write_metadata_locked(struct qcow2_state *s, uint64_t off, const void *buf, uint64_t len);
/* Queue a refcount decrement for after the next L2 writeback. */
int qcow2_free_later_locked(struct qcow2_state *s, uint64_t offset, uint64_t bytes);
/* The caches' dependency and write checks, set once at open. */
void qcow2_writeback_setup_caches(struct qcow2_state *s);
/* Write every dirty table, in dependency order (refcounts, sync, L2),
 * then apply the pending frees (which may drop the lock for a while). */
int qcow2_flush_caches_locked(struct qcow2_state *s);
/* Data I/O epochs (see io_epoch): enter before guest data I/O on host
 * clusters that were mapped under the lock, leave after. */
unsigned qcow2_io_enter(struct qcow2_state *s);
void qcow2_io_leave(struct qcow2_state *s, unsigned epoch);
/* Wait until every data I/O that entered before now has left.  Drops
 * the lock while it waits: the caller re-reads what others may change. */
void qcow2_io_drain_locked(struct qcow2_state *s);

/* refcount.c */
int qcow2_load_reftable(struct qcow2_state *s);
/* The refcount table and blocks in the metadata map. */
int qcow2_add_refcount_metadata_locked(struct qcow2_state *s);
int qcow2_get_refcount_locked(struct qcow2_state *s, uint64_t cluster, uint64_t *refcount);
/* Add delta (+1/-1) to the refcount of every cluster in [offset, offset+bytes). */
int qcow2_update_refcount_locked(struct qcow2_state *s, uint64_t offset, uint64_t bytes, int delta);
/* Find n contiguous free clusters, set their refcount to 1, and return
 * their host offset. */
int qcow2_alloc_clusters_locked(struct qcow2_state *s, uint64_t n, uint64_t *offset);

/* overlap.c: the metadata map.  Is any of [off, off+len) metadata (of a
 * kind other than 'own', for writes of metadata itself)? */
bool qcow2_overlaps_metadata_locked(const struct qcow2_state *s, uint64_t off, uint64_t len);
bool qcow2_overlaps_metadata_other_locked(const struct qcow2_state *s, uint64_t off, uint64_t len,
                                          enum qcow2_meta_kind own);
/* Owners register their ranges, and drop them when they free them. */
int qcow2_add_metadata_locked(struct qcow2_state *s, uint64_t off, uint64_t len,
                              enum qcow2_meta_kind kind);
void qcow2_remove_metadata_locked(struct qcow2_state *s, uint64_t off, uint64_t len);
/* Empty the map but for the header (cluster 0). */
int qcow2_reset_metadata_locked(struct qcow2_state *s);

/* cluster.c */
int qcow2_load_l1(struct qcow2_state *s);
/* Switch to a new L1 table of new_size entries (resize). */
int qcow2_grow_l1_locked(struct qcow2_state *s, uint32_t new_size);
/* Do two entries of an L1 table (n entries, host or disk byte order) name
 * the same L2 table?  Returns 1 and sets *dup to its offset, 0, or -ENOMEM. */
int qcow2_l1_duplicate(const uint64_t *l1, uint32_t n, bool big_endian, uint64_t *dup);
int qcow2_map_locked(struct qcow2_state *s, uint64_t guest, uint64_t max_bytes,
                     struct qcow2_map *m);
/* The L2 slice holding guest's entry, allocating (or copying a shared)
 * L2 table when 'alloc'.  *index is the entry's index in the slice. */
int qcow2_get_l2_slice_locked(struct qcow2_state *s, uint64_t guest, bool alloc, uint64_t **slice,
                              unsigned *index);
uint64_t qcow2_l2_get(const struct qcow2_state *s, const uint64_t *slice, unsigned i,
                      uint64_t *bitmap);
void qcow2_l2_set(const struct qcow2_state *s, uint64_t *slice, unsigned i, uint64_t entry,
                  uint64_t bitmap);
/* Free an L2 entry's host storage (normal or compressed) later. */
int qcow2_free_l2_entry_later_locked(struct qcow2_state *s, uint64_t l2_entry);
/* The active L1 and L2 tables in the metadata map (overlap.c). */
int qcow2_add_l1_metadata_locked(struct qcow2_state *s);
int qcow2_add_l2_metadata_locked(struct qcow2_state *s);

/* read.c.  qcow2_read_range() is also the copy-on-write read. */
int qcow2_read_range(struct qcow2_state *s, uint64_t off, const struct iovec *iov, int iovcnt);
int qcow2_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt);

/* alloc.c */
int qcow2_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                  unsigned flags);
int qcow2_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);
int qcow2_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);
int qcow2_compress(struct blk_node *n, const void *in, uint64_t len, void *out, size_t cap,
                   size_t *out_len);
int qcow2_pwrite_compressed(struct blk_node *n, uint64_t off, const void *data, size_t clen);

/* chain.c: the driver's change_backing. */
int qcow2_change_backing(struct blk_node *n, const char *file, const char *format);
/* Set every L2 entry to "unallocated" and free what they held (shared
 * clusters stay for the snapshots), the caches flushed on return. */
int qcow2_drop_clusters_locked(struct qcow2_state *s);
/* Growing from old to new bytes: where the backing file reaches past
 * old, make the new range read as zeroes, durably, before the header
 * grows (as qemu's truncate zero-fills it), so that a crash never shows
 * the backing file there.  v2 images and sizes that end inside a cluster
 * are left to the caller. */
int qcow2_zero_grown_locked(struct qcow2_state *s, uint64_t old, uint64_t new);

/* Map every cluster of the image to a host cluster (create -o
 * preallocation): metadata only, or also fallocate the data (falloc), or
 * write zeroes to it (full). */
int qcow2_preallocate(struct blk_node *n, bool falloc, bool full, bool keep_backing);

/* empty.c: the driver's make_empty. */
int qcow2_make_empty(struct blk_node *n);

/* open.c: reading the metadata at open. */
int qcow2_read_header(struct qcow2_state *s);
void qcow2_setup_geometry(struct qcow2_state *s);
/* The L2 and refcount caches; l2_cache_bytes 0: the default size. */
int qcow2_make_caches(struct qcow2_state *s, uint64_t l2_cache_bytes);
/* Collect every metadata range; fails if two overlap. */
int qcow2_build_metadata_map_locked(struct qcow2_state *s);

/* create.c */
int qcow2_create(struct blk_node *file, const struct blk_create_opts *o, char **summary);
int qcow2_create_check(const struct blk_create_opts *o);
/* What -o says of a new image's layout, after create's own parsing and
 * checks of each value (for measure). */
struct qcow2_create_params {
    int version; /* 2 or 3 */
    uint64_t cluster_size;
    uint64_t refcount_bits;
    bool extended_l2;
    bool prealloc_data; /* falloc or full: every data cluster allocated */
    bool backing;       /* -o backing_file */
};
int qcow2_create_params(const struct blk_create_opts *o, struct qcow2_create_params *p);
/* measure.c: the driver's measure. */
int qcow2_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *out);
#define QCOW2_CREATE_HELP                                                                          \
    "Supported options:\n"                                                                         \
    "  backing_file=<file>      File name of a base image\n"                                       \
    "  backing_fmt=<fmt>        Image format of the base image (raw, qcow2)\n"                     \
    "  cluster_size=<size>      qcow2 cluster size, 512 to 2M (default 64k)\n"                     \
    "  compat=<level>           0.10 (v2) or 1.1 (v3, default)\n"                                  \
    "  compression_type=<type>  zlib (default) or zstd\n"                                          \
    "  extended_l2=<bool>       Extended L2 tables with subclusters (default off)\n"               \
    "  lazy_refcounts=<bool>    Postpone refcount updates (default off)\n"                         \
    "  preallocation=<mode>     off (default), metadata, falloc, full\n"                           \
    "  refcount_bits=<bits>     Width of a reference count entry, 1 to 64 (default 16)\n"          \
    "  size=<size>              Virtual disk size\n"

/* Progress of a long amend step (NULL cb: none). */
struct amend_progress {
    void (*cb)(void *opaque, uint64_t done, uint64_t total);
    void *opaque;
};
static inline void amend_progress(struct amend_progress *p, uint64_t done, uint64_t total)
{
    if (p && p->cb) {
        p->cb(p->opaque, done, total);
    }
}

/* Clusters to free later, as ranges. */
struct qcow2_free_list {
    struct qcow2_pending_free *v;
    size_t n, cap;
};

/* refcount-rewrite.c: -ENOTSUP naming the first cluster whose refcount
 * does not fit entries of 2^order bits; then the switch to them. */
int qcow2_check_refcount_width_locked(struct qcow2_state *s, uint32_t order);
int qcow2_change_refcount_order_locked(struct qcow2_state *s, uint32_t order,
                                       struct amend_progress *p);

/* downgrade.c */
int qcow2_has_compressed_clusters_locked(struct qcow2_state *s, bool *found);
int qcow2_expand_zero_clusters_locked(struct qcow2_state *s, struct amend_progress *p);
/* The bitmaps' directory, tables and data, appended to fl. */
int qcow2_collect_bitmap_clusters_locked(struct qcow2_state *s, struct qcow2_free_list *fl);
/* Can fl be freed without touching other metadata or a refcount below 0? */
int qcow2_check_free_list_locked(struct qcow2_state *s, const struct qcow2_free_list *fl);
/* Forget the bitmaps and drop their extension from s->hdr (in memory). */
void qcow2_drop_bitmaps_locked(struct qcow2_state *s);

/* upgrade.c: make a v2 image v3, rewriting a snapshot table that lacks
 * v3's extra data. */
int qcow2_upgrade_locked(struct qcow2_state *s);

/* amend.c: the driver's amend op. */
int qcow2_amend(struct blk_node *n, const char *options, bool force,
                void (*progress)(void *opaque, uint64_t done, uint64_t total), void *opaque);
#define QCOW2_AMEND_HELP                                                                           \
    "  backing_file=<str>     - File name of a base image\n"                                       \
    "  backing_fmt=<str>      - Image format of the base image\n"                                  \
    "  compat=<str>           - Compatibility level (v2 [0.10] or v3 [1.1])\n"                     \
    "  lazy_refcounts=<bool (on/off)> - Postpone refcount updates\n"                               \
    "  refcount_bits=<num>    - Width of a reference count entry in bits\n"                        \
    "  size=<size>            - Virtual disk size\n"

/* info.c: the driver's get_info. */
int qcow2_get_info(struct blk_node *n, struct blk_image_info *info);

/* backing.c, over formats/named-file.h.  The backing file's path:
 * relative to the overlay's directory; a protocol name is refused. */
int qcow2_backing_path(struct qcow2_state *s, char **out);
int qcow2_open_backing(struct qcow2_state *s, const struct blk_open_opts *opts);
/* --untrusted: the error that names the backing file not opened. */
int qcow2_refuse_backing(struct qcow2_state *s);

/* compress.c */
int qcow2_decompress_cluster(struct qcow2_state *s, uint64_t l2_entry, uint8_t *out);
/* Compress one cluster into out (cap bytes); -ENOSPC when it does not
 * fit (the caller stores it uncompressed). */
int qcow2_compress_cluster(struct qcow2_state *s, const uint8_t *in, uint8_t *out, size_t cap,
                           size_t *out_len);
/* Host clusters a compressed descriptor touches. */
void qcow2_compressed_range(const struct qcow2_state *s, uint64_t l2_entry, uint64_t *offset,
                            uint64_t *bytes);

/* check.c */
int qcow2_check(struct blk_node *n, enum blk_repair repair, FILE *report,
                struct blk_check_result *res);
int qcow2_repair_refcounts(struct qcow2_state *s);
/* References to each of the first n_clusters clusters (saturating), the
 * refcount structures left out, for the image as s describes it (header
 * L1 fields, s->snapshots, the snapshot table, bitmaps); *counts is
 * malloc'd.  *problems: corruptions met on the way. */
int qcow2_count_references_locked(struct qcow2_state *s, uint64_t n_clusters, uint32_t **counts,
                                  uint64_t *problems);

/* snapshot-write.c: the driver's snapshot op. */
int qcow2_snapshot_op(struct blk_node *n, enum blk_snapshot_op op, const char *name);

/* bitmap.c */
int qcow2_read_bitmaps(struct qcow2_state *s);
void qcow2_free_bitmaps(struct qcow2_state *s);
int qcow2_add_bitmap_metadata_locked(struct qcow2_state *s);
/* Opening for writing: loads the enabled bitmaps to track writes; whether
 * autoclear bit 0 may stay set. */
bool qcow2_bitmaps_open_rw(struct qcow2_state *s);
/* Every guest write, zeroing or discard of [off, off+len) calls this
 * first: marks enabled bitmaps in use on disk (once), sets the bits. */
int qcow2_bitmaps_before_write(struct qcow2_state *s, uint64_t off, uint64_t len);
int qcow2_load_bitmap(struct blk_node *n, const char *name, struct blk_bitmap **out);
int qcow2_bitmaps_info(const struct qcow2_state *s, struct blk_image_info *info);
/* The entry named name, or NULL. */
struct qcow2_bitmap *qcow2_find_bitmap(struct qcow2_state *s, const char *name);
/* Bring bm's bits into bm->mem from its table (a no-op when there). */
int qcow2_bitmap_load_mem_locked(struct qcow2_state *s, struct qcow2_bitmap *bm);
/* Why bm cannot be used (a read-only reason), or NULL; *bytes: its data size. */
const char *qcow2_bitmap_unusable(const struct qcow2_state *s, const struct qcow2_bitmap *bm,
                                  uint64_t *bytes);
/* Bytes of bitmap data for the virtual size at this granularity. */
uint64_t qcow2_bitmap_data_bytes(uint64_t size, uint32_t gran_bits);
#define QCOW2_BME_MAX_BITMAPS 65535
#define QCOW2_BME_MAX_DIR_SIZE (64u << 20)
#define QCOW2_BME_MAX_NAME 1023
#define QCOW2_BME_MAX_PHYS_SIZE (512ull << 20)
#define QCOW2_BME_MIN_GRAN_BITS 9
#define QCOW2_BME_MAX_GRAN_BITS 31
#define QCOW2_BME_FIXED 24

/* bitmap-store.c.  Write every stale bitmap to new clusters, then a new
 * directory, sync, switch the header's extension to it, sync, and free
 * what the old directory used (and dropped's table, when not NULL).
 * Tracked bitmaps are saved up to date, so their in-use flag is cleared
 * (the next write sets it again). */
int qcow2_bitmaps_commit_locked(struct qcow2_state *s, const struct qcow2_bitmap *dropped);
/* At close: save the tracked bitmaps if writes touched them. */
int qcow2_bitmaps_store_locked(struct qcow2_state *s);

/* bitmap-ops.c: the driver's bitmap_change. */
int qcow2_bitmap_change(struct blk_node *n, const struct blk_bitmap_op *op);
/* Resize every bitmap to len bytes and switch the header to len and the
 * new bitmaps in one write (refused while one is inconsistent). */
int qcow2_bitmaps_resize_locked(struct qcow2_state *s, uint64_t len);

/* snapshot.c */
int qcow2_read_snapshots(struct qcow2_state *s);
void qcow2_free_snapshots(struct qcow2_state *s);
int qcow2_load_snapshot_l1(struct qcow2_state *s, const char *name_or_id);
/* The snapshot table, and the snapshots' L1 tables, in the metadata map. */
int qcow2_add_snapshot_metadata_locked(struct qcow2_state *s);
int qcow2_add_snapshot_l1_metadata_locked(struct qcow2_state *s);

#endif
