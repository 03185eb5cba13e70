/* common/url-redact.h: which names are HTTP URLs, and how they print.  A
 * pre-signed object-store URL carries its signature in the query string,
 * and a URL may carry a user and password: neither is ever printed, in
 * messages, as a node's name, or by info and map (cmd/ prints images'
 * names through url_redact too).  Unit-tested in test-http-range.c. */
#ifndef DISKIMG_COMMON_URL_REDACT_H
#define DISKIMG_COMMON_URL_REDACT_H

#include <stdbool.h>

/* "http://..." or "https://..." (the scheme in any case). */
bool http_url_is(const char *s);
bool http_url_is_https(const char *s);

/* The URL for messages, malloc'd (NULL only when out of memory): the
 * scheme lower-cased, without user information, the query string shown
 * as "?...", without fragment, escaped (common/escape.h). */
char *url_redact(const char *url);

#endif
