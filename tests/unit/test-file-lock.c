/* tests/unit/test-file-lock.c: the process's table of image locks
 * (block/file-lock.c): which bytes it locks, how users of one process are
 * checked against each other, holds, updates, and that a refusal or a
 * release leaves exactly the bytes the remaining users need.  "Another
 * process" is played by a second open file description of the file. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/file-lock.h"
#include "check.h"
#include "common/error.h"

CHECK_GLOBALS

static char path[] = "/tmp/diskimg-test-lock.XXXXXX";

static const struct blk_perms reader = {BLK_PERM_CONSISTENT_READ, BLK_PERM_SHARED_DEFAULT,
                                        BLK_PERM_SHARED_DEFAULT};
static const struct blk_perms writer = {BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE,
                                        BLK_PERM_SHARED_DEFAULT, BLK_PERM_SHARED_DEFAULT};

/* Whether an open file description other than the table's locks byte off. */
static int taken(int off)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};
    int r = fd >= 0 && fcntl(fd, F_OFD_GETLK, &fl) == 0 ? fl.l_type != F_UNLCK : -1;

    if (fd >= 0) {
        close(fd);
    }
    return r;
}

/* The bytes locked, as a bit mask: bit n for 100 + n, bit 4 + n for 200 + n. */
static unsigned bytes(void)
{
    unsigned m = 0;

    for (int i = 0; i < 4; i++) {
        m |= (unsigned)(taken(100 + i) == 1) << i;
        m |= (unsigned)(taken(200 + i) == 1) << (4 + i);
    }
    return m;
}
#define B(n) (n >= 200 ? 1u << (4 + n - 200) : 1u << (n - 100))

static int acquire(struct blk_file_lock **l, const struct blk_perms *p, bool hold)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    int r = blk_file_lock_acquire(l, fd, path, p, hold);

    close(fd); /* the table keeps its own descriptor */
    return r;
}

static void test_bytes_and_release(void)
{
    struct blk_file_lock *a = NULL, *b = NULL;

    CHECK_EQ(bytes(), 0);
    CHECK_EQ(acquire(&a, &reader, false), 0);
    CHECK_EQ(bytes(), B(100) | B(201) | B(203));
    CHECK_EQ(acquire(&b, &reader, false), 0); /* readers share */
    blk_file_lock_release(a);
    CHECK_EQ(bytes(), B(100) | B(201) | B(203));
    blk_file_lock_release(b);
    CHECK_EQ(bytes(), 0);
}

static void test_in_process(void)
{
    struct blk_file_lock *a = NULL, *b = NULL;
    struct blk_perms here = writer;

    CHECK_EQ(acquire(&a, &reader, false), 0);
    CHECK_EQ(acquire(&b, &writer, false), -EBUSY);
    CHECK(strstr(err_msg(), "failed to get \"write\" lock: this command already uses"));
    CHECK_EQ(bytes(), B(100) | B(201) | B(203)); /* nothing left of the refusal */
    blk_file_lock_release(a);

    /* Users that share writes here (a server's raw windows) may both write. */
    here.shared_here = BLK_PERM_ALL;
    CHECK_EQ(acquire(&a, &here, false), 0);
    CHECK_EQ(acquire(&b, &here, false), 0);
    CHECK_EQ(bytes(), B(100) | B(101) | B(201) | B(203));
    blk_file_lock_release(a);
    blk_file_lock_release(b);
    CHECK_EQ(bytes(), 0);
}

static void test_hold(void)
{
    struct blk_file_lock *h = NULL, *a = NULL;
    struct blk_perms resize = writer;

    resize.perm |= BLK_PERM_RESIZE;
    CHECK_EQ(acquire(&h, &resize, true), 0);
    CHECK_EQ(acquire(&a, &writer, false), 0); /* the hold keeps only others out */
    blk_file_lock_release(h);
    CHECK_EQ(bytes(), B(100) | B(101) | B(201) | B(203)); /* 103 was the hold's */
    blk_file_lock_release(a);
    CHECK_EQ(bytes(), 0);
}

static void test_update(void)
{
    struct blk_file_lock *a = NULL, *b = NULL;
    struct blk_perms meta = writer;

    meta.perm |= BLK_PERM_RESIZE;
    CHECK_EQ(acquire(&a, &writer, false), 0);
    CHECK_EQ(blk_file_lock_update(a, &meta), 0);
    CHECK_EQ(bytes(), B(100) | B(101) | B(103) | B(201) | B(203));
    CHECK_EQ(blk_file_lock_update(a, &reader), 0);
    CHECK_EQ(bytes(), B(100) | B(201) | B(203));
    CHECK_EQ(acquire(&b, &reader, false), 0);
    CHECK_EQ(blk_file_lock_update(a, &writer), -EBUSY); /* b does not share writes */
    CHECK_EQ(bytes(), B(100) | B(201) | B(203));
    blk_file_lock_release(b);
    CHECK_EQ(blk_file_lock_update(a, &writer), 0);
    blk_file_lock_release(a);
    CHECK_EQ(bytes(), 0);
}

static void test_other_process(void)
{
    int other = open(path, O_RDONLY | O_CLOEXEC);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 201, .l_len = 1};
    struct blk_file_lock *a = NULL;

    /* "another process" reads and lets nobody write */
    CHECK_EQ(fcntl(other, F_OFD_SETLK, &fl), 0);
    CHECK_EQ(acquire(&a, &writer, false), -EBUSY);
    CHECK(strstr(err_msg(), "failed to get \"write\" lock: another process is using the image"));
    CHECK_EQ(bytes(), B(201)); /* only the other's */
    CHECK_EQ(acquire(&a, &reader, false), 0);
    blk_file_lock_release(a);
    /* it writes: a reader that does not share writes is refused */
    fl.l_start = 101;
    CHECK_EQ(fcntl(other, F_OFD_SETLK, &fl), 0);
    CHECK_EQ(acquire(&a, &reader, false), -EBUSY);
    CHECK(strstr(err_msg(), "failed to get shared \"write\" lock"));
    struct blk_perms shared_all = reader;
    shared_all.shared = shared_all.shared_here = BLK_PERM_ALL; /* -U */
    CHECK_EQ(acquire(&a, &shared_all, false), 0);
    blk_file_lock_release(a);
    close(other);
    CHECK_EQ(bytes(), 0);
}

int main(void)
{
    int fd = mkstemp(path);

    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    close(fd);
    RUN(test_bytes_and_release);
    RUN(test_in_process);
    RUN(test_hold);
    RUN(test_update);
    RUN(test_other_process);
    unlink(path);
    return check_exit();
}
