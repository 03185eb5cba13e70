/* tests/unit/rec-driver.h: "rec", a protocol driver for tests that keeps
 * its data in memory and records every call the generic layer makes to it,
 * with the flags it passed.  It "compresses" too (a copy), so that the
 * generic layer's compressed-write path can be tested on a node of its own.
 * Its capabilities come from the filename:
 * "size=N,fua=0|1,zero=0|1,unmap=0|1,fastzero=0|1,align=N,flushdelay=US,
 *  fuaeopnotsupp=0|1,discardfua=0|1" (discardfua: native FUA on discard).
 * "rec-fixed" is the same without truncate and compression: a node whose
 * length cannot change, as an NBD export's cannot. */
#ifndef DISKIMG_TESTS_REC_DRIVER_H
#define DISKIMG_TESTS_REC_DRIVER_H

#include <stdint.h>

/* REC_COMPRESSED records the compressed length (clen) as len; REC_TRUNCATE
 * records the new length as len. */
enum rec_op { REC_READ, REC_WRITE, REC_ZERO, REC_DISCARD, REC_FLUSH, REC_COMPRESSED, REC_TRUNCATE };

struct rec_call {
    enum rec_op op;
    uint64_t off, len;
    unsigned flags;
};

#define REC_MAX_CALLS 4096

/* Calls recorded since the last rec_reset(), across all rec nodes. */
extern struct rec_call rec_calls[REC_MAX_CALLS];
extern unsigned rec_ncalls;

/* Contents the next rec node starts with (its size grows to hold them). */
extern const uint8_t *rec_preload;
extern uint64_t rec_preload_len;
/* Non-zero: writes that reach past this offset fail with -EIO. */
extern uint64_t rec_fail_writes_from;

void rec_reset(void);
unsigned rec_count(enum rec_op op);
/* The in-memory contents of the most recently opened rec node. */
uint8_t *rec_data(void);

/* An image's bytes, to preload a rec node with. */
struct rec_bytes {
    uint8_t *data; /* malloc'd */
    uint64_t len;
};

/* A fresh SIZE-byte image of FORMAT (-o OPTIONS, or NULL), made by
 * blk_create in a temporary directory and read into *out.  0, or -errno. */
int rec_make_image(const char *format, const char *options, uint64_t size, struct rec_bytes *out);

#endif
