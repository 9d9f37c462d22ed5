/*
 * Per-backend counters -- no include guard: an X-macro table.
 *
 * BESTAT(name, kind, doc)   kind: COUNTER (only grows) or GAUGE (read from
 * the backend's state when asked, never counted)
 *
 * Each backend has its own set, kept with the backend object: a policy
 * reload that declares the backend unchanged keeps its counters, as it
 * keeps its pool and probe history.  surogatctl stats lists them as
 * backend.NAME.ROW, /metrics as surogat_backend_ROW{backend="NAME"}.
 * The COUNTER rows come first (stat.c relies on it).
 */
BESTAT(requests, COUNTER, "Requests sent to the backend: a connection handed to a fetch or a pipe.")
BESTAT(connections, COUNTER, "Connections opened to the backend (TLS handshake included).")
BESTAT(reused, COUNTER, "Requests sent on a reused keep-alive connection.")
BESTAT(fail_connect, COUNTER, "Connection attempts that failed: refused, unreachable, or a TLS "
       "handshake that failed. Answered 503 unless another backend took over.")
BESTAT(fail_connect_timeout, COUNTER, "Connection attempts that timed out (connect_timeout). "
       "Answered 503 unless another backend took over.")
BESTAT(fail_first_byte_timeout, COUNTER, "Responses that did not begin within first_byte_timeout "
       "of the request (504).")
BESTAT(fail_between_bytes_timeout, COUNTER, "Responses that stalled for between_bytes_timeout "
       "after they began, in the head (504) or the body (cut).")
BESTAT(fail_bad_resp, COUNTER, "Responses that were malformed or whose framing was refused: a "
       "bad status line or head, an unexpected 101, too many interim responses, ambiguous length, "
       "bad chunking or transfer coding, a close before the head (502); the refusals that "
       "backend_bad_resp counts, logged with their reason.")
BESTAT(fail_busy, COUNTER, "Requests refused because the backend's max_connections were open "
       "(503).")
BESTAT(bytes_out, COUNTER, "Request bytes sent to the backend, heads and bodies.")
BESTAT(bytes_in, COUNTER, "Response bytes read from the backend, heads and bodies.")
BESTAT(resp_1xx, COUNTER, "Backend responses with a 1xx status: 101, refused (interim ones are "
       "skipped).")
BESTAT(resp_2xx, COUNTER, "Backend responses with a 2xx status.")
BESTAT(resp_3xx, COUNTER, "Backend responses with a 3xx status.")
BESTAT(resp_4xx, COUNTER, "Backend responses with a 4xx status.")
BESTAT(resp_5xx, COUNTER, "Backend responses with a 5xx status.")
BESTAT(fb_time_us, COUNTER, "Sum of the times to first byte in microseconds, each from the "
       "start of the request to the first byte of the final response (interim ones skipped): the "
       "sum of the fb_time histogram.")
/*
 * The histograms' buckets, in this order and contiguous, with the bounds
 * of the client latency histogram (stat_time_bounds).  Each counts only
 * its own range; /metrics adds them up into cumulative buckets.
 */
BESTAT(fb_time_le_500us, COUNTER, "Responses whose first byte took at most 500us.")
BESTAT(fb_time_le_1ms, COUNTER, "Responses whose first byte took more than 500us, at most 1ms.")
BESTAT(fb_time_le_2500us, COUNTER, "Responses whose first byte took more than 1ms, at most 2.5ms.")
BESTAT(fb_time_le_5ms, COUNTER, "Responses whose first byte took more than 2.5ms, at most 5ms.")
BESTAT(fb_time_le_10ms, COUNTER, "Responses whose first byte took more than 5ms, at most 10ms.")
BESTAT(fb_time_le_25ms, COUNTER, "Responses whose first byte took more than 10ms, at most 25ms.")
BESTAT(fb_time_le_50ms, COUNTER, "Responses whose first byte took more than 25ms, at most 50ms.")
BESTAT(fb_time_le_100ms, COUNTER, "Responses whose first byte took more than 50ms, at most 100ms.")
BESTAT(fb_time_le_250ms, COUNTER, "Responses whose first byte took more than 100ms, at most 250ms.")
BESTAT(fb_time_le_500ms, COUNTER, "Responses whose first byte took more than 250ms, at most 500ms.")
BESTAT(fb_time_le_1s, COUNTER, "Responses whose first byte took more than 500ms, at most 1s.")
BESTAT(fb_time_le_2500ms, COUNTER, "Responses whose first byte took more than 1s, at most 2.5s.")
BESTAT(fb_time_le_5s, COUNTER, "Responses whose first byte took more than 2.5s, at most 5s.")
BESTAT(fb_time_le_10s, COUNTER, "Responses whose first byte took more than 5s, at most 10s.")
BESTAT(fb_time_over_10s, COUNTER, "Responses whose first byte took more than 10s.")
BESTAT(time_us, COUNTER, "Sum of the backend transaction times in microseconds, each from the "
       "start of the request to the end of the response body (the connection recycled or "
       "closed): the sum of the time histogram.")
BESTAT(time_le_500us, COUNTER, "Backend transactions that took at most 500us.")
BESTAT(time_le_1ms, COUNTER, "Backend transactions that took more than 500us, at most 1ms.")
BESTAT(time_le_2500us, COUNTER, "Backend transactions that took more than 1ms, at most 2.5ms.")
BESTAT(time_le_5ms, COUNTER, "Backend transactions that took more than 2.5ms, at most 5ms.")
BESTAT(time_le_10ms, COUNTER, "Backend transactions that took more than 5ms, at most 10ms.")
BESTAT(time_le_25ms, COUNTER, "Backend transactions that took more than 10ms, at most 25ms.")
BESTAT(time_le_50ms, COUNTER, "Backend transactions that took more than 25ms, at most 50ms.")
BESTAT(time_le_100ms, COUNTER, "Backend transactions that took more than 50ms, at most 100ms.")
BESTAT(time_le_250ms, COUNTER, "Backend transactions that took more than 100ms, at most 250ms.")
BESTAT(time_le_500ms, COUNTER, "Backend transactions that took more than 250ms, at most 500ms.")
BESTAT(time_le_1s, COUNTER, "Backend transactions that took more than 500ms, at most 1s.")
BESTAT(time_le_2500ms, COUNTER, "Backend transactions that took more than 1s, at most 2.5s.")
BESTAT(time_le_5s, COUNTER, "Backend transactions that took more than 2.5s, at most 5s.")
BESTAT(time_le_10s, COUNTER, "Backend transactions that took more than 5s, at most 10s.")
BESTAT(time_over_10s, COUNTER, "Backend transactions that took more than 10s.")
BESTAT(healthy, GAUGE, "1 while the backend takes traffic (probe and admin state), else 0.")
BESTAT(changed, GAUGE, "When the backend's health last changed, in seconds since the epoch; its "
       "creation if it never changed.")
BESTAT(happy, GAUGE, "The probe history as a bitmap, bit 0 the newest probe, 1 good (Varnish's "
       "happy); 0 without a probe.")
BESTAT(probe_good, GAUGE, "Good probes in the probe window; 0 without a probe.")
BESTAT(probe_window, GAUGE, "Probes in the window; 0 without a probe.")
BESTAT(open_connections, GAUGE, "Open connections to the backend, busy or idle.")
BESTAT(busy_connections, GAUGE, "Connections in use by a fetch or a pipe, connecting included.")
#undef BESTAT
