/*
 * The toolbox of the `surogat` table: digests and HMACs (OpenSSL), a
 * constant-time comparison, encodings (base64, base64url, hex, URL
 * percent-encoding, HTML escaping), a random generator and backend
 * health.  pol__tool_open() also adds the cookie helpers (pol_cookie.c)
 * and the shared dictionaries (pol_shared.c).
 *
 * Results are built in luaL_Buffers, in the state's own memory (counted
 * against policy_max_memory), so an error cannot leak one.  Every
 * function is linear in its input: none can run away with a worker.
 *
 * The generator is per thread, and a worker is a thread: no lock.  It is
 * xoshiro256** seeded from getrandom(2) at its first use on the thread,
 * good for sampling and jitter, not for secrets (it is predictable from
 * its output).
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include <lauxlib.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/sb.h"
#include "surogat/tim.h"

#include "pol_priv.h"

/* ---- digests ---- */

/* The digests a script may name, as it names them (any case). */
static const struct {
    const char *name;
    const EVP_MD *(*md)(void);
} digests[] = {
    { "md5", EVP_md5 },       { "sha1", EVP_sha1 },         { "sha224", EVP_sha224 },
    { "sha256", EVP_sha256 }, { "sha384", EVP_sha384 },     { "sha512", EVP_sha512 },
    { "sha3-256", EVP_sha3_256 }, { "sha3-512", EVP_sha3_512 },
};

/* How a digest is returned: the 3rd (hash) or 4th (hmac) argument. */
enum out_enc { ENC_HEX, ENC_BASE64, ENC_BASE64URL, ENC_RAW };

static const EVP_MD *
check_md(lua_State *L, int idx, const char *fn)
{
    const char *name = luaL_checkstring(L, idx);

    for (size_t i = 0; i < ARRAY_LEN(digests); i++)
        if (strcasecmp(name, digests[i].name) == 0)
            return (digests[i].md());
    (void)luaL_error(L, "%s: unknown digest \"%s\" (md5, sha1, sha224, sha256, sha384, sha512, "
                        "sha3-256, sha3-512)", fn, name);
    return (NULL);
}

static enum out_enc
check_enc(lua_State *L, int idx)
{
    static const char *const names[] = { "hex", "base64", "base64url", "raw", NULL };

    return ((enum out_enc)luaL_checkoption(L, idx, "hex", names));
}

static const char b64_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64_url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Push p[0 .. n) in base64 with alphabet `alpha`, '='-padded or not. */
static void
push_base64(lua_State *L, const unsigned char *p, size_t n, const char *alpha, bool pad)
{
    luaL_Buffer b;
    char *o;
    size_t i, k = 0;

    if (n > (SIZE_MAX / 4) * 3 - 3)
        (void)luaL_error(L, "base64: input too large");
    o = luaL_buffinitsize(L, &b, (n + 2) / 3 * 4);
    for (i = 0; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        o[k++] = alpha[v >> 18];
        o[k++] = alpha[(v >> 12) & 63];
        o[k++] = alpha[(v >> 6) & 63];
        o[k++] = alpha[v & 63];
    }
    if (n - i > 0) {
        uint32_t v = (uint32_t)p[i] << 16 | (n - i > 1 ? (uint32_t)p[i + 1] << 8 : 0);
        o[k++] = alpha[v >> 18];
        o[k++] = alpha[(v >> 12) & 63];
        if (n - i > 1)
            o[k++] = alpha[(v >> 6) & 63];
        else if (pad)
            o[k++] = '=';
        if (pad)
            o[k++] = '=';
    }
    luaL_pushresultsize(&b, k);
}

static void
push_hex(lua_State *L, const unsigned char *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    luaL_Buffer b;
    char *o;

    if (n > SIZE_MAX / 2)
        (void)luaL_error(L, "hex: input too large");
    o = luaL_buffinitsize(L, &b, 2 * n);
    for (size_t i = 0; i < n; i++) {
        o[2 * i] = digits[p[i] >> 4];
        o[2 * i + 1] = digits[p[i] & 15];
    }
    luaL_pushresultsize(&b, 2 * n);
}

static void
push_enc(lua_State *L, const unsigned char *p, size_t n, enum out_enc enc)
{
    switch (enc) {
    case ENC_HEX:
        push_hex(L, p, n);
        break;
    case ENC_BASE64:
        push_base64(L, p, n, b64_std, true);
        break;
    case ENC_BASE64URL:
        push_base64(L, p, n, b64_url, false);
        break;
    case ENC_RAW:
        lua_pushlstring(L, (const char *)p, n);
        break;
    }
}

/* surogat.hash(alg, data [, enc]): the digest, lower-case hex unless enc says otherwise. */
static int
l_hash(lua_State *L)
{
    const EVP_MD *md = check_md(L, 1, "surogat.hash");
    size_t len;
    const char *data = luaL_checklstring(L, 2, &len);
    enum out_enc enc = check_enc(L, 3);
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned olen = 0;

    if (md == NULL || EVP_Digest(data, len, out, &olen, md, NULL) != 1)
        return (luaL_error(L, "surogat.hash: %s is not available", lua_tostring(L, 1)));
    push_enc(L, out, olen, enc);
    return (1);
}

/* surogat.hmac(alg, key, data [, enc]): RFC 2104's HMAC, encoded as surogat.hash's. */
static int
l_hmac(lua_State *L)
{
    const EVP_MD *md = check_md(L, 1, "surogat.hmac");
    size_t klen, len;
    const char *key = luaL_checklstring(L, 2, &klen);
    const char *data = luaL_checklstring(L, 3, &len);
    enum out_enc enc = check_enc(L, 4);
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned olen = 0;

    if (klen > INT32_MAX)
        return (luaL_error(L, "surogat.hmac: key too long"));
    if (md == NULL || HMAC(md, key, (int)klen, (const unsigned char *)data, len, out, &olen) == NULL)
        return (luaL_error(L, "surogat.hmac: %s is not available", lua_tostring(L, 1)));
    push_enc(L, out, olen, enc);
    return (1);
}

/*
 * surogat.equal(a, b): whether two strings are equal, in a time that
 * depends on their length only, not on where they differ: for comparing
 * a signature a client sent with the one computed.
 */
static int
l_equal(lua_State *L)
{
    size_t la, lb;
    const char *a = luaL_checklstring(L, 1, &la);
    const char *b = luaL_checklstring(L, 2, &lb);

    lua_pushboolean(L, la == lb && CRYPTO_memcmp(a, b, la) == 0);
    return (1);
}

/* ---- encodings ---- */

static int
l_base64_encode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);

    push_base64(L, (const unsigned char *)s, n, b64_std, true);
    return (1);
}

static int
l_base64url_encode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);

    push_base64(L, (const unsigned char *)s, n, b64_url, false);
    return (1);
}

/* nil and a message, the failure of a decoder. */
static int
bad_input(lua_State *L, const char *fn, const char *why, size_t at)
{
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s at byte %d", fn, why, (int)at + 1);
    return (2);
}

static int
b64_value(unsigned char c, const char *alpha)
{
    const char *p;

    if (c == '\0' || (p = strchr(alpha, c)) == NULL)
        return (-1);
    return ((int)(p - alpha));
}

/*
 * Decode base64 in alphabet `alpha`.  Padding is optional, but when
 * present it must be right; bits left over past the last byte must be
 * 0, so each string has one encoding only (RFC 4648 section 3.5).  No
 * blanks or line breaks.
 */
static int
decode_base64(lua_State *L, const char *alpha, const char *fn)
{
    size_t n, npad = 0, k = 0;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    uint32_t acc = 0;
    unsigned bits = 0;
    char *o;

    while (npad < 2 && npad < n && s[n - 1 - npad] == '=')
        npad++;
    if (npad > 0 && n % 4 != 0)
        return (bad_input(L, fn, "padding on a length not a multiple of 4", n - npad));
    n -= npad;
    if (n % 4 == 1)
        return (bad_input(L, fn, "truncated input", n - 1));
    if (npad > 0 && npad != (4 - n % 4) % 4)
        return (bad_input(L, fn, "wrong padding", n));
    o = luaL_buffinitsize(L, &b, n / 4 * 3 + 2);
    for (size_t i = 0; i < n; i++) {
        int v = b64_value(s[i], alpha);
        if (v < 0)
            return (bad_input(L, fn, "not a base64 character", i));
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0)
        return (bad_input(L, fn, "bits set past the end", n - 1));
    luaL_pushresultsize(&b, k);
    return (1);
}

static int
l_base64_decode(lua_State *L)
{
    return (decode_base64(L, b64_std, "surogat.base64_decode"));
}

static int
l_base64url_decode(lua_State *L)
{
    return (decode_base64(L, b64_url, "surogat.base64url_decode"));
}

static int
l_hex_encode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);

    push_hex(L, (const unsigned char *)s, n);
    return (1);
}

static int
hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return (c - '0');
    if (c >= 'a' && c <= 'f')
        return (c - 'a' + 10);
    if (c >= 'A' && c <= 'F')
        return (c - 'A' + 10);
    return (-1);
}

/* surogat.hex_decode(s): either case; nil and a message for an odd length or a non-digit. */
static int
l_hex_decode(lua_State *L)
{
    size_t n;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    char *o;

    if (n % 2 != 0)
        return (bad_input(L, "surogat.hex_decode", "odd length", n - 1));
    o = luaL_buffinitsize(L, &b, n / 2);
    for (size_t i = 0; i < n; i += 2) {
        int hi = hex_value(s[i]), lo = hex_value(s[i + 1]);
        if (hi < 0 || lo < 0)
            return (bad_input(L, "surogat.hex_decode", "not a hex digit", hi < 0 ? i : i + 1));
        o[i / 2] = (char)(hi << 4 | lo);
    }
    luaL_pushresultsize(&b, n / 2);
    return (1);
}

/* RFC 3986 section 2.3's unreserved characters: never percent-encoded. */
static bool
unreserved(unsigned char c)
{
    return ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~');
}

/* surogat.url_encode(s): every byte but the unreserved ones as %XX (upper case). */
static int
l_url_encode(lua_State *L)
{
    static const char digits[] = "0123456789ABCDEF";
    size_t n, k = 0;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    char *o;

    if (n > SIZE_MAX / 3)
        return (luaL_error(L, "surogat.url_encode: input too large"));
    o = luaL_buffinitsize(L, &b, 3 * n);
    for (size_t i = 0; i < n; i++) {
        if (unreserved(s[i])) {
            o[k++] = (char)s[i];
            continue;
        }
        o[k++] = '%';
        o[k++] = digits[s[i] >> 4];
        o[k++] = digits[s[i] & 15];
    }
    luaL_pushresultsize(&b, k);
    return (1);
}

/*
 * surogat.url_decode(s [, plus]): %XX (either case) decoded, every other
 * byte as it is; with plus true, '+' is a space as in a form's query.
 * nil and a message for a '%' not followed by two hex digits.
 */
static int
l_url_decode(lua_State *L)
{
    size_t n, k = 0;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
    bool plus = lua_toboolean(L, 2);
    luaL_Buffer b;
    char *o = luaL_buffinitsize(L, &b, n);

    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            int hi = -1, lo = -1;
            if (n - i >= 3) {
                hi = hex_value(s[i + 1]);
                lo = hex_value(s[i + 2]);
            }
            if (hi < 0 || lo < 0)
                return (bad_input(L, "surogat.url_decode", "bad percent-encoding", i));
            o[k++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            o[k++] = plus && s[i] == '+' ? ' ' : (char)s[i];
        }
    }
    luaL_pushresultsize(&b, k);
    return (1);
}

/* surogat.html_escape(s): & < > " ' as entities, for text and attribute values alike. */
static int
l_html_escape(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;

    luaL_buffinit(L, &b);
    for (size_t i = 0; i < n; i++) {
        const char *e = sb_html_entity(s[i]);

        if (e != NULL)
            luaL_addstring(&b, e);
        else
            luaL_addchar(&b, s[i]);
    }
    luaL_pushresult(&b);
    return (1);
}

/* ---- random ---- */

static _Thread_local uint64_t rng[4];

static uint64_t
rotl(uint64_t x, int k)
{
    return ((x << k) | (x >> (64 - k)));
}

/* xoshiro256** (Blackman and Vigna): the next 64 bits. */
static uint64_t
rng_next(void)
{
    uint64_t r, t;

    if ((rng[0] | rng[1] | rng[2] | rng[3]) == 0) {
        /* First use on this thread; the state must not be all zero. */
        if (getrandom(rng, sizeof rng, 0) != (ssize_t)sizeof rng)
            rng[0] = (uint64_t)(tim_mono() * 1e9) ^ (uint64_t)(uintptr_t)rng;
        rng[3] |= 1;
    }
    r = rotl(rng[1] * 5, 7) * 9;
    t = rng[1] << 17;
    rng[2] ^= rng[0];
    rng[3] ^= rng[1];
    rng[1] ^= rng[2];
    rng[0] ^= rng[3];
    rng[2] ^= t;
    rng[3] = rotl(rng[3], 45);
    return (r);
}

/*
 * surogat.random(): a number in [0, 1); surogat.random(lo, hi): in
 * [lo, hi), as VCL's std.random.  Not for secrets.
 */
static int
l_random(lua_State *L)
{
    double u = (double)(rng_next() >> 11) * 0x1.0p-53, lo, hi;

    if (lua_isnoneornil(L, 1)) {
        lua_pushnumber(L, u);
        return (1);
    }
    lo = luaL_checknumber(L, 1);
    hi = luaL_checknumber(L, 2);
    if (!(lo <= hi))
        return (luaL_error(L, "surogat.random: lo (%f) above hi (%f)", lo, hi));
    lua_pushnumber(L, lo + u * (hi - lo));
    return (1);
}

/* ---- backends ---- */

/*
 * surogat.healthy(name): whether the backend, or some backend under the
 * director, of that name is healthy (VCL's std.healthy).  In hooks: the
 * program's declarations are built only once its top level ran.
 */
static int
l_healthy(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    struct pol_wrk *pw = pol__wrk(L);
    struct dir *d;

    if (!pol__in_hook(pw))
        return (luaL_error(L, "surogat.healthy: in hooks only"));
    d = pol__decl_find(pol__prog_cfg(pw->prog), name);
    if (d == NULL)
        return (luaL_error(L, "surogat.healthy: no backend or director \"%s\" is declared",
                           name));
    lua_pushboolean(L, dir_healthy(d));
    return (1);
}

void
pol__tool_open(lua_State *L)
{
    static const luaL_Reg lib[] = {
        { "hash", l_hash },
        { "hmac", l_hmac },
        { "equal", l_equal },
        { "base64_encode", l_base64_encode },
        { "base64_decode", l_base64_decode },
        { "base64url_encode", l_base64url_encode },
        { "base64url_decode", l_base64url_decode },
        { "hex_encode", l_hex_encode },
        { "hex_decode", l_hex_decode },
        { "url_encode", l_url_encode },
        { "url_decode", l_url_decode },
        { "html_escape", l_html_escape },
        { "random", l_random },
        { "healthy", l_healthy },
        { NULL, NULL },
    };

    luaL_checktype(L, -1, LUA_TTABLE);
    luaL_setfuncs(L, lib, 0);
    pol__cookie_open(L);
    pol__shared_open(L);
    pol__cluster_open(L);
}
