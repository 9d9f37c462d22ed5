"""SIGHUP reloads under load: client threads (keep-alive and a new
connection per request; hits, misses and passes) run while the policy is
reloaded back and forth between two scripts, and once to a script that
does not compile.  No request may fail, every response is stamped by
exactly one script from its recv hook to its deliver hook, requests made
after the last reload see the last script, and the broken one is logged
with file:line while the running program carries on."""

import os
import signal
import threading
import time

from conftest import run_surogatd, wait_until
import httpc

# Every hook of a request must run in one program: recv notes its script in
# req.ctx (and tells the backend), deliver stamps the response with its own
# script, the one recv saw and the one backend_response saw (misses and passes).
SCRIPT = """\
local ME = "{me}"

function recv(req)
    req.ctx.recv = ME
    req.http["X-Recv-Script"] = ME
    if req.url:sub(1, 6) == "/pass/" then
        return "pass"
    end
    return "hash"
end

function backend_response(bereq, beresp)
    beresp.http["X-Fetch-Script"] = ME
end

function deliver(req, resp)
    resp.http["X-Script"] = ME
    resp.http["X-Recv-Script"] = tostring(req.ctx.recv)
    resp.http["X-Only-" .. ME] = "1"
end
"""
BROKEN = "function recv(req)\n    return \"pass\"\n\nfunction deliver(req, resp)\nend\n"
BROKEN_LINE = 4  # where Lua finds the second function inside the first
SCRIPTS = ("A", "B")
RELOADS = 8  # good reloads, alternating; the broken one comes after the fourth
DURATION = 4.0  # seconds of load
HITS = ["/hit/%d" % i for i in range(8)]


def install(path, text):
    """Replace the script at once: the daemon never reads a half-written file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Load:
    """Client threads; each records (t_start, t_end, path, outcome, mix) per
    request, outcome being the script that stamped the response or an error
    string, mix None or how the request's hooks ran in two programs."""

    def __init__(self, sg, keepalive=3, fresh=2):
        self.sg = sg
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results = []
        self.seq = 0
        self.threads = [threading.Thread(target=self.run, args=(True, i), daemon=True)
                        for i in range(keepalive)]
        self.threads += [threading.Thread(target=self.run, args=(False, i), daemon=True)
                         for i in range(fresh)]

    def next_path(self, n):
        kind = n % 4
        if kind in (0, 1):
            return HITS[n % len(HITS)]
        with self.lock:
            self.seq += 1
            seq = self.seq
        return ("/miss/%d" if kind == 2 else "/pass/%d") % seq

    @staticmethod
    def check(path, r):
        """(the script that stamped response r, or why it is wrong; and
        None, or how its hooks ran in different programs)."""
        if r.status != 200:
            return "status %d" % r.status, None
        if r.body != path.encode():
            return "body %r" % r.body[:40], None
        me = r.header("X-Script")
        seen = {n.lower() for n, _ in r.headers}
        if me not in SCRIPTS or any(s != me and "x-only-" + s.lower() in seen
                                    for s in SCRIPTS):
            return "bad stamp: %r" % r.headers, None
        if r.header("X-Recv-Script") != me:
            return me, "recv ran %s, deliver %s" % (r.header("X-Recv-Script"), me)
        fetch = r.header("X-Fetch-Script")
        if not path.startswith("/hit/") and fetch != me:
            return me, "backend_response ran %s, deliver %s" % (fetch, me)
        return me, None

    def run(self, keepalive, i):
        n = i
        conn = None
        while not self.stop.is_set():
            path = self.next_path(n)
            n += 1
            t0 = time.monotonic()
            try:
                if keepalive:
                    if conn is None:
                        conn = self.sg.conn(timeout=10)
                    conn.request("GET", path)
                    r = conn.read_response("GET")
                    if r.header("Connection") == "close":
                        conn.close()
                        conn = None
                else:
                    r = self.sg.get(path, timeout=10)
                out, mix = self.check(path, r)
            except Exception as e:  # noqa: BLE001 -- every failure is a finding
                out, mix = "error: %r" % e, None
                if conn is not None:
                    conn.close()
                    conn = None
            with self.lock:
                self.results.append((t0, time.monotonic(), path, out, mix))
        if conn is not None:
            conn.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        for t in self.threads:
            t.join(15)
        assert not any(t.is_alive() for t in self.threads), "a client thread hangs"


def reload_under_load(origin, surogat, tmp_path):
    """Run the load and the reloads; (sg, results, marks, policy path)."""
    # every path answers its own name, cacheable
    origin.default.body = lambda req: req.path.encode()
    origin.default.headers = [("Cache-Control", "max-age=60")]
    p = tmp_path / "policy.lua"
    install(p, SCRIPT.format(me="A"))
    sg = surogat(args=["-f", str(p)])
    for path in HITS:
        r = sg.get(path)
        assert r.status == 200 and r.header("X-Script") == "A", r

    errors_logged = 0
    current = "A"
    marks = []  # (t_signal, t_done, script in force from t_done to the next t_signal)
    with Load(sg) as load:
        time.sleep(0.5)
        for k in range(RELOADS):
            if k == RELOADS // 2:
                install(p, BROKEN)
                t_sig = time.monotonic()
                sg.signal(signal.SIGHUP)
                errors_logged += 1
                wait_until(lambda: sg.log_tail(400).count("reload: failed")
                           == errors_logged, 10, "the broken script refused")
                marks.append((t_sig, time.monotonic(), current))
                time.sleep(DURATION / (RELOADS + 1))
            current = SCRIPTS[(k + 1) % 2]
            install(p, SCRIPT.format(me=current))
            t_sig = time.monotonic()
            sg.signal(signal.SIGHUP)
            wait_until(lambda: sg.stat("policy_reload") == k + 1, 10, "reload %d" % (k + 1))
            marks.append((t_sig, time.monotonic(), current))
            time.sleep(DURATION / (RELOADS + 1))
    return sg, load.results, marks, p


def test_reload_under_load(origin, surogat, tmp_path):
    sg, res, marks, p = reload_under_load(origin, surogat, tmp_path)
    _, t_last, last = marks[-1]

    bad = [x for x in res if x[3] not in SCRIPTS]
    assert not bad, "%d of %d requests failed, e.g. %s" % (len(bad), len(res), bad[:5])
    kinds = {k: sum(1 for x in res if x[2].startswith("/%s/" % k)) for k in
             ("hit", "miss", "pass")}
    assert all(v >= 20 for v in kinds.values()), kinds
    assert {x[3] for x in res} == set(SCRIPTS)
    # each window between two reloads: what started after one reload was done
    # and ended before the next signal ran the script that reload installed
    for (_, t0, script), (t1, _, _) in zip(marks, marks[1:] + [(float("inf"), 0, None)]):
        inside = [x for x in res if x[0] > t0 and x[1] < t1]
        wrong = [x for x in inside if x[3] != script]
        assert not wrong, "after a reload to %s: %s" % (script, wrong[:5])
    after = [x for x in res if x[0] > t_last]
    assert len(after) >= 10 and all(x[3] == last for x in after), after[:5]

    # the broken script: refused with its file and line, the old program ran on
    assert "policy.lua:%d:" % BROKEN_LINE in sg.log_tail(400), sg.log_tail(40)
    assert sg.stat("policy_reload") == RELOADS
    for path in HITS + ["/pass/end", "/miss/end"]:
        r = sg.get(path)
        assert Load.check(path, r) == (last, None), (path, r)
    assert sg.alive()

    # -C says the same of the same files
    good = tmp_path / "good.lua"
    good.write_text(SCRIPT.format(me="A"))
    r = run_surogatd(["-C", "-f", str(good)])
    assert r.returncode == 0 and "good.lua: ok" in r.stdout, r
    install(p, BROKEN)
    r = run_surogatd(["-C", "-f", str(p)])
    assert r.returncode == 2 and "policy.lua:%d:" % BROKEN_LINE in r.stderr, r.stderr


def test_reload_a_request_runs_one_program(origin, surogat, tmp_path):
    """Each request's hooks, recv to deliver, run in the program that was
    current when it began (surogat-lua(7): a worker picks a new script up
    between two requests): req.ctx survives, and a request is never
    decided by one script and delivered by another."""
    _, res, _, _ = reload_under_load(origin, surogat, tmp_path)
    assert not [x for x in res if x[3] not in SCRIPTS], "requests failed"
    mixed = [x for x in res if x[4] is not None]
    assert not mixed, "%d of %d requests ran two programs, e.g. %s" % (
        len(mixed), len(res), mixed[:5])
