/* tests/unit/test-modules.c: the registry's entry of a driver built as a
 * module (protocols/NAME/loader.c) has exactly the ops of the module's
 * driver.  The generic layer asks the entry what a driver can do before
 * anything is loaded (block/create.c: does it write?), and calls only the
 * ops the entry has: an op added to the module's driver without its
 * forwarder would never run, one forwarded that the driver lacks would
 * call NULL.  The module's files are linked in here, not loaded. */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "block/driver.h"
#include "check.h"
#include "protocols/module.h"

CHECK_GLOBALS

#ifdef HAVE_RBD
extern const struct proto_module_entry diskimg_rbd_module;
#endif
#ifdef HAVE_CURL
extern const struct proto_module_entry diskimg_http_module;
#endif

/* Every op of struct blk_driver (block/driver.h) but claims, which only
 * the entry has. */
#define OP(op) #op, offsetof(struct blk_driver, op)
static const struct {
    const char *name;
    size_t off;
} ops[] = {
    {OP(probe)},         {OP(probe_tail)},     {OP(child_perm)},  {OP(set_perm)},
    {OP(open)},          {OP(close)},          {OP(preadv)},      {OP(pwritev)},
    {OP(pwrite_zeroes)}, {OP(discard)},        {OP(compress)},    {OP(pwrite_compressed)},
    {OP(map_linear)},    {OP(cluster_size)},   {OP(flush)},       {OP(block_status)},
    {OP(map_status)},    {OP(prefetch)},       {OP(uncache)},     {OP(get_length)},
    {OP(truncate)},      {OP(get_info)},       {OP(load_bitmap)}, {OP(snapshot)},
    {OP(bitmap_change)}, {OP(allocated_size)}, {OP(create_node)}, {OP(remove_node)},
    {OP(create)},        {OP(create_check)},   {OP(measure)},     {OP(set_identity)},
    {OP(amend)},         {OP(change_backing)}, {OP(make_empty)},  {OP(check)},
};

/* Is the op at off set (not NULL)? */
static bool has_op(const struct blk_driver *d, size_t off)
{
    static const char null_op[sizeof(void (*)(void))];

    return memcmp((const char *)d + off, null_op, sizeof null_op) != 0;
}

static void same_ops(const char *name, const struct blk_driver *module)
{
    const struct blk_driver *entry = blk_find_driver(name);

    CHECK(entry && module);
    if (!entry || !module) {
        return;
    }
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        bool e = has_op(entry, ops[i].off), m = has_op(module, ops[i].off);
        if (e != m) {
            fprintf(stderr, "%s: op %s: the entry %s it, the module's driver %s\n", name,
                    ops[i].name, e ? "has" : "lacks", m ? "has" : "lacks");
            check_failures++;
        }
    }
    CHECK(entry->is_format == module->is_format);
    CHECK(entry->remote == module->remote);
    CHECK(entry->state_size == 0 && module->state_size > 0); /* the entry's open allocates */
    CHECK(entry->claims || strcmp(name, "https") == 0);
    CHECK(entry->options != NULL);
}

static void test_rbd(void)
{
#ifdef HAVE_RBD
    same_ops("rbd", diskimg_rbd_module.driver);
#endif
}

static void test_http(void)
{
#ifdef HAVE_CURL
    same_ops("http", diskimg_http_module.driver);
    same_ops("https", diskimg_http_module.driver);
#endif
}

int main(void)
{
    RUN(test_rbd);
    RUN(test_http);
    return check_exit();
}
