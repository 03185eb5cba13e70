/* protocols/rbd/clients.c: one Ceph client per cluster and identity in a
 * process.
 *
 * A server with many exports of one cluster would otherwise run a
 * librados client for each (its own monitor session, messenger threads
 * and caches).  Images whose names agree on everything that configures
 * the client (id, conf file, options, cache off or not) share one,
 * counted; librados and librbd are thread-safe and take many images per
 * client.  Each image keeps its own pool context and exclusive lock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rbd.h"

struct client {
    char *key;
    rados_t cluster;
    unsigned refs;
    struct client *next;
};

static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
static struct client *clients;

/* Appends s and a separator no option holds (names are C strings). */
static size_t put(char *out, size_t used, const char *s)
{
    size_t len = strlen(s ? s : "");

    if (out) {
        memcpy(out + used, s ? s : "", len);
        out[used + len] = '\x1f';
    }
    return used + len + 1;
}

static size_t key_into(const struct rbd_name *n, bool direct, char *out)
{
    size_t used = 0;

    used = put(out, used, n->user);
    used = put(out, used, n->conf ? n->conf : "\x1e"); /* no conf= is not conf= "" */
    for (unsigned i = 0; i < n->n_keys; i++) {
        used = put(out, used, n->keys[i]);
        used = put(out, used, n->values[i]);
    }
    used = put(out, used, direct ? "direct" : "cached");
    if (out) {
        out[used] = '\0';
    }
    return used;
}

char *rbd_client_key(const struct rbd_name *n, bool direct)
{
    char *key = malloc(key_into(n, direct, NULL) + 1);

    if (key) {
        key_into(n, direct, key);
    }
    return key;
}

bool rbd_client_get(const char *key, rados_t *out)
{
    bool found = false;

    pthread_mutex_lock(&clients_lock);
    for (struct client *c = clients; c; c = c->next) {
        if (strcmp(c->key, key) == 0) {
            c->refs++;
            *out = c->cluster;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&clients_lock);
    return found;
}

void rbd_client_add(const char *key, rados_t cluster)
{
    struct client *c = calloc(1, sizeof *c);

    if (c) {
        c->key = strdup(key);
    }
    if (!c || !c->key) {
        free(c);
        return; /* not shared: rbd_client_put shuts it down alone */
    }
    c->cluster = cluster;
    c->refs = 1;
    pthread_mutex_lock(&clients_lock);
    c->next = clients;
    clients = c;
    pthread_mutex_unlock(&clients_lock);
}

void rbd_client_put(rados_t cluster)
{
    struct client **p, *gone = NULL;

    pthread_mutex_lock(&clients_lock);
    for (p = &clients; *p; p = &(*p)->next) {
        if ((*p)->cluster == cluster) {
            if (--(*p)->refs == 0) {
                gone = *p;
                *p = gone->next;
            } else {
                cluster = NULL; /* still used */
            }
            break;
        }
    }
    pthread_mutex_unlock(&clients_lock);
    if (cluster) {
        rados_shutdown(cluster);
    }
    if (gone) {
        free(gone->key);
        free(gone);
    }
}
