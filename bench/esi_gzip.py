#!/usr/bin/python3
"""
esi_gzip -- what storing an ESI page gzip in segments costs in size.

An ESI page stored gzip is compressed with a zlib full flush at every
boundary between literal bytes and ESI markup (src/esi/esi_gz.c), so that a
delivery can send each literal on its own and stitch includes between them
(gz_stitch) without recompressing.  Each flush ends a deflate block (an
empty stored block, 4-5 bytes) and empties the dictionary, so the literal
after it cannot refer to text before it: the cost grows with the number of
ESI elements.  This compresses pages with N <esi:include/> tags spread over
them, the same way (same zlib, same level, a full flush at each boundary),
and prints the stored size against one plain gzip of the same page, and the
size a client receives (the literals stitched) against a plain gzip of the
page as assembled.

Pages: --page FILE (repeatable; real HTML), else the 100 KiB page of
bench/gzip.py.  Python 3 stdlib only; runs in a second.
"""

import argparse
import importlib.util
import os
import re
import sys
import zlib

BENCH = os.path.dirname(os.path.abspath(__file__))


def page_bytes(size):
    """The 100 KiB page of bench/gzip.py, which cannot be imported as `gzip` (the stdlib's)."""
    spec = importlib.util.spec_from_file_location("bench_gzip", os.path.join(BENCH, "gzip.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.page_bytes(size)


def with_includes(page, n):
    """page with n include tags at the starts of lines spread evenly over it."""
    if n == 0:
        return page, []
    lines = page.split(b"\n")
    step = max(1, len(lines) // (n + 1))
    out, cuts, pos = [], [], 0
    for i, line in enumerate(lines):
        if i > 0 and i % step == 0 and len(cuts) < 2 * n:
            tag = b'<esi:include src="/fragment/%d"/>' % (len(cuts) // 2)
            cuts += [pos, pos + len(tag)]
            out.append(tag)
            pos += len(tag)
        out.append(line + b"\n")
        pos += len(line) + 1
    return b"".join(out), cuts


def gzip_plain(data, level):
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return len(c.compress(data) + c.flush())


def gzip_segments(data, cuts, level):
    """(stored size, bytes of the literal segments): a full flush at each cut."""
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    total, lit, prev = 0, 0, 0
    for i, cut in enumerate(cuts + [len(data)]):
        seg = c.compress(data[prev:cut]) + c.flush(zlib.Z_FULL_FLUSH)
        total += len(seg)
        if i % 2 == 0:  # literal, markup, literal ...
            lit += len(seg)
        prev = cut
    total += len(c.flush())
    return total, lit


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--page", action="append", default=[], help="an HTML file (repeatable)")
    ap.add_argument("--level", type=int, default=6, help="gzip_level")
    ap.add_argument("--includes", default="1,5,20,100")
    args = ap.parse_args()
    pages = [(p, open(p, "rb").read()) for p in args.page] or [("bench 100 KiB page",
                                                                 page_bytes(100 * 1024))]
    counts = [int(x) for x in args.includes.split(",")]
    print(f"# gzip level {args.level}; stored: the page with its ESI tags, segmented vs one "
          "stream; sent: the literals stitched (10 B header, 2 B last block, 8 B trailer) "
          "vs one gzip of the assembled page without fragments")
    print()
    print("| page | bytes | includes | gzip | stored in segments | overhead | sent stitched | "
          "gzip of it | overhead |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, page in pages:
        for n in counts:
            esi, cuts = with_includes(page, n)
            plain = gzip_plain(esi, args.level)
            stored, lit = gzip_segments(esi, cuts, args.level)
            assembled = re.sub(rb"<esi:include[^>]*/>", b"", esi)
            sent = 10 + lit + 2 + 8
            ref = gzip_plain(assembled, args.level)
            print(f"| {os.path.basename(name)} | {len(esi)} | {n} | {plain} | {stored} | "
                  f"{100.0 * (stored - plain) / plain:+.1f}% | {sent} | {ref} | "
                  f"{100.0 * (sent - ref) / ref:+.1f}% |")


if __name__ == "__main__":
    sys.exit(main())
