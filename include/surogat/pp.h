/*
 * pp -- the PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and
 * 2): a load balancer or TLS terminator in front says, in a header sent
 * before anything else on the connection, which client it relays.
 *
 * pp_parse() is pure: bytes in, a verdict and the parsed header out, no
 * I/O, no allocation, so that it can be fuzzed and tested byte by byte.
 * pp_build() writes the header surogat sends to a backend itself.
 *
 * pp_sess_task() is the session step that reads the header on a PROXY
 * listen socket (see sess.h); pp_backend_header() builds the header a
 * backend with proxy_protocol gets for a client session.
 */
#ifndef SUROGAT_PP_H
#define SUROGAT_PP_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct sess;
struct wrk;

#define PP_V1_MAX  107 /* "PROXY UNKNOWN <v6> <v6> 65535 65535\r\n", the spec's worst case */
#define PP_V2_HEAD 16  /* signature, version/command, family, length */
/*
 * The longest v2 header taken: the 216 address bytes of AF_UNIX plus
 * room for TLVs far beyond what HAProxy, hitch or an AWS NLB send (a few
 * hundred bytes).  A longer one is refused rather than buffered.
 */
#define PP_V2_MAX (PP_V2_HEAD + 4096)

enum pp_status {
    PP_DONE,        /* a whole, valid header of *used bytes; out is filled */
    PP_MORE,        /* a valid prefix: call again with more bytes */
    PP_E_NOT_PROXY, /* neither signature: not the PROXY protocol */
    PP_E_SYNTAX,    /* v1: the line does not follow the grammar (an address, a port ...) */
    PP_E_TOO_LONG,  /* v1: no CRLF in PP_V1_MAX bytes; v2: longer than PP_V2_MAX */
    PP_E_VERSION,   /* v2: version other than 2, or a command other than LOCAL and PROXY */
    PP_E_FAMILY,    /* v2: unknown address family or transport protocol */
    PP_E_LENGTH,    /* v2: length shorter than the family's address block */
    PP_E_TLV,       /* v2: a TLV runs past the header, or a malformed PP2_TYPE_SSL */
    PP_E_CRC,       /* v2: PP2_TYPE_CRC32C present and wrong */
};

/* PP2_TYPE_* and PP2_SUBTYPE_SSL_* (section 2.2 of the spec) */
#define PP2_TYPE_ALPN           0x01
#define PP2_TYPE_AUTHORITY      0x02
#define PP2_TYPE_CRC32C         0x03
#define PP2_TYPE_NOOP           0x04
#define PP2_TYPE_UNIQUE_ID      0x05
#define PP2_TYPE_SSL            0x20
#define PP2_SUBTYPE_SSL_VERSION 0x21
#define PP2_SUBTYPE_SSL_CN      0x22
#define PP2_SUBTYPE_SSL_CIPHER  0x23
#define PP2_SUBTYPE_SSL_SIG_ALG 0x24
#define PP2_SUBTYPE_SSL_KEY_ALG 0x25
#define PP2_TYPE_NETNS          0x30
#define PP2_CLIENT_SSL          0x01
#define PP2_CLIENT_CERT_CONN    0x02
#define PP2_CLIENT_CERT_SESS    0x04

/* Bytes of a TLV value, pointing into the parsed buffer; len 0 when absent. */
struct pp_bytes {
    const uint8_t *b;
    size_t len;
};

struct pp_hdr {
    unsigned version; /* 1 or 2 */
    /*
     * No client address to take: v2 LOCAL (a balancer's health check),
     * v1 UNKNOWN, or a v2 family or protocol surogat does not use
     * (UNSPEC, UDP, AF_UNIX).  The connection's own addresses stand.
     */
    bool local;
    bool v2_local_cmd; /* the v2 command was LOCAL (not only an unusable family) */
    int family;        /* AF_INET or AF_INET6 when !local, else AF_UNSPEC or AF_UNIX */
    union {
        struct in_addr in4;
        struct in6_addr in6;
    } src, dst;
    uint16_t src_port, dst_port; /* host order */
    /* v2 TLVs */
    bool ssl;            /* PP2_TYPE_SSL with PP2_CLIENT_SSL: the client spoke TLS */
    uint8_t ssl_client;  /* its PP2_CLIENT_* bits */
    uint32_t ssl_verify; /* 0: a client certificate was presented and verified */
    struct pp_bytes ssl_version, ssl_cipher, ssl_cn, ssl_sig_alg, ssl_key_alg;
    struct pp_bytes authority; /* the SNI the client sent */
    struct pp_bytes alpn, unique_id;
    bool crc_checked; /* PP2_TYPE_CRC32C was present and matched */
};

/*
 * Parse a PROXY header at the start of buf[0..len).  PP_DONE with *used
 * the header's length (the bytes after it belong to the protocol it
 * carries) and *out filled; its pp_bytes point into buf.  PP_MORE when
 * buf is a valid beginning; errors as the enum says.  Never reads past
 * len, never allocates.
 */
enum pp_status pp_parse(const uint8_t *buf, size_t len, struct pp_hdr *out, size_t *used);
const char *pp_status_name(enum pp_status st);

/*
 * CRC32C (Castagnoli, RFC 4960 appendix B) of buf, as PP2_TYPE_CRC32C
 * carries it.
 */
uint32_t pp_crc32c(const uint8_t *buf, size_t len);

/*
 * Write a version (1 or 2) header for a connection from src to dst (both
 * AF_INET, or both AF_INET6) into buf; src NULL or another family: v2
 * LOCAL, v1 "PROXY UNKNOWN".  The length written, at most PP_BUILD_MAX.
 */
#define PP_BUILD_MAX 108
size_t pp_build(unsigned version, const struct sockaddr *src, const struct sockaddr *dst,
                uint8_t buf[PP_BUILD_MAX]);

/*
 * What a session's PROXY header said beyond the client address, which
 * goes to sess.client_ip/client_port: kept for the policy (client.*,
 * server.*) and the backend's own PROXY header.  Allocated once per
 * connection, freed with the session.
 */
struct pp_sess {
    unsigned magic;
#define PP_SESS_MAGIC 0x2f6b91d4
    unsigned version;
    bool local;                       /* LOCAL/UNKNOWN: the socket's own addresses stand */
    char server_ip[INET6_ADDRSTRLEN]; /* the destination the client reached; "" when local */
    char server_port[8];
    bool tls;          /* PP2_CLIENT_SSL */
    bool tls_cert;     /* the client presented a certificate (CERT_CONN or CERT_SESS) */
    bool tls_verified; /* ... and it verified (verify == 0) */
    char tls_version[16];
    char tls_cipher[64];
    char tls_cn[128];
    char authority[256]; /* SNI, or "" */
};

/*
 * The session step on a PROXY listen socket, a pool task: read the
 * header within proxy_header_timeout, take the addresses it carries,
 * then go on with the next step (sess_after_proxy()).  A connection
 * without a valid header is closed and counted, never read as HTTP.
 * The header is consumed exactly (peeked, then read to its last byte):
 * whatever follows stays in the socket for TLS or HTTP.
 */
void pp_sess_task(struct wrk *wrk, void *priv);

/*
 * The PROXY header (version 1 or 2) a backend connection opened for the
 * session sp carries: the client address as surogat knows it and the
 * address it reached.  sp NULL (a background refresh) or a client
 * without an IP address: v2 LOCAL / v1 UNKNOWN.  The length.
 */
size_t pp_backend_header(unsigned version, const struct sess *sp, uint8_t buf[PP_BUILD_MAX]);

#endif
