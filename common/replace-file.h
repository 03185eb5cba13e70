/* common/replace-file.h: writing a small file (a pid file, a statistics
 * document) in a directory other users may write to, without following
 * a link planted there.  The content goes to a new temporary file next to
 * the target, created with O_CREAT|O_EXCL|O_NOFOLLOW (so it is never an
 * existing file or a link), and is renamed over the target: rename()
 * replaces a symbolic link at the target's name itself, never the file
 * it points to.  A reader sees the old document or the new one, never
 * half of one. */
#ifndef DISKIMG_COMMON_REPLACE_FILE_H
#define DISKIMG_COMMON_REPLACE_FILE_H

#include <stdio.h>

struct replace_file {
    char *path; /* the target */
    char *tmp;  /* the temporary file, in the same directory */
    FILE *f;    /* write the content here */
};

/* Create the temporary file for path (mode 0644 before the umask).
 * Returns 0 or -errno with a message naming the file. */
int replace_file_open(struct replace_file *rf, const char *path);
/* Flush, close and rename over the target; on failure (or when abandon
 * is called instead) the temporary file is removed.  Returns 0 or -errno
 * with a message. */
int replace_file_commit(struct replace_file *rf);
void replace_file_abandon(struct replace_file *rf);

#endif
