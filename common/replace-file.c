/* common/replace-file.c: write a file by renaming a fresh temporary file
 * over it (see replace-file.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "replace-file.h"
#include "util.h"

static void replace_file_clear(struct replace_file *rf)
{
    free(rf->path);
    free(rf->tmp);
    rf->path = rf->tmp = NULL;
    rf->f = NULL;
}

int replace_file_open(struct replace_file *rf, const char *path)
{
    size_t len = strlen(path) + 32;
    int fd = -1, e = 0;

    *rf = (struct replace_file){NULL, NULL, NULL};
    rf->path = strdup(path);
    rf->tmp = malloc(len);
    if (!rf->path || !rf->tmp) {
        replace_file_clear(rf);
        return err_set(ENOMEM, "%s", path);
    }
    /* A name nobody can predict, so nobody can plant it first; O_EXCL
     * refuses it anyway if someone did. */
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        uint64_t salt = clock_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)attempt * 0x9e3779b9u;
        snprintf(rf->tmp, len, "%s.tmp%016llx", path, (unsigned long long)salt);
        fd = open(rf->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        e = errno;
        if (fd < 0 && e != EEXIST) {
            break;
        }
    }
    if (fd < 0) {
        int r = err_set(e, "%s: cannot create a temporary file next to it", path);
        replace_file_clear(rf);
        return r;
    }
    rf->f = fdopen(fd, "w");
    if (!rf->f) {
        e = errno;
        close(fd);
        unlink(rf->tmp);
        replace_file_clear(rf);
        return err_set(e, "%s", path);
    }
    return 0;
}

int replace_file_commit(struct replace_file *rf)
{
    int r = 0;

    if (fflush(rf->f) != 0 || ferror(rf->f)) {
        r = err_set(errno ? errno : EIO, "%s", rf->tmp);
    }
    if (fclose(rf->f) != 0 && r == 0) {
        r = err_set(errno, "%s", rf->tmp);
    }
    rf->f = NULL;
    if (r == 0 && rename(rf->tmp, rf->path) != 0) {
        r = err_set(errno, "%s", rf->path);
    }
    if (r < 0) {
        unlink(rf->tmp);
    }
    replace_file_clear(rf);
    return r;
}

void replace_file_abandon(struct replace_file *rf)
{
    if (rf->f) {
        fclose(rf->f);
        unlink(rf->tmp);
    }
    replace_file_clear(rf);
}
