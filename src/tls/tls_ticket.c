/*
 * Session ticket keys.
 *
 * OpenSSL's built-in ticket key is made once per SSL_CTX and never
 * changes, and a reload (new SSL_CTXs) would end every ticket at once.
 * Ours is one key set for the whole daemon: a current key that seals new
 * tickets and the previous one that still opens older tickets (which are
 * then replaced).  Rotation is lazy: the first handshake after
 * tls_ticket_rotate has passed makes the new key, so an idle daemon does
 * no work.  The keys sit under one mutex, held only to copy a key out;
 * the cryptography runs outside it.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/tim.h"
#include "tls_priv.h"

struct tkey {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
};

static pthread_mutex_t tk_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct tkey tk_cur, tk_prev; /* under tk_mtx */
static bool tk_have_prev;           /* under tk_mtx */
static double tk_made;              /* under tk_mtx: tim_mono() when tk_cur was made */
/*
 * Fetched once: EVP_aes_256_cbc() is a legacy handle that OpenSSL 3
 * looks up in its provider store (a property query under a lock) on
 * every EVP_EncryptInit_ex(), two tickets a handshake.
 */
static EVP_CIPHER *tk_aes;

static void
tkey_make(struct tkey *k)
{
    AN(RAND_bytes(k->name, sizeof k->name) == 1);
    AN(RAND_bytes(k->aes, sizeof k->aes) == 1);
    AN(RAND_bytes(k->hmac, sizeof k->hmac) == 1);
}

void
tls__ticket_init(void)
{
    if (tk_aes == NULL) {
        tk_aes = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL);
        AN(tk_aes);
    }
    AZ(pthread_mutex_lock(&tk_mtx));
    tkey_make(&tk_cur);
    tk_have_prev = false;
    tk_made = tim_mono();
    AZ(pthread_mutex_unlock(&tk_mtx));
}

static void
rotate_locked(double now)
{
    double age = now - tk_made;

    if (age < par.tls_ticket_rotate)
        return;
    if (age < 2 * par.tls_ticket_rotate) {
        tk_prev = tk_cur;
        tk_have_prev = true;
    } else {
        tk_have_prev = false; /* idle for two periods: the old key is as dead as its tickets */
    }
    tkey_make(&tk_cur);
    tk_made = now;
}

/* The key for a ticket: 1 current, 2 previous (renew the ticket), 0 unknown. */
static int
tkey_find(const unsigned char name[16], struct tkey *out, bool enc)
{
    int rv = 0;

    AZ(pthread_mutex_lock(&tk_mtx));
    rotate_locked(tim_mono());
    if (enc || memcmp(name, tk_cur.name, sizeof tk_cur.name) == 0) {
        *out = tk_cur;
        rv = 1;
    } else if (tk_have_prev && memcmp(name, tk_prev.name, sizeof tk_prev.name) == 0) {
        *out = tk_prev;
        rv = 2;
    }
    AZ(pthread_mutex_unlock(&tk_mtx));
    return (rv);
}

int
tls__ticket_cb(SSL *ssl, unsigned char key_name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
               EVP_MAC_CTX *hctx, int enc)
{
    static char sha256[] = "SHA256";
    OSSL_PARAM params[2];
    struct tkey k;
    int rv;

    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, sha256, 0);
    params[1] = OSSL_PARAM_construct_end();
    rv = tkey_find(key_name, &k, enc != 0);
    if (enc) {
        memcpy(key_name, k.name, sizeof k.name);
        if (RAND_bytes(iv, 16) != 1 ||
            EVP_EncryptInit_ex(cctx, tk_aes, NULL, k.aes, iv) != 1 ||
            EVP_MAC_init(hctx, k.hmac, sizeof k.hmac, params) != 1)
            rv = -1;
    } else if (rv != 0) {
        if (EVP_MAC_init(hctx, k.hmac, sizeof k.hmac, params) != 1 ||
            EVP_DecryptInit_ex(cctx, tk_aes, NULL, k.aes, iv) != 1)
            rv = -1;
        /*
         * A TLS 1.3 ticket is used once (RFC 8446, C.4: clients do not
         * offer it twice, and OpenSSL's keeps only the session a
         * handshake leaves it): without a new one from this resumption
         * the client's next connection would be a full handshake, so
         * every other one.  1 would send none; 2 sends one.  A TLS 1.2
         * ticket may be offered again and is renewed only when its key
         * is the previous one.
         */
        else if (SSL_version(ssl) == TLS1_3_VERSION)
            rv = 2;
    }
    OPENSSL_cleanse(&k, sizeof k);
    return (rv);
}

void
tls__ticket_fini(void)
{
    EVP_CIPHER_free(tk_aes);
    tk_aes = NULL;
}
