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
 * behaviour becomes optional in surogat, its row gets FEAT_CHOICE (off by
 * default) or FEAT_CHOICE_ON (on by default) and the code reads the bit
 * in par.feature.
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
FEATURE(esi_ignore_https, FEAT_CHOICE,
        "an <esi:include src=\"https://...\"> is fetched as http:// (else it is ignored with "
        "a warning)")
FEATURE(esi_disable_xml_check, FEAT_CHOICE,
        "a body whose first character is not '<' is parsed for ESI all the same")
FEATURE(esi_ignore_other_elements, FEAT_ON,
        "elements other than ESI's are always passed through as text, never checked")
FEATURE(esi_remove_bom, FEAT_CHOICE, "a UTF-8 byte order mark before the first '<' is dropped")
FEATURE(esi_include_onerror, FEAT_CHOICE_ON,
        "on by default: an include that fails without onerror=\"continue\" cuts the page; off: "
        "a failing include is left out, as Varnish does without the feature")
FEATURE(wait_silo, FEAT_ON,
        "the file store is always recovered before the first connection is accepted")
FEATURE(validate_headers, FEAT_ON,
        "a header value with CR, LF or NUL set by the policy is always refused")
FEATURE(busy_stats_rate, FEAT_ON,
        "every thread counts into its own block, summed when read: busy workers' counters are "
        "always current")
#undef FEATURE
