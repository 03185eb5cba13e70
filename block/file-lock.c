/* block/file-lock.c: qemu-compatible image locks on local files (see
 * file-lock.h for the model).  The byte layout is qemu's file-posix one,
 * which qemu-img, qemu-nbd and qemu check: byte 100 + n is locked by a
 * holder of permission n, byte 200 + n by a user that does not share it,
 * every lock an OFD read lock on one byte, and a conflict is a lock of
 * another open file description found by F_OFD_GETLK with a write lock.
 *
 * This file keeps the process's table of locked files: one entry per
 * file (device and inode), one descriptor whose open file description
 * carries the union of the bytes its users need, and the list of users.
 * Not for: deciding which permissions an image needs (block/perm.c). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/escape.h"
#include "driver.h"
#include "file-lock.h"

#define LOCK_PERM_BASE 100
#define LOCK_SHARED_BASE 200
#define LOCK_NPERMS 4 /* bits of BLK_PERM_ALL */

struct lock_file;

struct blk_file_lock {
    struct lock_file *file;
    struct blk_perms p;
    bool hold;
    char *name; /* the file name, escaped, for messages */
    struct blk_file_lock *next;
};

struct lock_file {
    dev_t dev;
    ino_t ino;
    int fd;
    unsigned locked_perm;     /* bytes LOCK_PERM_BASE + n locked on fd */
    unsigned locked_unshared; /* bytes LOCK_SHARED_BASE + n locked on fd */
    struct blk_file_lock *users;
    struct lock_file *next;
};

static pthread_mutex_t table_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct lock_file *table;

static const char *perm_name(unsigned bit)
{
    static const char *const names[LOCK_NPERMS] = {"consistent read", "write", "write unchanged",
                                                   "resize"};

    return names[__builtin_ctz(bit)];
}

static int lock_byte(int fd, int off, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};

    return fcntl(fd, F_OFD_SETLK, &fl) < 0 ? -errno : 0;
}

/* 1 if another open file description locks byte off, 0 if none does. */
static int byte_taken(int fd, int off)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};

    if (fcntl(fd, F_OFD_GETLK, &fl) < 0) {
        return -errno;
    }
    return fl.l_type != F_UNLCK;
}

/* The bytes every user but 'skip' needs. */
static void users_need(const struct lock_file *f, const struct blk_file_lock *skip, unsigned *perm,
                       unsigned *unshared)
{
    *perm = *unshared = 0;
    for (const struct blk_file_lock *u = f->users; u; u = u->next) {
        if (u != skip) {
            *perm |= u->p.perm;
            *unshared |= ~u->p.shared & BLK_PERM_ALL;
        }
    }
}

/* Lock the bytes of perm and unshared that f lacks.  Stops at the first
 * failure, with the bytes locked so far recorded in f. */
static int lock_bytes(struct lock_file *f, unsigned perm, unsigned unshared, const char *name)
{
    for (int pass = 0; pass < 2; pass++) {
        unsigned *locked = pass ? &f->locked_unshared : &f->locked_perm;
        unsigned want = pass ? unshared : perm;
        int base = pass ? LOCK_SHARED_BASE : LOCK_PERM_BASE;
        for (unsigned i = 0; i < LOCK_NPERMS; i++) {
            unsigned bit = 1u << i;
            if (!(want & bit) || (*locked & bit)) {
                continue;
            }
            int r = lock_byte(f->fd, base + (int)i, F_RDLCK);
            if (r == -EAGAIN || r == -EACCES) {
                /* Only a write lock conflicts with a read lock: not qemu's. */
                return err_setx(EBUSY, "%s: byte %d is write-locked by another process", name,
                                base + (int)i);
            }
            if (r < 0) {
                return err_set(-r, "%s: locking byte %d", name, base + (int)i);
            }
            *locked |= bit;
        }
    }
    return 0;
}

/* Unlock the bytes f has beyond perm and unshared.  Unlocking cannot
 * conflict; a failure leaves the byte recorded as locked, which is only
 * stricter, and no message (the caller may be reporting another error). */
static void unlock_extra(struct lock_file *f, unsigned perm, unsigned unshared)
{
    for (int pass = 0; pass < 2; pass++) {
        unsigned *locked = pass ? &f->locked_unshared : &f->locked_perm;
        unsigned want = pass ? unshared : perm;
        int base = pass ? LOCK_SHARED_BASE : LOCK_PERM_BASE;
        for (unsigned i = 0; i < LOCK_NPERMS; i++) {
            unsigned bit = 1u << i;
            if ((*locked & bit) && !(want & bit) && lock_byte(f->fd, base + (int)i, F_UNLCK) == 0) {
                *locked &= ~bit;
            }
        }
    }
}

/* Against the users of this process: their locks share our open file
 * description, so the kernel cannot tell.  Users pass over holds (the
 * command that holds the file opens it itself), but a new hold is checked
 * against the users: create must not empty a file this command reads, such
 * as the source's backing file. */
static int check_process(const struct lock_file *f, const struct blk_file_lock *self,
                         const struct blk_perms *p, const char *name)
{
    for (const struct blk_file_lock *u = f->users; u; u = u->next) {
        if (u == self || u->hold) {
            continue;
        }
        unsigned want = p->perm & ~u->p.shared_here, refuse = u->p.perm & ~p->shared_here;
        if (want || refuse) {
            return err_setx(EBUSY,
                            "%s: failed to get %s\"%s\" lock: this command already uses the "
                            "image (as another image, backing file or export)",
                            name, want ? "" : "shared ",
                            perm_name(want ? want & -want : refuse & -refuse));
        }
    }
    return 0;
}

/* Against other processes, after our bytes are locked (see file-lock.h). */
static int check_others(const struct lock_file *f, unsigned perm, unsigned shared, const char *name)
{
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < LOCK_NPERMS; i++) {
            unsigned bit = 1u << i;
            bool ours = pass ? !(shared & bit) : (perm & bit);
            if (!ours) {
                continue;
            }
            /* Holding a permission: does anybody refuse to share it?
             * Refusing one: does anybody hold it? */
            int r = byte_taken(f->fd, (pass ? LOCK_PERM_BASE : LOCK_SHARED_BASE) + (int)i);
            if (r < 0) {
                return err_set(-r, "%s: testing lock byte", name);
            }
            if (r) {
                return err_setx(EBUSY,
                                "%s: failed to get %s\"%s\" lock: another process is using "
                                "the image",
                                name, pass ? "shared " : "", perm_name(bit));
            }
        }
    }
    return 0;
}

/* Give user 'self' (NULL: a new one) perm and shared: on success the bytes
 * are what the users need; on failure what they needed before. */
static int set_perms(struct lock_file *f, const struct blk_file_lock *self,
                     const struct blk_perms *p, const char *name)
{
    unsigned others_perm, others_unshared, unshared = ~p->shared & BLK_PERM_ALL;
    int r;

    users_need(f, self, &others_perm, &others_unshared);
    r = check_process(f, self, p, name);
    if (r == 0) {
        r = lock_bytes(f, others_perm | p->perm, others_unshared | unshared, name);
    }
    if (r == 0) {
        r = check_others(f, p->perm, p->shared, name);
    }
    if (r == 0) {
        unlock_extra(f, others_perm | p->perm, others_unshared | unshared);
        return 0;
    }
    if (self) {
        others_perm |= self->p.perm;
        others_unshared |= ~self->p.shared & BLK_PERM_ALL;
    }
    unlock_extra(f, others_perm, others_unshared);
    return r;
}

static struct lock_file *table_find(dev_t dev, ino_t ino)
{
    for (struct lock_file *f = table; f; f = f->next) {
        if (f->dev == dev && f->ino == ino) {
            return f;
        }
    }
    return NULL;
}

static void table_drop_if_unused(struct lock_file *f)
{
    if (f->users) {
        return;
    }
    for (struct lock_file **p = &table; *p; p = &(*p)->next) {
        if (*p == f) {
            *p = f->next;
            break;
        }
    }
    close(f->fd); /* releases every byte */
    free(f);
}

int blk_file_lock_acquire(struct blk_file_lock **out, int fd, const char *filename,
                          const struct blk_perms *p, bool hold)
{
    struct blk_file_lock *u = calloc(1, sizeof *u);
    char *name = str_escape(filename);
    struct lock_file *f;
    struct stat st;
    int r;

    if (!u || !name) {
        free(u);
        free(name);
        return err_set(ENOMEM, "locking an image");
    }
    if (fstat(fd, &st) < 0) {
        r = err_set(errno, "%s: fstat", name);
        free(u);
        free(name);
        return r;
    }
    pthread_mutex_lock(&table_mutex);
    f = table_find(st.st_dev, st.st_ino);
    if (!f) {
        f = calloc(1, sizeof *f);
        if (f) {
            f->dev = st.st_dev;
            f->ino = st.st_ino;
            f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
            if (f->fd < 0) {
                r = err_set(errno, "%s: locking", name);
                free(f);
                goto fail;
            }
            f->next = table;
            table = f;
        }
    }
    if (!f) {
        r = err_set(ENOMEM, "%s: locking", name);
        goto fail;
    }
    r = set_perms(f, NULL, p, name);
    if (r < 0) {
        table_drop_if_unused(f);
        goto fail;
    }
    u->file = f;
    u->p = *p;
    u->hold = hold;
    u->name = name;
    u->next = f->users;
    f->users = u;
    pthread_mutex_unlock(&table_mutex);
    *out = u;
    return 0;

fail:
    pthread_mutex_unlock(&table_mutex);
    free(u);
    free(name);
    return r;
}

int blk_file_lock_update(struct blk_file_lock *l, const struct blk_perms *p)
{
    int r = 0;

    pthread_mutex_lock(&table_mutex);
    if (memcmp(p, &l->p, sizeof *p) != 0) {
        r = set_perms(l->file, l, p, l->name);
        if (r == 0) {
            l->p = *p;
        }
    }
    pthread_mutex_unlock(&table_mutex);
    return r;
}

void blk_file_lock_release(struct blk_file_lock *l)
{
    unsigned perm, unshared;

    if (!l) {
        return;
    }
    pthread_mutex_lock(&table_mutex);
    struct lock_file *f = l->file;
    for (struct blk_file_lock **p = &f->users; *p; p = &(*p)->next) {
        if (*p == l) {
            *p = l->next;
            break;
        }
    }
    users_need(f, NULL, &perm, &unshared);
    unlock_extra(f, perm, unshared);
    table_drop_if_unused(f);
    pthread_mutex_unlock(&table_mutex);
    free(l->name);
    free(l);
}
