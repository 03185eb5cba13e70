/* formats/qcow2/cache.c: a write-back cache of fixed-size metadata tables
 * (qcow2 uses one for L2 slices and one for refcount blocks).  Tables are
 * kept in disk byte order, looked up by host offset through a hash, evicted
 * least-recently-used.  A table handed out by qcow2_cache_get_locked() is
 * pinned until qcow2_cache_put_locked().
 *
 * The cache knows nothing of what its tables mean.  The layer above tells
 * it two things at open (writeback.c): a dependency (before a dirty table
 * of this cache is written, the cache it depends on is flushed and the
 * file synced), and a hook that may refuse a write (the overlap check).
 * It calls no other qcow2 file (order: qcow2.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "qcow2.h"

struct qcow2_cache_entry {
    uint64_t offset; /* host offset; 0 = free slot */
    void *table;
    uint64_t lru;
    unsigned pins;
    bool dirty;
    int hash_next; /* next entry in the same bucket, -1 = end */
};

struct qcow2_cache {
    struct blk_node *file;
    struct qcow2_cache *depends_on; /* flushed, and the file synced, first */
    qcow2_cache_write_hook before_write;
    void *hook_opaque;
    uint32_t table_size;
    unsigned n;
    struct qcow2_cache_entry *e;
    int *bucket;
    unsigned nbuckets; /* power of 2 */
    uint64_t lru_clock;
    unsigned ndirty;
    void *tables; /* one aligned block for all tables */
};

static unsigned cache_hash(const struct qcow2_cache *c, uint64_t offset)
{
    uint64_t h = (offset / c->table_size) * 0x9e3779b97f4a7c15ULL;
    return (unsigned)(h >> 32) & (c->nbuckets - 1);
}

int qcow2_cache_new(struct qcow2_cache **out, struct blk_node *file, uint32_t table_size,
                    unsigned entries)
{
    struct qcow2_cache *c = calloc(1, sizeof *c);
    void *tables = NULL;

    if (!c) {
        return err_set(ENOMEM, "qcow2: metadata cache");
    }
    c->file = file;
    c->table_size = table_size;
    c->n = entries;
    c->nbuckets = 1;
    while (c->nbuckets < 2 * entries) {
        c->nbuckets <<= 1;
    }
    c->e = calloc(entries, sizeof *c->e);
    c->bucket = malloc(sizeof *c->bucket * c->nbuckets);
    if (posix_memalign(&tables, 4096, (size_t)table_size * entries) != 0) {
        tables = NULL;
    }
    if (!c->e || !c->bucket || !tables) {
        free(c->e);
        free(c->bucket);
        free(tables);
        free(c);
        return err_set(ENOMEM, "qcow2: metadata cache of %u x %" PRIu32 " bytes", entries,
                       table_size);
    }
    c->tables = tables;
    for (unsigned i = 0; i < c->nbuckets; i++) {
        c->bucket[i] = -1;
    }
    for (unsigned i = 0; i < entries; i++) {
        c->e[i].table = (char *)tables + (size_t)i * table_size;
        c->e[i].hash_next = -1;
    }
    *out = c;
    return 0;
}

void qcow2_cache_set_dependency(struct qcow2_cache *c, struct qcow2_cache *depends_on)
{
    c->depends_on = depends_on;
}

void qcow2_cache_set_write_hook(struct qcow2_cache *c, qcow2_cache_write_hook hook, void *opaque)
{
    c->before_write = hook;
    c->hook_opaque = opaque;
}

void qcow2_cache_free(struct qcow2_cache *c)
{
    if (c) {
        free(c->tables);
        free(c->e);
        free(c->bucket);
        free(c);
    }
}

static int cache_find(const struct qcow2_cache *c, uint64_t offset)
{
    for (int i = c->bucket[cache_hash(c, offset)]; i >= 0; i = c->e[i].hash_next) {
        if (c->e[i].offset == offset) {
            return i;
        }
    }
    return -1;
}

static void cache_unhash(struct qcow2_cache *c, int i)
{
    int *p = &c->bucket[cache_hash(c, c->e[i].offset)];

    while (*p != i) {
        p = &c->e[*p].hash_next;
    }
    *p = c->e[i].hash_next;
    c->e[i].hash_next = -1;
    c->e[i].offset = 0;
}

static void cache_hash_insert(struct qcow2_cache *c, int i, uint64_t offset)
{
    unsigned b = cache_hash(c, offset);

    c->e[i].offset = offset;
    c->e[i].hash_next = c->bucket[b];
    c->bucket[b] = i;
}

/* What must be durable before a dirty table of this cache is written:
 * the tables of the cache it depends on, and (by the same sync) every
 * write before them. */
static int cache_write_prepare(struct qcow2_cache *c)
{
    int r;

    if (!c->depends_on) {
        return 0;
    }
    r = qcow2_cache_flush_locked(c->depends_on);
    if (r == 0) {
        r = blk_flush(c->file);
    }
    return r;
}

static int cache_write_entry(struct qcow2_cache *c, int i)
{
    struct qcow2_cache_entry *e = &c->e[i];
    int r;

    if (!e->dirty) {
        return 0;
    }
    if (c->before_write) {
        r = c->before_write(c->hook_opaque, e->offset, c->table_size);
        if (r < 0) {
            return r;
        }
    }
    r = blk_pwrite(c->file, e->offset, e->table, c->table_size, 0);
    if (r < 0) {
        return r;
    }
    e->dirty = false;
    c->ndirty--;
    return 0;
}

/* Pick a slot for a new table, writing back an evicted dirty one. */
static int cache_evict(struct qcow2_cache *c, int *slot)
{
    int best = -1;
    int r;

    for (unsigned i = 0; i < c->n; i++) {
        if (c->e[i].pins) {
            continue;
        }
        if (c->e[i].offset == 0) {
            best = (int)i;
            break;
        }
        if (best < 0 || c->e[i].lru < c->e[best].lru) {
            best = (int)i;
        }
    }
    if (best < 0) {
        return err_setx(ENOBUFS, "qcow2: every metadata cache entry is in use");
    }
    if (c->e[best].dirty) {
        r = cache_write_prepare(c);
        if (r == 0) {
            r = cache_write_entry(c, best);
        }
        if (r < 0) {
            return r;
        }
    }
    if (c->e[best].offset) {
        cache_unhash(c, best);
    }
    *slot = best;
    return 0;
}

int qcow2_cache_get_locked(struct qcow2_cache *c, uint64_t offset, bool read, void **table)
{
    int i = cache_find(c, offset);
    int r;

    if (i < 0) {
        r = cache_evict(c, &i);
        if (r < 0) {
            return r;
        }
        if (read) {
            r = blk_pread(c->file, offset, c->e[i].table, c->table_size);
            if (r < 0) {
                return r;
            }
        } else {
            memset(c->e[i].table, 0, c->table_size);
        }
        cache_hash_insert(c, i, offset);
    } else if (!read) {
        memset(c->e[i].table, 0, c->table_size);
    }
    c->e[i].lru = ++c->lru_clock;
    c->e[i].pins++;
    *table = c->e[i].table;
    return 0;
}

static int cache_index_of(const struct qcow2_cache *c, const void *table)
{
    return (int)(((const char *)table - (const char *)c->tables) / c->table_size);
}

void qcow2_cache_put_locked(struct qcow2_cache *c, void *table)
{
    int i = cache_index_of(c, table);

    if (c->e[i].pins > 0) {
        c->e[i].pins--;
    }
}

void qcow2_cache_mark_dirty_locked(struct qcow2_cache *c, void *table)
{
    int i = cache_index_of(c, table);

    if (!c->e[i].dirty) {
        c->e[i].dirty = true;
        c->ndirty++;
    }
}

bool qcow2_cache_is_dirty_locked(const struct qcow2_cache *c)
{
    return c->ndirty > 0;
}

int qcow2_cache_flush_locked(struct qcow2_cache *c)
{
    int r;

    if (c->ndirty == 0) {
        return 0;
    }
    r = cache_write_prepare(c);
    for (unsigned i = 0; r == 0 && i < c->n; i++) {
        r = cache_write_entry(c, (int)i);
    }
    return r;
}

void qcow2_cache_discard_locked(struct qcow2_cache *c, uint64_t offset, uint64_t bytes)
{
    /* Every table in the range (L2 slices are smaller than a cluster). */
    for (uint64_t off = offset; off < offset + bytes; off += c->table_size) {
        int i = cache_find(c, off);
        if (i >= 0 && c->e[i].pins == 0) {
            if (c->e[i].dirty) {
                c->e[i].dirty = false;
                c->ndirty--;
            }
            cache_unhash(c, i);
        }
    }
}
