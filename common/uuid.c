/* common/uuid.c: random and derived UUIDs (see uuid.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "error.h"
#include "sha256.h"
#include "uuid.h"

static void set_version(uint8_t u[UUID_LEN], unsigned version)
{
    u[6] = (uint8_t)((u[6] & 0x0f) | (version << 4));
    u[8] = (uint8_t)((u[8] & 0x3f) | 0x80); /* the RFC 4122 variant, 10xx */
}

int uuid_random(uint8_t u[UUID_LEN])
{
    if (getrandom(u, UUID_LEN, 0) != UUID_LEN) {
        return err_set(errno ? errno : EIO, "a random UUID");
    }
    set_version(u, 4);
    return 0;
}

int uuid_derive(const uint8_t seed[UUID_SEED_LEN], const char *label, uint8_t u[UUID_LEN])
{
    static const char domain[] = "diskimg uuid v1"; /* with its NUL: a separator */
    uint8_t md[SHA256_LEN];
    struct sha256_ctx c;
    int r = sha256_init(&c);

    if (r == 0 && (r = sha256_update(&c, domain, sizeof domain)) == 0 &&
        (r = sha256_update(&c, seed, UUID_SEED_LEN)) == 0 &&
        (r = sha256_update(&c, label, strlen(label))) == 0) {
        sha256_final(&c, md);
        memcpy(u, md, UUID_LEN);
        set_version(u, 8);
        return 0;
    }
    sha256_abort(&c);
    return r;
}

void uuid_to_guid(uint8_t u[UUID_LEN])
{
    uint8_t t;

    for (int i = 0; i < 2; i++) { /* Data1: 4 bytes reversed */
        t = u[i];
        u[i] = u[3 - i];
        u[3 - i] = t;
    }
    t = u[4]; /* Data2 */
    u[4] = u[5];
    u[5] = t;
    t = u[6]; /* Data3 */
    u[6] = u[7];
    u[7] = t;
}

void uuid_format(const uint8_t u[UUID_LEN], char out[37])
{
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}
