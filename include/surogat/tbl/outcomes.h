/*
 * How a request was answered -- no include guard: an X-macro table.
 *
 * OUTCOME(name, doc): `name` is what the access log (%{cache}), the live
 * request log (surogatctl log, its -c filter) and the status page show.
 * One table, so the three can never disagree.
 */
OUTCOME(NONE, "Not answered yet (shown as \"-\"): the client went away or the head was bad.")
OUTCOME(HIT, "From the cache.")
OUTCOME(GRACE, "A stale object from the cache, refreshed in the background.")
OUTCOME(STALE, "A stale object from the cache because the backend failed.")
OUTCOME(REVALIDATED, "A stale object from the cache, renewed by the backend with a 304.")
OUTCOME(COLLAPSED, "Streamed from another request's fetch of the same object.")
OUTCOME(MISS, "Fetched from the backend for the cache.")
OUTCOME(PASS, "Fetched from the backend, not for the cache.")
OUTCOME(STATIC, "From a static-file backend.")
OUTCOME(SYNTH, "A response surogat made itself: an error, a policy's synth.")
OUTCOME(PIPE, "Bytes copied both ways between the client and the backend.")
OUTCOME(TUNNEL, "An upgrade (WebSocket ...) the backend accepted with a 101: bytes copied both "
        "ways until a side closed or tunnel_timeout.")
OUTCOME(PURGE, "A PURGE request.")
#undef OUTCOME
