/* tests/fuzz/replay.c: runs a libFuzzer harness without libFuzzer.  Each
 * argument is an input file or a directory of them (not recursive); every
 * input is fed to LLVMFuzzerTestOneInput once, in name order.  Linked with
 * each harness into NAME-replay, built in every configuration, so the
 * committed corpus (tests/fuzz/corpus/NAME) runs as a test with gcc, with
 * the sanitizers of build-san, and without -Dfuzzers.  A harness that
 * traps or a sanitizer report fails the test; the file being replayed is
 * printed first, so the failure names it. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;

    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            uint8_t *p = realloc(buf, cap);
            if (!p) {
                fprintf(stderr, "replay: %s: out of memory\n", path);
                free(buf);
                fclose(f);
                return -1;
            }
            buf = p;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0) {
            break;
        }
        len += n;
    }
    fclose(f);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Returns the number of inputs replayed, or -1. */
static int replay_path(const char *path)
{
    struct stat st;
    struct dirent **names;
    int n, done = 0;

    if (stat(path, &st) < 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        return replay_file(path) < 0 ? -1 : 1;
    }
    n = scandir(path, &names, NULL, by_name);
    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char full[4096];
        struct stat fst;

        snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && stat(full, &fst) == 0 && S_ISREG(fst.st_mode)) {
            if (replay_file(full) < 0) {
                done = -1;
            } else if (done >= 0) {
                done++;
            }
        }
        free(names[i]);
    }
    free(names);
    return done;
}

int main(int argc, char **argv)
{
    int total = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        int n = replay_path(argv[i]);
        if (n < 0) {
            return 1;
        }
        total += n;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    printf("replayed %d input(s)\n", total);
    return 0;
}
