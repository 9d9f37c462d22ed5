/*
 * The runtime parameters -- no include guard: an X-macro table.
 *
 * PARAM(name, type, default, min, max, flags, doc)
 *
 * Every parameter is settable with -p name=value, in the -c config file
 * and, when flagged PAR_LIVE, at runtime through the admin interface; a
 * reload (SIGHUP) applies the PAR_LIVE and PAR_LOAD ones (see par.h).
 * `surogatd -x params` prints this table; the man page is built from it.
 * Types: UINT (a count), BYTES (a size: 64k, 1m, 2g), DURATION (seconds
 * with an optional unit: 250ms, 5s, 2m, 1h, 1d), BOOL (on/off), STRING,
 * FEATURE (Varnish's +name,-name flags, tbl/features.h).  Varnish's names
 * for these parameters are in tbl/vparams.h.
 */
PARAM(thread_pools, UINT, "2", "1", "64", PAR_RESTART,
      "Number of worker pools. Sessions are spread over the pools round-robin; each pool has "
      "its own queue and lock, so more pools means less lock contention.")
PARAM(thread_pool_min, UINT, "4", "1", "10000", PAR_LIVE,
      "Worker threads started per pool at startup and never retired.")
PARAM(thread_pool_max, UINT, "500", "1", "10000", PAR_LIVE,
      "Most worker threads per pool. A pool grows while tasks wait in its queue.")
PARAM(thread_pool_add_delay, DURATION, "1ms", "0s", "10s", PAR_LIVE,
      "A new worker is started for a request that has waited this long in the queue. Busy "
      "workers drain the queue themselves when the work is CPU-bound (cache hits), so extra "
      "threads would only add context switches; a request that waits means the workers are "
      "blocked on backends.")
PARAM(thread_pool_timeout, DURATION, "300s", "10ms", NULL, PAR_LIVE,
      "An idle worker above thread_pool_min exits after this long without work.")
PARAM(thread_queue_limit, UINT, "256", "0", NULL, PAR_LIVE,
      "Requests that may wait for a worker in each pool. When the queue is full a new request "
      "is answered 503 with Retry-After at once and its connection closed (sess_dropped). "
      "Background refreshes of stale objects are bounded the same way: when as many wait, a "
      "refresh is skipped (cache_bgfetch_skipped) and a later request tries again.")
PARAM(listen_depth, UINT, "1024", "1", NULL, PAR_RESTART,
      "Backlog of each listen socket: connections the kernel queues before accept().")
PARAM(feature, FEATURE,
      "+http2,+https_scheme,+esi_ignore_other_elements,+esi_include_onerror,+wait_silo,"
      "+validate_headers,+busy_stats_rate",
      NULL, NULL,
      PAR_LIVE,
      "Varnish's feature flags, so that command lines and scripts written for varnishd work: "
      "+NAME or -NAME separated by commas, after an optional \"default\" or \"none\". "
      "Most of Varnish's behaviours are fixed in surogat, on or off (surogat.conf(5) lists "
      "them); a value asking for the other state is refused with the reason, as is a name "
      "Varnish does not have. The ESI ones esi_ignore_https, esi_disable_xml_check, "
      "esi_remove_bom and esi_include_onerror are choices, read when a page is stored or "
      "assembled.")
PARAM(timeout_idle, DURATION, "5s", "10ms", NULL, PAR_LIVE,
      "How long an idle keep-alive client connection is kept open between requests, and the "
      "longest pause within a request body.")
PARAM(timeout_req, DURATION, "10s", "10ms", NULL, PAR_LIVE,
      "A request head must be complete this long after its first byte, and a request body "
      "this long after its head plus one second per req_body_min_rate bytes received. "
      "Meanwhile a slow client holds no worker: its bytes so far wait with the session in "
      "the waiter. Past the deadline the connection is answered 408 and closed "
      "(sess_timeout_req), checked about once a second.")
PARAM(req_body_buffer, BYTES, "16k", "0", "64k", PAR_LIVE,
      "Request body bytes read before the request is dispatched, without a worker waiting "
      "for them: a body this small arrives whole before the request runs and is then served "
      "from memory; of a larger one (or a chunked one larger than this) the first bytes are "
      "buffered and the rest is streamed to the backend by a worker, bounded by "
      "req_body_min_rate. A parked session keeps what it received, so the worst case is "
      "http_req_size plus this per slow connection. At most 64k: the body shares the "
      "worker's receive buffer with the head. 0 streams every body.")
PARAM(req_body_min_rate, BYTES, "500", "0", NULL, PAR_LIVE,
      "Slowest request body accepted, in bytes per second: a body must be complete "
      "timeout_req after its head plus one second per this many bytes received, or it is "
      "answered 408. The same bound holds whether the body waits in the waiter or a worker "
      "streams it, so that holding a worker costs a client at least this bandwidth. 0: no "
      "minimum (each pause is still bounded by timeout_idle).")
PARAM(timeout_linger, DURATION, "50ms", "0s", NULL, PAR_LIVE,
      "A worker holding a taker slot (one per CPU) that finds no work waits this long for "
      "a parked keep-alive session to turn ready (the next request on any idle connection) "
      "before it sleeps.  0 disables the wait.")
PARAM(send_timeout, DURATION, "600s", "1s", NULL, PAR_LIVE,
      "Longest time a response may take to reach a client; after it the connection is "
      "closed. Also bounds each single write to a slow client.")
PARAM(shutdown_timeout, DURATION, "30s", "0s", NULL, PAR_LIVE,
      "On SIGTERM, how long in-flight requests may take to finish before the daemon exits.")
PARAM(shutdown_delay, DURATION, "0s", "0s", "1h", PAR_LIVE,
      "On SIGTERM, how long to go on accepting and serving, with the admin listener's "
      "/health answering 503 draining, before the listeners close: the time a load "
      "balancer in front needs to take the node out (its check interval times its fall "
      "count). A second SIGTERM or SIGINT cuts it short.")
PARAM(http_req_size, BYTES, "32k", "256", "4m", PAR_LIVE,
      "Largest client request head (request line and headers). Larger heads get 431, or "
      "414 if the request line alone does not fit.")
PARAM(http_req_hdr_len, BYTES, "8k", "40", "1m", PAR_LIVE,
      "Longest single request header line; longer gets 431. A longer request line gets 414.")
PARAM(http_max_hdr, UINT, "64", "8", "1024", PAR_LIVE,
      "Most header fields in a request or a backend response; more gets 431 (client) or 502.")
PARAM(http_resp_size, BYTES, "32k", "256", "4m", PAR_LIVE,
      "Largest backend response head; a larger one is answered 502.")
PARAM(http_chunk_ext_max, BYTES, "1k", "0", "64k", PAR_LIVE,
      "Longest chunk extension or trailer section accepted in a chunked body.")
PARAM(workspace_client, BYTES, "64k", "8k", "16m", PAR_LIVE,
      "Per-request memory arena for the request, the backend request and the response "
      "heads. When it runs out the request is answered 500 (ws_overflow).")
PARAM(h2_max_concurrent_streams, UINT, "100", "1", "10000", PAR_LIVE,
      "HTTP/2: requests a client may have under way at once on one connection "
      "(SETTINGS_MAX_CONCURRENT_STREAMS). A stream the client has reset counts until its "
      "request has ended here; one over the limit is refused with REFUSED_STREAM, which a "
      "client may retry. New connections get a new value.")
PARAM(h2_initial_window_size, BYTES, "64k", "1k", "2047m", PAR_LIVE,
      "HTTP/2: request body bytes a client may send on one stream ahead of what surogat "
      "has passed on (SETTINGS_INITIAL_WINDOW_SIZE), so the most body a stream holds in "
      "memory; a connection may hold 16 times as much in all. New connections get a new "
      "value.")
PARAM(h2_rapid_reset_limit, UINT, "100", "1", NULL, PAR_LIVE,
      "HTTP/2: streams a client may reset (RST_STREAM) per second on one connection, in "
      "bursts of as many; past it the connection is closed with GOAWAY ENHANCE_YOUR_CALM "
      "(Rapid Reset, CVE-2023-44487).")
PARAM(h2_frame_flood_limit, UINT, "1000", "10", NULL, PAR_LIVE,
      "HTTP/2: frames that ask work of surogat but carry no request a client may send per "
      "second on one connection, in bursts of as many: SETTINGS, PING, PRIORITY, "
      "WINDOW_UPDATE, and DATA, HEADERS or CONTINUATION frames that are empty and end "
      "nothing. Past it the connection is closed with GOAWAY ENHANCE_YOUR_CALM.")
PARAM(h2_window_timeout, DURATION, "10s", "100ms", NULL, PAR_LIVE,
      "HTTP/2: how long a response may make no progress because the client gives it no "
      "flow-control window or reads nothing from the connection. Then the stream is reset "
      "and its worker freed, or, when the connection's own window or the socket stays "
      "shut, the connection is closed (zero-window slowloris).")
PARAM(backend_connect_timeout, DURATION, "3.5s", "1ms", NULL, PAR_LIVE,
      "Default time allowed to open a connection to a backend. Failure answers 503.")
PARAM(backend_first_byte_timeout, DURATION, "60s", "1ms", NULL, PAR_LIVE,
      "Default time to wait for the first byte of a backend response. Failure answers 504.")
PARAM(backend_wait_worker, BOOL, "off", NULL, NULL, PAR_LIVE,
      "on: a pass or miss waits for its backend's answer on its worker thread, blocked. off: "
      "once its request is sent it lets go of the worker and the waiter watches the backend "
      "connection, as it watches idle clients, until the answer is readable or the first byte "
      "timeout passes; a worker then takes it on. ESI includes, pipes, TLS backends and "
      "requests whose policy state cannot be carried (see fetch_wait_on_thread) always wait "
      "on their worker.")
PARAM(backend_between_bytes_timeout, DURATION, "60s", "1ms", NULL, PAR_LIVE,
      "Default longest silence while reading a backend response. Before the head is complete "
      "this answers 504; during the body the client connection is aborted.")
PARAM(backend_idle_timeout, DURATION, "60s", "1s", NULL, PAR_LIVE,
      "An idle pooled backend connection older than this is closed instead of reused.")
PARAM(backend_max_connections, UINT, "0", "0", NULL, PAR_LIVE,
      "Most connections open to one backend (0: no limit). Beyond it requests get 503 at once "
      "(backend_busy).")
PARAM(backend_max_retries, UINT, "1", "0", "10", PAR_LIVE,
      "Times an idempotent request without a body is retried on a fresh connection when a "
      "reused backend connection turns out to be closed before any response byte arrived.")
PARAM(tls_handshake_timeout, DURATION, "10s", "10ms", NULL, PAR_LIVE,
      "Longest time a client may take to complete the TLS handshake on a tls listen address. "
      "The handshake holds a worker, so this bounds what a slow or silent client costs.")
PARAM(proxy_header_timeout, DURATION, "5s", "100ms", NULL, PAR_LIVE,
      "Longest time, from the accept, in which a connection to a PROXY listen address must "
      "deliver its whole PROXY protocol header; past it the connection is closed "
      "(proxy_timeout). One that has sent nothing yet waits without a thread, one that has "
      "sent part of the header holds a worker, so this bounds what a slow sender costs.")
PARAM(trusted_proxies, STRING, "", NULL, NULL, PAR_LIVE,
      "Proxies in front whose X-Forwarded-For is believed, as purge_acl: comma-separated "
      "addresses and prefixes, '!' to exclude. For a request from such a peer, the client "
      "(client.ip, ACLs, purge_acl, logs, the X-Forwarded-For sent on) is the right-most "
      "address of X-Forwarded-For that is not itself trusted, its port 0. From any other "
      "peer X-Forwarded-For is never believed. Empty: nobody. A value that does not parse "
      "trusts nobody and is logged.")
PARAM(tls_ciphers, STRING,
      "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
      "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305",
      NULL, NULL, PAR_RESTART | PAR_LOAD,
      "TLS 1.2 cipher list (OpenSSL syntax): forward secrecy and AEAD only. Read when "
      "certificates are loaded, at startup and on SIGHUP.")
PARAM(tls_ciphersuites, STRING,
      "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256", NULL, NULL,
      PAR_RESTART | PAR_LOAD,
      "TLS 1.3 cipher suites (OpenSSL syntax). Read when certificates are loaded, at startup "
      "and on SIGHUP.")
PARAM(tls_ticket_rotate, DURATION, "1h", "1s", "7d", PAR_LIVE,
      "Session tickets are encrypted with a key replaced this often; a ticket made with the "
      "previous key is still accepted (and replaced by a new one), so a client resumes its "
      "session for one to two periods. The keys live in memory only: a restart ends every "
      "ticket.")
PARAM(access_log, STRING, "", NULL, NULL, PAR_RESTART,
      "Access log file, relative to the working directory, in access_log_format. Empty: no "
      "access log file. Reopened on SIGUSR1 (log.reopen).")
PARAM(access_log_format, STRING, "combined", NULL, NULL, PAR_RESTART,
      "Format of access log lines: \"combined\" (NCSA combined followed by the total time and "
      "the time to the first byte in microseconds, the backend and the cache status), "
      "\"json\" (one JSON object per line), or a format string of %-fields such as "
      "%h [%t] %r %s %b %{cache}x %D (the fields are listed in surogatd(8)). A bad "
      "format stops surogatd at startup.")
PARAM(access_log_syslog, BOOL, "off", NULL, NULL, PAR_RESTART,
      "Also send each access log line to syslog (syslog_socket, facility syslog_facility, "
      "severity info), one datagram per request; with or without an access_log file.")
PARAM(error_log, STRING, "", NULL, NULL, PAR_RESTART,
      "Daemon log file (errors, policy errors with file:line, warnings). Empty: standard "
      "error in the foreground (-F), else surogatd.log in the working directory (-n); "
      "\"syslog\": syslog (syslog_socket, facility syslog_facility, the message's level as its "
      "severity). Reopened on SIGUSR1 (log.reopen).")
PARAM(syslog_facility, STRING, "daemon", NULL, NULL, PAR_RESTART,
      "Syslog facility of the messages surogatd sends: daemon, user, local0 .. local7, auth, "
      "authpriv, cron, ftp, kern, lpr, mail, news, syslog or uucp.")
PARAM(syslog_socket, STRING, "/dev/log", NULL, NULL, PAR_RESTART,
      "Datagram socket of the syslog daemon. Messages are RFC 3164, as syslog(3) sends them; "
      "one that cannot be sent at once (no syslog daemon, a full queue) is dropped, so "
      "logging never blocks a worker.")
PARAM(rlog_records, UINT, "1024", "16", "1048576", PAR_RESTART,
      "Records in each worker's request log ring, read by `surogatctl log` (rounded up to a "
      "power of two; under 500 bytes each, touched only as the worker fills them). The ring "
      "keeps the latest requests, so `log -d` shows up to this many per worker; a reader more "
      "than a ring behind reports the records it missed.")
PARAM(trace_ring_size, BYTES, "1m", "64k", "1g", PAR_RESTART,
      "Bytes of each worker's request-trace ring, read by `surogatctl log -g` (rounded up to "
      "a power of two). A worker writes trace records only while such a reader is attached, "
      "makes its ring when it first does, and touches its pages only as it fills them. A "
      "traced request takes about 1.5 KiB; a reader more than a ring behind reports the "
      "records it missed.")
PARAM(cli_auth_timeout, DURATION, "10s", "10ms", "600s", PAR_LIVE,
      "With a secret file (-S), how long a new admin connection has to authenticate: it is "
      "closed when this has passed since it connected, whatever it sent meanwhile (nothing, "
      "part of a line, commands refused for want of authentication). Without -S, connecting "
      "is the credential and this does not apply (see cli_peer_max and surogatctl(1)).")
PARAM(cli_peer_max, UINT, "4", "1", "16", PAR_LIVE,
      "Most admin connections one client address may hold that have not authenticated yet "
      "(without -S: that have not run a command yet); another one from that address closes "
      "the oldest of them. All Unix-socket clients count as one address.")
PARAM(admin_http, STRING, "", NULL, NULL, PAR_RESTART,
      "Address (HOST:PORT, [IPV6]:PORT or :PORT) of the HTTP admin listener: Prometheus "
      "metrics at /metrics, a live status page at / and its data at /status.json, and "
      "/health for a load balancer. Separate from client traffic and served by a thread of "
      "its own. Empty: off. -M sets it too.")
PARAM(log_level, UINT, "6", "0", "7", PAR_LIVE,
      "Least severe daemon log message written, as a syslog level: 3 err (failures the daemon "
      "survives: a policy that does not load, a failing hook, a log it cannot reopen), "
      "4 warning (a backend gone sick, an admin authentication failure, a shutdown that timed "
      "out), 5 notice (changes made through the admin interface, failed TLS handshakes), "
      "6 info (start, stop, listeners, reloads), 7 debug (admin connections and commands). "
      "0 to 2 are not used: a panic goes to standard error whatever the level.")
PARAM(xff, BOOL, "on", NULL, NULL, PAR_LIVE,
      "Append the client address to X-Forwarded-For and set X-Forwarded-Proto on backend "
      "requests.")
PARAM(via, BOOL, "on", NULL, NULL, PAR_LIVE,
      "Add a Via header to backend requests and to responses.")
PARAM(default_ttl, DURATION, "0s", "0s", NULL, PAR_LIVE,
      "Freshness lifetime given to a cacheable response that carries no freshness information "
      "and no Last-Modified to base a heuristic on. 0 (the default) is what RFC 9111 asks: "
      "such a response is not served from cache without revalidation. Varnish uses 120s.")
PARAM(default_grace, DURATION, "0s", "0s", NULL, PAR_LIVE,
      "How long past its freshness an object may be served while it is refreshed in the "
      "background, for responses without stale-while-revalidate. 0 (the default) follows RFC 9111, which "
      "forbids serving stale content the origin did not allow; Varnish uses 10s.")
PARAM(client_revalidate_interval, DURATION, "1s", "0s", NULL, PAR_LIVE,
      "A client's Cache-Control: no-cache or max-age=0 (or Pragma: no-cache) makes a fresh "
      "object revalidate with the backend (a conditional request when it has an ETag or "
      "Last-Modified: a 304 renews it, a 200 replaces it), at most once per this interval per "
      "URL; other such requests within it get the stored object, and share a revalidation in "
      "flight. So no client can send every request to the backend. 0: client directives that "
      "would bypass a fresh object are ignored, as Varnish and nginx do.")
PARAM(default_stale_if_error, DURATION, "300s", "0s", NULL, PAR_LIVE,
      "How long past its freshness an object may be served when the backend is unreachable, "
      "times out or answers 500 to 504, for responses without a stale-if-error directive "
      "(RFC 5861 lets a cache choose). Never for responses with must-revalidate, "
      "proxy-revalidate, s-maxage or no-cache, which forbid stale use. Such an answer says "
      "Cache-Status: fwd=stale. 0: the backend's error reaches the client.")
PARAM(default_keep, DURATION, "300s", "0s", NULL, PAR_LIVE,
      "How long past its freshness and stale windows an object with a validator (ETag or "
      "Last-Modified) is kept, so that it can be revalidated with a conditional request and "
      "reused on 304 instead of being fetched again.")
PARAM(heuristic_max, DURATION, "1d", "0s", NULL, PAR_LIVE,
      "Cap on the heuristic freshness lifetime (10% of the time since Last-Modified).")
PARAM(hitmiss_ttl, DURATION, "120s", "0s", NULL, PAR_LIVE,
      "How long a URL whose response could not be cached is remembered as such, so that "
      "concurrent requests for it go to the backend side by side instead of queueing.")
PARAM(coalesce_timeout, DURATION, "10s", "0s", NULL, PAR_LIVE,
      "Longest a request waits for another request's fetch of the same object before it goes "
      "to the backend itself. The wait ends as soon as that fetch has the response head and "
      "knows it will be stored: then the waiting requests stream the body as it arrives.")
PARAM(coalesce_max_waiters, UINT, "16384", "0", NULL, PAR_LIVE,
      "Most requests that may wait for one fetch; more go to the backend themselves. A "
      "waiting request holds no worker thread: it is parked on the object's waiting list "
      "with its request memory (a few KiB resident) until the fetch streams, ends or "
      "coalesce_timeout passes.")
PARAM(coalesce_rush, UINT, "3", "1", "1000", PAR_LIVE,
      "How many parked requests each event of a fetch wakes (it streams, is published or "
      "abandoned), and how many more each woken request wakes once it finds the object "
      "usable: the waiters resume in a growing wave at the pace workers serve them instead "
      "of flooding the queue at once (Varnish's rush_exponent).")
PARAM(max_object_size, BYTES, "0", "0", NULL, PAR_LIVE,
      "Largest response body stored in the cache; 0 (the default): no limit but the store "
      "itself. A larger response -- by its Content-Length, or a chunked one once it grows "
      "past the limit -- is passed to the client whole and not stored, and a hit-for-miss "
      "marker (hitmiss_ttl) lets the next requests for it go to the backend at once "
      "(cache_too_big). A response larger than the whole store is never stored either.")
PARAM(sendfile_min_size, BYTES, "128k", "0", NULL, PAR_LIVE,
      "Cached bodies of at least this size go to plain HTTP/1 clients with sendfile(2), by "
      "reference to their pages instead of a copy into the socket: from the file of a file "
      "store, and for the malloc store from a memory file of their own (memfd, one descriptor "
      "per body) in which such bodies are stored. TLS clients get a copy as before. A file "
      "store keeps the space of such a body, once freed, out of use until the kernel has "
      "released its pages (sto_quarantine_bytes). 0: every body by copy.")
PARAM(nuke_limit, UINT, "50", "0", NULL, PAR_LIVE,
      "Objects evicted at most to make room for one object being stored; beyond it the object "
      "is delivered without being stored.")
PARAM(cache_status, BOOL, "on", NULL, NULL, PAR_LIVE,
      "Add a Cache-Status response header (RFC 9211) saying whether the response was a hit.")
PARAM(tinylfu, BOOL, "on", NULL, NULL, PAR_LIVE,
      "Admission by frequency (TinyLFU): when the store is full, a new object is stored only "
      "if its URL has been asked for more often lately than that of the object it would "
      "evict, so a crawl of many rarely-requested URLs does not push popular objects out. "
      "Stale objects are evicted regardless. Off: every fetched object is stored, evicting "
      "others as SIEVE picks them.")
PARAM(x_cache, BOOL, "off", NULL, NULL, PAR_LIVE,
      "Also add the older X-Cache: HIT, MISS or PASS response header.")
PARAM(purge_acl, STRING, "127.0.0.1,::1", NULL, NULL, PAR_LIVE,
      "Clients allowed to send PURGE requests: comma-separated IPv4 and IPv6 addresses and "
      "prefixes (10.0.0.0/8, 2001:db8::/32), '!' before one to exclude it; the longest "
      "matching prefix decides. Empty: nobody. Others get 403. A value that does not parse "
      "allows nobody and is logged.")
PARAM(allow_trace, BOOL, "off", NULL, NULL, PAR_LIVE,
      "Pass TRACE requests to the backend, without their Cookie, Authorization and "
      "Proxy-Authorization fields. Off: TRACE is answered 405 and the connection closed, as "
      "an echo of a request is what cross-site tracing uses to read a user's cookies.")
PARAM(invalidate_on_unsafe, BOOL, "on", NULL, NULL, PAR_LIVE,
      "A successful (2xx or 3xx) POST, PUT, PATCH or DELETE removes the cached variants of its "
      "URL, and of the URLs its Location and Content-Location name on the same host, before "
      "the client gets the answer (RFC 9111 section 4.4). Other methods, in any spelling, "
      "never invalidate. Off: only PURGE, bans and expiry remove objects.")
PARAM(trusted_client_headers, STRING, "", NULL, NULL, PAR_LIVE,
      "Request fields that the cache key does not include but applications build links, "
      "schemes and routes from, which surogat removes from every client request before the "
      "policy and the backend see it (a forged one would poison the cache for everyone): "
      "X-Forwarded-Host, X-Forwarded-Server, X-Forwarded-Port, X-Forwarded-Prefix, "
      "X-Forwarded-Scheme, X-Forwarded-Ssl, Front-End-Https, X-Url-Scheme, X-Host, "
      "X-Original-Host, X-Original-URL, X-Rewrite-URL, X-HTTP-Method-Override, X-HTTP-Method, "
      "X-Method-Override and Forwarded. Those named here (comma-separated, any case) pass "
      "through, for a proxy in front that sets them itself. The policy may set any of them.")
PARAM(ban_lurker_sleep, DURATION, "10ms", "0s", "10s", PAR_LIVE,
      "Pause of the ban lurker between batches while it tests cached objects against bans "
      "in the background. 0 turns the lurker off: bans are then tested at lookup only, and "
      "the ban list is trimmed only as objects are looked up or leave the cache.")
PARAM(ban_lurker_batch, UINT, "1000", "1", NULL, PAR_LIVE,
      "Objects the ban lurker tests per batch, holding one index lock; lookups of keys in "
      "that part of the index wait at most one batch.")
PARAM(ban_dups, BOOL, "on", NULL, NULL, PAR_LIVE,
      "When a ban is added, mark older identical bans completed: the new one covers every "
      "object they cover, so objects are not tested twice.")
PARAM(ban_persist, DURATION, "1d", "0s", NULL, PAR_LIVE,
      "How long a ban is kept in the file bans of the -n directory, with the time it was "
      "made, and replayed at start: an object a file store brings back after a restart is "
      "then tested against the bans made before the restart, and one fetched after a ban is "
      "not. Each ban is written and synced as it is added. Bans are replayed before the "
      "first request is served. 0s: bans are neither written nor replayed.")
PARAM(identity, STRING, "", NULL, NULL, PAR_RESTART,
      "This node's name: the policy's server.identity, and the member it is in a cluster "
      "declaration (surogat-lua(7)). Letters, digits, '.', '_' and '-'. Empty: the host name.")
PARAM(cluster_timeout, DURATION, "2s", "10ms", "1m", PAR_LIVE,
      "How long a node waits for another member of its cluster to answer a cluster message "
      "(an invalidation, a retry, the journal at start), connecting included. A member that "
      "does not answer in time gets the invalidation again later, from its outbox.")
PARAM(cluster_sync_timeout, DURATION, "10s", "0s", "10m", PAR_LIVE,
      "How long a node that starts, a cluster member, spends asking the other members for the "
      "invalidations it missed while it was away, before it serves its first request.")
PARAM(cluster_journal, DURATION, "1d", "1m", NULL, PAR_LIVE,
      "How long a cluster member keeps the invalidations it applied (the file "
      "cluster.journal of the -n directory): for the members that return after an absence, "
      "and for those it must send them to again. A member away longer bans, when it returns, "
      "everything it fetched before what the others still remember.")
PARAM(cluster_journal_max, UINT, "100000", "100", NULL, PAR_LIVE,
      "Most invalidations a cluster member keeps in its journal; the oldest are forgotten "
      "first, as with cluster_journal.")
PARAM(policy_max_instructions, UINT, "1000000", "1000", NULL, PAR_LIVE,
      "Lua VM instructions one policy hook call may run (and the top level of the script when "
      "it is loaded). Past it the call fails: the error is logged with file and line and the "
      "request is answered 503. Cuts endless loops; pcall cannot catch it.")
PARAM(policy_max_time, DURATION, "50ms", "10ms", "60s", PAR_LIVE,
      "Wall-clock time one policy hook call may take (and the top level of the script), "
      "checked every 1000 instructions, in the pattern functions, re.* and the other "
      "string, table and utf8 functions, and on large allocations. Past it, and a quarter "
      "of it more on the CPU (waiting for a CPU does not count), the call fails as past "
      "policy_max_instructions: a backtracking pattern on a URL an attacker chose cannot "
      "pin a worker.")
PARAM(policy_modules, STRING, "", NULL, NULL, PAR_LIVE | PAR_LOAD,
      "Pure-Lua modules a policy script may require(), by name, separated by commas or spaces "
      "(e.g. \"util, sites.blog\"). require(\"sites.blog\") loads sites/blog.lua from "
      "policy_module_path, in the script's sandbox. Any other require() is an error. Read when "
      "a script is loaded or reloaded.")
PARAM(policy_module_path, STRING, "", NULL, NULL, PAR_LIVE | PAR_LOAD,
      "Directory of the modules of policy_modules; empty: the directory of the policy script.")
PARAM(pipe_timeout, DURATION, "60s", "1s", NULL, PAR_LIVE,
      "A piped connection (recv returned \"pipe\") is closed when no byte moved either way "
      "for this long.")
PARAM(tunnel_timeout, DURATION, "300s", "1s", NULL, PAR_LIVE,
      "A tunnel -- a WebSocket or other upgrade once the backend answered 101 Switching "
      "Protocols -- is closed when no byte moved either way for this long. Each open tunnel "
      "holds a worker thread (tunnel_active).")
PARAM(backend_max_interim, UINT, "16", "0", "1000", PAR_LIVE,
      "Interim (1xx) responses a backend may send before its final response; one more and the "
      "response is refused (502). 103 Early Hints among them are forwarded to HTTP/1.1 clients "
      "as they come.")
PARAM(max_restarts, UINT, "4", "0", "100", PAR_LIVE,
      "Times a policy hook may send a request back to recv with \"restart\". One more is "
      "answered 503.")
PARAM(max_retries, UINT, "4", "0", "100", PAR_LIVE,
      "Times backend_response or backend_error may ask for the fetch again with \"retry\". "
      "One more ends the fetch as failed (503).")
PARAM(policy_max_memory, BYTES, "64m", "1m", NULL, PAR_LIVE,
      "Memory one worker's Lua state (the policy script, its tables and strings) may allocate. "
      "An allocation past it fails the hook call: logged, and the request answered 503.")
PARAM(http_gzip_support, BOOL, "on", NULL, NULL, PAR_LIVE,
      "Content codings in the cache, as Varnish's parameter of that name but for br and zstd "
      "too: backend requests of cache misses ask for the codings of compress_formats and gzip, "
      "a compressible response (gzip_types, at least gzip_min_size, no Cache-Control: "
      "no-transform) is stored compressed once in the first of compress_formats, and each "
      "client gets the coding its Accept-Encoding prefers, made on the fly from the stored "
      "body when it does not take that one (decoded, and encoded again; see "
      "compress_copy_after); Accept-Encoding then no longer splits Vary variants. Off: "
      "backend requests carry the coding the client prefers among br, zstd and gzip (or "
      "none), Vary: Accept-Encoding compares that alone, and bodies are stored as they come.")
PARAM(gzip_level, UINT, "6", "1", "9", PAR_LIVE,
      "zlib compression level for bodies the cache compresses: 1 fastest, 9 smallest. Paid "
      "once per stored object, not per hit.")
PARAM(gzip_min_size, BYTES, "1k", "0", NULL, PAR_LIVE,
      "Smallest response body compressed. A body of unknown length (chunked) counts as "
      "large enough.")
PARAM(gzip_types, STRING,
      "text/html text/plain text/css text/xml text/javascript application/javascript "
      "application/x-javascript application/json application/xml application/xhtml+xml "
      "application/rss+xml application/atom+xml image/svg+xml",
      NULL, NULL, PAR_LIVE,
      "Media types compressed, separated by spaces or commas; type/* matches a whole type. The "
      "default is mod_deflate's AddOutputFilterByType list of text types.")
PARAM(gunzip_max_ratio, UINT, "1000", "0", NULL, PAR_LIVE,
      "Most bytes a gzip body may decode to per byte of it, counted as it is decoded; 0: no "
      "bound. A body past it is a decompression bomb: from a backend the fetch fails (502, or "
      "a cut connection once the head is out) and nothing is stored; found in the cache "
      "while gunzipping for a client, the delivery is cut and the object removed "
      "(gunzip_bombs, logged). Deflate cannot exceed about 1032:1, so 1000 only stops runs "
      "of one byte repeated.")
PARAM(gunzip_max_size, BYTES, "1g", "0", NULL, PAR_LIVE,
      "Most bytes a gzip body may decode to in all; 0: no bound. Past it the body is a "
      "decompression bomb, refused or removed as under gunzip_max_ratio. It also bounds the "
      "check of a backend's gzip body for the cache, so a larger legitimate one is refused: "
      "raise it for such a backend.")
PARAM(esi_max_parallel, UINT, "10", "1", "1000", PAR_LIVE,
      "Includes of one ESI page in flight at once: looked up before their turn, and those not "
      "in the cache fetched on worker tasks of their own while the page is sent, so that "
      "their fetches overlap. The page is still sent in document order.")
PARAM(esi_max_depth, UINT, "5", "0", "100", PAR_LIVE,
      "Most levels of ESI includes: a page's includes are level 1, theirs level 2 ... An "
      "include past it fails (esi_depth_limit), as an include of a page that includes it "
      "does (esi_cycles): it is left out with onerror=\"continue\", else the page is cut.")
PARAM(esi_fragment_buffer, BYTES, "1m", "16k", NULL, PAR_LIVE,
      "Most bytes of an include fetched ahead of its turn that are held in memory; its fetch "
      "then waits for the page to reach it. Bounds the memory of a page whose includes are "
      "large and slow to reach.")
PARAM(gzip_pass, BOOL, "off", NULL, NULL, PAR_LIVE,
      "Also compress responses that are not stored (passes, uncacheable misses) on the fly "
      "for clients that accept gzip, with the same rules as stored ones. This costs CPU on "
      "every such response, so it is off by default.")
PARAM(compress_formats, STRING, "br,gzip", NULL, NULL, PAR_LIVE,
      "Content codings a compressible body is kept in, best first, among br, zstd and gzip "
      "(commas or spaces). Each client gets the one its Accept-Encoding weighs highest, ties "
      "going to the first listed, else identity. The static-file backend (-b /DIR) makes and "
      "keeps copies in these; the cache stores a compressible object in the first "
      "(http_gzip_support) and makes the others on the fly for clients that prefer them. br is "
      "listed first: at brotli_level 5 it is 4-11% smaller than gzip_level 6 on real HTML, "
      "CSS and JavaScript for less CPU (bench/RESULTS.md), and every browser that sends zstd "
      "also sends br; zstd is the cheapest to make and to decode.")
PARAM(compress_copy_after, UINT, "2", "0", "65535", PAR_LIVE,
      "Deliveries of a cached object that had to make its body on the fly in a coding it does "
      "not hold (decoded for a client without compression, or encoded in another coding) "
      "after which the next such delivery keeps a copy in that coding beside the object. "
      "Later clients get the copy's bytes as they are, with Range and 304 as for the object. "
      "A copy is counted against the store and evicted alone when cold, and goes with its "
      "object (purge, ban, tag purge, expiry, eviction, a newer response); it is not kept "
      "across a restart. 0: never; make the body on every delivery. n_copy and copy_bytes "
      "show the memory copies cost.")
PARAM(brotli_level, UINT, "5", "0", "11", PAR_LIVE,
      "brotli quality for bodies compressed by surogat: 0 fastest, 11 smallest. 5 costs a "
      "little less than gzip_level 6; 11 is about 100 times slower than 5 for 9-13% less.")
PARAM(zstd_level, UINT, "6", "1", "19", PAR_LIVE,
      "zstd level for bodies compressed by surogat: 1 fastest, 19 smallest (higher levels "
      "would need a window past the 8 MiB that RFC 9659 allows the zstd coding).")
PARAM(sfb_precompressed, BOOL, "on", NULL, NULL, PAR_LIVE,
      "Whether the -b /DIR backend serves a precompressed sibling of a file (file.css.br, "
      ".zst, .gz, as nginx's gzip_static) to a client that accepts its coding, when the "
      "sibling is a regular file not older than the file. Looked for at most once per "
      "sfb_cache_check.")
PARAM(sfb_compress_cache, BYTES, "32m", "0", NULL, PAR_LIVE,
      "Memory for the compressed copies the -b /DIR backend makes of compressible files "
      "(gzip_types, at least gzip_min_size, at most a quarter of this) in the codings of "
      "compress_formats, kept by file identity (path, size, mtime, inode) so that a file is "
      "compressed once, not per request; least recently used dropped first. 0: no "
      "compression on the fly.")
PARAM(sfb_cache_entries, UINT, "1000", "1", "1000000", PAR_LIVE,
      "Files the static-file backend (-b /dir) keeps open in its open-file cache, with their "
      "size, validators and type; the least recently used is closed first. Each entry holds "
      "one file descriptor, and files up to sfb_mem_max also their bytes.")
PARAM(sfb_cache_check, DURATION, "1s", "0s", "1h", PAR_LIVE,
      "How long the static-file backend trusts a cached open file before it opens the path "
      "again and compares inode, size and mtime: a file changed on disk is served new within "
      "this time. 0: check on every request.")
PARAM(sfb_mem_max, BYTES, "64k", "0", "16m", PAR_LIVE,
      "Static files up to this size are read once into the open-file cache and sent from "
      "memory with the head in one writev(2); larger ones are sent with sendfile(2) from the "
      "page cache.")
PARAM(sfb_index, STRING, "index.html", NULL, NULL, PAR_RESTART,
      "Index files of the static-file backend given as -b /DIR, comma-separated, tried in "
      "order when a directory is asked for.")
PARAM(sfb_listing, BOOL, "off", NULL, NULL, PAR_RESTART,
      "Whether the -b /DIR backend lists a directory that has no index file (denied names "
      "left out); off: 403.")
PARAM(sfb_follow_symlinks, BOOL, "off", NULL, NULL, PAR_RESTART,
      "Whether the -b /DIR backend follows symbolic links that lead outside its root; off: "
      "such links answer 403, links inside the root work.")
PARAM(sfb_deny, STRING, "", NULL, NULL, PAR_RESTART,
      "Glob patterns (comma-separated, case-insensitive, '!' before one to allow what it "
      "matches) that the -b /DIR backend answers 404 when any segment of a path matches. "
      "Empty: the built-in list of *.php, *.inc, .ht*, dotfiles but .well-known, and editor "
      "and backup copies (*~, *.bak, *.swp ...); see surogatd(8).")
PARAM(sfb_mime_file, STRING, "/etc/mime.types", NULL, NULL, PAR_RESTART,
      "The MIME types file of the -b /DIR backend (lines of 'type ext ext ...'). A built-in "
      "table of common web types is used under it, and alone if this is empty.")
PARAM(sfb_mime, STRING, "", NULL, NULL, PAR_RESTART,
      "Content-Type overrides of the -b /DIR backend, comma-separated ext=type pairs "
      "(html=text/html; charset=utf-8), winning over sfb_mime_file.")
PARAM(sfb_expires, STRING, "", NULL, NULL, PAR_RESTART,
      "Cache-Control max-age and Expires of the -b /DIR backend by type, as mod_expires' "
      "ExpiresByType: comma-separated type-pattern=duration rules (image/*=30d, "
      "text/css=7d), the first match wins. Empty: no expiry headers.")
#undef PARAM
