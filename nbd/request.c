/* nbd/request.c: decoding and checking a request header (see request.h).
 *
 * Every field is checked here, before the block layer is touched, in
 * the order the spec's error rules suggest: an unknown command, then
 * flags, then permission, then lengths, then the range.  The errno of a
 * refusal is what the client gets (transmission.c maps it to NBD_E*):
 * EINVAL for what the client should not have sent, EPERM for writing a
 * read-only export, EOVERFLOW for a read longer than we serve (the spec's
 * choice), ENOSPC for a write past the end. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "common/error.h"
#include "names.h"
#include "protocol.h"
#include "request.h"

uint16_t nbd_request_allowed_flags(const struct nbd_req_limits *lim, uint16_t type)
{
    /* FUA is valid on any command once advertised, as the spec asks. */
    uint16_t f = (lim->eflags & NBD_FLAG_SEND_FUA) ? NBD_CMD_FLAG_FUA : 0;

    switch (type) {
    case NBD_CMD_READ:
        return f | (lim->structured && (lim->eflags & NBD_FLAG_SEND_DF) ? NBD_CMD_FLAG_DF : 0);
    case NBD_CMD_WRITE_ZEROES:
        return f | NBD_CMD_FLAG_NO_HOLE |
               ((lim->eflags & NBD_FLAG_SEND_FAST_ZERO) ? NBD_CMD_FLAG_FAST_ZERO : 0);
    case NBD_CMD_BLOCK_STATUS:
        return f | NBD_CMD_FLAG_REQ_ONE;
    default:
        return f;
    }
}

static bool is_write(uint16_t type)
{
    return type == NBD_CMD_WRITE || type == NBD_CMD_TRIM || type == NBD_CMD_WRITE_ZEROES;
}

/* Everything but the range. */
static int check_command(const struct nbd_req_limits *lim, const struct nbd_req *req)
{
    const char *name = nbd_cmd_name(req->type);
    uint16_t allowed;

    if (req->type >= NBD_CMD_COUNT || req->type == NBD_CMD_RESIZE) {
        return err_setx(EINVAL, "unknown command %u", req->type);
    }
    allowed = nbd_request_allowed_flags(lim, req->type);
    if (req->flags & ~allowed) {
        return err_setx(EINVAL, "%s: flags 0x%x are not valid here", name, req->flags & ~allowed);
    }
    if (is_write(req->type) && (lim->eflags & NBD_FLAG_READ_ONLY)) {
        return err_setx(EPERM, "%s: the export is read-only", name);
    }
    if (req->type == NBD_CMD_BLOCK_STATUS) {
        if (!lim->structured || !lim->meta) {
            return err_setx(EINVAL, "%s: no metadata context was negotiated", name);
        }
        if (req->count == 0) {
            return err_setx(EINVAL, "%s: zero length", name);
        }
    }
    if ((req->type == NBD_CMD_READ || req->type == NBD_CMD_WRITE) &&
        req->count > lim->max_payload) {
        return err_setx(req->type == NBD_CMD_READ ? EOVERFLOW : EINVAL,
                        "%s: %" PRIu32 " bytes exceed the maximum of %" PRIu32, name, req->count,
                        lim->max_payload);
    }
    return 0;
}

int nbd_request_decode(const void *hdr, const struct nbd_req_limits *lim, struct nbd_req *req)
{
    struct nbd_request h;
    int r;

    memcpy(&h, hdr, sizeof h);
    memset(req, 0, sizeof *req);
    req->flags = be16toh(h.flags);
    req->type = be16toh(h.type);
    req->cookie = h.cookie;
    req->offset = be64toh(h.offset);
    req->count = be32toh(h.count);
    if (be32toh(h.magic) != NBD_REQUEST_MAGIC) {
        return err_setx(EPROTO, "bad request magic 0x%08" PRIx32, be32toh(h.magic));
    }
    if (req->type == NBD_CMD_WRITE) {
        req->payload_len = req->count;
    }
    r = check_command(lim, req);
    if (r < 0) {
        return r;
    }
    if (req->type == NBD_CMD_FLUSH || req->type == NBD_CMD_DISC) {
        return 0; /* offset and length are reserved */
    }
    if (req->offset > lim->export_size || req->count > lim->export_size - req->offset) {
        bool grows = req->type == NBD_CMD_WRITE || req->type == NBD_CMD_WRITE_ZEROES;
        return err_setx(grows ? ENOSPC : EINVAL,
                        "%s: %" PRIu64 "+%" PRIu32 " is beyond the end of the export (%" PRIu64 ")",
                        nbd_cmd_name(req->type), req->offset, req->count, lim->export_size);
    }
    return 0;
}
