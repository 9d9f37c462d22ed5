/*
 * The records of a request trace (`surogatctl log -g`) -- no include
 * guard: an X-macro table.
 *
 * TRACE_TAG(NAME, "Name", doc): TRACE_T_NAME in enum trace_tag, "Name" in
 * the trace's output and in surogatctl(1), where the docs come from.  The
 * order is the wire order of the rings: append new tags at the end.  The
 * rows of one message stay together, in their order (Method, URL,
 * Protocol, Header; Protocol, Status, Reason, Header): trace_http()
 * counts on it.
 */
TRACE_TAG(BEGIN, "Begin",
          "The transaction begins: its kind (req, bereq), its parent's id (0: none) and why: rxreq "
          "(a client request), fetch (a miss, fetched for the cache), pass (fetched, not stored), "
          "bgfetch (a background refresh of a stale object), esi (an ESI include: a request of "
          "its own, its parent the page's request).")
TRACE_TAG(END, "End", "The transaction is complete.")
TRACE_TAG(LINK, "Link",
          "A child transaction of this one: its kind, id and why (`bereq 13 fetch`).  The request "
          "waits for it in -g request, and shows it indented below itself.")
TRACE_TAG(REQ_START, "ReqStart",
          "The client's address and port (behind trusted_proxies, the client they name).")
TRACE_TAG(REQ_METHOD, "ReqMethod", "The request method.")
TRACE_TAG(REQ_URL, "ReqURL", "The request-target.")
TRACE_TAG(REQ_PROTOCOL, "ReqProtocol", "The request's protocol version.")
TRACE_TAG(REQ_HEADER, "ReqHeader",
          "A request header field (`Name: value`), as the client sent it, before the policy.")
TRACE_TAG(RESTART, "Restart", "A hook said \"restart\": the request goes back to recv (its count).")
TRACE_TAG(HOOK, "Hook",
          "A policy hook ran: its name, the action returned, and whose function answered: "
          "`recv pass builtin` (builtin.lua's), `script` (the script's), `default` (neither "
          "returned an action: the hook's default).")
TRACE_TAG(BUILTIN, "Builtin",
          "Without a policy script, what the built-in policy decided, and why: `recv hash`, "
          "`recv pass: the request has a Cookie`.")
TRACE_TAG(HASH, "Hash",
          "The cache key looked up: its pieces (the host, the request-target, then the policy's "
          "surogat.hash_data() pieces), separated by ` | `.")
TRACE_TAG(LOOKUP, "Lookup",
          "What the cache lookup found: hit, grace, miss, hit-for-miss, busy (another request is "
          "fetching the key: the request waits on its waiting list, and looks up again when the "
          "fetch streams or ends), coalesce-timeout ..., with the object's age, remaining ttl and "
          "hits, and after how long a busy wait.")
TRACE_TAG(BACKEND, "Backend",
          "The backend a fetch went to: its name and address, and whether the connection was "
          "new or reused.")
TRACE_TAG(BEREQ_METHOD, "BereqMethod", "The backend request's method.")
TRACE_TAG(BEREQ_URL, "BereqURL", "The backend request's target.")
TRACE_TAG(BEREQ_PROTOCOL, "BereqProtocol", "The backend request's protocol version.")
TRACE_TAG(BEREQ_HEADER, "BereqHeader",
          "A backend request header field, as sent (after backend_fetch).")
TRACE_TAG(BERESP_PROTOCOL, "BerespProtocol", "The backend response's protocol version.")
TRACE_TAG(BERESP_STATUS, "BerespStatus", "The backend response's status.")
TRACE_TAG(BERESP_REASON, "BerespReason", "The backend response's reason phrase.")
TRACE_TAG(BERESP_HEADER, "BerespHeader",
          "A backend response header field, as received (before backend_response).")
TRACE_TAG(STORE, "Store",
          "The cacheability decision on a miss's response, and its reason: `storable: ttl 60 "
          "grace 10 keep 0 from max-age` (the header, default_ttl, or the policy's beresp.ttl), or "
          "`uncacheable: set-cookie (the response sets a cookie); hit-for-miss 120` (the token "
          "is the one Cache-Status gives as detail=).")
TRACE_TAG(FETCH_ERROR, "FetchError",
          "Why a fetch failed or a response was refused: connect failed, busy, timeouts, a "
          "malformed or dishonest response (the backend_refused reasons).")
TRACE_TAG(RETRY, "Retry",
          "The fetch goes again: the policy's \"retry\", or failover to another backend.")
TRACE_TAG(RESP_PROTOCOL, "RespProtocol", "The protocol of the response to the client.")
TRACE_TAG(RESP_STATUS, "RespStatus", "The status sent to the client.")
TRACE_TAG(RESP_REASON, "RespReason", "The reason phrase sent to the client.")
TRACE_TAG(RESP_HEADER, "RespHeader",
          "A response header field sent to the client, after the deliver hook (the framing "
          "fields, Content-Length, Transfer-Encoding and Connection, are the transport's).")
TRACE_TAG(TIMESTAMP, "Timestamp",
          "`Event: absolute since-start since-previous`, seconds: Start, Lookup, Resp (the head "
          "handed to the transport) and End for a request; Start, Bereq (sent), Beresp (head "
          "received), BerespBody and End for a backend transaction.")
TRACE_TAG(LENGTH, "Length", "Body bytes sent to the client.")
TRACE_TAG(CACHE, "Cache",
          "How the request was answered, as the access log's %{cache}: HIT, MISS, PASS, "
          "SYNTH ... (the OUTCOME table).")
#undef TRACE_TAG
