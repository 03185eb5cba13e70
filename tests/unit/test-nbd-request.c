/* tests/unit/test-nbd-request.c: the request decoder (nbd/request.c),
 * one table row per kind of header a client may send, good or hostile. */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "check.h"
#include "common/error.h"
#include "nbd/protocol.h"
#include "nbd/request.h"

CHECK_GLOBALS

#define MiB (1u << 20)
#define SIZE (64ull * MiB)

/* Writable export, structured replies, a context, FAST_ZERO: everything
 * a client may ask for is advertised. */
static const struct nbd_req_limits rw = {
    .export_size = SIZE,
    .eflags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM |
              NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_DF | NBD_FLAG_SEND_FAST_ZERO,
    .structured = true,
    .meta = true,
    .max_payload = 32 * MiB,
};

/* Read-only, simple replies, no context. */
static const struct nbd_req_limits ro = {
    .export_size = SIZE,
    .eflags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA,
    .structured = false,
    .meta = false,
    .max_payload = 32 * MiB,
};

static void header(uint8_t out[NBD_REQUEST_HEADER_SIZE], uint32_t magic, uint16_t flags,
                   uint16_t type, uint64_t cookie, uint64_t off, uint32_t count)
{
    struct nbd_request h = {htobe32(magic), htobe16(flags), htobe16(type),
                            cookie,         htobe64(off),   htobe32(count)};
    memcpy(out, &h, sizeof h);
}

/* What the decoder should say: nbd_request_decode returns 0, -EPROTO or
 * the refusal's -errno. */
enum verdict { VALID, REFUSED, BAD_MAGIC };

struct row {
    const char *what;
    const struct nbd_req_limits *lim;
    uint32_t magic;
    uint16_t flags, type;
    uint64_t offset;
    uint32_t count;
    enum verdict verdict;
    int err;              /* when refused */
    uint32_t payload_len; /* bytes to read or drain after the header */
};

static const struct row rows[] = {
    {"read", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_READ, 0, 4096, VALID, 0, 0},
    {"read to the last byte", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_READ, SIZE - 1, 1, VALID, 0, 0},
    {"read of length 0 at the end", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_READ, SIZE, 0, VALID, 0, 0},
    {"read one byte past the end", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_READ, SIZE - 1, 2, REFUSED,
     EINVAL, 0},
    {"read at an offset past the end", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_READ, SIZE + 1, 0,
     REFUSED, EINVAL, 0},
    {"read whose end wraps around 2^64", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_READ, UINT64_MAX - 100,
     4096, REFUSED, EINVAL, 0},
    {"read of the maximum payload", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_READ, 0, 32 * MiB, VALID, 0,
     0},
    {"read over the maximum payload", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_READ, 0, 32 * MiB + 1,
     REFUSED, EOVERFLOW, 0},
    {"read with DF (structured)", &rw, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_DF, NBD_CMD_READ, 0, 512,
     VALID, 0, 0},
    {"read with DF without structured replies", &ro, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_DF,
     NBD_CMD_READ, 0, 512, REFUSED, EINVAL, 0},
    {"read with NO_HOLE", &rw, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_NO_HOLE, NBD_CMD_READ, 0, 512,
     REFUSED, EINVAL, 0},
    {"read with an unknown flag", &rw, NBD_REQUEST_MAGIC, 1u << 15, NBD_CMD_READ, 0, 512, REFUSED,
     EINVAL, 0},
    {"read with FUA (advertised: valid on any command)", &rw, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_FUA,
     NBD_CMD_READ, 0, 512, VALID, 0, 0},
    {"write", &rw, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_FUA, NBD_CMD_WRITE, 4096, 4096, VALID, 0, 4096},
    {"write past the end: ENOSPC, payload drained", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_WRITE,
     SIZE - 512, 1024, REFUSED, ENOSPC, 1024},
    {"write over the maximum payload: payload drained", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_WRITE, 0,
     64 * MiB, REFUSED, EINVAL, 64 * MiB},
    {"write with a bad flag: payload drained", &rw, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_REQ_ONE,
     NBD_CMD_WRITE, 0, 512, REFUSED, EINVAL, 512},
    {"write to a read-only export: EPERM, payload drained", &ro, NBD_REQUEST_MAGIC, 0,
     NBD_CMD_WRITE, 0, 512, REFUSED, EPERM, 512},
    {"trim to a read-only export", &ro, NBD_REQUEST_MAGIC, 0, NBD_CMD_TRIM, 0, 512, REFUSED, EPERM,
     0},
    {"write zeroes to a read-only export", &ro, NBD_REQUEST_MAGIC, 0, NBD_CMD_WRITE_ZEROES, 0, 512,
     REFUSED, EPERM, 0},
    {"write zeroes past the end: ENOSPC", &rw, NBD_REQUEST_MAGIC,
     NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO, NBD_CMD_WRITE_ZEROES, 0, 1u << 31, REFUSED,
     ENOSPC, 0},
    {"write zeroes of the whole export", &rw, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_NO_HOLE,
     NBD_CMD_WRITE_ZEROES, 0, (uint32_t)SIZE, VALID, 0, 0},
    {"trim past the end: EINVAL", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_TRIM, SIZE, 1, REFUSED, EINVAL,
     0},
    {"flush: offset and length are reserved", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_FLUSH, UINT64_MAX,
     UINT32_MAX, VALID, 0, 0},
    {"flush to a read-only export", &ro, NBD_REQUEST_MAGIC, 0, NBD_CMD_FLUSH, 0, 0, VALID, 0, 0},
    {"flush with DF", &rw, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_DF, NBD_CMD_FLUSH, 0, 0, REFUSED, EINVAL,
     0},
    {"disconnect", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_DISC, 12345, 678, VALID, 0, 0},
    {"cache", &ro, NBD_REQUEST_MAGIC, 0, NBD_CMD_CACHE, 0, 1 * MiB, VALID, 0, 0},
    {"block status past the end", &rw, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_REQ_ONE,
     NBD_CMD_BLOCK_STATUS, 0, UINT32_MAX, REFUSED, EINVAL, 0},
    {"block status of the whole export", &rw, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_REQ_ONE,
     NBD_CMD_BLOCK_STATUS, 0, (uint32_t)SIZE, VALID, 0, 0},
    {"block status of length 0", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_BLOCK_STATUS, 0, 0, REFUSED,
     EINVAL, 0},
    {"block status without a context", &ro, NBD_REQUEST_MAGIC, 0, NBD_CMD_BLOCK_STATUS, 0, 512,
     REFUSED, EINVAL, 0},
    {"resize (not advertised)", &rw, NBD_REQUEST_MAGIC, 0, NBD_CMD_RESIZE, 0, 0, REFUSED, EINVAL,
     0},
    {"an unknown command", &rw, NBD_REQUEST_MAGIC, 0, 42, 0, 512, REFUSED, EINVAL, 0},
    {"command 0xffff", &rw, NBD_REQUEST_MAGIC, 0, 0xffff, 0, 512, REFUSED, EINVAL, 0},
    {"a bad magic", &rw, 0x12345678, 0, NBD_CMD_READ, 0, 512, BAD_MAGIC, 0, 0},
    {"a reply magic as a request", &rw, NBD_SIMPLE_REPLY_MAGIC, 0, NBD_CMD_READ, 0, 512, BAD_MAGIC,
     0, 0},
};

static void test_table(void)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct row *t = &rows[i];
        uint8_t h[NBD_REQUEST_HEADER_SIZE];
        struct nbd_req req;

        check_current = t->what;
        header(h, t->magic, t->flags, t->type, 0x0123456789abcdefull, t->offset, t->count);
        err_clear();
        int r = nbd_request_decode(h, t->lim, &req);
        CHECK_EQ(r, t->verdict == VALID ? 0 : t->verdict == BAD_MAGIC ? -EPROTO : -t->err);
        if (t->verdict == BAD_MAGIC) {
            CHECK(strstr(err_msg(), "magic") != NULL);
            continue;
        }
        CHECK_EQ(req.type, t->type);
        CHECK_EQ(req.flags, t->flags);
        CHECK(req.offset == t->offset);
        CHECK_EQ(req.count, t->count);
        CHECK(req.cookie == 0x0123456789abcdefull); /* kept in wire order */
        CHECK_EQ(req.payload_len, t->payload_len);
        CHECK(r == 0 ? err_msg()[0] == '\0' : err_msg()[0] != '\0');
    }
    check_current = "test_table";
}

/* Messages name the command and the reason, and stay one short line. */
static void test_messages(void)
{
    uint8_t h[NBD_REQUEST_HEADER_SIZE];
    struct nbd_req req;

    header(h, NBD_REQUEST_MAGIC, 0, NBD_CMD_WRITE, 0, SIZE, 512);
    CHECK_EQ(nbd_request_decode(h, &rw, &req), -ENOSPC);
    CHECK(strstr(err_msg(), "NBD_CMD_WRITE") && strstr(err_msg(), "beyond the end"));
    header(h, NBD_REQUEST_MAGIC, 0, NBD_CMD_WRITE, 0, 0, 512);
    CHECK_EQ(nbd_request_decode(h, &ro, &req), -EPERM);
    CHECK(strstr(err_msg(), "read-only") != NULL);
    header(h, NBD_REQUEST_MAGIC, 0xffff, NBD_CMD_READ, 0, 0, 512);
    CHECK_EQ(nbd_request_decode(h, &rw, &req), -EINVAL);
    CHECK(strstr(err_msg(), "flags 0xfffa") != NULL); /* all but FUA and DF */
    header(h, NBD_REQUEST_MAGIC, 0, NBD_CMD_READ, 0, UINT64_MAX, UINT32_MAX);
    CHECK_EQ(nbd_request_decode(h, &rw, &req), -EOVERFLOW);
    CHECK(strlen(err_msg()) < 160);
    header(h, NBD_REQUEST_MAGIC, 0, NBD_CMD_WRITE_ZEROES, 0, UINT64_MAX, UINT32_MAX);
    CHECK_EQ(nbd_request_decode(h, &rw, &req), -ENOSPC);
    CHECK(strlen(err_msg()) < 160);
}

/* FUA only when advertised; FAST_ZERO only when advertised. */
static void test_allowed_flags(void)
{
    struct nbd_req_limits lim = rw;

    CHECK_EQ(nbd_request_allowed_flags(&rw, NBD_CMD_WRITE_ZEROES),
             NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO);
    lim.eflags &= (uint16_t) ~(NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_FAST_ZERO);
    CHECK_EQ(nbd_request_allowed_flags(&lim, NBD_CMD_WRITE_ZEROES), NBD_CMD_FLAG_NO_HOLE);
    CHECK_EQ(nbd_request_allowed_flags(&lim, NBD_CMD_WRITE), 0);
    CHECK_EQ(nbd_request_allowed_flags(&rw, NBD_CMD_BLOCK_STATUS),
             NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_REQ_ONE);
    CHECK_EQ(nbd_request_allowed_flags(&ro, NBD_CMD_READ), NBD_CMD_FLAG_FUA);
}

int main(void)
{
    RUN(test_table);
    RUN(test_messages);
    RUN(test_allowed_flags);
    return check_exit();
}
