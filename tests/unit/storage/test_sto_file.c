/*
 * The file store through its public interface: objects written, the
 * store closed (cleanly, or as a crash leaves it: nothing flushed or
 * closed in order), opened again and recovered.  Crashes in the middle
 * of a write are made by hand in the file: a torn header, a fragment
 * gone, a body byte flipped, an object never sealed.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"

static char path[64];

struct found {
    char key[64];
    char tail[64]; /* the tail as recovered, NUL-terminated; "" for none */
    size_t body_len;
    unsigned char body_sum; /* xor of the body bytes */
    struct sto_body body;
};

static struct found found[64];
static unsigned nfound;

static sto_recover_f collect;

static void
setup(void)
{
    int fd;

    (void)stat_init();
    strcpy(path, "/tmp/surogat-unit-XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    nfound = 0;
}

static void
teardown(void)
{
    sto_fini();
    unlink(path);
}

static void
open_store(const char *size)
{
    char spec[128], ebuf[256];
    struct sb err;

    snprintf(spec, sizeof spec, "file,%s,%s", path, size);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(sto_init(spec, &err) == 0, "%s", ebuf);
    sto_recover(collect);
}

static void
fill(char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)('a' + (i * 7 + seed) % 26);
}

/* One object with a body of len bytes, written in pieces of `piece` bytes. */
static void
put(struct sto_body *b, const char *key, size_t len, size_t piece, bool announce, bool seal)
{
    static char body[3 * 1024 * 1024];
    char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n";
    char attr[16] = "attr-bytes-here";
    struct sto_meta m = { key, strlen(key), head, strlen(head), "", 0, attr, sizeof attr, 0,
                          NULL, 0 };

    ck_assert_uint_le(len, sizeof body);
    fill(body, len, (unsigned)strlen(key));
    memset(b, 0, sizeof *b);
    b->size_hint = announce ? len : 0;
    ck_assert_int_eq(sto_open(b, &m), 0);
    ck_assert(b->meta_stored);
    ck_assert(memcmp(m.key, key, strlen(key)) == 0);
    for (size_t off = 0; off < len; off += piece)
        ck_assert_int_eq(sto_append(b, body + off, len - off < piece ? len - off : piece), 0);
    ck_assert_uint_eq(b->len, len);
    sto_body_trim(b);
    if (seal)
        sto_seal(b);
}

static int
collect(const struct sto_meta *m, struct sto_body *b, uint64_t serial)
{
    struct found *f = &found[nfound++];
    unsigned char x = 0;

    (void)serial;
    ck_assert_uint_lt(nfound, 64);
    ck_assert_uint_lt(m->key_len, sizeof f->key);
    memcpy(f->key, m->key, m->key_len);
    f->key[m->key_len] = '\0';
    ck_assert_uint_eq(m->attr_len, 16);
    ck_assert_str_eq(m->attr, "attr-bytes-here");
    ck_assert(m->head_len > 0 && memcmp(m->head, "HTTP/1.1 200 OK\r\n", 17) == 0);
    f->tail[0] = '\0';
    if (m->tail_len > 0) {
        size_t tl;
        ck_assert_uint_lt(m->tail_len, sizeof f->tail);
        memcpy(f->tail, m->tail, m->tail_len);
        f->tail[m->tail_len] = '\0';
        /* The body gives the same tail back as the meta did. */
        ck_assert_ptr_eq(sto_tail(b, &tl), m->tail);
        ck_assert_uint_eq(tl, m->tail_len);
    } else {
        ck_assert_ptr_null(sto_tail(b, &(size_t){ 0 }));
    }
    f->body_len = b->len;
    for (const struct sto_seg *s = b->first; s != NULL; s = s->next)
        for (size_t i = 0; i < s->len; i++)
            x ^= (unsigned char)s->data[i];
    f->body_sum = x;
    f->body = *b;
    return (0);
}

static const struct found *
find(const char *key)
{
    for (unsigned i = 0; i < nfound; i++)
        if (strcmp(found[i].key, key) == 0)
            return (&found[i]);
    return (NULL);
}

static unsigned char
expected_sum(const char *key, size_t len)
{
    static char body[3 * 1024 * 1024];
    unsigned char x = 0;

    fill(body, len, (unsigned)strlen(key));
    for (size_t i = 0; i < len; i++)
        x ^= (unsigned char)body[i];
    return (x);
}

/* Reopen as after a crash: the in-memory side is dropped without any goodbye. */
static void
reopen(void)
{
    sto_fini();
    nfound = 0;
    open_store("8m");
}

/* The file mapped by the test, to break it the way a crash or a disk would. */
static char *
map_file(size_t *len)
{
    struct stat st;
    int fd = open(path, O_RDWR);
    char *p;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    *len = (size_t)st.st_size;
    p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    close(fd);
    return (p);
}

static char *
find_bytes(char *hay, size_t len, const char *needle)
{
    return (memmem(hay, len, needle, strlen(needle)));
}

START_TEST(objects_come_back)
{
    struct sto_body b[6];

    open_store("8m");
    put(&b[0], "/empty", 0, 1, true, true);
    put(&b[1], "/small", 100, 7, true, true);
    put(&b[2], "/unit-boundary", 256 - 128, 1000, true, true);
    put(&b[3], "/chunked", 100000, 1000, false, true);  /* unknown length: fragments */
    put(&b[4], "/big", 2500000, 65536, true, true);     /* longer than one extent */
    put(&b[5], "/unsealed", 5000, 100, true, false);    /* the fetch never finished */
    for (int i = 0; i < 6; i++)
        sto_body_release(&b[i]);
    reopen();
    ck_assert_uint_eq(nfound, 5);
    ck_assert_ptr_null(find("/unsealed"));
    ck_assert_uint_eq(find("/big")->body_len, 2500000);
    ck_assert_uint_eq(find("/big")->body_sum, expected_sum("/big", 2500000));
    ck_assert_uint_eq(find("/chunked")->body_len, 100000);
    ck_assert_uint_eq(find("/chunked")->body_sum, expected_sum("/chunked", 100000));
    ck_assert_uint_eq(find("/small")->body_sum, expected_sum("/small", 100));
    for (unsigned i = 0; i < nfound; i++)
        ck_assert(sto_verify(&found[i].body));
    /* And again: recovery itself leaves a store that recovers the same. */
    for (unsigned i = 0; i < nfound; i++)
        sto_body_release(&found[i].body);
    reopen();
    ck_assert_uint_eq(nfound, 5);
    for (unsigned i = 0; i < nfound; i++)
        sto_body_release(&found[i].body);
}
END_TEST

/* One object with a tail, set after its body and before its seal. */
static void
put_tail(struct sto_body *b, const char *key, size_t len, size_t piece, const char *tail)
{
    size_t tl;

    put(b, key, len, piece, false, false);
    ck_assert_int_eq(sto_set_tail(b, tail, strlen(tail)), 0);
    ck_assert(memcmp(sto_tail(b, &tl), tail, strlen(tail)) == 0);
    ck_assert_uint_eq(tl, strlen(tail));
    sto_seal(b);
}

START_TEST(tails_come_back)
{
    struct sto_body b[3];

    open_store("8m");
    put_tail(&b[0], "/inline", 100, 100, "program of /inline");
    put_tail(&b[1], "/fragmented", 100000, 1000, "program of /fragmented");
    put(&b[2], "/plain", 100, 100, true, true);
    for (int i = 0; i < 3; i++)
        sto_body_release(&b[i]);
    reopen();
    ck_assert_uint_eq(nfound, 3);
    ck_assert_str_eq(find("/inline")->tail, "program of /inline");
    ck_assert_str_eq(find("/fragmented")->tail, "program of /fragmented");
    ck_assert_uint_eq(find("/fragmented")->body_sum, expected_sum("/fragmented", 100000));
    ck_assert_str_eq(find("/plain")->tail, "");
    /* A tail's extent is freed with its body: the store ends up empty. */
    for (unsigned i = 0; i < nfound; i++)
        sto_body_free(&found[i].body);
    ck_assert_uint_eq(sto_used(), 0);
    reopen();
    ck_assert_uint_eq(nfound, 0);
}
END_TEST

START_TEST(missing_tail_drops_the_object)
{
    struct sto_body b[2];
    size_t len;
    char *map, *t;

    open_store("8m");
    put_tail(&b[0], "/lost-tail", 1000, 1000, "the tail that goes");
    put(&b[1], "/whole", 1000, 1000, true, true);
    for (int i = 0; i < 2; i++)
        sto_body_release(&b[i]);
    sto_fini();
    map = map_file(&len);
    /* The tail's bytes follow its fragment header (32 bytes): kill that header's magic. */
    t = find_bytes(map + 4096, len - 4096, "the tail that goes");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(*(uint32_t *)(void *)(t - 32), 0x5346f7a9u);
    memset(t - 32, 0, 4);
    munmap(map, len);
    nfound = 0;
    open_store("8m");
    ck_assert_uint_eq(nfound, 1);
    ck_assert_ptr_nonnull(find("/whole"));
    sto_body_release(&found[0].body);
}
END_TEST

START_TEST(retired_and_freed_stay_gone)
{
    struct sto_body b[3];

    open_store("8m");
    put(&b[0], "/retired", 3000, 3000, true, true);
    put(&b[1], "/freed", 3000, 3000, true, true);
    put(&b[2], "/kept", 3000, 3000, true, true);
    sto_retire(&b[0]); /* unlinked from the index; a reader still holds it */
    sto_body_free(&b[1]);
    sto_body_release(&b[2]);
    sto_body_release(&b[0]);
    reopen();
    ck_assert_uint_eq(nfound, 1);
    ck_assert_ptr_nonnull(find("/kept"));
    sto_body_release(&found[0].body);
}
END_TEST

START_TEST(space_is_reused)
{
    struct sto_body b;
    uint64_t used0 = sto_used();

    open_store("2m");
    /* Far more than the store holds, one at a time: freed space must come back. */
    for (int i = 0; i < 200; i++) {
        put(&b, "/cycle", 100000, 4096, (i & 1) != 0, true);
        sto_body_free(&b);
    }
    ck_assert_uint_eq(sto_used(), used0);
}
END_TEST

START_TEST(full_store_says_so)
{
    struct sto_body b[40];
    int n = 0, rv = 0;
    static char chunk[65536];
    char attr[16] = "attr-bytes-here";

    open_store("1m");
    while (n < 40 && rv == 0) {
        struct sto_meta m = { "/k", 2, "HTTP/1.1 200 OK\r\n", 17, "", 0, attr, sizeof attr, 0,
                              NULL, 0 };
        memset(&b[n], 0, sizeof b[n]);
        if (sto_open(&b[n], &m) != 0)
            break;
        rv = sto_append(&b[n], chunk, sizeof chunk);
        n++;
    }
    ck_assert_int_eq(rv, -1); /* 40 x 64 KiB do not fit in 1 MiB */
    ck_assert_uint_le(sto_used(), sto_size());
    for (int i = 0; i < n; i++)
        sto_body_free(&b[i]);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

START_TEST(torn_header_is_skipped)
{
    struct sto_body b[3];
    size_t len;
    char *map, *k;

    open_store("8m");
    put(&b[0], "/before", 1000, 1000, true, true);
    put(&b[1], "/torn", 1000, 1000, true, true);
    put(&b[2], "/after", 1000, 1000, true, true);
    for (int i = 0; i < 3; i++)
        sto_body_release(&b[i]);
    sto_fini();
    map = map_file(&len);
    /* The record header sits 80 bytes before the key: tear its length field. */
    k = find_bytes(map + 4096, len - 4096, "/torn");
    ck_assert_ptr_nonnull(k);
    k[-80 + 8] ^= 0x5a;
    munmap(map, len);
    nfound = 0;
    open_store("8m");
    ck_assert_uint_eq(nfound, 2);
    ck_assert_ptr_nonnull(find("/before"));
    ck_assert_ptr_nonnull(find("/after"));
    for (unsigned i = 0; i < nfound; i++)
        sto_body_release(&found[i].body);
}
END_TEST

START_TEST(missing_fragment_drops_the_object)
{
    struct sto_body b[2];
    size_t len;
    char *map;
    int killed = 0;

    open_store("8m");
    put(&b[0], "/fragmented", 200000, 1000, false, true);
    put(&b[1], "/whole", 1000, 1000, true, true);
    for (int i = 0; i < 2; i++)
        sto_body_release(&b[i]);
    sto_fini();
    map = map_file(&len);
    /* Kill the magic of the first fragment header (magic 0x5346f7a9). */
    for (size_t off = 4096; off + 4 <= len && !killed; off += 256) {
        uint32_t m;
        memcpy(&m, map + off, 4);
        if (m == 0x5346f7a9u) {
            memset(map + off, 0, 4);
            killed = 1;
        }
    }
    ck_assert(killed);
    munmap(map, len);
    nfound = 0;
    open_store("8m");
    ck_assert_uint_eq(nfound, 1);
    ck_assert_ptr_nonnull(find("/whole"));
    sto_body_release(&found[0].body);
}
END_TEST

START_TEST(flipped_body_byte_fails_verification)
{
    struct sto_body b;
    size_t len;
    char *map, *k;

    open_store("8m");
    put(&b, "/flip", 5000, 5000, true, true);
    sto_body_release(&b);
    sto_fini();
    map = map_file(&len);
    k = find_bytes(map + 4096, len - 4096, "/flip");
    ck_assert_ptr_nonnull(k);
    /* The body follows the key and the head; flip a byte well inside it. */
    k[1000] ^= 1;
    munmap(map, len);
    nfound = 0;
    open_store("8m");
    ck_assert_uint_eq(nfound, 1);
    ck_assert(!sto_verify(&found[0].body));
    sto_body_free(&found[0].body);
}
END_TEST

START_TEST(grown_store_keeps_its_objects)
{
    struct sto_body b;

    open_store("2m");
    put(&b, "/grow", 5000, 5000, true, true);
    sto_body_release(&b);
    sto_fini();
    nfound = 0;
    open_store("4m");
    ck_assert_uint_eq(nfound, 1);
    ck_assert_uint_eq(sto_size(), ((4u << 20) - 4096));
    sto_body_release(&found[0].body);
}
END_TEST

START_TEST(foreign_file_is_formatted)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    fputs("not a store at all\n", f);
    fclose(f);
    open_store("2m");
    ck_assert_uint_eq(nfound, 0);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

START_TEST(bad_specs_are_refused)
{
    char ebuf[256];
    struct sb err;

    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(sto_init("file,/nonexistent-dir/x,10m", &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "/nonexistent-dir/x"));
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(sto_init("file,/tmp/x", &err), -1);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(sto_init("file,/tmp/x,10k", &err), -1);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(sto_init("tape,/dev/st0", &err), -1);
    /* The same file twice: the second is refused, the first keeps it. */
    open_store("2m");
    sb_init(&err, ebuf, sizeof ebuf);
    char spec[128];
    snprintf(spec, sizeof spec, "file,%s,2m", path);
    ck_assert_int_eq(sto_init(spec, &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "in use"));
}
END_TEST

Suite *
sto_file_suite(void)
{
    Suite *s = suite_create("sto_file");
    TCase *tc = tcase_create("sto_file");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, objects_come_back);
    tcase_add_test(tc, tails_come_back);
    tcase_add_test(tc, missing_tail_drops_the_object);
    tcase_add_test(tc, retired_and_freed_stay_gone);
    tcase_add_test(tc, space_is_reused);
    tcase_add_test(tc, full_store_says_so);
    tcase_add_test(tc, torn_header_is_skipped);
    tcase_add_test(tc, missing_fragment_drops_the_object);
    tcase_add_test(tc, flipped_body_byte_fails_verification);
    tcase_add_test(tc, grown_store_keeps_its_objects);
    tcase_add_test(tc, foreign_file_is_formatted);
    tcase_add_test(tc, bad_specs_are_refused);
    suite_add_tcase(s, tc);
    return s;
}
