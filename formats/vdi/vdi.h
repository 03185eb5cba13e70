/* formats/vdi/vdi.h: the VirtualBox disk image ("vdi") driver's state,
 * shared by its files.  The files form an order, bottom to top; each
 * calls only files below it:
 *
 *   header.c   the header sector and the block map: probe, parse,
 *              validate, serialise, load (no writes)
 *   alloc.c    guest writes: allocating a block, committing the header
 *              count and the map entry in a crash-safe order
 *   check.c    consistency check (qemu-img check's rules)
 *   create.c   creating an image (qemu-img 7.2's options and layout)
 *   vdi.c      the driver: vtable, open, close, reads, block status, info
 *
 * The image: a 512-byte header, a map of one 32-bit entry per 1 MiB block
 * of the disk (the index of the block in the data area, or "unallocated",
 * or "zero"), then the data blocks in allocation order.
 *
 * Locking: s->alloc_lock serialises allocations (the header count, the
 * map on disk, page0, file_end).  Map entries in memory are read without
 * it, with atomic loads: an entry changes only from "not allocated" to an
 * index, and only after the block's data is written. */
#ifndef DISKIMG_VDI_H
#define DISKIMG_VDI_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

#include "block/driver.h"

/* On-disk constants (little-endian fields). */
#define VDI_SIGNATURE 0xbeda107fu
#define VDI_VERSION_1_1 0x00010001u
#define VDI_SECTOR 512u
#define VDI_BLOCK_SIZE (1u << 20)
#define VDI_UNALLOCATED 0xffffffffu
#define VDI_ZERO 0xfffffffeu /* "discarded": reads as zeroes */
/* qemu's limit: the map must fit in INT_MAX bytes, rounded to a sector. */
#define VDI_BLOCKS_MAX 0x1fffff80u
#define VDI_DISK_SIZE_MAX ((uint64_t)VDI_BLOCKS_MAX * VDI_BLOCK_SIZE)
#define VDI_TYPE_NORMAL 1u /* dynamic */
#define VDI_TYPE_FIXED 2u  /* static */
/* The header size counts from its own field (0x48): qemu writes 0x180,
 * VirtualBox 0x190 (with the LCHS geometry); it must end in sector 0. */
#define VDI_HEADER_SIZE_QEMU 0x180u
#define VDI_HEADER_SIZE_MAX (VDI_SECTOR - 0x48u)
/* Bytes per stored block beyond its data that we accept (VirtualBox's
 * per-block "extra" area; 0 in every image qemu or VirtualBox writes). */
#define VDI_BLOCK_EXTRA_MAX (1u << 20)

/* Field offsets in the header sector. */
enum {
    VDI_OFF_TEXT = 0x000,
    VDI_OFF_SIGNATURE = 0x040,
    VDI_OFF_VERSION = 0x044,
    VDI_OFF_HEADER_SIZE = 0x048,
    VDI_OFF_TYPE = 0x04c,
    VDI_OFF_FLAGS = 0x050,
    VDI_OFF_COMMENT = 0x054,
    VDI_OFF_MAP = 0x154,
    VDI_OFF_DATA = 0x158,
    VDI_OFF_CYLINDERS = 0x15c,
    VDI_OFF_HEADS = 0x160,
    VDI_OFF_SECTORS = 0x164,
    VDI_OFF_SECTOR_SIZE = 0x168,
    VDI_OFF_DISK_SIZE = 0x170,
    VDI_OFF_BLOCK_SIZE = 0x178,
    VDI_OFF_BLOCK_EXTRA = 0x17c,
    VDI_OFF_BLOCKS = 0x180,
    VDI_OFF_ALLOCATED = 0x184,
    VDI_OFF_UUID_CREATE = 0x188,
    VDI_OFF_UUID_MODIFY = 0x198,
    VDI_OFF_UUID_LINK = 0x1a8,
    VDI_OFF_UUID_PARENT = 0x1b8,
};

struct vdi_header {
    uint32_t signature;
    uint32_t version;
    uint32_t header_size;
    uint32_t type;
    uint32_t off_map;
    uint32_t off_data;
    uint32_t sector_size;
    uint64_t disk_size;
    uint32_t block_size;
    uint32_t block_extra;
    uint32_t blocks;
    uint32_t allocated;
    bool has_link;   /* non-null link UUID: a differencing image */
    bool has_parent; /* non-null parent UUID */
};

/* A run of guest bytes with one status (vdi_map). */
enum vdi_kind { VDI_HOLE, VDI_DATA };
struct vdi_run {
    enum vdi_kind kind;
    uint64_t bytes; /* > 0 */
    uint64_t host;  /* VDI_DATA: file offset of the first byte */
};

struct vdi_state {
    struct blk_node *node;
    struct blk_node *file;
    struct vdi_header hdr;
    uint64_t size;   /* virtual size: disk_size rounded up to a sector */
    uint64_t stride; /* bytes per stored block: block_extra + block size */
    uint32_t *map;   /* host order; read with vdi_entry() */
    pthread_mutex_t alloc_lock;
    /* Under alloc_lock: the file's first bytes (the header sector, and the
     * map entries that share its page, as stored), and the file's end. */
    uint8_t page0[4096];
    uint32_t page0_len;
    uint64_t file_end;
};

static inline uint32_t vdi_entry(const struct vdi_state *s, uint32_t block)
{
    return __atomic_load_n(&s->map[block], __ATOMIC_ACQUIRE);
}

static inline bool vdi_allocated(uint32_t entry)
{
    return entry < VDI_ZERO;
}

/* header.c */
int vdi_probe(const uint8_t *buf, size_t len, const char *filename);
void vdi_header_decode(const uint8_t *sec, struct vdi_header *h);
/* The header's own rules (as qemu's open, and a little stricter where a
 * hostile value would be unsafe), against a file of file_len bytes. */
int vdi_header_validate(const struct vdi_header *h, uint64_t file_len, const char *name);
/* Read the map; with check_entries, refuse entries that point past the
 * map's range or the file's end, and (writable) entries that share a
 * block or lie beyond the header's count, which the next allocation
 * would reuse. */
int vdi_load_map(struct vdi_state *s, bool check_entries, bool writable);
/* The guest range [off, off+len) from its start, up to where the status
 * or the host contiguity changes. */
void vdi_map(const struct vdi_state *s, uint64_t off, uint64_t len, struct vdi_run *run);
/* The file offset of a block's data. */
uint64_t vdi_block_host(const struct vdi_state *s, uint32_t index);
/* Serialise map entries [first, first+count) in LE into out. */
void vdi_encode_entries(const struct vdi_state *s, uint32_t first, uint32_t count, uint8_t *out);

/* The labels of the two UUIDs (blk_create_uuid, uuid_derive). */
#define VDI_ID_IMAGE "vdi image UUID"
#define VDI_ID_MODIFY "vdi modification UUID"

/* alloc.c */
/* Reproducible output: the image and modification UUIDs from seed. */
int vdi_set_identity(struct blk_node *n, const uint8_t seed[BLK_SEED_LEN]);
int vdi_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                unsigned flags);
int vdi_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);

/* check.c */
int vdi_check(struct blk_node *n, enum blk_repair repair, FILE *report,
              struct blk_check_result *res);

/* create.c */
int vdi_create(struct blk_node *file, const struct blk_create_opts *o, char **summary);
int vdi_create_check(const struct blk_create_opts *o);
/* The file size "convert -O vdi" writes (the driver's measure). */
int vdi_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *m);
extern const char vdi_create_help[];

#endif
