/* block/identity.c: the IDs of reproducible images.  A format's IDs
 * (UUIDs, GUIDs, a CID) are derived, never random, when output is
 * reproducible: at creation from a seed over the format, options and
 * size, and after convert's copy from a seed over the content checksum
 * too, rewritten by the driver's set_identity.  Each ID is
 * uuid_derive(seed, label) with a label per field (common/uuid.h). */
#include <errno.h>
#include <string.h>

#include "common/bytes.h"
#include "common/error.h"
#include "common/sha256.h"
#include "common/uuid.h"
#include "driver.h"
#include "esc-name.h"

/* A field of the seed: its length, then its bytes, so that no two lists
 * of fields hash the same bytes. */
static int hash_field(struct sha256_ctx *c, const void *p, size_t len)
{
    uint8_t n[8];

    put_le64(n, len);
    int r = sha256_update(c, n, sizeof n);
    return r == 0 && len ? sha256_update(c, p, len) : r;
}

static int hash_str(struct sha256_ctx *c, const char *s)
{
    return hash_field(c, s ? s : "", s ? strlen(s) : 0);
}

int blk_identity_seed(const struct blk_create_opts *o, uint64_t size, const uint8_t *content,
                      uint8_t seed[BLK_SEED_LEN])
{
    static const char domain[] = "diskimg identity v1";
    uint8_t sz[8];
    struct sha256_ctx c;
    int r = sha256_init(&c);

    put_le64(sz, size);
    if (r == 0 && (r = hash_str(&c, domain)) == 0 &&
        (r = hash_str(&c, content ? "content" : "create")) == 0 &&
        (r = hash_str(&c, o->format)) == 0 && (r = hash_str(&c, o->options)) == 0 &&
        (r = hash_str(&c, o->backing_file)) == 0 && (r = hash_str(&c, o->backing_format)) == 0 &&
        (r = hash_field(&c, sz, sizeof sz)) == 0 &&
        (r = hash_field(&c, content, content ? BLK_CHECKSUM_LEN : 0)) == 0) {
        sha256_final(&c, seed);
        return 0;
    }
    sha256_abort(&c);
    return r;
}

int blk_create_uuid(const struct blk_create_opts *o, const char *label, uint8_t u[16])
{
    uint8_t seed[BLK_SEED_LEN];
    int r;

    if (!o->reproducible) {
        return uuid_random(u);
    }
    r = blk_identity_seed(o, o->size, NULL, seed);
    return r < 0 ? r : uuid_derive(seed, label, u);
}

int blk_image_set_identity(struct blk_image *img, const uint8_t seed[BLK_SEED_LEN])
{
    struct blk_node *n = blk_image_root(img);

    if (!n->drv->set_identity) {
        return 0; /* no IDs to set (raw, qcow2) */
    }
    if (n->read_only) {
        return err_setx(EROFS, "%s: cannot set the IDs of a read-only image", ESC_NAME(n));
    }
    return n->drv->set_identity(n, seed);
}

bool blk_image_has_identity(const struct blk_image *img)
{
    return blk_image_root(img)->drv->set_identity != NULL;
}
