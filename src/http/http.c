/*
 * Header helpers over struct http.  Headers are few (tens), so linear
 * scans beat any index here.
 */
#include "config.h"

#include <arpa/inet.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/sb.h"

void
http_init(struct http *hp, struct http_hdr *hdrs, unsigned maxhdr)
{
    AN(hp);
    memset(hp, 0, sizeof *hp);
    hp->magic = HTTP_MAGIC;
    hp->hdr = hdrs;
    hp->maxhdr = maxhdr;
}

/* The name's length once, not once per field. */
static bool
name_is(const struct txt *name, const char *want, size_t wlen)
{
    return (name->len == wlen && strncasecmp(name->b, want, wlen) == 0);
}

const struct http_hdr *
http_find(const struct http *hp, const char *name)
{
    size_t l = strlen(name);

    OBJ_CHECK(hp, HTTP_MAGIC);
    for (unsigned i = 0; i < hp->nhdr; i++)
        if (name_is(&hp->hdr[i].name, name, l))
            return (&hp->hdr[i]);
    return (NULL);
}

const struct txt *
http_value(const struct http *hp, const char *name)
{
    const struct http_hdr *h = http_find(hp, name);

    return (h != NULL ? &h->val : NULL);
}

unsigned
http_count(const struct http *hp, const char *name)
{
    size_t l = strlen(name);
    unsigned n = 0;

    OBJ_CHECK(hp, HTTP_MAGIC);
    for (unsigned i = 0; i < hp->nhdr; i++)
        if (name_is(&hp->hdr[i].name, name, l))
            n++;
    return (n);
}

int
http_add(struct http *hp, struct txt name, struct txt val)
{
    OBJ_CHECK(hp, HTTP_MAGIC);
    if (hp->nhdr >= hp->maxhdr)
        return (-1);
    hp->hdr[hp->nhdr].name = name;
    hp->hdr[hp->nhdr].val = val;
    hp->nhdr++;
    return (0);
}

unsigned
http_unset(struct http *hp, const char *name)
{
    size_t l = strlen(name);
    unsigned i, j, n = 0;

    OBJ_CHECK(hp, HTTP_MAGIC);
    for (i = j = 0; i < hp->nhdr; i++) {
        if (name_is(&hp->hdr[i].name, name, l)) {
            n++;
            continue;
        }
        hp->hdr[j++] = hp->hdr[i];
    }
    hp->nhdr = j;
    return (n);
}

/* Whether `token` is an element of a comma-separated list (OWS trimmed, empty elements skipped). */
static bool
list_has(const struct txt *v, const char *token)
{
    const char *p = v->b, *e = v->b + v->len, *s, *t;
    size_t tl = strlen(token);

    while (p < e) {
        while (p < e && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        s = p;
        while (p < e && *p != ',')
            p++;
        t = p;
        while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - s) == tl && strncasecmp(s, token, tl) == 0)
            return (true);
    }
    return (false);
}

bool
http_has_token(const struct http *hp, const char *name, const char *token)
{
    size_t l = strlen(name);

    OBJ_CHECK(hp, HTTP_MAGIC);
    for (unsigned i = 0; i < hp->nhdr; i++)
        if (name_is(&hp->hdr[i].name, name, l) && list_has(&hp->hdr[i].val, token))
            return (true);
    return (false);
}

static const char *const hop_by_hop[] = {
    "Connection",        "Keep-Alive", "Proxy-Connection",   "TE",   "Trailer",
    "Transfer-Encoding", "Upgrade",    "Proxy-Authenticate", "Proxy-Authorization",
};

/*
 * Whether a header name appears as an element of any Connection header.
 * The fields that frame or route the message are never dropped this way:
 * "Connection: Content-Length" would otherwise strip the length from a
 * message whose body we still send, and smuggle the body as a request.
 */
static bool
named_by_connection(const struct http *hp, const struct txt *name)
{
    char tmp[128];

    if (http_name_eq(name, "Content-Length") || http_name_eq(name, "Host"))
        return (false);
    if (name->len >= sizeof tmp)
        return (false);
    memcpy(tmp, name->b, name->len);
    tmp[name->len] = '\0';
    return (http_has_token(hp, "Connection", tmp));
}

void
http_strip_hop_by_hop(struct http *hp)
{
    unsigned i, j;
    bool drop;

    OBJ_CHECK(hp, HTTP_MAGIC);
    if (http_find(hp, "Connection") != NULL) {
        /* Two passes: Connection itself must survive until every name it lists went. */
        for (i = j = 0; i < hp->nhdr; i++) {
            drop = !http_name_eq(&hp->hdr[i].name, "Connection") &&
                   named_by_connection(hp, &hp->hdr[i].name);
            if (!drop)
                hp->hdr[j++] = hp->hdr[i];
        }
        hp->nhdr = j;
    }
    for (i = j = 0; i < hp->nhdr; i++) {
        drop = false;
        for (size_t k = 0; k < ARRAY_LEN(hop_by_hop) && !drop; k++)
            drop = http_name_eq(&hp->hdr[i].name, hop_by_hop[k]);
        if (!drop)
            hp->hdr[j++] = hp->hdr[i];
    }
    hp->nhdr = j;
}

const char *
http_proto_name(unsigned proto)
{
    return (proto == 10 ? "HTTP/1.0" : proto == 20 ? "HTTP/2.0" : "HTTP/1.1");
}

bool
http_method_idempotent(const struct txt *m)
{
    static const char *const idem[] = { "GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE" };

    for (size_t i = 0; i < ARRAY_LEN(idem); i++)
        if (m->len == strlen(idem[i]) && memcmp(m->b, idem[i], m->len) == 0)
            return (true);
    return (false);
}

const char *
http_reason(unsigned status)
{
    static const struct {
        unsigned status;
        const char *reason;
    } reasons[] = {
        { 100, "Continue" },
        { 101, "Switching Protocols" },
        { 200, "OK" },
        { 201, "Created" },
        { 202, "Accepted" },
        { 203, "Non-Authoritative Information" },
        { 204, "No Content" },
        { 206, "Partial Content" },
        { 301, "Moved Permanently" },
        { 302, "Found" },
        { 303, "See Other" },
        { 304, "Not Modified" },
        { 307, "Temporary Redirect" },
        { 308, "Permanent Redirect" },
        { 400, "Bad Request" },
        { 401, "Unauthorized" },
        { 403, "Forbidden" },
        { 404, "Not Found" },
        { 405, "Method Not Allowed" },
        { 408, "Request Timeout" },
        { 411, "Length Required" },
        { 412, "Precondition Failed" },
        { 413, "Content Too Large" },
        { 414, "URI Too Long" },
        { 416, "Range Not Satisfiable" },
        { 417, "Expectation Failed" },
        { 429, "Too Many Requests" },
        { 431, "Request Header Fields Too Large" },
        { 500, "Internal Server Error" },
        { 501, "Not Implemented" },
        { 502, "Bad Gateway" },
        { 503, "Service Unavailable" },
        { 504, "Gateway Timeout" },
        { 505, "HTTP Version Not Supported" },
    };

    for (size_t i = 0; i < ARRAY_LEN(reasons); i++)
        if (reasons[i].status == status)
            return (reasons[i].reason);
    return ("Unknown");
}

/* RFC 3986 unreserved and sub-delims, the characters of a reg-name besides "%" escapes. */
static bool
reg_name_char(unsigned char c)
{
    return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-._~!$&'()*+,;=", c) != NULL);
}

static bool
hex_digit(unsigned char c)
{
    return ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'));
}

bool
http_host_valid(const struct txt *host)
{
    const char *p = host->b, *e = host->b + host->len, *colon = NULL;
    size_t label = 0;

    if (host->len == 0)
        return (false);
    if (*p == '[') {
        /* IP-literal: an IPv6 address; IPvFuture and zone ids name nothing we can reach. */
        char a6[INET6_ADDRSTRLEN];
        struct in6_addr in6;
        const char *end = memchr(p, ']', host->len);

        if (end == NULL || (size_t)(end - p - 1) >= sizeof a6 || end == p + 1)
            return (false);
        memcpy(a6, p + 1, (size_t)(end - p - 1));
        a6[end - p - 1] = '\0';
        if (inet_pton(AF_INET6, a6, &in6) != 1)
            return (false);
        p = end + 1;
        if (p < e && *p != ':')
            return (false);
        colon = p < e ? p : NULL;
    } else {
        /* reg-name (an IPv4 address is one too): labels between dots, none empty. */
        for (; p < e && *p != ':'; p++) {
            unsigned char c = (unsigned char)*p;
            if (c == '.') {
                if (label == 0)
                    return (false);
                label = 0;
                continue;
            }
            if (c == '%') {
                if (e - p < 3 || !hex_digit((unsigned char)p[1]) ||
                    !hex_digit((unsigned char)p[2]))
                    return (false);
                p += 2;
            } else if (!reg_name_char(c)) {
                return (false);
            }
            label++;
        }
        if (p == host->b)
            return (false); /* ":80": no host at all */
        colon = p < e ? p : NULL;
    }
    if (colon != NULL) {
        /* port = *DIGIT (RFC 3986 section 3.2.3): empty is allowed, above 65535 is not. */
        unsigned long port = 0;
        for (p = colon + 1; p < e; p++) {
            if (*p < '0' || *p > '9')
                return (false);
            port = port * 10 + (unsigned long)(*p - '0');
            if (port > 65535)
                return (false);
        }
    }
    return (true);
}

void
http_write_fields(struct sb *sb, const struct http *hp)
{
    static const char *const transport_owned[] = {
        "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
    };

    OBJ_CHECK(hp, HTTP_MAGIC);
    for (unsigned i = 0; i < hp->nhdr; i++) {
        const struct http_hdr *h = &hp->hdr[i];
        bool skip = false;
        for (size_t k = 0; k < ARRAY_LEN(transport_owned) && !skip; k++)
            skip = http_name_eq(&h->name, transport_owned[k]);
        if (skip)
            continue;
        sb_bcat(sb, h->name.b, h->name.len);
        sb_bcat(sb, ": ", 2);
        sb_bcat(sb, h->val.b, h->val.len);
        sb_bcat(sb, "\r\n", 2);
    }
}
