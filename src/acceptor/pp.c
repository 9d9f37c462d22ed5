/*
 * The PROXY protocol header: parser and writer, both pure.
 *
 * The grammar is HAProxy's proxy-protocol.txt.  The parser is strict
 * where the specification is (v1: one space between fields, no leading
 * zeros, a CRLF within 107 bytes; v2: the version nibble, the command,
 * the family and protocol bytes it lists, every length checked against
 * the header's), because a lenient reader of a header that names the
 * client is a way to forge the client.  It is lenient only where the
 * specification asks it to be: v1 UNKNOWN ignores the rest of its line,
 * v2 LOCAL ignores its address block, unknown TLVs are skipped.
 */
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/pp.h"

static const uint8_t v2_sig[12] = { 0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                    0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A };

const char *
pp_status_name(enum pp_status st)
{
    switch (st) {
    case PP_DONE:
        return ("done");
    case PP_MORE:
        return ("incomplete");
    case PP_E_NOT_PROXY:
        return ("not a PROXY header");
    case PP_E_SYNTAX:
        return ("malformed v1 line");
    case PP_E_TOO_LONG:
        return ("header too long");
    case PP_E_VERSION:
        return ("bad v2 version or command");
    case PP_E_FAMILY:
        return ("bad v2 family or protocol");
    case PP_E_LENGTH:
        return ("v2 length shorter than its address block");
    case PP_E_TLV:
        return ("malformed v2 TLV");
    case PP_E_CRC:
        return ("v2 CRC32C mismatch");
    }
    return ("?");
}

/*--------------------------------------------------------------------
 * CRC32C, bit by bit: a header is at most a few hundred bytes, once per
 * connection, so a table would buy nothing measurable.
 */

static uint32_t
crc32c_update(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len-- > 0) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return (crc);
}

uint32_t
pp_crc32c(const uint8_t *buf, size_t len)
{
    return (~crc32c_update(~0u, buf, len));
}

/*--------------------------------------------------------------------
 * Version 1: "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"
 */

/* A decimal port: 1 to 5 digits, no leading zero, at most 65535. */
static bool
v1_port(const char *s, size_t n, uint16_t *out)
{
    unsigned v = 0;

    if (n == 0 || n > 5 || (n > 1 && s[0] == '0'))
        return (false);
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return (false);
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > 65535)
        return (false);
    *out = (uint16_t)v;
    return (true);
}

/* An address of family af, in the canonical text the specification demands. */
static bool
v1_addr(int af, const char *s, size_t n, void *out)
{
    char tmp[INET6_ADDRSTRLEN];

    if (n == 0 || n >= sizeof tmp)
        return (false);
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    if (af == AF_INET) {
        /* "Heading zeroes are not permitted", whatever inet_pton() tolerates. */
        for (size_t i = 0; i < n; i++)
            if (tmp[i] == '0' && (i == 0 || tmp[i - 1] == '.') && i + 1 < n && tmp[i + 1] != '.')
                return (false);
    } else {
        /* Hexadecimal groups and colons only: no scope, no embedded dotted quad. */
        if (strspn(tmp, "0123456789abcdefABCDEF:") != n)
            return (false);
    }
    return (inet_pton(af, tmp, out) == 1);
}

/* The next field of a v1 line: up to the next space or the end; *p moves past a space. */
static bool
v1_field(const char **p, const char *end, const char **f, size_t *n, bool last)
{
    const char *s = *p, *sp = memchr(s, ' ', (size_t)(end - s));

    if (last) {
        if (sp != NULL)
            return (false);
        *f = s;
        *n = (size_t)(end - s);
        return (*n > 0);
    }
    if (sp == NULL || sp == s)
        return (false);
    *f = s;
    *n = (size_t)(sp - s);
    *p = sp + 1;
    return (true);
}

static enum pp_status
parse_v1(const uint8_t *buf, size_t len, struct pp_hdr *out, size_t *used)
{
    const char *line = (const char *)buf, *p, *end, *f;
    size_t lim = len < PP_V1_MAX ? len : PP_V1_MAX, eol, n;
    int af;

    for (eol = 0; eol < lim; eol++) {
        uint8_t c = buf[eol];
        if (c == '\r')
            break;
        /* Only printable US-ASCII before the CRLF: refuse garbage as soon as it shows. */
        if (c < 0x20 || c > 0x7e)
            return (PP_E_SYNTAX);
    }
    if (eol == lim)
        return (len >= PP_V1_MAX ? PP_E_TOO_LONG : PP_MORE);
    if (eol + 1 == len)
        return (eol + 1 < PP_V1_MAX ? PP_MORE : PP_E_TOO_LONG);
    if (buf[eol + 1] != '\n')
        return (PP_E_SYNTAX);
    if (eol + 2 > PP_V1_MAX)
        return (PP_E_TOO_LONG);
    *used = eol + 2;
    end = line + eol;
    if (eol < 6 || memcmp(line, "PROXY ", 6) != 0)
        return (PP_E_SYNTAX);
    p = line + 6;
    memset(out, 0, sizeof *out);
    out->version = 1;
    if ((size_t)(end - p) >= 7 && memcmp(p, "UNKNOWN", 7) == 0 && (end - p == 7 || p[7] == ' ')) {
        /* "the receiver must ignore anything presented before the CRLF" */
        out->local = true;
        out->family = AF_UNSPEC;
        return (PP_DONE);
    }
    if ((size_t)(end - p) < 5 || memcmp(p, "TCP", 3) != 0 || (p[3] != '4' && p[3] != '6') ||
        p[4] != ' ')
        return (PP_E_SYNTAX);
    af = p[3] == '4' ? AF_INET : AF_INET6;
    out->family = af;
    p += 5;
    if (!v1_field(&p, end, &f, &n, false) || !v1_addr(af, f, n, &out->src))
        return (PP_E_SYNTAX);
    if (!v1_field(&p, end, &f, &n, false) || !v1_addr(af, f, n, &out->dst))
        return (PP_E_SYNTAX);
    if (!v1_field(&p, end, &f, &n, false) || !v1_port(f, n, &out->src_port))
        return (PP_E_SYNTAX);
    if (!v1_field(&p, end, &f, &n, true) || !v1_port(f, n, &out->dst_port))
        return (PP_E_SYNTAX);
    return (PP_DONE);
}

/*--------------------------------------------------------------------
 * Version 2: 16 bytes, the address block, TLVs.
 */

static unsigned
be16(const uint8_t *p)
{
    return ((unsigned)p[0] << 8 | p[1]);
}

static uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

/* The sub-TLVs of PP2_TYPE_SSL, which must fill its value exactly. */
static enum pp_status
parse_ssl(const uint8_t *v, size_t len, struct pp_hdr *out)
{
    size_t off = 5;

    if (len < 5)
        return (PP_E_TLV);
    out->ssl_client = v[0];
    out->ssl_verify = be32(v + 1);
    out->ssl = (v[0] & PP2_CLIENT_SSL) != 0;
    while (off < len) {
        struct pp_bytes *dst = NULL;
        size_t n;
        if (len - off < 3)
            return (PP_E_TLV);
        n = be16(v + off + 1);
        if (n > len - off - 3)
            return (PP_E_TLV);
        switch (v[off]) {
        case PP2_SUBTYPE_SSL_VERSION:
            dst = &out->ssl_version;
            break;
        case PP2_SUBTYPE_SSL_CN:
            dst = &out->ssl_cn;
            break;
        case PP2_SUBTYPE_SSL_CIPHER:
            dst = &out->ssl_cipher;
            break;
        case PP2_SUBTYPE_SSL_SIG_ALG:
            dst = &out->ssl_sig_alg;
            break;
        case PP2_SUBTYPE_SSL_KEY_ALG:
            dst = &out->ssl_key_alg;
            break;
        default:
            break;
        }
        if (dst != NULL)
            *dst = (struct pp_bytes){ v + off + 3, n };
        off += 3 + n;
    }
    return (PP_DONE);
}

static enum pp_status
parse_tlvs(const uint8_t *buf, size_t off, size_t total, struct pp_hdr *out)
{
    size_t crc_off = 0;
    bool have_crc = false;
    enum pp_status st;

    while (off < total) {
        const uint8_t *v;
        size_t n;
        if (total - off < 3)
            return (PP_E_TLV);
        n = be16(buf + off + 1);
        if (n > total - off - 3)
            return (PP_E_TLV);
        v = buf + off + 3;
        switch (buf[off]) {
        case PP2_TYPE_ALPN:
            out->alpn = (struct pp_bytes){ v, n };
            break;
        case PP2_TYPE_AUTHORITY:
            out->authority = (struct pp_bytes){ v, n };
            break;
        case PP2_TYPE_CRC32C:
            if (n != 4 || have_crc)
                return (PP_E_TLV);
            have_crc = true;
            crc_off = off + 3;
            break;
        case PP2_TYPE_UNIQUE_ID:
            if (n > 128) /* "up to 128 bytes" */
                return (PP_E_TLV);
            out->unique_id = (struct pp_bytes){ v, n };
            break;
        case PP2_TYPE_SSL:
            st = parse_ssl(v, n, out);
            if (st != PP_DONE)
                return (st);
            break;
        default: /* NOOP, NETNS, and types registered later: skipped */
            break;
        }
        off += 3 + n;
    }
    if (have_crc) {
        static const uint8_t zero[4];
        uint32_t crc = crc32c_update(~0u, buf, crc_off);
        crc = crc32c_update(crc, zero, 4);
        crc = ~crc32c_update(crc, buf + crc_off + 4, total - crc_off - 4);
        if (crc != be32(buf + crc_off))
            return (PP_E_CRC);
        out->crc_checked = true;
    }
    return (PP_DONE);
}

static enum pp_status
parse_v2(const uint8_t *buf, size_t len, struct pp_hdr *out, size_t *used)
{
    size_t total, block;
    unsigned cmd;
    enum pp_status st;

    if (len < PP_V2_HEAD)
        return (PP_MORE);
    if ((buf[12] >> 4) != 2)
        return (PP_E_VERSION);
    cmd = buf[12] & 0x0f;
    if (cmd > 1)
        return (PP_E_VERSION);
    switch (buf[13]) {
    case 0x00:
        block = 0;
        break;
    case 0x11: /* TCP over IPv4 */
    case 0x12: /* UDP over IPv4 */
        block = 12;
        break;
    case 0x21:
    case 0x22:
        block = 36;
        break;
    case 0x31: /* AF_UNIX stream and datagram: 2 x 108 bytes */
    case 0x32:
        block = 216;
        break;
    default:
        return (PP_E_FAMILY);
    }
    total = PP_V2_HEAD + be16(buf + 14);
    if (total > PP_V2_MAX)
        return (PP_E_TOO_LONG);
    if (len < total)
        return (PP_MORE);
    memset(out, 0, sizeof *out);
    out->version = 2;
    out->family = AF_UNSPEC;
    if (total - PP_V2_HEAD < block) {
        /* LOCAL ignores its block whatever its family says; PROXY must carry it whole. */
        if (cmd == 1)
            return (PP_E_LENGTH);
        out->local = out->v2_local_cmd = true;
        *used = total;
        return (PP_DONE);
    }
    st = parse_tlvs(buf, PP_V2_HEAD + block, total, out);
    if (st != PP_DONE)
        return (st);
    *used = total;
    if (cmd == 0) {
        out->local = out->v2_local_cmd = true;
        return (PP_DONE);
    }
    if (buf[13] == 0x11) {
        out->family = AF_INET;
        memcpy(&out->src.in4, buf + 16, 4);
        memcpy(&out->dst.in4, buf + 20, 4);
        out->src_port = (uint16_t)be16(buf + 24);
        out->dst_port = (uint16_t)be16(buf + 26);
    } else if (buf[13] == 0x21) {
        out->family = AF_INET6;
        memcpy(&out->src.in6, buf + 16, 16);
        memcpy(&out->dst.in6, buf + 32, 16);
        out->src_port = (uint16_t)be16(buf + 48);
        out->dst_port = (uint16_t)be16(buf + 50);
    } else {
        /*
         * UNSPEC, UDP, or a Unix socket in front: nothing an HTTP client
         * address can be made of.  The specification lets the receiver
         * fall back to the connection's own addresses.
         */
        out->local = true;
        out->family = (buf[13] >> 4) == 3 ? AF_UNIX : AF_UNSPEC;
    }
    return (PP_DONE);
}

enum pp_status
pp_parse(const uint8_t *buf, size_t len, struct pp_hdr *out, size_t *used)
{
    size_t n;

    AN(out);
    AN(used);
    if (len == 0)
        return (PP_MORE);
    if (buf[0] == v2_sig[0]) {
        n = len < sizeof v2_sig ? len : sizeof v2_sig;
        if (memcmp(buf, v2_sig, n) != 0)
            return (PP_E_NOT_PROXY);
        return (n < sizeof v2_sig ? PP_MORE : parse_v2(buf, len, out, used));
    }
    n = len < 5 ? len : 5;
    if (memcmp(buf, "PROXY", n) != 0)
        return (PP_E_NOT_PROXY);
    return (n < 5 ? PP_MORE : parse_v1(buf, len, out, used));
}

/*--------------------------------------------------------------------
 * Writing a header, for backends.
 */

/*
 * An IPv6 address as eight hexadecimal groups: inet_ntop() writes
 * IPv4-mapped ones as "::ffff:192.0.2.1", which the v1 grammar does not
 * allow.  At most 39 characters.
 */
static void
v6_groups(const struct in6_addr *in, char out[INET6_ADDRSTRLEN])
{
    const uint8_t *b = in->s6_addr;

    snprintf(out, INET6_ADDRSTRLEN, "%x:%x:%x:%x:%x:%x:%x:%x", b[0] << 8 | b[1], b[2] << 8 | b[3],
             b[4] << 8 | b[5], b[6] << 8 | b[7], b[8] << 8 | b[9], b[10] << 8 | b[11],
             b[12] << 8 | b[13], b[14] << 8 | b[15]);
}

size_t
pp_build(unsigned version, const struct sockaddr *src, const struct sockaddr *dst,
         uint8_t buf[PP_BUILD_MAX])
{
    const struct sockaddr_in *s4 = (const void *)src, *d4 = (const void *)dst;
    const struct sockaddr_in6 *s6 = (const void *)src, *d6 = (const void *)dst;
    bool ok = src != NULL && dst != NULL && src->sa_family == dst->sa_family &&
              (src->sa_family == AF_INET || src->sa_family == AF_INET6);
    char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
    int n;

    SRG_ASSERT(version == 1 || version == 2);
    if (version == 1) {
        if (!ok) {
            memcpy(buf, "PROXY UNKNOWN\r\n", 15);
            return (15);
        }
        if (src->sa_family == AF_INET) {
            AN(inet_ntop(AF_INET, &s4->sin_addr, a, sizeof a));
            AN(inet_ntop(AF_INET, &d4->sin_addr, b, sizeof b));
            n = snprintf((char *)buf, PP_BUILD_MAX, "PROXY TCP4 %s %s %u %u\r\n", a, b,
                         ntohs(s4->sin_port), ntohs(d4->sin_port));
        } else {
            v6_groups(&s6->sin6_addr, a);
            v6_groups(&d6->sin6_addr, b);
            n = snprintf((char *)buf, PP_BUILD_MAX, "PROXY TCP6 %s %s %u %u\r\n", a, b,
                         ntohs(s6->sin6_port), ntohs(d6->sin6_port));
        }
        SRG_ASSERT(n > 0 && n <= PP_V1_MAX);
        return ((size_t)n);
    }
    memcpy(buf, v2_sig, sizeof v2_sig);
    if (!ok) {
        buf[12] = 0x20; /* LOCAL */
        buf[13] = 0x00;
        buf[14] = buf[15] = 0;
        return (PP_V2_HEAD);
    }
    buf[12] = 0x21; /* PROXY */
    if (src->sa_family == AF_INET) {
        buf[13] = 0x11;
        buf[14] = 0;
        buf[15] = 12;
        memcpy(buf + 16, &s4->sin_addr, 4);
        memcpy(buf + 20, &d4->sin_addr, 4);
        memcpy(buf + 24, &s4->sin_port, 2); /* already in network order */
        memcpy(buf + 26, &d4->sin_port, 2);
        return (PP_V2_HEAD + 12);
    }
    buf[13] = 0x21;
    buf[14] = 0;
    buf[15] = 36;
    memcpy(buf + 16, &s6->sin6_addr, 16);
    memcpy(buf + 32, &d6->sin6_addr, 16);
    memcpy(buf + 48, &s6->sin6_port, 2);
    memcpy(buf + 50, &d6->sin6_port, 2);
    return (PP_V2_HEAD + 36);
}
