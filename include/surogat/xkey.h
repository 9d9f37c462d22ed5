/*
 * xkey -- surrogate keys: tags on cached objects, purged by tag.
 *
 * An object's tags come from its stored head, so that an object recovered
 * from a persistent store can be indexed again by the same call:
 *   Surrogate-Key: a b c     blank-separated (Fastly)
 *   xkey: a, b c             blank- or comma-separated (Varnish's xkey)
 * Every such field counts; the fields stay in the head and are delivered.
 * A tag is at most XKEY_TAG_MAX bytes (longer ones are ignored), an object
 * has at most XKEY_OBJ_MAX tags (the rest are ignored), and tags are
 * case-sensitive.
 *
 * Locks: the index is sharded by tag hash, one mutex per shard, never
 * two at once.  They are never held while a shard lock of hsh.c is taken,
 * nor taken while one is held: objects are indexed before hsh_unbusy()
 * takes its lock, unindexed when their last reference goes (no lock
 * held), and a purge collects references under the tag lock, drops it,
 * then calls hsh_kill().
 */
#ifndef SUROGAT_XKEY_H
#define SUROGAT_XKEY_H

#include <stdbool.h>
#include <stddef.h>

struct cobj;
struct txt;

#define XKEY_TAG_MAX 1024
#define XKEY_OBJ_MAX 256

int xkey_init(void);
void xkey_fini(void); /* after hsh_fini(): every object unindexed */
/*
 * Split a tag list into out[0..max-1]; returns how many (at most max).
 * Blanks separate tags, and commas too when `commas`.
 */
unsigned xkey_split(const char *s, size_t len, bool commas, struct txt *out, unsigned max);
/* The tags of an object's stored head, duplicates removed; returns how many. */
unsigned xkey_obj_tags(const struct cobj *oc, struct txt *out, unsigned max);
/*
 * Index oc under its tags: the caller owns it (a busy object about to be
 * published, or one recovered from storage).  A no-op for an untagged
 * object.  Call once per object.
 */
void xkey_index(struct cobj *oc);
/* Forget oc: called by hsh.c when its last reference goes. */
void xkey_unindex(struct cobj *oc);
/*
 * Purge every object carrying any tag of the list `tags` (blank- or
 * comma-separated), hard or soft (see hsh_purge_key); returns how many
 * objects.  Call with no lock held.
 */
unsigned xkey_purge(const char *tags, size_t len, bool soft);

#endif
