/* formats/vpc/vpc.h: the VHD ("vpc") format driver, shared by its files.
 *
 * VHD is big-endian throughout.  A fixed image is the guest's bytes then
 * a 512-byte footer; a dynamic or differencing image starts with a copy of
 * the footer, then the dynamic header, the block allocation table (BAT:
 * one 32-bit sector number per block) and blocks, each a sector bitmap
 * then the data, with the footer again at the end of the file.
 *
 * Files, each calling only those above it in this list:
 *   footer.c  the on-disk structures: checksums, CHS geometry, qemu's size
 *             rules, parsing and building footer and dynamic header, probes
 *   parent.c  a differencing image's parent: its name from the locators,
 *             and opening it under the backing-file rules
 *   read.c    mapping guest ranges through BAT and bitmaps: reads and
 *             block status
 *   write.c   writes, block allocation and the deferred BAT write-back
 *   create.c  "create -f vpc" with qemu-img's options and size rules
 *   vpc.c     the driver: vtable, open, close, info */
#ifndef DISKIMG_FORMATS_VPC_H
#define DISKIMG_FORMATS_VPC_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block/driver.h"

#define VPC_SECTOR 512u
#define VPC_FOOTER_SIZE 512u
#define VPC_DYN_HEADER_SIZE 1024u

enum vpc_disk_type { VPC_FIXED = 2, VPC_DYNAMIC = 3, VPC_DIFF = 4 };

/* qemu's limits: 2040 GiB of guest data, and the largest CHS geometry. */
#define VPC_MAX_SECTORS 0xff000000ull
#define VPC_CHS_MAX_C 65535u
#define VPC_CHS_MAX_H 16u
#define VPC_CHS_MAX_S 255u
#define VPC_MAX_GEOMETRY ((uint64_t)VPC_CHS_MAX_C * VPC_CHS_MAX_H * VPC_CHS_MAX_S)
/* The most BAT entries diskimg loads (128 MiB of table): far beyond what
 * 2040 GiB needs with 2 MiB blocks, so only absurd block sizes hit it. */
#define VPC_MAX_BAT_ENTRIES (32u << 20)
#define VPC_BAT_UNALLOCATED 0xffffffffu
/* Seconds from the Unix epoch to the VHD epoch, 2000-01-01 00:00 UTC. */
#define VPC_EPOCH 946684800u

/* ---- footer.c: pure functions of bytes ---- */

struct vpc_footer {
    uint64_t data_offset;
    uint32_t timestamp;
    char creator_app[4];
    char creator_host[4];
    uint64_t orig_size, cur_size;
    uint16_t cyls;
    uint8_t heads, secs;
    uint32_t type;
    uint8_t uuid[16];
};

struct vpc_dyn_header {
    uint64_t table_offset;
    uint32_t max_entries;
    uint32_t block_size;
    uint8_t parent_uuid[16];
    uint32_t parent_timestamp;
    const uint8_t *parent_name; /* 512 bytes of UTF-16BE in the header buffer */
    struct vpc_locator {
        uint32_t code;
        uint32_t space;
        uint32_t length;
        uint64_t offset;
    } loc[8];
};

/* One's complement of the byte sum, the checksum field counted as zero. */
uint32_t vpc_checksum(const uint8_t *buf, size_t len, size_t csum_at);
/* The spec's CHS geometry for a sector count (may round down). */
void vpc_chs(uint64_t sectors, uint16_t *c, uint8_t *h, uint8_t *s);
/* qemu-img create's size rule: the geometry and the image's sector count
 * for a requested size (bytes, already a multiple of 512).  -EFBIG past
 * 2040 GiB (message set). */
int vpc_create_geometry(uint64_t size, bool force_size, uint16_t *c, uint8_t *h, uint8_t *s,
                        uint64_t *sectors);
/* Where the virtual size comes from: qemu's runtime option
 * force_size_calc (chs, current_size), by default the creator's habit. */
enum vpc_size_calc { VPC_SIZE_AUTO, VPC_SIZE_CHS, VPC_SIZE_CURRENT };
/* The virtual size qemu reads from a footer: CHS unless the creator says
 * current_size is right (or calc says so), or the geometry is the
 * maximum. */
uint64_t vpc_footer_size(const struct vpc_footer *f, enum vpc_size_calc calc);
/* Parse a footer: 0, or -EINVAL with "what" in the message (cookie,
 * checksum).  'where' names the copy ("footer at offset N"). */
int vpc_parse_footer(const uint8_t *buf, struct vpc_footer *f, const char *file, const char *where);
void vpc_build_footer(uint8_t *buf, const struct vpc_footer *f);
int vpc_parse_dyn_header(const uint8_t *buf, struct vpc_dyn_header *h, const char *file);
void vpc_build_dyn_header(uint8_t *buf, uint64_t table_offset, uint32_t entries,
                          uint32_t block_size);
/* Probes: "conectix" at offset 0 (dynamic, differencing: qemu's rule), and
 * a fixed image's footer in the last BLK_PROBE_BYTES of the file. */
int vpc_probe(const uint8_t *buf, size_t len, const char *filename);
int vpc_probe_tail(const uint8_t *buf, size_t len, const char *filename);

/* ---- the open image ---- */

/* What is known of a block's sector bitmap (dynamic and differencing). */
enum vpc_bm_state { VPC_BM_UNKNOWN = 0, VPC_BM_FULL, VPC_BM_PARTIAL };

struct vpc_state {
    struct blk_node *node;
    struct blk_node *file;
    bool read_only;
    enum vpc_disk_type type;
    uint64_t size; /* guest bytes */
    /* The footer as read (the copy at offset 0 for dynamic images): what
     * allocation writes again at the new end of the file. */
    uint8_t footer_buf[VPC_FOOTER_SIZE];
    struct vpc_footer footer;

    /* Dynamic and differencing. */
    uint64_t bat_offset;
    uint32_t block_size;
    uint32_t block_bits;
    uint32_t bitmap_size; /* bytes before each block's data, a multiple of 512 */
    uint32_t n_blocks;    /* BAT entries used: ceil(size / block_size) */
    uint32_t *bat;        /* host order; VPC_BAT_UNALLOCATED or a sector number */
    uint8_t *bm_state;    /* enum vpc_bm_state per block */
    uint8_t *bat_dirty;   /* per 512-byte sector of the BAT: written back at flush */
    bool any_dirty;
    uint64_t free_off;    /* where the next block starts (the trailing footer's place) */
    pthread_mutex_t lock; /* bat, bm_state, bat_dirty, free_off and bitmap updates */
    /* Held through a BAT write-back, so that two cannot overtake each
     * other with older copies of a sector; taken before lock. */
    pthread_mutex_t flush_lock;

    /* Differencing. */
    char *parent_name; /* as the image records it (UTF-8), for info */
    char *parent_path; /* resolved */
    struct blk_node *parent;
};

/* parent.c.  vpc_find_parent picks the first candidate whose file exists
 * when look is set; without look (--untrusted) no path is looked at and
 * the first candidate is the one named. */
int vpc_find_parent(struct vpc_state *s, const struct vpc_dyn_header *h, bool look);
int vpc_open_parent(struct vpc_state *s, const struct blk_open_opts *opts, const uint8_t uuid[16]);
int vpc_refuse_parent(struct vpc_state *s);

/* read.c */
int vpc_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt);
int vpc_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext);
int vpc_map_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext);
/* With s->lock held: the bitmap of block i into buf (bitmap_size bytes). */
int vpc_read_bitmap_locked(struct vpc_state *s, uint32_t i, uint8_t *buf);

/* write.c */
int vpc_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                unsigned flags);
int vpc_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);
int vpc_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);
int vpc_flush(struct blk_node *n);
/* Reproducible output: the footer's UUID from seed, in both copies. */
int vpc_set_identity(struct blk_node *n, const uint8_t seed[BLK_SEED_LEN]);
/* The label of the footer's UUID (blk_create_uuid, uuid_derive). */
#define VPC_ID_UUID "vpc footer UUID"

/* Write the changed BAT sectors, after flushing the file: takes
 * flush_lock, and s->lock only to copy them. */
int vpc_write_back_bat(struct vpc_state *s);

/* create.c */
int vpc_create(struct blk_node *file, const struct blk_create_opts *o, char **summary);
int vpc_create_check(const struct blk_create_opts *o);
/* The file size "convert -O vpc" writes (the driver's measure). */
int vpc_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *m);
#define VPC_CREATE_HELP                                                                            \
    "Supported options:\n"                                                                         \
    "  force_size=<bool (on/off)> - Force disk size calculation to use the actual size "           \
    "specified, rather than using the nearest CHS-based calculation\n"                             \
    "  preallocation=<str>    - Preallocation mode (allowed values: off, falloc, full)\n"          \
    "  size=<size>            - Virtual disk size\n"                                               \
    "  subformat=<str>        - Type of virtual hard disk format. Supported formats are "          \
    "{dynamic (default) | fixed} \n"

#endif
