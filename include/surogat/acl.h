/*
 * acl -- access control lists of IP addresses and prefixes, IPv4 and
 * IPv6: who may PURGE (the purge_acl parameter), later Lua's
 * surogat.acl{}.
 *
 * A list is text: entries separated by commas (and optional blanks),
 * each an address ("127.0.0.1", "::1") or a prefix ("10.0.0.0/8",
 * "2001:db8::/32"), optionally preceded by '!' to exclude it.  The most
 * specific entry that contains an address decides (longest prefix, as
 * Varnish's ACLs); on equal length an exclusion wins; no entry: no match.
 * Host bits past a prefix are ignored ("10.1.2.3/8" is 10.0.0.0/8).  An
 * IPv4-mapped IPv6 address (::ffff:1.2.3.4) is matched as the IPv4
 * address.  An empty list matches nothing.
 *
 * A parsed list is immutable: any number of threads may match against it.
 */
#ifndef SUROGAT_ACL_H
#define SUROGAT_ACL_H

#include <stdbool.h>

struct acl; /* opaque */
struct sb;
struct sockaddr;

/* Parse `spec`; NULL with "acl: ..." naming the bad entry in err. */
struct acl *acl_parse(const char *spec, struct sb *err);
void acl_free(struct acl **aclp); /* *aclp = NULL; NULL is fine */
unsigned acl_entries(const struct acl *acl);
/* Whether an address in text form (as sess.client_ip) matches; false for junk. */
bool acl_match_str(const struct acl *acl, const char *ip);
/* The same for an AF_INET or AF_INET6 socket address; false for other families. */
bool acl_match_sa(const struct acl *acl, const struct sockaddr *sa);

#endif
