"""Safety issue, items 9, 11, 12 (decompression bombs) and 14, each tried as a
hostile client or a buggy backend would:

 9. idle admin connections, authenticated or not, can never lock the
    operator out: unauthenticated ones have a deadline (cli_auth_timeout)
    and a per-address limit (cli_peer_max), and a full table makes room;
11. a ban whose regex PCRE2 cannot finish (match limit) still invalidates,
    at lookup and in the lurker, and is counted and logged once;
12. a gzip body that decodes to far more than it is (gunzip_max_ratio,
    gunzip_max_size) is refused from a backend and dropped from the cache
    when found at delivery;
14. CDN-Cache-Control is an RFC 8941 Dictionary: an invalid one is ignored
    whole, a valid one is used and forwarded; Surrogate-Control is consumed.
"""

import functools
import hashlib
import random
import re
import select
import socket
import subprocess
import time
import zlib

import pytest

from conftest import wait_until
from cstatus import forwarded, is_hit

# -- 9: the admin interface -------------------------------------------------------------


def admin_socks(port, n, src="127.0.0.1"):
    """n connections to the admin port from source address src, left idle."""
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        out.append(s)
    return out


def is_closed(s):
    """Whether the server has closed s (what it sent before is read and dropped)."""
    s.setblocking(False)
    try:
        while True:
            try:
                d = s.recv(65536)
            except (BlockingIOError, InterruptedError):
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not d:
                return True
    finally:
        s.settimeout(5)


def n_open(socks):
    return sum(0 if is_closed(s) else 1 for s in socks)


def close_all(socks):
    for s in socks:
        s.close()


def read_reply(s, timeout=5.0):
    """One admin reply (status, body) from socket s."""
    buf = b""
    deadline = time.monotonic() + timeout
    while True:
        m = re.match(rb"(\d{3}) (\d+) *\n", buf)
        if m and len(buf) >= m.end() + int(m.group(2)) + 1:
            n = int(m.group(2))
            return int(m.group(1)), buf[m.end():m.end() + n]
        left = deadline - time.monotonic()
        assert left > 0, "no complete admin reply in %.1fs: %r" % (timeout, buf)
        r, _, _ = select.select([s], [], [], left)
        if r:
            d = s.recv(65536)
            assert d, "admin connection closed mid-reply: %r" % buf
            buf += d


def authed_sock(sg, src="127.0.0.1"):
    """An admin connection that answered the challenge with the secret."""
    s = admin_socks(sg.admin_port, 1, src)[0]
    st, body = read_reply(s)
    assert st == 107, (st, body)
    ch = body[:32]
    secret = sg.secret.read_bytes()
    answer = hashlib.sha256(ch + b"\n" + secret + ch + b"\n").hexdigest()
    s.sendall(b"auth " + answer.encode() + b"\n")
    st, body = read_reply(s)
    assert st == 200, (st, body)
    return s


def command(s, line):
    s.sendall(line.encode() + b"\n")
    return read_reply(s)


def ctl_ping(sg, secret=True):
    t = time.monotonic()
    p = sg.ctl("ping", secret=secret, timeout=10)
    took = time.monotonic() - t
    assert p.returncode == 0 and "PONG" in p.stdout, (p.returncode, p.stdout, p.stderr)
    return took


def varnishadm_ping(sg):
    argv = ["varnishadm", "-T", "127.0.0.1:%d" % sg.admin_port, "-t", "5"]
    if sg.secret is not None:
        argv += ["-S", str(sg.secret)]
    p = subprocess.run(argv + ["ping"], capture_output=True, text=True, timeout=15)
    assert p.returncode == 0 and "PONG" in p.stdout, (p.returncode, p.stdout, p.stderr)


def spread_socks(port, n, addrs=50):
    """n idle connections from `addrs` source addresses (127.0.0.10 ...), round robin, so
    that no address reaches cli_peer_max and the table itself fills up."""
    return [admin_socks(port, 1, "127.0.0.%d" % (10 + i % addrs))[0] for i in range(n)]


def test_100_idle_connections_without_secret(origin, surogat):
    """Without -S connecting is the credential: no deadline, but a full table
    closes its oldest connection that never ran a command, so an operator
    always gets in."""
    sg = surogat()
    socks = spread_socks(sg.admin_port, 100)
    try:
        assert ctl_ping(sg, secret=False) < 3
        varnishadm_ping(sg)
        # 16 slots: the 100 pushed each other out, oldest first, and so did the two pings.
        # (varnishadm may find surogatctl's slot freed already, or not.)
        assert n_open(socks) in (14, 15) and n_open(socks[-14:]) == 14, [is_closed(s) for s in socks]
        assert sg.stat("cli_evicted") >= 85
        # From one address, only cli_peer_max (4) wait at a time.
        more = admin_socks(sg.admin_port, 10, src="127.0.0.200")
        try:
            wait_until(lambda: n_open(more) == 4, 5, "4 connections left from one address")
            assert n_open(more[-4:]) == 4
        finally:
            close_all(more)
    finally:
        close_all(socks)


def test_busy_table_without_secret(origin, surogat):
    """16 connections that each ran a command and then sat idle: the newcomer
    still gets in, in place of the one idle the longest."""
    sg = surogat()
    socks = []
    try:
        for _ in range(16):
            s = admin_socks(sg.admin_port, 1)[0]
            socks.append(s)
            assert read_reply(s)[0] == 200
            assert command(s, "ping")[0] == 200
        time.sleep(0.1)
        assert command(socks[0], "ping")[0] == 200  # the first is not the idlest now
        assert ctl_ping(sg, secret=False) < 3
        assert not is_closed(socks[0])
        assert is_closed(socks[1]), "the connection idle the longest should have made room"
    finally:
        close_all(socks)


def test_100_idle_connections_with_secret(origin, surogat):
    """With -S: 100 connections that never authenticate, from one address and
    from many; the operator (surogatctl and varnishadm) gets in at once, one
    logged in before stays, and every idle one is closed once
    cli_auth_timeout has passed."""
    sg = surogat(secret="r11-secret\n", params={"cli_auth_timeout": "2s"})
    op = authed_sock(sg)  # an operator logged in before the flood stays logged in
    socks = admin_socks(sg.admin_port, 50) + spread_socks(sg.admin_port, 50, addrs=25)
    try:
        assert ctl_ping(sg) < 3
        varnishadm_ping(sg)
        assert n_open(socks) >= 1, "all closed before the deadline"
        wait_until(lambda: n_open(socks) == 0, 8, "the unauthenticated connections to close")
        assert command(op, "ping")[0] == 200
        st = sg.stats()
        assert st["cli_evicted"] + st["cli_unauth_closed"] >= 100, st
        assert st["cli_unauth_closed"] >= 1 and st["cli_evicted"] >= 46, st
        assert ctl_ping(sg) < 3
    finally:
        close_all(socks + [op])


def test_deadline_ignores_slow_and_failing_clients(origin, surogat):
    """Partial lines sent slowly, commands without authentication and a wrong
    answer do not keep a connection past cli_auth_timeout."""
    sg = surogat(secret="r11-secret\n", params={"cli_auth_timeout": "1s", "cli_peer_max": "8"})
    slow, chatty, wrong = admin_socks(sg.admin_port, 3)
    try:
        for s in (slow, chatty, wrong):
            assert read_reply(s)[0] == 107
        assert command(chatty, "ping")[0] == 107
        wrong.sendall(b"auth " + b"0" * 64 + b"\n")
        assert read_reply(wrong)[0] == 107
        wait_until(lambda: is_closed(wrong), 2, "a failed authentication to close")
        t0 = time.monotonic()
        closed_at = {}
        while time.monotonic() - t0 < 4 and len(closed_at) < 2:
            for name, s in (("slow", slow), ("chatty", chatty)):
                if name in closed_at:
                    continue
                try:
                    s.sendall(b"p" if name == "slow" else b"ping\n")
                except OSError:
                    pass
                if is_closed(s):
                    closed_at[name] = time.monotonic() - t0
            time.sleep(0.1)
        assert set(closed_at) == {"slow", "chatty"}, closed_at
        assert all(t < 2.5 for t in closed_at.values()), closed_at
        assert ctl_ping(sg) < 3
    finally:
        close_all([slow, chatty, wrong])


def test_per_peer_limit(origin, surogat):
    """One address holds at most cli_peer_max unauthenticated connections (its
    oldest goes), so it cannot crowd out another address's."""
    sg = surogat(secret="r11-secret\n", params={"cli_auth_timeout": "60s", "cli_peer_max": "3"})
    a = admin_socks(sg.admin_port, 10, src="127.0.0.1")
    b = admin_socks(sg.admin_port, 3, src="127.0.0.2")
    try:
        wait_until(lambda: n_open(a) == 3, 5, "3 connections left from 127.0.0.1")
        assert n_open(a[-3:]) == 3, [is_closed(s) for s in a]
        assert n_open(b) == 3
        more = admin_socks(sg.admin_port, 20, src="127.0.0.3")
        try:
            wait_until(lambda: n_open(more) == 3, 5, "3 connections left from 127.0.0.3")
            assert n_open(b) == 3, "another address's flood closed these"
        finally:
            close_all(more)
        assert ctl_ping(sg) < 3
        assert sg.stat("cli_evicted") >= 7 + 17
    finally:
        close_all(a + b)


def test_full_table_of_authenticated_connections(origin, surogat):
    """16 authenticated connections left idle cannot lock the operator out
    either: the one idle the longest makes room."""
    sg = surogat(secret="r11-secret\n", params={"cli_auth_timeout": "5s"})
    socks = [authed_sock(sg) for _ in range(16)]
    try:
        time.sleep(0.1)
        assert command(socks[0], "ping")[0] == 200
        assert ctl_ping(sg) < 3
        assert not is_closed(socks[0])
        assert is_closed(socks[1]), "the connection idle the longest should have made room"
        assert n_open(socks) == 15
        varnishadm_ping(sg)
        assert not is_closed(socks[0]) and n_open(socks) >= 14
    finally:
        close_all(socks)


# -- 11: bans whose regex cannot be evaluated ---------------------------------------------

# (a|aa)+ on 60 a's explores ~10^12 paths: far past PCRE2's match limit (10^7 by
# default, the one surogat uses) before the second alternative, which matches
# these URLs, is ever tried.
BOMB_RE = r"^/(a|aa)+$|\.css$"
BOMB_URLS = ["/" + "a" * 60 + ".css", "/" + "a" * 61 + ".css", "/" + "a" * 62 + ".css"]


def fill(sg, origin, paths):
    for p in paths:
        origin.route(p, body=p.encode(), headers={"Cache-Control": "max-age=600"})
        r = sg.get(p)
        assert r.status == 200 and forwarded(r.header("Cache-Status"), stored=True), r
        assert is_hit(sg.get(p)), p


def ban_log_lines(sg):
    return [ln for ln in sg.log_path.read_text(errors="replace").splitlines()
            if "match limit" in ln]


def test_ban_regex_match_limit_at_lookup(origin, surogat):
    sg = surogat(params={"ban_lurker_sleep": "0"})
    fill(sg, origin, BOMB_URLS + ["/keep.html"])
    p = sg.ctl("ban", "req.url ~ " + BOMB_RE)
    assert p.returncode == 0, p.stderr
    for u in BOMB_URLS:
        r = sg.get(u)
        assert r.status == 200 and not is_hit(r), "banned object still served: %r" % r
        assert origin.hits(u) == 2
    assert is_hit(sg.get("/keep.html"))
    st = sg.stats()
    assert st["bans_regex_errors"] == 3 and st["bans_lookup_killed"] == 3, st
    assert len(ban_log_lines(sg)) == 1, ban_log_lines(sg)


def test_ban_regex_match_limit_in_lurker(origin, surogat):
    sg = surogat(params={"ban_lurker_sleep": "1ms"})
    fill(sg, origin, BOMB_URLS + ["/keep.html"])
    assert sg.stat("n_object") == 4
    p = sg.ctl("ban", "req.url ~ " + BOMB_RE)
    assert p.returncode == 0, p.stderr
    sg.wait_stat("bans_lurker_killed", 3, timeout=10)
    wait_until(lambda: sg.stat("n_object") == 1, 5, "the banned objects to leave")
    for u in BOMB_URLS:
        assert not is_hit(sg.get(u))
    assert is_hit(sg.get("/keep.html"))
    assert sg.stat("bans_regex_errors") == 3
    assert len(ban_log_lines(sg)) == 1, ban_log_lines(sg)


def test_ban_negated_regex_match_limit_invalidates(origin, surogat):
    """!~ with a regex that cannot be evaluated: the object goes too (a ban
    errs on the side of invalidating)."""
    sg = surogat(params={"ban_lurker_sleep": "0"})
    fill(sg, origin, BOMB_URLS[:1])
    assert sg.ctl("ban", "req.url !~ " + BOMB_RE).returncode == 0
    assert not is_hit(sg.get(BOMB_URLS[0]))
    assert sg.stat("bans_regex_errors") == 1


# -- 12: decompression bombs ----------------------------------------------------------


@functools.lru_cache(maxsize=None)
def zero_bomb():
    """1 GiB of zeros as one gzip stream of about 1 MiB (1029:1)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(8 << 20)
    return b"".join([c.compress(chunk) for _ in range(128)] + [c.flush()])


@functools.lru_cache(maxsize=None)
def size_bomb():
    """32 MiB that compress only 37:1 (zeros and random bytes): under the ratio
    bound, over a 10m gunzip_max_size."""
    rnd = random.Random(5)
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    out = [c.compress(bytes(4000) + rnd.randbytes(96)) for _ in range((32 << 20) // 4096)]
    return b"".join(out + [c.flush()])


BOMBS = {"ratio": zero_bomb, "size": size_bomb}
GZ = {"Accept-Encoding": "gzip"}
BOMB_LIMITS = {"gunzip_max_size": "10m"}


def get_capped(port, path, headers, cap):
    """GET path on a new connection, reading at most cap bytes: (status, headers
    dict, body bytes, complete).  complete: the chunked or sized body ended."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    req = "GET %s HTTP/1.1\r\nHost: surogat.test\r\nConnection: close\r\n" % path
    for k, v in (headers or {}).items():
        req += "%s: %s\r\n" % (k, v)
    s.sendall((req + "\r\n").encode())
    buf = bytearray()
    deadline = time.monotonic() + 30
    try:
        while len(buf) < cap and time.monotonic() < deadline:
            try:
                d = s.recv(1 << 20)
            except (ConnectionResetError, socket.timeout):
                break
            if not d:
                break
            buf += d
    finally:
        s.close()
    assert len(buf) < cap, "more than %d bytes came: the bomb went off" % cap
    head, sep, rest = bytes(buf).partition(b"\r\n\r\n")
    assert sep, "no response head: %r" % buf[:200]
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if hdrs.get("transfer-encoding") == "chunked":
        body, complete = bytearray(), False
        while True:
            nl = rest.find(b"\r\n")
            if nl < 0:
                break
            size = int(rest[:nl].split(b";")[0], 16)
            if size == 0:
                complete = rest[nl + 2:].startswith(b"\r\n")
                break
            if len(rest) < nl + 2 + size + 2:
                body += rest[nl + 2:]
                break
            body += rest[nl + 2:nl + 2 + size]
            rest = rest[nl + 2 + size + 2:]
        return status, hdrs, bytes(body), complete
    n = int(hdrs.get("content-length", "-1"))
    return status, hdrs, rest, n >= 0 and len(rest) == n


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_gzip_bomb_from_backend_refused(origin, surogat, kind):
    """The fetch checks a backend's gzip body by decoding it: a bomb fails the
    fetch (502, or a cut connection once the head is out) and is not stored."""
    bomb = BOMBS[kind]()
    origin.route("/bomb", body=bomb, headers={"Content-Type": "text/html",
                                              "Content-Encoding": "gzip",
                                              "Cache-Control": "max-age=600"})
    sg = surogat(params=BOMB_LIMITS)
    for client in (GZ, {}, GZ):
        status, _, body, complete = get_capped(sg.port, "/bomb", client, 12 << 20)
        assert status == 502 or not complete, (client, status, len(body))
    assert origin.hits("/bomb") == 3, "the bomb was stored"
    st = sg.stats()
    assert st["cache_stored"] == 0 and st["gunzip_bombs"] == 3, st
    log = sg.log_path.read_text(errors="replace")
    assert len(re.findall(r"gzip.*/bomb.*gunzip_max_", log)) == 3, log[-2000:]


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_gzip_bomb_in_cache_dropped_at_delivery(origin, surogat, kind):
    """An object stored without the check (http_gzip_support off: stored as the
    backend sent it) is gunzipped for a client without gzip: past the bound
    the delivery is cut, and the object is removed, counted and logged once."""
    bomb = BOMBS[kind]()
    origin.route("/bomb", body=bomb, headers={"Content-Type": "text/html",
                                              "Content-Encoding": "gzip",
                                              "Cache-Control": "max-age=600"})
    sg = surogat(params=dict(BOMB_LIMITS, http_gzip_support="off"))
    status, hdrs, body, complete = get_capped(sg.port, "/bomb", GZ, 4 << 20)
    assert status == 200 and complete and body == bomb, (status, hdrs, len(body))
    assert sg.stat("cache_stored") == 1
    status, hdrs, body, complete = get_capped(sg.port, "/bomb", {}, 12 << 20)
    assert status == 200 and "content-encoding" not in hdrs, hdrs
    assert not complete and len(body) <= 10 << 20, (complete, len(body))
    assert body.count(0) == len(body) or kind == "size"
    st = sg.stats()
    assert st["gunzip_bombs"] == 1 and st["n_object"] == 0, st
    # Gone: the next request goes to the backend again.
    status, _, body, complete = get_capped(sg.port, "/bomb", GZ, 4 << 20)
    assert status == 200 and complete and origin.hits("/bomb") == 2
    log = sg.log_path.read_text(errors="replace")
    assert len(re.findall(r"gzip.*/bomb.*gunzip_max_", log)) == 1, log[-2000:]


def test_gzip_within_bounds_still_served(origin, surogat):
    """Ordinary gzip bodies, and a highly compressible one under the ratio, are
    unaffected: stored, and gunzipped whole for clients without gzip."""
    body = b"<p>" + b"x" * 300 + b"</p>\n"
    body = body * 3000  # ~900 KB, compresses about 100:1
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    gz = gz.compress(body) + gz.flush()
    origin.route("/ok", body=gz, headers={"Content-Type": "text/html", "Content-Encoding": "gzip",
                                          "Cache-Control": "max-age=600"})
    sg = surogat(params={"gunzip_max_size": "1m"})
    status, _, got, complete = get_capped(sg.port, "/ok", {}, 4 << 20)
    assert status == 200 and complete and got == body
    status, _, got, complete = get_capped(sg.port, "/ok", {}, 4 << 20)
    assert status == 200 and complete and got == body
    assert origin.hits("/ok") == 1 and sg.stat("gunzip_bombs") == 0


# -- 14: CDN-Cache-Control and Surrogate-Control ------------------------------------------


def twice(sg, origin, path, headers):
    origin.route(path, body=b"body of " + path.encode(), headers=headers)
    r1 = sg.get(path)
    r2 = sg.get(path)
    assert r1.status == 200 and r2.status == 200
    return r1, r2


@pytest.mark.parametrize("cdn", [
    'max-age="60"',          # a String, not an Integer
    "max-age=60, ,",         # an empty member: not a Dictionary
    "max-age=60,",           # a trailing comma
    "Max-Age=60",            # keys are lower case
    "max-age=60.0",          # a Decimal
    "max-age=-1",            # out of range
    "no-store=?0, max-age=60",  # a flag that is not true
    "max-age=(60)",          # an Inner List
    "max-age=60 s-maxage=5",  # no comma between members
    "public=1, max-age=60",  # a flag with an Integer
    'no-cache=set-cookie, max-age=60',  # a Token where a String belongs
])
def test_invalid_cdn_cache_control_ignored(origin, surogat, cdn):
    sg = surogat()
    r1, r2 = twice(sg, origin, "/inv", {"CDN-Cache-Control": cdn, "Cache-Control": "no-store"})
    assert origin.hits("/inv") == 2, "an invalid CDN-Cache-Control was obeyed: %r" % cdn
    assert not is_hit(r2)
    # Ignored by us, forwarded all the same: it is for the CDN layers further on too.
    assert r1.header("CDN-Cache-Control") == cdn


def test_invalid_cdn_cache_control_falls_back_to_max_age_zero(origin, surogat):
    sg = surogat()
    twice(sg, origin, "/z", {"CDN-Cache-Control": 'max-age="600"', "Cache-Control": "max-age=0"})
    assert origin.hits("/z") == 2


@pytest.mark.parametrize("cdn", [
    "max-age=60",
    "max-age=60;x",               # parameters are ignored
    "max-age=60, x-ext=(a b);q=1, y=:aGk=:, z=?0, w=1.5, v=\"s\"",  # unknown: any type
    "public, max-age=60",
    "max-age=1, max-age=60",      # the last member of a key wins
    'private="x-secret", max-age=60',
])
def test_valid_cdn_cache_control_used_and_forwarded(origin, surogat, cdn):
    sg = surogat()
    r1, r2 = twice(sg, origin, "/v", {"CDN-Cache-Control": cdn, "Cache-Control": "no-store"})
    assert origin.hits("/v") == 1, "a valid CDN-Cache-Control was ignored: %r" % cdn
    assert is_hit(r2), r2
    assert r1.header("CDN-Cache-Control") == cdn and r2.header("CDN-Cache-Control") == cdn
    assert r1.header("Cache-Control") == "no-store"


def test_cdn_cache_control_no_store_wins_over_cache_control(origin, surogat):
    sg = surogat()
    r1, _ = twice(sg, origin, "/ns", {"CDN-Cache-Control": "no-store",
                                      "Cache-Control": "max-age=600"})
    assert origin.hits("/ns") == 2 and r1.header("CDN-Cache-Control") == "no-store"


def test_surrogate_control_consumed(origin, surogat):
    sg = surogat()
    r1, r2 = twice(sg, origin, "/s", {"Surrogate-Control": 'max-age=60+30, content="ESI/1.0"',
                                      "Cache-Control": "no-store"})
    assert origin.hits("/s") == 1 and is_hit(r2)
    assert not r1.has("Surrogate-Control") and not r2.has("Surrogate-Control")


def test_invalid_cdn_falls_back_to_surrogate_control(origin, surogat):
    sg = surogat()
    r1, r2 = twice(sg, origin, "/f", {"CDN-Cache-Control": 'max-age="0"',
                                      "Surrogate-Control": "max-age=60",
                                      "Cache-Control": "no-store"})
    assert origin.hits("/f") == 1 and is_hit(r2)
    assert r1.header("CDN-Cache-Control") == 'max-age="0"' and not r1.has("Surrogate-Control")


def test_cdn_cache_control_forwarded_on_pass(origin, surogat):
    sg = surogat()
    origin.route("/p", body=b"p", headers={"CDN-Cache-Control": "max-age=60",
                                           "Surrogate-Control": "max-age=60"})
    r = sg.request("POST", "/p", body=b"x")
    assert r.status == 200 and r.header("CDN-Cache-Control") == "max-age=60"
    assert not r.has("Surrogate-Control")
