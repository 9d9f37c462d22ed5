/*
 * The policy engine: programs and per-worker Lua states.  The hook calls
 * built on them are in pol_hooks.c.
 *
 * A program (struct pol_prog) is the script's source, checked once in a
 * scratch state and refcounted: the named programs of pol_admin.c hold
 * one reference each, the current program another, each worker state
 * built from it another.  Making a program current (pol__prog_install:
 * a reload, policy.use) happens under `mtx` and bumps the generation;
 * each worker notices at its next hook call and rebuilds its own state,
 * so no state is ever used by two threads and none is changed under a
 * running hook.
 *
 * Limits: every hook call and the top level of the script run within a
 * budget of instructions, time and memory (pol_limit.c), in the sandbox
 * of pol_env.c: the allowed libraries, read-only library tables, and
 * globals that do not outlive a request.  A script whose hook can only
 * answer with a word that hook may not return is refused at load.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <lauxlib.h>
#include <lualib.h>

#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/wrk.h"

#include "pol_priv.h"
#include "src/pol_builtin.h" /* generated from vcl/builtin.lua: pol_builtin_lua[] */

#define POL_SRC_MAX          (16 << 20) /* bytes of a script: anything larger is a mistake */
#define POL_INLINE_LABEL_MAX 80         /* "<inline:NAME>", NAME at most 64 (pol_admin.c) */

struct pol_prog {
    unsigned magic;
#define POL_PROG_MAGIC 0x6a0f2d4b
    unsigned refcnt; /* atomic */
    unsigned gen;
    char *path;      /* the script's file, or "<inline:NAME>" for vcl.inline */
    char *chunkname; /* "@path": Lua's messages then say path:line */
    char *src;
    size_t len;
    bool is_inline;      /* no file: a reload keeps it as it is */
    unsigned hooks;      /* bit per enum pol_hook defined by the script or builtin.lua */
    unsigned user_hooks; /* those the script defines */
    struct pol_cfg *cfg; /* its backends, directors and routes (pol_decl.c) */
};

const char *const pol__hook_name[POL_H_MAX] = {
    [POL_H_RECV] = "recv",
    [POL_H_HASH] = "hash",
    [POL_H_BACKEND_RESPONSE] = "backend_response",
    [POL_H_DELIVER] = "deliver",
    [POL_H_HIT] = "hit",
    [POL_H_MISS] = "miss",
    [POL_H_PASS] = "pass",
    [POL_H_LOG] = "log",
    [POL_H_SYNTH] = "synth",
    [POL_H_BACKEND_FETCH] = "backend_fetch",
    [POL_H_BACKEND_ERROR] = "backend_error",
    [POL_H_PIPE] = "pipe",
    [POL_H_PURGE] = "purge",
};

static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static struct pol_prog *cur; /* under mtx */
static unsigned cur_gen;     /* atomic: cur->gen */
static bool active;          /* atomic: a program was installed; never cleared */
static unsigned cur_hooks;   /* atomic: cur->hooks */
static unsigned cur_user;    /* atomic: cur->user_hooks */

void
pol__prog_unref(struct pol_prog **pp)
{
    struct pol_prog *p = *pp;

    *pp = NULL;
    if (p == NULL)
        return;
    OBJ_CHECK(p, POL_PROG_MAGIC);
    if (__atomic_sub_fetch(&p->refcnt, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    pol__decl_free(&p->cfg);
    free(p->path);
    free(p->chunkname);
    free(p->src);
    OBJ_FREE(&p);
}

/* ---- a Lua state ---- */

/* Run the chunk on top of the stack, limited; on error the message goes to err. */
static int
run_chunk(struct pol_wrk *pw, struct sb *err)
{
    lua_State *L = pw->L;
    const char *tripped;
    int st;

    pol__limit_arm(pw);
    st = lua_pcall(L, 0, 0, 0);
    pol__limit_disarm(pw);
    /* A limit that tripped fails the chunk, whatever came back. */
    if ((tripped = pol__limit_tripped(pw)) != NULL)
        sb_printf(err, "%s", tripped);
    else if (st != LUA_OK)
        sb_printf(err, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "error");
    if (st != LUA_OK)
        lua_pop(L, 1);
    return (tripped != NULL || st != LUA_OK ? -1 : 0);
}

static void
state_close(struct pol_wrk *pw)
{
    if (pw->L != NULL)
        lua_close(pw->L);
    pw->L = NULL;
    for (int h = 0; h < POL_H_MAX; h++) {
        free(pw->konst_user[h]);
        free(pw->konst_builtin[h]);
        pw->konst_user[h] = pw->konst_builtin[h] = NULL;
    }
    pw->ctx_id = 0;
    pw->ctx_ref = LUA_NOREF;
    for (unsigned i = 0; i < POL_CTX_KEEP; i++) {
        pw->ctx_keep_ref[i] = LUA_NOREF; /* references of the state closed */
        pw->ctx_keep_id[i] = 0;
    }
    pw->env_ref = LUA_NOREF;
    pw->env_dirty = pw->loading = false;
    pol__prog_unref(&pw->prog);
}

/* ---- empty hooks and constant answers ---- */

/* lua_dump()'s writer: the first bytes of a function's binary chunk. */
struct dumped {
    unsigned char b[512];
    size_t len;
};

static int
dump_into(lua_State *L, const void *p, size_t sz, void *ud)
{
    struct dumped *d = ud;

    (void)L;
    if (sz > sizeof d->b - d->len)
        return (1); /* a function this long is not empty */
    memcpy(d->b + d->len, p, sz);
    d->len += sz;
    return (0);
}

/* A size as Lua 5.4's dumper writes it: 7 bits a byte, the last one flagged. */
static bool
undump_size(const unsigned char **pp, const unsigned char *e, size_t *v)
{
    size_t x = 0;

    while (*pp < e) {
        unsigned char c = *(*pp)++;

        x = (x << 7) | (c & 0x7f);
        if (c & 0x80) {
            *v = x;
            return (true);
        }
    }
    return (false);
}

/*
 * The instructions of the function on top of the stack (left there),
 * read from its stripped binary chunk, and its parameter count and
 * vararg flag.  False for anything this reader does not know, which
 * callers take as "not empty".
 */
static bool
fn_code(lua_State *L, struct dumped *d, const unsigned char **code, size_t *ncode,
        unsigned *nparams, unsigned *vararg)
{
    /* 5.4's header: signature, version, format, LUAC_DATA, 3 sizes, LUAC_INT, LUAC_NUM */
    const size_t header = 4 + 1 + 1 + 6 + 3 + 8 + 8;
    const unsigned char *p, *e;
    size_t v;

    d->len = 0;
    if (lua_dump(L, dump_into, d, 1) != 0 || d->len < header + 1 || d->b[4] != 0x54 ||
        d->b[12] != 4 || d->b[13] != 8 || d->b[14] != 8)
        return (false);
    p = d->b + header + 1; /* and the count of upvalues */
    e = d->b + d->len;
    if (!undump_size(&p, e, &v) || v != 0 || /* source: stripped */
        !undump_size(&p, e, &v) || !undump_size(&p, e, &v) || e - p < 3)
        return (false);
    *nparams = p[0];
    *vararg = p[1];
    p += 3;
    if (!undump_size(&p, e, ncode) || *ncode > (size_t)(e - p) / 4)
        return (false);
    *code = p;
    return (true);
}

/* Lua source for string s as a quoted literal, every byte a decimal escape. */
static void
quote_bytes(struct sb *sb, const unsigned char *s, size_t len)
{
    sb_printf(sb, "\"");
    for (size_t i = 0; i < len; i++)
        sb_printf(sb, "\\%u", s[i]);
    sb_printf(sb, "\"");
}

/*
 * Whether `fcode` (n instructions) is the code of `function (np
 * parameters, vararg) end`, or, with a word, of `function (...) return
 * "word" end`: compiled here and compared instruction for instruction.
 */
static bool
same_code_as(lua_State *L, const unsigned char *fcode, size_t n, unsigned np, unsigned va,
             const unsigned char *word, size_t wlen)
{
    const unsigned char *rcode;
    unsigned rnp, rva;
    struct dumped rd;
    char src[1024];
    struct sb sb;
    size_t rn;
    bool same;

    sb_init(&sb, src, sizeof src);
    sb_printf(&sb, "return function(");
    for (unsigned i = 0; i < np; i++)
        sb_printf(&sb, "%sa%u", i > 0 ? ", " : "", i);
    sb_printf(&sb, "%s) ", va ? (np > 0 ? ", ..." : "...") : "");
    if (word != NULL) {
        sb_printf(&sb, "return ");
        quote_bytes(&sb, word, wlen);
    }
    sb_printf(&sb, " end");
    if (!sb_ok(&sb) || luaL_loadbuffer(L, sb.buf, sb.len, "=reference") != LUA_OK) {
        lua_pop(L, 1);
        return (false);
    }
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        return (false);
    }
    same = fn_code(L, &rd, &rcode, &rn, &rnp, &rva) && rnp == np && rva == va && rn == n &&
           memcmp(rcode, fcode, n * 4) == 0;
    lua_pop(L, 1);
    return (same);
}

/*
 * Whether the function on top of the stack does nothing.  Such a hook
 * returns nil, the same as no hook, so it is not called at all.
 */
static bool
fn_is_empty(lua_State *L)
{
    const unsigned char *code;
    unsigned np, va;
    struct dumped d;
    size_t n;

    return (!lua_iscfunction(L, -1) && fn_code(L, &d, &code, &n, &np, &va) && n <= 2 &&
            np <= 50 && same_code_as(L, code, n, np, va, NULL, 0));
}

/*
 * If the function on top of the stack (left there) is `return "word"`
 * and nothing else, a copy of the word; else NULL.  Such a hook
 * (builtin.lua's hit, miss, pass ...) is answered without a call.
 */
static char *
fn_konst(lua_State *L)
{
    const unsigned char *code, *k, *e;
    size_t n, nk, slen;
    unsigned np, va;
    struct dumped d;
    char *word;

    if (lua_iscfunction(L, -1) || !fn_code(L, &d, &code, &n, &np, &va) || n < 2 || n > 4 ||
        np > 20)
        return (NULL);
    k = code + n * 4;
    e = d.b + d.len;
    /* one constant, a short string: type byte (LUA_VSHRSTR), then its size + 1 and bytes */
    if (!undump_size(&k, e, &nk) || nk != 1 || k >= e || *k++ != 0x04 ||
        !undump_size(&k, e, &slen) || slen < 2 || slen - 1 > (size_t)(e - k) || slen > 64)
        return (NULL);
    slen--;
    if (!same_code_as(L, code, n, np, va, k, slen))
        return (NULL);
    word = malloc(slen + 1);
    AN(word);
    memcpy(word, k, slen);
    word[slen] = '\0';
    return (word);
}

/* A registry reference to the hook function on top of the stack (popped); LUA_NOREF if empty. */
static int
hook_ref(lua_State *L, char **konst)
{
    if (fn_is_empty(L)) {
        lua_pop(L, 1);
        return (LUA_NOREF);
    }
    *konst = fn_konst(L);
    return (luaL_ref(L, LUA_REGISTRYINDEX));
}

/*
 * Build pw's state from program p (pw takes a reference to it): the
 * sandbox, the libraries, builtin.lua in its own environment, then the
 * script, and look the hooks up.
 */
static int
state_build(struct pol_wrk *pw, struct pol_prog *p, struct sb *err)
{
    lua_State *L;

    state_close(pw);
    __atomic_add_fetch(&p->refcnt, 1, __ATOMIC_ACQ_REL);
    pw->prog = p;
    pw->mem = 0;
    L = pw->L = lua_newstate(pol__limit_alloc, pw);
    if (L == NULL) {
        sb_printf(err, "%s: cannot create a Lua state (policy_max_memory?)", p->path);
        state_close(pw);
        return (-1);
    }
    *(struct pol_wrk **)lua_getextraspace(L) = pw;
    pol__env_open(L);
    pol__lib_open(L);
    pol__obj_open(L);
    pol__client_open(L);
    pol__decl_open(L);
    pol__env_guard(L);
    /* builtin.lua's globals land in a table of their own, reading through to _G. */
    if (luaL_loadbuffer(L, pol_builtin_lua, sizeof pol_builtin_lua - 1, "=builtin.lua") != LUA_OK) {
        sb_printf(err, "%s", lua_tostring(L, -1));
        state_close(pw);
        return (-1);
    }
    lua_newtable(L);
    lua_newtable(L);
    lua_pushglobaltable(L);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "pol.builtin");
    AN(lua_setupvalue(L, -2, 1));
    if (run_chunk(pw, err) != 0)
        goto fail;
    if (luaL_loadbuffer(L, p->src, p->len, p->chunkname) != LUA_OK) {
        sb_printf(err, "%s", lua_tostring(L, -1));
        goto fail;
    }
    pol__env_chunk(L);
    if (run_chunk(pw, err) != 0)
        goto fail;
    pol__env_seal(pw);
    p->hooks = p->user_hooks = 0;
    lua_getfield(L, LUA_REGISTRYINDEX, "pol.builtin");
    for (int h = 0; h < POL_H_MAX; h++) {
        pw->ref_user[h] = pw->ref_builtin[h] = LUA_NOREF;
        if (lua_getglobal(L, pol__hook_name[h]) == LUA_TFUNCTION) {
            pw->ref_user[h] = hook_ref(L, &pw->konst_user[h]);
            p->hooks |= 1u << h;
            p->user_hooks |= 1u << h;
        } else {
            lua_pop(L, 1);
        }
        lua_pushstring(L, pol__hook_name[h]);
        if (lua_rawget(L, -2) == LUA_TFUNCTION) { /* its own, not _G's through __index */
            pw->ref_builtin[h] = hook_ref(L, &pw->konst_builtin[h]);
            p->hooks |= 1u << h;
        } else {
            lua_pop(L, 1);
        }
    }
    pw->defined = p->hooks;
    lua_pop(L, 1);
    lua_gc(L, LUA_GCCOLLECT);
    return (0);
fail:
    state_close(pw);
    return (-1);
}

/* ---- programs ---- */

/* A program of src (taken over, src[len] a NUL), named path in messages. */
static struct pol_prog *
prog_new(const char *path, char *src, size_t len, bool is_inline)
{
    struct pol_prog *p;

    OBJ_NEW(p, POL_PROG_MAGIC);
    AN(p);
    p->refcnt = 1;
    p->path = strdup(path);
    AN(p->path);
    AN(asprintf(&p->chunkname, "@%s", path) > 0);
    p->src = src;
    p->len = len;
    p->is_inline = is_inline;
    return (p);
}

static struct pol_prog *
prog_read(const char *path, struct sb *err)
{
    FILE *f = fopen(path, "r");
    const char *why = NULL;
    struct stat st;
    size_t len;
    char *src;
    long sz;

    if (f == NULL) {
        sb_printf(err, "%s: %s", path, strerror(errno));
        return (NULL);
    }
    /* A directory opens too, and then sizes as LONG_MAX (policy.load names any path). */
    if (fstat(fileno(f), &st) != 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
    else if (st.st_size > POL_SRC_MAX)
        why = "larger than 16 MB";
    if (why != NULL) {
        sb_printf(err, "%s: %s", path, why);
        fclose(f);
        return (NULL);
    }
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        sb_printf(err, "%s: %s", path, strerror(errno));
        fclose(f);
        return (NULL);
    }
    src = malloc((size_t)sz + 1);
    AN(src);
    len = fread(src, 1, (size_t)sz, f);
    fclose(f);
    if (len != (size_t)sz) {
        sb_printf(err, "%s: short read", path);
        free(src);
        return (NULL);
    }
    src[len] = '\0';
    return (prog_new(path, src, len, false));
}

/*
 * The line of the function on top of the stack (popped) that has its
 * first instruction: for a function that only returns a word, its return.
 */
static int
first_line(lua_State *L, lua_Debug *ar)
{
    lua_Integer line = 0;

    AN(lua_getinfo(L, ">SL", ar));
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        if (line == 0 || lua_tointeger(L, -1) < line)
            line = lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    return (line > 0 ? (int)line : ar->linedefined);
}

/*
 * A hook of the script's answered at load time (fn_konst) with a word
 * that hook may not return would fail every call: refuse the script
 * instead, with the line of the return.
 */
static int
check_konst(struct pol_wrk *pw, struct sb *err)
{
    char acts[256];
    lua_Debug ar;
    struct sb sb;
    int line;

    for (int h = 0; h < POL_H_MAX; h++) {
        if (pw->konst_user[h] == NULL || pol__hook_allows(h, pw->konst_user[h]))
            continue;
        sb_init(&sb, acts, sizeof acts);
        pol__hook_acts(h, &sb);
        lua_rawgeti(pw->L, LUA_REGISTRYINDEX, pw->ref_user[h]);
        line = first_line(pw->L, &ar);
        sb_printf(err, "%s:%d: %s returns \"%s\", not one of %s",
                  ar.source[0] == '@' ? ar.source + 1 : ar.short_src, line, pol__hook_name[h],
                  pw->konst_user[h], acts);
        return (-1);
    }
    return (0);
}

/* Compile p in a scratch state: p, or NULL (p unreferenced) with the reason in err. */
static struct pol_prog *
prog_compile(struct pol_prog *p, struct sb *err)
{
    struct pol_wrk pw;

    if (p == NULL)
        return (NULL);
    memset(&pw, 0, sizeof pw);
    pw.magic = POL_WRK_MAGIC;
    if (state_build(&pw, p, err) != 0) {
        pol__prog_unref(&p);
        return (NULL);
    }
    if (check_konst(&pw, err) != 0) {
        state_close(&pw);
        pol__prog_unref(&p);
        return (NULL);
    }
    /* The declarations, as the script's top level recorded them. */
    p->cfg = pol__decl_build(pw.L, err);
    state_close(&pw);
    if (p->cfg == NULL) {
        pol__prog_unref(&p);
        return (NULL);
    }
    return (p);
}

/* Read and compile in a scratch state; the program on success. */
struct pol_prog *
pol__prog_check(const char *path, struct sb *err)
{
    return (prog_compile(prog_read(path, err), err));
}

struct pol_prog *
pol__prog_check_src(const char *name, const char *src, size_t len, struct sb *err)
{
    char label[POL_INLINE_LABEL_MAX], *copy;

    if (len > POL_SRC_MAX) {
        sb_printf(err, "vcl.inline %s: larger than 16 MB", name);
        return (NULL);
    }
    snprintf(label, sizeof label, "<inline:%s>", name);
    copy = malloc(len + 1);
    AN(copy);
    memcpy(copy, src, len);
    copy[len] = '\0';
    return (prog_compile(prog_new(label, copy, len, true), err));
}

const char *
pol_builtin_source(size_t *lenp)
{
    *lenp = sizeof pol_builtin_lua - 1;
    return (pol_builtin_lua);
}

int
pol_check(const char *path, struct sb *err)
{
    struct pol_prog *p = pol__prog_check(path, err);

    if (p == NULL)
        return (-1);
    pol__prog_unref(&p);
    return (0);
}

/*
 * Make p the current program: a new generation, so each worker rebuilds
 * its state at its next hook call, unless its state was built from p
 * already (a program used again).  Takes its own reference to p.
 */
void
pol__prog_install(struct pol_prog *p)
{
    struct pol_prog *old;

    OBJ_CHECK(p, POL_PROG_MAGIC);
    __atomic_add_fetch(&p->refcnt, 1, __ATOMIC_ACQ_REL);
    AZ(pthread_mutex_lock(&mtx));
    old = cur;
    __atomic_store_n(&p->gen, cur_gen + 1, __ATOMIC_RELEASE);
    cur = p;
    __atomic_store_n(&cur_hooks, p->hooks, __ATOMIC_RELEASE);
    __atomic_store_n(&cur_user, p->user_hooks, __ATOMIC_RELEASE);
    __atomic_store_n(&cur_gen, p->gen, __ATOMIC_RELEASE);
    AZ(pthread_mutex_unlock(&mtx));
    pol__prog_unref(&old);
    /* After cur is set: a worker that sees the flag finds a program. */
    __atomic_store_n(&active, true, __ATOMIC_RELEASE);
}

static const struct wrk_slot pol_slot = { "pol", NULL, pol_wrk_fini, NULL };

void
pol_init(void)
{
    wrk_slot_register(&pol_slot);
}

void
pol_fini(void)
{
    AZ(pthread_mutex_lock(&mtx));
    pol__prog_unref(&cur);
    AZ(pthread_mutex_unlock(&mtx));
    pol__admin_fini(); /* the named programs hold backends: before the static ones' files */
    pol__decl_fini();
}

bool
pol_active(void)
{
    return (__atomic_load_n(&active, __ATOMIC_ACQUIRE));
}

bool
pol_has_deliver(void)
{
    return ((__atomic_load_n(&cur_hooks, __ATOMIC_ACQUIRE) & (1u << POL_H_DELIVER)) != 0);
}

bool
pol__user_has(enum pol_hook h)
{
    return ((__atomic_load_n(&cur_user, __ATOMIC_ACQUIRE) & (1u << h)) != 0);
}

bool
pol_has_hit(void)
{
    return (pol__user_has(POL_H_HIT));
}

bool
pol_has_log(void)
{
    return (pol__user_has(POL_H_LOG));
}

void
pol_wrk_fini(struct wrk *wrk)
{
    struct pol_wrk *pw = wrk->pol;

    if (pw == NULL)
        return;
    OBJ_CHECK(pw, POL_WRK_MAGIC);
    state_close(pw);
    free(pw->hbuf);
    pcre2_match_data_free(pw->re_md);
    pcre2_match_context_free(pw->re_mc);
    OBJ_FREE(&pw);
    wrk->pol = NULL;
}

/* The worker's state (made if it has none) built anew from p; NULL logged and counted. */
static struct pol_wrk *
state_for(struct wrk *wrk, struct pol_prog *p)
{
    struct pol_wrk *pw = wrk->pol;
    char ebuf[512];
    struct sb err;

    if (pw == NULL) {
        OBJ_NEW(pw, POL_WRK_MAGIC);
        AN(pw);
        pw->ctx_ref = LUA_NOREF;
        for (unsigned i = 0; i < POL_CTX_KEEP; i++)
            pw->ctx_keep_ref[i] = LUA_NOREF;
        wrk->pol = pw;
    }
    sb_init(&err, ebuf, sizeof ebuf);
    if (state_build(pw, p, &err) != 0) {
        STAT_INC(policy_error);
        log_msg(LOG_ERR, "policy: cannot build a worker's state: %s", ebuf);
        return (NULL);
    }
    STAT_INC(policy_state);
    return (pw);
}

struct pol_wrk *
pol__state(struct wrk *wrk, bool in_request)
{
    struct pol_wrk *pw = wrk->pol;
    struct pol_prog *p;

    if (pw != NULL && pw->L != NULL &&
        (in_request || __atomic_load_n(&pw->prog->gen, __ATOMIC_ACQUIRE) ==
                           __atomic_load_n(&cur_gen, __ATOMIC_ACQUIRE)))
        return (pw);
    AZ(pthread_mutex_lock(&mtx));
    p = cur;
    __atomic_add_fetch(&p->refcnt, 1, __ATOMIC_ACQ_REL);
    AZ(pthread_mutex_unlock(&mtx));
    pw = state_for(wrk, p);
    pol__prog_unref(&p);
    return (pw);
}

struct pol_wrk *
pol__state_prog(struct wrk *wrk, struct pol_prog *p)
{
    struct pol_wrk *pw = wrk->pol;

    OBJ_CHECK(p, POL_PROG_MAGIC);
    if (pw != NULL && pw->L != NULL && pw->prog == p)
        return (pw);
    return (state_for(wrk, p));
}

struct pol_prog *
pol__prog_ref(struct pol_prog *p)
{
    if (p != NULL)
        __atomic_add_fetch(&p->refcnt, 1, __ATOMIC_ACQ_REL);
    return (p);
}

const char *
pol__prog_path(const struct pol_prog *p)
{
    OBJ_CHECK(p, POL_PROG_MAGIC);
    return (p->path);
}

const char *
pol__prog_src(const struct pol_prog *p, size_t *lenp)
{
    OBJ_CHECK(p, POL_PROG_MAGIC);
    *lenp = p->len;
    return (p->src);
}

bool
pol__prog_is_inline(const struct pol_prog *p)
{
    OBJ_CHECK(p, POL_PROG_MAGIC);
    return (p->is_inline);
}

struct pol_cfg *
pol__prog_cfg(const struct pol_prog *p)
{
    OBJ_CHECK(p, POL_PROG_MAGIC);
    return (p->cfg);
}

bool
pol_has_backend(void)
{
    bool rv;

    AZ(pthread_mutex_lock(&mtx));
    rv = cur != NULL && !pol__decl_empty(cur->cfg);
    AZ(pthread_mutex_unlock(&mtx));
    return (rv);
}

struct clu *
pol_cluster(void)
{
    struct clu *c = NULL;

    AZ(pthread_mutex_lock(&mtx));
    if (cur != NULL && (c = pol__decl_cluster(cur->cfg)) != NULL)
        (void)clu_ref(c);
    AZ(pthread_mutex_unlock(&mtx));
    return (c);
}

unsigned
pol__prog_refs(const struct pol_prog *p)
{
    OBJ_CHECK(p, POL_PROG_MAGIC);
    return (__atomic_load_n(&p->refcnt, __ATOMIC_ACQUIRE));
}

bool
pol__prog_is_cur(const struct pol_prog *p)
{
    bool rv;

    AZ(pthread_mutex_lock(&mtx));
    rv = p == cur;
    AZ(pthread_mutex_unlock(&mtx));
    return (rv);
}
