/* tests/fuzz/fuzz-image.h: what the image-format harnesses share.  Each
 * harness turns its input into a file, opens it with its driver and
 * exercises it as the subcommands do; the file, the numbers the input
 * picks and the reads (with the block-status invariants every driver must
 * keep) are the same for all of them, so they are written once here. */
#ifndef DISKIMG_TESTS_FUZZ_IMAGE_H
#define DISKIMG_TESTS_FUZZ_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block/block.h"

/* Bytes one read may cover; also the size of fuzz_buf. */
#define FUZZ_MAX_READ (1u << 20)

/* A buffer for reads and write patterns, FUZZ_MAX_READ bytes. */
extern uint8_t fuzz_buf[FUZZ_MAX_READ];

/* Abort (a harness bug, not a finding) with perror(what) unless ok. */
void fuzz_must(bool ok, const char *what);

/* The run's one memfd (made on first use), emptied, and its
 * /proc/self/fd path in path (at least 32 bytes). */
int fuzz_image_fd(char *path, size_t pathlen);

/* The input as the whole file: the memfd holds exactly data. */
void fuzz_image_file(const uint8_t *data, size_t size, char *path, size_t pathlen);

/* A number the input picks: 8 bytes that end 'back' bytes before its
 * end (0 when the input is shorter). */
uint64_t fuzz_pick(const uint8_t *data, size_t size, size_t back);

/* Read [off, off + len) of img, cut to the image and FUZZ_MAX_READ. */
void fuzz_read_range(struct blk_image *img, uint64_t off, uint64_t len);

/* Read the start, the middle, the end and (at most 1 MiB at) pick, then
 * walk block status from 0 for at most 64 extents, reading the start of
 * each.  Traps on an empty or overlong extent: "diskimg map" would hang
 * or skip on one. */
void fuzz_read_image(struct blk_image *img, uint64_t pick);

/* The round of a harness for a writer: the input as the file, opened for
 * writing as an untrusted image (no backing file), given to change,
 * closed (which writes back what the writer keeps in memory); then opened
 * again read-only, as the next user would, given to inspect (when not
 * NULL), read (fuzz_read_image at pick) and checked.  An input that does
 * not open ends the round. */
void fuzz_write_round(const uint8_t *data, size_t size, uint64_t pick,
                      void (*change)(struct blk_image *img, void *opaque),
                      void (*inspect)(struct blk_image *img, void *opaque), void *opaque);

#endif
