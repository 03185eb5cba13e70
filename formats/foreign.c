/* formats/foreign.c: recognising the formats diskimg has no driver for.
 *
 * qemu-img 7.2 probes twelve formats.  An image in one we cannot read must
 * never be read as raw by default: `convert x.vmdk out.raw` would copy the
 * container's bytes as the disk and `serve` would export them.  So each
 * such format registers a recognise-only driver here: a probe with qemu's
 * rules and score (the facts are read from qemu's block drivers; the code is
 * ours), and an open that refuses the image by name.  Naming the format
 * raw (-f raw) still reads the file as bytes, and the raw driver's guard
 * uses these probes too, so a client cannot write one of these headers
 * into a probed raw image.
 *
 * Not for reading any of these formats: a real driver replaces its entry
 * here when it is written. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "block/driver.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "foreign.h"

#define CERTAIN 100

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* A NUL-terminated string field (qemu compares these with strcmp). */
static bool cstr_at(const uint8_t *p, const char *s)
{
    return memcmp(p, s, strlen(s) + 1) == 0;
}

/* qcow version 1: "QFI\xfb", version 1 (qcow2 takes 2 and 3). */
int foreign_probe_qcow(const uint8_t *buf, size_t len, const char *filename)
{
    (void)filename;
    return len >= 48 && be32(buf) == 0x514649fbu && be32(buf + 4) == 1 ? CERTAIN : 0;
}

/* QED: little-endian magic "QED\0" in a 64-byte header. */
int foreign_probe_qed(const uint8_t *buf, size_t len, const char *filename)
{
    (void)filename;
    return len >= 64 && memcmp(buf, "QED", 4) == 0 ? CERTAIN : 0;
}

/* Parallels: one of two 16-byte magics, then version 2 (little-endian). */
int foreign_probe_parallels(const uint8_t *buf, size_t len, const char *filename)
{
    (void)filename;
    if (len < 64) {
        return 0;
    }
    if (memcmp(buf, "WithoutFreeSpace", 16) != 0 && memcmp(buf, "WithouFreSpacExt", 16) != 0) {
        return 0;
    }
    return le32(buf + 16) == 2 ? CERTAIN : 0;
}

/* Bochs: a growing redolog, version 1 or 2, with its three names as
 * NUL-terminated strings in fixed fields. */
int foreign_probe_bochs(const uint8_t *buf, size_t len, const char *filename)
{
    uint32_t version;

    (void)filename;
    if (len < 512 || !cstr_at(buf, "Bochs Virtual HD Image") || !cstr_at(buf + 32, "Redolog") ||
        !cstr_at(buf + 48, "Growing")) {
        return 0;
    }
    version = le32(buf + 64);
    return version == 0x00020000u || version == 0x00010000u ? CERTAIN : 0;
}

/* cloop 2.0: a shell script header, compared over as much of it as the
 * buffer holds.  A weak claim (2), as in qemu. */
int foreign_probe_cloop(const uint8_t *buf, size_t len, const char *filename)
{
    static const char magic[] = "#!/bin/sh\n"
                                "#V2.0 Format\n"
                                "modprobe cloop file=$0 && mount -r -t iso9660 /dev/cloop $1\n";
    size_t n = strlen(magic) < len ? strlen(magic) : len;

    (void)filename;
    return memcmp(buf, magic, n) == 0 ? 2 : 0;
}

/* DMG: qemu goes by the name alone (".dmg"), with a weak claim (2) that
 * any format with a magic outranks.  Writes are checked without a name. */
int foreign_probe_dmg(const uint8_t *buf, size_t len, const char *filename)
{
    size_t n = filename ? strlen(filename) : 0;

    (void)buf;
    (void)len;
    return n > 4 && strcmp(filename + n - 4, ".dmg") == 0 ? 2 : 0;
}

/* LUKS version 1 (qemu's "luks"): magic "LUKS\xba\xbe", version 1
 * (big-endian).  LUKS2 is not probed by qemu 7.2. */
int foreign_probe_luks(const uint8_t *buf, size_t len, const char *filename)
{
    (void)filename;
    return len >= 8 && memcmp(buf, "LUKS\xba\xbe", 6) == 0 && buf[6] == 0 && buf[7] == 1 ? CERTAIN
                                                                                         : 0;
}

static int foreign_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    CLEANUP_FREE char *esc = str_escape(opts->filename ? opts->filename : n->drv->name);

    return err_setx(ENOTSUP, "%s: %s images are not supported (-f raw reads the file as raw bytes)",
                    esc ? esc : "?", n->drv->name);
}

#define FOREIGN(fmt)                                                                               \
    static const struct blk_driver foreign_##fmt = {                                               \
        .name = #fmt,                                                                              \
        .is_format = true,                                                                         \
        .probe = foreign_probe_##fmt,                                                              \
        .open = foreign_open,                                                                      \
    };                                                                                             \
    BLK_REGISTER_DRIVER(foreign_##fmt)

FOREIGN(qcow)
FOREIGN(qed)
FOREIGN(parallels)
FOREIGN(bochs)
FOREIGN(cloop)
FOREIGN(dmg)
FOREIGN(luks)
