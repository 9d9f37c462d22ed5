#!/usr/bin/python3
"""Write the seed corpus of fuzz_h2 (tests/fuzz/corpus/h2/): each file is one byte
that chooses how the input is cut into reads (odd: whole), then the frames a client
sends after the connection preface.  Needs python3-h2 (hpack, hyperframe).

The committed corpus is kept small: what fuzzing adds is minimised now and then to
the fewest files that still cover every edge the whole covered (libFuzzer's
-merge=1 with -use_counters=0, then a greedy cover of each file's own edges), so
seeds that cover nothing of their own are dropped from it; rerunning this adds
them back, harmlessly."""
import os
import sys

import hpack
from hyperframe import frame as hf

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "h2")


def ser(f, *flags):
    for fl in flags:
        f.flags.add(fl)
    return f.serialize()


CODES = {"HEADER_TABLE_SIZE": 1, "ENABLE_PUSH": 2, "MAX_CONCURRENT_STREAMS": 3,
         "INITIAL_WINDOW_SIZE": 4, "MAX_FRAME_SIZE": 5, "MAX_HEADER_LIST_SIZE": 6}


def settings(**kv):
    f = hf.SettingsFrame(0)
    f.settings.update({CODES[k]: v for k, v in kv.items()})
    return f.serialize()


def headers(sid, block, *flags):
    f = hf.HeadersFrame(sid)
    f.data = block
    return ser(f, *flags)


def data(sid, payload, *flags, pad=0):
    f = hf.DataFrame(sid)
    f.data = payload
    if pad:
        f.pad_length = pad
        f.flags.add("PADDED")
    return ser(f, *flags)


def req(enc, path="/", method="GET", extra=()):
    return enc.encode([(":method", method), (":scheme", "https"), (":authority", "a.test"),
                       (":path", path)] + list(extra))


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    e = hpack.Encoder()
    seeds["get"] = settings() + headers(1, req(e, "/x"), "END_HEADERS", "END_STREAM")
    e = hpack.Encoder()
    seeds["many"] = settings(MAX_CONCURRENT_STREAMS=100) + b"".join(
        headers(i, req(e, "/p%d" % i), "END_HEADERS", "END_STREAM") for i in range(1, 40, 2))
    e = hpack.Encoder()
    seeds["post"] = settings(INITIAL_WINDOW_SIZE=1 << 20) + \
        headers(1, req(e, "/post", "POST", [("content-length", "11")]), "END_HEADERS") + \
        data(1, b"hello ") + data(1, b"world", "END_STREAM")
    e = hpack.Encoder()
    seeds["chunked_trailers"] = settings() + \
        headers(1, req(e, "/up", "PUT"), "END_HEADERS") + data(1, b"abc", pad=7) + \
        headers(1, e.encode([("x-sum", "1")]), "END_HEADERS", "END_STREAM")
    e = hpack.Encoder()
    blk = req(e, "/c", extra=[("x-%d" % i, "v" * 50) for i in range(20)])
    seeds["continuation"] = settings() + headers(1, blk[:100], "END_STREAM") + \
        ser(hf.ContinuationFrame(1, data=blk[100:600])) + \
        ser(hf.ContinuationFrame(1, data=blk[600:]), "END_HEADERS")
    e = hpack.Encoder()
    f = hf.RstStreamFrame(1)
    f.error_code = 8
    w = hf.WindowUpdateFrame(0)
    w.window_increment = 1000
    p = hf.PriorityFrame(3)
    p.depends_on = 1
    g = hf.GoAwayFrame(0)
    seeds["control"] = settings(HEADER_TABLE_SIZE=0, ENABLE_PUSH=0) + \
        ser(hf.PingFrame(0, opaque_data=b"12345678")) + w.serialize() + p.serialize() + \
        headers(1, req(e, "/r"), "END_HEADERS") + f.serialize() + \
        headers(3, req(e, "/s"), "END_HEADERS", "END_STREAM") + g.serialize()
    e = hpack.Encoder()
    seeds["bad"] = settings() + headers(1, e.encode([(":path", "/"), (":method", "GET"),
                                                     ("Upper", "x"), ("connection", "x")]),
                                        "END_HEADERS", "END_STREAM") + \
        headers(3, req(e, "/h", "HEAD", [("host", "b.test")]), "END_HEADERS", "END_STREAM")
    e = hpack.Encoder()
    seeds["window0"] = settings(INITIAL_WINDOW_SIZE=0) + \
        headers(1, req(e, "/zzz"), "END_HEADERS", "END_STREAM")
    for name, body in seeds.items():
        for seed in (1, 2):
            with open(os.path.join(OUT, "%s_%d" % (name, seed)), "wb") as fh:
                fh.write(bytes([seed]) + body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
