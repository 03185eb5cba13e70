/* tests/fuzz/fuzz-rbd-name.c: libFuzzer harness for the "rbd:" name
 * parser (protocols/rbd/name.c).  A name can come from an image (a
 * qcow2's backing file), so any bytes must give a result or an error.
 * The input, with "rbd:" put in front when it lacks it, is parsed; a
 * name that parses must have a pool and an image that are not empty and
 * no more options than RBD_NAME_MAX_KEYS, its display name must leave the
 * options out and parse back to the same pool, namespace, image and
 * snapshot, and an error must come with a message.
 *
 * Build and run: see tests/fuzz/README.md; tests/fuzz/replay.c replays
 * the committed corpus (tests/fuzz/corpus/rbd-name) in every build. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "protocols/rbd/name.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why)
{
    fprintf(stderr, "fuzz-rbd-name: %s\n", why);
    __builtin_trap();
}

static int same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_display(const struct rbd_name *n)
{
    struct rbd_name back;
    char *d = rbd_name_display(n);

    if (!d) {
        return;
    }
    if (rbd_name_parse(d, &back) != 0) {
        fail("the display name does not parse");
    }
    if (!same(back.pool, n->pool) || !same(back.ns, n->ns) || !same(back.image, n->image) ||
        !same(back.snap, n->snap)) {
        fail("the display name parses to another image");
    }
    if (back.n_keys || back.conf || back.user) {
        fail("the display name keeps options");
    }
    rbd_name_free(&back);
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 5);
    struct rbd_name n;

    if (!s) {
        return 0;
    }
    size_t off = size >= 4 && memcmp(data, "rbd:", 4) == 0 ? 0 : 4;
    memcpy(s, "rbd:", off);
    memcpy(s + off, data, size);
    s[off + size] = '\0';
    if (rbd_name_parse(s, &n) == 0) {
        if (!n.pool || !n.pool[0] || !n.image || !n.image[0] || !n.ns) {
            fail("parsed without a pool or an image");
        }
        if (n.n_keys > RBD_NAME_MAX_KEYS) {
            fail("more options than RBD_NAME_MAX_KEYS");
        }
        if (n.snap && !n.snap[0]) {
            fail("an empty snapshot name");
        }
        check_display(&n);
    } else if (!err_msg()[0]) {
        fail("an error without a message");
    }
    err_clear();
    rbd_name_free(&n);
    free(s);
    return 0;
}
