/* block/driver.h: the contract between the generic block layer and drivers.
 *
 * block/ includes nothing from cmd/, nbd/ or formats/: drivers register
 * themselves into the registry (block/registry.c) from a constructor.
 * Callers above the block layer use block.h; only drivers include this. */
#ifndef DISKIMG_BLOCK_DRIVER_H
#define DISKIMG_BLOCK_DRIVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "block.h"

struct blk_node;

/* What a user of a node may do with it and lets others do, as qemu's
 * BLK_PERM_*: the same bits, since they are the offsets of the lock bytes
 * other processes read (block/file-lock.h).  Requested at open, flowing
 * down the stack: a format asks its file child for what it needs itself
 * (block/perm.c), a backing file is asked for reads only. */
enum blk_perm {
    BLK_PERM_CONSISTENT_READ = 1u << 0, /* reads return what was written */
    BLK_PERM_WRITE = 1u << 1,
    BLK_PERM_WRITE_UNCHANGED = 1u << 2, /* writes that change no data */
    BLK_PERM_RESIZE = 1u << 3,
};
#define BLK_PERM_ALL 0xfu
/* What readers and writers of diskimg share: reads, never writes or
 * resizes (qemu-img's default; LOCKING in diskimg(1) and diskimg-serve(1)
 * say why, raw images included). */
#define BLK_PERM_SHARED_DEFAULT (BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE_UNCHANGED)

/* A user's permissions on a node.  Other processes see 'shared' in the
 * lock bytes, exactly as qemu would; 'shared_here' is what other users
 * inside this process may have, which the lock bytes cannot tell apart
 * (block/file-lock.c checks it): the exports of one server share more
 * with each other than with the world. */
struct blk_perms {
    unsigned perm;        /* held */
    unsigned shared;      /* left to other processes */
    unsigned shared_here; /* left to other users of this process */
};

/* Files above a node in a backing chain, for loop detection. */
struct blk_chain {
    dev_t dev;
    ino_t ino;
    const struct blk_chain *up;
};

/* What a driver's open receives.  Protocol drivers get the filename;
 * format drivers get their child in n->file, already open. */
struct blk_open_opts {
    /* NULL for a protocol named by its option keys alone (--image-opts
     * driver=rbd,pool=..,image=..): its open builds the image from the
     * keys and sets n->filename (NULL until then) to a display name it
     * allocates, which every message above uses; the driver's name
     * when it sets none.  Formats above it get that name here. */
    const char *filename;
    bool read_only;
    bool direct;      /* O_DIRECT: bypass the host page cache */
    enum blk_aio aio; /* file driver engine */
    /* One pass over the image (convert, compare): give page-cache pages
     * back as it goes (block/file-posix-stream.c). */
    bool stream;
    bool probed; /* the format was guessed, not named (-f) */
    /* --untrusted: the image is opened alone.  A format refuses to open
     * anything an image names (backing file, data file, extent) with an
     * error naming it, unless no_backing says the caller reads metadata
     * only; probing must be unambiguous. */
    bool untrusted;
    bool no_backing; /* do not open the backing file (info, check: metadata only) */
    bool no_flush;   /* cache=unsafe: protocol flushes are no-ops */
    bool for_check;  /* opened by check: no automatic repair */
    /* The image's driver options (block.h), offered to its format and
     * protocol nodes; NULL: none.  Each driver reads the keys it declares
     * in blk_driver.options. */
    const struct blk_kvlist *options;
    /* Permissions this node's user needs and shares (enum blk_perm); the
     * file driver locks them.  Every opener sets them: 0 shares nothing. */
    struct blk_perms perms;
    bool force_share;              /* read-only: share everything, whatever is asked (-U) */
    bool no_lock;                  /* file: a lock of this process covers it already (create) */
    unsigned depth;                /* position in a backing chain, 0 = top */
    const struct blk_chain *chain; /* files above this one */
    /* The backing file at this depth (> 0) opens read-write, locked for
     * writing and resizing (commit's base); 0: every backing file is
     * read-only. */
    unsigned write_depth;
};

/* One key=value option a driver takes (blk_driver.options).  The type
 * lets options be checked before any image is opened (blk_kv_check); the
 * driver still reads the value itself, with blk_opt_size and the like,
 * and refuses what it cannot use with blk_opt_error. */
enum blk_opt_type { BLK_OPT_STRING, BLK_OPT_SIZE, BLK_OPT_UINT };
struct blk_opt_desc {
    const char *key;
    enum blk_opt_type type;
    /* A default offered to every image (credentials, a cache size): an
     * image whose drivers do not take it ignores it. */
    bool optional;
};

struct blk_driver {
    const char *name;  /* "raw", "qcow2", "file", "nbd" */
    bool is_format;    /* formats read and write through n->file */
    size_t state_size; /* the generic layer allocates n->opaque */
    /* The keys this driver takes from the image's options, ending with
     * {NULL}; NULL: none. */
    const struct blk_opt_desc *options;

    /* Protocols: does this filename belong to the driver ("nbd://...")? */
    bool (*claims)(const char *filename);
    /* Protocols: the names it claims, for messages ("NBD URIs (nbd://...)"). */
    const char *names_help;
    /* Protocols: the bytes come from a server someone else may run (a
     * web server, an NBD export), so an image read through it may not
     * name anything of this host: no backing file, parent or extent
     * (formats/named-file.c). */
    bool remote;
    /* Probe score for format detection from the first BLK_PROBE_BYTES of
     * the image (zero-padded past its end) and its name (NULL when a write
     * is checked): 0 = not this format, 1 = anything (raw), 100 = certain.
     * NULL for protocols. */
    int (*probe)(const uint8_t *buf, size_t len, const char *filename);
    /* The same from the last BLK_PROBE_BYTES of the file, for a format
     * recognised by a trailer (a fixed VHD's footer); len is 0 when no
     * tail was read.  A driver's score is the higher of the two.  NULL:
     * the format has no trailer. */
    int (*probe_tail)(const uint8_t *buf, size_t len, const char *filename);

    /* Formats: the permissions their file child needs when the node's
     * user asks for opts->perms (NULL: the same, as raw).  Called after
     * the probe and before open, with the options open will get. */
    void (*child_perm)(const struct blk_open_opts *opts, struct blk_perms *child);
    /* Protocols: change the permissions held since open (NULL: nothing
     * to lock, as for NBD).  -EBUSY when another user conflicts. */
    int (*set_perm)(struct blk_node *n, const struct blk_perms *p);

    /* Fills supported_*_flags, request_alignment and mem_alignment. */
    int (*open)(struct blk_node *n, const struct blk_open_opts *opts);
    void (*close)(struct blk_node *n);

    /* Data path.  The generic layer guarantees: off, len and every iovec
     * element are multiples of n->request_alignment / n->mem_alignment; the
     * range is inside the node unless it is growable; flags contain only
     * bits in n->supported_write_flags (or _zero_flags, _discard_flags).
     * Return 0 or -errno; on failure record a message with err_set(). */
    int (*preadv)(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt);
    int (*pwritev)(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                   unsigned flags);
    /* -ENOTSUP if the driver cannot zero without writing zeroes: the
     * generic layer then writes zero buffers (unless NO_FALLBACK).  The
     * range is not aligned to request_alignment (see zero_alignment). */
    int (*pwrite_zeroes)(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);
    /* Advisory: a driver may leave any part of the range as it was. */
    int (*discard)(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);
    /* Compressed clusters (qcow2), in two steps so that callers can
     * compress in parallel and still write in order: compress one cluster
     * (len bytes, the last one of the image may be short; pure CPU,
     * -ENOSPC when it does not shrink), then write the result at a
     * cluster-aligned guest offset.  Both are reached through io.c only,
     * which has checked that the node is writable and the cluster inside
     * it. */
    int (*compress)(struct blk_node *n, const void *in, uint64_t len, void *out, size_t cap,
                    size_t *out_len);
    int (*pwrite_compressed)(struct blk_node *n, uint64_t off, const void *data, size_t clen);
    /* Copy offloading: the node's guest offset off is its file child's
     * *file_off, and a write there updates nothing else (raw's window).
     * -ENOTSUP when not (a guarded probe window).  NULL: the node has
     * metadata of its own (block/copy-range.c). */
    int (*map_linear)(struct blk_node *n, uint64_t off, uint64_t len, uint64_t *file_off);
    /* The format's allocation unit (0: none). */
    uint64_t (*cluster_size)(struct blk_node *n);
    /* Own caches (formats) or stable storage (protocols); the generic layer
     * flushes children afterwards. */
    int (*flush)(struct blk_node *n);
    /* Describe [off, off+len): one extent starting at off, ext->length
     * in (0, len].  NULL: everything is data. */
    int (*block_status)(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext);
    /* The same, but as qemu-img 7.2 shows it in "qemu-img map", where its
     * driver knows less (whole blocks, no offsets).  NULL: block_status. */
    int (*map_status)(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext);
    /* Hint: read ahead into caches.  NULL: no-op. */
    int (*prefetch)(struct blk_node *n, uint64_t off, uint64_t len);
    /* Hint: drop clean cached pages of [off, off+len).  NULL: no-op. */
    void (*uncache)(struct blk_node *n, uint64_t off, uint64_t len);
    int64_t (*get_length)(struct blk_node *n);
    int (*truncate)(struct blk_node *n, uint64_t len);
    /* Fill what the format knows (all but format and actual_size). */
    int (*get_info)(struct blk_node *n, struct blk_image_info *info);
    /* Load persistent dirty bitmap name into memory (formats). */
    int (*load_bitmap)(struct blk_node *n, const char *name, struct blk_bitmap **out);
    /* Internal snapshots (block.h's blk_image_snapshot); NULL: none. */
    int (*snapshot)(struct blk_node *n, enum blk_snapshot_op op, const char *name);
    /* Change the persistent bitmaps (formats): one operation, durable
     * when it returns (block.h, struct blk_bitmap_op).  NULL: the format
     * stores none. */
    int (*bitmap_change)(struct blk_node *n, const struct blk_bitmap_op *op);
    /* Host bytes the node uses (protocols). */
    int64_t (*allocated_size)(struct blk_node *n);
    /* Protocols whose images are not local files (rbd): make a new, empty
     * image called filename (options: the image's driver options, may be
     * NULL), refusing one that exists (-EEXIST), as qemu-img does.  The
     * format's create then fills it.  NULL: block/create.c makes a file. */
    int (*create_node)(const char *filename, const struct blk_kvlist *options, uint64_t size);
    /* Remove what create_node made (a create or convert that failed). */
    int (*remove_node)(const char *filename, const struct blk_kvlist *options);
    /* Format a newly created (empty) protocol node. */
    int (*create)(struct blk_node *file, const struct blk_create_opts *o, char **summary);
    const char *create_help; /* text for -o help */
    /* Reject bad creation options before any file is touched (no I/O). */
    int (*create_check)(const struct blk_create_opts *o);
    /* qemu-img measure for this format (blk_measure in block.h); NULL:
     * the format cannot measure, as in qemu. */
    int (*measure)(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *out);
    /* Reproducible output: rewrite every ID the image stores (UUIDs,
     * GUIDs, CIDs) as uuid_derive(seed, label) with the labels create
     * uses, checksums included, and anything else whose bytes depend on
     * the session rather than the content.  NULL: no IDs (raw, qcow2). */
    int (*set_identity)(struct blk_node *n, const uint8_t seed[BLK_SEED_LEN]);
    /* Change options of an open image in place (qemu-img amend): 'options'
     * is the -o list ("k=v,k2=v2").  Refuses what the image cannot become
     * before writing anything; metadata moves crash-safely.  progress may
     * be NULL.  NULL: the format cannot amend (block/amend.c says so). */
    int (*amend)(struct blk_node *n, const char *options, bool force,
                 void (*progress)(void *opaque, uint64_t done, uint64_t total), void *opaque);
    const char *amend_help; /* text for amend -o help */
    /* Record a new backing file name and format in the image's metadata
     * (rebase; file NULL: none, format NULL: not recorded), durable on
     * return.  Only the header changes: the caller has made the data
     * agree.  NULL: the format cannot (qemu-img says "Operation not
     * supported"). */
    int (*change_backing)(struct blk_node *n, const char *file, const char *format);
    /* Drop every cluster the image holds so that all of it reads through
     * to the backing file (commit), durable on return.  NULL: -ENOTSUP. */
    int (*make_empty)(struct blk_node *n);
    /* Consistency check and repair (formats); NULL: nothing to check. */
    int (*check)(struct blk_node *n, enum blk_repair repair, FILE *report,
                 struct blk_check_result *res);
};

/* Per-node counters, updated with relaxed atomics on the request path. */
struct blk_node_stats {
    _Atomic uint64_t reads, writes, zeroes, discards;
    _Atomic uint64_t bytes_read, bytes_written;
    _Atomic uint64_t fua_native;      /* FUA handed to this node's driver */
    _Atomic uint64_t fua_emulated;    /* FUA done here as write + flush */
    _Atomic uint64_t flushes;         /* driver flushes run (fdatasync for file) */
    _Atomic uint64_t flushes_shared;  /* flush requests covered by another's flush */
    _Atomic uint64_t flushes_skipped; /* cache=unsafe */
    _Atomic uint64_t rmw;             /* unaligned writes done by read-modify-write */
    _Atomic uint64_t zero_fallback;   /* zeroes written as buffers */
};

struct blk_node {
    const struct blk_driver *drv;
    void *opaque;             /* driver state, drv->state_size bytes */
    struct blk_node *file;    /* the child: protocol under a format; NULL for protocols */
    struct blk_node *backing; /* the backing image (format node), owned by the driver */
    char *filename;           /* for messages */

    bool read_only;
    bool growable; /* writes past the end extend it (a format's child) */
    /* Set by open: data goes in only as compressed clusters (a
     * streamOptimized vmdk), so copies compress whatever they were asked. */
    bool compressed_only;
    bool no_flush; /* cache=unsafe: flushing stable storage is a no-op */

    /* Filled by drv->open.  Per node, not per driver: raw can promise FUA
     * only if its child can.  Atomic because a driver the kernel refuses
     * at run time loses a flag while requests are in flight. */
    _Atomic unsigned supported_write_flags;
    _Atomic unsigned supported_zero_flags;
    /* FUA only; no driver does it natively yet, so io.c flushes. */
    _Atomic unsigned supported_discard_flags;
    uint32_t request_alignment; /* offsets and lengths (1 = any) */
    /* pwrite_zeroes is called separately for the unaligned head and tail
     * of a range (qcow2: a cluster); each part it answers with -ENOTSUP
     * is written as zero buffers (1 = one call for the whole range). */
    uint32_t zero_alignment;
    uint32_t mem_alignment; /* buffer addresses and iovec lengths */
    /* FUA writes longer than this are emulated (write, then a shared
     * flush) even when FUA is supported: the driver's native FUA is slow
     * for them (file: a buffered RWF_DSYNC write cannot be split into
     * pieces).  0: no limit. */
    uint64_t native_fua_max;

    /* See blk_flush() in block/flush.c. */
    _Atomic uint64_t write_gen;
    uint64_t flushed_gen; /* protected by flush_lock */
    pthread_mutex_t flush_lock;

    /* Unaligned writes on nodes with request_alignment > 1 read-modify-write
     * whole blocks: they hold rmw_lock exclusively, aligned writes hold it
     * shared, so no overlapping write is lost. */
    pthread_rwlock_t rmw_lock;

    struct blk_node_stats stats;
};

/* Registry. */
void blk_register_driver(const struct blk_driver *drv);
const struct blk_driver *blk_find_driver(const char *name);
/* The i-th registered driver, or NULL past the last. */
const struct blk_driver *blk_driver_at(size_t i);
/* The protocol driver that claims this filename ("file" if none does, or
 * NULL with a message when it is a URL that no driver claims). */
const struct blk_driver *blk_protocol_for(const char *filename);
/* How many bytes of an image format probing looks at, as qemu does
 * (BLOCK_PROBE_BUF_SIZE), at the start of the file and, for formats
 * with a trailer, at its end.  The raw driver guards the same windows of
 * a probed image against writes that would change its probed format. */
#define BLK_PROBE_BYTES 512

/* What probing found.  'best' scores highest (the format that takes
 * anything, scoring 1, when no other format claims the bytes; NULL if
 * none is registered); 'other' is a second format that claims them too
 * (score above 1), or NULL; 'tie' when it scores as high as best. */
struct blk_probe {
    const struct blk_driver *best;
    const struct blk_driver *other;
    int score;
    bool tie;
};
void blk_probe_all(const uint8_t *buf, size_t len, const char *filename, struct blk_probe *out);
/* The same with the file's last bytes too (tail: its last tail_len bytes,
 * at most BLK_PROBE_BYTES; NULL and 0 when the file is shorter). */
void blk_probe_all_tail(const uint8_t *buf, size_t len, const uint8_t *tail, size_t tail_len,
                        const char *filename, struct blk_probe *out);
/* The format these bytes probe as: best, or NULL on a tie. */
const struct blk_driver *blk_probe_format(const uint8_t *buf, size_t len, const char *filename);
const struct blk_driver *blk_probe_format_tail(const uint8_t *buf, size_t len, const uint8_t *tail,
                                               size_t tail_len, const char *filename);

#define BLK_REGISTER_DRIVER(drv)                                                                   \
    __attribute__((constructor)) static void register_##drv(void)                                  \
    {                                                                                              \
        blk_register_driver(&(drv));                                                               \
    }

/* Driver options (block/driver-options.c).  The one convention for a bad
 * or unknown key: a one-line message "DRIVER: option 'KEY': REASON"
 * (driver NULL: "option 'KEY': REASON"), and -EINVAL. */
int blk_opt_error(const char *driver, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Read a size ("64k") or an unsigned number: 1 and *out when key is in l,
 * 0 (*out unchanged) when it is not, -EINVAL when the value is bad. */
int blk_opt_size(const struct blk_kvlist *l, const char *driver, const char *key, uint64_t *out);
int blk_opt_uint(const struct blk_kvlist *l, const char *driver, const char *key, unsigned *out);
/* Every key of l is taken by fmt or proto, or is optional (-EINVAL
 * naming the first that is not). */
int blk_opts_check_stack(const struct blk_kvlist *l, const struct blk_driver *fmt,
                         const struct blk_driver *proto);

/* Open a format node over a protocol node for o->filename: the format is
 * 'format', or probed when NULL (then o->probed is passed as true).
 * Refuses backing loops (o->chain) and chains deeper than
 * BLK_MAX_CHAIN_DEPTH (block.h). */
int blk_open_stack(struct blk_node **out, const struct blk_open_opts *o, const char *protocol,
                   const char *format);

/* Permissions (block/perm.c).  A format's file holding its metadata
 * (qcow2): it must read it consistently, writes and resizes it when
 * writable, and lets nobody else write or resize it, read-only or not. */
void blk_perm_for_metadata(bool writable, const struct blk_perms *in, struct blk_perms *out);
/* A backing file: reads only, and writes by others are shared only when
 * the image's own user shares them. */
void blk_perm_for_backing(const struct blk_perms *in, struct blk_perms *out);
/* Apply drv's child permissions for o to its file child. */
int blk_perm_set_child(struct blk_node *file, const struct blk_driver *drv,
                       const struct blk_open_opts *o);

/* Open a node with the given driver; 'child' (may be NULL) becomes n->file
 * and is owned by the new node from then on, even on failure. */
int blk_node_open(struct blk_node **out, const struct blk_driver *drv, struct blk_node *child,
                  const struct blk_open_opts *opts);
void blk_node_close(struct blk_node *n);

/* Format-specific facts for get_info (block/info-fields.c): appended in
 * order; strings are copied. */
void blk_info_add_int(struct blk_image_info *info, const char *key, const char *label, int64_t v);
void blk_info_add_bool(struct blk_image_info *info, const char *key, const char *label, bool v);
void blk_info_add_str(struct blk_image_info *info, const char *key, const char *label,
                      const char *v);

/* Trace one driver call when -D block.trace=1 (see common/log.h). */
void blk_trace(const struct blk_node *n, const char *op, uint64_t off, uint64_t len,
               unsigned flags);

#endif
