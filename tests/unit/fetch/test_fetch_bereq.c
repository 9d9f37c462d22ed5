/*
 * fetch_pipe_bereq(): the backend request of a pipe.  An upgrade keeps its
 * Upgrade and Connection; anything else loses its Upgrade (h2c above all,
 * with its HTTP2-Settings) and tells the backend Connection: close, so that
 * no backend switches, or reads on, behind the policy's back.
 */
#include <string.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/fetch.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/ws.h"

static char wsbuf[16384];
static struct ws ws;
static struct http_hdr hdrs[16];
static struct http creq;
static struct busyobj bo;

static void
add(const char *n, const char *v)
{
    ck_assert_int_eq(http_add(&creq, (struct txt){ n, strlen(n) }, (struct txt){ v, strlen(v) }),
                     0);
}

/* A client request with an Upgrade, as the transport parsed it. */
static void
setup(bool upgrade, const char *proto)
{
    ws_init(&ws, wsbuf, sizeof wsbuf);
    http_init(&creq, hdrs, ARRAY_LEN(hdrs));
    creq.method = TXT_LIT("GET");
    creq.url = TXT_LIT("/ws");
    creq.proto = 11;
    add("Host", "a.test");
    add("Upgrade", proto);
    add("Connection", "Upgrade, HTTP2-Settings");
    add("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA");
    add("X-Forwarded-For", "10.0.0.1");
    fetch_init(&bo);
    bo.ws = &ws;
    bo.creq = &creq;
    strcpy(bo.client_ip, "192.0.2.7");
    bo.upgrade = upgrade;
    par.xff = true;
}

static const char *
val(const struct http *hp, const char *name, char *buf, size_t len)
{
    const struct txt *v = http_value(hp, name);

    if (v == NULL)
        return (NULL);
    ck_assert_uint_lt(v->len, len);
    memcpy(buf, v->b, v->len);
    buf[v->len] = '\0';
    return (buf);
}

START_TEST(upgrade_kept)
{
    char b[128];
    struct http *bq;

    setup(true, "websocket");
    bq = fetch_pipe_bereq(&bo);
    ck_assert_ptr_nonnull(bq);
    ck_assert_str_eq(val(bq, "Upgrade", b, sizeof b), "websocket");
    ck_assert(http_has_token(bq, "Connection", "upgrade"));
    ck_assert(!http_has_token(bq, "Connection", "close"));
    ck_assert_str_eq(val(bq, "X-Forwarded-For", b, sizeof b), "10.0.0.1, 192.0.2.7");
    ck_assert_str_eq(val(bq, "X-Forwarded-Proto", b, sizeof b), "http");
    ck_assert_str_eq(val(bq, "Host", b, sizeof b), "a.test");
    /* The client's own head is untouched: the policy still sees what it sent. */
    ck_assert_ptr_nonnull(http_find(&creq, "Upgrade"));
}
END_TEST

START_TEST(no_upgrade_no_switch)
{
    static const char *const protos[] = { "h2c", "websocket" };
    char b[128];
    struct http *bq;

    /* h2c never is one; a websocket the transport did not call one (HTTP/1.0 ...) neither. */
    for (size_t i = 0; i < ARRAY_LEN(protos); i++) {
        setup(false, protos[i]);
        bq = fetch_pipe_bereq(&bo);
        ck_assert_ptr_nonnull(bq);
        ck_assert_ptr_null(http_find(bq, "Upgrade"));
        ck_assert_ptr_null(http_find(bq, "HTTP2-Settings"));
        ck_assert_uint_eq(http_count(bq, "Connection"), 1);
        ck_assert_str_eq(val(bq, "Connection", b, sizeof b), "close");
    }
}
END_TEST

START_TEST(full_workspace)
{
    setup(true, "websocket");
    ws_init(&ws, wsbuf, 64);
    ck_assert_ptr_null(fetch_pipe_bereq(&bo));
}
END_TEST

Suite *
fetch_bereq_suite(void)
{
    Suite *s = suite_create("fetch_bereq");
    TCase *tc = tcase_create("pipe");

    tcase_add_test(tc, upgrade_kept);
    tcase_add_test(tc, no_upgrade_no_switch);
    tcase_add_test(tc, full_workspace);
    suite_add_tcase(s, tc);
    return s;
}
