/*
 * Varnish's feature flags, the values of the `feature` parameter -- no
 * include guard: an X-macro table.
 *
 * FEATURE(name, state, why)
 *
 * The features of varnishd 7.1, each with what surogat always does:
 * FEAT_ON, the behaviour is there and cannot be turned off; FEAT_OFF, it
 * is not there and cannot be turned on.  A `feature` value that asks for
 * the other state is refused with `why`, so that a varnishd command line
 * ported as it is says at once what would not behave as it did.  When a
 * behaviour becomes optional in surogat, its row gets FEAT_CHOICE and the
 * code reads the bit in par.feature.
 */
FEATURE(http2, FEAT_ON,
        "HTTP/2 is chosen per listen address: tls ones offer it by ALPN unless ,h1only, "
        "cleartext ones take it with prior knowledge when ,h2c")
FEATURE(short_panic, FEAT_OFF, "a panic always writes its whole dump to standard error")
FEATURE(no_coredump, FEAT_OFF,
        "surogatd stays dumpable after dropping root, so that a panic leaves a core file "
        "where the system keeps them")
FEATURE(https_scheme, FEAT_ON,
        "the host of an https:// request target always replaces the Host header, as that of "
        "an http:// one does")
FEATURE(http_date_postel, FEAT_OFF,
        "dates (Date, Expires, Last-Modified ...) are read in the three RFC 9110 formats only; "
        "others count as invalid")
FEATURE(esi_ignore_https, FEAT_OFF, "surogat does not process ESI")
FEATURE(esi_disable_xml_check, FEAT_OFF, "surogat does not process ESI")
FEATURE(esi_ignore_other_elements, FEAT_OFF, "surogat does not process ESI")
FEATURE(esi_remove_bom, FEAT_OFF, "surogat does not process ESI")
FEATURE(esi_include_onerror, FEAT_OFF, "surogat does not process ESI")
FEATURE(wait_silo, FEAT_ON,
        "the file store is always recovered before the first connection is accepted")
FEATURE(validate_headers, FEAT_ON,
        "a header value with CR, LF or NUL set by the policy is always refused")
FEATURE(busy_stats_rate, FEAT_ON,
        "every thread counts into its own block, summed when read: busy workers' counters are "
        "always current")
#undef FEATURE
