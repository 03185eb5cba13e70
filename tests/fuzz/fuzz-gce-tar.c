/* tests/fuzz/fuzz-gce-tar.c: libFuzzer harness for the GCE archive lint
 * (common/gce-lint.c).  An input that starts with the gzip magic is the
 * whole .tar.gz, inflated and linted as `diskimg check --target=gce`
 * does; any other input is the tar itself, fed to the tar walk in pieces
 * of a size the first byte picks, so the fuzzer reaches the header,
 * sparse map and extension-block parsing without having to learn
 * deflate.  The harness traps when the lint accepts a tar that did not
 * reach its end-of-archive blocks, and on a violation without a fix.
 *
 * Build and run: see tests/fuzz/README.md. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/gce-lint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct input {
    const uint8_t *data;
    size_t size, pos;
};

static ssize_t read_input(void *opaque, void *buf, size_t len)
{
    struct input *in = opaque;
    size_t n = in->size - in->pos < len ? in->size - in->pos : len;

    /* Short reads, as a pipe gives them. */
    n = n > 1000 ? n - 7 : n;
    memcpy(buf, in->data + in->pos, n);
    in->pos += n;
    return (ssize_t)n;
}

static void ignore(void *opaque, const char *problem, const char *fix)
{
    (void)opaque;
    if (!problem[0] || !fix[0]) {
        __builtin_trap(); /* every violation says what and how to fix it */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
        struct input in = {data, size, 0};
        gce_lint_gzip(read_input, &in, ignore, NULL);
        return 0;
    }
    struct gce_lint l;
    size_t piece = size ? (size_t)data[0] * 7 + 1 : 1;
    gce_lint_init(&l, ignore, NULL);
    for (size_t off = 0; off < size; off += piece) {
        gce_lint_feed(&l, data + off, size - off < piece ? size - off : piece);
    }
    unsigned v = gce_lint_finish(&l);
    bool ended = l.state == GCE_END || (l.state == GCE_HEADER && l.zero_blocks == 1 && !l.fill);
    if (v == 0 && !ended) {
        __builtin_trap(); /* accepted, yet the archive did not end */
    }
    return 0;
}
