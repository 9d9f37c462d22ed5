/*
 * hsh copies: an object's body kept in another form beside it.  A copy is
 * made once enough deliveries asked for it, found only through its
 * object, counted in n_copy and copy_bytes, evicted alone when cold, and
 * gone with its object whatever removes that -- also while it is still
 * being made.
 */
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "surogat/ban.h"
#include "surogat/cc.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"
#include "surogat/tim.h"
#include "surogat/xkey.h"

static struct http req;
static struct cc qcc;

static const char obj_head[] = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n"
                               "Content-Encoding: br\r\n\r\n";
static const char copy_head[] = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\n";

static void
setup_store(const char *spec)
{
    char ebuf[128];
    struct sb err;

    par_init();
    ck_assert_int_eq(stat_init(), 0);
    ck_assert_int_eq(hsh_init(), 0);
    ck_assert_int_eq(xkey_init(), 0);
    ck_assert_int_eq(ban_init(), 0);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(sto_init(spec, &err), 0);
    http_init(&req, NULL, 0);
    cc_parse_request(&req, &qcc);
}

static void
setup(void)
{
    setup_store("malloc,16m");
}

/* Room for a few objects of SMALL_BODY: eviction comes soon. */
#define SMALL_BODY (256 * 1024)
static void
setup_small(void)
{
    setup_store("malloc,1m");
    par.tinylfu = false; /* the newcomer always gets in: eviction is certain */
}

static void
teardown(void)
{
    hsh_fini();
    ban_fini();
    xkey_fini();
    sto_fini();
    stat_fini();
    par_fini();
}

static enum hsh_result
lookup(const char *key, struct cobj **ocp)
{
    struct hsh_stale stale;
    enum hsh_result r = hsh_lookup(key, strlen(key), &req, &qcc, tim_real(), 0, ocp, &stale, NULL);

    if (stale.oc != NULL)
        hsh_deref(&stale.oc);
    return (r);
}

/* A published object of len bytes of c, referenced for the caller (a delivery's). */
static struct cobj *
object(const char *key, size_t len, char c)
{
    static char body[SMALL_BODY];
    struct cobj *oc, *hit;

    ck_assert_uint_le(len, sizeof body);
    memset(body, c, len);
    ck_assert_int_eq(lookup(key, &oc), HSH_MISS);
    oc->head = strdup(obj_head);
    oc->head_len = sizeof obj_head - 1;
    oc->status = 200;
    oc->form = 2; /* opaque to the cache */
    oc->fresh.t_origin = tim_real();
    oc->fresh.ttl = 60;
    ck_assert_int_eq(hsh_store_begin(oc), 0);
    ck_assert_int_eq(hsh_append(oc, body, len), 0);
    oc->body_complete = true;
    hsh_unbusy(&oc);
    ck_assert_int_eq(lookup(key, &hit), HSH_HIT);
    return (hit);
}

/* Make oc's copy in form, demanded `after` times; the copy's body is len bytes of c. */
static void
make_copy(struct cobj *oc, unsigned form, unsigned after, size_t len, char c, bool complete)
{
    static char body[SMALL_BODY];
    struct cobj *cp = NULL;

    memset(body, c, len);
    for (unsigned i = 1; i < after; i++)
        ck_assert_ptr_null(hsh_copy_begin(oc, form, after, copy_head, sizeof copy_head - 1));
    cp = hsh_copy_begin(oc, form, after, copy_head, sizeof copy_head - 1);
    ck_assert_ptr_nonnull(cp);
    /* One copy per form: another delivery meanwhile makes none. */
    ck_assert_ptr_null(hsh_copy_begin(oc, form, 1, copy_head, sizeof copy_head - 1));
    ck_assert_ptr_null(hsh_copy_get(oc, form)); /* not before it is complete */
    ck_assert_int_eq(hsh_copy_append(cp, body, len), 0);
    hsh_copy_end(oc, &cp, complete);
    ck_assert_ptr_null(cp);
}

START_TEST(copy_after_demand)
{
    struct cobj *oc = object("k", 1000, 'b'), *cp;

    ck_assert_uint_eq(hsh_copy_forms(oc), 0);
    ck_assert_ptr_null(hsh_copy_begin(oc, 0, 0, copy_head, sizeof copy_head - 1)); /* never */
    make_copy(oc, 0, 3, 4000, 'i', true);
    ck_assert_uint_eq(hsh_copy_forms(oc), 1u << 0);
    ck_assert_uint_eq(stat_get(STAT_copy_made), 1);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 1);
    ck_assert_uint_eq(stat_get(STAT_copy_bytes), 4000);
    ck_assert_uint_eq(stat_get(STAT_n_object), 1); /* a copy is no object */
    cp = hsh_copy_get(oc, 0);
    ck_assert_ptr_nonnull(cp);
    ck_assert_uint_eq(cp->body.len, 4000);
    ck_assert_uint_eq(cp->form, 0);
    ck_assert_int_eq(cp->body.first->data[0], 'i');
    ck_assert_int_eq(memcmp(cp->head, copy_head, cp->head_len), 0);
    ck_assert_ptr_null(hsh_copy_get(oc, 1));
    hsh_deref(&cp);
    /* Another form, independently. */
    make_copy(oc, 1, 1, 10, 'g', true);
    ck_assert_uint_eq(hsh_copy_forms(oc), (1u << 0) | (1u << 1));
    ck_assert_uint_eq(stat_get(STAT_copy_bytes), 4010);
    hsh_deref(&oc);
}
END_TEST

/* Whatever removes the object removes its copies: here a purge, while a copy is read. */
START_TEST(purge_takes_copies)
{
    struct cobj *oc = object("k", 1000, 'b'), *cp;

    make_copy(oc, 0, 1, 4000, 'i', true);
    cp = hsh_copy_get(oc, 0);
    ck_assert_uint_eq(hsh_purge("k", 1), 1);
    ck_assert_uint_eq(hsh_copy_forms(oc), 0);
    ck_assert_ptr_null(hsh_copy_get(oc, 0));
    ck_assert_ptr_null(hsh_copy_begin(oc, 0, 1, copy_head, sizeof copy_head - 1));
    /* The reader still has its bytes. */
    ck_assert_int_eq(cp->body.first->data[3999], 'i');
    hsh_deref(&oc);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 1);
    hsh_deref(&cp);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 0);
    ck_assert_uint_eq(stat_get(STAT_copy_bytes), 0);
    ck_assert_uint_eq(stat_get(STAT_n_object), 0);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

/* A copy being made when its object is invalidated is dropped, not published. */
START_TEST(invalidated_while_made)
{
    struct cobj *oc = object("k", 1000, 'b'), *cp;

    cp = hsh_copy_begin(oc, 0, 1, copy_head, sizeof copy_head - 1);
    ck_assert_ptr_nonnull(cp);
    ck_assert_int_eq(hsh_copy_append(cp, "abc", 3), 0);
    ck_assert(hsh_kill(oc, false)); /* as a ban or a tag purge does */
    ck_assert_int_eq(hsh_copy_append(cp, "def", 3), 0);
    hsh_copy_end(oc, &cp, true);
    ck_assert_uint_eq(stat_get(STAT_copy_dropped), 1);
    ck_assert_uint_eq(stat_get(STAT_copy_made), 0);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 0);
    ck_assert_uint_eq(hsh_copy_forms(oc), 0);
    hsh_deref(&oc);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

/* A copy not completed (the body was bad, no room) is dropped, and demand starts again. */
START_TEST(incomplete_copy_dropped)
{
    struct cobj *oc = object("k", 1000, 'b');

    make_copy(oc, 0, 2, 100, 'i', false);
    ck_assert_uint_eq(hsh_copy_forms(oc), 0);
    ck_assert_uint_eq(stat_get(STAT_copy_dropped), 1);
    ck_assert_ptr_null(hsh_copy_begin(oc, 0, 2, copy_head, sizeof copy_head - 1));
    make_copy(oc, 0, 1, 100, 'i', true);
    ck_assert_uint_eq(hsh_copy_forms(oc), 1);
    hsh_deref(&oc);
}
END_TEST

START_TEST(copy_past_max_object_size)
{
    struct cobj *oc = object("k", 1000, 'b'), *cp;
    char big[2048] = { 0 };

    par.max_object_size = 1024;
    cp = hsh_copy_begin(oc, 0, 1, copy_head, sizeof copy_head - 1);
    ck_assert_int_eq(hsh_copy_append(cp, big, sizeof big), -1);
    hsh_copy_end(oc, &cp, false);
    ck_assert_uint_eq(stat_get(STAT_copy_dropped), 1);
    hsh_deref(&oc);
}
END_TEST

/* Fill the store with objects until done(priv) says so; false if it never did. */
static bool
fill_until(bool (*done)(struct cobj *), struct cobj *watch)
{
    for (unsigned i = 0; i < 64; i++) {
        char key[16];
        struct cobj *o;

        if (done(watch))
            return (true);
        snprintf(key, sizeof key, "fill%u", i);
        o = object(key, SMALL_BODY, 'f');
        hsh_deref(&o);
    }
    return (done(watch));
}

static bool
no_copy(struct cobj *oc)
{
    return (hsh_copy_forms(oc) == 0);
}

/*
 * A copy is counted against the store and evicted like any object: while
 * its object is in use (a delivery holds it), the cold copy goes, its
 * slot emptied, and the object stays.
 */
START_TEST(copy_evicted_alone)
{
    struct cobj *oc = object("a", SMALL_BODY, 'a'), *hit;

    make_copy(oc, 0, 1, SMALL_BODY, 'i', true);
    ck_assert_uint_ge(sto_used(), 2 * SMALL_BODY);
    ck_assert(fill_until(no_copy, oc));
    ck_assert_uint_ge(stat_get(STAT_n_lru_nuked), 1);
    ck_assert_ptr_null(hsh_copy_get(oc, 0));
    ck_assert_uint_eq(stat_get(STAT_n_copy), 0);
    ck_assert_uint_eq(stat_get(STAT_copy_bytes), 0);
    ck_assert_int_eq(lookup("a", &hit), HSH_HIT);
    ck_assert_ptr_eq(hit, oc);
    hsh_deref(&hit);
    /* Demand starts again: the next copy is made after as many deliveries. */
    ck_assert_ptr_null(hsh_copy_begin(oc, 0, 2, copy_head, sizeof copy_head - 1));
    hsh_deref(&oc);
}
END_TEST

static bool
copy_dead(struct cobj *cp)
{
    return ((cp->flags & COBJ_DEAD) != 0);
}

/* The object evicted takes its copy, even one being read. */
START_TEST(object_evicted_with_copy)
{
    struct cobj *oc = object("a", SMALL_BODY, 'a'), *cp, *o;

    make_copy(oc, 0, 1, 1000, 'i', true);
    cp = hsh_copy_get(oc, 0);
    hsh_deref(&oc);
    ck_assert(fill_until(copy_dead, cp)); /* "a" evicted: its copy went with it */
    ck_assert_int_ne(lookup("a", &o), HSH_HIT);
    hsh_abandon(&o, 0);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 1); /* still read */
    ck_assert_int_eq(cp->body.first->data[999], 'i');
    hsh_deref(&cp);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 0);
}
END_TEST

Suite *
hsh_copy_suite(void)
{
    Suite *s = suite_create("hsh_copy");
    TCase *tc = tcase_create("copies");
    TCase *te = tcase_create("eviction");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, copy_after_demand);
    tcase_add_test(tc, purge_takes_copies);
    tcase_add_test(tc, invalidated_while_made);
    tcase_add_test(tc, incomplete_copy_dropped);
    tcase_add_test(tc, copy_past_max_object_size);
    suite_add_tcase(s, tc);
    tcase_add_checked_fixture(te, setup_small, teardown);
    tcase_add_test(te, copy_evicted_alone);
    tcase_add_test(te, object_evicted_with_copy);
    suite_add_tcase(s, te);
    return s;
}
