#!/usr/bin/python3
"""
heapbylib -- a jemalloc heap profile (MALLOC_CONF=prof:true,lg_prof_sample:0,
dumped with mallctl("prof.dump")) split by the library that asked for each
live block: nghttp2 when libnghttp2 is on the allocation's stack, OpenSSL
when libssl or libcrypto is (and not nghttp2), surogatd otherwise.  With
--base PROFILE, what the second profile holds more than the first, and with
-n N also per connection.  Needs no symbols: the profile's own map of the
process names each address's library.  Python 3 stdlib only.

  heapbylib.py [--base BEFORE.heap] [-n CONNS] [--top K] AFTER.heap
"""

import argparse
import bisect
import collections
import re


def load(path):
    maps, stacks, cur = [], [], None
    with open(path) as f:
        lines = f.read().split("\n")
    i = lines.index("MAPPED_LIBRARIES:") if "MAPPED_LIBRARIES:" in lines else len(lines)
    for ln in lines[i + 1:]:
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(\S*)", ln)
        if m:
            maps.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3)))
    for ln in lines[:i]:
        if ln.startswith("@"):
            cur = [int(a, 16) for a in ln[1:].split()]
        elif ln.startswith("  t*:") and cur is not None:
            m = re.match(r"  t\*: (\d+): (\d+)", ln)
            stacks.append((cur, int(m.group(1)), int(m.group(2))))
            cur = None
    maps.sort()
    return maps, stacks


def lib_of(maps, starts, addr):
    k = bisect.bisect_right(starts, addr) - 1
    if k >= 0 and maps[k][0] <= addr < maps[k][1]:
        return maps[k][2].rsplit("/", 1)[-1] or "?"
    return "?"


def owner(libs):
    if any(x.startswith("libnghttp2") for x in libs):
        return "nghttp2"
    if any(x.startswith(("libssl", "libcrypto")) for x in libs):
        return "OpenSSL"
    return "surogatd"


def split(path):
    maps, stacks = load(path)
    starts = [m[0] for m in maps]
    by, sites = collections.Counter(), collections.Counter()
    objs, nsites = collections.Counter(), collections.Counter()
    for st, nobj, nbytes in stacks:
        libs = [lib_of(maps, starts, a) for a in st]
        who = owner(libs)
        by[who] += nbytes
        objs[who] += nobj
        # the allocation site: the first frame in the owner's library (past the
        # allocator, libc, and surogatd's allocator for nghttp2), and the frame after it
        mine = {"nghttp2": ("libnghttp2",), "OpenSSL": ("libssl", "libcrypto")}.get(
            who, ("surogatd",))
        frames = [(a, lib) for a, lib in zip(st, libs) if lib.startswith(mine)]
        if who == "OpenSSL":  # libcrypto's CRYPTO_malloc first: name libssl's caller too
            frames = [f for f in frames if f[1].startswith("libssl")] or frames
        site = " < ".join(f"{lib.split('.so')[0]}+{a - base(maps, lib):#x}"
                          for a, lib in frames[:2]) or "?"
        sites[(who, site)] += nbytes
        nsites[(who, site)] += nobj
    return by, objs, sites, nsites


def base(maps, lib):
    return min(m[0] for m in maps if m[2].endswith(lib))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--base")
    ap.add_argument("-n", type=int, default=0, help="connections the difference is for")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    by, objs, sites, nsites = split(a.profile)
    if a.base:
        b_by, b_objs, b_sites, b_nsites = split(a.base)
        by.subtract(b_by)
        objs.subtract(b_objs)
        sites.subtract(b_sites)
        nsites.subtract(b_nsites)
    total = sum(by.values())
    for who in ("surogatd", "nghttp2", "OpenSSL"):
        per = f"  {by[who] / a.n:8.0f} B a connection, {objs[who] / a.n:5.1f} blocks" if a.n else ""
        print(f"{who:>9}: {by[who]:>12,} B{per}")
    per = f"  {total / a.n:8.0f} B a connection" if a.n else ""
    print(f"{'all':>9}: {total:>12,} B{per}")
    print("\nlargest allocation sites (the owner's first two frames, library+offset):")
    for (who, site), n in sites.most_common(a.top):
        per = f"  {n / a.n:8.0f} B {nsites[(who, site)] / a.n:5.2f} blocks a conn" if a.n else ""
        print(f"  {who:>9} {site:<48} {n:>12,} B{per}")


if __name__ == "__main__":
    main()
