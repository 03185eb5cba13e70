/* formats/vmdk/vmdk.h: the vmdk driver's state, shared by its files.
 *
 * Files, bottom to top; each calls only files below it:
 *
 *   descriptor.c  the text descriptor: parse, probe, rewrite the CID (no I/O)
 *   sparse.c      hosted sparse extents: header, grain directory, grain
 *                 tables (a cache), mapping, allocating writes
 *   read.c        guest reads of sparse extents (inflating compressed grains)
 *   stream.c      streamOptimized: compressed grains, append-only writes,
 *                 footer and end-of-stream marker
 *   parent.c      a child image's parent (parentFileNameHint)
 *   extents.c     the extents a descriptor names: confined, opened, refused
 *   create.c      creating monolithicSparse and streamOptimized images
 *   check.c       info and check
 *   vmdk.c        the driver: vtable, open, close, dispatch to extents
 *
 * Locking: s->lock guards the grain tables, the allocation pointer and the
 * in-flight allocations; it is never held across guest data I/O except
 * for streamOptimized appends, which are serial by nature.
 *
 * Crash safety (sparse.c): a new grain's data is written before any grain
 * table entry points at it.  Grain table changes stay in memory until a
 * flush, which syncs the data first, then writes the redundant and the
 * primary grain table and syncs again: a crash leaves at worst grains no
 * table points at, which every reader ignores. */
#ifndef DISKIMG_VMDK_H
#define DISKIMG_VMDK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "block/driver.h"

#define VMDK_SECTOR 512u
#define VMDK4_MAGIC "KDMV"
/* The magic of a stream being written (VMware's writer's trick). */
#define VMDK_TORN_MAGIC "kdmv"
#define VMDK_HEADER_SIZE 512u
#define VMDK_FLAG_NL_DETECT (1u << 0)
#define VMDK_FLAG_RGD (1u << 1)
#define VMDK_FLAG_ZEROED_GRAIN (1u << 2)
#define VMDK_FLAG_COMPRESS (1u << 16)
#define VMDK_FLAG_MARKER (1u << 17)
#define VMDK_GD_AT_END UINT64_MAX
#define VMDK_GTE_ZERO 1u
#define VMDK_MAX_GTES 512u
#define VMDK_MAX_GRAIN_SECTORS 0x200000u /* qemu's limit (1 GiB) */
#define VMDK_MARKER_HDR 12u              /* u64 lba, u32 size */
#define VMDK_MARKER_EOS 0u
#define VMDK_MARKER_GT 1u
#define VMDK_MARKER_GD 2u
#define VMDK_MARKER_FOOTER 3u
/* A descriptor file is read up to 1 MiB - 1, as qemu does. */
#define VMDK_MAX_DESC (1u << 20)
#define VMDK_MAX_EXTENTS 1024u
#define VMDK_DIV_UP(x, a) (((x) + (a)-1) / (a))

/* ---- descriptor.c ---- */

enum vmdk_extent_type { VMDK_TYPE_FLAT, VMDK_TYPE_SPARSE, VMDK_TYPE_ZERO };

struct vmdk_desc_extent {
    enum vmdk_extent_type type;
    uint64_t sectors;
    uint64_t offset; /* sectors, FLAT only */
    char *name;      /* as written, unescaped */
};

struct vmdk_desc {
    uint32_t cid, parent_cid;
    bool has_cid, has_parent_cid;
    char *create_type; /* NULL: none given */
    char *parent_hint; /* parentFileNameHint, or NULL */
    /* What info shows of the rest (NULL: not given); not interpreted. */
    char *encoding, *adapter_type, *hw_version, *long_content_id;
    struct vmdk_desc_extent *extents;
    unsigned n_extents;
};

/* Parse a descriptor of len bytes (NUL bytes end it).  what names the
 * file in messages.  On failure: -errno with a message. */
int vmdk_desc_parse(const char *text, size_t len, const char *what, struct vmdk_desc *d);
void vmdk_desc_free(struct vmdk_desc *d);
/* The text with its CID line set to cid (and the last 8 digits of a
 * VMware ddb.longContentID line), into out (cap bytes, zero padded);
 * -ENOSPC when it does not fit. */
int vmdk_desc_set_cid(const char *text, size_t len, uint32_t cid, char *out, size_t cap);
/* In place: the first 24 hex digits of a VMware ddb.longContentID line
 * of text (len bytes) set to prefix; without such a line, nothing. */
void vmdk_desc_set_long_id_prefix(char *text, size_t len, const char prefix[24]);
/* The probe: a sparse header or a text descriptor (qemu's rules). */
int vmdk_probe(const uint8_t *buf, size_t len, const char *filename);

/* ---- sparse.c ---- */

struct vmdk_gt_cache {
    uint32_t **gt;   /* per grain directory entry: the table, or NULL */
    uint8_t *dirty;  /* per grain directory entry */
    unsigned loaded; /* tables in memory */
    unsigned n_dirty;
};

/* One in-flight grain allocation: writers of the same grain wait. */
#define VMDK_MAX_INFLIGHT 64

struct vmdk_extent {
    enum vmdk_extent_type type;
    struct blk_node *file;
    bool own_file;   /* opened for this extent (closed with it) */
    char *name;      /* for messages */
    uint64_t start;  /* guest byte offset of the extent */
    uint64_t length; /* guest bytes */
    uint64_t flat_offset;

    /* sparse */
    uint32_t version, flags;
    uint64_t grain;     /* bytes */
    uint32_t gtes;      /* entries per grain table */
    uint64_t gd_off;    /* bytes */
    uint64_t rgd_off;   /* bytes, 0: none */
    uint32_t gd_n;      /* entries */
    uint32_t *gd, *rgd; /* sector offsets of the tables */
    uint64_t overhead;  /* bytes */
    uint64_t desc_off, desc_len;
    bool compressed, markers, zeroed_grain;
    uint64_t file_len;   /* at open; grows as appended grains are written */
    uint64_t next_alloc; /* where the next grain goes */
    struct vmdk_gt_cache cache;
    uint64_t inflight[VMDK_MAX_INFLIGHT];
    unsigned n_inflight;
    pthread_cond_t alloc_done;
};

struct vmdk_state {
    struct blk_node *node;
    struct blk_node *backing; /* the parent, or NULL */
    pthread_mutex_t lock;
    struct vmdk_extent *extents;
    unsigned n_extents;
    uint64_t size;
    struct vmdk_desc desc;
    char *desc_text; /* the descriptor as read */
    size_t desc_len;
    bool desc_embedded; /* in the sparse file at extents[0].desc_off */
    bool read_only;
    bool stream;              /* streamOptimized */
    _Atomic bool cid_updated; /* the first write of this open changed the CID */
    bool stream_dirty;        /* grains appended: footer and EOS at flush */
    bool stream_torn;         /* the header's magic says "being written" */
    uint32_t stream_last_grain;
    bool stream_has_last;
};

/* Where a guest range maps inside one sparse extent. */
enum vmdk_map_kind { VMDK_MAP_UNALLOC, VMDK_MAP_ZERO, VMDK_MAP_DATA, VMDK_MAP_COMPRESSED };
struct vmdk_map {
    enum vmdk_map_kind kind;
    uint64_t host; /* DATA: byte offset; COMPRESSED: the grain's marker */
    uint64_t bytes;
};

/* "EXTENT: vmdk: REASON" with errno err (returns -err). */
int vmdk_extent_error(const struct vmdk_extent *e, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Read and check the sparse header at offset 0 of e->file. */
int vmdk_sparse_open(struct vmdk_extent *e, bool writable);
void vmdk_extent_free(struct vmdk_extent *e);
/* Grain lookup for extent offset off (bytes), at most len bytes. */
int vmdk_sparse_map_locked(struct vmdk_extent *e, uint64_t off, uint64_t len, struct vmdk_map *m);
int vmdk_sparse_read(struct vmdk_state *s, struct vmdk_extent *e, uint64_t off, uint8_t *buf,
                     uint64_t len);
int vmdk_sparse_write(struct vmdk_state *s, struct vmdk_extent *e, uint64_t off, const uint8_t *buf,
                      uint64_t len);
int vmdk_sparse_zero(struct vmdk_state *s, struct vmdk_extent *e, uint64_t off, uint64_t len);
/* Write the dirty grain tables (after a sync of the data), then sync. */
int vmdk_sparse_flush_locked(struct vmdk_extent *e);
/* Set a grain table entry (in memory, dirty). */
int vmdk_sparse_set_gte_locked(struct vmdk_extent *e, uint64_t grain, uint32_t value);
/* Does grain have a grain table to point from?  The directory is fixed
 * once open, so no lock is needed to ask; the error says why not. */
bool vmdk_sparse_has_gt(const struct vmdk_extent *e, uint64_t grain);
int vmdk_sparse_no_gt_error(struct vmdk_extent *e, uint64_t grain);
int vmdk_sparse_get_gte_locked(struct vmdk_extent *e, uint64_t grain, uint32_t *value);
int vmdk_inflate_grain(struct vmdk_extent *e, uint64_t marker_off, uint64_t grain_index,
                       uint8_t *out, uint64_t out_len);
/* The append of [host, host+len) is over (e->next_alloc was moved past
 * it when it began): written, the file holds it; refused or failed, its
 * space is given back unless another append took the space after it
 * (then it stays a hole nothing points at).  A refused append past the
 * end of a file that cannot grow must not leave later ones a gap. */
void vmdk_sparse_alloc_done_locked(struct vmdk_extent *e, uint64_t host, uint64_t len,
                                   bool written);
/* The byte after the last grain stored (its marker and data). */
int vmdk_sparse_data_end_locked(struct vmdk_extent *e, uint64_t *end);

/* ---- parent.c ---- */

bool vmdk_has_parent(const struct vmdk_state *s);
int vmdk_parent_path(const struct vmdk_state *s, char **out);
int vmdk_open_parent(struct vmdk_state *s, const struct blk_open_opts *opts);
int vmdk_read_parent(struct vmdk_state *s, uint64_t off, uint8_t *buf, uint64_t len);

/* ---- stream.c ---- */

int vmdk_stream_compress(struct blk_node *n, const void *in, uint64_t len, void *out, size_t cap,
                         size_t *out_len);
int vmdk_stream_pwrite_compressed(struct blk_node *n, uint64_t off, const void *data, size_t clen);
int vmdk_stream_write(struct vmdk_state *s, uint64_t off, const uint8_t *buf, uint64_t len);
int vmdk_stream_open_rw(struct vmdk_state *s);
int vmdk_stream_finish_locked(struct vmdk_state *s);

/* ---- extents.c ---- */

int vmdk_open_extents(struct vmdk_state *s, const struct blk_open_opts *opts, const char *dir_of);

/* The CID a derived or random UUID gives (blk_create_uuid, uuid_derive
 * with VMDK_ID_CID): its first 32 bits, never the values that mean "no
 * parent" or "unset". */
#define VMDK_ID_CID "vmdk CID"
#define VMDK_ID_LONG_CONTENT "vmdk longContentID"
static inline uint32_t vmdk_cid_from_uuid(const uint8_t *u)
{
    uint32_t cid = (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];

    return cid >= 0xfffffffeu ? 1 : cid;
}

/* ---- create.c ---- */

int vmdk_create(struct blk_node *file, const struct blk_create_opts *o, char **summary);
int vmdk_create_check(const struct blk_create_opts *o);
/* The file size "convert -O vmdk" writes (the driver's measure). */
int vmdk_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *m);
/* What the descriptor of a new single-file image says. */
struct vmdk_new_desc {
    uint32_t cid, parent_cid;
    const char *create_type;
    uint64_t sectors;
    const char *extent_name;
    const char *parent_hint; /* NULL: no parent */
    const char *adapter, *hwversion, *toolsversion;
    /* VMware's descriptor: encoding, ddb.longContentID (24 hex digits,
     * then the CID) and its cylinder count. */
    bool vmware;
    const char *long_id_prefix;
};
/* Write a descriptor's text for a new single-file image. */
int vmdk_format_descriptor(char *out, size_t cap, const struct vmdk_new_desc *d);
#define VMDK_CREATE_HELP                                                                           \
    "Supported options:\n"                                                                         \
    "  size=<size>             Virtual disk size\n"                                                \
    "  subformat=<str>         monolithicSparse (default) or streamOptimized\n"                    \
    "  adapter_type=<str>      ide (default), lsilogic, buslogic or legacyESX\n"                   \
    "  backing_file=<str>      File name of a base image (a vmdk image)\n"                         \
    "  backing_fmt=<str>       Must be 'vmdk' if present\n"                                        \
    "  hwversion=<str>         VMDK hardware version (default 4)\n"                                \
    "  compat6=<bool>          VMDK version 6 image (hwversion 6)\n"                               \
    "  toolsversion=<str>      VMware guest tools version (default 2147483647)\n"                  \
    "  zeroed_grain=<bool>     Enable efficient zero writes (zeroed-grain entries)\n"              \
    "  layout=<str>            qemu (default) or vmware: a streamOptimized image as VMware's\n"    \
    "                          writer lays it out (diskimg only)\n"

/* ---- check.c ---- */

int vmdk_get_info(struct blk_node *n, struct blk_image_info *info);
int vmdk_check(struct blk_node *n, enum blk_repair repair, FILE *report,
               struct blk_check_result *res);

#endif
