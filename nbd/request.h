/* nbd/request.h: decoding and checking one transmission-phase request
 * header.  Pure: no I/O, no allocation, no state but the thread's error
 * message (common/error.h); transmission.c feeds it the 28 bytes it
 * received and what the handshake negotiated, and
 * tests/unit/test-nbd-request.c and tests/fuzz/fuzz-nbd-request.c feed it
 * anything at all. */
#ifndef DISKIMG_NBD_REQUEST_H
#define DISKIMG_NBD_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBD_REQUEST_HEADER_SIZE 28

/* What a request is checked against: the export and what the handshake
 * negotiated for this connection. */
struct nbd_req_limits {
    uint64_t export_size;
    uint16_t eflags;      /* transmission flags as sent to the client */
    bool structured;      /* structured replies were negotiated */
    bool meta;            /* at least one metadata context was selected */
    uint32_t max_payload; /* largest READ or WRITE (NBD_INFO_BLOCK_SIZE maximum) */
};

struct nbd_req {
    uint16_t flags, type;
    uint64_t cookie; /* opaque, kept in wire order */
    uint64_t offset;
    uint32_t count;
    /* Bytes of payload that follow the header on the wire: a WRITE's
     * count, also when the WRITE is refused (it must be read and dropped
     * to keep the stream in sync); 0 for every other command. */
    uint32_t payload_len;
};

/* Decode the header at hdr (NBD_REQUEST_HEADER_SIZE bytes, wire order)
 * into req and check it against lim: the command is known, its flags are
 * valid for it and advertised, writes go to a writable export, lengths
 * are within max_payload, the range is inside the export, and block
 * status has a context to report on.  Returns
 *   0            valid: run it;
 *   -EPROTO      a bad magic: the stream is not NBD requests, end the
 *                connection;
 *   other -errno refused (-EINVAL, -EPERM, -ENOSPC or -EOVERFLOW): drain
 *                payload_len bytes, then answer with that error.
 * Both failures record their message with err_setx(). */
int nbd_request_decode(const void *hdr, const struct nbd_req_limits *lim, struct nbd_req *req);

/* The command flags a client may set on command type under lim. */
uint16_t nbd_request_allowed_flags(const struct nbd_req_limits *lim, uint16_t type);

#endif
