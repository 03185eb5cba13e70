/* formats/qcow2/amend.c: "amend -o ..." on an open image, as qemu-img 7.2
 * amends qcow2: compat (both ways), lazy_refcounts, refcount_bits, size,
 * and the backing fields (which it only accepts unchanged).
 *
 * qemu checks some things only after it has changed others (an upgrade,
 * then a refused backing file); here every refusal comes first, with
 * qemu's message, so that a failed amend leaves the image as it was.  The
 * steps then run in qemu's order: upgrade, refcount width, header bits,
 * lazy refcounts, size, downgrade.  Each step is crash-safe on its own:
 * new metadata is written and synced before the header points at it.
 *
 * Order (qcow2.h): above upgrade.c; below qcow2.c, whose resize
 * it reaches through the node's vtable. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "qcow2.h"

/* What -o asks for; fields start as the image is. */
struct amend_req {
    uint32_t version;
    bool size_set;
    uint64_t size;
    bool backing_file_set, backing_fmt_set;
    const char *backing_file, *backing_fmt;
    bool lazy;
    uint64_t refcount_bits;
    const char *compat;
    const char *bad_data_file; /* data_file given */
    bool bad_data_file_raw;    /* data_file_raw=on given */
    bool encrypt;              /* an encrypt.* amend key */
    char *owned[8];            /* copies of the values kept (the walk reuses its buffer) */
    unsigned n_owned;
};

static const char *keep(struct amend_req *q, const char *value)
{
    if (!value) {
        value = "";
    }
    if (q->n_owned == sizeof q->owned / sizeof q->owned[0]) {
        free(q->owned[0]); /* a key given again: its older value is gone */
        memmove(q->owned, q->owned + 1, sizeof q->owned - sizeof q->owned[0]);
        q->n_owned--;
    }
    return q->owned[q->n_owned++] = strdup(value);
}

/* Keys qemu-img takes only when creating: its hint names them. */
static const char *const creation_only[] = {
    "cluster_size",        "extended_l2",       "compression_type",       "preallocation",
    "encryption",          "encrypt.format",    "encrypt.key-secret",     "encrypt.cipher-alg",
    "encrypt.cipher-mode", "encrypt.ivgen-alg", "encrypt.ivgen-hash-alg", "encrypt.hash-alg",
};

static const char *const encrypt_amend[] = {
    "encrypt.iter-time",  "encrypt.keyslot", "encrypt.new-secret",
    "encrypt.old-secret", "encrypt.state",
};

static bool in_list(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(key, list[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* First pass, left to right as qemu's option parser: names and value
 * types. */
static int parse_opt(const char *key, const char *value, void *opaque)
{
    struct amend_req *q = opaque;
    bool b;

    if (strcmp(key, "lazy_refcounts") == 0 || strcmp(key, "data_file_raw") == 0) {
        if (value && parse_bool(value, &b) < 0) {
            return err_setx(EINVAL, "Parameter '%s' expects 'on' or 'off'", key);
        }
        if (!value) {
            b = true;
        }
        if (key[0] == 'l') {
            q->lazy = b;
        } else {
            q->bad_data_file_raw = b;
        }
    } else if (strcmp(key, "refcount_bits") == 0) {
        char *end = NULL;
        errno = 0;
        q->refcount_bits = value ? strtoull(value, &end, 10) : 0;
        if (!value || !*value || *end || errno) {
            return err_setx(EINVAL, "Parameter '%s' expects a number", key);
        }
    } else if (strcmp(key, "size") == 0) {
        if (!value || parse_size(value, &q->size) < 0) {
            return err_setx(EINVAL, "Parameter 'size' expects a non-negative number below 2^64");
        }
        q->size_set = q->size != 0; /* qemu: size=0 leaves the size alone */
    } else if (strcmp(key, "compat") == 0) {
        q->compat = keep(q, value);
    } else if (strcmp(key, "backing_file") == 0) {
        q->backing_file_set = true;
        q->backing_file = keep(q, value);
    } else if (strcmp(key, "backing_fmt") == 0) {
        q->backing_fmt_set = true;
        q->backing_fmt = keep(q, value);
    } else if (strcmp(key, "data_file") == 0) {
        q->bad_data_file = keep(q, value);
    } else if (in_list(key, encrypt_amend, sizeof encrypt_amend / sizeof encrypt_amend[0])) {
        q->encrypt = true;
    } else if (in_list(key, creation_only, sizeof creation_only / sizeof creation_only[0])) {
        return err_setx(EINVAL,
                        "Invalid parameter '%s': this option is only supported for image "
                        "creation",
                        key);
    } else {
        return err_setx(EINVAL, "Invalid parameter '%s'", key);
    }
    return 0;
}

/* Second pass, in the order of qemu's option table: the values. */
static int check_values(const struct qcow2_state *s, struct amend_req *q)
{
    if (q->compat) {
        if (strcmp(q->compat, "0.10") == 0 || strcmp(q->compat, "v2") == 0) {
            q->version = 2;
        } else if (strcmp(q->compat, "1.1") == 0 || strcmp(q->compat, "v3") == 0) {
            q->version = 3;
        } else {
            return err_setx(EINVAL, "Unknown compatibility level %s", q->compat);
        }
    }
    if (q->bad_data_file) {
        return err_setx(EINVAL, "data-file can only be set for images that use an external "
                                "data file");
    }
    if (q->bad_data_file_raw) {
        return err_setx(EINVAL, "data-file-raw cannot be set on existing images");
    }
    if (q->refcount_bits == 0 || q->refcount_bits > 64 || !IS_POW2(q->refcount_bits)) {
        return err_setx(EINVAL, "Refcount width must be a power of two and may not exceed 64 "
                                "bits");
    }
    if (q->encrypt) {
        return err_setx(EINVAL, "Can't amend encryption options - encryption not present");
    }
    (void)s;
    return 0;
}

static bool str_differs(const char *a, const char *b)
{
    return (a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0);
}

/* The refusals of a downgrade to v2, in qemu's order, for the image as it
 * will be by then. */
static int check_downgrade(struct qcow2_state *s, const struct amend_req *q)
{
    uint64_t size = q->size_set ? q->size : s->hdr.size;
    bool compressed = false;
    int r;

    if (q->refcount_bits != 16) {
        return err_setx(ENOTSUP, "compat=0.10 requires refcount_bits=16");
    }
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        if (s->snapshots[i].vm_state_size > UINT32_MAX || s->snapshots[i].disk_size != size) {
            return err_setx(ENOTSUP, "Internal snapshots prevent downgrade of image");
        }
    }
    uint64_t incompat =
        s->hdr.incompatible_features & ~(QCOW2_INCOMPAT_COMPRESSION | QCOW2_INCOMPAT_DIRTY);
    if (incompat) {
        return err_setx(ENOTSUP,
                        "Cannot downgrade an image with incompatible features 0x%" PRIx64 " set",
                        incompat);
    }
    if (s->hdr.compression_type != QCOW2_COMPRESSION_ZLIB) {
        r = qcow2_has_compressed_clusters_locked(s, &compressed);
        if (r < 0) {
            return r;
        }
        if (compressed) {
            return err_setx(ENOTSUP, "Cannot downgrade an image with zstd compression type and "
                                     "existing compressed clusters");
        }
    }
    /* Ours: the bitmaps go with their clusters, which must be theirs. */
    struct qcow2_free_list bitmap_clusters = {0};
    r = qcow2_collect_bitmap_clusters_locked(s, &bitmap_clusters);
    if (r == 0) {
        r = qcow2_check_free_list_locked(s, &bitmap_clusters);
    }
    free(bitmap_clusters.v);
    return r;
}

/* Every refusal, before anything is written. */
static int check_request(struct qcow2_state *s, struct amend_req *q)
{
    int r = check_values(s, q);

    if (r < 0) {
        return r;
    }
    if (q->refcount_bits != s->refcount_bits) {
        if (q->version < 3 && q->refcount_bits != 16) {
            return err_setx(EINVAL, "Refcount widths other than 16 bits require compatibility "
                                    "level 1.1 or above (use compat=1.1 or greater)");
        }
        r = qcow2_check_refcount_width_locked(s, (uint32_t)__builtin_ctzll(q->refcount_bits));
        if (r < 0) {
            return r;
        }
    }
    if ((q->backing_file_set || q->backing_fmt_set) &&
        (str_differs(q->backing_file, s->hdr.backing_file) ||
         str_differs(q->backing_fmt, s->hdr.backing_format))) {
        return err_setx(EINVAL, "Cannot amend the backing file; use 'diskimg rebase' instead");
    }
    if (q->lazy && !s->lazy_refcounts && q->version < 3) {
        return err_setx(EINVAL, "Lazy refcounts only supported with compatibility level 1.1 and "
                                "above (use compat=1.1 or greater)");
    }
    if (q->size_set && q->size % 512) {
        return err_setx(EINVAL, "qcow2: the new size must be a multiple of 512");
    }
    if (q->size_set && s->hdr.version < 3 && q->version < 3 && s->n_snapshots) {
        return err_setx(ENOTSUP, "Can't resize a v2 image which has snapshots");
    }
    if (q->version < s->hdr.version) {
        return check_downgrade(s, q);
    }
    return 0;
}

static int set_lazy_locked(struct qcow2_state *s, bool on)
{
    uint64_t old = s->hdr.compatible_features;
    int r;

    if (on) {
        s->hdr.compatible_features |= QCOW2_COMPAT_LAZY_REFCOUNTS;
    } else {
        s->hdr.compatible_features &= ~QCOW2_COMPAT_LAZY_REFCOUNTS;
    }
    r = qcow2_commit_header_locked(s);
    if (r < 0) {
        s->hdr.compatible_features = old;
        return r;
    }
    s->lazy_refcounts = on;
    return 0;
}

/* Zero clusters become data (v2 has no zero flag), the bitmaps go (v2
 * has no autoclear bits to keep them valid), then one header write makes
 * the image v2.  A crash before it leaves a v3 image that reads the same. */
static int downgrade_locked(struct qcow2_state *s, struct amend_progress *p)
{
    struct qcow2_free_list bitmap_clusters = {0};
    int r = qcow2_expand_zero_clusters_locked(s, p);

    if (r == 0) {
        r = qcow2_collect_bitmap_clusters_locked(s, &bitmap_clusters);
    }
    if (r < 0) {
        free(bitmap_clusters.v);
        return r;
    }
    qcow2_drop_bitmaps_locked(s);
    s->hdr.version = 2;
    s->hdr.incompatible_features = 0;
    s->hdr.compatible_features = 0;
    s->hdr.autoclear_features = 0;
    s->hdr.compression_type = QCOW2_COMPRESSION_ZLIB;
    s->hdr.refcount_order = 4;
    free(s->hdr.extra_fields);
    s->hdr.extra_fields = NULL;
    s->hdr.extra_fields_len = 0;
    s->lazy_refcounts = false;
    r = qcow2_commit_header_locked(s);
    if (r == 0) {
        r = qcow2_build_metadata_map_locked(s);
    }
    /* Unreferenced now: a crash before this only leaks them. */
    for (size_t i = 0; r == 0 && i < bitmap_clusters.n; i++) {
        r = qcow2_update_refcount_locked(s, bitmap_clusters.v[i].offset, bitmap_clusters.v[i].bytes,
                                         -1);
    }
    free(bitmap_clusters.v);
    return r == 0 ? qcow2_commit_refcounts_locked(s) : r;
}

/* The steps, in qemu's order, once every check has passed. */
static int run_steps(struct blk_node *n, struct qcow2_state *s, struct amend_req *q,
                     struct amend_progress *p)
{
    int r;

    pthread_mutex_lock(&s->lock);
    r = qcow2_check_writable_locked(s);
    if (r == 0) {
        r = qcow2_flush_caches_locked(s);
    }
    if (r == 0) {
        r = check_request(s, q);
    }
    if (r == 0 && q->version > s->hdr.version) {
        r = qcow2_upgrade_locked(s);
    }
    if (r == 0 && q->refcount_bits != s->refcount_bits) {
        r = qcow2_change_refcount_order_locked(s, (uint32_t)__builtin_ctzll(q->refcount_bits), p);
    }
    if (r == 0 && q->lazy != s->lazy_refcounts) {
        /* The image is clean: opening it for writing repaired it. */
        r = set_lazy_locked(s, q->lazy);
    }
    pthread_mutex_unlock(&s->lock);
    if (r == 0 && q->size_set && q->size != s->hdr.size) {
        r = n->drv->truncate(n, q->size);
    }
    pthread_mutex_lock(&s->lock);
    if (r == 0 && q->version < s->hdr.version) {
        r = downgrade_locked(s, p);
    }
    if (r == 0) {
        r = qcow2_flush_caches_locked(s);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

int qcow2_amend(struct blk_node *n, const char *options, bool force,
                void (*progress)(void *opaque, uint64_t done, uint64_t total), void *opaque)
{
    struct qcow2_state *s = n->opaque;
    struct amend_req q = {
        .version = s->hdr.version,
        .lazy = s->lazy_refcounts,
        .refcount_bits = s->refcount_bits,
    };
    struct amend_progress p = {.cb = progress, .opaque = opaque};
    int r;

    (void)force; /* LUKS keyslots only: we open no encrypted image */
    r = kv_foreach(options ? options : "", parse_opt, &q);
    if (r == 0 && s->snapshot_view) {
        r = err_setx(EPERM, "%s: a snapshot view cannot be amended", ESC_NAME(n));
    }
    if (r == 0) {
        r = run_steps(n, s, &q, &p);
    }
    for (unsigned i = 0; i < q.n_owned; i++) {
        free(q.owned[i]);
    }
    return r;
}
