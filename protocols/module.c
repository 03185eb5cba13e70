/* protocols/module.c: finding and loading a protocol driver's module
 * (module.h says why and where). */
#include "module.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/escape.h"
#include "common/log.h"

/* The folder of the running program, or false when /proc cannot say. */
static bool program_dir(char *dir, size_t size)
{
    ssize_t len = readlink("/proc/self/exe", dir, size - 1);
    char *slash;

    if (len <= 0 || (size_t)len >= size - 1) {
        return false;
    }
    dir[len] = '\0';
    slash = strrchr(dir, '/');
    if (!slash) {
        return false;
    }
    *slash = '\0'; /* "" for a program in "/" */
    return true;
}

/* The module folder: <libdir>/diskimg seen from the program's folder
 * dir, or as configured when that cannot be known. */
static int module_dir(char *out, size_t size, const char *dir)
{
#ifdef DISKIMG_MODULE_RELDIR
    if (dir) {
        /* "../lib/x86_64-linux-gnu/diskimg" from bin/: each ".." takes
         * one folder off, so messages show a plain path. */
        char base[PATH_MAX];
        const char *rel = DISKIMG_MODULE_RELDIR;
        snprintf(base, sizeof base, "%s", dir);
        while (strncmp(rel, "../", 3) == 0 && strrchr(base, '/')) {
            *strrchr(base, '/') = '\0';
            rel += 3;
        }
        return snprintf(out, size, "%s/%s", base, rel);
    }
#else
    (void)dir; /* bindir or libdir outside the prefix: no path between */
#endif
    return snprintf(out, size, "%s", DISKIMG_MODULE_DIR);
}

/* The places to look for file, best first: the module folder, then
 * beside the program.  Returns how many (0 when a path is too long). */
static int module_paths(char paths[2][PATH_MAX], const char *file)
{
    char dir[PATH_MAX], mdir[PATH_MAX];
    bool have_dir = program_dir(dir, sizeof dir);
    int len = module_dir(mdir, sizeof mdir, have_dir ? dir : NULL);

    if (len < 0 || len >= (int)sizeof mdir) {
        return 0;
    }
    len = snprintf(paths[0], PATH_MAX, "%s/%s", mdir, file);
    if (len < 0 || len >= PATH_MAX) {
        return 0;
    }
    if (!have_dir) {
        return 1;
    }
    len = snprintf(paths[1], PATH_MAX, "%s/%s", dir, file);
    return len > 0 && len < PATH_MAX ? 2 : 1;
}

/* Record why the module at path did not load (why: dlerror's text or
 * ours), escaped: the path and a library's text may hold any bytes. */
static void set_error(struct proto_module *m, const char *path, const char *why)
{
    size_t plen = strlen(path);
    char *p, *w;

    /* dlerror starts with the file it could not open; path is said once. */
    if (strncmp(why, path, plen) == 0 && strncmp(why + plen, ": ", 2) == 0) {
        why += plen + 2;
    }
    p = str_escape(path);
    w = str_escape(why);
    snprintf(m->error, sizeof m->error, "cannot load the %s driver module %s: %s", m->what,
             p ? p : "?", w ? w : "?");
    free(p);
    free(w);
}

/* A module from another build would call into this program with other
 * struct layouts: refused. */
static bool same_build(const struct proto_module *m, const struct proto_module_entry *e)
{
    static const size_t sizes[] = PROTO_MODULE_SIZES;

    return e->version && strcmp(e->version, DISKIMG_VERSION) == 0 &&
           memcmp(e->sizes, sizes, sizeof sizes) == 0 && e->driver && e->driver->state_size &&
           m->has_ops(e->driver);
}

static void load(struct proto_module *m)
{
    char file[64], entry[64], paths[2][PATH_MAX];
    int n, pick = 0;

    snprintf(file, sizeof file, "diskimg-%s.so", m->name);
    snprintf(entry, sizeof entry, "diskimg_%s_module", m->name);
    n = module_paths(paths, file);
    if (n == 0) {
        snprintf(m->error, sizeof m->error, "cannot load the %s driver module %s: path too long",
                 m->what, file);
        return;
    }
    while (pick < n && access(paths[pick], F_OK) != 0) {
        pick++;
    }
    if (pick == n) {
        char why[PATH_MAX + 64];
        snprintf(why, sizeof why, "%s (nor %s)", strerror(ENOENT), paths[n - 1]);
        set_error(m, paths[0], n > 1 ? why : strerror(ENOENT));
        return;
    }
    /* RTLD_NOW: a symbol the program lacks (module.syms) fails here, not
     * in the middle of a request. */
    void *handle = dlopen(paths[pick], RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        set_error(m, paths[pick], dlerror());
        return;
    }
    const struct proto_module_entry *e = dlsym(handle, entry);
    if (!e || !same_build(m, e)) {
        char why[128] = "it belongs to another build of diskimg";
        if (!e) {
            snprintf(why, sizeof why, "not a diskimg module (no %s)", entry);
        }
        set_error(m, paths[pick], why);
        return; /* not closed: C++ libraries (librbd) do not always unload cleanly */
    }
    log_debug("%s: driver module %s loaded", m->name, paths[pick]);
    m->driver = e->driver; /* the handle stays open for the process's life */
}

const struct blk_driver *proto_module_load(struct proto_module *m)
{
    pthread_mutex_lock(&m->lock);
    if (!m->tried) {
        m->tried = true;
        load(m);
    }
    pthread_mutex_unlock(&m->lock);
    return m->driver;
}
