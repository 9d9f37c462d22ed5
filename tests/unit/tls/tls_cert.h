/*
 * The TLS unit tests' certificate: a self-signed P-256 certificate for
 * name (CN and SAN dNSName), serial serial, written as PEM to crt and
 * its key to key; and the directory of a test's own that holds them.
 * Included by each test that needs one.
 */
#ifndef SUROGAT_TEST_TLS_CERT_H
#define SUROGAT_TEST_TLS_CERT_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "unit.h"

static inline void
tls_test_cert(const char *crt, const char *key, const char *name, long serial)
{
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_EXTENSION *ext;
    X509V3_CTX v3;
    char san[128];
    FILE *f;

    ck_assert_ptr_nonnull(pk);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, pk);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                               (const unsigned char *)name, -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(x));
    snprintf(san, sizeof san, "DNS:%s", name);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
    ck_assert_ptr_nonnull(ext);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    ck_assert_int_gt(X509_sign(x, pk, EVP_sha256()), 0);
    f = fopen(crt, "w");
    ck_assert_ptr_nonnull(f);
    PEM_write_X509(f, x);
    fclose(f);
    f = fopen(key, "w");
    ck_assert_ptr_nonnull(f);
    PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL);
    fclose(f);
    X509_free(x);
    EVP_PKEY_free(pk);
}

/* A new directory of the test's own under $TMPDIR (or /tmp): prefix-XXXXXX, made. */
static inline void
tls_test_dir(char *dir, size_t n, const char *prefix)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(dir, n, "%s/%s-XXXXXX", tmp != NULL ? tmp : "/tmp", prefix);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* One certificate for "unit.test" in a directory of its own: dir/c.pem, dir/k.pem. */
struct tls_test_files {
    char dir[256], crt[300], key[300];
};

static inline void
tls_test_files_make(struct tls_test_files *f, const char *prefix)
{
    tls_test_dir(f->dir, sizeof f->dir, prefix);
    snprintf(f->crt, sizeof f->crt, "%s/c.pem", f->dir);
    snprintf(f->key, sizeof f->key, "%s/k.pem", f->dir);
    tls_test_cert(f->crt, f->key, "unit.test", 1);
}

static inline void
tls_test_files_rm(const struct tls_test_files *f)
{
    unlink(f->crt);
    unlink(f->key);
    rmdir(f->dir);
}

#endif
