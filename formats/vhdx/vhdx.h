/* formats/vhdx/vhdx.h: the VHDX driver's on-disk constants, its state and
 * the functions its files share ([MS-VHDX] v1.00; qemu-img 7.2 for the
 * choices the spec leaves open).
 *
 * The files form an order; each calls only files below it:
 *   header.c    file identifier, the two headers, region table, metadata
 *   log.c       the log: find, validate and replay; write an entry
 *   bat.c       the BAT: load, sanity, one entry's update through the log
 *   rw.c        guest reads, writes (allocation), zeroes, block status
 *   check.c     check and info
 *   create.c    create -f vhdx
 *   vhdx.c      the driver: vtable, open, close, flush
 *
 * Locking: s->lock guards the in-memory BAT, briefly, for lookups and the
 * store of a new entry; s->meta_lock serialises everything that writes
 * metadata (allocation, headers, the log) and is held across the data
 * write of an allocating request, so two writers never allocate the same
 * block.  Order: meta_lock, then lock.  Payload blocks never move or get
 * freed, so a read needs no lock once it has its block's offset. */
#ifndef DISKIMG_FORMATS_VHDX_H
#define DISKIMG_FORMATS_VHDX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "block/driver.h"

#define MiB (1024u * 1024u)
#define KiB 1024u

/* Layout ([MS-VHDX] 2.1). */
#define VHDX_HEADER1_OFFSET (64 * KiB)
#define VHDX_HEADER2_OFFSET (128 * KiB)
#define VHDX_REGION1_OFFSET (192 * KiB)
#define VHDX_REGION2_OFFSET (256 * KiB)
#define VHDX_HEADER_SIZE (4 * KiB)
#define VHDX_REGION_SIZE (64 * KiB)
#define VHDX_METADATA_TABLE_SIZE (64 * KiB)
#define VHDX_LOG_SECTOR 4096u
#define VHDX_ALIGN MiB /* every object past the first MiB */

#define VHDX_MAX_SIZE (64ull << 40) /* 64 TiB */
#define VHDX_MIN_BLOCK MiB
#define VHDX_MAX_BLOCK (256 * MiB)
#define VHDX_MAX_ENTRIES 2047 /* region and metadata tables */
/* Replaying reads the whole log into memory; a bigger dirty log is
 * refused rather than allowed to exhaust memory. */
#define VHDX_MAX_REPLAY_LOG (256u * MiB)

/* Payload block states (BAT bits 0-2; [MS-VHDX] 2.5.1.1). */
enum vhdx_block_state {
    VHDX_BLOCK_NOT_PRESENT = 0,
    VHDX_BLOCK_UNDEFINED = 1,
    VHDX_BLOCK_ZERO = 2,
    VHDX_BLOCK_UNMAPPED = 3,
    VHDX_BLOCK_FULLY_PRESENT = 6,
    VHDX_BLOCK_PARTIALLY_PRESENT = 7,
};
#define VHDX_BAT_STATE(e) ((unsigned)((e)&7))
#define VHDX_BAT_OFFSET(e) ((e) & ~(uint64_t)(MiB - 1)) /* FileOffsetMB << 20 */

/* GUIDs as stored (Data1-3 little-endian, Data4 as is). */
extern const uint8_t vhdx_guid_bat[16];
extern const uint8_t vhdx_guid_metadata[16];
extern const uint8_t vhdx_guid_file_params[16];
extern const uint8_t vhdx_guid_disk_size[16];
extern const uint8_t vhdx_guid_page83[16];
extern const uint8_t vhdx_guid_logical_sector[16];
extern const uint8_t vhdx_guid_physical_sector[16];
extern const uint8_t vhdx_guid_parent_locator[16];

/* One header ([MS-VHDX] 2.2.2), decoded. */
struct vhdx_header {
    uint64_t seq;
    uint8_t file_write_guid[16];
    uint8_t data_write_guid[16];
    uint8_t log_guid[16];
    uint16_t log_version;
    uint16_t version;
    uint32_t log_length;
    uint64_t log_offset;
};

/* What the metadata region says. */
struct vhdx_params {
    uint32_t block_size;
    bool leave_allocated; /* fixed */
    bool has_parent;
    uint64_t disk_size;
    uint32_t logical_sector;
    uint32_t physical_sector;
    uint8_t page83[16];
    uint32_t page83_off; /* the page 83 item, from the metadata region's start */
};

struct vhdx_state {
    struct blk_node *node;
    struct blk_node *file;
    char *name; /* the file name, escaped, for messages */
    bool read_only;
    bool for_check;

    pthread_mutex_t lock;      /* the in-memory BAT */
    pthread_mutex_t meta_lock; /* metadata writes and allocation */

    struct vhdx_header hdr; /* the current header */
    unsigned cur_hdr;       /* 0: header 1 at 64 KiB, 1: header 2 */

    uint64_t bat_offset, bat_length;
    uint64_t meta_offset, meta_length;
    struct vhdx_params p;

    uint64_t *bat;
    uint64_t bat_entries;
    uint64_t nblocks;     /* payload blocks */
    uint64_t chunk_ratio; /* payload blocks per sector-bitmap block */
    uint64_t file_end;    /* where the next block goes (meta_lock) */

    /* The log writer (meta_lock). */
    /* Headers carry this session's write GUIDs: set under meta_lock, read
     * without it by writers that need not allocate. */
    _Atomic bool session_started;
    bool log_live;     /* header LogGuid is set: entries may need replay */
    uint64_t log_seq;  /* sequence number of the next entry */
    uint32_t log_pos;  /* byte offset in the log of the next entry */
    bool log_replayed; /* a log was replayed at open (check reports it) */
};

/* ---- header.c ---- */
/* Read and select the headers, then the region table and metadata (the
 * log is replayed between the two by the caller). */
int vhdx_read_headers(struct vhdx_state *s);
int vhdx_read_regions(struct vhdx_state *s);
/* Write the header twice (both copies become current, sequence +1 each,
 * flushed after each), with log_guid (NULL: keep) and, on the first
 * write of a session, new write GUIDs. */
int vhdx_update_headers_locked(struct vhdx_state *s, const uint8_t *log_guid);
/* Encode a header into a 4 KiB buffer, checksum included. */
void vhdx_header_encode(const struct vhdx_header *h, uint8_t *buf);
/* Random GUID bytes (version 4 bits set). */
int vhdx_random_guid(uint8_t *guid);
/* Write h as header 1 and, with sequence number h->seq + 1, as header 2
 * (the current one), flushing after each; the session's write GUIDs are
 * h's from now on. */
int vhdx_rewrite_headers_locked(struct vhdx_state *s, const struct vhdx_header *h);
/* The labels of the derived IDs (blk_create_uuid, uuid_derive). */
#define VHDX_ID_FILE_WRITE "vhdx FileWriteGuid"
#define VHDX_ID_DATA_WRITE "vhdx DataWriteGuid"
#define VHDX_ID_PAGE83 "vhdx Page83Data"
#define VHDX_ID_SEQUENCE "vhdx SequenceNumber"
/* The first sequence number a seed gives: 32 bits, as qemu's random one. */
uint64_t vhdx_seq_from_uuid(const uint8_t *u);
uint64_t vhdx_chunk_ratio(uint32_t logical_sector, uint32_t block_size);
uint64_t vhdx_bat_entries_for(uint64_t disk_size, uint32_t block_size, uint64_t chunk_ratio);

/* ---- log.c ---- */
/* With the header read: replay a dirty log (writable open) or refuse
 * (read-only open); nothing to do when LogGuid is zero. */
int vhdx_log_open(struct vhdx_state *s);
/* Write `count` 4 KiB sectors as one log entry that sets them at the
 * file offsets `at` (4 KiB aligned), and flush it.  Sets a LogGuid first
 * if the log is empty. */
int vhdx_log_write_locked(struct vhdx_state *s, const uint64_t *at, const uint8_t *sectors,
                          unsigned count);
/* Everything logged is in place and flushed: mark the log empty. */
int vhdx_log_clear_locked(struct vhdx_state *s);

/* ---- bat.c ---- */
int vhdx_load_bat(struct vhdx_state *s);
/* Entry index of payload block b. */
static inline uint64_t vhdx_bat_index(const struct vhdx_state *s, uint64_t b)
{
    return b + b / s->chunk_ratio;
}
/* Problems of the BAT (entries past the end of the file, over metadata,
 * in states the image type forbids): 0, or the count with one line per
 * problem on report (NULL: count only); the first one is also the
 * thread's error message (err_msg), for open to return. */
uint64_t vhdx_bat_problems(struct vhdx_state *s, FILE *report);
/* Set payload block b's entry: log the BAT sector, flush, write it in
 * place; then the in-memory copy. */
int vhdx_bat_set_locked(struct vhdx_state *s, uint64_t b, uint64_t entry);

/* ---- rw.c ---- */
int vhdx_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt);
int vhdx_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                 unsigned flags);
int vhdx_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags);
int vhdx_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext);
int vhdx_map_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext);

/* ---- check.c ---- */
int vhdx_check(struct blk_node *n, enum blk_repair repair, FILE *report,
               struct blk_check_result *res);
int vhdx_get_info(struct blk_node *n, struct blk_image_info *info);
/* Reproducible output: write GUIDs, page 83 data and header sequence
 * numbers from seed, and an empty log that holds no session's entries. */
int vhdx_set_identity(struct blk_node *n, const uint8_t seed[BLK_SEED_LEN]);

/* ---- create.c ---- */
int vhdx_create(struct blk_node *file, const struct blk_create_opts *o, char **summary);
int vhdx_create_check(const struct blk_create_opts *o);
/* The file size "convert -O vhdx" writes (the driver's measure). */
int vhdx_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *m);
extern const char vhdx_create_help[];

#endif
