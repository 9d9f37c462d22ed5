/*
 * Bodies sent by reference (sto.h, sto_seg_file()): the file store's
 * page-owning extents and their quarantine, the malloc store's memory
 * files.  A "client" is the far end of a loopback TCP connection that the
 * test sends to with sendfile(2) and reads -- or does not read -- at its
 * own pace: the case where the send queue is long empty while the
 * client's receive queue still holds the store's pages.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/sockios.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"

static char path[64];

struct client {
    int snd; /* ours */
    int rcv; /* the client's */
};

static void
setup(void)
{
    int fd;

    (void)stat_init();
    par.sendfile_min_size = 64 * 1024;
    strcpy(path, "/var/tmp/surogat-unit-XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static void
teardown(void)
{
    sto_fini();
    unlink(path);
}

static int
keep_all(const struct sto_meta *m, struct sto_body *b, uint64_t serial)
{
    (void)m;
    (void)b;
    (void)serial;
    return (0);
}

static int
drop_all(const struct sto_meta *m, struct sto_body *b, uint64_t serial)
{
    (void)m;
    (void)b;
    (void)serial;
    return (-1);
}

static void
add_store(const char *spec, sto_recover_f *cb)
{
    char ebuf[256];
    struct sb err;

    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(sto_init(spec, &err) == 0, "%s", ebuf);
    sto_recover(cb);
}

static void
open_file_store(const char *size, sto_recover_f *cb)
{
    char spec[128];

    snprintf(spec, sizeof spec, "file,%s,%s", path, size);
    add_store(spec, cb);
}

/* len bytes, different for every seed. */
static void
fill(char *buf, size_t len, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;

    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (char)(x >> 16);
    }
}

static char want[4 << 20];

/* A sealed object of len bytes (announced or not) in the only store. */
static void
put(struct sto_body *b, const char *key, size_t len, bool announce, unsigned seed)
{
    char head[] = "HTTP/1.1 200 OK\r\n";
    char attr[16] = "attr-bytes-here";
    struct sto_meta m = { key, strlen(key), head, strlen(head), "", 0, attr, sizeof attr, 0, NULL, 0 };

    fill(want, len, seed);
    memset(b, 0, sizeof *b);
    b->size_hint = announce ? len : 0;
    ck_assert_int_eq(sto_open(b, &m), 0);
    for (size_t off = 0; off < len; off += 65536)
        ck_assert_int_eq(sto_append(b, want + off, SRG_MIN(len - off, (size_t)65536)), 0);
    sto_body_trim(b);
    sto_seal(b);
}

static struct client
connect_client(int rcvbuf)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t sl = sizeof sa;
    struct client c;
    int l = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(l, 0);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(l, 1), 0);
    ck_assert_int_eq(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
    c.rcv = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0)
        ck_assert_int_eq(setsockopt(c.rcv, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf), 0);
    ck_assert_int_eq(connect(c.rcv, (struct sockaddr *)&sa, sizeof sa), 0);
    c.snd = accept(l, NULL, NULL);
    ck_assert_int_ge(c.snd, 0);
    close(l);
    return (c);
}

/*
 * Send a whole body to the client as a delivery would: the segments in
 * files with sendfile(2), the others from memory.  Returns how many bytes
 * went by reference.  The client must have room for all of it.
 */
static size_t
send_body(struct client *c, struct sto_body *b)
{
    size_t by_ref = 0;

    for (const struct sto_seg *s = b->first; s != NULL; s = s->next) {
        int fd;
        off_t off;

        if (sto_seg_file(b, s, &fd, &off)) {
            char *back = malloc(s->len);
            /* The file holds the segment's bytes where it says. */
            ck_assert_int_eq(pread(fd, back, s->len, off), (ssize_t)s->len);
            ck_assert(memcmp(back, s->data, s->len) == 0);
            free(back);
            for (size_t done = 0; done < s->len;) {
                ssize_t n = sendfile(c->snd, fd, &off, s->len - done);
                ck_assert_int_gt(n, 0);
                done += (size_t)n;
            }
            by_ref += s->len;
        } else {
            ck_assert_int_eq(write(c->snd, s->data, s->len), (ssize_t)s->len);
        }
    }
    return (by_ref);
}

/* Until our side has nothing left unacknowledged: everything sits in the client's queue. */
static void
wait_acked(struct client *c)
{
    int outq = -1;

    for (int i = 0; i < 500; i++) {
        ck_assert_int_eq(ioctl(c->snd, SIOCOUTQ, &outq), 0);
        if (outq == 0)
            return;
        usleep(2000);
    }
    ck_abort_msg("send queue not acknowledged: %d bytes", outq);
}

/* The client reads len bytes and compares them with the body of seed. */
static void
read_and_check(struct client *c, size_t len, unsigned seed)
{
    char *got = malloc(len);
    size_t have = 0;

    while (have < len) {
        ssize_t n = read(c->rcv, got + have, len - have);
        ck_assert_int_gt(n, 0);
        have += (size_t)n;
    }
    fill(want, len, seed);
    if (memcmp(got, want, len) != 0) {
        size_t i = 0;
        while (got[i] == want[i])
            i++;
        ck_abort_msg("byte %zu of %zu differs from what was stored", i, len);
    }
    free(got);
}

static void
client_close(struct client *c)
{
    close(c->snd);
    close(c->rcv);
}

/*
 * A little loopback traffic on every CPU.  A socket buffer the client
 * freed on its CPU goes back to the CPU that allocated it, which frees it
 * -- and lets go of the pages -- the next time it receives anything
 * (skb_attempt_defer_free()): at once on a live server, never in a test
 * that has stopped sending.
 */
static void
poke_cpus(void)
{
    cpu_set_t all, one;
    char x = 'x';

    ck_assert_int_eq(sched_getaffinity(0, sizeof all, &all), 0);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        struct client c;
        if (!CPU_ISSET(cpu, &all))
            continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
        c = connect_client(0);
        ck_assert_int_eq(write(c.snd, &x, 1), 1);
        ck_assert_int_eq(read(c.rcv, &x, 1), 1);
        client_close(&c);
    }
    ck_assert_int_eq(sched_setaffinity(0, sizeof all, &all), 0);
}

/* Sweep until nothing is held, for at most a few seconds; what is left. */
static uint64_t
sweep_until_empty(void)
{
    uint64_t left = 0;

    for (int i = 0; i < 300; i++) {
        poke_cpus();
        left = sto_sweep();
        if (left == 0)
            break;
        usleep(10000);
    }
    return (left);
}

#define BIG (1024 * 1024)

/*
 * New objects of 256 KiB, as many as the store takes: whatever free space
 * there is gets rewritten.  Their bodies are freed again at once (never
 * sent, so never held); returns how many fitted.
 */
static int
fill_store(unsigned seed)
{
    static struct sto_body b[256];
    char head[] = "HTTP/1.1 200 OK\r\n", attr[16] = "attr-bytes-here";
    int n = 0;

    fill(want, 256 * 1024, seed);
    while (n < 256) {
        struct sto_meta m = { "/new", 4, head, strlen(head), "", 0, attr, sizeof attr, 0, NULL, 0 };
        memset(&b[n], 0, sizeof b[n]);
        b[n].size_hint = 256 * 1024;
        if (sto_open(&b[n], &m) != 0)
            break;
        if (sto_append(&b[n], want, 256 * 1024) != 0) {
            sto_body_free(&b[n]);
            break;
        }
        n++;
    }
    for (int i = 0; i < n; i++)
        sto_body_free(&b[i]);
    return (n);
}

/*
 * Three bodies in the only store: 1 MiB announced, 600000 bytes without a
 * length, 1000 bytes; sent to c, by reference from sendfile_min_size on.
 */
static void
put_and_send_three(struct client *c, struct sto_body b[3])
{
    put(&b[0], "/big", BIG, true, 1);
    put(&b[1], "/chunked", 600000, false, 2);
    put(&b[2], "/small", 1000, true, 3);
    ck_assert_uint_eq(send_body(c, &b[0]), BIG);
    /* Without a length: the part past sendfile_min_size goes by reference. */
    ck_assert_uint_gt(send_body(c, &b[1]), 600000 - 128 * 1024);
    ck_assert_uint_eq(send_body(c, &b[2]), 0); /* small: never by reference */
}

static void
read_three(struct client *c)
{
    read_and_check(c, BIG, 1);
    read_and_check(c, 600000, 2);
    read_and_check(c, 1000, 3);
}

START_TEST(file_store_sends_page_owning_extents)
{
    struct sto_body b[3];
    struct client c = connect_client(4 << 20);

    open_file_store("16m", keep_all);
    put_and_send_three(&c, b);
    read_three(&c);
    client_close(&c);
    for (int i = 0; i < 3; i++)
        sto_body_free(&b[i]);
    ck_assert_uint_eq(sweep_until_empty(), 0);
    ck_assert_uint_eq(sto_used(), 0);
    ck_assert_uint_eq(stat_get(STAT_sto_quarantine_bytes), 0);
}
END_TEST

/*
 * The case the quarantine is for: the body is freed once it is all in the
 * socket, the client has it all acknowledged but has read none of it, and
 * new objects fill the store.  The client must still read the old bytes.
 */
START_TEST(freed_body_is_held_while_a_client_holds_its_pages)
{
    struct sto_body old;
    struct client c = connect_client(4 << 20);
    uint64_t used;
    int n;

    open_file_store("4m", keep_all);
    put(&old, "/old", BIG, true, 1);
    ck_assert_uint_eq(send_body(&c, &old), BIG);
    wait_acked(&c); /* what a send queue could tell: nothing left on our side */
    used = sto_used();
    sto_body_free(&old);
    ck_assert_uint_ge(stat_get(STAT_sto_quarantine_bytes), BIG);
    ck_assert_uint_eq(sto_used(), used); /* still charged */
    ck_assert_uint_gt(sto_sweep(), 0);   /* the client's queue holds the pages */
    /* Everything else the store has goes to new objects; the held MiB does not. */
    n = fill_store(100);
    ck_assert_int_ge(n, 8);
    ck_assert_int_lt(n, 12);
    read_and_check(&c, BIG, 1);
    ck_assert_uint_eq(sweep_until_empty(), 0);
    ck_assert_uint_eq(stat_get(STAT_sto_quarantine_bytes), 0);
    ck_assert_int_ge(fill_store(101), 12); /* and now it is the store's again */
    client_close(&c);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

/* A store full of held space says so -- and has room again once the client is done. */
START_TEST(store_full_while_held)
{
    struct sto_body old, b;
    struct client c = connect_client(4 << 20);
    char head[] = "HTTP/1.1 200 OK\r\n", attr[16] = "attr-bytes-here";
    struct sto_meta m = { "/next", 5, head, strlen(head), "", 0, attr, sizeof attr, 0, NULL, 0 };

    open_file_store("2m", keep_all);
    put(&old, "/old", 1536 * 1024, true, 1);
    ck_assert_uint_eq(send_body(&c, &old), 1536 * 1024);
    wait_acked(&c);
    sto_body_free(&old);
    memset(&b, 0, sizeof b);
    b.size_hint = BIG;
    /* Opening finds room for the record and a first part, appending runs out. */
    if (sto_open(&b, &m) == 0) {
        fill(want, BIG, 7);
        ck_assert_int_eq(sto_append(&b, want, BIG), -1);
        sto_body_free(&b);
    }
    ck_assert_uint_gt(stat_get(STAT_sto_quarantine_bytes), 0);
    /*
     * The client closes without reading: its queue, and the pages with it,
     * go -- a moment later, as the kernel frees a socket's buffers.  No
     * sweep runs meanwhile (the stores' thread is not started here): only
     * the store found full can give the space back.
     */
    client_close(&c);
    for (int i = 0;; i++) {
        ck_assert_int_lt(i, 100); /* 5 s */
        memset(&b, 0, sizeof b);
        b.size_hint = BIG;
        if (sto_open(&b, &m) == 0 && sto_append(&b, want, BIG) == 0)
            break;
        if (b.stv != 0)
            sto_body_free(&b);
        poke_cpus();
        usleep(50000);
    }
    ck_assert_uint_eq(stat_get(STAT_sto_quarantine_bytes), 0);
    sto_body_free(&b);
}
END_TEST

/* Held space is held again after a restart (or a crash): the client may outlive the daemon. */
START_TEST(held_space_survives_a_restart)
{
    struct sto_body old, live;
    struct client c = connect_client(4 << 20);

    open_file_store("8m", keep_all);
    put(&old, "/old", BIG, true, 1);
    put(&live, "/live", BIG, true, 2);
    ck_assert_uint_eq(send_body(&c, &old), BIG);
    ck_assert_uint_eq(send_body(&c, &live), BIG);
    wait_acked(&c);
    sto_body_free(&old);
    sto_body_release(&live);
    sto_fini(); /* as a crash leaves it: nothing swept, nothing written in order */
    ck_assert_uint_eq(stat_get(STAT_sto_quarantine_bytes), 0);
    /* The next run refuses /live (expired, say): it may have been sent, so it is held too. */
    open_file_store("8m", drop_all);
    ck_assert_uint_ge(stat_get(STAT_sto_quarantine_bytes), 2 * BIG);
    ck_assert_uint_gt(sto_sweep(), 0);
    ck_assert_int_ge(fill_store(9), 16);
    read_and_check(&c, BIG, 1);
    read_and_check(&c, BIG, 2);
    ck_assert_uint_eq(sweep_until_empty(), 0);
    client_close(&c);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

/* Page-owning extents next to ordinary ones come back after a crash, whole. */
static const size_t mixed_sizes[] = { 100, 70000, 5000, 300000, 65536, 1, 2500000, 4096, 900000 };
static unsigned mixed_found;

static int
check_mixed(const struct sto_meta *m, struct sto_body *b, uint64_t serial)
{
    static char got[4 << 20];
    unsigned i;
    size_t n = 0;

    (void)serial;
    ck_assert_uint_eq(m->key_len, 3);
    i = (unsigned)(m->key[2] - '0');
    ck_assert_uint_lt(i, ARRAY_LEN(mixed_sizes));
    ck_assert_uint_eq(b->len, mixed_sizes[i]);
    ck_assert(sto_verify(b));
    for (const struct sto_seg *s = b->first; s != NULL; s = s->next) {
        memcpy(got + n, s->data, s->len);
        n += s->len;
    }
    fill(want, n, i);
    ck_assert_msg(memcmp(got, want, n) == 0, "/o%u differs after recovery", i);
    mixed_found++;
    return (-1); /* refused: freed, and held if it owns its pages */
}

START_TEST(mixed_extents_recover)
{
    struct sto_body b[ARRAY_LEN(mixed_sizes)];

    open_file_store("16m", keep_all);
    for (unsigned i = 0; i < ARRAY_LEN(mixed_sizes); i++) {
        char key[8];
        snprintf(key, sizeof key, "/o%u", i);
        put(&b[i], key, mixed_sizes[i], (i & 1) == 0, i); /* with and without a length */
    }
    sto_body_free(&b[1]); /* holes between them */
    sto_body_free(&b[5]);
    for (unsigned i = 0; i < ARRAY_LEN(mixed_sizes); i++)
        if (i != 1 && i != 5)
            sto_body_release(&b[i]);
    sto_fini();
    open_file_store("16m", check_mixed);
    ck_assert_uint_eq(mixed_found, ARRAY_LEN(mixed_sizes) - 2);
    ck_assert_uint_eq(sweep_until_empty(), 0); /* nobody reads them: nothing stays held */
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

START_TEST(malloc_store_large_bodies_in_memory_files)
{
    struct sto_body b[3], next;
    struct client c = connect_client(8 << 20);

    add_store("malloc,64m", keep_all);
    put_and_send_three(&c, b);
    ck_assert_uint_eq(stat_get(STAT_sto_mfiles), 2);
    wait_acked(&c);
    /* Freed and replaced while the client has read none of it: it still gets the old bytes. */
    sto_body_free(&b[0]);
    sto_body_free(&b[1]);
    ck_assert_uint_eq(stat_get(STAT_sto_mfiles), 0);
    put(&next, "/next", BIG, true, 4);
    read_three(&c);
    sto_body_free(&next);
    sto_body_free(&b[2]);
    client_close(&c);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

/* Out of descriptors for memory files: bodies stay on the heap, whole, sent by copy. */
START_TEST(malloc_store_without_descriptors)
{
    struct rlimit rl, saved;
    struct sto_body b[3];
    struct client c = connect_client(8 << 20);
    int probe = dup(0);

    ck_assert_int_ge(probe, 0);
    close(probe);
    /* Not one descriptor more: memfd_create() fails with EMFILE. */
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    saved = rl;
    rl.rlim_cur = (rlim_t)probe;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    add_store("malloc,64m", keep_all);
    for (unsigned i = 0; i < 3; i++)
        put(&b[i], "/big", BIG, true, i);
    ck_assert_uint_eq(stat_get(STAT_sto_mfiles), 0);
    ck_assert_uint_eq(stat_get(STAT_sto_mfile_fail), 3);
    for (unsigned i = 0; i < 3; i++) {
        ck_assert_uint_eq(send_body(&c, &b[i]), 0);
        read_and_check(&c, BIG, i);
        sto_body_free(&b[i]);
    }
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &saved), 0); /* the sanitizers need some at exit */
    client_close(&c);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

START_TEST(sendfile_min_size_zero_sends_nothing_by_reference)
{
    struct sto_body b;
    struct client c = connect_client(4 << 20);

    par.sendfile_min_size = 0;
    open_file_store("8m", keep_all);
    add_store("malloc,8m", keep_all);
    for (int i = 0; i < 2; i++) {
        put(&b, "/big", BIG, true, 5);
        ck_assert_uint_eq(send_body(&c, &b), 0);
        read_and_check(&c, BIG, 5);
        sto_body_free(&b);
    }
    ck_assert_uint_eq(stat_get(STAT_sto_mfiles), 0);
    client_close(&c);
}
END_TEST

/* On tmpfs the kernel keeps every page: nothing could tell when one is free, so no sendfile. */
START_TEST(file_store_on_tmpfs_sends_by_copy)
{
    struct sto_body b;
    char spec[128];
    int fd;

    strcpy(path, "/dev/shm/surogat-unit-XXXXXX");
    fd = mkstemp(path);
    if (fd < 0)
        return; /* no /dev/shm here */
    close(fd);
    snprintf(spec, sizeof spec, "file,%s,8m", path);
    add_store(spec, keep_all);
    put(&b, "/big", BIG, true, 5);
    for (const struct sto_seg *s = b.first; s != NULL; s = s->next) {
        int f;
        off_t off;
        ck_assert(!sto_seg_file(&b, s, &f, &off));
    }
    sto_body_free(&b);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

Suite *
sto_send_suite(void)
{
    Suite *s = suite_create("sto_send");
    TCase *tc = tcase_create("send");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, file_store_sends_page_owning_extents);
    tcase_add_test(tc, freed_body_is_held_while_a_client_holds_its_pages);
    tcase_add_test(tc, store_full_while_held);
    tcase_add_test(tc, held_space_survives_a_restart);
    tcase_add_test(tc, mixed_extents_recover);
    tcase_add_test(tc, malloc_store_large_bodies_in_memory_files);
    tcase_add_test(tc, malloc_store_without_descriptors);
    tcase_add_test(tc, sendfile_min_size_zero_sends_nothing_by_reference);
    tcase_add_test(tc, file_store_on_tmpfs_sends_by_copy);
    suite_add_tcase(s, tc);
    return (s);
}
