/*
 * Fuzz the policy helpers that read untrusted strings: surogat.url_path,
 * url_query, query_get, query_remove, query_sort, duration and
 * parse_time (src/policy/pol_url.c).  They are Lua C functions, so they
 * run where a script runs them: fuzz_pol_url.lua is loaded through
 * pol_load(), as surogatd -f would, and its recv hook gets a request
 * built from the input, through pol_recv().  The request object's
 * getters are fuzzed on the way.
 *
 * Input: lines separated by '\n'.  The first is the request-target, each
 * of the next (at most MAXF) a field X-Fuzz-1 ... X-Fuzz-MAXF; each lives
 * in its own exact-size heap copy so ASan sees a read past it.
 *
 * Invariants, checked by the script against a plain-Lua model of
 * surogat-lua(7) and reported as synth(599, what): each helper's result
 * equals the model's; query_sort is a permutation of the parameters,
 * idempotent, and commutes with query_remove; an accepted duration is
 * finite, >= 0, made of digits, dots and units only; an accepted date is
 * whole seconds and prints back to itself.  Here: the hook never fails
 * (no Lua error escapes a helper, whatever the bytes).
 */
#include <stdbool.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/wrk.h"

#include "fuzz.h"

#define MAXF 8
/* The model in Lua sorts and compares byte by byte: keep it inside the budget. */
#define MAXSIZE 1024

static struct wrk wrk;
static char wsbuf[64 * 1024];

static void
init(void)
{
    char ebuf[512];
    struct sb err;

    par_init();
    FUZZ_CHECK(stat_init() == 0);
    sb_init(&err, ebuf, sizeof ebuf);
    /* The model's loops are counted too; the helpers themselves are C. */
    FUZZ_CHECK(par_set("policy_max_instructions", "100000000", &err) == 0);
    wrk.magic = WRK_MAGIC;
    if (pol_load(FUZZ_POL_SCRIPT, &err) != 0) {
        fprintf(stderr, "fuzz_pol_url: %s\n", ebuf);
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    static const char *const names[MAXF] = {
        "X-Fuzz-1", "X-Fuzz-2", "X-Fuzz-3", "X-Fuzz-4",
        "X-Fuzz-5", "X-Fuzz-6", "X-Fuzz-7", "X-Fuzz-8",
    };
    struct http_hdr hdrs[MAXF + POL_HDR_ROOM];
    char *copy[MAXF + 1];
    struct pol_synth syn;
    enum pol_act act;
    struct req req;
    unsigned n = 0;
    size_t off = 0;

    if (!ready) {
        init();
        ready = true;
    }
    if (size > MAXSIZE)
        return 0;
    ws_init(&wrk.ws, wsbuf, sizeof wsbuf);
    memset(&req, 0, sizeof req);
    req.magic = REQ_MAGIC;
    req.wrk = &wrk;
    http_init(req.http, hdrs, ARRAY_LEN(hdrs));
    req.http->method = TXT_LIT("GET");
    req.http->proto = 11;
    while (n <= MAXF && (off < size || n == 0)) {
        const uint8_t *nl = memchr(data + off, '\n', size - off);
        size_t len = (nl != NULL ? (size_t)(nl - data) : size) - off;

        copy[n] = malloc(len > 0 ? len : 1);
        FUZZ_CHECK(copy[n] != NULL);
        if (len > 0)
            memcpy(copy[n], data + off, len);
        if (n == 0)
            req.http->url = (struct txt){ copy[n], len };
        else
            FUZZ_CHECK(http_add(req.http, (struct txt){ names[n - 1], strlen(names[n - 1]) },
                                (struct txt){ copy[n], len }) == 0);
        n++;
        off += len + 1;
    }

    act = pol_recv(&req, &syn);
    if (act == POL_SYNTH && syn.status == 599) {
        fprintf(stderr, "fuzz_pol_url: %s\n", syn.reason);
        abort();
    }
    FUZZ_CHECK(act == POL_HASH);

    for (unsigned i = 0; i < n; i++)
        free(copy[i]);
    return 0;
}
