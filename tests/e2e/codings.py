"""Content codings for the e2e tests: pages with a real page's redundancy,
and bodies decoded strictly with Python's zlib, brotli and zstandard."""

import random
import zlib

import brotli
import zstandard


def html_page(size, seed=1):
    """HTML with the redundancy of a real page: markup repeats, words vary."""
    rnd = random.Random(seed)
    words = ["cache", "proxy", "origin", "object", "header", "client", "stale", "fresh",
             "vary", "range", "store", "lorem", "ipsum", "dolor", "amet", "surogat"]
    out = ["<!DOCTYPE html>\n<html><head><title>t</title></head><body>\n"]
    n = len(out[0])
    while n < size:
        para = " ".join(rnd.choice(words) for _ in range(rnd.randrange(8, 40)))
        s = '<div class="item"><a href="/p/%d">%s</a></div>\n' % (rnd.randrange(10000), para)
        out.append(s)
        n += len(s)
    return "".join(out).encode()[:size - 15] + b"</body></html>\n"


def decode(coding, body):
    if coding is None:
        return body
    if coding == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(body) + d.flush()
        assert d.eof and not d.unused_data
        return out
    if coding == "br":
        return brotli.decompress(body)
    if coding == "zstd":
        return zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 26)
    raise AssertionError("unknown coding %r" % coding)
