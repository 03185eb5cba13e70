/* protocols/http/conn.c: one ranged GET over a libcurl easy handle.
 *
 * Everything the server says is checked before a byte is trusted: the
 * status must be 206 (a server that ignores Range would send the whole
 * image: the transfer is cut at the first body byte), Content-Range must
 * name exactly the range asked for, and the body must be as long as it
 * says.  Transient failures (connection refused or reset, timeouts, 408,
 * 429 and 5xx answers a proxy or an overloaded store gives) are retried
 * a bounded number of times with a growing pause, or the pause the
 * server's Retry-After asks for (up to RETRY_AFTER_MAX_S: a longer one
 * gives up at once); nothing waits forever, as connects and stalled
 * transfers time out.  Not for the pool or the
 * read-ahead: driver.c. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/log.h"
#include "common/util.h"
#include "conn.h"
#include "range.h"

#define MAX_REDIRECTS 8L
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 2000
/* The longest Retry-After honoured, as long as a stalled transfer waits. */
#define RETRY_AFTER_MAX_S 30

struct http_conn {
    CURL *easy;
    const struct http_config *cfg;
    char errbuf[CURL_ERROR_SIZE];
    /* The request in flight. */
    const struct iovec *iov;
    int iovcnt;
    uint64_t off;           /* first byte asked for */
    uint64_t want;          /* bytes asked for */
    uint64_t got;           /* bytes stored */
    bool overflow;          /* the body went on past what was asked */
    bool refused;           /* cut at the first body byte: the status was not 206 */
    bool stalled;           /* no byte came for timeout_s seconds */
    unsigned retry_after_s; /* a transient answer's Retry-After, 0 if none */
    uint64_t progress_ns;   /* when the last byte came (or the request started) */
    curl_off_t progress_bytes;
    /* The headers of the last answer (a redirect's are forgotten). */
    bool have_range;
    bool bad_range;
    bool encoded; /* Content-Encoding other than identity */
    struct http_content_range range;
    char etag[HTTP_ETAG_MAX + 1];
    struct curl_slist *if_match; /* set once cfg->etag is known */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init_once(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int http_global_init(void)
{
    pthread_once(&global_once, global_init_once);
    if (global_rc != CURLE_OK) {
        return err_setx(EIO, "libcurl could not start: %s", curl_easy_strerror(global_rc));
    }
    return 0;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *opaque)
{
    struct http_conn *c = opaque;
    size_t len = size * nmemb;
    const char *v;
    size_t vlen;

    if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        /* a new answer (after a redirect or a 100 Continue) */
        c->have_range = c->bad_range = c->encoded = false;
        c->etag[0] = '\0';
    } else if (http_header_match(line, len, "Content-Range", &v, &vlen)) {
        c->have_range = true;
        c->bad_range = http_content_range_parse(v, vlen, &c->range) < 0;
    } else if (http_header_match(line, len, "ETag", &v, &vlen) && http_etag_usable(v, vlen)) {
        memcpy(c->etag, v, vlen);
        c->etag[vlen] = '\0';
    } else if (http_header_match(line, len, "Content-Encoding", &v, &vlen)) {
        c->encoded = !(vlen == 8 && strncasecmp(v, "identity", 8) == 0);
    }
    return len;
}

/* A 200 answer to a range from byte 0 whose Content-Length fits in it:
 * the whole file, smaller than what was asked (RFC 9110 lets a server
 * answer so).  Anything longer would be a server ignoring Range. */
static bool whole_file_fits(struct http_conn *c, long status)
{
    curl_off_t length = -1;

    if (status != 200 || c->off != 0) {
        return false;
    }
    curl_easy_getinfo(c->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    return length >= 0 && (uint64_t)length <= c->want;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *opaque)
{
    struct http_conn *c = opaque;
    size_t len = size * nmemb;
    long status = 0;

    if (c->got == 0) {
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
        if (status != 206 && !whole_file_fits(c, status)) {
            c->refused = true; /* an error page, or the whole image: do not download it */
            return 0;
        }
    }
    if (len > c->want - c->got) {
        c->overflow = true;
        return 0;
    }
    iov_from_buf(c->iov, c->iovcnt, c->got, data, len);
    c->got += len;
    return len;
}

/* libcurl's own low-speed check averages over several seconds, so a
 * stalled transfer would hang on for timeout_s plus that; this counts
 * from the start of the request or the last body byte that came (a
 * server that accepts and never answers stalls too). */
static int on_progress(void *opaque, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct http_conn *c = opaque;
    uint64_t now = clock_ns();
    (void)dltotal;
    (void)ultotal;
    (void)ulnow;

    if (dlnow != c->progress_bytes) {
        c->progress_bytes = dlnow;
        c->progress_ns = now;
    } else if (now - c->progress_ns > (uint64_t)c->cfg->timeout_s * 1000000000u) {
        c->stalled = true;
        return 1;
    }
    return 0;
}

static int setup_tls(struct http_conn *c, const struct http_config *cfg)
{
    CURLcode rc = CURLE_OK;

    if (!cfg->verify) {
        rc |= curl_easy_setopt(c->easy, CURLOPT_SSL_VERIFYPEER, 0L);
        rc |= curl_easy_setopt(c->easy, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (cfg->ca_file) {
        /* the directory's CA only: the system's are not trusted with it */
        rc |= curl_easy_setopt(c->easy, CURLOPT_CAINFO, cfg->ca_file);
        rc |= curl_easy_setopt(c->easy, CURLOPT_CAPATH, NULL);
    }
    if (cfg->client_cert && cfg->client_key) {
        rc |= curl_easy_setopt(c->easy, CURLOPT_SSLCERT, cfg->client_cert);
        rc |= curl_easy_setopt(c->easy, CURLOPT_SSLKEY, cfg->client_key);
    }
    return rc == CURLE_OK ? 0 : -EINVAL;
}

int http_conn_new(struct http_conn **out, const struct http_config *cfg)
{
    struct http_conn *c = calloc(1, sizeof *c);
    CURLcode rc = CURLE_OK;

    if (!c || !(c->easy = curl_easy_init())) {
        free(c);
        return err_set(ENOMEM, "%s: starting a libcurl handle", cfg->display);
    }
    c->cfg = cfg;
    rc |= curl_easy_setopt(c->easy, CURLOPT_URL, cfg->url);
    rc |= curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, c->errbuf);
    rc |= curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
    rc |= curl_easy_setopt(c->easy, CURLOPT_FOLLOWLOCATION, 1L);
    rc |= curl_easy_setopt(c->easy, CURLOPT_MAXREDIRS, MAX_REDIRECTS);
    rc |=
        curl_easy_setopt(c->easy, CURLOPT_PROTOCOLS_STR, cfg->https_only ? "https" : "http,https");
    rc |= curl_easy_setopt(c->easy, CURLOPT_REDIR_PROTOCOLS_STR, "https");
    rc |= curl_easy_setopt(c->easy, CURLOPT_CONNECTTIMEOUT, (long)cfg->timeout_s);
    /* a transfer that moves nothing for timeout_s seconds has stalled */
    rc |= curl_easy_setopt(c->easy, CURLOPT_NOPROGRESS, 0L);
    rc |= curl_easy_setopt(c->easy, CURLOPT_XFERINFOFUNCTION, on_progress);
    rc |= curl_easy_setopt(c->easy, CURLOPT_XFERINFODATA, c);
    rc |= curl_easy_setopt(c->easy, CURLOPT_HEADERFUNCTION, on_header);
    rc |= curl_easy_setopt(c->easy, CURLOPT_HEADERDATA, c);
    rc |= curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_body);
    rc |= curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c);
    /* no Accept-Encoding: a compressed answer's bytes are not the range */
    rc |= curl_easy_setopt(c->easy, CURLOPT_USERAGENT, "diskimg");
    if (cfg->share) {
        rc |= curl_easy_setopt(c->easy, CURLOPT_SHARE, cfg->share);
    }
    if (rc != CURLE_OK || setup_tls(c, cfg) < 0) {
        http_conn_free(c);
        return err_setx(EINVAL, "%s: libcurl refused an option (is it older than 7.85?)",
                        cfg->display);
    }
    *out = c;
    return 0;
}

void http_conn_free(struct http_conn *c)
{
    if (c) {
        curl_easy_cleanup(c->easy);
        curl_slist_free_all(c->if_match);
        free(c);
    }
}

/* Standard reason phrases: the server's own is never printed. */
static const char *status_reason(long status)
{
    switch (status) {
    case 200:
        return "OK (the server ignores Range requests)";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 410:
        return "Gone";
    case 412:
        return "Precondition Failed (the file changed on the server since it was opened)";
    case 416:
        return "Range Not Satisfiable";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return status >= 400 ? "error" : "unexpected answer";
    }
}

static int status_errno(long status)
{
    switch (status) {
    case 401:
    case 403:
        return EACCES;
    case 404:
    case 410:
        return ENOENT;
    default:
        return EIO;
    }
}

static bool status_transient(long status)
{
    return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
           status == 504;
}

static bool curl_transient(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

/* An answer other than 206, and whether it is worth another try.  A
 * transient one may say when to ask again (Retry-After, seconds or a
 * date: libcurl reads both); one that asks for longer than
 * RETRY_AFTER_MAX_S is not waited for, so it is not tried again. */
static int status_failed(struct http_conn *c, long status, bool *transient)
{
    const char *d = c->cfg->display;
    curl_off_t after = 0;

    *transient = status_transient(status);
    if (*transient && curl_easy_getinfo(c->easy, CURLINFO_RETRY_AFTER, &after) == CURLE_OK &&
        after > 0) {
        if (after > RETRY_AFTER_MAX_S) {
            *transient = false;
            return err_setx(
                status_errno(status),
                "%s: HTTP %ld %s (the server asks to retry after %" CURL_FORMAT_CURL_OFF_T
                " s, more than %d s)",
                d, status, status_reason(status), after, RETRY_AFTER_MAX_S);
        }
        c->retry_after_s = (unsigned)after;
    }
    return err_setx(status_errno(status), "%s: HTTP %ld %s", d, status, status_reason(status));
}

/* Outcome of one attempt: 0, or -errno with a message, and whether it is
 * worth another try. */
static int attempt_failed(struct http_conn *c, CURLcode rc, long status, bool *transient)
{
    const char *d = c->cfg->display;
    CLEANUP_FREE char *why = str_escape(c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc));

    *transient = false;
    if (c->overflow) {
        return err_setx(EPROTO, "%s: the server sent more bytes than the range asked for", d);
    }
    if (rc == CURLE_UNSUPPORTED_PROTOCOL && status >= 300 && status < 400) {
        return err_setx(EACCES,
                        "%s: the server redirects to a URL that is not https (redirects are "
                        "followed only to https)",
                        d);
    }
    if (rc == CURLE_TOO_MANY_REDIRECTS) {
        return err_setx(ELOOP, "%s: more than %ld redirects", d, MAX_REDIRECTS);
    }
    if (rc == CURLE_UNSUPPORTED_PROTOCOL) {
        return err_setx(EPROTONOSUPPORT, "%s: %s", d, why ? why : "unsupported protocol");
    }
    if (c->stalled) {
        *transient = true;
        return err_setx(ETIMEDOUT, "%s: the server sent nothing for %u s", d, c->cfg->timeout_s);
    }
    if (rc == CURLE_PEER_FAILED_VERIFICATION) {
        return err_setx(EACCES,
                        "%s: TLS: the server's certificate is not trusted (%s); --tls-creds DIR "
                        "trusts DIR/ca-cert.pem",
                        d, why ? why : "verification failed");
    }
    if (rc != CURLE_OK && !c->refused) {
        *transient = curl_transient(rc);
        return err_setx(rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO, "%s: %s", d,
                        why ? why : "transfer failed");
    }
    if (status == 200) {
        return err_setx(EPROTO,
                        "%s: the server ignores Range requests (it answered 200 with the whole "
                        "file, not 206); diskimg reads HTTP images only from servers that serve "
                        "byte ranges",
                        d);
    }
    if (status == 206 && c->encoded) {
        return err_setx(EPROTO,
                        "%s: the server encoded its answer (Content-Encoding): its bytes are "
                        "not the file's",
                        d);
    }
    if (status != 206) {
        return status_failed(c, status, transient);
    }
    return 0;
}

/* A 206 answer: does Content-Range describe exactly what was asked? */
static int check_range(struct http_conn *c, uint64_t off, uint64_t len, struct http_answer *ans)
{
    const char *d = c->cfg->display;
    const struct http_content_range *r = &c->range;

    if (!c->have_range || c->bad_range || !r->has_range) {
        return err_setx(EPROTO, "%s: the server's 206 answer has %s Content-Range header", d,
                        c->have_range ? "an invalid" : "no");
    }
    if (!r->has_total) {
        return err_setx(EPROTO,
                        "%s: the server does not say the file's size (Content-Range "
                        "total '*')",
                        d);
    }
    /* A range that starts elsewhere, or ends early without reaching the
     * end of the file, is not what was asked for. */
    if (r->first != off || r->last > off + len - 1 ||
        (r->last < off + len - 1 && r->last != r->total - 1)) {
        return err_setx(EPROTO,
                        "%s: the server answered bytes %" PRIu64 "-%" PRIu64
                        " for a request of bytes %" PRIu64 "-%" PRIu64,
                        d, r->first, r->last, off, off + len - 1);
    }
    if (c->got != r->last - r->first + 1) {
        return err_setx(EPROTO, "%s: the server sent %" PRIu64 " bytes of a %" PRIu64 "-byte range",
                        d, c->got, r->last - r->first + 1);
    }
    ans->total = r->total;
    ans->got = c->got;
    memcpy(ans->etag, c->etag, sizeof ans->etag);
    return 0;
}

/* An answer without a range that still tells the file: a 416 whose
 * Content-Range says the file is empty, or a 200 with the whole file
 * (whole_file_fits), all of whose bytes came. */
static bool whole_file(struct http_conn *c, long status, struct http_answer *ans)
{
    curl_off_t length = -1;

    if (status == 416) {
        if (c->off != 0 || !c->have_range || c->bad_range || c->range.has_range ||
            !c->range.has_total || c->range.total != 0) {
            return false;
        }
    } else if (!whole_file_fits(c, status) || c->refused ||
               curl_easy_getinfo(c->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) !=
                   CURLE_OK ||
               (uint64_t)length != c->got) {
        return false;
    }
    ans->total = ans->got = status == 416 ? 0 : c->got;
    memcpy(ans->etag, c->etag, sizeof ans->etag);
    return true;
}

static int attempt(struct http_conn *c, uint64_t off, uint64_t len, const struct iovec *iov,
                   int iovcnt, struct http_answer *ans, bool *transient)
{
    char range[64];
    long status = 0;
    CURLcode rc;

    snprintf(range, sizeof range, "%" PRIu64 "-%" PRIu64, off, off + len - 1);
    c->iov = iov;
    c->iovcnt = iovcnt;
    c->off = off;
    c->want = len;
    c->got = 0;
    if (c->cfg->etag[0] && !c->if_match) {
        char h[sizeof c->cfg->etag + 16];
        snprintf(h, sizeof h, "If-Match: %s", c->cfg->etag);
        if (!(c->if_match = curl_slist_append(NULL, h))) {
            return err_set(ENOMEM, "%s: a request header", c->cfg->display);
        }
        curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, c->if_match);
    }
    c->overflow = c->refused = c->stalled = c->have_range = c->bad_range = c->encoded = false;
    c->retry_after_s = 0;
    c->etag[0] = '\0';
    c->progress_ns = clock_ns();
    c->progress_bytes = 0;
    c->errbuf[0] = '\0';
    curl_easy_setopt(c->easy, CURLOPT_RANGE, range);
    rc = curl_easy_perform(c->easy);
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK && whole_file(c, status, ans)) {
        *transient = false;
        return 0;
    }
    int r = attempt_failed(c, rc, status, transient);
    return r < 0 ? r : check_range(c, off, len, ans);
}

/* The pause before attempt try + 1: the server's Retry-After if it gave
 * one, else a doubling backoff. */
static void backoff(unsigned try, unsigned retry_after_s)
{
    unsigned ms = BACKOFF_FIRST_MS << MIN(try, 10u);
    struct timespec ts;

    ms = retry_after_s ? retry_after_s * 1000u : MIN(ms, (unsigned)BACKOFF_MAX_MS);
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

int http_conn_get(struct http_conn *c, uint64_t off, uint64_t len, const struct iovec *iov,
                  int iovcnt, struct http_answer *ans)
{
    for (unsigned try = 0;; try++) {
        bool transient = false;
        int r = attempt(c, off, len, iov, iovcnt, ans, &transient);
        if (r == 0 || !transient) {
            return r;
        }
        if (try >= c->cfg->retries) {
            CLEANUP_FREE char *msg = strdup(err_msg());
            return err_setx(-r, "%s (gave up after %u attempts)", msg ? msg : "?", try + 1);
        }
        log_debug("http: %s; retrying", err_msg());
        backoff(try, c->retry_after_s);
    }
}
