/*
 * The TLS unit tests' certificate: a self-signed P-256 certificate for
 * name (CN and SAN dNSName), serial serial, written as PEM to crt and
 * its key to key.  One function, included by each test that needs one.
 */
#ifndef SUROGAT_TEST_TLS_CERT_H
#define SUROGAT_TEST_TLS_CERT_H

#include <stdio.h>

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

#endif
