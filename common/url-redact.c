/* common/url-redact.c: recognising HTTP URLs and their printable form
 * (see url-redact.h).  libcurl parses the URL it fetches; this only
 * decides what a human may see of it. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/escape.h"
#include "url-redact.h"

bool http_url_is(const char *s)
{
    return strncasecmp(s, "http://", 7) == 0 || strncasecmp(s, "https://", 8) == 0;
}

bool http_url_is_https(const char *s)
{
    return strncasecmp(s, "https://", 8) == 0;
}

char *url_redact(const char *url)
{
    size_t scheme = http_url_is_https(url) ? 8 : http_url_is(url) ? 7 : 0;
    const char *auth = url + scheme;
    size_t auth_len = strcspn(auth, "/?#");
    const char *at = memrchr(auth, '@', auth_len); /* the user's part ends at the last */
    const char *host = at ? at + 1 : auth;
    size_t rest_len = strcspn(host, "?#");
    bool query = host[rest_len] == '?';
    size_t cap = scheme + rest_len + 5;
    char *plain = malloc(cap), *out;

    if (!plain) {
        return NULL;
    }
    for (size_t i = 0; i < scheme; i++) {
        plain[i] = (char)((url[i] >= 'A' && url[i] <= 'Z') ? url[i] - 'A' + 'a' : url[i]);
    }
    memcpy(plain + scheme, host, rest_len);
    strcpy(plain + scheme + rest_len, query ? "?..." : "");
    out = str_escape(plain);
    free(plain);
    return out;
}
