/*
 * Varnish's parameter names -- no include guard: an X-macro table.
 *
 * VPARAM(varnish_name, surogat_name)
 *
 * Every varnishd parameter surogatd understands, with the surogat
 * parameter that means the same: the same effect, the same unit, values
 * written as Varnish writes them (durations as seconds with or without a
 * unit, "60.000", "1.5m"; sizes with k, m, g suffixes, "0.25k").  Where
 * the two names differ, the Varnish name is an alias: -p, the config
 * file, param.set and param.show take it and act on the surogat
 * parameter.  Where they are the same, the row records that the meaning
 * is Varnish's, for the documentation (-x params, surogat.conf(5)).
 *
 * Only exact matches belong here.  Not listed on purpose:
 * thread_pool_add_delay (Varnish: a pause after starting each thread;
 * surogat: how long a queued request waits before a thread is added),
 * workspace_client (Varnish's holds the client side only; surogat's also
 * the backend request and response), idle_send_timeout (surogat's
 * send_timeout bounds each write too).  Ranges may differ: a value out
 * of surogat's range is refused with its bounds.
 */
VPARAM(backend_idle_timeout, backend_idle_timeout)
VPARAM(ban_dups, ban_dups)
VPARAM(ban_lurker_batch, ban_lurker_batch)
VPARAM(ban_lurker_sleep, ban_lurker_sleep)
VPARAM(between_bytes_timeout, backend_between_bytes_timeout)
VPARAM(connect_timeout, backend_connect_timeout)
VPARAM(default_grace, default_grace)
VPARAM(default_keep, default_keep)
VPARAM(default_ttl, default_ttl)
VPARAM(feature, feature)
VPARAM(first_byte_timeout, backend_first_byte_timeout)
VPARAM(gzip_level, gzip_level)
VPARAM(h2_initial_window_size, h2_initial_window_size)
VPARAM(h2_max_concurrent_streams, h2_max_concurrent_streams)
VPARAM(http_gzip_support, http_gzip_support)
VPARAM(http_max_hdr, http_max_hdr)
VPARAM(http_req_hdr_len, http_req_hdr_len)
VPARAM(http_req_size, http_req_size)
VPARAM(http_resp_size, http_resp_size)
VPARAM(listen_depth, listen_depth)
VPARAM(max_restarts, max_restarts)
VPARAM(max_retries, max_retries)
VPARAM(nuke_limit, nuke_limit)
VPARAM(pipe_timeout, pipe_timeout)
VPARAM(send_timeout, send_timeout)
VPARAM(thread_pool_max, thread_pool_max)
VPARAM(thread_pool_min, thread_pool_min)
VPARAM(thread_pool_timeout, thread_pool_timeout)
VPARAM(thread_pools, thread_pools)
VPARAM(thread_queue_limit, thread_queue_limit)
VPARAM(timeout_idle, timeout_idle)
VPARAM(timeout_linger, timeout_linger)
#undef VPARAM
