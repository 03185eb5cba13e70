/* tests/fuzz/fuzz-nbd-request.c: libFuzzer harness for the request
 * decoder (nbd/request.c).  The input's first 15 bytes choose what the
 * handshake negotiated (export size, transmission flags, structured
 * replies and a metadata context, the maximum payload); the rest is a
 * stream of 28-byte request headers, each decoded in turn.
 *
 * Besides the sanitizers, the harness traps when a verdict breaks the
 * decoder's promises: a request called valid that the server must not
 * run (an unknown command, a flag not allowed, a write to a read-only
 * export, a range past the end, a payload over the maximum) or that
 * leaves an error message, a refusal without an errno the spec allows or
 * without a message, or a payload length other than a WRITE's count.
 *
 * Build and run: see tests/fuzz/README.md; tests/fuzz/replay.c replays
 * the committed corpus (tests/fuzz/corpus/nbd-request) in every build. */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "nbd/protocol.h"
#include "nbd/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LIMITS_SIZE 15

static void fail(const char *why, const struct nbd_req *req, int r)
{
    fprintf(stderr, "fuzz-nbd-request: %s (type %u flags 0x%x offset %llu count %u: %d: %s)\n", why,
            req->type, req->flags, (unsigned long long)req->offset, req->count, r, err_msg());
    __builtin_trap();
}

static void check_valid(const struct nbd_req_limits *lim, const struct nbd_req *req)
{
    bool writes = req->type == NBD_CMD_WRITE || req->type == NBD_CMD_TRIM ||
                  req->type == NBD_CMD_WRITE_ZEROES;

    if (req->type >= NBD_CMD_COUNT || req->type == NBD_CMD_RESIZE) {
        fail("unknown command accepted", req, 0);
    }
    if (req->flags & ~nbd_request_allowed_flags(lim, req->type)) {
        fail("flag not allowed accepted", req, 0);
    }
    if ((req->flags & NBD_CMD_FLAG_DF) && !lim->structured) {
        fail("DF accepted without structured replies", req, 0);
    }
    if (writes && (lim->eflags & NBD_FLAG_READ_ONLY)) {
        fail("write to a read-only export accepted", req, 0);
    }
    if ((req->type == NBD_CMD_READ || req->type == NBD_CMD_WRITE) &&
        req->count > lim->max_payload) {
        fail("payload over the maximum accepted", req, 0);
    }
    if (req->type == NBD_CMD_BLOCK_STATUS && (!lim->meta || !lim->structured || !req->count)) {
        fail("block status accepted without a context or length", req, 0);
    }
    if (req->type != NBD_CMD_FLUSH && req->type != NBD_CMD_DISC &&
        (req->offset > lim->export_size || req->count > lim->export_size - req->offset)) {
        fail("range past the end accepted", req, 0);
    }
    if (err_msg()[0]) {
        fail("valid request with an error message", req, 0);
    }
}

static void check_refused(const struct nbd_req *req, int r)
{
    if (r != -EINVAL && r != -EPERM && r != -ENOSPC && r != -EOVERFLOW) {
        fail("refused with an unexpected errno", req, r);
    }
    if (!err_msg()[0]) {
        fail("refused without a message", req, r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct nbd_req_limits lim;
    uint64_t size_be;
    uint16_t eflags_be;
    uint32_t max_be;

    if (size < LIMITS_SIZE) {
        return 0;
    }
    memcpy(&size_be, data, 8);
    memcpy(&eflags_be, data + 8, 2);
    memcpy(&max_be, data + 11, 4);
    lim = (struct nbd_req_limits){
        .export_size = be64toh(size_be),
        .eflags = be16toh(eflags_be),
        .structured = data[10] & 1,
        .meta = data[10] & 2,
        .max_payload = be32toh(max_be),
    };
    for (size_t pos = LIMITS_SIZE; pos + NBD_REQUEST_HEADER_SIZE <= size;
         pos += NBD_REQUEST_HEADER_SIZE) {
        struct nbd_req req;

        err_clear();
        int r = nbd_request_decode(data + pos, &lim, &req);
        if (r == -EPROTO) {
            if (!strstr(err_msg(), "magic")) {
                fail("bad magic without a message", &req, r);
            }
            break; /* the server ends the connection here */
        }
        if (req.payload_len != (req.type == NBD_CMD_WRITE ? req.count : 0)) {
            fail("payload length is not a WRITE's count", &req, r);
        }
        if (r == 0) {
            check_valid(&lim, &req);
        } else if (r < 0) {
            check_refused(&req, r);
        } else {
            fail("positive return", &req, r);
        }
    }
    return 0;
}
