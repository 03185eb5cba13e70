/* formats/qcow2/backing.c: the backing file a qcow2 header names, and how
 * it is opened (or, with --untrusted, refused), by the rules every format
 * shares (formats/named-file.h).
 *
 * Order (qcow2.h): above bitmap.c; calls no other qcow2 file. */
#include "common/cleanup.h"
#include "formats/named-file.h"
#include "qcow2.h"

int qcow2_backing_path(struct qcow2_state *s, char **out)
{
    return fmt_named_path("qcow2", "backing file", s->node->filename, s->hdr.backing_file,
                          FMT_NAME_MAY_RBD, out);
}

int qcow2_open_backing(struct qcow2_state *s, const struct blk_open_opts *opts)
{
    CLEANUP_FREE char *path = NULL;
    int r = qcow2_backing_path(s, &path);

    if (r == 0) {
        r = fmt_open_backing(s->node, opts, path, s->hdr.backing_format, &s->backing);
    }
    if (r == 0) {
        s->node->backing = s->backing;
    }
    return r;
}

int qcow2_refuse_backing(struct qcow2_state *s)
{
    return fmt_refuse_named("qcow2", "backing file", s->hdr.backing_file);
}
