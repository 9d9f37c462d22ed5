/*
 * Why a backend response, or a backend connection, was refused -- no
 * include guard: an X-macro table.
 *
 * REFUSE(name, counter, text)
 *   counter: the counter each one adds to (tbl/stats.h)
 *   text:    what the daemon log says after "backend NAME: "
 *
 * bcp_refused() counts and logs each, with the backend's name, at most
 * a line a second per backend and reason (see bcp.h).
 */
REFUSE(HEAD_SYNTAX, backend_bad_resp, "response refused (502): malformed response head")
REFUSE(HEAD_TOO_BIG, backend_bad_resp,
       "response refused (502): head larger than http_resp_size or with more than "
       "http_max_hdr fields")
REFUSE(VERSION, backend_bad_resp, "response refused (502): HTTP version other than 1.0 and 1.1")
REFUSE(UPGRADE, backend_bad_resp, "response refused (502): unexpected 101 Switching Protocols")
REFUSE(INTERIM, backend_bad_resp,
       "response refused (502): more interim (1xx) responses than allowed")
REFUSE(CLOSED, backend_bad_resp,
       "response refused (502): connection closed before the response head was complete")
REFUSE(CL_TE, backend_bad_resp,
       "response refused (502): both Content-Length and Transfer-Encoding")
REFUSE(BAD_CL, backend_bad_resp, "response refused (502): invalid or differing Content-Length")
REFUSE(TE_HTTP10, backend_bad_resp,
       "response refused (502): Transfer-Encoding in an HTTP/1.0 response")
REFUSE(BAD_TE, backend_bad_resp,
       "response refused (502): empty Transfer-Encoding, or chunked applied twice")
REFUSE(CODING, backend_bad_resp,
       "response refused (502): a transfer coding other than chunked, gzip, deflate or "
       "identity")
REFUSE(CODINGS, backend_bad_resp, "response refused (502): too many transfer codings")
REFUSE(BAD_CHUNK, backend_bad_resp, "response body refused: malformed chunked coding")
REFUSE(BAD_TCODING, backend_bad_resp,
       "response body refused: corrupt or truncated gzip or deflate transfer coding")
REFUSE(TCODING_BOMB, gunzip_bombs,
       "response body refused: its transfer coding inflates past gunzip_max_size or "
       "gunzip_max_ratio")
REFUSE(BAD_GZIP, gzip_errors, "response body refused: corrupt gzip content")
REFUSE(BODY_CLOSED, backend_body_cut,
       "response body refused: connection closed before the end of the body")
REFUSE(BODY_TIMEOUT, backend_body_cut,
       "response body refused: no byte for backend_between_bytes_timeout")
REFUSE(TRAILING_BYTES, backend_out_of_step,
       "bytes past the end of a response: connection closed, not reused")
REFUSE(LATE_BYTES, backend_out_of_step,
       "bytes on an idle connection before a request was sent on it: connection closed, "
       "the request went on another")
#undef REFUSE
