/* block/block.h: the generic block layer as seen from above (cmd/, nbd/,
 * formats/).  An image is a stack of nodes, a format driver (raw, qcow2)
 * over a protocol driver (file); struct blk_image is what a user of the
 * stack holds: the root node plus the policies of qemu's -drive options
 * (cache mode, detect-zeroes, discard). */
#ifndef DISKIMG_BLOCK_BLOCK_H
#define DISKIMG_BLOCK_BLOCK_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

enum blk_req_flags {
    BLK_REQ_FUA = 1u << 0,         /* complete only when the data is on stable storage */
    BLK_REQ_MAY_UNMAP = 1u << 1,   /* pwrite_zeroes may deallocate */
    BLK_REQ_NO_FALLBACK = 1u << 2, /* pwrite_zeroes: fail with -ENOTSUP rather than write zeroes */
};
#define BLK_REQ_WRITE_MASK BLK_REQ_FUA
#define BLK_REQ_ZERO_MASK (BLK_REQ_FUA | BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK)
#define BLK_REQ_DISCARD_MASK BLK_REQ_FUA

/* Same meaning as qemu's -drive cache=. */
enum blk_cache_mode {
    BLK_CACHE_WRITEBACK,    /* page cache; client flushes honoured (default) */
    BLK_CACHE_NONE,         /* O_DIRECT; client flushes honoured */
    BLK_CACHE_WRITETHROUGH, /* page cache; every write is FUA */
    BLK_CACHE_DIRECTSYNC,   /* O_DIRECT; every write is FUA */
    BLK_CACHE_UNSAFE,       /* page cache; flushes never reach the disk */
};

enum blk_aio { BLK_AIO_THREADS, BLK_AIO_IO_URING };
enum blk_detect_zeroes { BLK_DETECT_ZEROES_OFF, BLK_DETECT_ZEROES_ON, BLK_DETECT_ZEROES_UNMAP };
enum blk_discard_mode { BLK_DISCARD_IGNORE, BLK_DISCARD_UNMAP };

/* One run of blocks with the same status. */
enum blk_extent_flags {
    BLK_EXT_DATA = 1u << 0,      /* backed by data at this layer (not a hole) */
    BLK_EXT_ZERO = 1u << 1,      /* reads as zeroes */
    BLK_EXT_ALLOCATED = 1u << 2, /* allocated at this layer (vs a backing file) */
    BLK_EXT_OFFSET = 1u << 3,    /* 'offset' is the data's place in the protocol file */
    BLK_EXT_INFLATE = 1u << 4,   /* with DATA: stored compressed, reading costs CPU */
};
struct blk_extent {
    uint64_t length;
    unsigned flags;
    uint64_t offset; /* with BLK_EXT_OFFSET */
    /* Two views of the backing chain, as qemu has them:
     * layer: the image (0 = this one, 1 = its backing file, ...) whose
     *   status answered, as qemu-img map reports "depth";
     * depth: qemu:allocation-depth, 0 where no image holds the range, else
     *   layer + 1; zeroes past the end of a short backing file count as held
     *   by that backing file. */
    uint32_t layer;
    uint32_t depth;
    const char *filename; /* file 'offset' refers to (valid while open) */
};

struct blk_node;

/* Generic I/O on one node: checks (bounds, read-only, alignment by
 * read-modify-write), flag masking and emulation.  Used by format drivers
 * on their children and by blk_image_*. */
int blk_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt);
int blk_pread(struct blk_node *n, uint64_t off, void *buf, uint64_t len);
int blk_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                unsigned flags);
int blk_pwrite(struct blk_node *n, uint64_t off, const void *buf, uint64_t len, unsigned flags);
int blk_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);
int blk_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);
/* What blk_discard would refuse (read-only, out of range), without
 * discarding: a policy that ignores discards still refuses those. */
int blk_discard_check(struct blk_node *n, uint64_t off, uint64_t len);
/* Compressed clusters (formats that have them, else -ENOTSUP): compress
 * one cluster, then write the result as the guest bytes [off, off+len)
 * (see blk_image_compress). */
int blk_compress(struct blk_node *n, const void *in, uint64_t len, void *out, size_t cap,
                 size_t *out_len);
int blk_pwrite_compressed(struct blk_node *n, uint64_t off, uint64_t len, const void *data,
                          size_t clen);
int blk_flush(struct blk_node *n);
int blk_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext);
/* Status of [off, off + len) of a format node that defers to 'backing'
 * there (an unallocated cluster, grain or block; backing may be NULL):
 * the backing image's answer one layer down, or zeroes where there is no
 * backing image or off is past its end, which allocation depth counts as
 * held by the backing file, as qemu does.  The zero answer has no
 * filename or offset. */
int blk_block_status_below(struct blk_node *backing, uint64_t off, uint64_t len,
                           struct blk_extent *ext);
int blk_prefetch(struct blk_node *n, uint64_t off, uint64_t len);
int64_t blk_get_length(struct blk_node *n);
int blk_truncate(struct blk_node *n, uint64_t len);
/* Whether n's length can change at all: n and every node down its file
 * chain are writable and have a truncate op (a format's length lives in
 * its file).  Without the op blk_truncate still accepts the length the
 * node has, a resize that changes nothing, so that call cannot answer
 * this (NBD, http).  A driver with the op may refuse a given length (a
 * block device, an append-only file): true says only that asking is worth it. */
bool blk_can_resize(const struct blk_node *n);
const char *blk_node_driver_name(const struct blk_node *n);
const char *blk_node_filename(const struct blk_node *n);
struct blk_node *blk_node_child(const struct blk_node *n);

/* ---- Driver options (qemu's --image-opts keys) ---- */

/* An ordered list of key=value strings for the drivers of one image.  The
 * generic layer offers it to the format and protocol nodes of the image
 * (not to backing files); each driver takes the keys it declares, parses
 * their values itself and refuses bad ones.  A key that no driver of the
 * image takes is refused too, unless a driver declares it optional: a
 * default offered to every image, such as TLS credentials or a cache size.
 * When a key is given twice the last one wins.  The strings are borrowed:
 * they must outlive the list's use (argv, or a spec parsed in place), so
 * the list can be copied by assignment. */
#define BLK_KV_MAX 32
struct blk_kv {
    const char *key;
    const char *value;
};
struct blk_kvlist {
    struct blk_kv kv[BLK_KV_MAX];
    unsigned n;
};

/* Append key=value; -E2BIG (with a message) when the list is full. */
int blk_kv_add(struct blk_kvlist *l, const char *key, const char *value);
/* The same, dropping earlier values of key first (a repeated flag). */
int blk_kv_set(struct blk_kvlist *l, const char *key, const char *value);
/* Append every "key=value" of "k1=v1,k2=v2", splitting spec in place;
 * -EINVAL with a message for an item without '='. */
int blk_kv_parse(struct blk_kvlist *l, char *spec);
/* The value of key (the last one given), or NULL; l may be NULL. */
const char *blk_kv_get(const struct blk_kvlist *l, const char *key);
/* Before any image is opened: refuse a key that no registered driver
 * takes, and a value that a driver taking the key could not parse.
 * Whether the image's own drivers take it is known at open. */
int blk_kv_check(const struct blk_kvlist *l);

/* ---- Images ---- */

/* What a registered driver name is: a format (raw, qcow2) or a protocol
 * (file, nbd, rbd, http), for --image-opts driver=NAME. */
enum blk_driver_kind { BLK_DRIVER_NONE, BLK_DRIVER_FORMAT, BLK_DRIVER_PROTOCOL };
enum blk_driver_kind blk_driver_kind(const char *name);

struct blk_image_opts {
    /* NULL only with a protocol that builds its image from the option
     * keys (driver.h, struct blk_open_opts): the image is then named as
     * its protocol node names itself (blk_node_filename of the root). */
    const char *filename;
    const char *protocol; /* NULL: the one that claims filename, else "file" */
    const char *format;   /* NULL: probe */
    /* --image-opts driver=PROTOCOL: the protocol node is the image, read
     * through format (raw), and its format is shown as the protocol's
     * name, as qemu-img shows it ("file", "nbd", "rbd"). */
    bool protocol_image;
    enum blk_cache_mode cache;
    /* With a page-cache mode: one pass over the image (convert, compare),
     * so what it reads cold and what it writes leaves the page cache as
     * it goes (block/file-posix-stream.c). */
    bool stream;
    enum blk_aio aio;
    bool read_only;
    enum blk_detect_zeroes detect_zeroes;
    enum blk_discard_mode discard;
    /* Metadata only (info, check): leave the backing file closed.  Backing
     * files are a block-layer notion, whatever format names them. */
    bool no_backing;
    /* --untrusted: open the image alone; whatever it names beyond its own
     * file (a backing or data file) is an error naming that reference,
     * unless no_backing (metadata only); the format must be given or
     * probed unambiguously. */
    bool untrusted;
    bool for_check; /* for check: report (do not repair) a dirty image, and allow
                       repairing one marked corrupt */
    /* Locking (qemu's image locks, block/file-lock.h): a reader needs
     * consistent reads, a writer writes too, resize grows or shrinks it;
     * none lets another process write or resize the image (-EBUSY, see
     * BLK_E_IN_USE).  force_share (read-only only, qemu's -U) shares
     * everything, so it opens an image others write. */
    bool resize;
    bool force_share;
    /* Other images of this process (the exports of one server) may use
     * the same file as they like, where the format allows it: windows of
     * one raw disk written side by side, a qcow2 snapshot beside the live
     * image.  Two writers of one qcow2 file are still refused. */
    bool share_in_process;
    /* commit: the backing file this many levels down (1: the image's own)
     * opens read-write, locked for writing; 0: all read-only. */
    unsigned write_backing_depth;
    /* serve -s: the image is opened read-only (locked as a reader) and
     * every write goes to a throw-away overlay, a file of $TMPDIR that
     * has no name (block/overlay.c); the image reads as written until
     * it is closed. */
    bool temp_overlay;
    /* What the image's drivers take as key=value (an internal snapshot,
     * a window of a raw file, TLS credentials...): each driver declares
     * and checks its own keys (see "Driver options" above). */
    struct blk_kvlist options;
};

struct blk_image;

/* The error (negated) of blk_image_open and blk_create when another
 * process, or another image of this one, uses a file in a way that
 * conflicts (its locks say so); cmd/ gives it its own exit status. */
#define BLK_E_IN_USE EBUSY

/* Opens the stack; on failure returns -errno with a message set. */
int blk_image_open(struct blk_image **out, const struct blk_image_opts *opts);
/* Flushes (unless cache=unsafe) and closes.  Returns the flush result. */
int blk_image_close(struct blk_image *img);

uint64_t blk_image_size(const struct blk_image *img);
bool blk_image_read_only(const struct blk_image *img);
enum blk_cache_mode blk_image_cache_mode(const struct blk_image *img);
/* FUA is done natively by the stack (not emulated by a flush). */
bool blk_image_native_fua(const struct blk_image *img);
/* Write zeroes with BLK_REQ_NO_FALLBACK can succeed (fast zero). */
bool blk_image_can_fast_zero(const struct blk_image *img);
struct blk_node *blk_image_root(const struct blk_image *img);
/* Images in the backing chain, this one included. */
unsigned blk_image_chain_length(const struct blk_image *img);
const char *blk_image_format(const struct blk_image *img);
/* The format was probed, not given (a probed raw image guards its first
 * sector against writes that would make it probe as another format). */
bool blk_image_format_probed(const struct blk_image *img);

int blk_image_pread(struct blk_image *img, uint64_t off, void *buf, uint64_t len);
int blk_image_pwrite(struct blk_image *img, uint64_t off, const void *buf, uint64_t len,
                     unsigned flags);
int blk_image_pwrite_zeroes(struct blk_image *img, uint64_t off, uint64_t len, unsigned flags);
/* Compressed clusters (qcow2; -ENOTSUP for formats that cannot): compress
 * one cluster (len bytes; -ENOSPC when it does not shrink: write it
 * normally), then write the clen bytes of the result for the guest range
 * [off, off+len): off is cluster-aligned, len one cluster, or less at the
 * end of the image.  Compressing needs no lock, so callers may compress in
 * parallel and write in order. */
int blk_image_compress(struct blk_image *img, const void *in, uint64_t len, void *out, size_t cap,
                       size_t *out_len);
int blk_image_pwrite_compressed(struct blk_image *img, uint64_t off, uint64_t len, const void *data,
                                size_t clen);
/* The format's cluster size, or 0 (raw). */
uint64_t blk_image_cluster_size(struct blk_image *img);
/* The image takes data only as compressed clusters (blk_copy compresses
 * for it without being asked). */
bool blk_image_compressed_only(const struct blk_image *img);
/* The bytes live on a server (an NBD export, a web server): a protocol
 * driver marked remote is somewhere in the image's stack. */
bool blk_image_remote(const struct blk_image *img);
/* Can images of this format store compressed clusters (convert -c)? */
bool blk_format_can_compress(const char *format);
/* Honours --discard: a no-op (success) with discard=ignore. */
int blk_image_discard(struct blk_image *img, uint64_t off, uint64_t len, unsigned flags);
/* Change the virtual size (qcow2: grows the L1 table as needed). */
int blk_image_truncate(struct blk_image *img, uint64_t size);
/* A no-op on stable storage with cache=unsafe (format caches are still written). */
int blk_image_flush(struct blk_image *img);
/* Block status as "qemu-img map" reports it: blk_image_block_status,
 * except for formats whose qemu driver maps more coarsely (vpc, vhdx). */
int blk_image_map_status(struct blk_image *img, uint64_t off, uint64_t len, struct blk_extent *ext);
int blk_image_block_status(struct blk_image *img, uint64_t off, uint64_t len,
                           struct blk_extent *ext);
int blk_image_prefetch(struct blk_image *img, uint64_t off, uint64_t len);
/* At most this many backing files below an image (every subcommand,
 * info --backing-chain included): deeper chains are refused. */
#define BLK_MAX_CHAIN_DEPTH 32

/* Whether the image has a backing file (opened). */
bool blk_image_has_backing(struct blk_image *img);
/* Whether block status says the whole image reads as zeroes (stops at the
 * first extent that does not). */
int blk_image_reads_as_zero(struct blk_image *img, bool *zero);

/* qemu-img amend: change the image's format options in place (-o list).
 * -ENOTSUP naming the format when it cannot amend. */
int blk_image_amend(struct blk_image *img, const char *options, bool force,
                    void (*progress)(void *opaque, uint64_t done, uint64_t total), void *opaque);
/* amend -o help for a format; NULL with a message when the format is
 * unknown or cannot amend. */
const char *blk_amend_options_help(const char *format);

/* ---- Option spellings (qemu's) ---- */

int blk_cache_mode_parse(const char *s, enum blk_cache_mode *out);
const char *blk_cache_mode_name(enum blk_cache_mode m);
int blk_aio_parse(const char *s, enum blk_aio *out);
const char *blk_aio_name(enum blk_aio a);
int blk_detect_zeroes_parse(const char *s, enum blk_detect_zeroes *out);
const char *blk_detect_zeroes_name(enum blk_detect_zeroes d);
int blk_discard_parse(const char *s, enum blk_discard_mode *out);
const char *blk_discard_name(enum blk_discard_mode d);
/* O_DIRECT for this cache mode? */
bool blk_cache_mode_direct(enum blk_cache_mode m);
/* Every write FUA for this cache mode? */
bool blk_cache_mode_writethrough(enum blk_cache_mode m);
/* Is io_uring compiled in? */
bool blk_aio_available(enum blk_aio a);

/* ---- Image information (qemu-img info) ---- */

struct blk_snapshot_info {
    char *id;
    char *name;
    uint64_t vm_state_size;
    uint32_t date_sec, date_nsec;
    uint64_t vm_clock_nsec;
    int64_t icount; /* -1: not recorded */
};

/* One format-specific fact, printed as JSON "key": value and as a
 * "label: value" line.  Nesting stays flat: BLK_INFO_ARRAY opens a list
 * named key, BLK_INFO_OBJECT opens one element of it ("[i]:"), and
 * BLK_INFO_END closes the innermost one (vmdk's extents). */
struct blk_info_field {
    const char *key;
    const char *label;
    /* BLK_INFO_BITMAPS: the image's bitmap list goes here. */
    enum {
        BLK_INFO_STR,
        BLK_INFO_INT,
        BLK_INFO_BOOL,
        BLK_INFO_BITMAPS,
        BLK_INFO_ARRAY,
        BLK_INFO_OBJECT,
        BLK_INFO_END,
    } type;
    const char *s;
    int64_t i;
    bool b;
    char *owned; /* freed with the info: s may point into it (the image is closed by then) */
};

#define BLK_INFO_MAX_FIELDS 64

/* A persistent dirty bitmap, as qemu-img info lists it. */
struct blk_bitmap_info {
    char *name;
    uint64_t granularity;
    bool in_use;  /* may be inconsistent: not saved cleanly */
    bool enabled; /* "auto": writers must record into it */
};

struct blk_image_info {
    const char *format;
    uint64_t virtual_size;
    int64_t actual_size;   /* bytes allocated on the host, -1 unknown */
    uint64_t cluster_size; /* 0: the format has none */
    bool dirty;
    bool dirty_unknown;      /* raw over NBD: no one to ask, no dirty-flag */
    char *backing_file;      /* as recorded in the image */
    char *backing_format;    /* NULL: not recorded */
    char *full_backing_file; /* resolved against the image's directory */
    struct blk_snapshot_info *snapshots;
    unsigned n_snapshots;
    struct blk_bitmap_info *bitmaps;
    unsigned n_bitmaps;
    struct blk_info_field fields[BLK_INFO_MAX_FIELDS];
    unsigned n_fields;
    /* Show the format-specific part even with no fields (qemu's rbd
     * driver, as the image's top node, has an empty one). */
    bool specific;
};

int blk_image_get_info(struct blk_image *img, struct blk_image_info *info);
/* The top-level format-specific field named key (not one inside a list),
 * or NULL. */
const struct blk_info_field *blk_info_find(const struct blk_image_info *info, const char *key);
void blk_image_info_free(struct blk_image_info *info);

/* Internal snapshots (qemu-img snapshot -c/-a/-d): create one named
 * name, apply (make the image read as) the one whose id or else name is
 * name, delete the first one named name.  -ENOTSUP when the format has
 * none, -ENOENT when no snapshot matches; the list is blk_image_get_info's. */
enum blk_snapshot_op { BLK_SNAPSHOT_CREATE, BLK_SNAPSHOT_APPLY, BLK_SNAPSHOT_DELETE };
int blk_image_snapshot(struct blk_image *img, enum blk_snapshot_op op, const char *name);

/* Load the image's persistent dirty bitmap name (qcow2) into memory;
 * free it with blk_bitmap_free (block/bitmap.h). */
struct blk_bitmap;
int blk_image_load_bitmap(struct blk_image *img, const char *name, struct blk_bitmap **out);

/* One change to an image's persistent bitmaps (qemu-img bitmap).  The
 * messages say why an operation is refused, as qemu-img's do. */
enum blk_bitmap_op_kind {
    BLK_BITMAP_ADD,
    BLK_BITMAP_REMOVE,
    BLK_BITMAP_CLEAR,
    BLK_BITMAP_ENABLE,
    BLK_BITMAP_DISABLE,
    BLK_BITMAP_MERGE,
};
struct blk_bitmap_op {
    enum blk_bitmap_op_kind kind;
    const char *name;
    uint32_t granularity;            /* ADD: bytes per bit; 0: the format's default */
    bool disabled;                   /* ADD: do not record writes */
    const struct blk_bitmap *source; /* MERGE: its dirty bits are added to name's */
};
/* Apply op and make it durable (-ENOTSUP for a format without bitmaps). */
int blk_image_bitmap_change(struct blk_image *img, const struct blk_bitmap_op *op);
/* Can images of this format store persistent bitmaps? */
bool blk_format_has_bitmaps(const char *format);

/* ---- Copying (convert) ---- */

/* Requests in flight when blk_copy_opts.workers is 0 (a driver may
 * split each into smaller ones on the wire: NBD's 256 KiB pieces). */
#define BLK_COPY_DEFAULT_IN_FLIGHT 8

struct blk_copy_opts {
    unsigned workers;     /* requests in flight (-m; 0: BLK_COPY_*_IN_FLIGHT) */
    bool out_of_order;    /* -W: writes need not land in order */
    uint64_t min_sparse;  /* -S: zero runs at least this long are not written (0: all) */
    bool target_is_zero;  /* zero ranges need no writing at all */
    bool compress;        /* -c: whole clusters, compressed */
    bool top_only;        /* -B: only what the source's top layer holds */
    uint64_t buffer_size; /* bytes per request (0: 2 MiB) */
    /* Called from worker threads with the bytes done so far. */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
    /* Set (e.g. by a signal handler) to stop early with -EINTR. */
    volatile sig_atomic_t *cancel;
    /* Non-NULL: receives the content checksum of the copied image, as
     * blk_image_checksum computes it for the target, from the buffers the
     * copy reads (claims then align to the hash block).  Not with
     * top_only (the target's content includes a backing file it does not
     * read): -EINVAL. */
    uint8_t *checksum;
    /* The target's virtual size for the checksum (0: dst's size); past
     * the source's end the target reads as zeroes, or is read. */
    uint64_t checksum_size;
    /* -r: data written at most this many bytes a second (0: no limit). */
    uint64_t rate_limit;
    /* --salvage: a read that fails is retried sector by sector; what
     * still fails reads as zeroes, a block status that fails as data, and
     * each failing 512-byte sector (or status) is reported here. */
    bool salvage;
    void (*salvaged)(void *opaque, uint64_t off, bool status, int err);
    void *salvaged_opaque;
    /* -C: copy data extents with copy offloading (copy_file_range) where
     * both images are files the kernel can copy between; elsewhere, or
     * with a checksum, data is read and written.  Out: bytes offloaded. */
    bool offload;
    uint64_t *offloaded;
};

/* Copy the whole of src into dst (dst at least as large). */
int blk_copy(struct blk_image *src, struct blk_image *dst, const struct blk_copy_opts *o);

/* ---- Content checksums (diskimg checksum) ---- */

/* The checksum of an image's guest-visible content: independent of the
 * format, of allocation and of holes; the virtual size is part of it.
 * The algorithm is specified in diskimg-checksum(1). */
#define BLK_CHECKSUM_LEN 32
#define BLK_CHECKSUM_ALGORITHM "dkh1-sha256"

struct blk_checksum_opts {
    unsigned workers;     /* threads reading and hashing (0: one per core, at least 8) */
    uint64_t buffer_size; /* bytes per read (0: 4 MiB) */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
    volatile sig_atomic_t *cancel; /* stop early with -EINTR */
    /* The virtual size hashed (0: the image's): a larger one is the image
     * followed by zeroes, as a target that pads the disk holds it. */
    uint64_t size;
};

/* Read what holds data (block status: zero ranges are never read) and
 * hash it on all workers.  o may be NULL. */
int blk_image_checksum(struct blk_image *img, const struct blk_checksum_opts *o,
                       uint8_t out[BLK_CHECKSUM_LEN]);

/* ---- Creating images (qemu-img create) ---- */

struct blk_file_lock;

struct blk_create_opts {
    const char *filename;
    const char *format; /* "raw", "qcow2" */
    uint64_t size;
    bool size_set;              /* else: the backing file's size */
    const char *backing_file;   /* -b, stored as given */
    const char *backing_format; /* -F; probed when NULL */
    const char *options;        /* -o key=value,... (format specific) */
    bool no_open_backing;       /* -u: trust size and backing format as given */
    bool untrusted;             /* --untrusted: open the backing file alone, for its size */
    /* Reproducible output (SOURCE_DATE_EPOCH, --reproducible): every time
     * the format stores is epoch (seconds since 1970, clamped to what the
     * field holds) and every ID is derived from the format, options and
     * size (blk_create_uuid), never random.  Else: now, and random IDs. */
    bool reproducible;
    uint64_t epoch;
    /* Non-NULL: the file's locks stay held here after blk_create returns
     * (until blk_file_lock_release), keeping other processes out until the
     * caller has opened the new image itself (convert). */
    struct blk_file_lock **keep_lock;
};
void blk_file_lock_release(struct blk_file_lock *l);
/* The time a new image records: o->epoch when reproducible, else now. */
uint64_t blk_create_time(const struct blk_create_opts *o);

/* ---- IDs of reproducible images (block/identity.c) ---- */

#define BLK_SEED_LEN 32
/* The seed a format's IDs are derived from: SHA-256 over the format, -o
 * options, backing file and format, the virtual size and, after a copy,
 * the content checksum (NULL at creation). */
int blk_identity_seed(const struct blk_create_opts *o, uint64_t size, const uint8_t *content,
                      uint8_t seed[BLK_SEED_LEN]);
/* A creator's UUID (RFC byte order) for the field named by label:
 * derived from the creation seed when o->reproducible, else random. */
int blk_create_uuid(const struct blk_create_opts *o, const char *label, uint8_t u[16]);
/* Rewrite every ID the image stores from seed (the driver's
 * set_identity; nothing for formats without IDs).  For convert: after
 * the copy, before the final flush. */
int blk_image_set_identity(struct blk_image *img, const uint8_t seed[BLK_SEED_LEN]);
/* Does the image's format store IDs (has set_identity)?  raw and qcow2
 * do not: reproducing them needs no seed, so no content checksum. */
bool blk_image_has_identity(const struct blk_image *img);

/* Lock the file (creating it if missing), then truncate and format it: a
 * file another process uses stays as it was (BLK_E_IN_USE).  *summary
 * (malloc'd) gets the option list qemu-img prints after "Formatting
 * 'FILE', ". */
int blk_create(const struct blk_create_opts *o, char **summary);
/* Remove an image blk_create made that a command then failed to fill
 * (convert, dd): the file, or the image of a protocol that creates its
 * own (rbd).  The caller's error message is kept. */
int blk_create_remove(const char *filename);
/* Does blk_create make this image through its protocol (rbd), not as a
 * local file?  It then refuses one that exists, so an image it made is
 * always new. */
bool blk_create_makes_own(const char *filename);
/* Help text for -o help, or NULL if the format has no options. */
const char *blk_create_options_help(const char *format);

/* ---- Measuring and dd (qemu-img measure, dd; block/measure.c) ---- */

/* The file size a new image needs, as qemu-img measure prints it. */
struct blk_measure {
    uint64_t required;        /* holding the source's data (or nothing) */
    uint64_t fully_allocated; /* with every cluster of the disk allocated */
    bool has_bitmaps;         /* the source's persistent bitmaps could be copied */
    uint64_t bitmaps;         /* what they need on top of 'required' */
};
/* Measure an image of o->format created with o->options: a disk of
 * o->size bytes (src NULL) or one holding src's content (o->size unused).
 * -ENOTSUP with qemu-img's message for a format that cannot measure. */
int blk_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *out);
/* For a format's measure: *sized is o for a disk of src's size (o->size
 * without src), size_set, its options without size= (qemu-img measure
 * ignores it) in *options (malloc'd; the caller frees it). */
int blk_measure_sized_opts(const struct blk_create_opts *o, struct blk_image *src,
                           struct blk_create_opts *sized, char **options);
/* Bytes in the cluster_size-aligned clusters of img that hold data, down
 * its backing chain; ranges that read as zeroes do not count (for a
 * format's measure). */
int blk_image_data_clusters(struct blk_image *img, uint64_t cluster_size, uint64_t *bytes);
/* Copy src's bytes [off, off + len) to dst at 0, in order (dd).  Ranges
 * that read as zeroes are skipped when dst_zero says dst reads as zeroes
 * there, else written as zeroes.  Stops with -EINTR once *cancel is set
 * (cancel may be NULL). */
int blk_dd_copy(struct blk_image *src, uint64_t off, uint64_t len, struct blk_image *dst,
                bool dst_zero, volatile sig_atomic_t *cancel);

/* ---- Consistency check (qemu-img check) ---- */

enum blk_repair { BLK_REPAIR_NONE, BLK_REPAIR_LEAKS, BLK_REPAIR_ALL };

struct blk_check_result {
    uint64_t corruptions;  /* found */
    uint64_t leaks;        /* found */
    uint64_t check_errors; /* the check itself could not complete */
    uint64_t corruptions_fixed;
    uint64_t leaks_fixed;
    uint64_t allocated_clusters;
    uint64_t total_clusters;
    uint64_t fragmented_clusters;
    uint64_t compressed_clusters;
    uint64_t image_end_offset;
};

/* Check the image's format; each problem is a line on report (may be
 * NULL).  -ENOTSUP: the format has no check (raw). */
int blk_image_check(struct blk_image *img, enum blk_repair repair, FILE *report,
                    struct blk_check_result *res);

/* ---- Statistics ---- */

struct json_writer;
/* Per-node counters of every node in the image, as a JSON array "nodes". */
void blk_image_stats_json(const struct blk_image *img, struct json_writer *w);
/* Sums over the stack, for the human summary. */
struct blk_image_totals {
    uint64_t fua_native, fua_emulated, file_flushes, flushes_shared, flushes_skipped, rmw;
};
void blk_image_totals(const struct blk_image *img, struct blk_image_totals *t);

#endif
