/*
 * Whether a response is stored, and why not -- no include guard: an
 * X-macro table.
 *
 * FRESH_STORE_WHY(NAME, "token", "why"): FRESH_NAME in enum fresh_store;
 * the token is fresh_store_name(), RFC 9211's Cache-Status detail= of a
 * response not stored (detail=set-cookie) and the reason in the trace's
 * Store record; `why` is the trace's explanation.  fresh_storable()
 * returns the rows up to NO_FRESHNESS_NO_VALIDATOR, in the order its
 * checks run; the fetch adds the ones after it.
 */
FRESH_STORE_WHY(STORE, "stored", "storable")
FRESH_STORE_WHY(METHOD, "method", "the request method is not GET or HEAD")
FRESH_STORE_WHY(STATUS, "status",
                "the status is not a final one this cache stores: 1xx, 206, 304, over 599")
FRESH_STORE_WHY(MUST_UNDERSTAND, "must-understand",
                "must-understand with a status this cache does not know")
FRESH_STORE_WHY(NO_STORE_REQ, "request-no-store", "the request says Cache-Control: no-store")
FRESH_STORE_WHY(NO_STORE_RESP, "no-store", "the response says Cache-Control: no-store")
FRESH_STORE_WHY(PRIVATE, "private", "the response says Cache-Control: private")
FRESH_STORE_WHY(AUTHORIZATION, "authorization",
                "the request has Authorization and the response is not public, s-maxage or "
                "must-revalidate")
FRESH_STORE_WHY(VARY_STAR, "vary-star", "Vary: * matches no later request")
FRESH_STORE_WHY(SET_COOKIE, "set-cookie", "the response sets a cookie: Set-Cookie")
FRESH_STORE_WHY(NOT_CACHEABLE, "uncacheable-status",
                "no max-age, s-maxage, Expires or public, and the status is not cacheable by "
                "default")
/*
 * Heuristically cacheable status, but no Last-Modified, no ETag and
 * default_ttl 0: stored, it would be stale at once and not even
 * revalidatable, so every use would be a full fetch.
 */
FRESH_STORE_WHY(NO_FRESHNESS_NO_VALIDATOR, "no-freshness",
                "ttl 0: no freshness information, no max-age, s-maxage, Expires or "
                "Last-Modified, and no validator; default_ttl is 0")
/* The fetch's own reasons, after RFC 9111's verdict. */
FRESH_STORE_WHY(STALE_ON_ARRIVAL, "stale-on-arrival",
                "ttl 0: stale on arrival, its Age is past its freshness lifetime")
FRESH_STORE_WHY(NO_CACHE, "no-cache",
                "the response says Cache-Control: no-cache: every use must be revalidated")
FRESH_STORE_WHY(POLICY, "policy",
                "the policy's backend_response said pass, uncacheable or a ttl of 0")
FRESH_STORE_WHY(VARY_TOO_LONG, "vary-too-long",
                "the request's values of the fields Vary names are too long to keep")
FRESH_STORE_WHY(TOO_BIG, "too-big", "the body is larger than max_object_size or the store")
FRESH_STORE_WHY(STORE_FAILED, "store-failed",
                "the store could not make room for it, or the workspace ran out")
#undef FRESH_STORE_WHY
