/*
 * IP access control lists: a flat array of prefixes, scanned linearly.
 * Lists are short (a purge ACL names a few hosts and networks), so a scan
 * beats a trie on every count that matters here.  Every address is kept
 * as 16 bytes, IPv4 as the IPv4-mapped IPv6 address (::ffff:a.b.c.d), so
 * one comparison serves both families and a v4 client reaching a v6
 * socket matches its v4 entries.  No locks: a list never changes.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "surogat/acl.h"
#include "surogat/defs.h"
#include "surogat/sb.h"

struct acl_ent {
    uint8_t addr[16]; /* host bits past `bits` are zero */
    unsigned bits;    /* prefix length in the 128-bit space */
    bool negate;
};

struct acl {
    unsigned magic;
#define ACL_MAGIC 0x61c1a0e3
    unsigned n;
    struct acl_ent ent[]; /* n of them */
};

static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

/* Text to the 16-byte form; *v4 says whether it was IPv4 text.  -1: not an address. */
static int
parse_addr(const char *s, uint8_t out[16], bool *v4)
{
    struct in_addr a4;

    if (inet_pton(AF_INET, s, &a4) == 1) {
        memcpy(out, v4mapped, 12);
        memcpy(out + 12, &a4, 4);
        *v4 = true;
        return (0);
    }
    *v4 = false;
    return (inet_pton(AF_INET6, s, out) == 1 ? 0 : -1);
}

static void
mask(uint8_t a[16], unsigned bits)
{
    for (unsigned i = 0; i < 16; i++) {
        if (bits >= 8)
            bits -= 8;
        else {
            a[i] &= (uint8_t)(0xff00u >> bits);
            bits = 0;
        }
    }
}

/* One entry, `len` bytes at s, blanks trimmed already.  -1 with the reason in err. */
static int
parse_ent(const char *s, size_t len, struct acl_ent *e, struct sb *err)
{
    char buf[INET6_ADDRSTRLEN + 8], *slash, *end;
    unsigned long bits;
    bool v4;

    e->negate = len > 0 && *s == '!';
    if (e->negate) {
        s++;
        len--;
        while (len > 0 && (*s == ' ' || *s == '\t')) {
            s++;
            len--;
        }
    }
    if (len == 0 || len >= sizeof buf) {
        sb_printf(err, "acl: bad entry '%.*s'", (int)SRG_MIN(len, 64), s);
        return (-1);
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    slash = strchr(buf, '/');
    if (slash != NULL)
        *slash = '\0';
    if (parse_addr(buf, e->addr, &v4) != 0) {
        sb_printf(err, "acl: '%s' is not an IPv4 or IPv6 address", buf);
        return (-1);
    }
    e->bits = 128;
    if (slash != NULL) {
        if (slash[1] < '0' || slash[1] > '9') {
            sb_printf(err, "acl: bad prefix length in '%.*s'", (int)len, s);
            return (-1);
        }
        bits = strtoul(slash + 1, &end, 10);
        if (*end != '\0' || bits > (v4 ? 32u : 128u)) {
            sb_printf(err, "acl: bad prefix length in '%.*s' (at most %u)", (int)len, s,
                      v4 ? 32u : 128u);
            return (-1);
        }
        e->bits = (unsigned)bits + (v4 ? 96 : 0);
    }
    mask(e->addr, e->bits);
    return (0);
}

struct acl *
acl_parse(const char *spec, struct sb *err)
{
    struct acl *acl;
    const char *p, *s, *t;
    unsigned n = 1;

    AN(spec);
    for (p = spec; *p != '\0'; p++)
        n += *p == ',';
    acl = calloc(1, sizeof *acl + n * sizeof acl->ent[0]);
    AN(acl);
    acl->magic = ACL_MAGIC;
    for (p = spec; *p != '\0';) {
        while (*p == ' ' || *p == '\t')
            p++;
        for (s = p; *p != '\0' && *p != ','; p++)
            continue;
        for (t = p; t > s && (t[-1] == ' ' || t[-1] == '\t'); t--)
            continue;
        if (*p == ',')
            p++;
        if (t == s) {
            if (*p == '\0' && *s == '\0')
                break; /* trailing blanks */
            sb_cat(err, "acl: empty entry");
            acl_free(&acl);
            return (NULL);
        }
        if (parse_ent(s, (size_t)(t - s), &acl->ent[acl->n], err) != 0) {
            acl_free(&acl);
            return (NULL);
        }
        acl->n++;
    }
    return (acl);
}

void
acl_free(struct acl **aclp)
{
    struct acl *acl = *aclp;

    if (acl == NULL)
        return;
    *aclp = NULL;
    OBJ_CHECK(acl, ACL_MAGIC);
    acl->magic = 0;
    free(acl);
}

unsigned
acl_entries(const struct acl *acl)
{
    OBJ_CHECK(acl, ACL_MAGIC);
    return (acl->n);
}

static bool
in_prefix(const uint8_t a[16], const struct acl_ent *e)
{
    unsigned full = e->bits / 8, rest = e->bits % 8;

    if (memcmp(a, e->addr, full) != 0)
        return (false);
    return (rest == 0 || (a[full] & (uint8_t)(0xff00u >> rest)) == e->addr[full]);
}

static bool
match16(const struct acl *acl, const uint8_t a[16])
{
    const struct acl_ent *best = NULL;

    OBJ_CHECK(acl, ACL_MAGIC);
    for (unsigned i = 0; i < acl->n; i++) {
        const struct acl_ent *e = &acl->ent[i];
        if (!in_prefix(a, e))
            continue;
        if (best == NULL || e->bits > best->bits || (e->bits == best->bits && e->negate))
            best = e;
    }
    return (best != NULL && !best->negate);
}

bool
acl_match_str(const struct acl *acl, const char *ip)
{
    uint8_t a[16];
    bool v4;

    AN(ip);
    return (parse_addr(ip, a, &v4) == 0 && match16(acl, a));
}

bool
acl_match_sa(const struct acl *acl, const struct sockaddr *sa)
{
    uint8_t a[16];

    AN(sa);
    if (sa->sa_family == AF_INET) {
        memcpy(a, v4mapped, 12);
        memcpy(a + 12, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        memcpy(a, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    } else {
        return (false);
    }
    return (match16(acl, a));
}
