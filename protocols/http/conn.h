/* protocols/http/conn.h: one libcurl easy handle and the ranged GET it
 * runs, with the checks and retries every answer goes through.  The
 * driver (driver.c) keeps a pool of these, one per concurrent request;
 * each keeps its connection open between requests. */
#ifndef DISKIMG_PROTOCOLS_HTTP_CONN_H
#define DISKIMG_PROTOCOLS_HTTP_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include <curl/curl.h>

#include "range.h"

/* What every request of one image shares. */
struct http_config {
    char *url;       /* as given: it may hold secrets (a signature, a password) */
    char *display;   /* common/url-redact.h's printable form, for every message */
    bool https_only; /* the "https" driver: the URL itself must be https */
    char *ca_file;   /* tls-creds: DIR/ca-cert.pem replaces the system CAs; NULL: system */
    char *client_cert, *client_key; /* tls-creds: DIR/client-*.pem when present */
    bool verify;                    /* sslverify (on unless asked otherwise) */
    unsigned timeout_s;             /* connect, and a transfer stalled this long */
    unsigned retries;               /* transient failures retried this many times */
    CURLSH *share;                  /* DNS cache and TLS sessions, NULL: none */
    /* The strong ETag of the first answer ("": none): later requests send
     * If-Match, so a file replaced on the server is an error (412), not
     * a mix of two files. */
    char etag[HTTP_ETAG_MAX + 1];
};

/* A 206 answer as checked: it starts where asked, and got bytes of it
 * (at least one) were stored.  got is less than asked only where the
 * resource ends (total), which open relies on to learn the size. */
struct http_answer {
    uint64_t total; /* the resource's size, from Content-Range */
    uint64_t got;
    char etag[HTTP_ETAG_MAX + 1]; /* its strong ETag, or "" */
};

struct http_conn;

/* curl_global_init, once per process. */
int http_global_init(void);

int http_conn_new(struct http_conn **out, const struct http_config *cfg);
void http_conn_free(struct http_conn *c);

/* GET bytes [off, off + len) into iov (len bytes at least), retrying
 * transient failures.  An answer other than 206 with a valid
 * Content-Range for that range is an error with a message naming the URL
 * (its display form) and the reason; the body of such an answer is not
 * downloaded.  A 416 whose Content-Range says "* /0" is an empty
 * resource: 0 with total and got 0. */
int http_conn_get(struct http_conn *c, uint64_t off, uint64_t len, const struct iovec *iov,
                  int iovcnt, struct http_answer *ans);

#endif
