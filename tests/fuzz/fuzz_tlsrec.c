/*
 * Fuzz the TLS 1.3 record layer that carries HTTP/2 connections after
 * OpenSSL (src/tls/tls_rec.c): what arrives from a client is untrusted,
 * records and all.
 *
 * Two record layers over a socketpair, "peer" (the client) and "ours",
 * with matching secrets.  The input is a script, one operation per byte
 * (and the bytes it takes): the peer seals application data; the peer
 * seals a record of any content type around any bytes (alerts,
 * handshake messages, a forged KeyUpdate); raw bytes go on the wire; the
 * peer updates its keys (a KeyUpdate before its next record); ours
 * writes back.  After each, ours reads all it can.
 *
 * Invariants: what ours reads is a prefix of the application data the
 * peer sealed, in order; while nothing but well-formed operations came,
 * it is all of it; after EOF or a failure the read side stays so; what
 * ours writes back, the peer reads, whole, while ours has not failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "src/tls/tls_priv.h"
#include "surogat/stat.h"

#include "fuzz.h"

#define EXPECT_MAX (1 << 20)

static const unsigned char sec_c[48] = "client application traffic secret, 48 bytes...";
static const unsigned char sec_s[48] = "server application traffic secret, 48 bytes...";

struct side {
    struct tls_rec *r;
    int fd;
};

static char *expect, *got;
static size_t nexpect, ngot;

/* Everything ours can read now: -1 failed, 0 EOF, 1 would block. */
static int
drain(struct side *ours)
{
    char buf[4096];
    ssize_t n;

    for (;;) {
        n = tls__rec_read(ours->r, buf, sizeof buf);
        if (n > 0) {
            FUZZ_CHECK(ngot + (size_t)n <= nexpect);
            memcpy(got + ngot, buf, (size_t)n);
            ngot += (size_t)n;
            continue;
        }
        if (n == 0)
            return (0);
        return (errno == EAGAIN ? 1 : -1);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct side peer, ours;
    enum tls_aead a;
    int sv[2], st = 1, peer_st = 1;
    bool clean = true;
    size_t i = 0;

    if (size < 1)
        return (0);
    if (expect == NULL) {
        FUZZ_CHECK(stat_init() == 0); /* KeyUpdates are counted */
        expect = malloc(EXPECT_MAX);
        got = malloc(EXPECT_MAX);
    }
    nexpect = ngot = 0;
    a = (enum tls_aead)(data[i++] % 3);
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    FUZZ_CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0 && fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
    ours.fd = sv[0];
    peer.fd = sv[1];
    ours.r = tls__rec_new(sv[0], a);
    peer.r = tls__rec_new(sv[1], a);
    FUZZ_CHECK(tls__rec_key(ours.r, false, sec_c, 0) == 0 && tls__rec_key(ours.r, true, sec_s, 0) == 0);
    FUZZ_CHECK(tls__rec_key(peer.r, true, sec_c, 0) == 0 && tls__rec_key(peer.r, false, sec_s, 0) == 0);

    while (i < size && st == 1) {
        unsigned op = data[i++] % 5;
        size_t len = i < size ? data[i++] : 0;
        size_t ct;

        if (op == 0) {
            /* Application data, up to 255 bytes times 64 (several records). */
            size_t n = len * (i < size ? (size_t)(data[i++] % 64) + 1 : 1);
            char *p = malloc(n + 1);
            for (size_t k = 0; k < n; k++)
                p[k] = (char)(k * 31 + len);
            for (size_t off = 0; off < n && nexpect + n <= EXPECT_MAX;) {
                size_t k = n - off < 16384 ? n - off : 16384;
                if (tls__rec_put(peer.r, 23, p + off, k) < 0)
                    break;
                memcpy(expect + nexpect, p + off, k);
                nexpect += k;
                off += k;
            }
            free(p);
        } else if (op == 1 && i < size) {
            /* Any content type around any bytes. */
            size_t elen;
            unsigned eff;

            ct = data[i++];
            len = len < size - i ? len : size - i;
            /* Type 0 is padding: the record's type is then its last byte not 0. */
            eff = (unsigned)ct;
            elen = len;
            if (ct == 0) {
                while (elen > 0 && data[i + elen - 1] == 0)
                    elen--;
                eff = elen > 0 ? data[i + --elen] : 0;
            }
            if (eff == 23 && nexpect + elen > EXPECT_MAX)
                break; /* no room to expect it: the script ends */
            if (eff == 23) {
                memcpy(expect + nexpect, data + i, elen);
                nexpect += elen;
            } else {
                clean = false;
            }
            if (len > 0 || ct != 23)
                (void)tls__rec_put(peer.r, (unsigned)ct, data + i, len);
            i += len;
        } else if (op == 2) {
            /* Raw bytes on the wire. */
            len = len < size - i ? len : size - i;
            if (len > 0) {
                FUZZ_CHECK(write(peer.fd, data + i, len) == (ssize_t)len);
                clean = false;
            }
            i += len;
        } else if (op == 3) {
            /* The peer's KeyUpdate, asking for ours or not. */
            if (nexpect == EXPECT_MAX || peer_st != 1)
                break;
            tls__rec_update_keys(peer.r, (len & 1) != 0);
            FUZZ_CHECK(tls__rec_write(peer.r, "k", 1) == 1);
            expect[nexpect++] = 'k';
        } else {
            /* Ours writes; the peer reads it whole while ours stands. */
            char back[300], in[300];
            ssize_t w, n;
            size_t k = len % sizeof back + 1, have = 0;

            memset(back, 'b', k);
            w = tls__rec_write(ours.r, back, k);
            if (w > 0 && peer_st == 1) {
                FUZZ_CHECK((size_t)w == k);
                while (have < k) {
                    n = tls__rec_read(peer.r, in + have, sizeof in - have);
                    if (n <= 0) {
                        peer_st = n == 0 ? 0 : -1;
                        FUZZ_CHECK(n < 0 && errno != EAGAIN);
                        break;
                    }
                    have += (size_t)n;
                }
                if (peer_st == 1)
                    FUZZ_CHECK(have == k && memcmp(in, back, k) == 0);
            }
        }
        st = drain(&ours);
        FUZZ_CHECK(memcmp(got, expect, ngot) == 0);
    }
    if (st == 1)
        st = drain(&ours);
    FUZZ_CHECK(memcmp(got, expect, ngot) == 0);
    if (clean && st == 1)
        FUZZ_CHECK(ngot == nexpect);
    /* EOF and failures stay. */
    if (st <= 0) {
        char b;
        ssize_t n = tls__rec_read(ours.r, &b, 1);
        FUZZ_CHECK(st == 0 ? n == 0 : (n < 0 && errno != EAGAIN));
        FUZZ_CHECK(tls__rec_pending(ours.r));
    }
    tls__rec_release(ours.r, true);
    tls__rec_free(&ours.r);
    tls__rec_free(&peer.r);
    close(sv[0]);
    close(sv[1]);
    return (0);
}
