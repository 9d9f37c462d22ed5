"""Issue 15 item 3: a pass of a policy script waits for its backend's answer
without its worker, as a pass without a script does.  What the script keeps
for the request -- req.ctx, the globals its hooks set, on the client side and
in backend_fetch -- goes with it to whichever worker takes the answer; a
request whose state cannot move (a function in req.ctx) waits on its worker,
counted, and is answered the same."""

import threading

import httpc
from r12_waitlist_test import POLICY_UNCARRIABLE  # a function in req.ctx

PASS = {"Cookie": "sid=1"}  # credentials: the built-in recv passes

POLICY_CTX = """
function recv(req)
  req.ctx.who = req.http["x-who"]
  req.ctx.t = { n = 41, list = { 1, 2, 3 } }
  marker = "g-" .. (req.http["x-who"] or "")
end

function backend_fetch(bereq)
  bereq.http["x-marker"] = marker
  fetched = "bf-" .. marker
end

function backend_response(bereq, beresp)
  beresp.http["x-fetched"] = fetched
end

function deliver(req, resp)
  resp.http["x-ctx"] = string.format("%s %d %d %s", req.ctx.who, req.ctx.t.n + 1,
                                     #req.ctx.t.list, marker)
end
"""



def _get(port, path, headers, out, key):
    try:
        out[key] = httpc.fetch(port, path=path, headers=headers, timeout=20)
    except Exception as e:  # noqa: BLE001 -- reported by the assertion below
        out[key] = e


def test_policy_pass_waits_without_its_worker(origin, surogat, tmp_path):
    """Twelve slow passes at once on four workers, a script loaded: all wait
    in the waiter, and each comes back with its own state, set before the
    wait and read after it, perhaps on another worker."""
    pol = tmp_path / "ctx.lua"
    pol.write_text(POLICY_CTX)
    origin.route("/slow", body=b"answer", delay=0.5)
    sg = surogat(args=["-f", str(pol)],
                 params={"thread_pools": "1", "thread_pool_min": "4", "thread_pool_max": "4"})
    who = ["c%d" % i for i in range(12)]
    out = {}
    threads = [threading.Thread(target=_get, args=(sg.port, "/slow",
                                                   dict(PASS, **{"X-Who": w}), out, w))
               for w in who]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for w in who:
        r = out[w]
        assert not isinstance(r, Exception), (w, r)
        assert r.status == 200 and r.body == b"answer", (w, r)
        assert r.header("x-ctx") == "%s 42 3 g-%s" % (w, w), (w, r.headers)
        assert r.header("x-fetched") == "bf-g-%s" % w, (w, r.headers)
    st = sg.stats()
    assert st["fetch_waited"] == len(who)
    assert st["fetch_wait_on_thread"] == 0
    # The backend saw each request's own global, set in recv.
    seen = sorted(r.header("x-marker") for r in origin.reqs("/slow"))
    assert seen == sorted("g-" + w for w in who)


def test_uncarriable_policy_state_waits_on_its_worker(origin, surogat, tmp_path):
    """A function in req.ctx cannot leave the worker: the pass waits on it,
    is counted, and gets its answer and its state."""
    pol = tmp_path / "fn.lua"
    pol.write_text(POLICY_UNCARRIABLE)
    origin.route("/f", body=b"page", delay=0.2)
    sg = surogat(args=["-f", str(pol)])
    r = sg.get("/f", headers=PASS, timeout=20)
    assert r.status == 200 and r.body == b"page", r
    assert r.header("x-ctx") == "kept", r.headers
    st = sg.stats()
    assert st["fetch_wait_on_thread"] == 1
    assert st["fetch_waited"] == 0


def test_policy_pass_504_and_502_after_the_wait(origin, surogat, tmp_path):
    """The failures of a waited pass end as without a script: 504 when the
    first byte timeout passes, 502 when the backend closes without a byte."""
    pol = tmp_path / "ctx.lua"
    pol.write_text(POLICY_CTX)
    origin.route("/hang", hang=True)

    def close_after(sock, req, stop_ev):
        stop_ev.wait(0.2)
        return False

    origin.route("/gone", script=close_after)
    sg = surogat(args=["-f", str(pol)], params={"backend_first_byte_timeout": "1s"})
    assert sg.get("/hang", headers=dict(PASS, **{"X-Who": "a"}), timeout=20).status == 504
    assert sg.get("/gone", headers=dict(PASS, **{"X-Who": "b"}), timeout=20).status == 502
    assert sg.stat("fetch_waited") >= 2
    assert sg.stat("fetch_wait_on_thread") == 0
    r = sg.get("/fine", headers=dict(PASS, **{"X-Who": "c"}))
    assert r.status == 200 and r.header("x-ctx") == "c 42 3 g-c", r.headers
