/*
 * Authentication of admin connections, Varnish's scheme so that
 * varnishadm can talk to us: the server sends a random 32-letter challenge
 * C, and the client proves it can read the secret file S by answering
 *
 *     auth hex(SHA-256(C "\n" S C "\n"))
 *
 * The secret is read once by cli_init() (cli__secret_read), lives only in
 * `secret` and is never logged; it is wiped when forgotten.  Set and
 * cleared only while the CLI thread is not running, read by it alone.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "surogat/defs.h"
#include "surogat/sb.h"

#include "cli_priv.h"

#define CLI_SECRET_MAX 65536 /* Varnish's are 37 bytes; anything this big is a mistake */

static char *secret; /* the secret file's bytes, or NULL: no authentication */
static size_t secret_len;

int
cli__secret_read(const char *path, struct sb *err)
{
    char *buf;
    ssize_t n;
    size_t len = 0;
    int fd;

    SRG_ASSERT(secret == NULL);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sb_printf(err, "secret file '%s': %s", path, strerror(errno));
        return (-1);
    }
    buf = malloc(CLI_SECRET_MAX + 1);
    AN(buf);
    /* Read to EOF rather than trust st_size: the file may be a pipe or /proc. */
    while (len <= CLI_SECRET_MAX) {
        n = read(fd, buf + len, CLI_SECRET_MAX + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            sb_printf(err, "secret file '%s': %s", path, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    (void)close(fd);
    if (sb_ok(err) && err->len == 0 && len > CLI_SECRET_MAX)
        sb_printf(err, "secret file '%s': larger than %d bytes", path, CLI_SECRET_MAX);
    else if (sb_ok(err) && err->len == 0 && len == 0)
        sb_printf(err, "secret file '%s' is empty", path);
    if (err->len != 0 || !sb_ok(err)) {
        OPENSSL_cleanse(buf, CLI_SECRET_MAX + 1);
        free(buf);
        return (-1);
    }
    secret = buf;
    secret_len = len;
    return (0);
}

void
cli__secret_forget(void)
{
    if (secret == NULL)
        return;
    OPENSSL_cleanse(secret, secret_len);
    free(secret);
    secret = NULL;
    secret_len = 0;
}

bool
cli__secret_set(void)
{
    return (secret != NULL);
}

int
cli__challenge_new(char *challenge)
{
    unsigned char rnd[CLI_CHALLENGE];

    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return (-1);
    /* The modulo bias (256 % 26) does not matter: the challenge needs only uniqueness. */
    for (size_t i = 0; i < CLI_CHALLENGE; i++)
        challenge[i] = (char)('a' + rnd[i] % 26);
    challenge[CLI_CHALLENGE] = '\0';
    OPENSSL_cleanse(rnd, sizeof rnd);
    return (0);
}

bool
cli__auth_ok(const char *challenge, const char *answer)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    char want[2 * 32 + 1], got[2 * 32];
    unsigned mdlen = 0;
    EVP_MD_CTX *ctx;
    bool ok;

    AN(secret);
    if (strlen(answer) != sizeof got)
        return (false);
    ctx = EVP_MD_CTX_new();
    AN(ctx);
    AN(EVP_DigestInit_ex(ctx, EVP_sha256(), NULL));
    AN(EVP_DigestUpdate(ctx, challenge, CLI_CHALLENGE));
    AN(EVP_DigestUpdate(ctx, "\n", 1));
    AN(EVP_DigestUpdate(ctx, secret, secret_len));
    AN(EVP_DigestUpdate(ctx, challenge, CLI_CHALLENGE));
    AN(EVP_DigestUpdate(ctx, "\n", 1));
    AN(EVP_DigestFinal_ex(ctx, md, &mdlen));
    EVP_MD_CTX_free(ctx);
    SRG_ASSERT(mdlen == 32);
    for (unsigned i = 0; i < mdlen; i++)
        snprintf(want + 2 * i, 3, "%02x", md[i]);
    /* varnishadm sends lowercase; take uppercase hex too. */
    for (size_t i = 0; i < sizeof got; i++)
        got[i] = (answer[i] >= 'A' && answer[i] <= 'F') ? (char)(answer[i] - 'A' + 'a') : answer[i];
    ok = CRYPTO_memcmp(want, got, sizeof got) == 0;
    OPENSSL_cleanse(md, sizeof md);
    OPENSSL_cleanse(want, sizeof want);
    return (ok);
}
